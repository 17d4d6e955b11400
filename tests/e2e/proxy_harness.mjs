// proxy_harness.mjs - starts the real sluice-emu and a real sluiced proxying to it (127.0.0.1,
// free ports) for the proxy's end-to-end tests and benchmark. The pool key reaches sluiced
// through its environment (api_key_env), as an operator would hand it over.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

export const REAL_KEY = 'sk-ant-e2e-real-pool-key-5150';
export const EMU = process.env.SLUICE_EMU || 'sluice-emu';
export const SLUICED = process.env.SLUICED || 'sluiced';

/** The SDKs; fails when `make setup` has not installed them (`make test` does). */
export function sdks() {
  if (!existsSync(new URL('../node_modules/@anthropic-ai/sdk', import.meta.url)) ||
      !existsSync(new URL('../node_modules/openai', import.meta.url))) {
    console.log('FAIL: tests/node_modules missing (run make setup)');
    process.exit(1);
  }
  return { Anthropic: require('@anthropic-ai/sdk').default, OpenAI: require('openai').default };
}

/** Spawns `argv` and resolves {port, stop, output} once it prints "listening on". */
function start(what, argv, env, pattern) {
  return new Promise((resolve, reject) => {
    const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '', err = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${what} did not start: ${err}`));
    }, 15000);
    proc.stderr.on('data', (d) => { err += d; });
    const onEarlyExit = (code) => { clearTimeout(timer); reject(new Error(`${what} exited ${code}: ${err}`)); };
    proc.on('exit', onEarlyExit);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(pattern);
      if (!m) return;
      clearTimeout(timer);
      proc.off('exit', onEarlyExit);
      const stop = () => new Promise((res, rej) => {
        if (proc.exitCode !== null) return proc.exitCode === 0 ? res() : rej(new Error(`${what} exited ${proc.exitCode}: ${err}`));
        const kill = setTimeout(() => { proc.kill('SIGKILL'); rej(new Error(`${what} did not stop`)); }, 10000);
        proc.on('exit', (code) => {
          clearTimeout(kill);
          code === 0 ? res() : rej(new Error(`${what} exited ${code}: ${err}`));
        });
        proc.kill('SIGTERM');
      });
      resolve({ port: Number(m[1]), stop, output: () => out + err });
    });
  });
}

/** sluice-emu accepting only REAL_KEY. */
export function startEmu(args) {
  return start('sluice-emu', [EMU, '--listen', '127.0.0.1:0', '--api-key', REAL_KEY, ...args],
               process.env, /listening on http:\/\/127\.0\.0\.1:(\d+)/);
}

/** sluiced with `configText` (YAML); pools name `api_key_env: SLUICE_TEST_KEY`. */
export async function startSluiced(configText) {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-e2e-'));
  const path = join(dir, 'sluice.yaml');
  // Full buckets at start unless the test says otherwise (a cold start is tested in C/Python).
  const cold = configText.includes('cold_start:') ? '' : 'cold_start: full\n';
  writeFileSync(path, `event_log: ${join(dir, 'events.jsonl')}\n${cold}${configText}`);
  const env = { ...process.env, SLUICE_TEST_KEY: REAL_KEY };
  const s = await start('sluiced', [SLUICED, '--config', path, '--listen', '127.0.0.1:0'], env,
                        /listening on http:\/\/127\.0\.0\.1:(\d+)/);
  const stop = s.stop;
  s.stop = async () => { await stop(); rmSync(dir, { recursive: true, force: true }); };
  s.eventLog = join(dir, 'events.jsonl');
  return s;
}

/** A pool block: upstream at the emulator, the key from SLUICE_TEST_KEY. */
export function pool(name, emuPort, provider, limits) {
  return `  ${name}:\n    upstream_url: http://127.0.0.1:${emuPort}\n    provider: ${provider}\n` +
         `    api_key_env: SLUICE_TEST_KEY\n` +
         Object.entries(limits).map(([k, v]) => `    ${k}: ${v}\n`).join('');
}

export async function getJson(port, path) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`);
  if (!r.ok) throw new Error(`GET ${path}: ${r.status}`);
  return r.json();
}

/** A tiny test runner: runs each test in order, prints ok/FAIL, exits 1 on a failure. */
export async function run(tests, ctx) {
  let failed = 0;
  for (const t of tests) {
    const t0 = Date.now();
    try {
      await t.fn(ctx);
      console.log(`ok   ${t.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  return failed;
}

// Runs `tests` against a sluiced started with `configText` (each gets ctx plus the
// sluiced and its port), counts one more failure when the emulator `keyed` (the one
// behind the pool) saw a call without the pool's key, stops sluiced and every emulator
// of `emus`, prints the result and exits with it.
export async function runBehindSluiced(tests, configText, ctx, keyed, emus) {
  let failed = 1;
  try {
    const sluiced = await startSluiced(configText);
    try {
      failed = await run(tests, { port: sluiced.port, sluiced, ...ctx });
      const stats = await getJson(keyed.port, '/stats');
      if (stats.http.status_401 !== 0) {
        console.log(`FAIL the emulator saw ${stats.http.status_401} calls without the pool key`);
        failed++;
      }
    } finally {
      await sluiced.stop();
    }
  } finally {
    for (const e of emus) await e.stop();
  }
  console.log(failed ? `${failed} failed` : 'all passed');
  process.exit(failed ? 1 : 0);
}
