// incident.test.mjs - the dashboard opened during an incident (issue 27 item 5): a page
// opened after the traffic shows it (sluiced keeps the last hour and inlines it into the
// page), a plain headless `chromium --screenshot` / `--dump-dom` already has the pools and
// the agents, `--virtual-time-budget` returns, the bucket that binds is marked, the
// high-rate events are folded unless asked for, and the layout holds at 1024, 1440 and
// 2560 px (no horizontal scroll, the tickets table beside the charts, not under them).
// Screenshots go to DASHBOARD_OUT (printed).
import {test} from 'node:test';
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import {existsSync, mkdtempSync, rmSync, statSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {CHROMIUM, WAIT_MS, api, openBrowser, screenshotPath, startSluiced, stopSluiced, unexpected,
        waitText} from './lib.mjs';

// A small input bucket, so a few big leases drain it and it is the one that binds.
const POOL = `pools:
  default:
    input_tpm: 100000
    output_tpm: 400000
    rpm: 6000
    max_queue_wait_s: 600
cold_start: full
`;

/** The traffic of the incident, before any page is open: grants that drain the input
 *  bucket, one queued behind them, an upstream 429, and resyncs from provider headers. */
async function incident(base) {
  const leases = [];
  for (let i = 1; i <= 4; i++) {
    const r = await api(base, 'POST', '/v1/leases', {agent: `inc-agent-${i}`, input_tokens: 20000, output_tokens: 100});
    assert.equal(r.status, 200, JSON.stringify(r.body));
    leases.push(r.body.lease);
  }
  const queued = await api(base, 'POST', '/v1/leases', {agent: 'inc-waiting', input_tokens: 60000, output_tokens: 100});
  assert.equal(queued.status, 202, JSON.stringify(queued.body));
  const s429 = await api(base, 'POST', `/v1/leases/${leases[0]}/settle`, {input_tokens: 20000, output_tokens: 0, got_429: true});
  assert.equal(s429.status, 200, JSON.stringify(s429.body));
  // Each settle resyncs from the provider's headers: 19,000 remaining is less room than the
  // pool believed at each lease's grant (the last was granted with 20,000 of room left;
  // design.md, "Compared with the pool at the lease's grant").
  for (const lease of leases.slice(1)) {
    const r = await api(base, 'POST', `/v1/leases/${lease}/settle`, {input_tokens: 19000, output_tokens: 90, headers: {
      'anthropic-ratelimit-input-tokens-limit': '100000', 'anthropic-ratelimit-input-tokens-remaining': '19000',
      'anthropic-ratelimit-input-tokens-reset': new Date(Date.now() + 30000).toISOString()}});
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  return queued.body.ticket;
}

/** Headless Chromium run as a person would, no driver: `args` plus the URL; bounded. */
function chromiumPlain(args, url) {
  const profile = mkdtempSync(join(tmpdir(), 'sluice-chromium-plain-'));
  try {
    const r = spawnSync(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      `--user-data-dir=${profile}`, ...args, url], {encoding: 'utf8', timeout: 60000});
    return r;
  } finally {
    rmSync(profile, {recursive: true, force: true});
  }
}

test('a page opened after the incident shows it: history, pools and agents at first paint', async (t) => {
  const s = await startSluiced(POOL);
  t.after(() => stopSluiced(s));
  const ticket = await incident(s.base);
  await new Promise((r) => setTimeout(r, 8000)); // one more 5 s pool sample after the traffic

  // GET /v1/history: samples, bins, events (the resyncs folded to a count by default).
  const h = await api(s.base, 'GET', '/v1/history');
  assert.equal(h.status, 200, JSON.stringify(h.body));
  assert.ok(h.body.pools.default.length >= 2, 'two samples of the pool or more');
  const bins = h.body.bins.reduce((a, b) => ({g: a.g + b.grants, u: a.u + b.upstream_429}), {g: 0, u: 0});
  assert.equal(bins.u, 1, 'the upstream 429 is in the bins');
  assert.ok(bins.g >= 4, 'the grants are in the bins');
  assert.ok(!h.body.events.some((e) => e.event === 'resync'), 'resync events are folded');
  assert.ok(h.body.folded.resync >= 3, 'and counted: ' + JSON.stringify(h.body.folded));
  const all = await api(s.base, 'GET', '/v1/history?fold=none');
  assert.ok(all.body.events.some((e) => e.event === 'resync'), 'fold=none lists them');
  const seqs = all.body.events.map((e) => e.seq);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), 'oldest first');
  const bad = await api(s.base, 'GET', '/v1/history?after=-1');
  assert.equal(bad.status, 400);
  assert.match(bad.body.error.message, /after: '-1'/);

  // A plain headless Chromium, no driver, no waiting for the page's own requests.
  const dom = chromiumPlain(['--dump-dom'], s.base + '/');
  assert.equal(dom.status, 0, dom.stderr);
  for (const want of ['pool default', 'inc-agent-1', 'inc-agent-4', 'inc-waiting', 'binds', ticket])
    assert.ok(dom.stdout.includes(want), `--dump-dom has no ${want}`);
  const budget = chromiumPlain(['--virtual-time-budget=3000', '--dump-dom'], s.base + '/');
  assert.equal(budget.status, 0, `--virtual-time-budget did not return: ${budget.error || budget.stderr}`);
  assert.ok(budget.stdout.includes('inc-agent-2'), '--virtual-time-budget page has the agents');
  const shot = screenshotPath('dashboard-plain-screenshot.png');
  const png = chromiumPlain([`--screenshot=${shot}`, '--window-size=1280,1600'], s.base + '/');
  assert.equal(png.status, 0, png.stderr);
  assert.ok(existsSync(shot) && statSync(shot).size > 10000, 'a screenshot with content');
  console.log('screenshot (plain chromium --screenshot): ' + shot);

  // The same page in the driven browser: the overlay counts what came before it opened.
  const {page, problems} = await openBrowser(t);
  await page.goto(s.base + '/');
  await waitText(page, '#overlay-summary', '1 upstream 429s');
  await waitText(page, '#agents tbody', 'inc-agent-3');
  const marked = await page.locator('div.pool[data-pool="default"] .chart.binding').count();
  assert.equal(marked, 1, 'exactly one bucket is marked as binding');
  assert.equal(await page.locator('.chart.binding').getAttribute('data-bucket'), 'input_tokens');
  assert.ok(!(await page.locator('#events tbody').textContent()).includes('resync'), 'resyncs folded');
  await waitText(page, '#folded', 'resync x');
  await page.locator('#show-all').check();
  await waitText(page, '#events tbody', 'resync');
  assert.deepEqual(unexpected(problems, false), []);
});

for (const width of [1024, 1440, 2560]) {
  test(`the layout holds at ${width} px: no horizontal scroll, tickets beside the charts, charts readable`, async (t) => {
    const s = await startSluiced(POOL);
    t.after(() => stopSluiced(s));
    const ticket = await incident(s.base);
    const {page, problems} = await openBrowser(t);
    await page.setViewportSize({width, height: 1400});
    await page.goto(s.base + '/');
    await waitText(page, 'div.pool[data-pool="default"]', ticket);
    const m = await page.evaluate(() => {
      const pool = document.querySelector('div.pool[data-pool="default"]');
      const side = pool.querySelector('.side').getBoundingClientRect();
      const tickets = [...pool.querySelectorAll('.side table')].pop().getBoundingClientRect();
      const charts = pool.querySelector('.charts').getBoundingClientRect();
      const svgs = [...pool.querySelectorAll('.chart svg')].map((e) => e.getBoundingClientRect());
      return {scroll: document.documentElement.scrollWidth, inner: window.innerWidth, side, tickets, charts,
              minChartW: Math.min(...svgs.map((r) => r.width)), minChartH: Math.min(...svgs.map((r) => r.height))};
    });
    const shot = screenshotPath(`dashboard-${width}.png`);
    await page.screenshot({path: shot, fullPage: true});
    console.log(`screenshot at ${width} px: ${shot}`);
    assert.ok(m.scroll <= m.inner, `the page scrolls sideways: ${m.scroll} > ${m.inner}`);
    assert.ok(m.tickets.right <= m.side.right + 1, `the tickets table runs out of its column: ${JSON.stringify(m)}`);
    const beside = m.charts.left >= m.side.right; // two columns...
    const below = m.charts.top >= m.tickets.bottom; // ...or stacked on a narrow screen
    assert.ok(beside || below, `the tickets table and the charts overlap: ${JSON.stringify(m)}`);
    assert.ok(m.minChartW >= 380 && m.minChartH >= 110, `a chart too small to read: ${JSON.stringify(m)}`);
    assert.deepEqual(unexpected(problems, false), []);
  });
}
