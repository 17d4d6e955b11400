// fleet.test.mjs - the fleet proof with a real harness: FLEET_AGENTS (default 10) headless
// Claude Code processes (`claude -p`, claude-sonnet-4-5) started together on one key, each
// running the same scripted loop through sluice-emu's --script (Read a file → model → Bash
// `sleep 2` → model → Bash `sleep 2` → model → a text answer), with emulator limits tight
// enough that the fleet hits 429 waves when it goes straight to the emulator. Run three
// times in one test: straight to the emulator; through sluiced with the pool's defaults
// (same limits), where max_queue_wait_s (60 s) rejects what would queue longer; and
// through sluiced with max_queue_wait_s: 600, where every call waits its turn.
// Prints for both: upstream 429s, the seconds with at least 3 of them, tokens billed,
// failed runs, retried calls (calls the emulator refused, each one sent again or lost),
// and the time until the last process finished. Asserts what must hold: in the last run
// every process finishes its task with no upstream 429, and in both runs through sluiced
// every call the emulator admitted was settled with what it billed. Slow (label slow, -DSL_SLOW_TESTS=ON); every process is bounded.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, agentToken, cleanEnv, requireInstalled, runHarness, startEmuWith, startSluiced,
         tempDir } from './lib.mjs';

requireInstalled();
const AGENTS = Number(process.env.FLEET_AGENTS || 10);
const RUN_TIMEOUT_MS = 300000;
const MARKER = 'fleet-marker-7731';
const OFFLINE = { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1',
                  DISABLE_AUTOUPDATER: '1', DISABLE_ERROR_REPORTING: '1' };
/** The one key's limits, on the emulator and on sluiced's pool. Claude Code asks
 *  max_tokens 32000 with this model, which output TPM charges when a call starts: at
 *  most 4 calls in flight. */
const LIMITS = { input_tpm: 200000, output_tpm: 128000, rpm: 60 };

function script(notes) {
  return { turns: [
    { tool_calls: [{ name: 'Read', input: { file_path: notes } }], output_tokens: 60 },
    { text: 'Running the tests.', tool_calls: [{ name: 'Bash', input: { command: 'sleep 2', description: 'run the tests' } }], output_tokens: 80 },
    { text: 'Running them again.', tool_calls: [{ name: 'Bash', input: { command: 'sleep 2', description: 'rerun the tests' } }], output_tokens: 80 },
    { text: `Done: ${MARKER}.`, output_tokens: 120 },
  ] };
}

/** Polls the emulator's /stats every 250 ms until stop(); returns the 429 count per
 *  second since start (by poll time). */
function watch429(emu) {
  const perSecond = new Map();
  const started = Date.now();
  let last = null, stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const s = await emu.stats();
      if (last !== null && s.http_429 > last) {
        const sec = Math.floor((Date.now() - started) / 1000);
        perSecond.set(sec, (perSecond.get(sec) || 0) + s.http_429 - last);
      }
      last = s.http_429;
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return async () => { stopped = true; await loop; return perSecond; };
}

/** Starts AGENTS `claude -p` at once against base(i) with key(i); resolves the results. */
async function fleet(base, key, dir) {
  return Promise.all(Array.from({ length: AGENTS }, async (_, i) => {
    const t = tempDir(`fleet-${i}`);
    try {
      const env = cleanEnv(t.dir, { ...OFFLINE, ANTHROPIC_BASE_URL: base(i), ANTHROPIC_API_KEY: key(i) });
      const run = await runHarness(join(BIN, 'claude'),
        ['-p', 'Read the notes, run the tests, report.', '--output-format', 'json',
         '--model', 'claude-sonnet-4-5', '--allowedTools', 'Read,Bash'],
        { env, cwd: t.dir, timeoutMs: RUN_TIMEOUT_MS });
      let result = null;
      try { result = JSON.parse(run.stdout.trim().split('\n').pop()); } catch { /* reported below */ }
      const ok = run.code === 0 && result && !result.is_error && String(result.result).includes(MARKER);
      return { ...run, ok, result };
    } finally { t.remove(); }
  }));
}

async function measure(what, emu, base, key) {
  const started = Date.now();
  const stop = await watch429(emu);
  const runs = await fleet(base, key);
  const ms = Date.now() - started;
  const perSecond = await stop();
  const s = await emu.stats();
  const m = {
    what, agents: AGENTS, finished_s: +(ms / 1000).toFixed(1),
    failed_runs: runs.filter((r) => !r.ok).length,
    calls: s.requests, admitted: s.admitted, upstream_429: s.http_429,
    retried_calls: s.requests - s.admitted,
    seconds_with_3_or_more_429: [...perSecond.values()].filter((n) => n >= 3).length,
    tokens_billed: s.tokens.input + s.tokens.cache_creation_input + s.tokens.cache_read_input + s.tokens.output,
    tokens: s.tokens, turns: runs.map((r) => r.result?.num_turns ?? null),
  };
  console.log(`FLEET ${JSON.stringify(m)}`);
  for (const r of runs.filter((x) => !x.ok))
    console.log(`  failed run: exit ${r.code} after ${r.ms} ms: ${(r.result?.result ?? r.stderr).toString().slice(0, 300)}`);
  return { m, runs };
}

test(`${AGENTS} Claude Code processes on one key: straight to the emulator, then through sluiced`, async () => {
  const t = tempDir('fleet');
  const notes = join(t.dir, 'notes.txt');
  writeFileSync(notes, 'The tests are run with `sleep 2`.\n');
  writeFileSync(join(t.dir, 'script.json'), JSON.stringify(script(notes)));
  const emuArgs = ['--script', join(t.dir, 'script.json'), '--input-tpm', LIMITS.input_tpm,
                   '--output-tpm', LIMITS.output_tpm, '--rpm', LIMITS.rpm, '--ttft-ms', '300',
                   '--tokens-per-s', '200', '--latency-spread', '0', '--cache-breakpoints', '4'].map(String);
  try {
    const direct = await startEmuWith(emuArgs);
    try {
      await measure('direct', direct, () => direct.origin, () => 'sk-harness-test-key');
    } finally { await direct.stop(); }

    const names = Array.from({ length: AGENTS }, (_, i) => `fleet-${i}`);
    for (const [what, pool] of [['through sluice, max_queue_wait_s 60 (default)', LIMITS],
                                ['through sluice, max_queue_wait_s 600', { ...LIMITS, max_queue_wait_s: 600 }]]) {
      const emu = await startEmuWith(emuArgs);
      const sluiced = await startSluiced(emu.origin, names, pool);
      try {
        const { m, runs } = await measure(what, emu, () => `${sluiced.origin}/anthropic`, (i) => agentToken(names[i]));
        await new Promise((r) => setTimeout(r, 400)); // the event log is flushed every 250 ms
        const settled = sluiced.events().filter((e) => e.event === 'settled');
        const rejected = sluiced.events().filter((e) => e.event === 'rejected');
        const settledTokens = settled.reduce((n, e) => n + e.input_tokens + e.output_tokens, 0);
        console.log(`  sluice settled ${settled.length} leases, ${settledTokens} tokens; rejected ${rejected.length} ` +
                    `(${[...new Set(rejected.map((e) => e.reason))].join(', ')})`);
        assert.equal(settled.length, m.admitted, 'settled leases = calls the emulator admitted');
        assert.equal(settledTokens, m.tokens.input + m.tokens.cache_creation_input + m.tokens.output,
                     'settled tokens = tokens the emulator billed (cache reads are free)');
        if (pool.max_queue_wait_s) {
          assert.deepEqual(runs.filter((r) => !r.ok).map((r) => r.result?.result ?? r.stderr.slice(0, 300)), [],
                           'every run finished its task');
          assert.equal(m.upstream_429, 0, 'no upstream 429 through sluice');
        }
      } finally { await sluiced.stop(); await emu.stop(); }
    }
  } finally { t.remove(); }
});
