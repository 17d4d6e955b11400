// Clocks and sleeps of the client, in seconds like the HTTP API.
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';

/** The longest single timer node keeps (2^31-1 ms, 24.8 days): a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Monotonic seconds (for durations). */
export const monoS = () => performance.now() / 1000;
/** Unix time in seconds (for the API's instants: retry_at, expires_at). */
export const unixS = () => Date.now() / 1000;

/**
 * Resolves after `s` seconds (at once for 0 or less), however long: past MAX_TIMER_MS it waits
 * in steps. An aborted `signal` rejects it (AbortError).
 */
export async function sleepS(s, signal) {
  const until = monoS() + s;
  for (let left = s; left > 0; left = until - monoS())
    await delay(Math.min(MAX_TIMER_MS, Math.ceil(left * 1000)), undefined, signal ? { signal } : undefined);
}
