// Fallback backoff after a provider 429: full jitter, never below the provider's retry-after.
//
// The same rule as libsluice-client's sl_backoff_delay_s (docs/client.md "Backoff: only a
// fallback"): u * min(cap, base * 2^n) with u uniform in [0, 1) and n the consecutive 429s,
// raised to retry-after when that is longer. Full jitter spreads a fleet's retries over the
// whole window instead of stacking them at its edge.

/**
 * The delay in seconds after the `attempt`-th consecutive 429 (0 = the first). Non-finite or
 * negative inputs count as 0; a retryAfterS below 0 (or null) means none was sent. Pure.
 */
export function backoffDelay(attempt, baseS, capS, retryAfterS, u01) {
  const clean = (v) => (Number.isFinite(v) && v > 0 ? v : 0);
  baseS = clean(baseS);
  capS = clean(capS);
  u01 = Math.min(clean(u01), 1 - Number.EPSILON / 2);
  const ceilingS = attempt >= 1024 ? capS : Math.min(capS, baseS * 2 ** attempt);
  const delayS = u01 * ceilingS;
  return Number.isFinite(retryAfterS) && retryAfterS > delayS ? retryAfterS : delayS;
}

/** The client's backoff state: consecutive 429s and the time (monotonic s) it lasts until. */
export class Backoff {
  constructor(baseS, capS) {
    this.baseS = baseS;
    this.capS = capS;
    this.consecutive429 = 0;
    this.untilS = 0;
  }

  /**
   * Notes a settle's outcome at monotonic time `nowS`: a clean one resets the count and returns
   * 0; a 429 returns the full-jitter delay (never below retryAfterS) and extends `untilS`.
   */
  note(got429, retryAfterS, nowS) {
    if (!got429) {
      this.consecutive429 = 0;
      return 0;
    }
    const delayS = backoffDelay(this.consecutive429, this.baseS, this.capS,
                                retryAfterS ?? -1, Math.random());
    if (this.consecutive429 < 64) this.consecutive429++;
    this.untilS = Math.max(this.untilS, nowS + delayS);
    return delayS;
  }
}
