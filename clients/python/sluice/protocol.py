"""protocol.py - the client's logic, once, for the blocking and the asyncio client.

Each operation is a generator that yields what it needs done - an HTTP call (Call), a
sleep (Sleep), a user callback (Invoke) - and receives the result; a driver runs it,
blocking (client.py) or awaiting (aio.py). A Call that cannot reach sluiced is thrown
back into the generator as Unreachable, where the lease calls fail open (failopen.py)
and every other call lets it propagate. The lease loop is libsluice-client's
(src/client/acquire.c, docs/client.md "What sl_acquire does").
"""
from __future__ import annotations

import json
import math
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Mapping, Optional, Tuple, TypeVar

from .answers import Estimate, Lease, LimitAnswer, Settled
from .checkpoint import save_checkpoint
from .errors import (Conflict, Error, ExceedsCapacity, InvalidRequest, MaxWaitExceeded,
                     Rejected, Unreachable, from_answer)
from .failopen import FailOpen, Options
from .usage import Usage

FOREVER = float("inf")
MAX_WAIT_SENT_S = 1e9  # the largest `wait` sluiced takes (it holds up to its max_wait_s)
DEFAULT_OUTPUT_TOKENS = 4096  # the proxy's reservation for a body that names no limit


@dataclass
class Call:
    """One HTTP request to sluiced; the driver sends back (status, JSON body, headers)."""
    method: str
    path: str
    body: Any = None
    timeout_s: float = 1.0


@dataclass
class Sleep:
    seconds: float


@dataclass
class Invoke:
    """A user callback; its result is sent back (awaited first when it is awaitable)."""
    fn: Callable[..., Any]
    args: Tuple[Any, ...] = field(default_factory=tuple)


T = TypeVar("T")
Steps = Generator[Any, Any, T]
Answer = Tuple[int, Any, Dict[str, str]]


def quote(s: str) -> str:
    return urllib.parse.quote(str(s), safe="")


def _count(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InvalidRequest(0, "invalid_request", "%s must be an integer >= 0, not %r"
                             % (name, v))
    return v


class Protocol:
    """The state the operations share: who asks, the options, the fail-open state and
    the limits' configurations (asked once)."""

    def __init__(self, agent: str, pool: str, role: Optional[str], opts: Options,
                 failopen: FailOpen) -> None:
        self.agent, self.pool, self.role, self.opts, self.fo = agent, pool, role, opts, failopen
        self.limit_configs: Dict[str, dict] = {}

    # ---- plain calls ---------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None,
             timeout_s: Optional[float] = None, ok: Tuple[int, ...] = (200,)) -> Steps[Any]:
        """One API call; returns its JSON body, raises the Error of any other status."""
        status, ans, _ = yield Call(method, path, body, timeout_s or self.opts.request_timeout_s)
        if status not in ok:
            raise from_answer(status, ans)
        return ans

    # ---- leases --------------------------------------------------------------------

    def acquire(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
                max_wait_s: float = FOREVER, checkpoint: Any = None,
                checkpoint_path: Optional[str] = None,
                on_wait: Optional[Callable[..., Any]] = None,
                request_id: Optional[str] = None, **fields: Any) -> Steps[Lease]:
        """Takes a lease, waiting while queued or rejected (Client.acquire's doc)."""
        _count("input_tokens", input_tokens)
        _count("output_tokens", output_tokens)
        _count("cached_tokens", cached_tokens)
        cache_ttl_s = fields.get("cache_ttl_s", 0)
        if isinstance(cache_ttl_s, bool) or not isinstance(cache_ttl_s, (int, float)) or \
                not (0 <= cache_ttl_s < float("inf")):
            raise InvalidRequest(0, "invalid_request", "cache_ttl_s must be seconds >= 0 "
                                 "(3600 for cache_control ttl \"1h\"; 0: the pool's), not %r"
                                 % (cache_ttl_s,))
        if not (max_wait_s >= 0):
            raise InvalidRequest(0, "invalid_request",
                                 "max_wait_s must be >= 0, not %r" % (max_wait_s,))
        if checkpoint is not None and not callable(checkpoint) and not checkpoint_path:
            raise InvalidRequest(0, "invalid_request", "checkpoint: a dict checkpoint needs "
                                 "checkpoint_path (or pass a callable that saves it)")
        st = _Acquire(self, input_tokens, output_tokens, cached_tokens, max_wait_s,
                      checkpoint, checkpoint_path, on_wait,
                      request_id or uuid.uuid4().hex, fields)
        return (yield from st.run())

    def settle(self, lease: Any, usage: Usage) -> Steps[Settled]:
        """Reports what the call used; a lost sluiced settles locally (fail-open)."""
        lease_id, local = _lease_id(lease)
        for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                     "cache_read_input_tokens"):
            _count(name, getattr(usage, name))
        if local:
            reserved = self.fo.forget(lease_id)
            if reserved is None:
                raise Conflict(409, "already_settled", "local lease %s is unknown or ended "
                               "before" % lease_id)
            a_in, a_out, err = self.fo.settle_local(reserved, usage.input_tokens,
                                                    usage.cache_creation_input_tokens,
                                                    usage.output_tokens)
            result = Settled(a_in, a_out, err, settled_locally=True,
                             raw={"status": "settled", "adjust": {"input_tokens": a_in,
                                                                  "output_tokens": a_out}})
        else:
            try:
                status, ans, _ = yield Call("POST", "/v1/leases/%s/settle" % quote(lease_id),
                                            usage.body(), self.opts.request_timeout_s)
            except Unreachable as e:
                self.fo.go_local(e.message)  # raises when fail_closed
                result = Settled(settled_locally=True)  # sluiced reaps it, without refund
            else:
                self.fo.go_coordinated()
                if status != 200:
                    raise from_answer(status, ans)
                result = Settled.from_answer(ans)
        result.backoff_s = self.fo.note_settle(usage.got_429, usage.retry_after)
        return result

    def cancel(self, lease: Any) -> Steps[dict]:
        """Gives the lease back unused (a full refund)."""
        lease_id, local = _lease_id(lease)
        if local:
            reserved = self.fo.forget(lease_id)
            if reserved is None:
                raise Conflict(409, "already_settled", "local lease %s is unknown or ended "
                               "before" % lease_id)
            self.fo.cancel_local(reserved)
            return {"status": "cancelled"}
        try:
            status, ans, _ = yield Call("DELETE", "/v1/leases/%s" % quote(lease_id), None,
                                        self.opts.request_timeout_s)
        except Unreachable as e:
            self.fo.go_local(e.message)
            return {"status": "cancelled", "settled_locally": True}
        self.fo.go_coordinated()
        if status != 200:
            raise from_answer(status, ans)
        return ans

    def extend(self, lease: Any, ttl_s: float) -> Steps[dict]:
        """Moves the lease's expiry to now + ttl_s (a long stream); a Lease given is
        updated (expires_at, ttl)."""
        lease_id, local = _lease_id(lease)
        ans: Any = {"status": "extended", "expires_at": time.time() + ttl_s}
        if not local:
            try:
                status, ans, _ = yield Call("POST", "/v1/leases/%s/extend" % quote(lease_id),
                                            {"ttl": ttl_s}, self.opts.request_timeout_s)
            except Unreachable as e:
                self.fo.go_local(e.message)
                ans = dict(ans, settled_locally=True)
            else:
                self.fo.go_coordinated()
                if status != 200:
                    raise from_answer(status, ans)
        if isinstance(lease, Lease) and isinstance(ans.get("expires_at"), (int, float)):
            lease.expires_at, lease.ttl = float(ans["expires_at"]), float(ttl_s)
        return ans

    def ticket(self, ticket: str, wait_s: float = 0) -> Steps[dict]:
        """One look at a queued request (GET /v1/tickets/{t}?wait=S): the GRANT or the
        QUEUED answer."""
        path = "/v1/tickets/%s" % quote(ticket) + ("?wait=%g" % wait_s if wait_s > 0 else "")
        return (yield from self.call("GET", path, None, wait_s + self.opts.request_timeout_s,
                                     ok=(200, 202)))

    # ---- estimate ------------------------------------------------------------------

    def estimate(self, request: Mapping[str, Any], api: Optional[str] = None,
                 pool: Optional[str] = None, model: Optional[str] = None) -> Steps[Estimate]:
        """POST /v1/estimate; when sluiced cannot be reached (and not fail_closed), the
        proxy's own fallback: input = the body's bytes / 4, output = its limit."""
        body: Dict[str, Any] = {"request": dict(request), "pool": pool or self.pool}
        if api:
            body["api"] = api
        if model:
            body["model"] = model
        try:
            ans = yield from self.call("POST", "/v1/estimate", body)
        except Unreachable:
            if self.opts.fail_closed:
                raise
            return rough_estimate(request, api, model)
        return Estimate.from_answer(ans)

    # ---- action limits -------------------------------------------------------------

    def check(self, name: str, key: Optional[str] = None, hits: int = 1,
              action: Optional[str] = None, wait: float = 0.0,
              agent: Optional[str] = None) -> Steps[LimitAnswer]:
        """Checks a limit, waiting up to `wait` while denied (Client.check's doc)."""
        started = time.monotonic()
        path = "/v1/limits/%s/check" % quote(name)
        while True:
            left = min(max(0.0, wait - (time.monotonic() - started)), MAX_WAIT_SENT_S)
            body: Dict[str, Any] = {"agent": agent or self.agent, "hits": hits}
            if key is not None:
                body["key"] = key
            if action is not None:
                body["action"] = action
            if left > 0:
                body["wait"] = left
            status, ans, hdrs = yield Call("POST", path, body, self.opts.request_timeout_s + left)
            if status not in (200, 429) or not isinstance(ans, dict):
                raise from_answer(status, ans)
            answer = LimitAnswer.from_answer(ans, hdrs, time.monotonic() - started)
            retry = answer.retry_after
            if answer.allowed or hits == 0 or retry is None or retry < 0:
                return answer
            if retry > wait - (time.monotonic() - started):
                return answer
            yield Sleep(retry)

    def release(self, name: str, key: Optional[str] = None,
                agent: Optional[str] = None) -> Steps[dict]:
        body: Dict[str, Any] = {"agent": agent or self.agent}
        if key is not None:
            body["key"] = key
        return (yield from self.call("POST", "/v1/limits/%s/release" % quote(name), body))

    def report(self, name: str, successes: int = 0, errors: int = 0, key: Optional[str] = None,
               agent: Optional[str] = None) -> Steps[dict]:
        body: Dict[str, Any] = {"agent": agent or self.agent, "successes": successes,
                                "errors": errors}
        if key is not None:
            body["key"] = key
        return (yield from self.call("POST", "/v1/limits/%s/report" % quote(name), body))

    def limit_config(self, name: str) -> Steps[dict]:
        """A limit's configuration (GET /v1/limits/{name}), asked once per client."""
        if name not in self.limit_configs:
            ans = yield from self.call("GET", "/v1/limits/" + quote(name))
            self.limit_configs[name] = ans.get("config", {})
        return self.limit_configs[name]

    def takes_key(self, name: str, depth: int = 0) -> Steps[bool]:
        """True when `name` or an ancestor counts per: key (its calls then carry `key`)."""
        cfg = yield from self.limit_config(name)
        if cfg.get("per") == "key":
            return True
        for parent in cfg.get("parents", []) if depth < 8 else []:
            if (yield from self.takes_key(parent, depth + 1)):
                return True
        return False

    def release_holds(self, answer: LimitAnswer, key: Optional[str] = None,
                      since: Optional[float] = None) -> Steps[None]:
        """Ends the holds an allowed check took: one per `concurrency` level of
        answer.checked that was charged (the limit's own or a parent's), each with `key`
        only where that level takes one. A hold whose TTL (the level's reset_after) has
        passed since `since` (time.monotonic() of the check) is skipped, and one already
        gone (404) is not an error: the release would end another's."""
        if not answer.allowed:
            return
        for lv in answer.checked:
            name = lv.get("limit")
            if not lv.get("cost"):
                continue
            if (yield from self.limit_config(name)).get("algorithm") != "concurrency":
                continue
            if since is not None and time.monotonic() - since >= lv.get("reset_after", 0):
                continue
            try:
                yield from self.release(name, key if (yield from self.takes_key(name)) else None)
            except Error as e:
                if e.status != 404:
                    raise


def _lease_id(lease: Any) -> Tuple[str, bool]:
    if isinstance(lease, Lease):
        return lease.id, lease.local
    if isinstance(lease, Mapping) and "lease" in lease:
        lease = lease["lease"]
    lease_id = getattr(lease, "id", lease)
    if not isinstance(lease_id, str) or not lease_id:
        raise InvalidRequest(0, "invalid_request", "lease: a Lease or a lease id, not %r"
                             % (lease,))
    return lease_id, lease_id.startswith("local-")


def rough_estimate(request: Mapping[str, Any], api: Optional[str],
                   model: Optional[str]) -> Estimate:
    """The proxy's fallback estimate (docs/api.md "Proxy"): bytes / 4 in, the body's
    output limit (times n) out; marked exact=False."""
    size = len(json.dumps(request, separators=(",", ":")).encode())
    per = 0
    for f in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        v = request.get(f)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            per = v
    n = request.get("n")
    choices = n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 128 else 1
    return Estimate(input_tokens=size // 4, cached_tokens=0,
                    output_tokens=(per or DEFAULT_OUTPUT_TOKENS) * choices, api=api or "",
                    model=model or request.get("model"), exact=False)


class _Acquire:
    """One acquire: the request, its request_id, the checkpoint saved once."""

    def __init__(self, p: Protocol, input_tokens: int, output_tokens: int, cached_tokens: int,
                 max_wait_s: float, checkpoint: Any, checkpoint_path: Optional[str],
                 on_wait: Optional[Callable[..., Any]], request_id: str,
                 fields: Dict[str, Any]) -> None:
        self.p, self.fo, self.opts = p, p.fo, p.opts
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.cached_tokens, self.max_wait_s = cached_tokens, max_wait_s
        self.checkpoint, self.checkpoint_path, self.on_wait = checkpoint, checkpoint_path, on_wait
        self.request_id, self.fields = request_id, fields
        self.started = time.monotonic()
        self.saved = False

    def left(self) -> float:
        return max(0.0, self.max_wait_s - (time.monotonic() - self.started))

    def before_wait(self, kind: str, eta_s: float, answer: Dict[str, Any]) -> Steps[None]:
        """Saves the checkpoint once, then tells on_wait (True from it gives up)."""
        if self.checkpoint is not None and not self.saved:
            if callable(self.checkpoint):
                yield Invoke(self.checkpoint, (self.request_id,))
            else:
                cp = dict(self.checkpoint)
                cp["request_id"] = self.request_id
                save_checkpoint(self.checkpoint_path or "", cp)
            self.saved = True
        if self.on_wait is not None and (yield Invoke(self.on_wait, (kind, eta_s, answer))):
            raise MaxWaitExceeded(dict(answer, reason="canceled"))

    def body(self, hold_s: float) -> Dict[str, Any]:
        b: Dict[str, Any] = {"agent": self.p.agent, "pool": self.p.pool,
                             "input_tokens": self.input_tokens,
                             "cached_tokens": self.cached_tokens,
                             "output_tokens": self.output_tokens,
                             "request_id": self.request_id}
        if self.p.role:
            b["role"] = self.p.role
        if hold_s > 0:
            b["wait"] = hold_s
        # A checkpointed acquire loses nothing in line: ask to be held rather than rejected.
        if self.checkpoint is not None and self.opts.max_hold_s > 0:
            b["max_wait"] = min(self.opts.max_hold_s, self.left())
            if b["max_wait"] <= 0:
                del b["max_wait"]
        b.update(self.fields)
        return b

    def run(self) -> Steps[Lease]:
        backoff_s = self.fo.backoff_until - time.monotonic()
        if backoff_s > 0:
            if backoff_s > self.left():
                raise Rejected({"status": "rejected", "reason": "backoff",
                                "retry_after": backoff_s, "retry_at": time.time() + backoff_s},
                               "backing off %.1f s after a 429, beyond max_wait_s" % backoff_s)
            yield from self.before_wait("backoff", backoff_s, {"reason": "backoff"})
            yield Sleep(backoff_s)
        while True:
            if self.fo.local:
                lease = yield from self.local()
                if lease is not None:
                    return lease
            try:
                lease = yield from self.ask()
            except Unreachable as e:
                self.fo.go_local(e.message)  # raises when fail_closed
                continue
            if lease is not None:
                return lease
            self.request_id = uuid.uuid4().hex  # after a reject or a lost ticket: anew

    def grant(self, ans: Dict[str, Any]) -> Steps[Lease]:
        lease = Lease.from_grant(ans, self.request_id, self.p.pool)
        lease.waited = time.monotonic() - self.started
        if self.fo.limits_wanted():  # for the local share, should sluiced be lost later
            try:
                status, pool, _ = yield Call("GET", "/v1/pools/" + quote(self.p.pool), None,
                                             self.opts.request_timeout_s)
                if status == 200 and isinstance(pool, dict):
                    self.fo.learn_limits(pool)
            except Unreachable:
                pass
        return lease

    def ask(self) -> Steps[Optional[Lease]]:
        """One coordinated attempt: the Lease, or None to ask again."""
        plain = self.on_wait is None and self.checkpoint is None
        hold_s = min(self.left(), self.opts.poll_chunk_s) if plain else 0.0
        status, ans, _ = yield Call("POST", "/v1/leases", self.body(hold_s),
                                    hold_s + self.opts.request_timeout_s)
        self.fo.go_coordinated()
        if status == 200:
            return (yield from self.grant(ans))
        if status == 202:
            return (yield from self.wait_ticket(ans))
        if status == 429 and isinstance(ans, dict) and ans.get("status") == "rejected":
            wait_s = reject_wait_s(ans)
            if wait_s > self.left():
                raise from_answer(status, ans)
            yield from self.before_wait("rejected", wait_s, ans)
            yield Sleep(wait_s + min(0.25, 0.05 * wait_s) * self.fo._rng.random())
            return None
        raise from_answer(status, ans)

    def wait_ticket(self, queued: Dict[str, Any]) -> Steps[Optional[Lease]]:
        ticket = queued.get("ticket")
        if not isinstance(ticket, str):
            raise Error(202, "protocol", "a queued answer without a ticket: %r" % (queued,))
        ans = queued
        path = "/v1/tickets/" + quote(ticket)
        while True:
            left = self.left()
            if left <= 0:
                yield from self.give_up(ticket)
                raise MaxWaitExceeded(ans)
            try:
                yield from self.before_wait("queued", float(ans.get("eta") or 0), ans)
            except Exception:
                yield from self.give_up(ticket)
                raise
            chunk = min(left, self.opts.poll_chunk_s)
            status, got, _ = yield Call("GET", "%s?wait=%.3f" % (path, chunk), None,
                                        chunk + self.opts.request_timeout_s)
            if status == 200:
                return (yield from self.grant(got))
            if status == 202:
                ans = got
                continue
            if status == 404:
                return None  # expired, or granted and never claimed: ask anew
            raise from_answer(status, got)

    def give_up(self, ticket: str) -> Steps[None]:
        try:
            yield Call("DELETE", "/v1/tickets/" + quote(ticket), None,
                       self.opts.request_timeout_s)
        except Unreachable:
            pass

    def local(self) -> Steps[Optional[Lease]]:
        """A lease of the local share; None when sluiced answers again."""
        need = self.fo.local_need(self.input_tokens, self.cached_tokens, self.output_tokens)
        while True:
            if self.fo.probe_due():
                try:
                    yield Call("GET", "/healthz", None, self.opts.request_timeout_s)
                    self.fo.go_coordinated()
                    return None
                except Unreachable as e:
                    self.fo.go_local(e.message)
            wait_s = self.fo.take(need)
            if wait_s == 0:
                break
            if wait_s < 0:
                share = self.fo.share_limits()
                raise ExceedsCapacity(0, "exceeds_capacity", "input_tokens %d + output_tokens %d "
                                      "can never fit this agent's local share (limits per minute:"
                                      " input %d, output %d)" % (need[0], need[1], share[0],
                                                                 share[1]))
            if wait_s > self.left():
                raise MaxWaitExceeded({"status": "queued", "eta": wait_s, "reason": "local"})
            yield from self.before_wait("local", wait_s, {"eta": wait_s})
            yield Sleep(min(wait_s, max(self.fo.next_probe - time.monotonic(), 0.01)))
        ttl = float(self.fields.get("ttl") or 120)
        lease_id = self.fo.remember(need)
        cold = need[0] > self.input_tokens
        ans = {"status": "granted", "lease": lease_id, "pool": self.p.pool,
               "expires_at": time.time() + ttl, "ttl": ttl, "weight": 1,
               "charged": {"input_tokens": need[0], "output_tokens": need[1], "requests": 1},
               "waited": time.monotonic() - self.started, "local": True,
               "cache_penalty": cold}
        lease = Lease.from_grant(ans, self.request_id, self.p.pool)
        lease.local = True
        return lease


def reject_wait_s(ans: Dict[str, Any]) -> float:
    """Seconds to sleep after a reject: until retry_at by our clock, but never longer than
    retry_after (an idempotent replay of an old reject carries an old retry_at)."""
    retry_after = ans.get("retry_after")
    retry_after = float(retry_after) if isinstance(retry_after, (int, float)) else 1.0
    retry_at = ans.get("retry_at")
    if isinstance(retry_at, (int, float)) and retry_at > 0:
        until = retry_at - time.time()
        if until < retry_after:
            return max(0.0, until)
    return max(0.0, retry_after) if math.isfinite(retry_after) else 0.0
