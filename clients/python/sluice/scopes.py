"""scopes.py - `with client.lease(...) as lease:` and `with client.limit(...)`, blocking and
`async with`.

A lease scope acquires on entry and always ends the lease on exit, so a model call that
raises never leaves it to the TTL reaper:
  - `lease.record(x)` was called: settled with x (an SDK usage, a dict, a caught 429);
  - a caught 429 leaves the block (an SDK RateLimitError): settled as a 429 with its
    retry-after (the pool's margin is cut, this client backs off), and re-raised;
  - any other exception: cancelled (a full refund), and re-raised;
  - a clean exit without a record: settled as reserved (no refund: the call was made,
    its usage is unknown).
`lease.cancel()` / `lease.settle()` inside the block end it early; the exit then does
nothing more.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Optional

from .answers import Estimate, Lease, LimitAnswer, Settled
from .errors import Error, Unreachable
from .usage import Usage, is_rate_limit_error, usage_from

class LeaseScope:
    """The lease of a `with` block. `lease` is the granted Lease (after entry), `result`
    the Settled answer (after exit), `estimate` the Estimate of lease_for()."""

    def __init__(self, client: Any, acquire_kwargs: Dict[str, Any],
                 request: Optional[Mapping[str, Any]] = None, api: Optional[str] = None) -> None:
        self._client = client
        self._kw = acquire_kwargs
        self._request, self._api = request, api  # lease_for: estimated on entry
        self.lease: Optional[Lease] = None
        self.usage: Optional[Usage] = None
        self.result: Optional[Settled] = None
        self.estimate: Optional[Estimate] = None
        self.ended = False

    # ---- what the block uses -------------------------------------------------------

    @property
    def id(self) -> str:
        return self._granted().id

    @property
    def max_tokens(self) -> int:
        """The output reserved: send it as the call's max_tokens."""
        return self._granted().charged_output_tokens

    def _granted(self) -> Lease:
        if self.lease is None:
            raise RuntimeError("the lease is taken when the with block is entered")
        return self.lease

    def record(self, usage: Any, headers: Optional[Mapping[str, str]] = None) -> Usage:
        """What the call used, settled on exit: an anthropic/openai SDK usage (or the whole
        response), a dict, a Usage, or a caught 429; `headers`: the provider's rate-limit
        headers. Returns the Usage it read."""
        self.usage = usage_from(usage, headers)
        return self.usage

    def _exit_usage(self, exc: Optional[BaseException]) -> Optional[Usage]:
        """The usage to settle on exit, or None to cancel."""
        if self.usage is not None:
            return self.usage
        if exc is None:
            lease = self._granted()
            return Usage(input_tokens=lease.charged_input_tokens,
                         output_tokens=lease.charged_output_tokens)
        if is_rate_limit_error(exc):
            return usage_from(exc)
        return None

    # ---- blocking ------------------------------------------------------------------

    def _sized(self, est: Optional[Estimate]) -> Dict[str, Any]:
        """acquire's arguments: the estimate's figures under the caller's own."""
        if est is None:
            return self._kw
        self.estimate = est
        fields = est.lease_fields()
        fields.update(self._kw)
        return fields

    def _estimate_args(self) -> tuple:
        return self._request, self._api, self._kw.get("pool"), self._kw.get("model")

    def __enter__(self) -> "LeaseScope":
        est = self._client.estimate(*self._estimate_args()) if self._request is not None else None
        self.lease = self._client.acquire(**self._sized(est))
        return self

    def settle(self, usage: Any = None) -> Settled:
        """Settles now (with `usage`, or what was recorded)."""
        if usage is not None:
            self.record(usage)
        self.ended = True
        self.result = self._client.settle(self._granted(), usage=self._exit_usage(None))
        return self.result

    def cancel(self) -> None:
        """Gives the lease back now, unused."""
        self.ended = True
        self._client.cancel(self._granted())

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        if self.ended or self.lease is None:
            return False
        self.ended = True
        usage = self._exit_usage(exc)
        try:
            if usage is None:
                self._client.cancel(self.lease)
            else:
                self.result = self._client.settle(self.lease, usage=usage)
        except Error:
            if exc is None:
                raise  # nothing else to report; with an exception in flight, it wins
        return False

    # ---- asyncio -------------------------------------------------------------------

    async def __aenter__(self) -> "LeaseScope":
        est = (await self._client.estimate(*self._estimate_args())
               if self._request is not None else None)
        self.lease = await self._client.acquire(**self._sized(est))
        return self

    async def asettle(self, usage: Any = None) -> Settled:
        if usage is not None:
            self.record(usage)
        self.ended = True
        self.result = await self._client.settle(self._granted(), usage=self._exit_usage(None))
        return self.result

    async def acancel(self) -> None:
        self.ended = True
        await self._client.cancel(self._granted())

    async def __aexit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        if self.ended or self.lease is None:
            return False
        self.ended = True
        usage = self._exit_usage(exc)
        try:
            if usage is None:
                await self._client.cancel(self.lease)
            else:
                self.result = await self._client.settle(self.lease, usage=usage)
        except Error:
            if exc is None:
                raise
        return False


class LimitScope:
    """`with client.limit(name):` - checks on entry (LimitExceeded or Suspended when
    denied); on exit ends the holds the check took at `concurrency` levels (release None),
    releases `name` (True) or nothing (False). A release that cannot reach sluiced is
    left to the hold's TTL: the block's work is done, and an exit never raises
    Unreachable."""

    def __init__(self, client: Any, name: str, key: Optional[str], hits: int,
                 action: Optional[str], wait: float, release: Optional[bool]) -> None:
        self.client, self.name, self.key = client, name, key
        self.hits, self.action, self.wait, self.release = hits, action, wait, release
        self.answer: Optional[LimitAnswer] = None
        self.checked_at = 0.0

    def _entered(self, answer: LimitAnswer) -> LimitAnswer:
        from .client import denied
        self.answer = answer
        self.checked_at = time.monotonic()
        if not answer.allowed:
            raise denied(answer)
        return answer

    def __enter__(self) -> LimitAnswer:
        return self._entered(self.client.check(self.name, self.key, self.hits, self.action,
                                               self.wait))

    def __exit__(self, *exc: Any) -> bool:
        try:
            if self.release is None and self.answer is not None:
                self.client.release_holds(self.answer, self.key, self.checked_at)
            elif self.release:
                self.client.release(self.name, self.key)
        except Unreachable:
            pass
        return False

    async def __aenter__(self) -> LimitAnswer:
        return self._entered(await self.client.check(self.name, self.key, self.hits,
                                                     self.action, self.wait))

    async def __aexit__(self, *exc: Any) -> bool:
        try:
            if self.release is None and self.answer is not None:
                await self.client.release_holds(self.answer, self.key, self.checked_at)
            elif self.release:
                await self.client.release(self.name, self.key)
        except Unreachable:
            pass
        return False
