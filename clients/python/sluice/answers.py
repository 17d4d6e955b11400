"""answers.py - sluiced's answers as typed dataclasses; `raw` keeps the JSON as it came.

Every answer keeps the API's own field names (docs/api.md), so `lease.raw["charged"]`
and `lease.charged` are the same thing; `lease["lease"]` still works for code written
when Lease was a dict.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


class _Raw:
    """Mapping-style read access to the raw answer (the accessors of the dict era)."""

    raw: Dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.raw


@dataclass
class Lease(_Raw):
    """A granted lease. `local` is True for a lease of the fail-open local share (its id
    starts with "local-"; settle and cancel stay local)."""

    id: str
    pool: str
    expires_at: float
    ttl: float
    weight: float
    charged_input_tokens: int
    charged_output_tokens: int
    waited: float
    request_id: str
    local: bool = False
    cache_penalty: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def charged(self) -> Dict[str, int]:
        return {"input_tokens": self.charged_input_tokens,
                "output_tokens": self.charged_output_tokens}

    @classmethod
    def from_grant(cls, ans: Dict[str, Any], request_id: str, pool: str) -> "Lease":
        ch = ans.get("charged") or {}
        return cls(id=str(ans["lease"]), pool=str(ans.get("pool") or pool),
                   expires_at=float(ans.get("expires_at") or 0), ttl=float(ans.get("ttl") or 0),
                   weight=float(ans.get("weight") or 1),
                   charged_input_tokens=int(ch.get("input_tokens") or 0),
                   charged_output_tokens=int(ch.get("output_tokens") or 0),
                   waited=float(ans.get("waited") or 0), request_id=request_id,
                   cache_penalty=bool(ans.get("cache_penalty")),
                   raw=dict(ans, request_id=request_id))


@dataclass
class Settled(_Raw):
    """What a settle did. `adjust_*` went back into the buckets (> 0 a refund);
    `backoff_s` is this client's full-jitter delay after a reported 429 (the next acquire
    sleeps it out); `headers_ignored` counts provider headers sluiced left out (the
    token may not resync; the settle was applied); `settled_locally`: sluiced was
    unreachable or the lease local, so only the local share saw it."""

    adjust_input_tokens: int = 0
    adjust_output_tokens: int = 0
    estimate_error: float = 0.0
    counted: bool = True
    backoff_s: float = 0.0
    headers_ignored: int = 0
    settled_locally: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_answer(cls, ans: Dict[str, Any]) -> "Settled":
        adj = ans.get("adjust") or {}
        ignored = ans.get("headers_ignored") or {}
        return cls(adjust_input_tokens=int(adj.get("input_tokens") or 0),
                   adjust_output_tokens=int(adj.get("output_tokens") or 0),
                   estimate_error=float(ans.get("estimate_error") or 0),
                   counted=bool(ans.get("counted", True)),
                   headers_ignored=int(ignored.get("count") or 0), raw=dict(ans))


@dataclass
class LimitAnswer(_Raw):
    """The answer of a limit check (200 or 429 of POST /v1/limits/{name}/check); true
    when allowed. `waited` is how long the call waited in all."""

    allowed: bool
    limit: Optional[int]
    remaining: Optional[int]
    retry_after: Optional[float]
    reset_after: float
    checked: List[Dict[str, Any]]
    denied_by: Optional[Dict[str, Any]]
    waited: float
    headers: Dict[str, str] = field(default_factory=dict, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def body(self) -> Dict[str, Any]:
        return self.raw

    def __bool__(self) -> bool:
        return self.allowed

    @classmethod
    def from_answer(cls, ans: Dict[str, Any], headers: Dict[str, str],
                    waited_s: float) -> "LimitAnswer":
        denied_by = ans.get("denied_by")
        if not ans.get("allowed") and denied_by is None and "reason" in ans:
            # refused before any limit was asked (a suspended agent): denied by that reason
            denied_by = {"reason": ans["reason"]}
        return cls(allowed=bool(ans.get("allowed")), limit=ans.get("limit"),
                   remaining=ans.get("remaining"), retry_after=ans.get("retry_after", 0),
                   reset_after=float(ans.get("reset_after") or 0),
                   checked=list(ans.get("checked") or []), denied_by=denied_by,
                   waited=waited_s, headers=headers, raw=dict(ans))


@dataclass
class Estimate(_Raw):
    """POST /v1/estimate: a request body counted as the proxy counts it. `exact` is False
    when sluiced could not be asked (fail-open): input is then the body's bytes / 4."""

    input_tokens: int
    cached_tokens: int
    output_tokens: int
    api: str
    model: Optional[str] = None
    cache_prefix_hash: Optional[str] = None
    exact: bool = True
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_answer(cls, ans: Dict[str, Any]) -> "Estimate":
        return cls(input_tokens=int(ans["input_tokens"]),
                   cached_tokens=int(ans.get("cached_tokens") or 0),
                   output_tokens=int(ans["output_tokens"]), api=str(ans.get("api") or ""),
                   model=ans.get("model"), cache_prefix_hash=ans.get("cache_prefix_hash"),
                   raw=dict(ans))

    def lease_fields(self) -> Dict[str, Any]:
        """The lease request's fields this estimate fills."""
        f: Dict[str, Any] = {"input_tokens": self.input_tokens,
                             "cached_tokens": self.cached_tokens,
                             "output_tokens": self.output_tokens}
        if self.model:
            f["model"] = self.model
        if self.cache_prefix_hash:
            f["cache_prefix_hash"] = self.cache_prefix_hash
        return f
