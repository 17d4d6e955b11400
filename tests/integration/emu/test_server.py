"""sluice-emu as a process: flags, pacing, pings, clients that leave, TLS with a test CA."""
import json
import os
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

from harness import FAST, Emu, KEY, SLUICE_EMU, message, parse_sse
import procs  # noqa: E402  (tests/integration/procs.py, on the path by harness)

REQUIRED = ["--listen", "127.0.0.1:0", "--input-tpm", "1000", "--output-tpm", "1000",
            "--rpm", "10"]


def run_emu(args, timeout_s=10):
    return subprocess.run([SLUICE_EMU, *args], capture_output=True, text=True,
                          timeout=timeout_s)


class Flags(unittest.TestCase):
    def test_help_documents_every_flag(self):
        out = run_emu(["--help"])
        self.assertEqual(out.returncode, 0)
        for flag in ("--listen", "--input-tpm", "--output-tpm", "--rpm", "--tokens-tpm",
                     "--seed", "--ttft-ms", "--tokens-per-s", "--output-tokens", "--drift",
                     "--outside-share", "--spend-cap", "--cache-ttl-s", "--api-key",
                     "--tls-cert", "--tls-key"):
            self.assertIn(flag, out.stdout)

    def test_bad_values_name_the_flag_and_the_value(self):
        cases = [(["--rpm", "lots"], "--rpm", "lots"),
                 (["--drift", "-1"], "--drift", "-1"),
                 (["--outside-share", "1.5"], "--outside-share", "1.5"),
                 (["--listen=nowhere"], "--listen", "nowhere"),
                 (["--ttft-ms", "1e3x"], "--ttft-ms", "1e3x"),
                 (["--tokens-per-s", "0"], "--tokens-per-s", "0"),
                 (["--frobnicate", "1"], "--frobnicate", None)]
        for extra, flag, value in cases:
            out = run_emu(REQUIRED + extra)
            self.assertEqual(out.returncode, 2, extra)
            self.assertIn(flag, out.stderr)
            if value:
                self.assertIn('"%s"' % value, out.stderr)

    def test_missing_limits_and_half_tls_are_refused(self):
        out = run_emu(["--listen", "127.0.0.1:0", "--input-tpm", "1", "--output-tpm", "1"])
        self.assertEqual(out.returncode, 2)
        self.assertIn("--rpm", out.stderr)
        out = run_emu(REQUIRED + ["--tls-cert", "/nonexistent.pem"])
        self.assertEqual(out.returncode, 2)
        self.assertIn("--tls-key", out.stderr)
        out = run_emu(REQUIRED + ["--vocab", "/nonexistent.json"])
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("/nonexistent.json", out.stderr)

    def test_api_key_from_environment(self):
        env = dict(os.environ, SLUICE_EMU_API_KEY="sk-from-env")
        with Emu(key=None, env=env) as emu:
            self.assertEqual(emu.anthropic(message(), key="sk-from-env")[0], 200)
            self.assertEqual(emu.anthropic(message(), key=KEY)[0], 401)

    def test_without_a_configured_key_any_key_is_accepted(self):
        with Emu(key=None, env={k: v for k, v in os.environ.items()
                                if k != "SLUICE_EMU_API_KEY"}) as emu:
            self.assertEqual(emu.anthropic(message(), key="anything")[0], 200)
            self.assertEqual(emu.anthropic(message(), key=None)[0], 401)


def send_message(s, body):
    """Writes POST /v1/messages with `body` (bytes) on socket s, by hand."""
    s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: " + KEY.encode() +
              b"\r\nanthropic-version: 2023-06-01\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)


def idle_stats(emu, timeout_s=5):
    """The emulator's stats once no HTTP request is active (or after timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        st = emu.stats()
        if st["http"]["active"] == 0 or time.monotonic() >= deadline:
            return st
        time.sleep(0.05)


def paced(extra):
    return ["--input-tpm", "1000000", "--output-tpm", "1000000", "--rpm", "1000",
            "--latency-spread", "0", *extra]


class Pacing(unittest.TestCase):
    def test_first_token_and_speed_follow_the_flags(self):
        with Emu(paced(["--ttft-ms", "300", "--tokens-per-s", "100",
                        "--output-tokens", "40"])) as emu:
            conn = emu.connection()
            t0 = time.monotonic()
            conn.request("POST", "/v1/messages", json.dumps(message(stream=True)),
                         {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            t_headers = time.monotonic() - t0
            first = resp.readline()  # "event: message_start"
            t_first = time.monotonic() - t0
            rest = resp.read()
            t_end = time.monotonic() - t0
            conn.close()
            self.assertLess(t_headers, 0.25)  # admitted at once
            self.assertEqual(first, b"event: message_start\n")
            self.assertGreaterEqual(t_first, 0.28)
            self.assertLess(t_first, 1.5)
            self.assertGreaterEqual(t_end, 0.28 + 0.39 - 0.06)  # 40 tokens at 100/s
            self.assertLess(t_end, 3.0)
            deltas = [e for e in parse_sse(first + rest) if e[0] == "content_block_delta"]
            self.assertGreater(len(deltas), 4)  # streamed in several pieces

            t0 = time.monotonic()
            status, _, _ = emu.anthropic(message())
            self.assertEqual(status, 200)
            self.assertGreaterEqual(time.monotonic() - t0, 0.28 + 0.39 - 0.06)

    def test_pings_keep_a_slow_stream_alive(self):
        with Emu(paced(["--ttft-ms", "0", "--tokens-per-s", "2", "--output-tokens", "3",
                        "--ping-interval-ms", "100"])) as emu:
            status, _, payload = emu.anthropic(message(stream=True))
            self.assertEqual(status, 200)
            names = [n for n, _ in parse_sse(payload)]
            self.assertEqual(names[0], "message_start")
            self.assertGreaterEqual(names.count("ping"), 4)
            self.assertEqual(names[-1], "message_stop")

    def test_client_leaving_mid_stream_ends_the_call(self):
        with Emu(paced(["--ttft-ms", "0", "--tokens-per-s", "20",
                        "--output-tokens", "200"])) as emu:
            s = socket.create_connection(("127.0.0.1", emu.port), timeout=5)
            body = json.dumps(message(max_tokens=500, stream=True)).encode()
            send_message(s, body)
            got = s.recv(4096)
            self.assertIn(b"200 OK", got)
            time.sleep(0.3)
            s.close()
            st = idle_stats(emu)
            self.assertEqual(st["http"]["active"], 0)
            self.assertEqual(st["http"]["client_gone"], 1)
            self.assertEqual(emu.anthropic(message())[0], 200)  # still serving


    def test_client_leaving_before_a_whole_answer_is_harmless(self):
        with Emu(paced(["--ttft-ms", "400", "--tokens-per-s", "1000",
                        "--output-tokens", "10"])) as emu:
            for _ in range(3):
                s = socket.create_connection(("127.0.0.1", emu.port), timeout=5)
                body = json.dumps(message()).encode()
                send_message(s, body)
                time.sleep(0.1)
                s.close()
            st = idle_stats(emu)
            self.assertEqual(st["http"]["active"], 0)
            self.assertEqual(st["admitted"], 3)
            self.assertEqual(emu.anthropic(message())[0], 200)


class Tls(unittest.TestCase):
    def test_streams_and_answers_share_one_kept_alive_tls_connection(self):
        # Instant answers (every event in one write) and paced ones (many chunks): the
        # reply must end after its last chunk and the connection must stay usable.
        paced = ["--input-tpm", "0", "--output-tpm", "0", "--rpm", "0", "--ttft-ms", "20",
                 "--tokens-per-s", "400", "--latency-spread", "0", "--output-tokens", "24"]
        with tempfile.TemporaryDirectory(prefix="emu-tls-") as d:
            ca_crt, crt, key = procs.make_ca(d)
            for args in (FAST, paced):
                with Emu(args=args, tls=(crt, key)) as emu:
                    emu.tls_context = ssl.create_default_context(cafile=ca_crt)
                    conn = emu.connection(timeout_s=10)
                    headers = {"content-type": "application/json", "x-api-key": KEY,
                               "anthropic-version": "2023-06-01"}
                    try:
                        for stream in (True, True, False, True, False, True):
                            conn.request("POST", "/v1/messages",
                                         body=json.dumps(message(stream=stream)),
                                         headers=headers)
                            resp = conn.getresponse()
                            payload = resp.read()
                            self.assertEqual(resp.status, 200, payload)
                            if stream:
                                self.assertEqual(parse_sse(payload)[-1][0], "message_stop")
                            else:
                                self.assertEqual(json.loads(payload)["type"], "message")
                    finally:
                        conn.close()
                    st = emu.stats()
                    self.assertEqual(st["http"]["messages"], 6)
                    self.assertEqual(st["http"]["client_gone"], 0)

    def test_https_with_a_test_ca(self):
        with tempfile.TemporaryDirectory(prefix="emu-tls-") as d:
            ca_crt, crt, key = procs.make_ca(d)
            with Emu(tls=(crt, key)) as emu:
                self.assertEqual(emu.scheme, "https")
                emu.tls_context = ssl.create_default_context(cafile=ca_crt)
                status, h, payload = emu.anthropic(message())
                self.assertEqual(status, 200, payload)
                self.assertIn("anthropic-ratelimit-requests-remaining", h)
                status, _, payload = emu.anthropic(message(stream=True))
                self.assertEqual(parse_sse(payload)[-1][0], "message_stop")
                # A client that does not trust the CA is refused by its own check.
                emu.tls_context = ssl.create_default_context()
                with self.assertRaises(ssl.SSLError):
                    emu.anthropic(message())


if __name__ == "__main__":
    unittest.main()
