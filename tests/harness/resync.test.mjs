// resync.test.mjs - issue 24 item 1's regression test: one Claude Code on its default model
// (max_tokens 128000, which the provider holds from a call's start to its end) runs a
// scripted three-turn tool task (Read → Read → a text answer, sluice-emu's --script:
// lib.mjs writeToolScript) straight to the emulator and through a real sluiced proxying
// to it, with the same limits on both (400k input / 200k output tokens a minute,
// cold_start: full). Before the fix every call after the first queued ~30 s behind the
// refund its own headers took back (66 s against 6 s here); now the proxied session must
// take at most 1.10 x the direct one. Robust on a loaded machine: one emulator for both,
// the runs interleaved (direct, proxied, direct, proxied, ...), and the fastest of each
// compared, so one load spike does not decide. Bounded: about 40 s.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KEY, agentToken, claudeToolSession, requireInstalled, startEmuWith, startSluiced, tempDir,
         writeToolScript } from './lib.mjs';

requireInstalled();
const PAIRS = Number(process.env.RESYNC_PAIRS || 3);
const MARKER = 'resync-marker-5521';
const LIMITS = { input_tpm: 400000, output_tpm: 200000, rpm: 4000 };
const MAX_RATIO = 1.10;

test(`a default-model Claude Code session through sluiced takes at most ${MAX_RATIO}x the direct one`, async () => {
  const t = tempDir('resync-script');
  const emu = await startEmuWith(['--script', writeToolScript(t.dir, MARKER),
    '--input-tpm', LIMITS.input_tpm, '--output-tpm', LIMITS.output_tpm, '--rpm', LIMITS.rpm,
    '--ttft-ms', '200', '--tokens-per-s', '200', '--latency-spread', '0'].map(String));
  const sluiced = await startSluiced(emu.origin, ['cc'], LIMITS);
  try {
    const direct = [], proxied = [];
    for (let i = 0; i < PAIRS; i++) {
      direct.push(await claudeToolSession(emu.origin, KEY, MARKER));
      proxied.push(await claudeToolSession(`${sluiced.origin}/anthropic`, agentToken('cc'), MARKER));
    }
    const best = (runs) => Math.min(...runs.map((r) => r.ms));
    const ratio = best(proxied) / best(direct);
    await new Promise((r) => setTimeout(r, 400)); // the event log is flushed every 250 ms
    const events = sluiced.events();
    const queued = events.filter((e) => e.event === 'queued').length;
    const held = [...new Set(events.filter((e) => e.event === 'granted').map((e) => e.output_tokens))];
    const stats = await emu.stats();
    console.log(`RESYNC direct ms ${JSON.stringify(direct.map((r) => r.ms))} proxied ms ` +
                `${JSON.stringify(proxied.map((r) => r.ms))} best ${best(direct)} vs ${best(proxied)}: ` +
                `ratio ${ratio.toFixed(3)}; turns ${JSON.stringify(proxied.map((r) => r.turns))}; ` +
                `output reserved per call ${JSON.stringify(held)}; queued ${queued}; emulator 429s ${stats.http_429}`);
    for (const r of [...direct, ...proxied])
      assert.ok(r.ok, `a session failed: exit ${r.run.code}: ${r.run.stderr.slice(0, 300)} ${r.run.stdout.slice(0, 300)}`);
    for (const r of proxied) assert.equal(r.turns, 3, 'the three-turn task ran');
    assert.ok(held.includes(128000), 'the default model asks max_tokens 128000');
    assert.equal(stats.http_429, 0, 'no upstream 429');
    assert.equal(queued, 0, 'no call queued behind a refund its own headers took back');
    assert.ok(ratio <= MAX_RATIO, `proxied/direct ${ratio.toFixed(3)} > ${MAX_RATIO}`);
  } finally { await sluiced.stop(); await emu.stop(); t.remove(); }
});
