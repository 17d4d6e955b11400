"""harness.py - starts a real sluice-emu and a real sluiced proxying to it, on free 127.0.0.1 ports.

Standard library only. Binaries come from $SLUICED and $SLUICE_EMU (CTest sets both).
The provider key is handed to sluiced through the environment (api_key_env), as an
operator would; the emulator accepts only that key. Every wait is bounded in time.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import procs  # noqa: E402  (tests/integration/procs.py)
import bodies  # noqa: E402  (tests/integration/bodies.py)
from bodies import chat, message  # noqa: E402,F401  (tests/integration/bodies.py)

SLUICED = os.environ.get("SLUICED", "sluiced")
SLUICE_EMU = os.environ.get("SLUICE_EMU", "sluice-emu")
REAL_KEY = "sk-ant-real-pool-key-0123456789abcdef"
ANTHROPIC_VERSION = "2023-06-01"

# Emulator limits that never get in the way, and instant answers.
EMU_FAST = ["--input-tpm", "100000000", "--output-tpm", "100000000", "--rpm", "1000000",
            "--ttft-ms", "0", "--tokens-per-s", "100000", "--latency-spread", "0",
            "--output-tokens", "24"]


_read_banner = procs.read_banner
_stop = procs.stop


class Emu(procs.Stoppable):
    """One sluice-emu accepting only `key` (REAL_KEY)."""

    def __init__(self, args=EMU_FAST, tls=None, key=REAL_KEY):
        argv = [SLUICE_EMU, "--listen", "127.0.0.1:0", "--api-key", key, *args]
        if tls:
            argv += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = _read_banner(self.proc, "sluice-emu", 15)
        self.port = int(line.split("127.0.0.1:")[1].split()[0])
        self.scheme = line.split("listening on ")[1].split(":")[0]
        self.url = "%s://127.0.0.1:%d" % (self.scheme, self.port)
        self.output = None

    def stop(self):
        if self.output is None:
            self.output = _stop(self.proc, "sluice-emu")
        return self.output

    def stats(self, context=None):
        if self.scheme == "https":
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10, context=context)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", "/stats")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()


def pool_yaml(name, emu_url, provider="anthropic", limits="", extra=""):
    """A pool block for the config: the upstream at emu_url, key from $SLUICE_TEST_KEY."""
    text = ("  %s:\n    upstream_url: %s\n    provider: %s\n    api_key_env: SLUICE_TEST_KEY\n"
            % (name, emu_url, provider))
    for line in (limits + "\n" + extra).strip().splitlines():
        if line.strip():
            text += "    " + line.strip() + "\n"
    return text


class Sluiced:
    """One sluiced with the given config text; the pool key in its environment."""

    def __init__(self, config_text, key=REAL_KEY):
        self.dir = tempfile.TemporaryDirectory(prefix="sluiced-proxy-test-")
        self.config_path = os.path.join(self.dir.name, "sluice.yaml")
        self.event_log = os.path.join(self.dir.name, "events.jsonl")
        with open(self.config_path, "w") as f:
            # Full buckets at start unless the test says otherwise (test_restart.py does).
            cold = "" if "cold_start:" in config_text else "cold_start: full\n"
            f.write("event_log: %s\n%s%s" % (self.event_log, cold, config_text))
        env = dict(os.environ)
        env["SLUICE_TEST_KEY"] = key
        self.proc = subprocess.Popen(
            [SLUICED, "--config", self.config_path, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = _read_banner(self.proc, "sluiced", 15)
        self.port = int(line.split("http://127.0.0.1:")[1].split()[0])
        self.output = None
        self.bearer = None  # the token get() presents when auth is on

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        self.dir.cleanup()

    def stop(self):
        if self.output is None:
            self.output = _stop(self.proc, "sluiced")
        return self.output

    def events(self):
        time.sleep(0.4)  # the log is flushed every 250 ms
        with open(self.event_log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def event_log_text(self):
        time.sleep(0.4)
        with open(self.event_log) as f:
            return f.read()

    # ---- HTTP --------------------------------------------------------------------------

    def connection(self, timeout_s=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)

    def request(self, method, path, body=None, headers=None, raw=None):
        """Returns (status, headers with lower-case names, body bytes)."""
        return procs.request(self.connection(), method, path, body, headers, raw)

    def get(self, path):
        headers = {"authorization": "Bearer " + self.bearer} if self.bearer else {}
        status, _, payload = self.request("GET", path, headers=headers)
        assert status == 200, (path, status, payload)
        return json.loads(payload)

    def agent(self, name):
        for a in self.get("/v1/agents")["agents"]:
            if a["name"] == name:
                return a
        return None

    def pool(self, name):
        return self.get("/v1/pools/" + name)

    def anthropic(self, body, agent="agent-1", key="agent-token-not-the-real-key", extra=None,
                  path="/anthropic/v1/messages"):
        headers = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if key is not None:
            headers["x-api-key"] = key
        if agent is not None:
            headers["x-sluice-agent"] = agent
        headers.update(extra or {})
        return self.request("POST", path, body, headers)

    def openai(self, body, agent="agent-1", key="agent-token-not-the-real-key", extra=None):
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["authorization"] = "Bearer " + key
        if agent is not None:
            headers["x-sluice-agent"] = agent
        headers.update(extra or {})
        return self.request("POST", "/openai/v1/chat/completions", body, headers)

    def open_stream(self, path, body, headers):
        """Starts a streaming POST; returns (socket, status line + headers text, first body
        bytes). The caller reads on with read_some() and closes the socket."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        data = json.dumps(body).encode()
        head = "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n" % (path, len(data))
        for k, v in headers.items():
            head += "%s: %s\r\n" % (k, v)
        s.sendall(head.encode() + b"\r\n" + data)
        return s


def read_until(sock, needle, timeout_s):
    """Reads from `sock` until `needle` (bytes) was seen; returns everything read."""
    deadline = time.monotonic() + timeout_s
    got = b""
    while needle not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no %r within %.1f s; got %r" % (needle, timeout_s, got[-300:]))
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before %r; got %r" % (needle, got[-300:]))
        got += chunk
    return got


def parse_sse(payload):
    """Parses an SSE body that came through the proxy, comments kept as (":", text)
    (bodies.parse_sse)."""
    return bodies.parse_sse(payload, strict=False)


def reply_json(handler, obj, status=200):
    """Answers an http.server request (from its handler) with `obj` as JSON."""
    body = json.dumps(obj).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out after %.1f s waiting for %s" % (timeout_s, what))


class SharedProxy(unittest.TestCase):
    """A test class whose tests share one emulator and one sluiced, started once from the
    class's `config(emu)` (a function of the emulator giving sluiced's YAML)."""
    config = None

    @classmethod
    def setUpClass(cls):
        cls.emu = Emu()
        cls.sluiced = Sluiced(cls.config(cls.emu))

    @classmethod
    def tearDownClass(cls):
        cls.sluiced.stop()
        cls.emu.stop()


def streaming_pair(pool, provider, output_tokens):
    """An emulator that answers `output_tokens` at 400,000 tokens/s and a sluiced proxying
    `pool` to it with limits that never bind, for the slow-reader tests. Under
    AddressSanitizer freed memory sits in a quarantine, which would count as growth: this
    sluiced runs without it (other checks stay on)."""
    fast = list(EMU_FAST)
    fast[fast.index("--output-tokens") + 1] = str(output_tokens)
    fast[fast.index("--tokens-per-s") + 1] = "400000"
    asan = os.environ.get("ASAN_OPTIONS")
    if asan is not None:
        os.environ["ASAN_OPTIONS"] = asan + ":quarantine_size_mb=0"
    emu = Emu(fast)
    try:
        s = Sluiced("pools:\n" + pool_yaml(pool, emu.url, provider,
                                           "input_tpm: 100000000\noutput_tpm: 100000000\n"
                                           "rpm: 100000"))
    except Exception:
        emu.stop()
        raise
    finally:
        if asan is not None:
            os.environ["ASAN_OPTIONS"] = asan
    return emu, s


def rss_kb(pid):
    """The resident set of process `pid`, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        return int([line for line in f if line.startswith("VmRSS:")][0].split()[1])
