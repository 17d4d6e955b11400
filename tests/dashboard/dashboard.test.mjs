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
import {ADMIN, AGENT_TOKEN, WAIT_MS, api, openBrowser, screenshotPath, startSluiced, stopSluiced, unexpected,
        waitText} from './lib.mjs';

const POOL = `pools:
  default:
    input_tpm: 600000
    output_tpm: 120000
    rpm: 600
    concurrency: 1
    max_queue_wait_s: 600
`;

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
