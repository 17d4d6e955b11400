"""aio.py - the asyncio client: the same protocol (protocol.py) driven by awaits, over its own
HTTP/1.1 keep-alive connection pool on asyncio streams. No thread, no executor: a thousand
held waits are a thousand idle sockets on one loop.

The pool keeps up to max_idle connections per client; a held call (a long-poll, a queued
limit check) holds one connection while it waits, as HTTP/1.1 must. A call cancelled
while in flight closes its connection, which is how sluiced learns the waiter is gone
(its place in the queue is given up within a second).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import ssl
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from .answers import Estimate, Lease, LimitAnswer, Settled
from .client import _Base
from .errors import Unreachable
from .scopes import LeaseScope, LimitScope
from .protocol import FOREVER, Call, Invoke, Sleep, Steps, quote
from .transport import decode_body, encode_body, request_headers, split_url
from .usage import Usage, usage_from

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()


class _Broken(Exception):
    """The answer was not HTTP/1.1 as expected."""


async def _read_answer(reader: asyncio.StreamReader,
                       progress: Dict[str, bool]) -> Tuple[int, Dict[str, str], bytes]:
    """Reads one answer; progress["answered"] turns True at its first byte."""
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("closed before the answer")
    progress["answered"] = True
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise _Broken("not an HTTP/1.x status line: %r" % line[:80])
    status = int(parts[1])
    headers: Dict[str, str] = {}
    size = 0
    while True:
        line = await reader.readline()
        size += len(line)
        if size > MAX_HEAD_BYTES:
            raise _Broken("answer head over %d bytes" % MAX_HEAD_BYTES)
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if status in (100, 101, 102, 103):
        return await _read_answer(reader, progress)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: List[bytes] = []
        total = 0
        while True:
            n = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if n == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                break
            total += n
            if total > MAX_BODY_BYTES:
                raise _Broken("answer body over %d bytes" % MAX_BODY_BYTES)
            chunks.append(await reader.readexactly(n))
            await reader.readexactly(2)
        return status, headers, b"".join(chunks)
    length = int(headers.get("content-length", "0") or 0)
    if length > MAX_BODY_BYTES:
        raise _Broken("answer body over %d bytes" % MAX_BODY_BYTES)
    return status, headers, await reader.readexactly(length) if length else b""


class AsyncTransport:
    """HTTP/1.1 keep-alive connections to sluiced on asyncio streams (one event loop)."""

    def __init__(self, url: str, token: Optional[str], connect_timeout_s: float,
                 max_idle: int = 32) -> None:
        self.url = url
        self.scheme, self.host, self.port, self.base = split_url(url)
        self.token = token
        self.connect_timeout_s = connect_timeout_s
        self.max_idle = max_idle
        self._idle: List[_Conn] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self.opened = 0  # connections opened so far (for tests and metrics)

    async def _connect(self) -> _Conn:
        ctx = ssl.create_default_context() if self.scheme == "https" else None
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=ctx, limit=MAX_HEAD_BYTES),
            self.connect_timeout_s)
        self.opened += 1
        return _Conn(reader, writer)

    def _head(self, method: str, path: str, data: Optional[bytes]) -> bytes:
        lines = ["%s %s%s HTTP/1.1" % (method, self.base, path),
                 "Host: %s:%d" % (self.host, self.port)]
        for k, v in request_headers(self.token, data is not None).items():
            lines.append("%s: %s" % (k, v))
        if data is not None or method in ("POST", "PUT"):
            lines.append("Content-Length: %d" % len(data or b""))
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def request(self, method: str, path: str, body: Any,
                      timeout_s: float) -> Tuple[int, Any, Dict[str, str]]:
        data = encode_body(body)
        msg = self._head(method, path, data) + (data or b"")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (another asyncio.run): the kept
            for c in self._idle:    # connections belong to the old one
                try:
                    c.writer.transport.abort()
                except RuntimeError:
                    pass  # that loop is closed: the socket goes with its transport
            self._idle, self._loop = [], loop
        for attempt in (0, 1):
            conn = None
            while self._idle and conn is None:
                c = self._idle.pop()
                conn = c if c.usable() else c.close()
            reused = conn is not None
            progress = {"answered": False}
            try:
                if conn is None:
                    conn = await self._connect()
                conn.writer.write(msg)
                await conn.writer.drain()
                status, headers, raw = await asyncio.wait_for(
                    _read_answer(conn.reader, progress), timeout_s)
            except asyncio.CancelledError:
                if conn is not None:
                    conn.close()
                raise
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, _Broken,
                    ValueError) as e:
                if conn is not None:
                    conn.close()
                stale = reused and not progress["answered"] and not isinstance(e, asyncio.TimeoutError)
                if stale and attempt == 0:
                    continue
                raise Unreachable("%s %s%s: %s" % (method, self.url, path,
                                                   str(e) or type(e).__name__))
            if headers.get("connection", "").lower() == "close" or len(self._idle) >= self.max_idle:
                conn.close()
            else:
                self._idle.append(conn)
            return status, decode_body(raw), headers
        raise AssertionError("unreachable")

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()
            try:
                await c.writer.wait_closed()
            except OSError:
                pass


class AsyncClient(_Base):
    """The asyncio twin of Client: the same options and methods, awaited, on a native
    asyncio connection pool (max_idle kept-alive connections, default 32). Use one per
    event loop; `async with AsyncClient(...) as c:` closes its connections."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 agent: Optional[str] = None, pool: Optional[str] = None,
                 role: Optional[str] = None, max_idle: int = 32, **options: Any) -> None:
        super().__init__(url, token, agent, pool, role, **options)
        self._http = AsyncTransport(self.url, self.token, self.options.connect_timeout_s,
                                    max_idle)

    @property
    def connections_opened(self) -> int:
        return self._http.opened

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _run(self, steps: Steps[T]) -> T:
        """Drives a protocol generator with awaits."""
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
                    value = await self._http.request(op.method, op.path, op.body, op.timeout_s)
                except Unreachable as e:
                    error = e
            elif isinstance(op, Sleep):
                await asyncio.sleep(max(0.0, op.seconds))
            elif isinstance(op, Invoke):
                value = op.fn(*op.args)
                if inspect.isawaitable(value):
                    value = await value

    async def call(self, method: str, path: str, body: Any = None,
                   timeout_s: Optional[float] = None) -> tuple:
        """One API call: (status, parsed JSON body, headers); raises Unreachable."""
        return await self._http.request(method, path, body,
                                        timeout_s or self.options.request_timeout_s)

    # Each method is Client's of the same name (see its doc), awaited.

    async def acquire(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
                      max_wait_s: float = FOREVER, checkpoint: Any = None,
                      checkpoint_path: Optional[str] = None,
                      on_wait: Optional[Callable[..., Any]] = None,
                      request_id: Optional[str] = None, **fields: Any) -> Lease:
        return await self._run(self._p.acquire(input_tokens, output_tokens, cached_tokens,
                                               max_wait_s, checkpoint, checkpoint_path,
                                               on_wait, request_id, **fields))

    async def settle(self, lease: Any, input_tokens: int = 0, output_tokens: int = 0,
                     cache_creation_input_tokens: int = 0, cache_read_input_tokens: int = 0,
                     got_429: bool = False, retry_after: Optional[float] = None,
                     headers: Optional[Mapping[str, str]] = None, usage: Any = None,
                     failed: bool = False) -> Settled:
        if usage is None:
            usage = Usage(input_tokens, output_tokens, cache_creation_input_tokens,
                          cache_read_input_tokens, got_429, retry_after, failed,
                          dict(headers or {}))
        else:
            usage = usage_from(usage, headers)
        return await self._run(self._p.settle(lease, usage))

    async def cancel(self, lease: Any) -> dict:
        return await self._run(self._p.cancel(lease))

    async def extend(self, lease: Any, ttl_s: float) -> dict:
        return await self._run(self._p.extend(lease, ttl_s))

    async def ticket(self, ticket: str, wait_s: float = 0) -> dict:
        return await self._run(self._p.ticket(ticket, wait_s))

    def lease(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
              **kw: Any) -> LeaseScope:
        """`async with client.lease(...) as lease:` (Client.lease)."""
        return LeaseScope(self, dict(kw, input_tokens=input_tokens, output_tokens=output_tokens,
                                     cached_tokens=cached_tokens))

    async def estimate(self, request: Mapping[str, Any], api: Optional[str] = None,
                       pool: Optional[str] = None, model: Optional[str] = None) -> Estimate:
        return await self._run(self._p.estimate(request, api, pool, model))

    def lease_for(self, request: Mapping[str, Any], api: Optional[str] = None,
                  **kw: Any) -> LeaseScope:
        """`async with client.lease_for(body) as lease:` (Client.lease_for)."""
        return LeaseScope(self, kw, request, api)

    async def put_task(self, task: str, role: Optional[str] = None,
                       depends_on: Optional[list] = None, state: Optional[str] = None) -> dict:
        body: Dict[str, Any] = {}
        for k, v in (("role", role), ("depends_on", depends_on), ("state", state)):
            if v is not None:
                body[k] = v
        return await self._run(self._p.call("PUT", "/v1/tasks/" + quote(task), body))

    async def get_pool(self, name: Optional[str] = None) -> dict:
        return await self._run(self._p.call("GET", "/v1/pools/" + quote(name or self.pool)))

    async def check(self, name: str, key: Optional[str] = None, hits: int = 1,
                    action: Optional[str] = None, wait: float = 0.0,
                    agent: Optional[str] = None) -> LimitAnswer:
        return await self._run(self._p.check(name, key, hits, action, wait, agent))

    async def release(self, name: str, key: Optional[str] = None,
                      agent: Optional[str] = None) -> dict:
        return await self._run(self._p.release(name, key, agent))

    async def report(self, name: str, successes: int = 0, errors: int = 0,
                     key: Optional[str] = None, agent: Optional[str] = None) -> dict:
        return await self._run(self._p.report(name, successes, errors, key, agent))

    async def release_holds(self, answer: LimitAnswer, key: Optional[str] = None,
                            since: Optional[float] = None) -> None:
        await self._run(self._p.release_holds(answer, key, since))

    def limit(self, name: str, key: Optional[str] = None, hits: int = 1,
              action: Optional[str] = None, wait: float = 0.0,
              release: Optional[bool] = None) -> LimitScope:
        """`async with ac.limit("tool.call"):` - checks on entry, releases holds on exit."""
        return LimitScope(self, name, key, hits, action, wait, release)

    def limited(self, name: str, key: Optional[str] = None, hits: int = 1,
                action: Optional[str] = None, wait: float = 0.0,
                release: Optional[bool] = None) -> Callable[[F], F]:
        """A decorator for coroutine functions: each call runs inside `async with limit()`."""
        def wrap(fn: F) -> F:
            @functools.wraps(fn)
            async def inner(*args: Any, **kw: Any) -> Any:
                async with self.limit(name, key, hits, action, wait, release):
                    return await fn(*args, **kw)
            return inner  # type: ignore[return-value]
        return wrap
