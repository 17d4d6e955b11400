// Fail-open mode: a local token bucket holding this agent's share of the pool.
//
// When sluiced is unreachable the fleet keeps working without it, but each client hands
// itself at most its share (the pool's limits / fleetSize unless configured), from buckets
// that refill continuously like sluiced's (limit / 60 per second), as libsluice-client's
// src/client/local.c does. Limits never learnt and not configured mean "not limited locally".

export const LOCAL_BUCKETS = ['input_tpm', 'output_tpm', 'rpm'];

export class LocalBucket {
  /** `limitsPerMin`: [input, output, requests] per minute, 0 = not limited. Starts full. */
  constructor(limitsPerMin, nowS) {
    this.limit = limitsPerMin.map((v) => (v > 0 ? v : 0));
    this.level = this.limit.slice();
    this.lastS = nowS;
  }

  refill(nowS) {
    const dt = nowS - this.lastS;
    if (dt > 0)
      for (let i = 0; i < this.limit.length; i++)
        if (this.limit[i] > 0) this.level[i] = Math.min(this.limit[i], this.level[i] + dt * this.limit[i] / 60);
    if (nowS > this.lastS) this.lastS = nowS;
  }

  /** New limits (a bucket newly limited starts full); levels are capped at them. */
  setLimits(limitsPerMin, nowS) {
    this.refill(nowS);
    for (let i = 0; i < this.limit.length; i++) {
      const lim = limitsPerMin[i] > 0 ? limitsPerMin[i] : 0;
      if (this.limit[i] === 0 && lim > 0) this.level[i] = lim;
      this.limit[i] = lim;
      if (lim > 0 && this.level[i] > lim) this.level[i] = lim;
    }
  }

  /**
   * Takes `need` ([input, output, requests]) when all of it is there and returns 0; else
   * returns the seconds until it will be (nothing taken), or -1 when it can never fit.
   */
  take(need, nowS) {
    this.refill(nowS);
    let waitS = 0;
    for (let i = 0; i < this.limit.length; i++) {
      const lim = this.limit[i];
      if (lim <= 0 || need[i] <= 0) continue;
      if (need[i] > lim) return -1;
      const missing = need[i] - this.level[i];
      if (missing > 0) waitS = Math.max(waitS, missing / (lim / 60));
    }
    if (waitS > 0) return waitS;
    for (let i = 0; i < this.limit.length; i++) if (this.limit[i] > 0) this.level[i] -= need[i];
    return 0;
  }

  /** Puts `delta` back (negative: charges more), never above a limit. */
  adjust(delta, nowS) {
    this.refill(nowS);
    for (let i = 0; i < this.limit.length; i++)
      if (this.limit[i] > 0) this.level[i] = Math.min(this.limit[i], this.level[i] + delta[i]);
  }
}
