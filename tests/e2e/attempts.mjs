// attempts.mjs - what an SDK's own retry did, seen from the wire: a fetch that records every
// HTTP exchange, and bounded loops of calls until one of them met a 429 (or was retried).
// Judging a retry from the call that really met the 429 keeps the tests free of the race
// where a loaded machine lets the bucket refill before the retrying call is sent.

/** A fetch for an SDK's `fetch` option: pushes {status, retryAfter, retryAfterMs, sentMs,
 * doneMs} onto `attempts` for every exchange (sentMs/doneMs: Date.now() around it). */
export const recordingFetch = (attempts) => async (url, init) => {
  const sentMs = Date.now();
  const r = await fetch(url, init);
  attempts.push({ status: r.status, retryAfter: r.headers.get('retry-after'),
                  retryAfterMs: r.headers.get('retry-after-ms'), sentMs, doneMs: Date.now() });
  return r;
};

/** Awaits `call()` (an SDK call whose client records into `attempts`) at most `bound` times,
 * until one call's attempts include a 429; returns {result, call: that call's attempts}.
 * Throws when none of the `bound` calls met a 429. */
export async function untilRetried(call, attempts, bound) {
  for (let i = 0; i < bound; i++) {
    const before = attempts.length;
    const result = await call();
    const mine = attempts.slice(before);
    if (mine.some((a) => a.status === 429)) return { result, call: mine };
  }
  throw new Error(`none of ${bound} calls met a 429: ${JSON.stringify(attempts.slice(-5))}`);
}

/** Awaits `call()` up to `bound` times until one throws (the limit met); returns {error
 * (null when none threw), served (the calls before it), window_s (the time they took)}. */
export async function untilLimited(call, bound) {
  let error = null, served = 0;
  const t0 = Date.now();
  for (let i = 0; i < bound && !error; i++) {
    try { await call(); served++; } catch (e) { error = e; }
  }
  return { error, served, window_s: (Date.now() - t0) / 1000 };
}
