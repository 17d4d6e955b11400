// proxy_fleet.test.mjs - the proof: the incident's fleet (docs/design.md), run twice against the same provider,
// straight to it with the SDK's own retry, then through sluice; prints both runs.
//
// Compressed time: the provider's limits per second are scaled up and the agents' loops
// scaled down, keeping the incident's shape: 20 agents started together by one "push", 3
// refactor agents sending ~80k-token turns and 17 lint agents sending ~2k-token turns,
// each turn followed by the same "run the tests" pause (so the fleet stays in phase),
// TURNS turns each. A call that still fails after the SDK's retries (maxRetries 2,
// honouring retry-after) breaks the turn: the agent re-reads its context (one more call
// of the same size) and tries the turn again, as the article's harnesses do.
//
// Asserted through sluice: no wave (a second with 3 or more upstream 429s), at most 2
// upstream 429s in all, and the run finishes within 2 minutes.
//
// Run: SLUICED=... SLUICE_EMU=... node tests/e2e/proxy_fleet.test.mjs
import assert from 'node:assert/strict';
import { getJson, pool, sdks, startEmu, startSluiced } from './proxy_harness.mjs';

const { Anthropic } = sdks();

const TURNS = 3;
const TEST_PAUSE_MS = 1500;         // "run the tests": the same for every agent
const REFACTOR = { count: 3, words: 80000, maxTokens: 1000 };
const LINT = { count: 17, words: 2000, maxTokens: 300 };
const MAX_REPLANS = 6;              // per agent, so a storm cannot run forever
// Provider limits, compressed: a wave of the whole fleet (~275k input tokens) fits in
// the bucket once; the next wave, 1.5 s of tests later, finds about half of that, so the
// direct run storms at every seed (600k let the second wave fit, and the direct run
// showed 9 to 34 429s depending on timing).
const LIMITS = { input_tpm: 500000, output_tpm: 600000, rpm: 2000 };
const EMU_ARGS = ['--input-tpm', String(LIMITS.input_tpm), '--output-tpm', String(LIMITS.output_tpm),
                  '--rpm', String(LIMITS.rpm), '--ttft-ms', '200', '--tokens-per-s', '2000',
                  '--latency-spread', '0.2', '--output-tokens', '200', '--seed', '7'];

const WORDS = ('the gate holds water until the level rises and then the stream runs over stones ' +
               'through the valley toward the sea while agents wait their turn').split(' ');

function prose(nWords, seed) {
  const out = new Array(nWords);
  let x = BigInt(seed) * 2654435761n + 1n;
  for (let i = 0; i < nWords; i++) {
    x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    out[i] = WORDS[Number((x >> 33n) % BigInt(WORDS.length))];
  }
  return out.join(' ');
}

const fleet = [];
for (let i = 0; i < REFACTOR.count; i++)
  fleet.push({ name: `refactor-${i + 1}`, role: 'worker', ...REFACTOR });
for (let i = 0; i < LINT.count; i++)
  fleet.push({ name: `lint-${i + 1}`, role: 'worker', ...LINT });
for (const [i, a] of fleet.entries()) a.prompt = prose(a.words, i + 1);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One agent's loop. `client` is its SDK; returns its counters. */
async function agentLoop(a, client, t0, log) {
  const stats = { calls: 0, failedTurns: 0, replans: 0, gaveUp: false };
  for (let turn = 0; turn < TURNS; turn++) {
    let done = false;
    while (!done) {
      const body = { model: 'claude-emu-1', max_tokens: a.maxTokens,
                     messages: [{ role: 'user', content: `turn ${turn}: ${a.prompt}` }] };
      try {
        stats.calls++;
        await client.messages.create(body);
        done = true;
      } catch (e) {
        if (!(e instanceof Anthropic.RateLimitError)) throw e;
        log.push((Date.now() - t0) / 1000);
        stats.failedTurns++;
        if (stats.replans >= MAX_REPLANS) { stats.gaveUp = true; return stats; }
        stats.replans++;
        // The broken turn: re-read the context (one call of the same size), then retry.
        try { stats.calls++; await client.messages.create(body); } catch { /* counted by the provider */ }
      }
    }
    await sleep(TEST_PAUSE_MS);
  }
  return stats;
}

/** Runs the fleet with clients from `makeClient`; returns the printed figures. */
async function runFleet(label, emu, makeClient) {
  const failedAt = [];
  const t0 = Date.now();
  const results = await Promise.all(fleet.map((a) => agentLoop(a, makeClient(a), t0, failedAt)));
  const finishS = (Date.now() - t0) / 1000;
  const st = await getJson(emu.port, '/stats');
  const billed = st.tokens.input + st.tokens.cache_creation_input + st.tokens.output;
  const r = {
    label, finishS, upstream429: st.http_429, billedTokens: billed, providerCalls: st.requests,
    brokenTurns: results.reduce((n, x) => n + x.failedTurns, 0),
    gaveUp: results.filter((x) => x.gaveUp).length,
  };
  return r;
}

/** Seconds (bins) with 3 or more upstream 429s, from the emulator's 429 timestamps. */
function waves(times) {
  const bins = new Map();
  for (const t of times) bins.set(Math.floor(t), (bins.get(Math.floor(t)) ?? 0) + 1);
  return [...bins.entries()].filter(([, n]) => n >= 3).map(([s, n]) => `${s}s:${n}`);
}

/** Polls the emulator's 429 counter every 100 ms to time the 429s. */
function watch429(emu) {
  const times = [];
  let last = 0, stop = false;
  const t0 = Date.now();
  const loop = (async () => {
    while (!stop) {
      const st = await getJson(emu.port, '/stats');
      for (let i = last; i < st.http_429; i++) times.push((Date.now() - t0) / 1000);
      last = st.http_429;
      await sleep(100);
    }
  })();
  return { times, done: async () => { stop = true; await loop; } };
}

function print(r, wavesList) {
  console.log(`${r.label.padEnd(16)} upstream 429s ${String(r.upstream429).padStart(4)}   ` +
              `waves ${String(wavesList.length).padStart(2)}   billed tokens ${String(r.billedTokens).padStart(8)}   ` +
              `provider calls ${String(r.providerCalls).padStart(4)}   broken turns ${String(r.brokenTurns).padStart(3)}   ` +
              `gave up ${r.gaveUp}   finish ${r.finishS.toFixed(1)} s` +
              (wavesList.length ? `   (waves at ${wavesList.join(' ')})` : ''));
}

// ---- run 1: straight to the provider with the SDK's retry -------------------------------
let direct, viaSluice, directWaves, sluiceWaves;
{
  const emu = await startEmu(EMU_ARGS);
  try {
    const w = watch429(emu);
    direct = await runFleet('direct + retry', emu, () => new Anthropic({
      apiKey: 'sk-ant-e2e-real-pool-key-5150', baseURL: `http://127.0.0.1:${emu.port}`,
      maxRetries: 2, timeout: 120000 }));
    await w.done();
    directWaves = waves(w.times);
  } finally {
    await emu.stop();
  }
}

// ---- run 2: the same fleet through sluice -----------------------------------------------
{
  const emu = await startEmu(EMU_ARGS);
  const sluiced = await startSluiced('pools:\n' + pool('default', emu.port, 'anthropic',
                                                       { ...LIMITS, max_queue_wait_s: 90 }) +
                                     'max_wait_s: 300\n');
  try {
    const w = watch429(emu);
    viaSluice = await runFleet('through sluice', emu, (a) => new Anthropic({
      apiKey: 'unused-with-auth-off', baseURL: `http://127.0.0.1:${sluiced.port}/anthropic`,
      maxRetries: 2, timeout: 180000, defaultHeaders: { 'x-sluice-agent': a.name } }));
    await w.done();
    sluiceWaves = waves(w.times);
    const pools = await getJson(sluiced.port, '/v1/pools');
    viaSluice.margin = pools.pools ? pools.pools[0].margin : undefined;
  } finally {
    await sluiced.stop();
    await emu.stop();
  }
}

console.log(`fleet: ${REFACTOR.count} x ${REFACTOR.words / 1000}k-token + ${LINT.count} x ` +
            `${LINT.words / 1000}k-token agents, ${TURNS} turns, ${TEST_PAUSE_MS} ms test pause; ` +
            `provider ${LIMITS.input_tpm} input TPM (refill ${LIMITS.input_tpm / 60}/s)`);
print(direct, directWaves);
print(viaSluice, sluiceWaves);

let failed = 0;
const check = (name, fn) => { try { fn(); console.log(`ok   ${name}`); } catch (e) { failed++; console.log(`FAIL ${name}: ${e.message}`); } };
check('the direct run shows the storm (the test is meaningful)', () =>
  assert.ok(direct.upstream429 >= 10, `only ${direct.upstream429} 429s straight to the provider`));
check('through sluice: no waves', () => assert.deepEqual(sluiceWaves, []));
check('through sluice: at most the occasional 429', () =>
  assert.ok(viaSluice.upstream429 <= 2, `${viaSluice.upstream429} upstream 429s`));
check('through sluice: every turn done, within 2 minutes', () => {
  assert.equal(viaSluice.gaveUp, 0);
  assert.ok(viaSluice.finishS < 120, `${viaSluice.finishS} s`);
});
check('through sluice: fewer tokens billed than with retries', () =>
  assert.ok(viaSluice.billedTokens <= direct.billedTokens,
            `${viaSluice.billedTokens} > ${direct.billedTokens}`));
process.exit(failed ? 1 : 0);
