"""failopen.py - what a client does while sluiced cannot be reached, as libsluice-client does.

The same semantics and defaults as the C library (docs/client.md "Fail-open"): at the
first transport failure of a lease call the client switches to local mode inside that
call and logs one ALERT line; leases then come from local token buckets holding this
client's share (local_input_tpm / local_output_tpm / local_rpm when set, else the pool's
limits learnt from GET /v1/pools/{pool} after the first grant divided by fleet_size;
unknown means not limited locally), refilled continuously; a local settle refunds or
charges the difference; a cached prefix is charged as input when the last settle is older
than cache_ttl_s; sluiced is probed (GET /healthz) every probe_interval_s ±50%, and the
first answer switches back with a second log line. A 429 reported on a settle starts a
full-jitter backoff (backoff_delay_s) that the next acquire sleeps out. fail_closed=True
decides nothing locally: Unreachable is raised instead. Limit checks are never local.
"""
from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from .errors import Unreachable

INPUT, OUTPUT, REQUESTS = 0, 1, 2  # the local buckets: input TPM, output TPM, RPM
POOL_LIMIT_NAMES = ("input_tpm", "output_tpm", "rpm")


@dataclass
class Options:
    """A client's settings; the defaults are libsluice-client's (sl_client_options_init)."""

    connect_timeout_s: float = 0.5
    request_timeout_s: float = 1.0   # a call that does not long-poll
    poll_chunk_s: float = 20.0       # longest single long-poll
    fail_closed: bool = False        # never decide locally: raise Unreachable
    fleet_size: int = 1              # local share = the pool's limits / fleet_size
    local_input_tpm: int = 0         # the local share; 0: the pool's limit / fleet_size
    local_output_tpm: int = 0
    local_rpm: int = 0
    probe_interval_s: float = 5.0    # probe sluiced this often in local mode (±50%)
    cache_ttl_s: float = 300.0       # provider prompt-cache lifetime
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    max_hold_s: float = 540.0        # SL_CHECKPOINTED_MAX_WAIT_S; 0: never ask to be held

    def check(self) -> None:
        for name in ("connect_timeout_s", "request_timeout_s", "poll_chunk_s",
                     "probe_interval_s", "cache_ttl_s", "backoff_base_s", "backoff_cap_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
                raise ValueError("%s must be a number > 0, not %r" % (name, v))
        if not 0 <= self.max_hold_s <= 86400:
            raise ValueError("max_hold_s %r must be between 0 and 86400 seconds"
                             % (self.max_hold_s,))
        if not isinstance(self.fleet_size, int) or self.fleet_size < 1:
            raise ValueError("fleet_size must be an integer >= 1, not %r" % (self.fleet_size,))
        for name in ("local_input_tpm", "local_output_tpm", "local_rpm"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError("%s must be an integer >= 0, not %r"
                                 % (name, getattr(self, name)))


def backoff_delay_s(attempt: int, base_s: float, cap_s: float,
                    retry_after_s: Optional[float], u01: float) -> float:
    """The fallback delay after the attempt-th consecutive 429 (0 = the first): full
    jitter, u01 * min(cap_s, base_s * 2^attempt), never below retry_after_s. Pure (the
    same function as sl_backoff_delay_s)."""
    u01 = min(max(u01, 0.0), 1.0 - sys.float_info.epsilon)
    ceiling_s = cap_s if attempt >= 1024 else min(cap_s, base_s * 2.0 ** attempt)
    delay_s = u01 * ceiling_s
    if retry_after_s is not None and retry_after_s > delay_s:
        delay_s = float(retry_after_s)
    return delay_s


def default_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class FailOpen:
    """The fail-open state of one client: mode, local buckets and leases, backoff.
    Thread-safe (the blocking Client may be shared by threads)."""

    def __init__(self, opts: Options, agent: str, pool: str, url: str,
                 log: Optional[Callable[[str], None]] = None) -> None:
        self.opts, self.agent, self.pool, self.url = opts, agent, pool, url
        self.log = log or default_log
        self.local = False
        self.next_probe = 0.0
        self.pool_limits: Optional[List[int]] = None
        self._level = [0.0, 0.0, 0.0]
        self._limit = [0.0, 0.0, 0.0]
        self._refilled = 0.0
        self._ready = False
        self._leases: Dict[str, Tuple[int, int]] = {}
        self._next_id = 1
        self.last_settle = 0.0
        self.consecutive_429 = 0
        self.backoff_until = 0.0
        self._rng = random.Random()
        self._lock = threading.Lock()

    # ---- mode ----------------------------------------------------------------------

    def go_local(self, why: str) -> None:
        """sluiced did not answer: raise Unreachable when fail_closed, else local mode."""
        if self.opts.fail_closed:
            raise Unreachable("sluiced at %s cannot be reached (%s); fail_closed"
                              % (self.url, why))
        with self._lock:
            if not self.local:
                self.local = True
                self.log("sluice: ALERT agent %s: sluiced at %s unreachable (%s); fail-open: "
                         "local share of pool %s, probing every ~%.0f s"
                         % (self.agent, self.url, why, self.pool, self.opts.probe_interval_s))
            self.next_probe = time.monotonic() + self.opts.probe_interval_s * (
                0.5 + self._rng.random())

    def go_coordinated(self) -> None:
        with self._lock:
            if self.local:
                self.local = False
                self.log("sluice: agent %s: sluiced at %s answers again; coordinated mode"
                         % (self.agent, self.url))

    def probe_due(self) -> bool:
        return time.monotonic() >= self.next_probe

    def learn_limits(self, pool_answer: dict) -> None:
        limits = pool_answer.get("limits")
        if isinstance(limits, dict):
            self.pool_limits = [int(limits.get(n) or 0) if isinstance(limits.get(n), int)
                                else 0 for n in POOL_LIMIT_NAMES]

    def limits_wanted(self) -> bool:
        o = self.opts
        return (self.pool_limits is None and not o.fail_closed and
                not (o.local_input_tpm and o.local_output_tpm and o.local_rpm))

    # ---- the local share -----------------------------------------------------------

    def _share(self) -> List[float]:
        o = self.opts
        out = []
        for i, configured in enumerate((o.local_input_tpm, o.local_output_tpm, o.local_rpm)):
            if configured > 0:
                out.append(float(configured))
            elif self.pool_limits and self.pool_limits[i] > 0:
                out.append(float(max(1, self.pool_limits[i] // o.fleet_size)))
            else:
                out.append(0.0)
        return out

    def _refill(self, now: float) -> None:
        dt = now - self._refilled
        if dt > 0:
            for i in range(3):
                if self._limit[i] > 0:
                    self._level[i] = min(self._limit[i], self._level[i] + dt * self._limit[i] / 60)
            self._refilled = now

    def _set_limits(self, now: float) -> None:
        share = self._share()
        if not self._ready:
            self._limit, self._level, self._refilled, self._ready = share, list(share), now, True
            return
        self._refill(now)
        for i in range(3):
            if self._limit[i] == 0 and share[i] > 0:
                self._level[i] = share[i]  # newly limited: start full, like a new pool
            self._limit[i] = share[i]
            if share[i] > 0:
                self._level[i] = min(self._level[i], share[i])

    def local_need(self, input_tokens: int, cached_tokens: int, output_tokens: int) -> List[int]:
        """What a local lease takes: the cached prefix counts as input when the cache is
        cold (no settle within cache_ttl_s)."""
        now = time.monotonic()
        cold = self.last_settle == 0 or now - self.last_settle > self.opts.cache_ttl_s
        return [input_tokens + (cached_tokens if cold else 0), output_tokens, 1]

    def take(self, need: List[int]) -> float:
        """Takes `need` from the local share: 0 when taken, else the seconds until it
        fits, or -1 when it can never fit."""
        with self._lock:
            now = time.monotonic()
            self._set_limits(now)
            self._refill(now)
            wait_s = 0.0
            for i in range(3):
                limit = self._limit[i]
                if limit <= 0 or need[i] <= 0:
                    continue
                if need[i] > limit:
                    return -1.0
                missing = need[i] - self._level[i]
                if missing > 0:
                    wait_s = max(wait_s, missing / (limit / 60))
            if wait_s > 0:
                return wait_s
            for i in range(3):
                if self._limit[i] > 0:
                    self._level[i] -= need[i]
            return 0.0

    def share_limits(self) -> List[float]:
        with self._lock:
            return self._share()

    def _adjust(self, delta: List[int]) -> None:
        self._refill(time.monotonic())
        for i in range(3):
            if self._limit[i] > 0:
                self._level[i] = min(self._limit[i], self._level[i] + delta[i])

    def remember(self, need: List[int]) -> str:
        with self._lock:
            lease_id = "local-%d" % self._next_id
            self._next_id += 1
            self._leases[lease_id] = (need[0], need[1])
            return lease_id

    def forget(self, lease_id: str) -> Optional[Tuple[int, int]]:
        with self._lock:
            return self._leases.pop(lease_id, None)

    def settle_local(self, reserved: Tuple[int, int], input_tokens: int,
                     cache_creation_tokens: int, output_tokens: int) -> Tuple[int, int, float]:
        """Refunds or charges the difference; returns (adjust input, output, estimate error)."""
        actual_in = input_tokens + cache_creation_tokens
        delta = [reserved[0] - actual_in, reserved[1] - output_tokens, 0]
        with self._lock:
            self._adjust(delta)
        return delta[0], delta[1], abs(actual_in - reserved[0]) / max(actual_in, 1)

    def cancel_local(self, reserved: Tuple[int, int]) -> None:
        with self._lock:
            self._adjust([reserved[0], reserved[1], 1])

    # ---- backoff -------------------------------------------------------------------

    def note_settle(self, got_429: bool, retry_after: Optional[float]) -> float:
        """After a settle: a 429 starts the full-jitter backoff (returns its delay), a
        clean settle resets the count."""
        with self._lock:
            self.last_settle = time.monotonic()
            if not got_429:
                self.consecutive_429 = 0
                return 0.0
            delay_s = backoff_delay_s(self.consecutive_429, self.opts.backoff_base_s,
                                      self.opts.backoff_cap_s, retry_after, self._rng.random())
            self.consecutive_429 = min(self.consecutive_429 + 1, 64)
            self.backoff_until = max(self.backoff_until, time.monotonic() + delay_s)
            return delay_s
