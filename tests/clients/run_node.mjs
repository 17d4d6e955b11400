// run_node.mjs - the conformance runner of the Node client (clients/node): every op of the shared
// client conformance cases (tests/clients/cases.json, format and contract in
// tests/clients/README.md) made through the package's public API, answers compared as subsets,
// errors by the most specific shared class name and the API code.
//
// Usage: SLUICE_URL=http://127.0.0.1:PORT node tests/clients/run_node.mjs [CASE_NAME...] CASES.json
// (tests/clients/driver.py starts sluiced with the file's `config` and sends each case's
// `before`). Prints "ok NAME" or "FAIL NAME: step N (op): why" per case, then a summary; exits
// 0 when every case passed, 1 otherwise, 2 on a bad command line or case file.
import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { Client } from '../../clients/node/src/index.js';

const DEFAULT_AGENT = 'conformance';
const CLIENT_MAX_WAIT_S = 30; // an acquire's own bound unless the step's options.max_wait_s says
// The shared class names (tests/clients/README.md "Error classes"); SluiceError is "Error".
const CLASSES = new Set(['InvalidRequest', 'NotFound', 'Forbidden', 'LimitExceeded', 'Rejected',
                         'Unreachable', 'Suspended', 'Conflict', 'ExceedsCapacity']);

const clients = new Map(); // "agent\0pool\0role" -> Client
const owner = new Map();   // lease id -> the Client that acquired it

function client(agent = DEFAULT_AGENT, pool, role) {
  const key = [agent, pool ?? '', role ?? ''].join('\0');
  if (!clients.has(key))
    clients.set(key, new Client({ url: process.env.SLUICE_URL, token: process.env.SLUICE_TOKEN || null,
                                  agent, pool, role, requestTimeout: 5, failClosed: true }));
  return clients.get(key);
}
/* A lease by id, on the client that acquired it (settle, cancel and renew go through it). */
const leaseOf = (id) => (owner.get(id) ?? client()).attachLease(id);

const OPS = {
  async acquire(a, o) {
    const { agent, pool, role, max_wait: maxWait, ...rest } = a;
    const c = client(agent, pool, role);
    // This client sends max_wait only when it checkpoints: so it does for a step that asks.
    const hold = maxWait !== undefined ? { checkpoint: () => {}, maxHold: maxWait } : {};
    const lease = await c.lease({ ...rest, ...hold, maxWait: o.max_wait_s ?? CLIENT_MAX_WAIT_S });
    owner.set(lease.id, c);
    return lease.answer;
  },
  async settle(a) {
    const { lease, ...usage } = a;
    return (await leaseOf(lease).settle(usage)).answer;
  },
  cancel: (a) => leaseOf(a.lease).cancel(),
  renew: (a) => leaseOf(a.lease).extend(a.ttl),
  get_lease: (a) => client().getTicket(a.ticket, { wait: a.wait ?? 0 }),
  estimate: (a) => client().estimate(a.request, { api: a.api, pool: a.pool, model: a.model }),
  async limit_check(a, o) {
    const c = client(a.agent);
    const opts = { key: a.key, hits: a.hits ?? 1, action: a.action, wait: a.wait ?? 0 };
    if (o.enforce) return c.withLimit({ limit: a.limit, ...opts }, (answer) => answer.body);
    return (await c.check(a.limit, opts)).body;
  },
  limit_release: (a) => client(a.agent).release(a.limit, { key: a.key }),
  limit_report: (a) => client(a.agent).report(a.limit, { successes: a.successes ?? 0, errors: a.errors ?? 0, key: a.key }),
  task_put: (a) => client().putTask(a.task, { role: a.role, dependsOn: a.depends_on, state: a.state }),
  pool_get: (a) => client().getPool(a.pool),
};

/* The most specific shared class name an error is (its prototype chain, nearest first). */
function classOf(e) {
  for (let p = Object.getPrototypeOf(e); p && p !== Error.prototype; p = Object.getPrototypeOf(p))
    if (CLASSES.has(p.constructor.name)) return p.constructor.name;
  return 'Error';
}

/* "$var.field[.sub...]" -> that saved answer's field, keeping its JSON type; throws when absent. */
function substitute(v, saved) {
  if (typeof v === 'string' && v.startsWith('$') && v.includes('.')) {
    const [name, ...path] = v.slice(1).split('.');
    if (!(name in saved)) throw new Error(`${v}: nothing was saved as "${name}"`);
    let x = saved[name];
    for (const p of path) {
      if (!x || typeof x !== 'object' || !(p in x)) throw new Error(`${v}: the saved answer has no "${p}"`);
      x = x[p];
    }
    return x;
  }
  if (Array.isArray(v)) return v.map((x) => substitute(x, saved));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substitute(x, saved)]));
  return v;
}

/* null when `want` is a subset of `got`, else where not. */
function mismatch(want, got, where = 'answer') {
  if (want && typeof want === 'object' && !Array.isArray(want)) {
    if (!got || typeof got !== 'object' || Array.isArray(got)) return `${where}: expected an object, got ${JSON.stringify(got)}`;
    for (const [k, w] of Object.entries(want)) {
      if (!(k in got)) return `${where}.${k}: missing (got ${JSON.stringify(got).slice(0, 300)})`;
      const m = mismatch(w, got[k], `${where}.${k}`);
      if (m) return m;
    }
    return null;
  }
  if (Array.isArray(want)) {
    if (!Array.isArray(got) || got.length !== want.length) return `${where}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
    for (let i = 0; i < want.length; i++) {
      const m = mismatch(want[i], got[i], `${where}[${i}]`);
      if (m) return m;
    }
    return null;
  }
  return isDeepStrictEqual(want, got) ? null : `${where}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
}

/* One step; resolves [why or null, the answer to save]. */
async function runStep(step, saved) {
  let args, expect;
  try {
    args = substitute(step.args ?? {}, saved);
    expect = substitute(step.expect ?? { ok: {} }, saved);
  } catch (e) {
    return [e.message, null];
  }
  if (!OPS[step.op]) return [`unknown op "${step.op}"`, null];
  let answer;
  try {
    answer = await OPS[step.op](args, step.options ?? {});
  } catch (e) {
    const cls = classOf(e);
    if (!('error' in expect)) return [`expected an answer, got ${cls} (${e.code}): ${e.message}`, null];
    if (cls !== expect.error || ('code' in expect && e.code !== expect.code))
      return [`expected ${expect.error} (${expect.code ?? "any code"}), got ${cls} (${e.code}): ${e.message}`, null];
    return [null, e.body && typeof e.body === 'object' ? { ...e.body, message: e.message } : { message: e.message }];
  }
  if (!('ok' in expect)) return [`expected ${JSON.stringify(expect)}, got an answer ${JSON.stringify(answer).slice(0, 300)}`, null];
  return [mismatch(expect.ok, answer), answer];
}

async function main() {
  const argv = process.argv.slice(2);
  if (!argv.length || !process.env.SLUICE_URL) {
    console.error('usage: SLUICE_URL=http://HOST:PORT node run_node.mjs [CASE_NAME...] CASES.json');
    return 2;
  }
  const only = new Set(argv.slice(0, -1));
  const doc = JSON.parse(readFileSync(argv.at(-1), 'utf8'));
  if (!Array.isArray(doc.cases)) {
    console.error(`${argv.at(-1)}: no "cases" list`);
    return 2;
  }
  const cases = doc.cases.filter((c) => !only.size || only.has(c.name));
  let failed = 0;
  for (const c of cases) {
    const saved = {};
    let why = null;
    for (let i = 0; i < (c.steps ?? []).length && !why; i++) {
      const [m, answer] = await runStep(c.steps[i], saved);
      if (m) why = `step ${i + 1} (${c.steps[i].op}): ${m}`;
      else if (c.steps[i].save) saved[c.steps[i].save] = answer && typeof answer === 'object' ? answer : {};
    }
    if (why) failed++;
    console.log(why ? `FAIL ${c.name}: ${why}` : `ok ${c.name}`);
  }
  console.log(failed ? `${failed} of ${cases.length} cases failed` : `all ${cases.length} cases passed`);
  for (const c of clients.values()) c.close();
  return failed ? 1 : 0;
}

process.exitCode = await main();
