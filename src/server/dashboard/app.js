/* app.js - the live dashboard: /v1/events (EventSource) plus periodic GETs of /v1/pools,
 * /v1/agents, /v1/fleet and /v1/limits, drawn as tables and SVG. No library, nothing from elsewhere.
 *
 * Every value from the API reaches the page as text (textContent, SVG attributes), never
 * as markup. The queue's tickets with their weight and ETA come from the `queued` events
 * this page has seen: /v1/pools gives only the queue's depth and its head's ETA, so a
 * ticket queued before the page opened counts in the depth but is not listed. */
'use strict';

const POLL_MS = 2000;          /* /v1/pools and /v1/agents */
const LIMITS_POLL_MS = 5000;
const HISTORY = 180;           /* samples kept per pool: 6 minutes at POLL_MS */
const BIN_S = 2;               /* the overlay's bins */
const BINS = 60;               /* 2 minutes */
const EVENTS_SHOWN = 40;
const SVG_NS = 'http://www.w3.org/2000/svg';
const EVENT_NAMES = ['granted', 'queued', 'rejected', 'settled', 'cancelled', 'reaped', 'unclaimed',
  'ticket_cancelled', 'ticket_expired', 'ticket_rejected', 'upstream_429', 'margin', 'alert',
  'limit_adopted', 'resync', 'suspension'];

const state = {
  pools: new Map(),    /* name -> {info, history: [{t, level: {}, capacity: {}, inflight, depth}]} */
  agents: [],
  fleet: null,         /* GET /v1/fleet */
  tickets: new Map(),  /* ticket -> {pool, agent, weight, eta, at} (from events) */
  bins: new Map(),     /* floor(ts / BIN_S) -> {grants, upstream429, refused} */
  events: [],          /* newest first */
  alerts: new Map(),   /* "pool/name" -> {pool, name, since, source} */
  clockSkewS: 0,       /* server time - this browser's time, from the events */
  problems: new Map(), /* what failed, by source */
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
      const sample = {t, level: {}, capacity: {}, inflight: p.leases_in_flight, depth: p.queue.depth};
      for (const [b, v] of Object.entries(p.buckets || {})) {
        sample.level[b] = v.level;
        sample.capacity[b] = v.capacity;
      }
      entry.history.push(sample);
      if (entry.history.length > HISTORY) entry.history.shift();
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

function bin(ts) {
  const k = Math.floor(ts / BIN_S);
  let b = state.bins.get(k);
  if (!b) {
    b = {grants: 0, upstream429: 0, refused: 0};
    state.bins.set(k, b);
    const oldest = k - 2 * BINS;
    for (const key of state.bins.keys()) if (key < oldest) state.bins.delete(key);
  }
  return b;
}

function onEvent(name, ev) {
  if (typeof ev.ts === 'number') state.clockSkewS = ev.ts - Date.now() / 1000;
  switch (name) {
    case 'granted':
      bin(ev.ts).grants++;
      if (ev.ticket) state.tickets.delete(ev.ticket);
      break;
    case 'queued':
      state.tickets.set(ev.ticket, {pool: ev.pool, agent: ev.agent, weight: ev.weight,
        eta: ev.eta, at: ev.ts});
      break;
    case 'rejected':
      bin(ev.ts).refused++;
      break;
    case 'ticket_rejected':
      bin(ev.ts).refused++;
      state.tickets.delete(ev.ticket);
      break;
    case 'ticket_cancelled':
    case 'ticket_expired':
      state.tickets.delete(ev.ticket);
      break;
    case 'upstream_429':
      bin(ev.ts).upstream429++;
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
  state.events.unshift({name, ev});
  if (state.events.length > EVENTS_SHOWN) state.events.length = EVENTS_SHOWN;
  scheduleRender();
  schedulePoolsSoon();
}

function connectEvents() {
  const badge = document.getElementById('stream');
  const source = new EventSource('/v1/events');
  source.onopen = () => {
    badge.textContent = 'live';
    badge.className = 'badge on';
  };
  source.onerror = () => {
    badge.textContent = 'reconnecting';
    badge.className = 'badge off';
  };
  for (const name of EVENT_NAMES) {
    source.addEventListener(name, (m) => {
      let ev;
      try {
        ev = JSON.parse(m.data);
      } catch (e) {
        setProblem('events', 'an event that is not JSON: ' + e.message);
        return;
      }
      onEvent(name, ev);
    });
  }
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

/* The seed's one test, live: 429s above the axis, turn starts (grants) below. */
function renderOverlay() {
  const svg = document.getElementById('overlay');
  svg.replaceChildren();
  const W = 760, H = 170, left = 40, right = 10, mid = 85, half = 70;
  const end = Math.floor(nowS() / BIN_S);
  const counts = [];
  let max = 1, grants = 0, ups = 0, refused = 0;
  for (let k = end - BINS + 1; k <= end; k++) {
    const b = state.bins.get(k) || {grants: 0, upstream429: 0, refused: 0};
    counts.push(b);
    max = Math.max(max, b.grants, b.upstream429 + b.refused);
    grants += b.grants;
    ups += b.upstream429;
    refused += b.refused;
  }
  const bw = (W - left - right) / BINS;
  svg.appendChild(svgEl('line', {x1: left, x2: W - right, y1: mid, y2: mid, stroke: '#8c959f'}));
  svg.appendChild(svgEl('text', {x: 2, y: 14}, '429s'));
  svg.appendChild(svgEl('text', {x: 2, y: mid + 14}, 'turns'));
  svg.appendChild(svgEl('text', {x: left - 4, y: mid - half + 8, 'text-anchor': 'end'}, max));
  counts.forEach((b, i) => {
    const x = left + i * bw;
    const hu = (b.upstream429 / max) * half, hr = (b.refused / max) * half;
    if (hu) svg.appendChild(svgEl('rect', {x, y: mid - hu, width: bw - 1, height: hu, fill: '#cf222e'}));
    if (hr) svg.appendChild(svgEl('rect', {x, y: mid - hu - hr, width: bw - 1, height: hr, fill: '#fb8f44'}));
    const hg = (b.grants / max) * half;
    if (hg) svg.appendChild(svgEl('rect', {x, y: mid + 1, width: bw - 1, height: hg, fill: '#0969da'}));
  });
  for (let s = 0; s <= BINS * BIN_S; s += 30) {
    const x = W - right - (s / BIN_S) * bw;
    svg.appendChild(svgEl('text', {x, y: H - 4, 'text-anchor': 'middle'}, s === 0 ? 'now' : '-' + s + ' s'));
  }
  document.getElementById('overlay-summary').textContent =
    'last 2 minutes: ' + grants + ' grants, ' + ups + ' upstream 429s (red), ' + refused +
    ' refused by sluice (orange)';
}

/* One bucket over time: its level (filled), capacity (limit x margin), the limit and the
 * margin floor's capacity. */
function bucketChart(entry, bucket) {
  const b = entry.info.buckets[bucket];
  const floor = entry.info.config ? entry.info.config.margin_floor : null;
  const W = 300, H = 90;
  const svg = svgEl('svg', {viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': bucket});
  const top = b.limit > 0 ? b.limit : Math.max(1, b.capacity);
  const y = (v) => H - 4 - (Math.max(0, v) / top) * (H - 14);
  const x = (i) => (i / (HISTORY - 1)) * W;
  const h = entry.history.filter((s) => s.level[bucket] !== undefined);
  const off = HISTORY - h.length;
  if (h.length > 1) {
    let area = 'M' + x(off) + ',' + y(0);
    let cap = '';
    h.forEach((s, i) => {
      area += ' L' + x(off + i) + ',' + y(s.level[bucket]);
      cap += (i ? ' L' : 'M') + x(off + i) + ',' + y(s.capacity[bucket]);
    });
    area += ' L' + x(off + h.length - 1) + ',' + y(0) + ' Z';
    svg.appendChild(svgEl('path', {d: area, fill: '#b6d7ff', stroke: '#0969da'}));
    svg.appendChild(svgEl('path', {d: cap, fill: 'none', stroke: '#bc4c00', 'stroke-width': 1.5}));
  }
  svg.appendChild(svgEl('line', {x1: 0, x2: W, y1: y(top), y2: y(top), stroke: '#8c959f', 'stroke-dasharray': '4 3'}));
  if (floor !== null && b.limit > 0)
    svg.appendChild(svgEl('line', {x1: 0, x2: W, y1: y(b.limit * floor), y2: y(b.limit * floor),
      stroke: '#cf222e', 'stroke-dasharray': '2 3'}));
  svg.appendChild(svgEl('text', {x: 4, y: 10}, bucket + ': ' + fmt(b.level, 0) + ' of ' + fmt(b.capacity, 0) +
    ' (limit ' + fmt(b.limit) + ')'));
  const box = el('div', null, 'chart');
  box.appendChild(svg);
  return box;
}

function flightChart(entry) {
  const W = 300, H = 90;
  const svg = svgEl('svg', {viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'leases in flight'});
  const h = entry.history;
  const max = Math.max(1, ...h.map((s) => Math.max(s.inflight, s.depth)));
  const y = (v) => H - 4 - (v / max) * (H - 14);
  const off = HISTORY - h.length;
  const x = (i) => ((off + i) / (HISTORY - 1)) * W;
  for (const [key, color] of [['inflight', '#1a7f37'], ['depth', '#8250df']]) {
    if (h.length < 2) break;
    let d = '';
    h.forEach((s, i) => { d += (i ? ' L' : 'M') + x(i) + ',' + y(s[key]); });
    svg.appendChild(svgEl('path', {d, fill: 'none', stroke: color, 'stroke-width': 1.5}));
  }
  const last = h[h.length - 1] || {inflight: 0, depth: 0};
  svg.appendChild(svgEl('text', {x: 4, y: 10}, 'in flight ' + last.inflight + ' (green), queued ' + last.depth +
    ' (purple), max ' + max));
  const box = el('div', null, 'chart');
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
    const side = el('div');
    side.appendChild(el('h3', 'pool ' + p.name));
    side.appendChild(statsTable(p));
    side.appendChild(ticketsTable(p.name));
    const charts = el('div', null, 'charts');
    for (const bucket of Object.keys(p.buckets || {})) charts.appendChild(bucketChart(entry, bucket));
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
}

/* Whatever shape GET /v1/limits has: a table per array of objects, else key: value rows. */
function renderLimits(body) {
  const root = document.getElementById('limits');
  root.replaceChildren();
  const list = Array.isArray(body) ? body : Array.isArray(body.limits) ? body.limits : null;
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

connectEvents();
pollPools();
pollAgents();
pollLimits();
pollFleet();
setInterval(pollFleet, POLL_MS);
setInterval(pollPools, POLL_MS);
setInterval(pollAgents, POLL_MS);
setInterval(render, 1000); /* the overlay's time axis moves on when nothing happens */
