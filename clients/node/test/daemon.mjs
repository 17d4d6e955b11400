// Starts the real sluiced and sluice-emu for the tests, on free 127.0.0.1 ports; every wait bounded.
//
// Binaries: $SLUICED / $SLUICE_EMU (CTest sets them), else the repository's build/ tree.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
export const SLUICED = process.env.SLUICED || join(ROOT, 'build/src/server/sluiced');
export const SLUICE_EMU = process.env.SLUICE_EMU || join(ROOT, 'build/src/emu/sluice-emu');

/** A port nothing listens on now (bound and closed at once). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

async function untilHealthy(url, proc, what, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`${what} exited ${proc.exitCode}: ${proc.stderrText}`);
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (r.ok) return;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  proc.kill('SIGKILL');
  throw new Error(`${what} did not answer within ${timeoutMs} ms: ${proc.stderrText}`);
}

function stopper(proc, what, cleanup) {
  return () => new Promise((resolve, reject) => {
    if (proc.exitCode !== null || proc.signalCode !== null) { cleanup(); resolve(); return; }
    const kill = setTimeout(() => proc.kill('SIGKILL'), 10000);
    proc.once('exit', (code, signal) => {
      clearTimeout(kill);
      cleanup();
      code === 0 || signal === 'SIGTERM' ? resolve() : reject(new Error(`${what} exited ${code ?? signal}`));
    });
    proc.kill('SIGTERM');
  });
}

function spawnLogged(bin, args) {
  if (!existsSync(bin)) throw new Error(`${bin} is not built (cmake --build build, or set $SLUICED/$SLUICE_EMU)`);
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  proc.stderrText = '';
  proc.stderr.on('data', (d) => { proc.stderrText = (proc.stderrText + d).slice(-4000); });
  return proc;
}

/** Starts sluiced with YAML `config` (on `port`, or a free one); resolves {url, port, stop}. */
export async function startSluiced(config, port) {
  port = port ?? await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'sluice-node-test-'));
  const path = join(dir, 'sluice.yaml');
  writeFileSync(path, config);
  const proc = spawnLogged(SLUICED, ['--config', path, '--listen', `127.0.0.1:${port}`]);
  const url = `http://127.0.0.1:${port}`;
  await untilHealthy(`${url}/healthz`, proc, 'sluiced', 15000);
  return { url, port, proc, stop: stopper(proc, 'sluiced', () => rmSync(dir, { recursive: true, force: true })) };
}

/** Starts sluice-emu with `args` and API key `key`; resolves {url, port, stop}. */
export async function startEmu(key, args = []) {
  const port = await freePort();
  const proc = spawnLogged(SLUICE_EMU, ['--listen', `127.0.0.1:${port}`, '--api-key', key, ...args]);
  const url = `http://127.0.0.1:${port}`;
  await untilHealthy(`${url}/health`, proc, 'sluice-emu', 15000);
  return { url, port, proc, stop: stopper(proc, 'sluice-emu', () => {}) };
}
