"""harness.py - starts the real sluice-emu on 127.0.0.1 (port 0) and talks HTTP to it.

Standard library only. The binary comes from $SLUICE_EMU (CTest sets it); the sluice
CLI, used to count tokens independently, from $SLUICE_CLI (optional). Every wait is
bounded in time, every loop in count.
"""
import http.client
import json
import os
import ssl
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import procs  # noqa: E402  (tests/integration/procs.py)
from bodies import message, parse_sse  # noqa: E402,F401  (tests/integration/bodies.py)

SLUICE_EMU = os.environ.get("SLUICE_EMU", "sluice-emu")
SLUICE_CLI = os.environ.get("SLUICE_CLI", "")
KEY = "sk-emu-test-key"
ANTHROPIC_VERSION = "2023-06-01"

# Limits that never get in the way (but are there, so the headers are), instant answers.
FAST = ["--input-tpm", "100000000", "--output-tpm", "100000000", "--rpm", "1000000", "--ttft-ms", "0",
        "--tokens-per-s", "1000000", "--latency-spread", "0", "--output-tokens", "24"]


class Emu(procs.Stoppable):
    """One sluice-emu process. Use as a context manager; stop() is idempotent and
    raises when the process exited non-zero (a sanitizer report, a crash)."""

    def __init__(self, args=FAST, key=KEY, tls=None, env=None):
        argv = [SLUICE_EMU, "--listen", "127.0.0.1:0", *args]
        if key is not None:
            argv += ["--api-key", key]
        if tls:
            argv += ["--tls-cert", tls[0], "--tls-key", tls[1]]
        self.tls_context = None
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        line = self._read_banner(timeout_s=15)
        # "sluice-emu: listening on http://127.0.0.1:PORT (...)"
        self.port = int(line.split("127.0.0.1:")[1].split()[0])
        self.scheme = line.split("listening on ")[1].split(":")[0]

    def _read_banner(self, timeout_s):
        return procs.read_banner(self.proc, "sluice-emu", timeout_s)

    def stop(self, timeout_s=10):
        if self.proc.returncode is not None and self.proc.stdout.closed:
            return
        procs.stop(self.proc, "sluice-emu", timeout_s)

    # ---- HTTP ----------------------------------------------------------------------

    def connection(self, timeout_s=30):
        if self.scheme == "https":
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout_s,
                                               context=self.tls_context)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)

    def request(self, method, path, body=None, headers=None, raw=None):
        """Returns (status, headers dict with lower-case names, body bytes)."""
        return procs.request(self.connection(), method, path, body, headers, raw)

    def anthropic(self, body, path="/v1/messages", key=KEY, version=ANTHROPIC_VERSION,
                  extra=None):
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["x-api-key"] = key
        if version is not None:
            headers["anthropic-version"] = version
        headers.update(extra or {})
        status, hdrs, payload = self.request("POST", path, body, headers)
        return status, hdrs, payload

    def openai(self, body, key=KEY):
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["authorization"] = "Bearer " + key
        return self.request("POST", "/v1/chat/completions", body, headers)

    def responses(self, body, key=KEY):
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["authorization"] = "Bearer " + key
        return self.request("POST", "/v1/responses", body, headers)

    def stats(self):
        status, _, payload = self.request("GET", "/stats")
        assert status == 200, payload
        return json.loads(payload)


class SharedEmu(unittest.TestCase):
    """A test class whose tests share one emulator with the default options, started once."""

    @classmethod
    def setUpClass(cls):
        cls.emu = Emu()

    @classmethod
    def tearDownClass(cls):
        cls.emu.stop()

    def assert_refused(self, cases):
        """Each (body, field) of `cases`, sent to /v1/messages, is answered 400
        invalid_request_error with a message naming `field`."""
        for body, field in cases:
            status, _, payload = self.emu.anthropic(body)
            self.assertEqual(status, 400, body)
            err = json.loads(payload)["error"]
            self.assertEqual(err["type"], "invalid_request_error")
            self.assertIn(field, err["message"])


def estimate(body, api="anthropic"):
    """sluice's own estimate of a request body (the CLI), or None without the CLI."""
    if not SLUICE_CLI or not os.path.exists(SLUICE_CLI):
        return None
    out = subprocess.run([SLUICE_CLI, "estimate", "--api", api, "-"], input=json.dumps(body),
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def prose(n_words, seed=0):
    """Deterministic English-like text of about n_words words."""
    words = ("the gate holds water until the level rises and then the stream runs over "
             "stones through the valley toward the sea while agents wait their turn").split()
    out = []
    x = seed * 2654435761 + 1
    for _ in range(n_words):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(words[(x >> 33) % len(words)])
    return " ".join(out)
