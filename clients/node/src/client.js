// The Client: options, mode switches (coordinated / local), probing, and every API call.
//
// One Client per agent name. It keeps one keep-alive connection pool to sluiced, its fail-open
// state (the local share, the probe clock, the local leases) and its 429 backoff, with the
// same semantics and defaults as libsluice-client (docs/client.md "Fail-open"): a transport
// failure of a lease call switches it to local mode at once with one ALERT line, sluiced is
// probed every ~probeInterval s (jittered ±50%), and the first answer switches it back.
import { acquire } from './acquire.js';
import { Backoff } from './backoff.js';
import { InvalidRequest, ProtocolError, Unreachable, errorFromAnswer } from './errors.js';
import { Lease } from './lease.js';
import * as limits from './limits.js';
import { LOCAL_BUCKETS, LocalBucket } from './local.js';
import { clientOptions, leaseOptions, pick } from './options.js';
import { localEstimate } from './estimate.js';
import { Transport } from './http.js';
import { monoS, unixS } from './time.js';

export class Client {
  /** See ClientOptions in index.d.ts; throws InvalidRequest for a bad option. Sends nothing. */
  constructor(options = {}) {
    this.options = clientOptions(options);
    this.agent = this.options.agent;
    this.url = this.options.url.replace(/\/+$/, '');
    this._http = new Transport(this.url, this.options.token, this.options.connectTimeout);
    this.mode = 'coordinated';
    this._backoff = new Backoff(this.options.backoffBase, this.options.backoffCap);
    this._share = null;
    this._poolLimits = null; // [input_tpm, output_tpm, rpm] of the pool, once learnt
    this._localLeases = new Map();
    this._nextLocalId = 1;
    this._nextProbeS = 0;
    this._lastSettleS = 0;
    this._limitConfigs = new Map();
  }

  /** Closes the pooled connections (the client stays usable: a new call opens one). */
  close() { this._http.close(); }

  // ------------------------------------------------------------------ raw calls

  /** One raw API call; resolves {status, body, text, headers}. Rejects with Unreachable. */
  call(method, path, body, timeoutS) {
    if (typeof path !== 'string' || !path.startsWith('/')) throw new InvalidRequest(`path ${JSON.stringify(path)}: expected /...`);
    return this._http.request(method, path, body, timeoutS ?? this.options.requestTimeout);
  }

  /* A call whose 2xx answer is the result; any other answer is thrown as its error class. */
  async _api(what, method, path, body) {
    const a = await this.call(method, path, body);
    if (a.status < 200 || a.status > 299) throw errorFromAnswer(what, a.status, a.body);
    return a.body;
  }

  // ------------------------------------------------------------------ modes

  _goLocal(why) {
    if (this.options.failClosed)
      throw new Unreachable(`sluiced at ${this.url} cannot be reached (${why}); failClosed`, { code: 'unreachable' });
    if (this.mode !== 'local') {
      this.mode = 'local';
      this.options.log(`sluice: ALERT agent ${this.agent}: sluiced at ${this.url} unreachable (${why}); ` +
                       `fail-open: local share of pool ${this.options.pool}, probing every ~${this.options.probeInterval} s`);
    }
    // ±50% so a fleet that lost sluiced together does not probe it in step.
    this._nextProbeS = monoS() + this.options.probeInterval * (0.5 + Math.random());
  }

  _goCoordinated() {
    if (this.mode === 'local') {
      this.mode = 'coordinated';
      this.options.log(`sluice: agent ${this.agent}: sluiced at ${this.url} answers again; coordinated mode`);
    }
  }

  /** Asks sluiced whether it answers (GET /healthz), switching the mode to match. Resolves true/false. */
  async probe() {
    try {
      await this._http.request('GET', '/healthz', null, this.options.requestTimeout);
      this._goCoordinated();
      return true;
    } catch (e) {
      if (!(e instanceof Unreachable)) throw e;
      if (!this.options.failClosed) this._goLocal(e.message);
      return false;
    }
  }

  /* The pool's limits, learnt once after a grant, for the local share. */
  async _learnLimits() {
    const o = this.options;
    if (this._poolLimits || o.failClosed || (o.localInputTpm && o.localOutputTpm && o.localRpm)) return;
    try {
      const a = await this._http.request('GET', `/v1/pools/${encodeURIComponent(o.pool)}`, null, o.requestTimeout);
      const l = a.status === 200 ? a.body?.limits : null;
      if (l && typeof l === 'object') this._poolLimits = LOCAL_BUCKETS.map((k) => (Number.isSafeInteger(l[k]) ? l[k] : 0));
    } catch { /* learnt at the next grant */ }
  }

  /* The local share's bucket with today's limits: configured, else the pool's / fleetSize. */
  _localShare() {
    const o = this.options;
    const configured = [o.localInputTpm, o.localOutputTpm, o.localRpm];
    const limitsPerMin = configured.map((v, i) => {
      if (v > 0) return v;
      const pool = this._poolLimits?.[i] ?? 0;
      return pool > 0 ? Math.max(1, Math.floor(pool / o.fleetSize)) : 0;
    });
    if (!this._share) this._share = new LocalBucket(limitsPerMin, monoS());
    else this._share.setLimits(limitsPerMin, monoS());
    return this._share;
  }

  _localLease(requestId, req, need, cold) {
    const n = this._nextLocalId++;
    this._localLeases.set(n, { in: need[0], out: need[1] });
    const ttl = req.ttl > 0 ? req.ttl : 120;
    return new Lease(this, { id: `local-${n}`, requestId, local: true, pool: req.pool,
                             expiresAt: unixS() + ttl, ttl, weight: 1,
                             charged: { input_tokens: need[0], output_tokens: need[1] },
                             cachePenalty: cold && req.cachedTokens > 0, answer: null });
  }

  _forgetLocal(lease) {
    const n = Number(lease.id.slice('local-'.length));
    const l = this._localLeases.get(n);
    if (!l) throw errorFromAnswer(`local lease ${lease.id}`, 409,
                                  { error: { type: 'already_settled', message: `local lease "${lease.id}" is unknown or ended before` } });
    this._localLeases.delete(n);
    return l;
  }

  // ------------------------------------------------------------------ leases

  /** Asks for a lease and waits for it (see index.d.ts LeaseOptions); resolves a Lease. */
  lease(options) {
    let req;
    try { req = leaseOptions(this, options); } catch (e) { return Promise.reject(e); }
    return acquire(this, req);
  }

  /** Estimates `request` (a provider body) with sluiced, then leases exactly that. */
  async leaseFor(request, options = {}) {
    const e = await this.estimate(request, options);
    const lease = await this.lease({ ...options, inputTokens: e.input_tokens, cachedTokens: e.cached_tokens,
                                     outputTokens: e.output_tokens, model: pick(options, ['model'], e.model ?? undefined),
                                     cachePrefixHash: e.cache_prefix_hash ?? undefined });
    lease.estimate = e;
    return lease;
  }

  /**
   * Runs `fn(lease)` inside a lease (options.request: leased with leaseFor), then ends it:
   * settled with what fn recorded, cancelled when nothing was (a throw before the call).
   * A throw of fn is rethrown after the lease ended; ending errors then are dropped.
   */
  async withLease(options, fn) {
    const lease = options && options.request ? await this.leaseFor(options.request, options)
      : await this.lease(options);
    let result;
    try {
      result = await fn(lease);
    } catch (e) {
      await lease.dispose().catch(() => {});
      throw e;
    }
    await lease.dispose();
    return result;
  }

  /* After a transport failure on a lease call: fail closed, or go local and carry on. */
  async _leaseCall(what, method, path, body) {
    try {
      const a = await this._http.request(method, path, body, this.options.requestTimeout);
      this._goCoordinated();
      if (a.status !== 200) throw errorFromAnswer(what, a.status, a.body);
      return a.body;
    } catch (e) {
      if (!(e instanceof Unreachable)) throw e;
      this._goLocal(e.message);
      return null;
    }
  }

  async _settle(lease, u) {
    const result = { adjust: { input_tokens: 0, output_tokens: 0 }, estimateError: 0, counted: !u.failed,
                     headersIgnored: 0, backoff: 0, settledLocally: false, answer: null };
    if (lease.local) {
      this._settleLocally(lease, u, result);
    } else {
      const b = await this._leaseCall(`settle of lease ${lease.id}`, 'POST',
                                      `/v1/leases/${encodeURIComponent(lease.id)}/settle`, u);
      if (b === null) {
        result.settledLocally = true; // sluiced will reap it, without refund
      } else {
        result.answer = b;
        result.adjust = { input_tokens: b.adjust?.input_tokens ?? 0, output_tokens: b.adjust?.output_tokens ?? 0 };
        result.estimateError = typeof b.estimate_error === 'number' ? b.estimate_error : 0;
        result.counted = b.counted !== false;
        result.headersIgnored = b.headers_ignored?.count ?? 0;
      }
    }
    this._lastSettleS = monoS();
    result.backoff = this._backoff.note(u.got_429, u.retry_after ?? -1, monoS());
    return result;
  }

  _settleLocally(lease, u, result) {
    const l = this._forgetLocal(lease);
    const actualIn = u.input_tokens + u.cache_creation_input_tokens;
    const delta = [l.in - actualIn, l.out - u.output_tokens, 0];
    this._localShare().adjust(delta, monoS());
    result.adjust = { input_tokens: delta[0], output_tokens: delta[1] };
    result.estimateError = Math.abs(actualIn - l.in) / Math.max(actualIn, 1);
    result.settledLocally = true;
  }

  async _cancel(lease) {
    if (lease.local) {
      const l = this._forgetLocal(lease);
      this._localShare().adjust([l.in, l.out, 1], monoS());
      return null;
    }
    return this._leaseCall(`cancel of lease ${lease.id}`, 'DELETE', `/v1/leases/${encodeURIComponent(lease.id)}`, null);
  }

  async _extend(lease, ttlS) {
    if (!(typeof ttlS === 'number' && Number.isFinite(ttlS) && ttlS > 0))
      throw new InvalidRequest(`extend of lease ${lease.id}: ttl ${JSON.stringify(ttlS)} must be > 0 seconds`);
    if (!lease.local) {
      const b = await this._leaseCall(`extend of lease ${lease.id}`, 'POST',
                                      `/v1/leases/${encodeURIComponent(lease.id)}/extend`, { ttl: ttlS });
      if (b === null) return null;
      if (typeof b.expires_at === 'number') lease.expiresAt = b.expires_at;
      lease.ttl = ttlS;
      return b;
    }
    lease.expiresAt = unixS() + ttlS;
    lease.ttl = ttlS;
    return null;
  }

  /**
   * A Lease object for a lease granted earlier (e.g. by a process that crashed), to settle,
   * cancel or extend it by id. Sends nothing.
   */
  attachLease(id, { pool } = {}) {
    if (typeof id !== 'string' || !id) throw new InvalidRequest(`lease id ${JSON.stringify(id)}: expected a string`);
    return new Lease(this, { id, requestId: null, local: false, pool: pool ?? this.options.pool, expiresAt: 0,
                             ttl: 0, weight: 1, charged: { input_tokens: 0, output_tokens: 0 },
                             cachePenalty: false, answer: null });
  }

  /**
   * One look at a queued lease request: GET /v1/tickets/{ticket}?wait=S. Resolves the GRANT
   * (its `lease` is then this caller's to settle) or the QUEUED answer; NotFound when the
   * ticket is gone (given up, expired, or granted and claimed).
   */
  async getTicket(ticket, { wait = 0 } = {}) {
    const q = wait > 0 ? `?wait=${Number(wait).toFixed(3)}` : '';
    const a = await this.call('GET', `/v1/tickets/${encodeURIComponent(ticket)}${q}`, null,
                              wait + this.options.requestTimeout);
    if (a.status !== 200 && a.status !== 202) throw errorFromAnswer(`ticket ${ticket}`, a.status, a.body);
    return a.body;
  }

  // ------------------------------------------------------------------ estimate

  /**
   * Counts `request` (an Anthropic or OpenAI request body) exactly: POST /v1/estimate. Resolves
   * sluiced's answer ({input_tokens, cached_tokens, output_tokens, cache_prefix_hash, ...}).
   * When sluiced is unreachable and the client fails open, a local rough count instead
   * (bytes / 4, the proxy's fallback), marked `exact: false` (sluiced's count: `exact: true`).
   */
  async estimate(request, options = {}) {
    if (!request || typeof request !== 'object' || Array.isArray(request))
      throw new InvalidRequest(`estimate: request must be the provider request body (an object), not ${JSON.stringify(request)}`);
    const body = { request, pool: pick(options, ['pool'], this.options.pool) };
    for (const k of ['model', 'api']) if (options[k] !== undefined) body[k] = options[k];
    if (this.mode === 'local' && monoS() < this._nextProbeS) return localEstimate(body);
    let a;
    try {
      a = await this._http.request('POST', '/v1/estimate', body, this.options.requestTimeout);
    } catch (e) {
      if (!(e instanceof Unreachable)) throw e;
      this._goLocal(e.message);
      return localEstimate(body);
    }
    this._goCoordinated();
    if (a.status !== 200) throw errorFromAnswer('estimate', a.status, a.body);
    if (!Number.isSafeInteger(a.body?.input_tokens)) throw new ProtocolError('estimate: the answer has no input_tokens', { status: 200, body: a.body });
    return { ...a.body, exact: true };
  }

  // ------------------------------------------------------------------ action limits

  /** Checks action limit `name`, waiting up to `o.wait` s while denied; resolves a LimitAnswer. */
  check(name, o) { return limits.check(this, name, o); }
  /** Ends the oldest hold of a concurrency limit's key. */
  release(name, o) { return limits.release(this, name, o); }
  /** Feeds outcomes to an adaptive limit; resolves {status, rate}. */
  report(name, o) { return limits.report(this, name, o); }
  /** Ends the concurrency holds an allowed check took (see limits.js). */
  releaseHolds(answer, key, sinceS) { return limits.releaseHolds(this, answer, key, sinceS); }
  /** Check, run fn, release: see limits.js withLimit. */
  withLimit(o, fn) { return limits.withLimit(this, o, fn); }
  /** The error withLimit throws for a denied LimitAnswer. */
  limitError(name, answer) { return limits.limitError(name, answer); }

  // ------------------------------------------------------------------ task graph, pools

  /** PUT /v1/tasks/{task} {role, depends_on, state}. */
  putTask(task, o = {}) {
    const body = {};
    for (const [k, names] of [['role', ['role']], ['depends_on', ['dependsOn', 'depends_on']], ['state', ['state']]]) {
      const v = pick(o, names);
      if (v !== undefined) body[k] = v;
    }
    return this._api(`task ${task}`, 'PUT', `/v1/tasks/${encodeURIComponent(task)}`, body);
  }
  getTask(task) { return this._api(`task ${task}`, 'GET', `/v1/tasks/${encodeURIComponent(task)}`); }
  getTasks() { return this._api('tasks', 'GET', '/v1/tasks'); }
  deleteTask(task) { return this._api(`task ${task}`, 'DELETE', `/v1/tasks/${encodeURIComponent(task)}`); }
  getPool(pool = this.options.pool) { return this._api(`pool ${pool}`, 'GET', `/v1/pools/${encodeURIComponent(pool)}`); }
  getPools() { return this._api('pools', 'GET', '/v1/pools'); }
}
