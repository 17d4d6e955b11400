"""transport.py - HTTP/1.1 to sluiced for the blocking client: a small keep-alive pool of
http.client connections, safe to share between threads.

Timeouts are libsluice-client's: connecting may take connect_timeout_s, a call its own
timeout (request_timeout_s, or a long-poll's wait plus that). Any failure to get an
answer - refused, reset, timed out, a broken answer - is Unreachable. A request that
fails on a kept-alive connection before any answer byte (sluiced closed it while idle)
is sent once more on a new connection.
"""
from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

from .errors import Unreachable

MAX_IDLE = 8


def split_url(url: str) -> Tuple[str, str, int, str]:
    """(scheme, host, port, base path) of sluiced's URL."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError("url %r: expected http://HOST:PORT or https://HOST:PORT" % (url,))
    port = u.port or (443 if u.scheme == "https" else 80)
    return u.scheme, u.hostname, port, u.path.rstrip("/")


def encode_body(body: Any) -> Optional[bytes]:
    return None if body is None else json.dumps(body, separators=(",", ":")).encode()


def decode_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def request_headers(token: Optional[str], has_body: bool) -> Dict[str, str]:
    h = {"Accept": "application/json"}
    if has_body:
        h["Content-Type"] = "application/json"
    if token:
        h["Authorization"] = "Bearer " + token
    return h


class SyncTransport:
    def __init__(self, url: str, token: Optional[str], connect_timeout_s: float) -> None:
        self.url = url
        self.scheme, self.host, self.port, self.base = split_url(url)
        self.token = token
        self.connect_timeout_s = connect_timeout_s
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _new(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.connect_timeout_s)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def request(self, method: str, path: str, body: Any,
                timeout_s: float) -> Tuple[int, Any, Dict[str, str]]:
        data = encode_body(body)
        headers = request_headers(self.token, data is not None)
        for attempt in (0, 1):
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            reused = conn is not None
            answered = False
            try:
                if conn is None:
                    conn = self._new()
                conn.sock.settimeout(timeout_s)
                conn.request(method, self.base + path, body=data, headers=headers)
                resp = conn.getresponse()
                answered = True
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                if conn is not None:
                    conn.close()
                stale = reused and not answered and not isinstance(e, socket.timeout)
                if stale and attempt == 0:
                    continue
                raise Unreachable("%s %s%s: %s" % (method, self.url, path, e or type(e).__name__))
            if resp.will_close:
                conn.close()
            else:
                self._put(conn)
            return resp.status, decode_body(raw), {k.lower(): v for k, v in resp.getheaders()}
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __del__(self) -> None:
        self.close()
