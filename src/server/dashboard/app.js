/* app.js - the live dashboard: the data sluiced inlines into the page (its first paint),
 * then GET /v1/history every second (new samples, 429/grant bins, events) and periodic
 * GETs of /v1/pools, /v1/agents, /v1/fleet and /v1/limits, drawn as tables and SVG. No
 * library, nothing from elsewhere.
 *
 * Why polls and not the /v1/events stream: a page must finish loading for a plain headless
 * `chromium --screenshot` (and `--virtual-time-budget`, which waits for every fetch to end
 * and so never returns while a stream is open), and sluiced keeps the last hour anyway
 * (history.c), so a poll a second loses nothing.
 *
 * Every value from the API reaches the page as text (textContent, SVG attributes), never
 * as markup. The queue's tickets with their weight and ETA come from the `queued` events
 * in sluiced's recent events: /v1/pools gives only the queue's depth and its head's ETA. */
'use strict';

const POLL_MS = 2000;          /* /v1/pools and /v1/agents */
const HISTORY_POLL_MS = 1000;  /* /v1/history: samples, bins, events */
const LIMITS_POLL_MS = 5000;
const HISTORY_S = 3600;        /* the charts' span: the hour sluiced keeps */
const BIN_S = 2;               /* sluiced's bins (history.c) */
const SPANS = {'2 minutes': [120, 2], '15 minutes': [900, 10], '1 hour': [3600, 30]}; /* span, bin */
const EVENTS_SHOWN = 40;
const FOLDED = new Set(['resync', 'margin']); /* high-rate kinds, counted unless asked for */
const SVG_NS = 'http://www.w3.org/2000/svg';
const state = {
  pools: new Map(),    /* name -> {info, history: [{t, margin, inflight, depth, buckets: {b: [level, capacity, limit]}}]} */
  agents: [],
  fleet: null,         /* GET /v1/fleet */
  tickets: new Map(),  /* ticket -> {pool, agent, weight, eta, at} (from events) */
  bins: new Map(),     /* floor(ts / BIN_S) -> {grants, upstream429, refused} */
  events: [],          /* newest first */
  alerts: new Map(),   /* "pool/name" -> {pool, name, since, source} */
  clockSkewS: 0,       /* server time - this browser's time, from /v1/history */
  problems: new Map(), /* what failed, by source */
  seq: 0,              /* the last event read from /v1/history */
  lastSampleT: 0,      /* the newest pool sample read */
  folded: {},          /* high-rate events counted, by kind (since sluiced started) */
  showAll: false,      /* show the high-rate events too (fold=none) */
  span: '2 minutes',   /* the overlay's span */
};

/* ---- DOM helpers ------------------------------------------------------------------ */

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el('td', c));
  return tr;
}

function fmt(n, digits) {
  if (n === null || n === undefined) return '-';
  if (typeof n !== 'number') return String(n);
  if (Number.isInteger(n)) return n.toLocaleString('en-US');
  return n.toFixed(digits === undefined ? 2 : digits);
}

function fmtTime(ts) {
  const d = new Date(ts * 1000);
  return d.toISOString().slice(11, 23);
}

function nowS() {
  return Date.now() / 1000 + state.clockSkewS;
}

function setProblem(source, message) {
  if (message) state.problems.set(source, message);
  else state.problems.delete(source);
  const p = document.getElementById('problem');
  const all = [...state.problems.values()];
  p.hidden = all.length === 0;
  p.textContent = all.join('; ');
}

/* ---- data in ---------------------------------------------------------------------- */

async function getJSON(path) {
  const r = await fetch(path, {cache: 'no-store', credentials: 'same-origin'});
  if (!r.ok) {
    const err = new Error(path + ': HTTP ' + r.status);
    err.status = r.status;
    throw err;
  }
  return r.json();
}

async function pollPools() {
  try {
    const body = await getJSON('/v1/pools');
    const t = nowS();
    const seen = new Set();
    for (const p of body.pools || []) {
      seen.add(p.name);
      let entry = state.pools.get(p.name);
      if (!entry) {
        entry = {info: p, history: []};
        state.pools.set(p.name, entry);
      }
      entry.info = p;
      entry.infoT = t;
    }
    for (const name of [...state.pools.keys()]) if (!seen.has(name)) state.pools.delete(name);
    setProblem('pools', null);
  } catch (e) {
    setProblem('pools', e.message);
  }
  scheduleRender();
}

async function pollAgents() {
  try {
    const body = await getJSON('/v1/agents');
    state.agents = body.agents || [];
    setProblem('agents', null);
  } catch (e) {
    setProblem('agents', e.message);
  }
  scheduleRender();
}

async function pollFleet() {
  try {
    state.fleet = await getJSON('/v1/fleet');
    setProblem('fleet', null);
  } catch (e) {
    setProblem('fleet', e.message);
  }
  scheduleRender();
}

/* GET /v1/limits: the panel shows only when sluiced serves the route (a 404 hides it). */
async function pollLimits() {
  const panel = document.getElementById('limits-panel');
  try {
    const body = await getJSON('/v1/limits');
    panel.hidden = false;
    renderLimits(body);
    setProblem('limits', null);
    setTimeout(pollLimits, LIMITS_POLL_MS);
  } catch (e) {
    panel.hidden = true;
    if (e.status !== 404) {
      setProblem('limits', e.message);
      setTimeout(pollLimits, LIMITS_POLL_MS);
    }
  }
}

/* Adds sluiced's samples, bins and events (a /v1/history answer or the page's inlined copy). */
function takeHistory(h) {
  if (!h) return;
  if (typeof h.now === 'number') state.clockSkewS = h.now - Date.now() / 1000;
  for (const [name, samples] of Object.entries(h.pools || {})) {
    let entry = state.pools.get(name);
    if (!entry) continue; /* a pool /v1/pools does not list (any more) */
    for (const smp of samples) {
      if (entry.history.length && smp.t <= entry.history[entry.history.length - 1].t) continue;
      entry.history.push(smp);
      state.lastSampleT = Math.max(state.lastSampleT, smp.t);
    }
    const oldest = nowS() - HISTORY_S;
    while (entry.history.length && entry.history[0].t < oldest) entry.history.shift();
  }
  for (const b of h.bins || []) state.bins.set(Math.floor(b.t / BIN_S), b);
  const oldestBin = Math.floor((nowS() - HISTORY_S) / BIN_S);
  for (const key of state.bins.keys()) if (key < oldestBin) state.bins.delete(key);
  for (const ev of h.events || []) {
    if (ev.seq <= state.seq) continue;
    state.seq = ev.seq;
    onEvent(ev.event, ev);
  }
  if (typeof h.seq === 'number' && !state.showAll) state.seq = Math.max(state.seq, h.seq);
  if (h.folded) state.folded = h.folded;
}

function onEvent(name, ev) {
  switch (name) {
    case 'granted':
      if (ev.ticket) state.tickets.delete(ev.ticket);
      break;
    case 'queued':
      state.tickets.set(ev.ticket, {pool: ev.pool, agent: ev.agent, weight: ev.weight,
        eta: ev.eta, at: ev.ts});
      break;
    case 'ticket_rejected':
    case 'ticket_cancelled':
    case 'ticket_expired':
      state.tickets.delete(ev.ticket);
      break;
    case 'suspension': /* the agents table and the fleet's count change now */
      pollAgents();
      pollFleet();
      break;
    case 'alert': {
      /* an agent's alert (anomaly) is its own: one per agent */
      const key = (ev.pool || '') + '/' + ev.alert + (ev.agent ? '/' + ev.agent : '');
      if (ev.active) state.alerts.set(key, {pool: ev.pool, name: ev.alert, since: ev.ts, agent: ev.agent});
      else state.alerts.delete(key);
      break;
    }
    default:
      break;
  }
  if (FOLDED.has(name) && !state.showAll) return;
  state.events.unshift({name, ev});
  if (state.events.length > EVENTS_SHOWN) state.events.length = EVENTS_SHOWN;
  scheduleRender();
  schedulePoolsSoon();
}

async function pollHistory() {
  const badge = document.getElementById('stream');
  try {
    const since = state.lastSampleT;
    const h = await getJSON('/v1/history?since=' + since + '&after=' + state.seq +
                            (state.showAll ? '&fold=none' : ''));
    takeHistory(h);
    badge.textContent = 'live';
    badge.className = 'badge on';
    setProblem('history', null);
  } catch (e) {
    badge.textContent = 'reconnecting';
    badge.className = 'badge off';
    setProblem('history', e.message);
  }
  scheduleRender();
}

/* An event changes the buckets: fetch them soon, at most every 250 ms. */
let poolsSoon = null;
function schedulePoolsSoon() {
  if (poolsSoon) return;
  poolsSoon = setTimeout(() => {
    poolsSoon = null;
    pollPools();
  }, 250);
}

/* ---- drawing ---------------------------------------------------------------------- */

let renderPending = false;
function scheduleRender() {
  if (renderPending) return;
  renderPending = true;
  setTimeout(() => {
    renderPending = false;
    render();
  }, 100);
}

function render() {
  document.getElementById('clock').textContent = new Date(nowS() * 1000).toISOString().slice(0, 19) + 'Z';
  renderAlerts();
  renderOverlay();
  renderPools();
  renderAgents();
  renderFleet();
  renderEvents();
}

function renderAlerts() {
  const ul = document.getElementById('alerts');
  ul.replaceChildren();
  const items = [];
  for (const entry of state.pools.values())
    for (const a of entry.info.alerts || []) items.push({pool: entry.info.name, name: a, source: 'pool state'});
  for (const a of state.alerts.values()) {
    if (a.agent) continue; /* listed from the agents below, with the metric and z */
    if (!items.some((i) => i.pool === a.pool && i.name === a.name))
      items.push({pool: a.pool, name: a.name, source: 'raised ' + fmtTime(a.since)});
  }
  for (const ag of state.agents)
    if (ag.estimate_error_alert) items.push({pool: null, name: 'estimate_error', source: 'agent ' + ag.name});
  for (const ag of state.agents)
    if (ag.anomaly) items.push({pool: null, name: 'anomaly', source: 'agent ' + ag.name + ', ' + anomalyText(ag)});
  if (items.length === 0) {
    ul.appendChild(el('li', 'none raised', 'quiet'));
    return;
  }
  for (const i of items) {
    const li = el('li');
    li.appendChild(el('span', i.name, 'alert-on'));
    li.appendChild(document.createTextNode(' ' + (i.pool ? 'pool ' + i.pool + ', ' : '') + i.source));
    ul.appendChild(li);
  }
}

/* The incident's one test, live: 429s above the axis, turn starts (grants) below, over
 * the chosen span (sluiced's 2 s bins summed into the span's bins). */
function renderOverlay() {
  const svg = document.getElementById('overlay');
  svg.replaceChildren();
  const [spanS, binS] = SPANS[state.span];
  const nBins = spanS / binS;
  const W = 760, H = 170, left = 40, right = 10, mid = 85, half = 70;
  const end = Math.floor(nowS() / binS);
  const counts = [];
  let max = 1, grants = 0, ups = 0, refused = 0;
  for (let k = end - nBins + 1; k <= end; k++) {
    const b = {grants: 0, upstream_429: 0, refused: 0};
    for (let j = (k * binS) / BIN_S; j < ((k + 1) * binS) / BIN_S; j++) {
      const x = state.bins.get(j);
      if (!x) continue;
      b.grants += x.grants;
      b.upstream_429 += x.upstream_429;
      b.refused += x.refused;
    }
    counts.push(b);
    max = Math.max(max, b.grants, b.upstream_429 + b.refused);
    grants += b.grants;
    ups += b.upstream_429;
    refused += b.refused;
  }
  const bw = (W - left - right) / nBins;
  svg.appendChild(svgEl('line', {x1: left, x2: W - right, y1: mid, y2: mid, stroke: '#8c959f'}));
  svg.appendChild(svgEl('text', {x: 2, y: 14}, '429s'));
  svg.appendChild(svgEl('text', {x: 2, y: mid + 14}, 'turns'));
  svg.appendChild(svgEl('text', {x: left - 4, y: mid - half + 8, 'text-anchor': 'end'}, max));
  counts.forEach((b, i) => {
    const x = left + i * bw;
    const hu = (b.upstream_429 / max) * half, hr = (b.refused / max) * half;
    if (hu) svg.appendChild(svgEl('rect', {x, y: mid - hu, width: Math.max(1, bw - 1), height: hu, fill: '#cf222e'}));
    if (hr) svg.appendChild(svgEl('rect', {x, y: mid - hu - hr, width: Math.max(1, bw - 1), height: hr, fill: '#fb8f44'}));
    const hg = (b.grants / max) * half;
    if (hg) svg.appendChild(svgEl('rect', {x, y: mid + 1, width: Math.max(1, bw - 1), height: hg, fill: '#0969da'}));
  });
  const tick = spanS / 4;
  for (let sec = 0; sec <= spanS; sec += tick) {
    const x = W - right - (sec / binS) * bw;
    const label = sec === 0 ? 'now' : sec >= 120 ? '-' + Math.round(sec / 60) + ' min' : '-' + sec + ' s';
    svg.appendChild(svgEl('text', {x, y: H - 4, 'text-anchor': 'middle'}, label));
  }
  document.getElementById('overlay-summary').textContent =
    'last ' + state.span + ': ' + grants + ' grants, ' + ups + ' upstream 429s (red), ' + refused +
    ' refused by sluice (orange)';
}

/* The bucket that binds: the one with the least of its capacity left now. */
function bindingBucket(info) {
  let best = null, least = Infinity;
  for (const [name, b] of Object.entries(info.buckets || {})) {
    const left = b.capacity > 0 ? b.level / b.capacity : 0;
    if (left < least) least = left, best = name;
  }
  return best;
}

/* What the charts span: the samples sluiced kept (an hour at most), 2 minutes at least. */
function chartSpanS() {
  let oldest = nowS();
  for (const entry of state.pools.values()) if (entry.history.length) oldest = Math.min(oldest, entry.history[0].t);
  return Math.min(HISTORY_S, Math.max(120, nowS() - oldest));
}

/* The x of time t on a chart W wide (the plot starts at `left`). */
function timeX(t, W, left) {
  const span = chartSpanS();
  return left + ((t - (nowS() - span)) / span) * (W - left);
}

function timeAxis(svg, W, H, left) {
  const span = chartSpanS();
  for (let q = 4; q >= 0; q--) {
    const ago = (span * q) / 4;
    const x = timeX(nowS() - ago, W, left);
    svg.appendChild(svgEl('text', {x: Math.max(left + 14, Math.min(x, W - 14)), y: H - 2, 'text-anchor': 'middle'},
      q === 0 ? 'now' : '-' + fmt(ago / 60, ago < 600 ? 1 : 0) + ' min'));
  }
}

/* One bucket over the charts' span (up to the last hour): its level (filled), capacity (limit x margin, the
 * margin line), the limit, the margin floor's capacity; values written on the chart. */
function bucketChart(entry, bucket, binding) {
  const b = entry.info.buckets[bucket];
  const floor = entry.info.config ? entry.info.config.margin_floor : null;
  const W = 600, H = 180, left = 54, top = 22, bottom = 14;
  const svg = svgEl('svg', {viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': bucket});
  const ceil = b.limit > 0 ? b.limit : Math.max(1, b.capacity);
  const y = (v) => H - bottom - (Math.max(0, v) / ceil) * (H - bottom - top);
  const h = entry.history.filter((s) => s.buckets && s.buckets[bucket]);
  const pts = h.map((s) => [timeX(s.t, W, left), s.buckets[bucket][0], s.buckets[bucket][1]]);
  pts.push([timeX(nowS(), W, left), b.level, b.capacity]); /* now, from /v1/pools */
  if (pts.length > 1) {
    let area = 'M' + pts[0][0] + ',' + y(0), cap = '';
    pts.forEach(([x, level, capacity], i) => {
      area += ' L' + x + ',' + y(level);
      cap += (i ? ' L' : 'M') + x + ',' + y(capacity);
    });
    area += ' L' + pts[pts.length - 1][0] + ',' + y(0) + ' Z';
    svg.appendChild(svgEl('path', {d: area, fill: binding ? '#ffd8b5' : '#b6d7ff', stroke: binding ? '#bc4c00' : '#0969da'}));
    svg.appendChild(svgEl('path', {d: cap, fill: 'none', stroke: '#bc4c00', 'stroke-width': 1.5, class: 'margin-line'}));
  }
  svg.appendChild(svgEl('line', {x1: left, x2: W, y1: y(ceil), y2: y(ceil), stroke: '#8c959f', 'stroke-dasharray': '4 3'}));
  svg.appendChild(svgEl('text', {x: left - 4, y: y(ceil) + 4, 'text-anchor': 'end'}, fmt(ceil, 0)));
  svg.appendChild(svgEl('text', {x: left - 4, y: y(0), 'text-anchor': 'end'}, '0'));
  svg.appendChild(svgEl('text', {x: left - 4, y: y(b.capacity) + 4, 'text-anchor': 'end', fill: '#bc4c00'},
    'x' + fmt(entry.info.margin, 2)));
  if (floor !== null && b.limit > 0)
    svg.appendChild(svgEl('line', {x1: left, x2: W, y1: y(b.limit * floor), y2: y(b.limit * floor),
      stroke: '#cf222e', 'stroke-dasharray': '2 3'}));
  timeAxis(svg, W, H, left);
  const box = el('div', null, 'chart' + (binding ? ' binding' : ''));
  box.dataset.bucket = bucket;
  const title = el('div', null, 'chart-title');
  title.appendChild(el('strong', bucket));
  if (binding) title.appendChild(el('span', 'binds', 'binds'));
  title.appendChild(document.createTextNode(' ' + fmt(b.level, 0) + ' of ' + fmt(b.capacity, 0) +
    ' (limit ' + fmt(b.limit) + ' x margin ' + fmt(entry.info.margin, 3) + ')'));
  box.appendChild(title);
  box.appendChild(svg);
  return box;
}

function flightChart(entry) {
  const W = 600, H = 180, left = 54, top = 22, bottom = 14;
  const svg = svgEl('svg', {viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'leases in flight'});
  const h = entry.history.slice();
  const info = entry.info;
  h.push({t: nowS(), inflight: info.leases_in_flight, depth: info.queue.depth});
  const max = Math.max(1, ...h.map((s) => Math.max(s.inflight, s.depth)));
  const y = (v) => H - bottom - (v / max) * (H - bottom - top);
  for (const [key, color] of [['inflight', '#1a7f37'], ['depth', '#8250df']]) {
    if (h.length < 2) break;
    let d = '';
    h.forEach((s, i) => { d += (i ? ' L' : 'M') + timeX(s.t, W, left) + ',' + y(s[key]); });
    svg.appendChild(svgEl('path', {d, fill: 'none', stroke: color, 'stroke-width': 1.5}));
  }
  svg.appendChild(svgEl('text', {x: left - 4, y: y(max) + 4, 'text-anchor': 'end'}, max));
  svg.appendChild(svgEl('text', {x: left - 4, y: y(0), 'text-anchor': 'end'}, '0'));
  timeAxis(svg, W, H, left);
  const box = el('div', null, 'chart');
  const title = el('div', null, 'chart-title');
  title.appendChild(el('strong', 'leases'));
  title.appendChild(document.createTextNode(' in flight ' + info.leases_in_flight + ' (green), queued ' +
    info.queue.depth + ' (purple)'));
  box.appendChild(title);
  box.appendChild(svg);
  return box;
}

function statsTable(p) {
  const t = el('table', null, 'stats');
  const totals = p.totals || {};
  const rows = [
    ['margin', fmt(p.margin, 3) + (p.config ? ' (floor ' + fmt(p.config.margin_floor, 2) + ')' : '')],
    ['queue depth', fmt(p.queue.depth)],
    ['head ETA', p.queue.eta === null ? '-' : fmt(p.queue.eta, 2) + ' s'],
    ['leases in flight', fmt(p.leases_in_flight)],
    ['granted / queued / rejected', fmt(totals.granted) + ' / ' + fmt(totals.queued) + ' / ' + fmt(totals.rejected)],
    ['upstream 429s', fmt(totals.upstream_429)],
    ['blocked until', p.blocked_until ? fmtTime(p.blocked_until) : '-'],
  ];
  for (const [k, v] of rows) t.appendChild(row([k, v]));
  return t;
}

function ticketsTable(pool) {
  const mine = [...state.tickets.entries()].filter(([, t]) => t.pool === pool);
  const box = el('div');
  box.appendChild(el('h3', 'Tickets (queued while this page was open)'));
  if (mine.length === 0) {
    box.appendChild(el('p', 'none', 'quiet'));
    return box;
  }
  const t = el('table');
  t.appendChild(row([el('th', 'ticket'), el('th', 'agent'), el('th', 'weight'), el('th', 'ETA when queued'), el('th', 'waiting')]));
  const now = nowS();
  for (const [id, tk] of mine)
    t.appendChild(row([id, tk.agent, fmt(tk.weight), fmt(tk.eta, 2) + ' s', fmt(now - tk.at, 1) + ' s']));
  box.appendChild(t);
  return box;
}

function renderPools() {
  const root = document.getElementById('pools');
  root.replaceChildren();
  for (const entry of state.pools.values()) {
    const p = entry.info;
    const card = el('div', null, 'pool');
    card.dataset.pool = p.name;
    const side = el('div', null, 'side');
    side.appendChild(el('h3', 'pool ' + p.name));
    side.appendChild(statsTable(p));
    side.appendChild(ticketsTable(p.name));
    const charts = el('div', null, 'charts');
    const binding = bindingBucket(p);
    for (const bucket of Object.keys(p.buckets || {})) charts.appendChild(bucketChart(entry, bucket, bucket === binding));
    if (Object.keys(p.buckets || {}).length === 0) charts.appendChild(el('p', 'no limits configured', 'quiet'));
    charts.appendChild(flightChart(entry));
    card.appendChild(side);
    card.appendChild(charts);
    root.appendChild(card);
  }
}

/* Who suspended an agent that is not flagged here: an admin, or another replica's judge. */
function suspendedBy(a) {
  const s = a.suspension;
  if (!s) return '';
  return s.reason === 'admin' ? ' (by an admin)' : ' (anomaly: ' + s.metric + ' z ' + fmt(s.z, 1) + ')';
}

function anomalyText(a) {
  if (!a.anomaly) return a.suspended ? 'suspended' + suspendedBy(a) : '';
  return a.anomaly.metric + ' z ' + fmt(a.anomaly.z, 1) + (a.suspended ? ', suspended' : '');
}

function seconds(v) {
  return v === null || v === undefined ? '–' : fmt(v, 2) + ' s';
}

function renderFleet() {
  const f = state.fleet;
  if (!f) return;
  const tbody = document.querySelector('#fleet tbody');
  const rate = f.upstream_429.rate === null ? '–' : fmt(100 * f.upstream_429.rate, 1) + '% (' +
    f.upstream_429.count + ' of ' + f.upstream_429.settled + ' in ' + fmt(f.window_s) + ' s)';
  const tokens = f.tokens_per_finished_task.tokens === null ? '–' :
    fmt(f.tokens_per_finished_task.tokens, 0) + ' (' + f.tokens_per_finished_task.finished_tasks + ' tasks)';
  const t = f.tasks;
  const flagged = f.anomalies.filter((a) => a.anomaly).length;
  const suspended = f.anomalies.filter((a) => a.suspended).length;
  tbody.replaceChildren(row([rate, tokens, seconds(f.task_time_s.p50), seconds(f.task_time_s.p95),
    seconds(f.critical_path_wait.total_s) + ', ' + f.critical_path_wait.blocked_tasks + ' blocked now',
    t.waiting + ' / ' + t.running + ' / ' + t.done,
    el('td', flagged + ' / ' + suspended, flagged || suspended ? 'alert-on' : '')]));
}

function renderAgents() {
  const tbody = document.querySelector('#agents tbody');
  tbody.replaceChildren();
  for (const a of state.agents) {
    const err = el('td', fmt(a.estimate_error, 3), a.estimate_error_alert ? 'alert-on' : '');
    tbody.appendChild(row([a.name, a.role, a.team || '', a.state, fmt(a.weight), fmt(a.leases), fmt(a.queued),
      fmt(a.repeats), err, fmt(a.tokens_in), fmt(a.tokens_out), fmt(a.got_429),
      el('td', anomalyText(a), a.anomaly || a.suspended ? 'alert-on' : '')]));
  }
  if (state.agents.length === 0) {
    const td = el('td', 'no agent has asked yet', 'quiet');
    td.colSpan = 13;
    tbody.appendChild(row([td]));
  }
}

function eventDetail(name, ev) {
  switch (name) {
    case 'granted': return 'in ' + ev.input_tokens + ', out ' + ev.output_tokens + ', weight ' + fmt(ev.weight) + ', waited ' + fmt(ev.waited, 2) + ' s';
    case 'queued': return 'weight ' + fmt(ev.weight) + ', ETA ' + fmt(ev.eta, 2) + ' s';
    case 'rejected':
    case 'ticket_rejected': return ev.reason + ', retry at ' + fmtTime(ev.retry_at);
    case 'settled': return 'in ' + ev.input_tokens + ', out ' + ev.output_tokens + ', estimate error ' + fmt(ev.estimate_error, 3);
    case 'upstream_429': return ev.kind + ', margin now ' + fmt(ev.margin, 3);
    case 'margin': return 'margin ' + fmt(ev.margin, 3);
    case 'alert': return ev.alert + (ev.active ? ' raised' : ' cleared') +
      (ev.metric ? ': ' + ev.metric + ' z ' + fmt(ev.z, 1) + (ev.suspended ? ', suspended' : '') : '');
    case 'limit_adopted':
    case 'resync': return ev.bucket + ' ' + fmt(ev.value);
    case 'suspension': return (ev.active ? 'suspended' : 'released') + ' (' + ev.reason + ')';
    default: return '';
  }
}

function renderEvents() {
  const tbody = document.querySelector('#events tbody');
  tbody.replaceChildren();
  for (const {name, ev} of state.events)
    tbody.appendChild(row([fmtTime(ev.ts), name, ev.pool || '', ev.agent || '', ev.lease || ev.ticket || '',
      eventDetail(name, ev)]));
  const f = state.folded || {};
  document.getElementById('folded').textContent = state.showAll ? 'showing every event' :
    'folded since sluiced started: ' + Object.entries(f).map(([k, n]) => k + ' x' + fmt(n)).join(', ');
}

/* Whatever shape GET /v1/limits has: a table per array of objects, else key: value rows. */
function renderLimits(body) {
  const root = document.getElementById('limits');
  root.replaceChildren();
  const list = Array.isArray(body) ? body : Array.isArray(body.limits) ? body.limits : null;
  if (list && list.length === 0) {
    root.appendChild(el('p', 'no action limits configured', 'quiet'));
    return;
  }
  if (list && list.every((x) => x && typeof x === 'object')) {
    const keys = [...new Set(list.flatMap((x) => Object.keys(x)))];
    const t = el('table');
    t.appendChild(row(keys.map((k) => el('th', k))));
    for (const x of list)
      t.appendChild(row(keys.map((k) => (x[k] !== null && typeof x[k] === 'object' ? JSON.stringify(x[k]) : fmt(x[k])))));
    root.appendChild(t);
    return;
  }
  root.appendChild(el('pre', JSON.stringify(body, null, 2)));
}

/* ---- start ------------------------------------------------------------------------ */

/* The data sluiced wrote into the page (dashboard.c): drawn before any request returns. */
function takeInitial() {
  const tag = document.getElementById('initial');
  if (!tag) return;
  let d;
  try {
    d = JSON.parse(tag.textContent);
  } catch (e) {
    setProblem('initial', 'the page\'s data is not JSON: ' + e.message);
    return;
  }
  if (d.history && typeof d.history.now === 'number') state.clockSkewS = d.history.now - Date.now() / 1000;
  for (const p of d.pools || []) state.pools.set(p.name, {info: p, infoT: nowS(), history: []});
  state.agents = d.agents || [];
  takeHistory(d.history);
}

function controls() {
  const span = document.getElementById('span');
  for (const name of Object.keys(SPANS)) {
    const o = el('option', name);
    o.value = name;
    span.appendChild(o);
  }
  span.value = state.span;
  span.addEventListener('change', () => { state.span = span.value; render(); });
  const all = document.getElementById('show-all');
  all.addEventListener('change', () => { state.showAll = all.checked; state.events = []; state.seq = 0; pollHistory(); });
}

controls();
takeInitial();
render();
pollHistory();
pollPools();
pollAgents();
pollLimits();
pollFleet();
setInterval(pollHistory, HISTORY_POLL_MS);
setInterval(pollFleet, POLL_MS);
setInterval(pollPools, POLL_MS);
setInterval(pollAgents, POLL_MS);
setInterval(render, 1000); /* the time axes move on when nothing happens */
