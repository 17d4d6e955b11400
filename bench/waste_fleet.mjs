// waste_fleet.mjs - issue 24 "Measure" (c): a fleet of real agent processes (node, the
// Anthropic SDK, bench/waste_agent.mjs) against sluice-emu at tight limits (400k input
// TPM, 40k output TPM, max_tokens 8,192), once straight to the emulator with the SDK's
// retry and once through sluiced (pool with the same limits). Prints per run: makespan
// (until the last process exits), the emulator's 429s, broken turns, and the input the
// emulator billed over the input capacity of the run (the bucket starts full: input TPM
// + input TPM / 60 x makespan), and for sluiced over the part it allows itself (x its
// margin, 0.85 at start). Bounded: every process is killed after 240 s.
//
//   SLUICED=... SLUICE_EMU=... node bench/waste_fleet.mjs [AGENTS] [TURNS] [WORDS]
import { spawn } from 'node:child_process';
import { getJson, pool, startEmu, startSluiced } from '../tests/e2e/proxy_harness.mjs';

const AGENTS = Number(process.argv[2] || 10), TURNS = Number(process.argv[3] || 4);
const WORDS = Number(process.argv[4] || 15000), TEST_MS = 2000;
const LIMITS = { input_tpm: 400000, output_tpm: 40000, rpm: 2000 };
const EMU_ARGS = ['--input-tpm', String(LIMITS.input_tpm), '--output-tpm', String(LIMITS.output_tpm),
                  '--rpm', String(LIMITS.rpm), '--ttft-ms', '200', '--tokens-per-s', '2000',
                  '--latency-spread', '0.2', '--output-tokens', '200', '--seed', '7'];
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

async function fleet(label, emu, baseURL, viaSluice, margin) {
  const t0 = Date.now();
  const names = Array.from({ length: AGENTS }, (_, i) => `agent-${i + 1}`);
  const res = await Promise.all(names.map((n) => runAgent(n, baseURL, viaSluice)));
  const makespan = (Date.now() - t0) / 1000;
  const st = await getJson(emu.port, '/stats');
  const input = st.tokens.input + st.tokens.cache_creation_input;
  const capacity = LIMITS.input_tpm + LIMITS.input_tpm / 60 * makespan;
  const errors = res.filter((r) => r.error);
  for (const e of errors) console.error(`${label}: ${e.agent}: ${e.error}`);
  return { label, makespan, http429: st.http_429, calls: st.requests,
           broken: res.reduce((n, r) => n + r.broken, 0),
           gaveUp: res.filter((r) => r.gave_up).length, input,
           used: input / capacity, usedOwn: margin ? input / (capacity * margin) : null };
}

const runs = [];
{
  const emu = await startEmu(EMU_ARGS);
  try {
    runs.push(await fleet('direct + SDK retry', emu, `http://127.0.0.1:${emu.port}`, false, null));
  } finally { await emu.stop(); }
}
{
  const emu = await startEmu(EMU_ARGS);
  const sluiced = await startSluiced('pools:\n' + pool('default', emu.port, 'anthropic',
                                     { ...LIMITS, max_queue_wait_s: 90 }) + 'max_wait_s: 300\n');
  try {
    const pools0 = await getJson(sluiced.port, '/v1/pools');
    const margin = pools0.pools && pools0.pools[0] ? pools0.pools[0].margin : 0.85;
    runs.push(await fleet('through sluiced', emu, `http://127.0.0.1:${sluiced.port}/anthropic`,
                          true, margin));
  } finally { await sluiced.stop(); await emu.stop(); }
}
console.log(`(c) real fleet: ${AGENTS} agent processes x ${TURNS} turns of ${WORDS} words, ` +
            `max_tokens 8192, ${TEST_MS} ms test pause; emulator ${LIMITS.input_tpm} input TPM, ` +
            `${LIMITS.output_tpm} output TPM`);
console.log('run                  makespan  emu 429s  calls  broken turns  gave up  input billed  ' +
            'input/capacity  input/own capacity');
for (const r of runs)
  console.log(`${r.label.padEnd(20)} ${r.makespan.toFixed(1).padStart(7)} s ${String(r.http429).padStart(9)} ` +
              `${String(r.calls).padStart(6)} ${String(r.broken).padStart(13)} ${String(r.gaveUp).padStart(8)} ` +
              `${String(r.input).padStart(13)} ${(100 * r.used).toFixed(0).padStart(14)}% ` +
              `${r.usedOwn === null ? '                 -' : (100 * r.usedOwn).toFixed(0).padStart(18) + '%'}`);
