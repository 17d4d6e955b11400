// lib.mjs - what the dashboard's browser tests share: a sluiced on a free port, a fresh
// headless Chromium (playwright-core) that collects console errors and CSP violations,
// waits bounded in time, and where screenshots go.
import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import {existsSync, mkdtempSync, writeFileSync, mkdirSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';

// Installed by `make setup` (scripts/setup.d/40-dashboard-browser.sh); say so when missing.
const {chromium} = await import('playwright-core').catch((e) => {
  throw new Error('playwright-core is not installed (run make setup): ' + e.message);
});

export const SLUICED = process.env.SLUICED;
export const OUT = process.env.DASHBOARD_OUT || tmpdir();
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const WAIT_MS = 15000; // every wait for the page is bounded; timings gate nothing
export const ADMIN = 'dash-admin-7f3a91c2e5';
export const AGENT_TOKEN = 'dash-agent-token-11';

assert.ok(SLUICED, 'SLUICED must name the sluiced binary');
assert.ok(existsSync(CHROMIUM), CHROMIUM + ' is missing (run make setup: Debian\'s chromium)');

// Starts sluiced with `config` on a free port; resolves {proc, base, output()}.
export function startSluiced(config) {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-dash-'));
  const path = join(dir, 'sluice.yaml');
  writeFileSync(path, config);
  const proc = spawn(SLUICED, ['--config', path, '--listen', '127.0.0.1:0'], {stdio: ['ignore', 'pipe', 'pipe']});
  let stdout = '', stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('sluiced did not start: ' + stderr)); }, 10000);
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolve({proc, base: m[1], dir, output: () => stdout + stderr});
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error('sluiced exited ' + code + ': ' + stderr)); });
  });
}

// SIGTERM; a non-zero exit (a crash, a sanitizer report) fails the test.
export async function stopSluiced(s) {
  const code = await new Promise((resolve) => {
    if (s.proc.exitCode !== null) return resolve(s.proc.exitCode);
    s.proc.once('exit', (c) => resolve(c));
    s.proc.kill('SIGTERM');
  });
  rmSync(s.dir, {recursive: true, force: true});
  assert.equal(code, 0, 'sluiced exited ' + code + ': ' + s.output());
}

export async function api(base, method, path, body, headers = {}) {
  const r = await fetch(base + path, {
    method,
    headers: {...(body ? {'content-type': 'application/json'} : {}), ...headers},
    body: body ? JSON.stringify(body) : undefined,
  });
  return {status: r.status, body: await r.json().catch(() => null), headers: r.headers};
}

// A fresh browser with a new empty profile (playwright passes it as --user-data-dir); collects console errors, page errors and CSP
// violations (a listener installed before any page script, outside the page's CSP).
export async function openBrowser(t) {
  const profile = mkdtempSync(join(tmpdir(), 'sluice-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: {width: 1280, height: 1100},
    timeout: 30000,
  });
  t.after(async () => {
    await context.close();
    rmSync(profile, {recursive: true, force: true});
  });
  const page = context.pages()[0] || await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push({kind: 'console', text: m.text(), url: m.location().url});
  });
  page.on('pageerror', (e) => problems.push({kind: 'pageerror', text: String(e)}));
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) => {
      console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI);
    });
  });
  return {context, page, problems};
}

// Console errors other than the expected probe of GET /v1/limits on a sluiced without it.
export function unexpected(problems, limitsServed) {
  return problems.filter((p) => !(p.kind === 'console' && !limitsServed && /\/v1\/limits$/.test(p.url || '') &&
    /status of 404/.test(p.text)));
}

export async function waitText(page, selector, text) {
  await page.waitForFunction(([s, x]) => {
    const e = document.querySelector(s);
    return e && e.textContent.includes(x);
  }, [selector, text], {timeout: WAIT_MS});
}

export function screenshotPath(name) {
  mkdirSync(OUT, {recursive: true});
  return join(OUT, name);
}
