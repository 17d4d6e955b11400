"""redis_harness.py - a private redis-server on a free port and sluiced replicas on it.

Standard library only. Reuses tests/integration/server/harness.py for the sluiced
process (banner, HTTP calls, event log). Every wait is bounded.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from harness import Sluiced, wait_until  # noqa: E402

REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def redis_ping(port, timeout_s=0.5):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def resp_read(f):
    """One RESP reply from the file `f`: str, int, None, list; errors as RedisError."""
    line = f.readline()
    if not line:
        raise OSError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        try:
            return data.decode()
        except UnicodeDecodeError:
            return data
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [resp_read(f) for _ in range(n)]
    raise OSError("unexpected RESP reply %r" % line)


class RedisError(Exception):
    pass


def redis_command(port, *args, timeout_s=5):
    """Sends one command (arguments as str or bytes) and returns its decoded reply."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(out)
        with s.makefile("rb") as f:
            return resp_read(f)


class Redis:
    """A private redis-server in a temp dir (as with-redis.sh starts it)."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-redis-")
        self.port = None
        self.proc = None
        for _ in range(10):
            self.port = free_port()
            if self._start():
                return
        raise RuntimeError("could not start redis-server")

    def _start(self):
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
             self.dir.name, "--save", "", "--appendonly", "no", "--logfile",
             os.path.join(self.dir.name, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if wait_until(lambda: redis_ping(self.port) or self.proc.poll() is not None, 5) \
                and self.proc.poll() is None:
            return True
        self.proc.kill()
        self.proc.wait()
        return False

    def restart_empty(self, down_s=0.0):
        """kill -9 and start again on the same port without persistence: every key and
        the Functions library are gone."""
        self.proc.kill()
        self.proc.wait()
        time.sleep(down_s)
        for _ in range(20):
            if self._start():
                return
            time.sleep(0.25)
        raise RuntimeError("could not restart redis-server on port %d" % self.port)

    def command(self, *args):
        return redis_command(self.port, *args)

    def stop_signal(self):
        self.proc.send_signal(signal.SIGSTOP)

    def cont_signal(self):
        self.proc.send_signal(signal.SIGCONT)

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()

    def url(self, **opts):
        q = "&".join("%s=%s" % kv for kv in opts.items())
        return "redis://127.0.0.1:%d/0%s" % (self.port, "?" + q if q else "")


# One pool: capacity 5100 input tokens (6000 x 0.85), refilled at 85 tokens/s; a ticket
# waits and idles up to 600 s.
SMALL = """  default:
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 600
    ticket_idle_s: 600
"""


def replica(redis, pools_yaml, **opts):
    """A sluiced on `redis` with the given pools (YAML lines under `pools:`)."""
    opts.setdefault("tick_ms", 200)
    opts.setdefault("timeout_ms", 300)
    # Always in the URL, which wins over the top-level `cold_start: full` the server
    # harness adds: these tests choose the Redis backend's own cold start.
    opts.setdefault("cold_start", "empty")
    return Sluiced("backend: %s\npools:\n%s" % (redis.url(**opts), pools_yaml))


def backend_unavailable(r):
    """Whether replica r's /metrics raises the backend_unavailable alert (Redis away)."""
    _, text, _ = r.call("GET", "/metrics")
    return 'sluice_alert{name="backend_unavailable",pool=""} 1' in text


class OnRedis(unittest.TestCase):
    """A test on a private redis-server of its own (self.redis). The sluiced replicas it
    starts go in self.replicas; after the test they are stopped, then the server (woken
    first, should the test have stopped it with SIGSTOP)."""

    def setUp(self):
        self.redis = Redis()
        self.replicas = []

    def tearDown(self):
        self.redis.cont_signal()
        for r in self.replicas:
            r.stop()
        self.redis.close()

    def start(self, n, pools=SMALL, **opts):
        """n more replicas on self.redis with `pools` and replica() options `opts`; returns
        every replica of the test, all ready."""
        for _ in range(n):
            self.replicas.append(replica(self.redis, pools, **opts))
        self.ready(*self.replicas)
        return self.replicas

    def ready(self, *rs):
        """Waits until each of rs answers /readyz with 200 (10 s at most each)."""
        for r in rs:
            self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))

    def level(self, r):
        """The input-token level of replica r's pool "default"."""
        return r.pool()["buckets"]["input_tokens"]["level"]

    def alert(self, r, name="backend_unavailable", pool=""):
        """The value of alert `name` (of `pool`) in replica r's /metrics; fails the test
        when /metrics does not answer or does not hold it."""
        st, text, _ = r.call("GET", "/metrics")
        self.assertEqual(st, 200)
        want = 'sluice_alert{name="%s",pool="%s"}' % (name, pool)
        for line in text.splitlines():
            if line.startswith(want):
                return int(line.split()[-1])
        self.fail("no %s in /metrics" % want)


class TwoReplicas(unittest.TestCase):
    """A test with replicas self.a and self.b on one redis-server, made by start()."""

    def start(self, make):
        """make(redis) -> a Sluiced; both are ready when this returns."""
        self.redis = Redis()
        self.a, self.b = make(self.redis), make(self.redis)
        for r in (self.a, self.b):
            self.assertTrue(wait_until(lambda r=r: r.call("GET", "/readyz")[0] == 200, 10))

    def tearDown(self):
        self.b.stop()
        self.a.stop()
        self.redis.close()


def grants(replicas):
    """Every grant in the replicas' event logs, once per lease (a grant of a queued
    ticket may be logged by the replica that granted it and by the one holding it)."""
    seen = {}
    for r in replicas:
        for e in r.events():
            if e.get("event") == "granted" and e.get("lease"):
                seen[e["lease"]] = e
    return seen


def events_of(replicas, kind):
    out = []
    for r in replicas:
        out.extend(e for e in r.events() if e.get("event") == kind)
    return out
