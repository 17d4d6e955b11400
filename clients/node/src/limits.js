// Action limits (sluiced's `limits:`, docs/limits.md): check, release, report, withLimit.
//
// Limits are never decided locally: when sluiced cannot be reached every call throws
// Unreachable whatever failClosed says (libsluice-client's sl_limit_check does the same).
// check() waits while denied, up to `wait` seconds: sluiced holds the check of an
// `on_limit: queue` limit; for the others the client sleeps retry_after and asks again.
import { LimitExceeded, NotFound, ProtocolError, Suspended, errorFromAnswer } from './errors.js';
import { pick } from './options.js';
import { monoS, sleepS } from './time.js';

const MAX_WAIT_SENT_S = 1e9; // sluiced takes a wait up to 1e9 s; longer asks the same

const limitPath = (name, what) => `/v1/limits/${encodeURIComponent(name)}${what ? '/' + what : ''}`;

/* A 200 or 429 answer as a LimitAnswer. A 429 refusal made before any limit was asked
 * ({"status": "rejected", "reason": "suspended"}) is a denial by that reason. */
function limitAnswer(status, b, waited) {
  const num = (k) => (b && typeof b[k] === 'number' ? b[k] : 0);
  if (b && typeof b.allowed !== 'boolean' && status === 429 && typeof b.reason === 'string')
    return { allowed: false, limit: 0, remaining: 0, retryAfter: num('retry_after'), resetAfter: 0,
             delay: 0, waited, deniedBy: b.reason, deniedKey: '', checked: [], status, body: b };
  if (!b || typeof b.allowed !== 'boolean')
    throw new ProtocolError('limit check: the answer has no "allowed"', { status, body: b });
  return { allowed: b.allowed, limit: num('limit'), remaining: num('remaining'),
           retryAfter: num('retry_after'), resetAfter: num('reset_after'), delay: num('delay'),
           waited, deniedBy: b.denied_by?.limit ?? '', deniedKey: b.denied_by?.key ?? '',
           checked: Array.isArray(b.checked) ? b.checked : [], status, body: b };
}

async function api(client, what, path, body, timeoutS) {
  const a = await client._http.request('POST', path, body, timeoutS ?? client.options.requestTimeout);
  if (a.status !== 200) throw errorFromAnswer(what, a.status, a.body);
  return a.body;
}

/** Client#check: see index.d.ts. */
export async function check(client, name, o = {}) {
  const hits = pick(o, ['hits'], 1);
  const waitS = pick(o, ['wait', 'wait_s'], 0);
  const started = monoS();
  for (;;) {
    const left = Math.min(Math.max(0, waitS - (monoS() - started)), MAX_WAIT_SENT_S);
    const body = { agent: pick(o, ['agent'], client.agent), hits };
    for (const k of ['key', 'action']) if (o[k] !== undefined && o[k] !== null) body[k] = o[k];
    if (left > 0) body.wait = left;
    const a = await client._http.request('POST', limitPath(name, 'check'), body,
                                         client.options.requestTimeout + left);
    if (a.status !== 200 && a.status !== 429) throw errorFromAnswer(`limit check ${name}`, a.status, a.body);
    const answer = limitAnswer(a.status, a.body, monoS() - started);
    if (answer.allowed || hits === 0 || answer.retryAfter < 0) return answer;
    if (answer.retryAfter > waitS - (monoS() - started)) return answer;
    await sleepS(answer.retryAfter);
  }
}

/** The error withLimit throws for a denied answer: Suspended for a suspended agent, else LimitExceeded. */
export function limitError(name, answer) {
  if (answer.deniedBy === 'suspended' && !answer.checked.length)
    return new Suspended(`limit ${name}: the agent is suspended`, { status: 429, code: 'suspended', body: answer.body });
  const by = answer.deniedBy ? ` by ${answer.deniedBy}${answer.deniedKey ? ` (${answer.deniedKey})` : ''}` : '';
  return new LimitExceeded(`limit ${name}: denied${by}, retry after ${answer.retryAfter} s`, answer);
}

/** Client#release. */
export function release(client, name, o = {}) {
  const body = { agent: pick(o, ['agent'], client.agent) };
  if (o.key !== undefined && o.key !== null) body.key = o.key;
  return api(client, `limit release ${name}`, limitPath(name, 'release'), body);
}

/** Client#report. */
export function report(client, name, o = {}) {
  const body = { agent: pick(o, ['agent'], client.agent), successes: o.successes ?? 0, errors: o.errors ?? 0 };
  if (o.key !== undefined && o.key !== null) body.key = o.key;
  return api(client, `limit report ${name}`, limitPath(name, 'report'), body);
}

/* A limit's configuration (GET /v1/limits/{name}), asked once per client. */
async function limitConfig(client, name) {
  if (!client._limitConfigs.has(name)) {
    const a = await client._http.request('GET', limitPath(name), null, client.options.requestTimeout);
    if (a.status !== 200) throw errorFromAnswer(`limit ${name}`, a.status, a.body);
    client._limitConfigs.set(name, a.body?.config ?? {});
  }
  return client._limitConfigs.get(name);
}

async function takesKey(client, name, depth = 0) {
  const cfg = await limitConfig(client, name);
  if (cfg.per === 'key') return true;
  if (depth >= 8) return false;
  for (const p of cfg.parents || []) if (await takesKey(client, p, depth + 1)) return true;
  return false;
}

/**
 * Ends the holds an allowed check took: one per `concurrency` level of answer.checked that was
 * charged (cost > 0), the limit's own or a parent's, each with `key` only where that level
 * takes one. A hold whose TTL (the level's reset_after) passed since `sinceS` (monotonic) is
 * skipped, and one already gone (404) is not an error: its release would end another's.
 */
export async function releaseHolds(client, answer, key, sinceS) {
  if (!answer.allowed) return;
  for (const lv of answer.checked) {
    if (!lv.cost || (await limitConfig(client, lv.limit)).algorithm !== 'concurrency') continue;
    if (sinceS !== undefined && monoS() - sinceS >= (lv.reset_after ?? 0)) continue;
    try {
      await release(client, lv.limit, { key: (await takesKey(client, lv.limit)) ? key : undefined });
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
  }
}

/**
 * Client#withLimit: checks `o.limit` (throws LimitExceeded or Suspended when denied), runs
 * `fn(answer)`, then ends the holds the check took (releaseHolds; `release: true` releases the
 * limit itself instead, `false` nothing), also when fn throws. Resolves what fn resolves.
 */
export async function withLimit(client, o, fn) {
  const name = typeof o === 'string' ? o : pick(o, ['limit', 'name']);
  if (typeof o === 'string') o = {};
  const answer = await check(client, name, o);
  const sinceS = monoS();
  if (!answer.allowed) throw limitError(name, answer);
  const end = () => (o.release === true ? release(client, name, { key: o.key, agent: o.agent })
    : o.release !== false ? releaseHolds(client, answer, o.key, sinceS) : undefined);
  let result;
  try {
    result = await fn(answer);
  } catch (e) {
    await Promise.resolve(end()).catch(() => {}); // fn's error is the one to see
    throw e;
  }
  await end();
  return result;
}
