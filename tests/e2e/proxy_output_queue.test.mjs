// proxy_output_queue.test.mjs - a burst of agents whose calls reserve max_tokens 8,192 of
// a 40,000 output TPM pool and answer ~200 tokens is queued through the proxy, not refused:
// the queue's ETA counts the calls ahead at the output they keep after their settles
// (docs/design.md "The queue's ETA counts what the calls ahead keep"). Counted whole, 50
// such calls made ETAs of up to 11 minutes, and the proxy refused the calls past its
// 540 s hold with a 429 whose retry-after (~9 minutes) the SDK then slept: the real fleet
// of 50 agents (bench/waste_fleet.mjs 50 3 6000) ran into its 240 s kill.
//
// Asserted: every call of the burst answered 200 (the SDK's retries off, so a refusal of
// sluiced's shows), no `rejected` event, 0 upstream 429s.
//
// Run: SLUICED=... SLUICE_EMU=... node tests/e2e/proxy_output_queue.test.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { getJson, pool, run, sdks, startEmu, startSluiced } from './proxy_harness.mjs';

const { Anthropic } = sdks();
const LIMITS = { input_tpm: 400000, output_tpm: 40000, rpm: 2000 };
const BURST = 50;

const emu = await startEmu(['--input-tpm', String(LIMITS.input_tpm), '--output-tpm',
                            String(LIMITS.output_tpm), '--rpm', String(LIMITS.rpm), '--ttft-ms', '100',
                            '--tokens-per-s', '4000', '--latency-spread', '0.2', '--output-tokens', '200',
                            '--seed', '3']);
let failed = 1;
try {
  const sluiced = await startSluiced('pools:\n' + pool('default', emu.port, 'anthropic', LIMITS));
  try {
    const client = (agent) => new Anthropic({ apiKey: 'unused', maxRetries: 0, timeout: 120000,
                                              baseURL: `http://127.0.0.1:${sluiced.port}/anthropic`,
                                              defaultHeaders: { 'x-sluice-agent': agent } });
    const ask = (agent) => client(agent).messages.create({
      model: 'claude-emu-1', max_tokens: 8192, messages: [{ role: 'user', content: `fix ${agent}` }] });
    failed = await run([{
      name: `${BURST} calls of max_tokens 8192 at once, 4 fit: queued and answered, none refused`,
      fn: async () => {
        await ask('warm-1'); /* two settles: ~97% of a reservation comes back */
        await ask('warm-2');
        const answers = await Promise.allSettled(
          Array.from({ length: BURST }, (_, i) => ask(`agent-${i + 1}`)));
        const refused = answers.filter((a) => a.status === 'rejected');
        const rejected = readFileSync(sluiced.eventLog, 'utf8').split('\n').filter(Boolean)
          .map((l) => JSON.parse(l)).filter((e) => e.event === 'rejected');
        assert.deepEqual(rejected.map((e) => `${e.agent}: ${e.reason}, retry at +${
          (e.retry_at - e.ts).toFixed(0)} s`), [], 'sluiced refused calls of the burst');
        assert.equal(refused.length, 0, `${refused.length} calls failed: ${refused[0]?.reason}`);
        const st = await getJson(emu.port, '/stats');
        assert.equal(st.http_429, 0, 'upstream 429s');
        assert.equal(st.admitted, BURST + 2);
      },
    }]);
  } finally { await sluiced.stop(); }
} finally { await emu.stop(); }
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
