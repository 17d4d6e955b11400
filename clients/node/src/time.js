// Clocks and sleeps of the client, in seconds like the HTTP API.
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';

/** Monotonic seconds (for durations). */
export const monoS = () => performance.now() / 1000;
/** Unix time in seconds (for the API's instants: retry_at, expires_at). */
export const unixS = () => Date.now() / 1000;
/** Resolves after `s` seconds (at once for 0 or less). */
export const sleepS = (s) => (s > 0 ? delay(s * 1000) : Promise.resolve());
