// The error classes of the sluice client: one tree under SluiceError, each carrying the answer.
//
// sluiced answers every error as {"error": {"type", "message"}} (docs/api.md "Errors") and a
// lease reject as {"status": "rejected", "reason", "retry_after", "retry_at"}; the API's error
// code (its `type`, the contract) picks the class here, from one table, the HTTP status only
// when the code is unknown, so `catch (e) { if (e instanceof NotFound) ... }` works whatever
// call raised it. The classes and codes are the Python package's (clients/python), so the
// shared conformance cases (tests/clients/cases.json) name the same classes for both. Every error keeps `status` (0 when sluiced was not
// reached), `code` (the API's error type, or the reject's reason) and `body` (the answer).

/** The base of every error the client throws. */
export class SluiceError extends Error {
  constructor(message, { status = 0, code = '', body = null } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** 400 invalid_request (or an argument refused before anything was sent: status 0). */
export class InvalidRequest extends SluiceError {}
/** 404 not_found: unknown pool, lease, ticket, limit or task. */
export class NotFound extends SluiceError {}
/** 401 unauthorized and 403 forbidden: the token may not do this. */
export class Forbidden extends SluiceError {}
/** 409 already_settled, and 410 lease_expired (a subclass): the lease ended before. */
export class Conflict extends SluiceError {}
/** 410 lease_expired: the lease was reaped (no refund). */
export class LeaseExpired extends Conflict {}
/** 413 body_too_large: a kind of InvalidRequest. */
export class TooLarge extends InvalidRequest {}
/** exceeds_capacity (413; 422 from older servers): the need can never fit the pool (or the local share). */
export class ExceedsCapacity extends SluiceError {}
/** 503: sluiced's backend is unavailable (fail closed) or it has no tokenizer. */
export class Unavailable extends SluiceError {}
/** sluiced could not be reached (refused, reset, timed out) and the client may not fail open. */
export class Unreachable extends SluiceError {}
/** sluiced answered something that is not the API's JSON, or an unexpected status. */
export class ProtocolError extends SluiceError {}

/** A lease rejected (429) with its retry time beyond the caller's maxWait. */
export class Rejected extends SluiceError {
  constructor(message, opts = {}) {
    super(message, opts);
    const b = opts.body || {};
    this.reason = b.reason ?? opts.code ?? '';
    this.retryAfter = typeof b.retry_after === 'number' ? b.retry_after : null;
    this.retryAt = typeof b.retry_at === 'number' ? b.retry_at : null;
    this.limitedBy = b.limited_by ?? null;
  }
}
/** A request of a suspended agent (429, reason "suspended"): it lasts until an admin release. */
export class Suspended extends Rejected {}
/** Still queued when maxWait ran out; the ticket was given up. `ticket`, `eta` say where it was. */
export class MaxWaitExceeded extends Rejected {}
/** The wait callback (or the AbortSignal) gave up the wait. */
export class Canceled extends SluiceError {}

/** An action-limit check that was denied (withLimit). Carries the LimitAnswer as `answer`. */
export class LimitExceeded extends SluiceError {
  constructor(message, answer) {
    super(message, { status: 429, code: 'limit_exceeded', body: answer?.body ?? null });
    this.answer = answer;
    this.deniedBy = answer?.deniedBy ?? '';
    this.deniedKey = answer?.deniedKey ?? '';
    this.retryAfter = answer?.retryAfter ?? null;
  }
}

/* The one table of API error code -> class (docs/api.md "Errors"; every type of sluiced's
 * src/common/errors.def is here, which test/units.test.mjs checks). */
const BY_CODE = new Map([
  ['invalid_request', InvalidRequest], ['unsupported_media_type', InvalidRequest],
  ['body_too_large', TooLarge], ['unauthorized', Forbidden], ['forbidden', Forbidden],
  ['not_found', NotFound], ['already_settled', Conflict], ['lease_expired', LeaseExpired],
  ['conflict', Conflict], ['out_of_memory', Unavailable],
  ['exceeds_capacity', ExceedsCapacity], ['backend_unavailable', Unavailable],
  ['tokenizer_unavailable', Unavailable], ['shutting_down', Unavailable],
  ['too_many_connections', Unavailable],
]);
/* For an answer without a known code: its HTTP status. */
const BY_STATUS = new Map([
  [400, InvalidRequest], [401, Forbidden], [403, Forbidden], [404, NotFound], [409, Conflict],
  [410, LeaseExpired], [413, TooLarge], [415, InvalidRequest], [422, ExceedsCapacity], [503, Unavailable],
]);

/**
 * The error for a non-2xx answer of sluiced to `what` (e.g. "settle"): the class of its status,
 * the message "what: status type: message". A 429 is Rejected (Suspended for reason
 * "suspended"). Never throws.
 */
export function errorFromAnswer(what, status, body) {
  const err = body && typeof body === 'object' && body.error && typeof body.error === 'object'
    ? body.error : null;
  if (status === 429 && !(err && BY_CODE.has(err.type))) {
    const reason = (body && body.reason) || (err && err.type) || 'rejected';
    const Cls = reason === 'suspended' ? Suspended : Rejected;
    const retry = body && typeof body.retry_after === 'number' ? `, retry after ${body.retry_after} s` : '';
    return new Cls(`${what}: 429 ${reason}${err && err.message ? ': ' + err.message : ''}${retry}`,
                   { status, code: reason, body });
  }
  const code = err && typeof err.type === 'string' ? err.type : '';
  const Cls = BY_CODE.get(code) || BY_STATUS.get(status) || ProtocolError;
  const message = err && typeof err.message === 'string' ? err.message : '';
  const text = message ? `${what}: ${status} ${code}: ${message}`
    : `${what}: HTTP ${status}${body === null ? ' with a body that is not JSON' : ''}`;
  return new Cls(text, { status, code, body });
}

/** Every class by name (the conformance runner matches expected class names against it). */
export const errorClasses = {
  SluiceError, InvalidRequest, NotFound, Forbidden, Conflict, LeaseExpired, TooLarge,
  ExceedsCapacity, Unavailable, Unreachable, ProtocolError, Rejected, Suspended,
  MaxWaitExceeded, Canceled, LimitExceeded,
};
