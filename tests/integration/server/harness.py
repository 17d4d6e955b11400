"""harness.py - starts the real sluiced on a free 127.0.0.1 port and talks HTTP/JSON to it.

Standard library only. The binary comes from $SLUICED (CTest sets it). Every wait in
these tests is bounded in time.
"""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import procs  # noqa: E402  (tests/integration/procs.py)

SLUICED = os.environ.get("SLUICED", "sluiced")

# A pool small enough to queue with a handful of requests: capacity 5100 input tokens
# (6000 x 0.85), refilled at 85 tokens/s, queue waits up to 600 s.
SMALL_POOL = """
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 600
    ticket_idle_s: 600
"""


def full_at_start(config_text):
    """These tests start from full buckets (`cold_start: full`) unless their config says
    otherwise; test_restart.py covers the default, a cold start with empty buckets."""
    if "cold_start:" in config_text:
        return config_text
    return "cold_start: full\n" + config_text


class Sluiced(procs.Stoppable):
    """One sluiced process. Use as a context manager; stop() is idempotent."""

    def __init__(self, config_text="", extra_args=(), preexec_fn=None, listen="127.0.0.1:0"):
        self.dir = tempfile.TemporaryDirectory(prefix="sluiced-test-")
        self.config_path = os.path.join(self.dir.name, "sluice.yaml")
        self.event_log = os.path.join(self.dir.name, "events.jsonl")
        if "event_log" not in config_text:
            config_text = "event_log: %s\n%s" % (self.event_log, config_text)
        config_text = full_at_start(config_text)
        self.write_config(config_text)
        self.proc = subprocess.Popen(
            [SLUICED, "--config", self.config_path, "--listen", listen, *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
        line = self._read_banner(timeout_s=10)
        # "sluiced: listening on http://HOST:PORT (...)"; every listener takes 127.0.0.1
        self.port = int(re.search(r"http://(\[[^]]*\]|[^:/ ]+):(\d+)", line).group(2))
        self.token = None

    def write_config(self, text):
        with open(self.config_path, "w") as f:
            f.write(full_at_start(text))

    def _read_banner(self, timeout_s):
        return procs.read_banner(self.proc, "sluiced", timeout_s)

    def stop(self, timeout_s=5):
        """SIGTERM, then waits; raises when sluiced exited non-zero (a sanitizer report,
        a crash) so that no test passes over it."""
        if self.proc.stdout.closed:
            return
        try:
            procs.stop(self.proc, "sluiced", timeout_s)
        finally:
            self.dir.cleanup()

    def conn(self, timeout_s=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)

    def call(self, method, path, body=None, raw=None, headers=None, timeout_s=10, token=None):
        """Returns (status, parsed JSON body or text, response headers as a dict)."""
        c = self.conn(timeout_s)
        h = dict(headers or {})
        tok = token if token is not None else self.token
        if tok:
            h["Authorization"] = "Bearer " + tok
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        if data is not None or method in ("POST", "PUT"):
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        try:
            return r.status, json.loads(text), hdrs
        except ValueError:
            return r.status, text, hdrs


    def check(self, name, body, **kw):
        """POST /v1/limits/NAME/check with `body`; call()'s options and answer."""
        return self.call("POST", "/v1/limits/%s/check" % name, body, **kw)
    def lease(self, agent, input_tokens, output_tokens=10, **kw):
        body = {"agent": agent, "input_tokens": input_tokens, "output_tokens": output_tokens}
        body.update(kw)
        return self.call("POST", "/v1/leases", body)

    def pool(self, name="default"):
        status, body, _ = self.call("GET", "/v1/pools/" + name)
        assert status == 200, body
        return body

    def metric(self, name):
        """The value of the unlabelled Prometheus sample `name` in /metrics, or None."""
        _, text, _ = self.call("GET", "/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def events(self):
        """The event log's lines (flushed within 250 ms)."""
        time.sleep(0.35)
        with open(self.event_log) as f:
            return [json.loads(line) for line in f if line.strip()]


class KeepAlive:
    """One keep-alive connection with a token: many leases and cancels quickly."""

    def __init__(self, s, token):
        self.conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        self.token = token

    def call(self, method, path, body=None):
        h = {"Authorization": "Bearer " + self.token}
        if body is not None:
            h["Content-Type"] = "application/json"
        self.conn.request(method, path, json.dumps(body) if body is not None else None, h)
        r = self.conn.getresponse()
        text = r.read()
        return r.status, json.loads(text) if text else None, dict(r.getheaders())

    def lease(self, agent):
        return self.call("POST", "/v1/leases",
                         {"agent": agent, "input_tokens": 10, "output_tokens": 10})

    def lease_and_cancel(self, agent):
        st, body, hdrs = self.lease(agent)
        if st == 200:
            st2, _, _ = self.call("DELETE", "/v1/leases/" + body["lease"])
            assert st2 == 200
        return st, body, hdrs

    def close(self):
        self.conn.close()


def recv_until(sock, needle, timeout_s=5):
    """What sock sends until `needle` is in it or timeout_s passed (the socket's own
    timeout bounds each read); the bytes read."""
    data = b""
    deadline = time.monotonic() + timeout_s
    while needle not in data and time.monotonic() < deadline:
        data += sock.recv(65536)
    return data


def raw_request(port, method, path, body=b"", headers=None):
    """Sends one request on a fresh socket and returns the socket without reading."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    headers = dict(headers or {})
    if method in ("POST", "PUT") and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    h = "".join("%s: %s\r\n" % kv for kv in headers.items())
    s.sendall(("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n%s\r\n"
               % (method, path, port, len(body), h)).encode() + body)
    return s


def wait_until(pred, timeout_s, step_s=0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step_s)
    return pred()


class SharedSluiced(unittest.TestCase):
    """A test class whose tests share one sluiced (self.s), started once from the class's
    `config` (YAML text)."""
    config = None

    @classmethod
    def setUpClass(cls):
        cls.s = Sluiced(cls.config)

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()


def check_config(text):
    """Runs `sluiced --check-config` on `text`; returns (exit status, stdout + stderr)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        p = subprocess.run([SLUICED, "--config", f.name, "--check-config"],
                           capture_output=True, text=True, timeout=10)
    return p.returncode, p.stdout + p.stderr


def refused_start(text):
    """sluiced's stderr when it refuses to start on `text` (a check past --check-config's,
    made at start); None when it started."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sluice.yaml")
        with open(path, "w") as f:
            f.write(text)
        try:
            p = subprocess.run([SLUICED, "--config", path, "--listen", "127.0.0.1:0"],
                               capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:  # it started and served
            return None
    return p.stderr if p.returncode != 0 else None


def refused_config(text):
    """What `sluiced --check-config` says refusing `text`; None when the file loads."""
    rc, out = check_config(text)
    return out if rc != 0 else None
