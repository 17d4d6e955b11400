// run_node.mjs - the shared client conformance cases (tests/clients/cases.json) through the Node
// client (clients/node): each step's op is made with the client's own API, its answer compared
// with the expected subset, its error with the expected class and API code.
//
// Usage: SLUICE_URL=http://127.0.0.1:PORT [SLUICE_TOKEN=...] node tests/clients/run_node.mjs CASES.json
// Prints one line per case ("ok NAME" or "FAIL NAME: ..."); exits 1 when any case failed, 2 on a
// bad case file. The sluiced at SLUICE_URL runs the case file's `config` (the caller starts it).
// Args use the HTTP API's field names; "$var.field" in args is a saved answer's field.
import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { Client, errorClasses } from '../../clients/node/src/index.js';

const DEFAULT_AGENT = 'conformance-node';
// The expected classes by name; "Error" is the base of every language's tree.
const CLASSES = { Error: errorClasses.SluiceError, ...errorClasses };

/* One op: resolves the answer compared with `expect.ok` (sluiced's own fields). */
const OPS = {
  async acquire(ctx, a) {
    const lease = await ctx.client(a.agent).lease({ ...a, maxWait: a.wait ?? 0, wait: undefined });
    ctx.leases.set(lease.id, lease);
    return { ...lease.answer, id: lease.id };
  },
  async settle(ctx, a) {
    const { lease, agent, ...usage } = a;
    return (await ctx.lease(agent, lease).settle(usage)).answer;
  },
  cancel: (ctx, a) => ctx.lease(a.agent, a.lease).cancel(),
  renew: (ctx, a) => ctx.lease(a.agent, a.lease).extend(a.ttl),
  get_lease: (ctx, a) => ctx.client(a.agent).getLease(a.lease),
  estimate: (ctx, a) => ctx.client(a.agent).estimate(a.request, { pool: a.pool, model: a.model, api: a.api }),
  async limit_check(ctx, a, expectsError) {
    const name = a.limit ?? a.name;
    const answer = await ctx.client(a.agent).check(name, a);
    if (!answer.allowed && expectsError) throw ctx.client(a.agent).limitError(name, answer);
    return answer.body;
  },
  limit_release: (ctx, a) => ctx.client(a.agent).release(a.limit ?? a.name, a),
  limit_report: (ctx, a) => ctx.client(a.agent).report(a.limit ?? a.name, a),
  task_put: (ctx, a) => ctx.client(a.agent).putTask(a.task, a),
  pool_get: (ctx, a) => ctx.client(a.agent).getPool(a.pool ?? 'default'),
};

/* "$var.field.sub" -> the saved answer's field; anything else as it is (recursively). */
function substitute(v, saved) {
  if (typeof v === 'string' && v.startsWith('$')) {
    const [name, ...path] = v.slice(1).split('.');
    if (!(name in saved)) throw new Error(`${v}: nothing was saved as "${name}"`);
    let x = saved[name];
    for (const p of path) x = x?.[p];
    if (x === undefined) throw new Error(`${v}: the saved answer has no such field`);
    return x;
  }
  if (Array.isArray(v)) return v.map((x) => substitute(x, saved));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substitute(x, saved)]));
  return v;
}

/* Where `got` differs from the expected subset `want`, as "path: want X, got Y"; null if none. */
function mismatch(want, got, path = 'answer') {
  if (want && typeof want === 'object' && !Array.isArray(want)) {
    if (!got || typeof got !== 'object') return `${path}: want an object, got ${JSON.stringify(got)}`;
    for (const [k, w] of Object.entries(want)) {
      const m = mismatch(w, got[k], `${path}.${k}`);
      if (m) return m;
    }
    return null;
  }
  if (Array.isArray(want)) {
    if (!Array.isArray(got) || got.length !== want.length) return `${path}: want ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
    for (let i = 0; i < want.length; i++) {
      const m = mismatch(want[i], got[i], `${path}[${i}]`);
      if (m) return m;
    }
    return null;
  }
  return isDeepStrictEqual(want, got) ? null : `${path}: want ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
}

async function runStep(ctx, step, saved) {
  const op = OPS[step.op];
  if (!op) return `unknown op "${step.op}"`;
  const expect = step.expect ?? { ok: {} };
  let answer;
  try {
    answer = await op(ctx, substitute(step.args ?? {}, saved), 'error' in expect);
  } catch (e) {
    if (!('error' in expect)) return `${e.name}: ${e.message}`;
    const Cls = CLASSES[expect.error];
    if (!Cls) return `the Node client has no error class ${expect.error}`;
    if (!(e instanceof Cls)) return `want ${expect.error}, got ${e.name}: ${e.message}`;
    if (expect.code !== undefined && e.code !== expect.code) return `want code ${expect.code}, got ${e.code} (${e.message})`;
    if (step.save) saved[step.save] = e.body ?? {};
    return null;
  }
  if ('error' in expect) return `want ${expect.error}, got the answer ${JSON.stringify(answer)}`;
  if (step.save) saved[step.save] = answer ?? {};
  return mismatch(expect.ok ?? {}, answer);
}

function context() {
  const clients = new Map();
  const ctx = {
    leases: new Map(),
    client(agent = DEFAULT_AGENT) {
      if (!clients.has(agent))
        clients.set(agent, new Client({ url: process.env.SLUICE_URL, token: process.env.SLUICE_TOKEN || null,
                                        agent, failClosed: true }));
      return clients.get(agent);
    },
    lease(agent, id) { return ctx.leases.get(id) ?? ctx.client(agent).attachLease(id); },
    close() { for (const c of clients.values()) c.close(); },
  };
  return ctx;
}

async function main() {
  const path = process.argv[2];
  if (!path || !process.env.SLUICE_URL) {
    console.error('usage: SLUICE_URL=http://HOST:PORT node run_node.mjs CASES.json');
    process.exit(2);
  }
  const file = JSON.parse(readFileSync(path, 'utf8'));
  if (!Array.isArray(file.cases)) {
    console.error(`${path}: no "cases" list`);
    process.exit(2);
  }
  let failed = 0;
  for (const c of file.cases) {
    const ctx = context();
    const saved = {};
    let why = null;
    for (let i = 0; i < (c.steps ?? []).length && !why; i++) {
      const m = await runStep(ctx, c.steps[i], saved);
      if (m) why = `step ${i + 1} (${c.steps[i].op}): ${m}`;
    }
    ctx.close();
    if (why) failed++;
    console.log(why ? `FAIL ${c.name}: ${why}` : `ok ${c.name}`);
  }
  console.log(`${file.cases.length - failed}/${file.cases.length} cases passed (node)`);
  process.exit(failed ? 1 : 0);
}

main();
