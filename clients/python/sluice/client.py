"""client.py - the blocking client of sluiced: leases (with `with client.lease(...)`), the
estimator, action limits, the task graph; fail-open as libsluice-client."""
from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, Dict, Mapping, Optional, TypeVar

from .answers import Estimate, Lease, LimitAnswer, Settled
from .errors import LimitExceeded, Suspended
from .failopen import FailOpen, Options
from .scopes import LeaseScope, LimitScope
from .protocol import FOREVER, Call, Invoke, Protocol, Sleep, Steps, quote
from .transport import SyncTransport
from .usage import Usage, usage_from

DEFAULT_URL = "http://127.0.0.1:8750"
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def env_settings() -> Dict[str, Optional[str]]:
    """The environment a client is built from: SLUICE_URL, SLUICE_TOKEN, SLUICE_AGENT,
    SLUICE_POOL."""
    return {"url": os.environ.get("SLUICE_URL"), "token": os.environ.get("SLUICE_TOKEN"),
            "agent": os.environ.get("SLUICE_AGENT"), "pool": os.environ.get("SLUICE_POOL")}


class _Base:
    """What the blocking and the asyncio client share: settings and the protocol state."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 agent: Optional[str] = None, pool: Optional[str] = None,
                 role: Optional[str] = None, log: Optional[Callable[[str], None]] = None,
                 **options: Any) -> None:
        env = env_settings()
        self.url = (url or env["url"] or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else env["token"]
        self.agent = agent or env["agent"] or "python"
        self.pool = pool or env["pool"] or "default"
        self.role = role
        self.options = Options(**options)
        self.options.check()
        self.failopen = FailOpen(self.options, self.agent, self.pool, self.url, log)
        self._p = Protocol(self.agent, self.pool, role, self.options, self.failopen)

    @property
    def mode(self) -> str:
        """"coordinated", or "local" while sluiced is unreachable (fail-open)."""
        return "local" if self.failopen.local else "coordinated"

    @property
    def max_hold_s(self) -> float:
        return self.options.max_hold_s

    @property
    def request_timeout_s(self) -> float:
        return self.options.request_timeout_s


class Client(_Base):
    """A blocking client. Options (keyword): url ($SLUICE_URL, else http://127.0.0.1:8750),
    token ($SLUICE_TOKEN), agent ($SLUICE_AGENT, else "python"), pool ($SLUICE_POOL, else
    "default"), role, log (a function taking the ALERT lines; default stderr), and the
    fields of failopen.Options (connect_timeout_s 0.5, request_timeout_s 1, fail_closed,
    fleet_size, local_*_tpm, probe_interval_s 5, backoff_base_s 1, backoff_cap_s 30,
    max_hold_s 540, ...). One client may be shared by threads; each call is blocking."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 agent: Optional[str] = None, pool: Optional[str] = None,
                 role: Optional[str] = None, **options: Any) -> None:
        super().__init__(url, token, agent, pool, role, **options)
        self._http = SyncTransport(self.url, self.token, self.options.connect_timeout_s)

    def close(self) -> None:
        """Closes the kept-alive connections (the client stays usable)."""
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, steps: Steps[T]) -> T:
        """Drives a protocol generator with blocking I/O."""
        value: Any = None
        error: Optional[BaseException] = None
        while True:
            try:
                op = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            if isinstance(op, Call):
                try:
                    value = self._http.request(op.method, op.path, op.body, op.timeout_s)
                except Exception as e:  # Unreachable, thrown back for fail-open
                    error = e
            elif isinstance(op, Sleep):
                time.sleep(max(0.0, op.seconds))
            elif isinstance(op, Invoke):
                value = op.fn(*op.args)

    # ---- raw -----------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None,
             timeout_s: Optional[float] = None) -> tuple:
        """One API call: (status, parsed JSON body, headers with lower-case names); raises
        Unreachable when sluiced cannot be reached."""
        return self._http.request(method, path, body, timeout_s or self.options.request_timeout_s)

    # ---- leases --------------------------------------------------------------------

    def acquire(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
                max_wait_s: float = FOREVER, checkpoint: Any = None,
                checkpoint_path: Optional[str] = None,
                on_wait: Optional[Callable[[str, float, dict], Any]] = None,
                request_id: Optional[str] = None, **fields: Any) -> Lease:
        """Takes a lease (POST /v1/leases), waiting while queued or rejected, as
        libsluice-client: queued leases long-poll their ticket, rejected ones sleep until
        retry_at, a 429 reported on a settle is slept out first, and while sluiced is
        unreachable the lease comes from the local share (fail-open). Before the first
        wait the checkpoint is saved: a callable is called with the request_id, a dict is
        written to checkpoint_path with it (so a restarted agent re-sends the same request,
        charged once); a checkpointed acquire asks to be held queued (`max_wait`, up to
        max_hold_s) rather than rejected. on_wait(kind, eta_s, answer) hears every wait
        and may return True to give up. Other lease fields (model, task, priority, ttl,
        cache_prefix_hash, cap_output, max_wait, cache_ttl_s: how long the provider keeps
        the cached prefix this call writes, 3600 for cache_control ttl "1h", 0 or absent
        the pool's, ...) pass through by name.
        Raises Rejected (retry_at beyond max_wait_s), MaxWaitExceeded, Suspended,
        ExceedsCapacity, InvalidRequest, Forbidden, NotFound, Unreachable (fail_closed)."""
        return self._run(self._p.acquire(input_tokens, output_tokens, cached_tokens,
                                         max_wait_s, checkpoint, checkpoint_path, on_wait,
                                         request_id, **fields))

    def settle(self, lease: Any, input_tokens: int = 0, output_tokens: int = 0,
               cache_creation_input_tokens: int = 0, cache_read_input_tokens: int = 0,
               got_429: bool = False, retry_after: Optional[float] = None,
               headers: Optional[Mapping[str, str]] = None, usage: Any = None,
               failed: bool = False) -> Settled:
        """Reports what the call used (POST /v1/leases/{id}/settle): the figures, or
        `usage` (an SDK usage object, a dict, a caught 429: usage.usage_from). Provider
        headers sluiced may not take from this token are left out by sluiced and counted
        in `headers_ignored`. A 429 starts the full-jitter backoff (`backoff_s`)."""
        if usage is None:
            usage = Usage(input_tokens, output_tokens, cache_creation_input_tokens,
                          cache_read_input_tokens, got_429, retry_after, failed,
                          dict(headers or {}))
        else:
            usage = usage_from(usage, headers)
        return self._run(self._p.settle(lease, usage))

    def cancel(self, lease: Any) -> dict:
        """Gives a lease back unused (DELETE /v1/leases/{id}, full refund)."""
        return self._run(self._p.cancel(lease))

    def extend(self, lease: Any, ttl_s: float) -> dict:
        """Moves the lease's expiry to now + ttl_s (POST /v1/leases/{id}/extend)."""
        return self._run(self._p.extend(lease, ttl_s))

    def ticket(self, ticket: str, wait_s: float = 0) -> dict:
        """GET /v1/tickets/{ticket}?wait=S: the GRANT or the QUEUED answer."""
        return self._run(self._p.ticket(ticket, wait_s))

    def lease(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
              **kw: Any) -> LeaseScope:
        """`with client.lease(input_tokens=..., output_tokens=..., model=...) as lease:` -
        acquires on entry (acquire's arguments, checkpoint included), settles on exit what
        `lease.record(...)` was given, settles a caught 429 (an SDK RateLimitError leaving
        the block) as one, and cancels on any other exception."""
        return LeaseScope(self, dict(kw, input_tokens=input_tokens, output_tokens=output_tokens,
                                     cached_tokens=cached_tokens))

    def estimate(self, request: Mapping[str, Any], api: Optional[str] = None,
                 pool: Optional[str] = None, model: Optional[str] = None) -> Estimate:
        """Counts a provider request body exactly (POST /v1/estimate)."""
        return self._run(self._p.estimate(request, api, pool, model))

    def lease_for(self, request: Mapping[str, Any], api: Optional[str] = None,
                  **kw: Any) -> LeaseScope:
        """`with client.lease_for(body) as lease:` - a lease sized on entry by estimate(body):
        input, cached prefix, output reservation, model and prefix hash (lease.estimate); no
        numbers to guess. Other keywords are lease()'s and win over the estimate's."""
        return LeaseScope(self, kw, request, api)

    # ---- the task graph and pools ----------------------------------------------------

    def put_task(self, task: str, role: Optional[str] = None,
                 depends_on: Optional[list] = None, state: Optional[str] = None) -> dict:
        """PUT /v1/tasks/{task}."""
        body: Dict[str, Any] = {}
        for k, v in (("role", role), ("depends_on", depends_on), ("state", state)):
            if v is not None:
                body[k] = v
        return self._run(self._p.call("PUT", "/v1/tasks/" + quote(task), body))

    def get_pool(self, name: Optional[str] = None) -> dict:
        """GET /v1/pools/{pool}: limits, margin, buckets, queue, alerts."""
        return self._run(self._p.call("GET", "/v1/pools/" + quote(name or self.pool)))

    # ---- action limits -------------------------------------------------------------

    def check(self, name: str, key: Optional[str] = None, hits: int = 1,
              action: Optional[str] = None, wait: float = 0.0,
              agent: Optional[str] = None) -> LimitAnswer:
        """Checks action limit `name` (and its parents). While denied it waits up to
        `wait` seconds: sluiced holds a check of an on_limit: queue limit; for the others
        the client sleeps retry_after and asks again. Returns a LimitAnswer (allowed or
        not); raises InvalidRequest, Forbidden, NotFound and Unreachable (limits are
        never decided locally)."""
        return self._run(self._p.check(name, key, hits, action, wait, agent))

    def release(self, name: str, key: Optional[str] = None, agent: Optional[str] = None) -> dict:
        """Ends one hold of a concurrency limit (POST /v1/limits/{name}/release)."""
        return self._run(self._p.release(name, key, agent))

    def report(self, name: str, successes: int = 0, errors: int = 0, key: Optional[str] = None,
               agent: Optional[str] = None) -> dict:
        """Feeds outcomes to an adaptive limit; returns the answer (its `rate`)."""
        return self._run(self._p.report(name, successes, errors, key, agent))

    def release_holds(self, answer: LimitAnswer, key: Optional[str] = None,
                      since: Optional[float] = None) -> None:
        """Ends the holds an allowed check took at `concurrency` levels (protocol doc)."""
        self._run(self._p.release_holds(answer, key, since))

    def limit(self, name: str, key: Optional[str] = None, hits: int = 1,
              action: Optional[str] = None, wait: float = 0.0,
              release: Optional[bool] = None) -> LimitScope:
        """A context manager: checks on entry (raises LimitExceeded when denied, Suspended
        for a suspended agent) and on exit ends the holds the check took at `concurrency`
        levels. release=True releases `name` instead, False nothing."""
        return LimitScope(self, name, key, hits, action, wait, release)

    def limited(self, name: str, key: Optional[str] = None, hits: int = 1,
                action: Optional[str] = None, wait: float = 0.0,
                release: Optional[bool] = None) -> Callable[[F], F]:
        """A decorator: every call of the function runs inside limit(...)."""
        def wrap(fn: F) -> F:
            @functools.wraps(fn)
            def inner(*args: Any, **kw: Any) -> Any:
                with self.limit(name, key, hits, action, wait, release):
                    return fn(*args, **kw)
            return inner  # type: ignore[return-value]
        return wrap


def denied(answer: LimitAnswer) -> Exception:
    """The exception of a denied check: Suspended for a suspended agent, else
    LimitExceeded."""
    if (answer.denied_by or {}).get("reason") == "suspended":
        return Suspended(dict(answer.raw, reason="suspended"),
                         "agent suspended: limit checks are refused until it is released")
    return LimitExceeded(answer)


# ---- the module's default client: rebuilt when the environment it came from changes -------

_default: Optional[Client] = None
_default_env: Optional[Dict[str, Optional[str]]] = None


def default_client() -> Client:
    """The module's Client, from $SLUICE_URL, $SLUICE_TOKEN, $SLUICE_AGENT and
    $SLUICE_POOL; a new one when any of them changed since the last call."""
    global _default, _default_env
    env = env_settings()
    if _default is None or env != _default_env:
        if _default is not None:
            _default.close()
        _default, _default_env = Client(), env
    return _default


def limit(name: str, key: Optional[str] = None, hits: int = 1, action: Optional[str] = None,
          wait: float = 0.0, release: Optional[bool] = None) -> LimitScope:
    """`with sluice.limit("db.query"):` on the default client."""
    return default_client().limit(name, key, hits, action, wait, release)


def limited(name: str, key: Optional[str] = None, hits: int = 1, action: Optional[str] = None,
            wait: float = 0.0, release: Optional[bool] = None) -> Callable[[F], F]:
    """`@sluice.limited("tool.call")` on the default client (resolved at each call)."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kw: Any) -> Any:
            with default_client().limit(name, key, hits, action, wait, release):
                return fn(*args, **kw)
        return inner  # type: ignore[return-value]
    return wrap


def lease(input_tokens: int, output_tokens: int, cached_tokens: int = 0,
          **kw: Any) -> LeaseScope:
    """`with sluice.lease(...) as l:` on the default client."""
    return default_client().lease(input_tokens, output_tokens, cached_tokens, **kw)
