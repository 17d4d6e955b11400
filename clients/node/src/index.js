// sluice: the Node client of sluiced (leases, estimates, action limits, task graph), no dependencies.
export { Client } from './client.js';
export { Lease } from './lease.js';
export { backoffDelay } from './backoff.js';
export { saveCheckpoint, resumeCheckpoint, sha256File } from './checkpoint.js';
export { usageFields, retryAfterSeconds } from './usage.js';
export { DEFAULTS } from './options.js';
export {
  SluiceError, InvalidRequest, NotFound, Forbidden, Conflict, LeaseExpired, TooLarge,
  ExceedsCapacity, Unavailable, Unreachable, ProtocolError, Rejected, Suspended,
  MaxWaitExceeded, Canceled, LimitExceeded, errorClasses, errorFromAnswer,
} from './errors.js';
