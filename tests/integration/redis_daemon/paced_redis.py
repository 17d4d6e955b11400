"""paced_redis.py - a TCP proxy in front of a redis-server that can pace its answers: with
a pace of P seconds, each reply on a connection is passed on no sooner than P after the one
before it, as a Redis busy with a long pipeline answers. This makes a backlog of known
length on any machine (P x commands), where a real burst makes one only as long as the
machine is slow, which is what lets a test tell "counted from when Redis can start it"
from "counted from the sending" without depending on the load.

Standard library only (RESP2 replies, which is what sluiced speaks). Every thread is a
daemon and every socket is closed by close().
"""
import socket
import threading
import time


def read_reply(f):
    """The raw bytes of one RESP2 reply from the buffered file `f`; b"" at end of stream."""
    line = f.readline()
    if not line:
        return b""
    kind, rest = line[:1], line[1:-2]
    if kind in (b"+", b"-", b":"):
        return line
    if kind == b"$":
        n = int(rest)
        return line if n < 0 else line + f.read(n + 2)
    if kind == b"*":
        n = int(rest)
        out = line
        for _ in range(max(n, 0)):
            part = read_reply(f)
            if not part:
                return b""
            out += part
        return out
    raise OSError("unexpected RESP reply %r" % line)


def shut(*socks):
    """Shuts both directions of every socket down (the other thread then sees the end)."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class PacedRedis:
    """Listens on a free 127.0.0.1 port (self.port) and forwards every connection to
    127.0.0.1:`redis_port`. `pace_s` (0: none) may be changed at any time."""

    def __init__(self, redis_port):
        self.redis_port = redis_port
        self.pace_s = 0.0
        self.lock = threading.Lock()
        self.socks = []
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, **opts):
        q = "&".join("%s=%s" % kv for kv in opts.items())
        return "redis://127.0.0.1:%d/0%s" % (self.port, "?" + q if q else "")

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.redis_port), timeout=10)
            except OSError:
                return
            upstream.settimeout(None)
            with self.lock:
                self.socks += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _requests(client, upstream):
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                upstream.sendall(data)
        except OSError:
            pass
        shut(client, upstream)

    def _replies(self, upstream, client):
        last = 0.0
        try:
            with upstream.makefile("rb") as f:
                while True:
                    reply = read_reply(f)
                    if not reply:
                        break
                    pace = self.pace_s
                    if pace > 0:
                        time.sleep(max(0.0, last + pace - time.monotonic()))
                    client.sendall(reply)
                    last = time.monotonic()
        except (OSError, ValueError):
            pass
        shut(client, upstream)

    def close(self):
        self.listener.close()
        with self.lock:
            for s in self.socks:
                s.close()
