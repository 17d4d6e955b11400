// dashboard.test.mjs - sluiced's dashboard in a real browser: Debian's headless Chromium
// driven by playwright-core. Starts sluiced on a free port, loads GET /, makes leases through
// the API and waits for them to appear in the page live; no console error, no CSP violation;
// saves a screenshot (the path is printed). With auth on: refused without the admin token,
// served after /?token=, and the session cookie opens only the dashboard's reads.
//
// Environment: SLUICED (the binary), DASHBOARD_OUT (where the screenshots go; default the
// system's temporary directory), CHROMIUM (default /usr/bin/chromium).
import {test} from 'node:test';
import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import {mkdtempSync, writeFileSync, mkdirSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {existsSync} from 'node:fs';

// Installed by `make setup` (scripts/setup.d/40-dashboard-browser.sh); say so when missing.
const {chromium} = await import('playwright-core').catch((e) => {
  throw new Error('playwright-core is not installed (run make setup): ' + e.message);
});

const SLUICED = process.env.SLUICED;
const OUT = process.env.DASHBOARD_OUT || tmpdir();
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT_MS = 15000; // every wait for the page is bounded; timings gate nothing
const ADMIN = 'dash-admin-7f3a91c2e5';
const AGENT_TOKEN = 'dash-agent-token-11';
const POOL = `pools:
  default:
    input_tpm: 600000
    output_tpm: 120000
    rpm: 600
    concurrency: 1
    max_queue_wait_s: 600
`;

assert.ok(SLUICED, 'SLUICED must name the sluiced binary');
assert.ok(existsSync(CHROMIUM), CHROMIUM + ' is missing (run make setup: Debian\'s chromium)');

// Starts sluiced with `config` on a free port; resolves {proc, base, output()}.
function startSluiced(config) {
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
async function stopSluiced(s) {
  const code = await new Promise((resolve) => {
    if (s.proc.exitCode !== null) return resolve(s.proc.exitCode);
    s.proc.once('exit', (c) => resolve(c));
    s.proc.kill('SIGTERM');
  });
  rmSync(s.dir, {recursive: true, force: true});
  assert.equal(code, 0, 'sluiced exited ' + code + ': ' + s.output());
}

async function api(base, method, path, body, headers = {}) {
  const r = await fetch(base + path, {
    method,
    headers: {...(body ? {'content-type': 'application/json'} : {}), ...headers},
    body: body ? JSON.stringify(body) : undefined,
  });
  return {status: r.status, body: await r.json().catch(() => null), headers: r.headers};
}

// A fresh browser with a new empty profile (playwright passes it as --user-data-dir); collects console errors, page errors and CSP
// violations (a listener installed before any page script, outside the page's CSP).
async function openBrowser(t) {
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
function unexpected(problems, limitsServed) {
  return problems.filter((p) => !(p.kind === 'console' && !limitsServed && /\/v1\/limits$/.test(p.url || '') &&
    /status of 404/.test(p.text)));
}

async function waitText(page, selector, text) {
  await page.waitForFunction(([s, x]) => {
    const e = document.querySelector(s);
    return e && e.textContent.includes(x);
  }, [selector, text], {timeout: WAIT_MS});
}

function screenshotPath(name) {
  mkdirSync(OUT, {recursive: true});
  return join(OUT, name);
}

test('the dashboard shows a grant, a queued ticket and an upstream 429 live, with no console error or CSP violation', async (t) => {
  const s = await startSluiced(POOL);
  t.after(() => stopSluiced(s));
  const {page, problems} = await openBrowser(t);
  const resp = await page.goto(s.base + '/');
  assert.equal(resp.status(), 200);
  const csp = resp.headers()['content-security-policy'];
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  await waitText(page, '#stream', 'live');
  // The files carry an ETag: the same one again is a 304 without a body.
  const js = await fetch(s.base + '/dashboard/app.js');
  assert.match(js.headers.get('content-type'), /^text\/javascript/);
  const etag = js.headers.get('etag');
  const again = await fetch(s.base + '/dashboard/app.js', {headers: {'if-none-match': etag}});
  assert.equal(again.status, 304);
  assert.equal((await again.text()).length, 0);

  const first = await api(s.base, 'POST', '/v1/leases', {agent: 'dash-alice', input_tokens: 1200, output_tokens: 300});
  assert.equal(first.status, 200, JSON.stringify(first.body));
  await waitText(page, '#events tbody', first.body.lease);
  await waitText(page, '#events tbody', 'dash-alice');
  // concurrency 1: the second waits in the queue, and its ticket is listed with its weight.
  const second = await api(s.base, 'POST', '/v1/leases', {agent: 'dash-bob', role: 'planner', input_tokens: 800, output_tokens: 100});
  assert.equal(second.status, 202, JSON.stringify(second.body));
  const pool = 'div.pool[data-pool="default"]';
  await waitText(page, pool, second.body.ticket);
  await waitText(page, pool, 'dash-bob');
  await waitText(page, '#agents tbody', 'dash-alice');
  // The call came back 429: the overlay counts it, and the ticket is granted on the settle.
  const settled = await api(s.base, 'POST', `/v1/leases/${first.body.lease}/settle`,
    {input_tokens: 1200, output_tokens: 0, got_429: true});
  assert.equal(settled.status, 200, JSON.stringify(settled.body));
  await waitText(page, '#overlay-summary', '1 upstream 429s');
  await waitText(page, '#events tbody', 'upstream_429');
  // The four numbers (GET /v1/fleet): one settle in the window, and it came back 429.
  await waitText(page, '#fleet tbody', '(1 of 1 in 300 s)');
  await page.waitForFunction((tk) => !document.querySelector('div.pool[data-pool="default"]').textContent.includes(tk),
    second.body.ticket, {timeout: WAIT_MS});
  await waitText(page, '#overlay-summary', '2 grants');

  const limits = await api(s.base, 'GET', '/v1/limits');
  const limitsServed = limits.status === 200;
  assert.equal(await page.locator('#limits-panel').isHidden(), !limitsServed,
    'the action limits panel shows exactly when GET /v1/limits answers 200 (it answered ' + limits.status + ')');

  await page.waitForTimeout(2500); // one more poll of /v1/pools, so the charts have a line
  const shot = screenshotPath('dashboard.png');
  await page.screenshot({path: shot, fullPage: true});
  console.log('screenshot: ' + shot);
  assert.deepEqual(unexpected(problems, limitsServed), []);
});

test('a runaway agent shows as anomalous and suspended in the agents table, the alerts and the fleet row', async (t) => {
  const s = await startSluiced(`fleet:
  suspend_anomalous: true
pools:
  default:
    input_tpm: 100000000
    output_tpm: 100000000
`);
  t.after(() => stopSluiced(s));
  const {page, problems} = await openBrowser(t);
  await page.goto(s.base + '/');
  await waitText(page, '#stream', 'live');
  const ask = (agent) => api(s.base, 'POST', '/v1/leases', {agent, input_tokens: 10, output_tokens: 10});
  for (let i = 0; i < 6; i++)
    for (let k = 0; k < 3; k++) assert.equal((await ask('dash-w' + i)).status, 200);
  let sent = 0;
  for (; sent < 60; sent++) {
    const r = await ask('dash-runaway');
    if (r.status === 429) break; // suspended mid-burst: the judge runs once a second
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  await waitText(page, '#agents tbody', 'requests z');
  await waitText(page, '#agents tbody', 'suspended');
  await waitText(page, '#alerts', 'agent dash-runaway, requests z');
  await waitText(page, '#fleet tbody', '1 / 1');
  const row = await page.locator('#agents tbody tr', {hasText: 'dash-runaway'}).textContent();
  assert.match(row, /requests z \d+(\.\d)?, suspended/);
  const normal = await page.locator('#agents tbody tr', {hasText: 'dash-w0'}).textContent();
  assert.doesNotMatch(normal, /requests z/);
  const shot = screenshotPath('dashboard-anomaly.png');
  await page.screenshot({path: shot, fullPage: true});
  console.log('screenshot: ' + shot);
  assert.deepEqual(unexpected(problems, false), []);
});

test('with auth on the page needs the admin token, and its cookie opens only the dashboard reads', async (t) => {
  const s = await startSluiced(POOL + `auth:
  admin_token: ${ADMIN}
  tokens:
    - token: ${AGENT_TOKEN}
      agent_prefix: "dash-"
`);
  t.after(() => stopSluiced(s));
  const {context, page, problems} = await openBrowser(t);

  // Refused: no token, a wrong one, an agent's token.
  for (const q of ['', '?token=wrong-token', '?token=' + AGENT_TOKEN]) {
    const r = await page.goto(s.base + '/' + q);
    assert.equal(r.status(), 401, 'GET /' + q);
    assert.match(await page.textContent('body'), /admin token/);
    assert.doesNotMatch(await page.content(), /wrong-token|dash-agent-token/, 'the token is never echoed');
    assert.equal((await context.cookies()).length, 0);
  }
  assert.equal((await api(s.base, 'GET', '/dashboard/app.js')).status, 401);
  assert.equal((await api(s.base, 'GET', '/v1/pools')).status, 401);

  // The login form (what a person types), then the page works live.
  await page.fill('input[name=token]', ADMIN);
  await Promise.all([page.waitForURL(s.base + '/'), page.click('button[type=submit]')]);
  assert.equal(page.url(), s.base + '/', 'the token is not left in the address bar');
  const cookies = await context.cookies();
  assert.equal(cookies.length, 1);
  assert.equal(cookies[0].name, 'sluice_dashboard');
  assert.equal(cookies[0].httpOnly, true);
  assert.equal(cookies[0].sameSite, 'Strict');
  assert.notEqual(cookies[0].value, ADMIN);
  problems.length = 0; // the 401 pages above logged their status on purpose
  await waitText(page, '#stream', 'live');
  const lease = await api(s.base, 'POST', '/v1/leases', {agent: 'dash-carol', input_tokens: 500, output_tokens: 50},
    {authorization: 'Bearer ' + AGENT_TOKEN});
  assert.equal(lease.status, 200, JSON.stringify(lease.body));
  await waitText(page, '#events tbody', lease.body.lease);
  await waitText(page, '#agents tbody', 'dash-carol');

  // The cookie reads what the page reads, and nothing more.
  const cookie = {cookie: 'sluice_dashboard=' + cookies[0].value};
  assert.equal((await api(s.base, 'GET', '/v1/pools', null, cookie)).status, 200);
  assert.equal((await api(s.base, 'GET', '/v1/agents', null, cookie)).status, 200);
  assert.equal((await api(s.base, 'POST', '/v1/leases', {agent: 'dash-x', input_tokens: 1, output_tokens: 1}, cookie)).status, 401);
  assert.equal((await api(s.base, 'POST', '/v1/admin/reload', {}, cookie)).status, 401);
  assert.equal((await api(s.base, 'GET', '/v1/tickets/t_1', null, cookie)).status, 401);
  assert.equal((await api(s.base, 'GET', '/v1/pools', null, {cookie: 'sluice_dashboard=' + '0'.repeat(64)})).status, 401);
  assert.equal((await api(s.base, 'GET', '/', null, {authorization: 'Bearer ' + ADMIN})).status, 200);

  const limitsServed = (await api(s.base, 'GET', '/v1/limits', null, cookie)).status === 200;
  const shot = screenshotPath('dashboard-auth.png');
  await page.screenshot({path: shot, fullPage: true});
  console.log('screenshot: ' + shot);
  assert.deepEqual(unexpected(problems, limitsServed), []);
  assert.doesNotMatch(s.output(), new RegExp(ADMIN), 'the admin token never reaches sluiced\'s output');
});
