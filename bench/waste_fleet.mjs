// waste_fleet.mjs - issue 24 "Measure" (c): a fleet of real agent processes (node, the
// Anthropic SDK, bench/waste_agent.mjs) against sluice-emu at tight limits (400k input
// TPM, 40k output TPM, max_tokens 8,192), once straight to the emulator with the SDK's
// retry and once through sluiced (pool with the same limits). Prints per run: makespan
// (until the last process exits), the emulator's 429s, broken turns, and the input the
// emulator billed over the input capacity of the run (the bucket starts full: input TPM
// + input TPM / 60 x makespan), and for sluiced over the part it allowed itself (its
// start margin's share of the full bucket, the refill at its margin of each moment, and
// the reserve each step of its climb moved into the level). Bounded: every process is
// killed after 240 s.
//
// Where the time goes, per run (the emulator's /stats and sluiced's /v1/pools polled every
// 100 ms, each call's [asked, answered] from the agents): the first call asked (the
// processes starting) and the first answer; the seconds the
// emulator's input bucket held a whole call's input while some agent's call was waiting
// (queued in sluiced, or asleep in the SDK's retry back-off), i.e. capacity left idle; the
// input-capacity bound (the seconds the refill needs for the input billed beyond the full
// bucket at start, at the provider's rate and at the rate the pool allows itself at start);
// the last call's answer and the spread of the agents' last answers; for sluiced the
// seconds its own input level held a call's input while calls were queued in it, and the
// margin's climb (when it reached 0.90, 0.95, its ceiling). PAIRS runs the two in turn.
// Last, where the capacity went (the provider's, direct; what sluiced allowed itself): billed,
// refilled before the first call was asked (a full bucket, nobody asking: the processes
// starting), refilled after the last answer (the last test pause, the processes exiting), and
// the rest, unused while the fleet asked; and the input billed over the capacity between the
// first ask and the last answer, next to the measure above (which stays the one quoted).
// And what sluiced's margin cost each run, next to the direct run of its pair: the input
// capacity its climb left below the ceiling (`margin_max`) and the ceiling left below the
// provider's, in tokens and in seconds of refill, and the makespans the run would have had
// with each given back (at the ceiling from the start; at the provider's whole capacity),
// the rest of the run (its ends, its waste) unchanged: a pair whose ceiling makespan is
// later than the direct run's cannot be won by a faster climb, only by spending the reserve
// the ceiling keeps.
//
// POOL_EXTRA (a JSON object of pool keys, e.g. '{"margin_max": 1.0}', or '{"input_tpm": 300000}'
// for a pool configured below the emulator's limits) and CONFIG_EXTRA (YAML lines appended to
// the config, e.g. 'proxy:\n  continue_capped: true\n') try other settings.
// Other fleets, from the environment: WASTE_API `messages` (default), `chat` or `responses`
// (OpenAI agents; the emulator then limits a combined `tokens_tpm` of 400k and `rpm`, as
// OpenAI does); WASTE_STREAM=1 (streamed answers); WASTE_MAX_TOKENS (default 8192);
// OUT_TOKENS (the emulator's answer length, default 200); EMU_LIMITS (a JSON object over the
// emulator's limits, e.g. '{"rpm": 60}'); BIND (the bucket measured: input_tokens, the
// default for Anthropic; tokens, OpenAI's; output_tokens; requests); BACKEND=redis (sluiced on
// a private redis-server) with REPLICAS=N (N sluiced on that Redis, the agents dealt to them
// in turn); EVENTS_DIR (each sluiced's event log copied there before it stops).
//
//   SLUICED=... SLUICE_EMU=... [TTFT_MS=200] node bench/waste_fleet.mjs [AGENTS] [TURNS] [WORDS] [PAIRS]
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { getJson, pool, startEmu, startSluiced } from '../tests/e2e/proxy_harness.mjs';

const AGENTS = Number(process.argv[2] || 10), TURNS = Number(process.argv[3] || 4);
const WORDS = Number(process.argv[4] || 15000), TEST_MS = 2000;
const PAIRS = Number(process.argv[5] || 1), POLL_MS = 100;
const API = process.env.WASTE_API || 'messages', OPENAI = API !== 'messages';
const LIMITS = { ...(OPENAI ? { input_tpm: 0, output_tpm: 0, tokens_tpm: 400000, rpm: 2000 }
                            : { input_tpm: 400000, output_tpm: 40000, rpm: 2000 }),
                 ...JSON.parse(process.env.EMU_LIMITS || '{}') };
/* BIND: the bucket whose use is measured, and its limit's key. */
const BIND = process.env.BIND || (OPENAI ? 'tokens' : 'input_tokens');
const TPM = { input_tokens: 'input_tpm', output_tokens: 'output_tpm', tokens: 'tokens_tpm', requests: 'rpm' }[BIND];
if (!TPM || !LIMITS[TPM]) throw new Error(`BIND: "${BIND}" is not a limited bucket of ${JSON.stringify(LIMITS)}`);
const LIMIT = LIMITS[TPM];
const BACKEND = process.env.BACKEND || 'memory', REPLICAS = Number(process.env.REPLICAS || 1);
const MAX_TOKENS = Number(process.env.WASTE_MAX_TOKENS || 8192);
/* What the emulator billed from the measured bucket (its /stats). */
function billed(st) {
  const input = st.tokens.input + st.tokens.cache_creation_input;
  return { input_tokens: input, output_tokens: st.tokens.output, tokens: input + st.tokens.output,
           requests: st.admitted }[BIND];
}
/* TTFT_MS (environment, default 200): the emulator's time to first token, to see slow calls
 * (a loaded provider, or a loaded machine) without loading the machine. */
const TTFT_MS = Number(process.env.TTFT_MS || 200);
const EMU_ARGS = ['--input-tpm', String(LIMITS.input_tpm), '--output-tpm', String(LIMITS.output_tpm),
                  '--rpm', String(LIMITS.rpm), '--tokens-tpm', String(LIMITS.tokens_tpm || 0),
                  '--ttft-ms', String(TTFT_MS), '--tokens-per-s', '2000', '--latency-spread', '0.2',
                  '--output-tokens', process.env.OUT_TOKENS || '200', '--seed', '7'];
const AGENT = new URL('./waste_agent.mjs', import.meta.url).pathname;

function runAgent(name, baseURL, viaSluice) {
  return new Promise((resolve) => {
    const args = [AGENT, name, baseURL, String(TURNS), String(WORDS), String(TEST_MS)];
    if (viaSluice) args.push('header');
    const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const kill = setTimeout(() => p.kill('SIGKILL'), 240000);
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => {
      clearTimeout(kill);
      try { resolve(JSON.parse(out.trim().split('\n').pop())); } catch {
        resolve({ agent: name, calls: 0, broken: 0, gave_up: true, error: `exit ${code}: ${err.slice(0, 200)}` });
      }
    });
  });
}

/* Samples {t (ms), level (the emulator's input bucket), active (calls at the emulator),
 * margin (sluiced's, or null)} every POLL_MS until stop() is called. */
function poller(emuPort, sluicedPort) {
  const samples = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const t = Date.now();
      try {
        const st = await getJson(emuPort, '/stats');
        const pools = sluicedPort ? await getJson(sluicedPort, '/v1/pools') : null;
        const p = pools && pools.pools[0];
        samples.push({ t, level: st.levels[BIND], active: st.http.active,
                       margin: p ? p.margin : null,
                       poolLevel: p ? p.buckets[BIND].level : null,
                       poolLimit: p ? p.buckets[BIND].limit : null,
                       queued: p ? p.queue.depth : 0 });
      } catch { /* a poll lost under load: the next one counts */ }
      await new Promise((r) => setTimeout(r, Math.max(0, POLL_MS - (Date.now() - t))));
    }
  })();
  return { samples, stop: async () => { running = false; await loop; } };
}

/* Where the time went: see the header. `perCall` is the input one call bills. */
function phases(t0, res, samples, perCall, margin0, poolLimit) {
  const spans = res.flatMap((r) => r.spans_ms || []);
  const answered = spans.map((s) => s[1]).filter((x) => x > 0);
  const lastOf = res.map((r) => Math.max(0, ...(r.spans_ms || []).map((s) => s[1])))
                    .filter((x) => x > 0);
  let idle_ms = 0, poolIdle_ms = 0;
  for (let i = 1; i < samples.length; i++) {
    const s = samples[i], dt = s.t - samples[i - 1].t;
    const waiting = spans.filter((c) => c[0] <= s.t && (c[1] === 0 || c[1] > s.t)).length - s.active;
    if (waiting > 0 && s.level >= perCall) idle_ms += dt;
    if (s.queued > 0 && s.poolLevel !== null && s.poolLevel >= perCall) poolIdle_ms += dt;
  }
  /* What sluiced allowed itself: the full bucket at its start margin, the refill at the
   * margin of each moment, and the 1% of the limit each step above the start moved into
   * the level (docs/design.md "Margin"). */
  let allowed = margin0 === null ? null : poolLimit * margin0;
  /* The refill of that capacity (of the provider's, direct) before the first call was
   * asked, when the bucket was full and nobody asked, and after the last answer, when
   * nothing was left to ask: the run's ends, which no coordinator can use. */
  const ask = Math.min(...spans.map((c) => c[0])), last = Math.max(...answered);
  let beforeAsk = 0, afterLast = 0;
  for (let i = 1; i < samples.length; i++) {
    const m = margin0 === null ? 1 : samples[i - 1].margin === null ? margin0 : samples[i - 1].margin;
    /* The pool's limit of that moment: `limits_from: provider` adopts the provider's (its
     * refill grows; its level does not jump: src/engine/headers.c). */
    const lim = margin0 === null ? LIMIT : samples[i - 1].poolLimit || poolLimit;
    const refill = lim / 60 * m * (samples[i].t - samples[i - 1].t) / 1000;
    if (allowed !== null) allowed += refill;
    if (samples[i].t <= ask) beforeAsk += refill;
    else if (samples[i - 1].t >= last) afterLast += refill;
  }
  if (allowed !== null) { /* each new height of the margin, at the limit of its moment */
    let top = margin0;
    for (const x of samples)
      if (x.margin !== null && x.margin > top) {
        allowed += (x.poolLimit || poolLimit) * (x.margin - top);
        top = x.margin;
      }
  }
  const reached = (m) => {
    const s = samples.find((x) => x.margin !== null && x.margin >= m - 1e-9);
    return s ? ((s.t - t0) / 1000).toFixed(1) : '-';
  };
  return { first_s: (Math.min(...answered) - t0) / 1000, idle_s: idle_ms / 1000,
           ask_s: (Math.min(...spans.map((c) => c[0])) - t0) / 1000,
           poolIdle: margin0 === null ? '-' : (poolIdle_ms / 1000).toFixed(1) + ' s', allowed,
           beforeAsk, afterLast,
           last_s: (Math.max(...answered) - t0) / 1000,
           spread_s: (Math.max(...lastOf) - Math.min(...lastOf)) / 1000,
           climb: margin0 === null ? '-' : `0.90@${reached(0.90)} 0.95@${reached(0.95)} ` +
             `max ${Math.max(...samples.map((x) => x.margin || 0)).toFixed(2)}` };
}

/* `baseURLs`: the agents are dealt to them in turn (one per sluiced replica). */
async function fleet(label, emu, baseURLs, viaSluice, margin, sluicedPort, marginMax, poolLimit) {
  const poll = poller(emu.port, sluicedPort);
  const t0 = Date.now();
  const names = Array.from({ length: AGENTS }, (_, i) => `agent-${i + 1}`);
  const res = await Promise.all(names.map((n, i) => runAgent(n, baseURLs[i % baseURLs.length], viaSluice)));
  const makespan = (Date.now() - t0) / 1000;
  await poll.stop();
  const st = await getJson(emu.port, '/stats');
  const input = billed(st);
  const capacity = LIMIT + LIMIT / 60 * makespan;
  const errors = res.filter((r) => r.error);
  for (const e of errors) console.error(`${label}: ${e.agent}: ${e.error}`);
  const perCall = input / Math.max(1, st.admitted);
  const share = margin || 1;
  return { label, makespan, http429: st.http_429, calls: st.requests, capacity, marginMax, poolLimit,
           broken: res.reduce((n, r) => n + r.broken, 0),
           gaveUp: res.filter((r) => r.gave_up).length, input,
           used: input / capacity, usedOwn: null,
           bound_s: Math.max(0, (input - (poolLimit || LIMIT) * share) / ((poolLimit || LIMIT) * share / 60)),
           ...phases(t0, res, poll.samples, perCall, margin, poolLimit) };
}
/* Input billed over what sluiced allowed itself (phases: its margin over time). */
function usedOwn(r) { if (r.allowed) r.usedOwn = r.input / r.allowed; return r; }
/* The capacity of the run (sluiced: the part it allowed itself), split: billed, refilled
 * before the first ask, after the last answer, and the rest, left unused while the fleet
 * asked; and the input billed over the capacity between the first ask and the last answer. */
function account(r) {
  const cap = r.allowed || r.capacity, pct = (x) => (100 * x / cap).toFixed(1).padStart(6) + '%';
  const rest = cap - r.input - r.beforeAsk - r.afterLast;
  const asked = r.input / (cap - r.beforeAsk - r.afterLast);
  return `${r.label.padEnd(20)} ${String(Math.round(cap)).padStart(9)} ${pct(r.input).padStart(7)} ` +
         `${pct(r.beforeAsk).padStart(17)} ${pct(r.afterLast).padStart(17)} ${pct(rest).padStart(19)} ` +
         `${(100 * asked).toFixed(0).padStart(21)}%`;
}

/* A private redis-server on a free port (as tests/integration/redis_daemon start it). */
async function startRedis() {
  const port = await new Promise((resolve) => {
    const srv = createServer().listen(0, '127.0.0.1', () => { const p = srv.address().port; srv.close(() => resolve(p)); });
  });
  const dir = mkdtempSync(join(tmpdir(), 'sluice-redis-'));
  const proc = spawn(process.env.REDIS_SERVER || 'redis-server',
                     ['--bind', '127.0.0.1', '--port', String(port), '--dir', dir, '--save', '',
                      '--appendonly', 'no'], { stdio: 'ignore' });
  const up = () => new Promise((resolve) => {
    const c = connect(port, '127.0.0.1', () => { c.destroy(); resolve(true); });
    c.once('error', () => resolve(false));
  });
  for (let i = 0; i < 50 && !(await up()); i++) await new Promise((r) => setTimeout(r, 100));
  return { url: `redis://127.0.0.1:${port}/0`,
           stop: () => { proc.kill('SIGKILL'); rmSync(dir, { recursive: true, force: true }); } };
}

const load = loadavg()[0];
const runs = [];
const prefix = OPENAI ? '/openai/v1' : '/anthropic';
for (let pair = 0; pair < PAIRS; pair++) {
{
  const emu = await startEmu(EMU_ARGS);
  try {
    runs.push(await fleet('direct + SDK retry', emu, [`http://127.0.0.1:${emu.port}${OPENAI ? '/v1' : ''}`], false, null));
  } finally { await emu.stop(); }
}
{
  const emu = await startEmu(EMU_ARGS);
  const redis = BACKEND === 'redis' ? await startRedis() : null;
  const config = (redis ? `backend: ${redis.url}\n` : '') + 'pools:\n' +
    pool('default', emu.port, OPENAI ? 'openai' : 'anthropic',
         { ...LIMITS, max_queue_wait_s: 90, ...JSON.parse(process.env.POOL_EXTRA || '{}') }) +
    'max_wait_s: 300\n' + (process.env.CONFIG_EXTRA || '');
  const sluiceds = [];
  try {
    for (let i = 0; i < REPLICAS; i++) sluiceds.push(await startSluiced(config));
    /* A sluiced on Redis answers once it has loaded its library: /readyz, 10 s at most. */
    for (const s of sluiceds)
      for (let i = 0; i < 100; i++) {
        if ((await fetch(`http://127.0.0.1:${s.port}/readyz`).catch(() => ({ ok: false }))).ok) break;
        await new Promise((r) => setTimeout(r, 100));
      }
    const pools0 = await getJson(sluiceds[0].port, '/v1/pools');
    const p0 = pools0.pools && pools0.pools[0];
    const margin = p0 ? p0.margin : 0.85;
    const marginMax = p0 && p0.config ? p0.config.margin_max : 0.97;
    const poolLimit = p0 ? p0.buckets[BIND].limit : LIMIT;
    const label = redis ? `sluiced, redis x${REPLICAS}` : 'through sluiced';
    runs.push(usedOwn(await fleet(label, emu, sluiceds.map((s) => `http://127.0.0.1:${s.port}${prefix}`),
                                  true, margin, sluiceds[0].port, marginMax, poolLimit)));
  } finally {
    for (const [i, s] of sluiceds.entries()) {
      if (process.env.EVENTS_DIR) copyFileSync(s.eventLog, join(process.env.EVENTS_DIR, `events-${pair + 1}-${i + 1}.jsonl`));
      await s.stop();
    }
    if (redis) redis.stop();
    await emu.stop();
  }
}
}
console.log(`(c) real fleet: ${AGENTS} ${API}${process.env.WASTE_STREAM === '1' ? ' (stream)' : ''} ` +
            `agent processes x ${TURNS} turns of ${WORDS} words, max_tokens ${MAX_TOKENS}, ` +
            `${TEST_MS} ms test pause; emulator ${JSON.stringify(LIMITS)}, TTFT ${TTFT_MS} ms, ` +
            `output ${process.env.OUT_TOKENS || 200} tokens; sluiced ${BACKEND}` +
            `${BACKEND === 'redis' ? ' x' + REPLICAS : ''}${process.env.POOL_EXTRA ? ' pool ' + process.env.POOL_EXTRA : ''}` +
            `${process.env.CONFIG_EXTRA ? ' config ' + JSON.stringify(process.env.CONFIG_EXTRA) : ''}; ` +
            `measured bucket ${BIND}; ${PAIRS} pair(s), load average ${load.toFixed(1)} at ` +
            `start, ${loadavg()[0].toFixed(1)} at end`);
console.log(`run                  makespan  emu 429s  calls  broken turns  gave up  ${BIND.padStart(12)}  ` +
            'used/capacity  used/own capacity');
for (const r of runs)
  console.log(`${r.label.padEnd(20)} ${r.makespan.toFixed(1).padStart(7)} s ${String(r.http429).padStart(9)} ` +
              `${String(r.calls).padStart(6)} ${String(r.broken).padStart(13)} ${String(r.gaveUp).padStart(8)} ` +
              `${String(r.input).padStart(13)} ${(100 * r.used).toFixed(0).padStart(14)}% ` +
              `${r.usedOwn === null ? '                 -' : (100 * r.usedOwn).toFixed(0).padStart(18) + '%'}`);
console.log('\nwhere the time went   first ask  first answer  idle with calls waiting  capacity bound  ' +
            'last answer  agents spread  pool idle, queued  margin climb');
for (const r of runs)
  console.log(`${r.label.padEnd(20)} ${r.ask_s.toFixed(1).padStart(7)} s ${r.first_s.toFixed(1).padStart(11)} s ` +
              `${r.idle_s.toFixed(1).padStart(21)} s ` +
              `${r.bound_s.toFixed(1).padStart(13)} s ${r.last_s.toFixed(1).padStart(10)} s ` +
              `${r.spread_s.toFixed(1).padStart(12)} s ${r.poolIdle.padStart(18)}  ${r.climb}`);
console.log('idle with calls waiting: the emulator\'s input bucket held a call\'s input while a call ' +
            'waited (for sluiced mostly the margin\'s reserve); pool idle, queued: sluiced\'s own input ' +
            'level held a call\'s input (as billed; its estimate of the head\'s need may be more) ' +
            'while calls were queued in it');
console.log('\ncapacity, where it went   capacity   billed  before first ask  after last answer  ' +
            'unused while asked  billed/capacity asked');
for (const r of runs) console.log(account(r));
console.log('capacity: the provider\'s (direct) or what sluiced allowed itself (the columns above); ' +
            'before first ask / after last answer: its refill while nobody had asked yet (a full ' +
            'bucket) and once the last answer was in; billed/capacity asked: without those two');
console.log('capacity bound: seconds of refill the input billed beyond a full bucket needs, at the ' +
            'provider\'s rate (direct) or at the pool\'s start margin (sluiced)');

/* What the margin cost a sluiced run (see the header): its capacity at the ceiling from the
 * start and at the provider's whole rate, each up to its makespan, against what it allowed
 * itself; the makespan each would have given, the rest of the run unchanged. */
function marginCost(r, direct) {
  const L = LIMIT, P = r.poolLimit, top = r.marginMax;
  const atCeiling = P * top + P * top / 60 * r.makespan;
  const climb = atCeiling - r.allowed, ceiling = r.capacity - atCeiling;
  const ceilingMs = r.makespan - climb / (P * top / 60);
  const fullMs = r.makespan - (r.capacity - r.allowed) / (L / 60);
  const vs = (t) => `${t.toFixed(1)} s (${t <= direct.makespan ? 'no later' : 'later'})`;
  return `${String(Math.round(climb)).padStart(8)} = ${(climb / (P * top / 60)).toFixed(1).padStart(4)} s ` +
         `${String(Math.round(ceiling)).padStart(10)} = ${(ceiling / (L / 60)).toFixed(1).padStart(4)} s ` +
         `${vs(ceilingMs).padStart(28)} ${vs(fullMs).padStart(30)} ${direct.makespan.toFixed(1).padStart(10)} s`;
}
console.log(`\n${'the margin\'s cost (sluiced)'.padEnd(31)} ${'climb, tokens = s'.padStart(16)} ` +
            `${'ceiling, tokens = s'.padStart(18)} ${'makespan at the ceiling'.padStart(28)} ` +
            `${'at the provider\'s capacity'.padStart(30)} ${'direct'.padStart(12)}`);
for (let i = 0; i + 1 < runs.length; i += 2)
  console.log(`pair ${String(i / 2 + 1).padEnd(26)} ${marginCost(runs[i + 1], runs[i])}`);
console.log('climb: the capacity a pool at margin_max from the start would have had up to the ' +
            'makespan, less what sluiced allowed itself; ceiling: the provider\'s capacity less ' +
            'that; makespans: sluiced\'s, less the seconds of refill each stands for (the ends and ' +
            'the waste of the run unchanged), next to the direct run of the pair');

/* Issue 24's clause per pair, as measured: through sluiced no later than direct, 0 emulator
 * 429s, at least 0.9 of the capacity it allowed itself used (printed, never gated). */
for (let i = 0; i + 1 < runs.length; i += 2) {
  const d = runs[i], s = runs[i + 1];
  const ok = s.makespan <= d.makespan && s.http429 === 0 && s.usedOwn >= 0.9;
  console.log(`clause, pair ${i / 2 + 1}: ${ok ? 'met' : 'MISSED'}: sluiced ${s.makespan.toFixed(1)} s ` +
              `vs direct ${d.makespan.toFixed(1)} s, emulator 429s ${s.http429} vs ${d.http429}, ` +
              `${BIND} used ${(100 * s.usedOwn).toFixed(0)}% of its own allowance ` +
              `(direct ${(100 * d.used).toFixed(0)}% of the provider's)` +
              (d.gaveUp ? `; direct's fleet did less: ${d.gaveUp} of ${AGENTS} agents gave up` : ''));
}
