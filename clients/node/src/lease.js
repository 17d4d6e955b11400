// A granted lease: record what the call used, then settle (or cancel) exactly once.
//
// A Lease ends in one of two ways: settled with what was recorded (the call happened and was
// billed, or came back 429) or cancelled (the call never happened: a full refund). dispose()
// picks between them, so `await using lease = await client.lease(...)`, withLease() and a
// `try/finally` all leave nothing to the TTL reaper whatever the model call threw.
import { InvalidRequest } from './errors.js';
import { usageFields } from './usage.js';

export class Lease {
  /** Built by Client#lease; `fields` are the grant's, already read. */
  constructor(client, fields) {
    this.client = client;
    this.id = fields.id;
    this.requestId = fields.requestId;
    this.local = fields.local;
    this.pool = fields.pool;
    this.expiresAt = fields.expiresAt;
    this.ttl = fields.ttl;
    this.weight = fields.weight;
    this.charged = fields.charged; // {input_tokens, output_tokens}
    this.cachePenalty = fields.cachePenalty;
    this.waited = 0;
    this.answer = fields.answer; // sluiced's grant as sent (null for a local lease)
    this.estimate = null; // the estimate it was asked with (leaseFor)
    this.state = 'open'; // 'open' | 'settled' | 'cancelled'
    this.recorded = null;
  }

  /**
   * Records what the call used: an Anthropic or OpenAI `usage` (or a message/completion that has
   * one), a caught provider error or Response (429: got_429 and its retry-after; other 4xx/5xx:
   * failed), or the settle body's own fields. A later record replaces an earlier one. Returns
   * the lease. Throws InvalidRequest for an object it cannot read.
   */
  record(usage) {
    this.recorded = usageFields(usage);
    return this;
  }

  /**
   * Reports the recorded (or given) usage: POST /v1/leases/{id}/settle, or the local share's
   * settle for a local lease. Resolves a SettleResult; after a 429 its `backoff` is the
   * full-jitter delay the client's next lease sleeps out. Throws Conflict/LeaseExpired when
   * the lease ended before, InvalidRequest when nothing was recorded.
   */
  async settle(usage) {
    if (usage !== undefined) this.record(usage);
    if (!this.recorded)
      throw new InvalidRequest(`settle of lease ${this.id}: nothing recorded (record(usage) first, or cancel())`);
    const result = await this.client._settle(this, this.recorded);
    this.state = 'settled';
    return result;
  }

  /** Gives the lease back unused (full refund). Resolves sluiced's answer (null: local). */
  async cancel() {
    const answer = await this.client._cancel(this);
    this.state = 'cancelled';
    return answer;
  }

  /**
   * Moves the expiry to now + ttlS seconds (capped by the pool) for a long stream; updates
   * expiresAt. Resolves sluiced's answer ({status: "extended", expires_at}; null: local).
   */
  extend(ttlS) {
    return this.client._extend(this, ttlS);
  }

  /**
   * Ends the lease if it is still open: settles what was recorded, or cancels when nothing
   * was. Resolves the SettleResult, or null when it cancelled or had ended before.
   */
  async dispose() {
    if (this.state !== 'open') return null;
    if (this.recorded) return this.settle();
    await this.cancel();
    return null;
  }
}

if (typeof Symbol.asyncDispose === 'symbol') {
  Object.defineProperty(Lease.prototype, Symbol.asyncDispose, {
    value() { return this.dispose(); }, writable: true, configurable: true,
  });
}
