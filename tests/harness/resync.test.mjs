// resync.test.mjs - issue 24 item 1's regression test: one Claude Code on its default model
// (max_tokens 128000, which the provider holds from a call's start to its end) runs a
// scripted three-turn tool task (Read → Read → a text answer, sluice-emu's --script)
// straight to the emulator and through a real sluiced proxying to it, with the same
// limits on both (400k input / 200k output tokens a minute, cold_start: full). Before
// the fix every call after the first queued ~30 s behind the refund its own headers took
// back (63 s against 3 s); now the proxied session must take at most 1.10 x the direct
// one. Robust on a loaded machine: the same emulator settings, the runs interleaved
// (direct, proxied, direct, proxied, ...), and the fastest of each compared, so a load
// spike on one run does not decide. Bounded: about 30 s.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, KEY, agentToken, cleanEnv, requireInstalled, runHarness, startEmuWith, startSluiced,
         tempDir } from './lib.mjs';

requireInstalled();
const PAIRS = Number(process.env.RESYNC_PAIRS || 3);
const MARKER = 'resync-marker-5521';
const OFFLINE = { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1',
                  DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1' };
const LIMITS = { input_tpm: 400000, output_tpm: 200000, rpm: 4000 };
const MAX_RATIO = 1.10;

/** Runs one `claude -p` session against `base` with `key`; resolves {ms, ok, turns, run}. */
async function session(base, key) {
  const t = tempDir('resync');
  try {
    const env = cleanEnv(t.dir, { ...OFFLINE, ANTHROPIC_BASE_URL: base, ANTHROPIC_API_KEY: key });
    const run = await runHarness(join(BIN, 'claude'),
      ['-p', 'Read the notes twice, then report.', '--output-format', 'json', '--allowedTools', 'Read'],
      { env, cwd: t.dir, timeoutMs: 120000 });
    let result = null;
    try { result = JSON.parse(run.stdout.trim().split('\n').pop()); } catch { /* reported below */ }
    const ok = run.code === 0 && result && !result.is_error && String(result.result).includes(MARKER);
    return { ms: run.ms, ok, turns: result?.num_turns ?? null, run };
  } finally { t.remove(); }
}

test(`a default-model Claude Code session through sluiced takes at most ${MAX_RATIO}x the direct one`, async () => {
  const t = tempDir('resync-script');
  const notes = join(t.dir, 'notes.txt');
  writeFileSync(notes, 'Nothing to report yet.\n');
  writeFileSync(join(t.dir, 'script.json'), JSON.stringify({ turns: [
    { tool_calls: [{ name: 'Read', input: { file_path: notes } }], output_tokens: 40 },
    { text: 'Once more.', tool_calls: [{ name: 'Read', input: { file_path: notes } }], output_tokens: 40 },
    { text: `Done: ${MARKER}.`, output_tokens: 60 },
  ] }));
  const emu = await startEmuWith(['--script', join(t.dir, 'script.json'),
    '--input-tpm', LIMITS.input_tpm, '--output-tpm', LIMITS.output_tpm, '--rpm', LIMITS.rpm,
    '--ttft-ms', '200', '--tokens-per-s', '200', '--latency-spread', '0'].map(String));
  const sluiced = await startSluiced(emu.origin, ['cc'], LIMITS);
  try {
    const direct = [], proxied = [];
    for (let i = 0; i < PAIRS; i++) {
      direct.push(await session(emu.origin, KEY));
      proxied.push(await session(`${sluiced.origin}/anthropic`, agentToken('cc')));
    }
    const best = (runs) => Math.min(...runs.map((r) => r.ms));
    const ratio = best(proxied) / best(direct);
    await new Promise((r) => setTimeout(r, 400)); // the event log is flushed every 250 ms
    const queued = sluiced.events().filter((e) => e.event === 'queued').length;
    const stats = await emu.stats();
    console.log(`RESYNC direct ms ${JSON.stringify(direct.map((r) => r.ms))} proxied ms ` +
                `${JSON.stringify(proxied.map((r) => r.ms))} best ${best(direct)} vs ${best(proxied)}: ` +
                `ratio ${ratio.toFixed(3)}; turns ${JSON.stringify(proxied.map((r) => r.turns))}; ` +
                `queued ${queued}; emulator 429s ${stats.http_429}`);
    for (const r of [...direct, ...proxied])
      assert.ok(r.ok, `a session failed: exit ${r.run.code}: ${r.run.stderr.slice(0, 300)} ${r.run.stdout.slice(0, 300)}`);
    for (const r of proxied) assert.equal(r.turns, 3, 'the three-turn task ran');
    assert.equal(stats.http_429, 0, 'no upstream 429');
    assert.equal(queued, 0, 'no call queued behind a refund its own headers took back');
    assert.ok(ratio <= MAX_RATIO, `proxied/direct ${ratio.toFixed(3)} > ${MAX_RATIO}`);
  } finally { await sluiced.stop(); await emu.stop(); t.remove(); }
});
