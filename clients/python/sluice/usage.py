"""usage.py - what a model call used, read from whatever the caller has at hand.

`lease.record(x)` takes the `usage` of an `anthropic` or `openai` SDK response (the
objects, duck-typed: no import of either SDK), a plain dict in any of their shapes, a
Usage, or a caught 429 (an SDK RateLimitError: `status_code` 429 and a `response` whose
headers carry `retry-after`). Shapes, told apart by their fields:

  Anthropic Messages   input_tokens (uncached), output_tokens,
                       cache_creation_input_tokens, cache_read_input_tokens
  OpenAI Responses     input_tokens (all of the prompt), output_tokens,
                       input_tokens_details.cached_tokens
  OpenAI Chat          prompt_tokens (all of the prompt), completion_tokens,
                       prompt_tokens_details.cached_tokens

OpenAI's prompt counts include the cached part, which sluice settles as cache reads; so
input = prompt - cached there (as the proxy does, docs/api.md "Proxy").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional


@dataclass
class Usage:
    """A settle's figures, in the lease API's names (docs/api.md settle)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    got_429: bool = False
    retry_after: Optional[float] = None
    failed: bool = False
    headers: Dict[str, str] = field(default_factory=dict)

    def body(self) -> Dict[str, Any]:
        """The settle request's body."""
        b: Dict[str, Any] = {"input_tokens": self.input_tokens,
                             "output_tokens": self.output_tokens,
                             "cache_creation_input_tokens": self.cache_creation_input_tokens,
                             "cache_read_input_tokens": self.cache_read_input_tokens,
                             "got_429": self.got_429}
        if self.retry_after is not None:
            b["retry_after"] = self.retry_after
        if self.failed and not self.got_429:
            b["failed"] = True
        if self.headers:
            b["headers"] = {k.lower(): str(v) for k, v in self.headers.items()}
        return b


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _int(v: Any) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ValueError("a token count must be a number >= 0, not %r" % (v,))
    return int(v)


def _has(obj: Any, name: str) -> bool:
    return _get(obj, name) is not None


def retry_after_from_headers(headers: Any) -> Optional[float]:
    """The provider's `retry-after` (seconds; or `retry-after-ms`) from a headers mapping
    (an httpx.Headers, a dict in any case), or None."""
    if not hasattr(headers, "items"):
        return None
    lower = {str(k).lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(lower[name]) * scale)
        except (KeyError, TypeError, ValueError):
            continue  # absent, or an HTTP date: sluiced's own hold applies
    return None


def is_rate_limit_error(obj: Any) -> bool:
    """True for a caught 429: an SDK error with status_code (or status) 429."""
    return isinstance(obj, BaseException) and (
        getattr(obj, "status_code", None) == 429 or getattr(obj, "status", None) == 429)


def usage_from(obj: Any, headers: Optional[Mapping[str, str]] = None) -> Usage:
    """A Usage from an SDK usage object, a dict, a Usage or a caught 429 (module doc).
    `headers`: the provider's rate-limit response headers to pass on. Raises ValueError
    for something that is none of these."""
    if isinstance(obj, Usage):
        return obj
    if is_rate_limit_error(obj):
        resp = getattr(obj, "response", None)
        hdrs = getattr(resp, "headers", None) or getattr(obj, "headers", None)
        return Usage(got_429=True, retry_after=retry_after_from_headers(hdrs),
                     headers=dict(headers or {}))
    u = _get(obj, "usage")  # a whole response was passed
    if u is not None and not _has(obj, "input_tokens") and not _has(obj, "prompt_tokens"):
        obj = u
    out = Usage(headers=dict(headers or {}))
    if _has(obj, "prompt_tokens") or _has(obj, "completion_tokens"):  # OpenAI Chat
        cached = _int(_get(_get(obj, "prompt_tokens_details"), "cached_tokens"))
        out.input_tokens = max(0, _int(_get(obj, "prompt_tokens")) - cached)
        out.cache_read_input_tokens = cached
        out.output_tokens = _int(_get(obj, "completion_tokens"))
    elif _has(obj, "input_tokens_details"):  # OpenAI Responses
        cached = _int(_get(_get(obj, "input_tokens_details"), "cached_tokens"))
        out.input_tokens = max(0, _int(_get(obj, "input_tokens")) - cached)
        out.cache_read_input_tokens = cached
        out.output_tokens = _int(_get(obj, "output_tokens"))
    elif _has(obj, "input_tokens") or _has(obj, "output_tokens"):  # Anthropic, or ours
        out.input_tokens = _int(_get(obj, "input_tokens"))
        out.output_tokens = _int(_get(obj, "output_tokens"))
        out.cache_creation_input_tokens = _int(_get(obj, "cache_creation_input_tokens"))
        out.cache_read_input_tokens = _int(_get(obj, "cache_read_input_tokens"))
        if isinstance(obj, Mapping):
            out.got_429 = bool(obj.get("got_429", False))
            out.retry_after = obj.get("retry_after")
            out.failed = bool(obj.get("failed", False))
    else:
        raise ValueError("record(): %r is not a usage (anthropic or openai SDK usage, a dict "
                         "with input_tokens/output_tokens or prompt_tokens/completion_tokens) "
                         "nor a caught 429" % (type(obj).__name__,))
    return out
