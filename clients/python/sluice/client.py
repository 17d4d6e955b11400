"""client.py - sluiced over HTTP/JSON: leases (acquire, settle, cancel) and action limits
(check, release, report; a context manager and a decorator), blocking and asyncio."""
import asyncio
import functools
import json
import os
import random
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

POLL_CHUNK_S = 20.0  # longest single long-poll, as libsluice-client
FOREVER = float("inf")
MAX_WAIT_SENT_S = 1e9  # the largest `wait` sluiced takes (it holds up to its max_wait_s)
# The `max_wait` an acquire that saves a checkpoint asks for: held queued for an ETA up to
# this rather than rejected past the pool's max_queue_wait_s (SL_CHECKPOINTED_MAX_WAIT_S of
# <sluice/common.h>, as libsluice-client; under the provider SDKs' 10-minute timeouts).
MAX_HOLD_S = 540.0


class Error(Exception):
    """sluiced answered an error: `status` (HTTP), `type` and `message` of its body."""

    def __init__(self, status, type_, message):
        super().__init__("%s (%s): %s" % (type_, status, message))
        self.status, self.type, self.message = status, type_, message


class Unreachable(Error):
    """sluiced could not be reached (refused, reset, timeout)."""

    def __init__(self, why):
        super().__init__(0, "unreachable", why)


class Rejected(Error):
    """A lease was rejected and its retry_at lies beyond max_wait_s."""

    def __init__(self, answer):
        super().__init__(429, answer.get("reason", "rejected"), json.dumps(answer))
        self.answer = answer


class MaxWaitExceeded(Error):
    """max_wait_s ran out while the lease was queued (its ticket was given up)."""

    def __init__(self, answer):
        super().__init__(202, "max_wait", json.dumps(answer))
        self.answer = answer


class LimitExceeded(Exception):
    """An action limit denied the check (raised by limit() and limited())."""

    def __init__(self, answer):
        d = answer.denied_by or {}
        super().__init__("denied by %s (%s), retry after %ss" % (
            d.get("limit", d.get("reason")), d.get("key"), answer.retry_after))
        self.answer = answer


class Lease(dict):
    """A granted lease: sluiced's GRANT answer (`lease`, `expires_at`, `charged`, ...)."""

    @property
    def id(self):
        return self["lease"]


class LimitAnswer:
    """The answer of a limit check (200 or 429 of POST /v1/limits/{name}/check)."""

    def __init__(self, body, headers, waited_s):
        self.body = body
        self.allowed = bool(body.get("allowed"))
        self.limit = body.get("limit")
        self.remaining = body.get("remaining")
        self.retry_after = body.get("retry_after", 0)
        self.reset_after = body.get("reset_after", 0)
        self.checked = body.get("checked", [])
        self.denied_by = body.get("denied_by")
        if not self.allowed and self.denied_by is None and "reason" in body:
            # refused before any limit was asked (a suspended agent): denied by that reason
            self.denied_by = {"reason": body["reason"]}
        self.headers = headers
        self.waited = waited_s

    def __bool__(self):
        return self.allowed

    def __repr__(self):
        return "LimitAnswer(allowed=%r, limit=%r, remaining=%r, retry_after=%r)" % (
            self.allowed, self.limit, self.remaining, self.retry_after)


def save_checkpoint(path, cp):
    """Writes checkpoint `cp` (a dict: goal, step, files, decisions, next_call, request_id)
    in libsluice-client's format, atomically: a temporary file beside `path`, fsync,
    rename, fsync of the directory."""
    cp = dict(cp)
    cp["sluice_checkpoint"] = 1
    cp["saved_at"] = time.time()
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(cp, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class Client:
    """A blocking client. Not locked: use one per thread (as libsluice-client)."""

    def __init__(self, url=None, token=None, agent=None, pool=None, role=None,
                 request_timeout_s=5.0, max_hold_s=MAX_HOLD_S):
        self.url = (url or os.environ.get("SLUICE_URL") or "http://127.0.0.1:8750").rstrip("/")
        self.token = token if token is not None else os.environ.get("SLUICE_TOKEN")
        self.agent = agent or os.environ.get("SLUICE_AGENT") or "python"
        self.pool = pool
        self.role = role
        self.request_timeout_s = request_timeout_s
        if not 0 <= max_hold_s <= 86400:
            raise ValueError("max_hold_s %r must be between 0 and 86400 seconds" % (max_hold_s,))
        self.max_hold_s = max_hold_s  # 0: never ask to be held past the pool's wait limit
        self._limit_configs = {}  # name -> its configuration, for release_holds

    # ---- HTTP ----------------------------------------------------------------------

    def call(self, method, path, body=None, timeout_s=None):
        """One API call. Returns (status, parsed JSON body, headers as a lower-case dict);
        raises Unreachable when sluiced cannot be reached."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.request_timeout_s) as r:
                status, raw, hdrs = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            status, raw, hdrs = e.code, e.read(), e.headers
        except (urllib.error.URLError, OSError) as e:
            raise Unreachable("%s: %s" % (self.url, getattr(e, "reason", e)))
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return status, parsed, {k.lower(): v for k, v in hdrs.items()}

    @staticmethod
    def _error(status, body):
        e = body.get("error", {}) if isinstance(body, dict) else {}
        return Error(status, e.get("type", "http_%d" % status), e.get("message", str(body)))

    # ---- leases --------------------------------------------------------------------

    def acquire(self, input_tokens, output_tokens, cached_tokens=0, max_wait_s=FOREVER,
                checkpoint=None, checkpoint_path=None, on_wait=None, request_id=None, **fields):
        """Takes a lease (POST /v1/leases), waiting while queued or rejected. Before the
        first wait the checkpoint (a dict) is saved to checkpoint_path with the request's
        request_id, so a restarted agent re-sends the same request (charged once);
        on_wait(kind, eta_s, answer) hears every wait and may return True to give up.
        With a checkpoint the request asks sluiced to hold it queued (`max_wait`) for an
        ETA up to the client's max_hold_s (and no longer than max_wait_s leaves) instead
        of rejecting it: a checkpointed agent loses nothing by waiting in line, while one
        asleep until retry_at leaves capacity unused.
        Returns a Lease; raises Rejected, MaxWaitExceeded, Error, Unreachable."""
        started = time.monotonic()
        request_id = request_id or uuid.uuid4().hex
        saved = False
        body = {"agent": self.agent, "input_tokens": input_tokens,
                "output_tokens": output_tokens, "cached_tokens": cached_tokens,
                "request_id": request_id}
        if self.pool:
            body["pool"] = self.pool
        if self.role:
            body["role"] = self.role
        body.update(fields)

        def left():
            return max_wait_s - (time.monotonic() - started)

        def before_wait(kind, eta, answer):
            nonlocal saved
            if checkpoint is not None and checkpoint_path and not saved:
                cp = dict(checkpoint)
                cp["request_id"] = request_id
                save_checkpoint(checkpoint_path, cp)
                saved = True
            if on_wait and on_wait(kind, eta, answer):
                raise MaxWaitExceeded(answer)

        while True:
            hold = min(self.max_hold_s, left()) if checkpoint is not None and checkpoint_path else 0
            if hold > 0:
                body["max_wait"] = hold
            else:
                body.pop("max_wait", None)
            status, ans, _ = self.call("POST", "/v1/leases", body)
            if status == 200:
                return Lease(ans)
            if status == 202:
                ticket = ans["ticket"]
                while True:
                    before_wait("queued", ans.get("eta"), ans)
                    chunk = min(POLL_CHUNK_S, left())
                    if chunk <= 0:
                        self.call("DELETE", "/v1/tickets/%s" % ticket)
                        raise MaxWaitExceeded(ans)
                    status, ans, _ = self.call("GET", "/v1/tickets/%s?wait=%g" % (ticket, chunk),
                                               timeout_s=chunk + self.request_timeout_s)
                    if status == 200:
                        return Lease(ans)
                    if status != 202:
                        break
                if status != 429:
                    raise self._error(status, ans)
            if status == 429:
                retry_at = ans.get("retry_at", time.time() + ans.get("retry_after", 1))
                delay = max(0.0, retry_at - time.time()) + random.uniform(0, 0.25)
                if delay > left():
                    raise Rejected(ans)
                before_wait("rejected", delay, ans)
                time.sleep(delay)
                body["request_id"] = request_id = uuid.uuid4().hex  # a new request
                continue
            raise self._error(status, ans)

    def settle(self, lease, input_tokens, output_tokens, cache_creation_input_tokens=0,
               cache_read_input_tokens=0, got_429=False, retry_after=None, headers=None):
        """Reports what the call used (POST /v1/leases/{id}/settle); returns the answer."""
        body = {"input_tokens": input_tokens, "output_tokens": output_tokens,
                "cache_creation_input_tokens": cache_creation_input_tokens,
                "cache_read_input_tokens": cache_read_input_tokens, "got_429": bool(got_429)}
        if retry_after is not None:
            body["retry_after"] = retry_after
        if headers:
            body["headers"] = {k.lower(): v for k, v in headers.items()}
        lease_id = lease.id if isinstance(lease, Lease) else lease
        status, ans, _ = self.call("POST", "/v1/leases/%s/settle" % lease_id, body)
        if status != 200:
            raise self._error(status, ans)
        return ans

    def cancel(self, lease):
        """Gives a lease back unused (DELETE /v1/leases/{id}, full refund)."""
        lease_id = lease.id if isinstance(lease, Lease) else lease
        status, ans, _ = self.call("DELETE", "/v1/leases/%s" % lease_id)
        if status != 200:
            raise self._error(status, ans)
        return ans

    # ---- action limits -------------------------------------------------------------

    def _limit_path(self, name, action):
        return "/v1/limits/%s/%s" % (urllib.parse.quote(name, safe=""), action)

    def check(self, name, key=None, hits=1, action=None, wait=0.0, agent=None):
        """Checks action limit `name` (and its parents). While denied it waits up to
        `wait` seconds: sluiced holds a check of an on_limit: queue limit; for the others
        the client sleeps retry_after and asks again. Returns a LimitAnswer (allowed or
        not); raises Error (400, 403, 404) and Unreachable."""
        started = time.monotonic()
        while True:
            left = min(max(0.0, wait - (time.monotonic() - started)), MAX_WAIT_SENT_S)
            body = {"agent": agent or self.agent, "hits": hits}
            if key is not None:
                body["key"] = key
            if action is not None:
                body["action"] = action
            if left > 0:
                body["wait"] = left
            status, ans, hdrs = self.call("POST", self._limit_path(name, "check"), body,
                                          timeout_s=self.request_timeout_s + left)
            if status not in (200, 429):
                raise self._error(status, ans)
            answer = LimitAnswer(ans, hdrs, time.monotonic() - started)
            retry = answer.retry_after
            if answer.allowed or hits == 0 or retry is None or retry < 0:
                return answer
            if retry > wait - (time.monotonic() - started):
                return answer
            time.sleep(retry)

    def release(self, name, key=None, agent=None):
        """Ends one hold of a concurrency limit (POST /v1/limits/{name}/release)."""
        body = {"agent": agent or self.agent}
        if key is not None:
            body["key"] = key
        status, ans, _ = self.call("POST", self._limit_path(name, "release"), body)
        if status != 200:
            raise self._error(status, ans)
        return ans

    def report(self, name, successes=0, errors=0, key=None, agent=None):
        """Feeds outcomes to an adaptive limit; returns the answer (its `rate`)."""
        body = {"agent": agent or self.agent, "successes": successes, "errors": errors}
        if key is not None:
            body["key"] = key
        status, ans, _ = self.call("POST", self._limit_path(name, "report"), body)
        if status != 200:
            raise self._error(status, ans)
        return ans

    def _limit_config(self, name):
        """A limit's configuration (GET /v1/limits/{name}), asked once per Client."""
        cache = self._limit_configs
        if name not in cache:
            status, ans, _ = self.call("GET", "/v1/limits/" + urllib.parse.quote(name, safe=""))
            if status != 200:
                raise self._error(status, ans)
            cache[name] = ans.get("config", {})
        return cache[name]

    def _takes_key(self, name, depth=0):
        """True when `name` or an ancestor counts per: key (its calls then carry `key`)."""
        cfg = self._limit_config(name)
        return cfg.get("per") == "key" or (depth < 8 and any(
            self._takes_key(p, depth + 1) for p in cfg.get("parents", [])))

    def release_holds(self, answer, key=None, since=None):
        """Ends the holds an allowed check took: one per `concurrency` level of
        answer.checked that was charged (cost > 0), the limit's own or a parent's, each
        with `key` only where that level takes one. A hold whose TTL (the level's
        reset_after) has passed since `since` (time.monotonic() of the check) is skipped,
        and one already gone (404) is not an error: the release would end another's."""
        if not answer.allowed:
            return
        for lv in answer.checked:
            name = lv.get("limit")
            if not lv.get("cost") or self._limit_config(name).get("algorithm") != "concurrency":
                continue
            if since is not None and time.monotonic() - since >= lv.get("reset_after", 0):
                continue
            try:
                self.release(name, key if self._takes_key(name) else None)
            except Error as e:
                if e.status != 404:
                    raise

    def limit(self, name, key=None, hits=1, action=None, wait=0.0, release=None):
        """A context manager: checks on entry (raises LimitExceeded when denied) and on
        exit ends the holds the check took at `concurrency` levels (the limit's or its
        parents'; release_holds). release=True releases `name` instead, False nothing."""
        return _LimitContext(self, name, key, hits, action, wait, release)

    def limited(self, name, key=None, hits=1, action=None, wait=0.0, release=None):
        """A decorator: every call of the function runs inside limit(...)."""
        def wrap(fn):
            @functools.wraps(fn)
            def inner(*args, **kw):
                with self.limit(name, key, hits, action, wait, release):
                    return fn(*args, **kw)
            return inner
        return wrap


class _LimitContext:
    def __init__(self, client, name, key, hits, action, wait, release):
        self.client, self.name, self.key = client, name, key
        self.hits, self.action, self.wait, self.release = hits, action, wait, release
        self.answer = None

    def __enter__(self):
        self.answer = self.client.check(self.name, self.key, self.hits, self.action, self.wait)
        self.checked_at = time.monotonic()
        if not self.answer.allowed:
            raise LimitExceeded(self.answer)
        return self.answer

    def __exit__(self, *exc):
        if self.release is None:
            self.client.release_holds(self.answer, self.key, self.checked_at)
        elif self.release:
            self.client.release(self.name, self.key)
        return False

    async def __aenter__(self):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.__enter__)

    async def __aexit__(self, *exc):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.__exit__, *exc)


class AsyncClient:
    """The asyncio twin of Client: the same methods, awaited. Each call runs in the loop's
    default executor on a Client of its own thread (a Client is not shared)."""

    def __init__(self, **options):
        self._options = options
        self._local = __import__("threading").local()

    def _client(self):
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = Client(**self._options)
        return c

    async def _run(self, method, *args, **kw):
        loop = asyncio.get_running_loop()
        fn = functools.partial(lambda: getattr(self._client(), method)(*args, **kw))
        return await loop.run_in_executor(None, fn)

    async def acquire(self, *args, **kw):
        return await self._run("acquire", *args, **kw)

    async def settle(self, *args, **kw):
        return await self._run("settle", *args, **kw)

    async def cancel(self, *args, **kw):
        return await self._run("cancel", *args, **kw)

    async def check(self, *args, **kw):
        return await self._run("check", *args, **kw)

    async def release(self, *args, **kw):
        return await self._run("release", *args, **kw)

    async def report(self, *args, **kw):
        return await self._run("report", *args, **kw)

    def limit(self, name, key=None, hits=1, action=None, wait=0.0, release=None):
        """`async with ac.limit("tool.call"):` - checks on entry, releases holds on exit."""
        return _LimitContext(_ThreadClient(self), name, key, hits, action, wait, release)

    def limited(self, name, key=None, hits=1, action=None, wait=0.0, release=None):
        """A decorator for coroutine functions: each call runs inside `async with limit()`."""
        def wrap(fn):
            @functools.wraps(fn)
            async def inner(*args, **kw):
                async with self.limit(name, key, hits, action, wait, release):
                    return await fn(*args, **kw)
            return inner
        return wrap


class _ThreadClient:
    """The executor thread's Client of an AsyncClient (for _LimitContext)."""

    def __init__(self, ac):
        self.ac = ac

    def check(self, *args):
        return self.ac._client().check(*args)

    def release(self, *args):
        return self.ac._client().release(*args)

    def release_holds(self, *args):
        return self.ac._client().release_holds(*args)


_default = None


def default_client():
    """The module's Client, from $SLUICE_URL, $SLUICE_TOKEN and $SLUICE_AGENT."""
    global _default
    if _default is None:
        _default = Client()
    return _default


def limit(name, key=None, hits=1, action=None, wait=0.0, release=None):
    """`with sluice.limit("db.query"):` on the default client."""
    return default_client().limit(name, key, hits, action, wait, release)


def limited(name, key=None, hits=1, action=None, wait=0.0, release=None):
    """`@sluice.limited("tool.call")` on the default client (resolved at each call)."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kw):
            with default_client().limit(name, key, hits, action, wait, release):
                return fn(*args, **kw)
        return inner
    return wrap
