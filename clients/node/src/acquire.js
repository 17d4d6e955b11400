// Client#lease's loop: ask sluiced for a lease and wait for it without giving up the turn.
//
// The order of a wait matters more than its length (docs/design.md, "Agents: waiting,
// checkpoints, backoff"), and this is libsluice-client's sl_acquire step for step
// (src/client/acquire.c): the checkpoint is saved before the first wait, the wait callback
// hears every fresh ETA, a queued request keeps its place by long-polling its ticket, a
// rejected one comes back at retry_at. One request_id covers transport retries of the same
// POST, so a retried acquire is never charged twice; after a reject or a lost ticket the next
// POST is a new request with a new id. A transport failure switches the client to its local
// share at once (fail-open), unless it is fail-closed.
import { randomBytes } from 'node:crypto';
import { saveCheckpoint } from './checkpoint.js';
import {
  Canceled, ExceedsCapacity, MaxWaitExceeded, ProtocolError, Rejected, Suspended, Unreachable,
  errorFromAnswer,
} from './errors.js';
import { Lease } from './lease.js';
import { monoS, sleepS, unixS } from './time.js';

const ASK_AGAIN = Symbol('ask again');
const TRANSPORT = Symbol('transport');

export const randomRequestId = () => randomBytes(16).toString('hex');

/** Runs one acquire of `req` (normalised by Client#lease) for `client`; resolves a Lease. */
export async function acquire(client, req) {
  const acq = { client, req, startedS: monoS(), checkpointed: false,
                requestId: req.requestId ?? randomRequestId(), why: '' };
  await sleepOutBackoff(acq);
  for (;;) {
    if (client.mode === 'local') {
      const lease = await localAcquire(acq);
      if (lease) return finish(acq, lease);
    }
    const r = await askSluiced(acq);
    if (r === ASK_AGAIN) acq.requestId = randomRequestId();
    else if (r === TRANSPORT) client._goLocal(acq.why);
    else return finish(acq, r);
  }
}

function finish(acq, lease) {
  lease.waited = monoS() - acq.startedS;
  return lease;
}

export function waitLeftS(acq) {
  if (acq.req.maxWait === Infinity) return Infinity;
  return Math.max(0, acq.req.maxWait - (monoS() - acq.startedS));
}

const aborted = () => new Canceled('the signal gave up the wait', { code: 'canceled' });

/* Sleeps `s` seconds unless the lease's signal aborts first (Canceled). */
async function pause(acq, s) {
  try {
    await sleepS(s, acq.req.signal);
  } catch (e) {
    if (e.name === 'AbortError') throw aborted();
    throw e;
  }
}

/* Before every wait: the checkpoint once, then the wait callback (truthy: give up). */
async function beforeWait(acq, kind, eta, position, reason) {
  const { req, client } = acq;
  if (req.signal?.aborted) throw aborted();
  if (!acq.checkpointed && req.checkpoint) {
    const info = { requestId: acq.requestId, kind, eta, position, reason };
    if (typeof req.checkpoint === 'function') await req.checkpoint(info);
    else await saveCheckpoint(req.checkpointPath, { ...req.checkpoint, request_id: acq.requestId });
    acq.checkpointed = true;
  }
  if (req.onWait) {
    const waited = monoS() - acq.startedS;
    if (await req.onWait({ kind, eta, position, reason, waited, mode: client.mode }))
      throw new Canceled('the wait callback gave up the wait', { code: 'canceled' });
  }
}

function leaseBody(acq, holdS, maxWaitS) {
  const { req, client } = acq;
  const b = { agent: client.agent, pool: req.pool, role: req.role, input_tokens: req.inputTokens,
              cached_tokens: req.cachedTokens, output_tokens: req.outputTokens,
              request_id: acq.requestId };
  for (const [k, v] of [['task', req.task], ['unblocks', req.unblocks || undefined],
                        ['priority', req.priority], ['cache_key', req.cacheKey],
                        ['model', req.model], ['cache_prefix_hash', req.cachePrefixHash],
                        ['cap_output', req.capOutput], ['ttl', req.ttl > 0 ? req.ttl : undefined],
                        ['cache_ttl_s', req.cacheTtl > 0 ? req.cacheTtl : undefined],
                        ['wait', holdS > 0 ? holdS : undefined],
                        ['max_wait', maxWaitS > 0 ? maxWaitS : undefined]])
    if (v !== undefined && v !== null) b[k] = v;
  return b;
}

function takeGrant(acq, body) {
  if (!body || typeof body.lease !== 'string')
    throw new ProtocolError('a grant without a "lease" id', { status: 200, body });
  const num = (o, k, d) => (o && typeof o[k] === 'number' ? o[k] : d);
  return new Lease(acq.client, {
    id: body.lease, requestId: acq.requestId, local: false, pool: body.pool ?? acq.req.pool,
    expiresAt: num(body, 'expires_at', 0), ttl: num(body, 'ttl', 0), weight: num(body, 'weight', 1),
    charged: { input_tokens: num(body.charged, 'input_tokens', 0),
               output_tokens: num(body.charged, 'output_tokens', 0) },
    cachePenalty: body.cache_penalty === true, answer: body,
  });
}

/* An acquire that saves a checkpoint loses nothing by waiting: it asks to be held queued (up
 * to maxHold, no longer than it will wait) rather than rejected and left asleep. */
function maxWaitToAskS(acq) {
  if (!acq.req.checkpoint) return 0;
  return Math.min(acq.req.maxHold, waitLeftS(acq));
}

async function post(acq, method, path, body, timeoutS) {
  try {
    return await acq.client._http.request(method, path, body, timeoutS, acq.req.signal);
  } catch (e) {
    if (!(e instanceof Unreachable)) throw e;
    acq.why = e.message;
    return TRANSPORT;
  }
}

/* One coordinated attempt: a Lease, ASK_AGAIN or TRANSPORT; throws the rest. */
async function askSluiced(acq) {
  const { req, client } = acq;
  const o = client.options;
  const plain = !req.onWait && !req.checkpoint; // nothing has to happen before a wait
  const holdS = plain ? Math.min(waitLeftS(acq), o.pollChunk) : 0;
  const a = await post(acq, 'POST', '/v1/leases', leaseBody(acq, holdS, maxWaitToAskS(acq)),
                       holdS + o.requestTimeout);
  if (a === TRANSPORT) return a;
  client._goCoordinated();
  if (a.status === 200) {
    const lease = takeGrant(acq, a.body);
    await client._learnLimits();
    return lease;
  }
  if (a.status === 202) return waitTicket(acq, a.body);
  if (a.status === 429 && a.body && typeof a.body === 'object') return rejected(acq, a.body);
  throw errorFromAnswer('POST /v1/leases', a.status, a.body);
}

/* Seconds to sleep after a reject: until retry_at by our clock, never longer than retry_after
 * (an idempotent replay of an old reject carries an old retry_at). */
function rejectWaitS(body) {
  const retryAfter = typeof body.retry_after === 'number' ? body.retry_after : 1;
  const retryAt = typeof body.retry_at === 'number' ? body.retry_at : 0;
  const untilS = retryAt - unixS();
  if (retryAt > 0 && untilS < retryAfter) return Math.max(0, untilS);
  return Math.max(0, retryAfter);
}

async function rejected(acq, body) {
  const reason = body.reason || 'rejected';
  const waitS = rejectWaitS(body);
  if (waitS > waitLeftS(acq)) {
    const Cls = reason === 'suspended' ? Suspended : Rejected;
    throw new Cls(`rejected (${reason}): retry after ${waitS.toFixed(1)} s, beyond maxWait`,
                  { status: 429, code: reason, body });
  }
  await beforeWait(acq, 'rejected', waitS, 0, reason);
  // A little jitter so the agents rejected together do not return together.
  await pause(acq, waitS + Math.min(0.25, 0.05 * waitS) * Math.random());
  return ASK_AGAIN;
}

async function giveUpTicket(acq, ticket) {
  const o = acq.client.options;
  await acq.client._http.request('DELETE', `/v1/tickets/${encodeURIComponent(ticket)}`, null,
                                 o.requestTimeout).catch(() => {});
}

/* Long-polls a queued ticket: a Lease, ASK_AGAIN (the ticket is gone) or TRANSPORT. */
async function waitTicket(acq, queued) {
  const { client } = acq;
  const o = client.options;
  const ticket = queued && typeof queued.ticket === 'string' ? queued.ticket : '';
  if (!ticket) throw new ProtocolError('a queued answer without a "ticket"', { status: 202, body: queued });
  let eta = typeof queued.eta === 'number' ? queued.eta : 0;
  let position = typeof queued.position === 'number' ? queued.position : 0;
  const path = `/v1/tickets/${encodeURIComponent(ticket)}`;
  for (;;) {
    const leftS = waitLeftS(acq);
    if (leftS <= 0) {
      await giveUpTicket(acq, ticket);
      const e = new MaxWaitExceeded(`still queued (ticket ${ticket}, eta ${eta.toFixed(1)} s) after maxWait ${acq.req.maxWait} s`,
                                    { status: 202, code: 'max_wait', body: queued });
      Object.assign(e, { ticket, eta });
      throw e;
    }
    try {
      await beforeWait(acq, 'queued', eta, position, null);
    } catch (e) {
      await giveUpTicket(acq, ticket);
      throw e;
    }
    const waitS = Math.min(leftS, o.pollChunk);
    const a = await post(acq, 'GET', `${path}?wait=${waitS.toFixed(3)}`, null, waitS + o.requestTimeout)
      .catch(async (e) => { if (e instanceof Canceled) await giveUpTicket(acq, ticket); throw e; });
    if (a === TRANSPORT) return a;
    if (a.status === 200) {
      const lease = takeGrant(acq, a.body);
      await client._learnLimits();
      return lease;
    }
    if (a.status === 202) {
      if (typeof a.body?.eta === 'number') eta = a.body.eta;
      if (typeof a.body?.position === 'number') position = a.body.position;
      queued = a.body;
      continue;
    }
    if (a.status === 404) return ASK_AGAIN; // expired, or granted and never claimed: ask anew
    throw errorFromAnswer('waiting on the ticket', a.status, a.body);
  }
}

async function sleepOutBackoff(acq) {
  const waitS = acq.client._backoff.untilS - monoS();
  if (waitS <= 0) return;
  if (waitS > waitLeftS(acq))
    throw new Rejected(`backing off ${waitS.toFixed(1)} s after a 429, beyond maxWait`,
                       { code: 'backoff', body: { reason: 'backoff', retry_after: waitS,
                                                  retry_at: unixS() + waitS } });
  await beforeWait(acq, 'backoff', waitS, 0, 'backoff');
  await pause(acq, waitS);
}

/* Local mode: a lease from the local share, or null when sluiced answers again (ask it). */
async function localAcquire(acq) {
  const { client, req } = acq;
  const share = client._localShare();
  // The provider bills a cold cache as input: charge the cached prefix when this agent's
  // last settle is older than the cache TTL.
  const cold = client._lastSettleS === 0 || monoS() - client._lastSettleS > client.options.cacheTtl;
  const need = [req.inputTokens + (cold ? req.cachedTokens : 0), req.outputTokens, 1];
  for (;;) {
    if (monoS() >= client._nextProbeS && await client.probe()) return null;
    const waitS = share.take(need, monoS());
    if (waitS === 0) break;
    if (waitS < 0)
      throw new ExceedsCapacity(`input_tokens ${need[0]} + output_tokens ${need[1]} can never fit this ` +
                                `agent's local share (limits per minute: input ${share.limit[0]}, output ${share.limit[1]})`,
                                { code: 'exceeds_capacity' });
    if (waitS > waitLeftS(acq)) {
      const e = new MaxWaitExceeded(`local share refills in ${waitS.toFixed(1)} s, beyond maxWait ${req.maxWait}`,
                                    { code: 'max_wait' });
      e.eta = waitS;
      throw e;
    }
    await beforeWait(acq, 'local', waitS, 0, null);
    await pause(acq, Math.min(waitS, Math.max(client._nextProbeS - monoS(), 0.01)));
  }
  return client._localLease(acq.requestId, req, need, cold);
}
