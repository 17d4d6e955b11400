"""errors.py - one exception tree under sluice.Error, each carrying sluiced's answer.

sluiced answers an error as {"error": {"type", "message"}} (docs/api.md "Errors"); a
rejected lease as {"status": "rejected", "reason", "retry_after", "retry_at", ...}; a
denied limit check as {"allowed": false, "denied_by", "retry_after", ...}. Each becomes
one class, chosen by the API's error *code* (the `type`), never by the HTTP status alone:
a status may change (exceeds_capacity is 422 today), a code is the contract.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional


class Error(Exception):
    """Anything sluiced refused, or that kept the client from asking it.

    `status` is the HTTP status (0 when nothing was answered), `code` the API's error type
    (`invalid_request`, `not_found`, ... or the reject reason), `message` sluiced's
    sentence, `answer` the whole JSON answer (a dict, possibly empty)."""

    def __init__(self, status: int, code: str, message: str,
                 answer: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__("%s (%s): %s" % (code, status, message))
        self.status = status
        self.code = code
        self.message = message
        self.answer: dict = dict(answer or {})

    @property
    def type(self) -> str:
        """The API's error type: the name this attribute had before `code`."""
        return self.code


class InvalidRequest(Error):
    """400 invalid_request (and 413 body_too_large, 415): the message names the field."""


class Forbidden(Error):
    """401 unauthorized or 403 forbidden: the token may not do this."""


class NotFound(Error):
    """404: unknown pool, lease, ticket, limit or task."""


class Conflict(Error):
    """409 already_settled, 410 lease_expired: the lease ended before."""


class ExceedsCapacity(Error):
    """exceeds_capacity: the need can never fit the pool (nothing was charged)."""


class Unavailable(Error):
    """503: the backend cannot decide now (`fail: closed`), or sluiced is shutting down."""


class Unreachable(Error):
    """sluiced could not be reached (refused, reset, timeout), and the call cannot fail
    open: the client is fail_closed, or the call is one that is never decided locally
    (limit checks, the task graph)."""

    def __init__(self, why: str) -> None:
        super().__init__(0, "unreachable", why)


def _retry(answer: Mapping[str, Any]) -> float:
    v = answer.get("retry_after")
    return float(v) if isinstance(v, (int, float)) else 0.0


class Rejected(Error):
    """A lease was not granted within the caller's max_wait_s: sluiced rejected it and its
    retry_at lies beyond (`reason`, `retry_after`, `retry_at`, `limited_by`)."""

    def __init__(self, answer: Mapping[str, Any], message: str = "",
                 code: Optional[str] = None) -> None:
        reason = str(answer.get("reason") or code or "rejected")
        super().__init__(429, code or reason,
                         message or "rejected (%s): retry after %.1f s" % (reason, _retry(answer)),
                         answer)
        self.reason = reason
        self.retry_after: float = _retry(answer)
        self.retry_at: Optional[float] = answer.get("retry_at")
        self.limited_by: Optional[str] = answer.get("limited_by")


class MaxWaitExceeded(Rejected):
    """max_wait_s ran out while the lease was queued (its ticket was given up); `eta` is
    the last ETA."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        super().__init__(answer, "still queued (eta %.1f s) when max_wait_s ran out"
                         % float(answer.get("eta") or 0), code="max_wait")
        self.eta: Optional[float] = answer.get("eta")


class Suspended(Rejected):
    """The agent is suspended (docs/api.md "Suspension"): leases and limit checks are
    refused until an operator releases it."""


class LimitExceeded(Error):
    """An action limit denied the check (`limit(...)`, `limited(...)`): `denied_by`,
    `retry_after`; `limit_answer` is the LimitAnswer."""

    def __init__(self, limit_answer: Any) -> None:
        d = limit_answer.denied_by or {}
        super().__init__(429, "limit_exceeded", "denied by %s (%s), retry after %ss" % (
            d.get("limit", d.get("reason")), d.get("key"), limit_answer.retry_after),
            limit_answer.body)
        self.limit_answer = limit_answer
        self.denied_by = d
        self.retry_after = limit_answer.retry_after


# One table: the API's error code -> its class (docs/api.md "Errors").
_BY_CODE = {
    "invalid_request": InvalidRequest,
    "body_too_large": InvalidRequest,
    "unsupported_media_type": InvalidRequest,
    "unauthorized": Forbidden,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "already_settled": Conflict,
    "lease_expired": Conflict,
    "exceeds_capacity": ExceedsCapacity,
    "backend_unavailable": Unavailable,
    "shutting_down": Unavailable,
    "tokenizer_unavailable": Unavailable,
    "too_many_connections": Unavailable,
}


def from_answer(status: int, body: Any) -> Error:
    """The exception for a non-2xx answer `body` (parsed JSON, or text) of `status`."""
    answer = body if isinstance(body, dict) else {}
    if status == 429 and answer.get("status") == "rejected":
        return (Suspended if answer.get("reason") == "suspended" else Rejected)(answer)
    err = answer.get("error") if isinstance(answer.get("error"), dict) else {}
    code = str(err.get("type") or "http_%d" % status)
    message = str(err.get("message") or body)
    cls = _BY_CODE.get(code, Error)
    return cls(status, code, message, answer)
