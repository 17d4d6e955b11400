"""test_signals.py - SIGHUP reloads limits, roles and tokens keeping leases and tickets;
SIGTERM answers waiters 503 shutting_down and exits within 5 s; --check-config."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SLUICED, SMALL_POOL, Sluiced, raw_request, wait_until  # noqa: E402

CONFIG = "pools:\n  default:" + SMALL_POOL


class Signals(unittest.TestCase):
    def test_sighup_reloads_limits_and_roles_keeping_leases_and_tickets(self):
        with Sluiced(CONFIG) as s:
            status, hold, _ = s.lease("holder", 5000)
            self.assertEqual(status, 200)
            status, q, _ = s.lease("queued", 3000)
            self.assertEqual(status, 202)
            status, e, _ = s.lease("x", 1, role="auditor")
            self.assertEqual(status, 400)
            s.write_config(CONFIG.replace("input_tpm: 6000", "input_tpm: 12000") +
                           "roles:\n  auditor: 5\n")
            s.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(
                lambda: s.pool()["limits"]["input_tpm"] == 12000, 3))
            p = s.pool()
            self.assertAlmostEqual(p["buckets"]["input_tokens"]["capacity"], 10200)
            self.assertEqual(p["leases_in_flight"], 1)
            # Capacity grew at once; levels are not raised by a reload. The ticket kept
            # its place, and the settle's refund lets it in.
            status, t, _ = s.call("GET", "/v1/tickets/" + q["ticket"])
            self.assertEqual((status, t["position"]), (202, 1), t)
            self.assertEqual(s.call("POST", "/v1/leases/%s/settle" % hold["lease"],
                                    {"input_tokens": 10, "output_tokens": 1})[0], 200)
            status, t, _ = s.call("GET", "/v1/tickets/%s?wait=5" % q["ticket"])
            self.assertEqual(status, 200, t)
            status, g, _ = s.lease("auditor-1", 1, role="auditor")
            self.assertEqual(status, 200, g)
            self.assertEqual(g["weight"], 5)

    def test_sighup_with_a_broken_file_keeps_running_on_the_old_config(self):
        with Sluiced(CONFIG) as s:
            s.write_config("pools:\n  default:\n    input_tpm: lots\n")
            s.proc.send_signal(signal.SIGHUP)
            time.sleep(0.3)
            self.assertIsNone(s.proc.poll())
            self.assertEqual(s.pool()["limits"]["input_tpm"], 6000)

    def test_sighup_reloads_tokens(self):
        auth = CONFIG + "auth:\n  admin_token: admin-token-1\n"
        with Sluiced(auth) as s:
            self.assertEqual(s.call("GET", "/v1/pools", token="admin-token-2")[0], 401)
            s.write_config(auth.replace("admin-token-1", "admin-token-2"))
            s.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(
                lambda: s.call("GET", "/v1/pools", token="admin-token-2")[0] == 200, 3))
            self.assertEqual(s.call("GET", "/v1/pools", token="admin-token-1")[0], 401)

    def test_reload_endpoint_needs_admin_and_applies_the_file(self):
        auth = CONFIG + "auth:\n  admin_token: admin-token-1\n  tokens:\n" \
                        "    - token: agent-token-1\n      agent: a1\n"
        with Sluiced(auth) as s:
            s.write_config(auth.replace("input_tpm: 6000", "input_tpm: 9000"))
            status, body, _ = s.call("POST", "/v1/admin/reload", token="agent-token-1")
            self.assertEqual((status, body["error"]["type"]), (403, "forbidden"))
            status, body, _ = s.call("POST", "/v1/admin/reload", token="admin-token-1")
            self.assertEqual((status, body), (200, {"status": "reloaded"}))
            status, p, _ = s.call("GET", "/v1/pools/default", token="admin-token-1")
            self.assertEqual(p["limits"]["input_tpm"], 9000)
            s.write_config("pools: [\n")
            status, body, _ = s.call("POST", "/v1/admin/reload", token="admin-token-1")
            self.assertEqual(status, 400)
            self.assertIn("YAML", body["error"]["message"])

    def test_sigterm_answers_waiters_503_and_exits_within_5s(self):
        s = Sluiced(CONFIG)
        try:
            status, hold, _ = s.lease("holder", 5000)
            socks = [raw_request(s.port, "POST", "/v1/leases", json.dumps(
                {"agent": "w%d" % i, "input_tokens": 3000, "output_tokens": 1,
                 "wait": 60}).encode()) for i in range(5)]
            self.assertTrue(wait_until(lambda: s.pool()["queue"]["depth"] == 5, 3))
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            for sock in socks:
                sock.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.assertTrue(data.startswith(b"HTTP/1.1 503"), data[:80])
                body = json.loads(data.split(b"\r\n\r\n", 1)[1])
                self.assertEqual(body["error"]["type"], "shutting_down")
                sock.close()
            self.assertEqual(s.proc.wait(timeout=5), 0)
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            s.stop()


class CheckConfig(unittest.TestCase):
    def run_check(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(text)
        try:
            p = subprocess.run([SLUICED, "--config", f.name, "--check-config"],
                               capture_output=True, text=True, timeout=10)
            return p.returncode, p.stdout + p.stderr
        finally:
            os.unlink(f.name)

    def test_valid_file_passes(self):
        example = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                               "sluice.yaml")
        with open(example) as f:
            rc, out = self.run_check(f.read())
        self.assertEqual(rc, 0, out)

    def test_errors_name_the_key_and_line(self):
        cases = [
            ("pools:\n  default:\n    rpm: 10\n    inptu_tpm: 5\n", ":4:", "pools.default.inptu_tpm"),
            ("pools:\n  default:\n    rpm: -3\n", ":3:", "pools.default.rpm"),
            ("listen: nowhere\n", ":1:", "listen"),
            ("pools:\n  default:\n    margin_floor: 0.99\n", ":2:", "margin_floor"),
            ("roles:\n  planner: 0\n", ":2:", "roles.planner"),
            ("auth:\n  tokens:\n    - token: short\n      agent: a\n", ":3:", "token"),
            ("bogus: 1\n", ":1:", "bogus"),
            ("pools:\n  default:\n    max_resync_factor: 0.5\n", ":3:",
             "pools.default.max_resync_factor"),
            ("pools:\n  default:\n    max_settle_tokens: 0\n", ":3:",
             "pools.default.max_settle_tokens"),
            ("pools:\n  default:\n    max_retry_after_s: 100000\n", ":3:",
             "pools.default.max_retry_after_s"),
            ("pools:\n  default:\n    max_report_pool_block_s: -1\n", ":3:",
             "pools.default.max_report_pool_block_s"),
            ("pools:\n  default:\n    margin_max: 1.5\n", ":2:", "margin_max"),
            ("pools:\n  default:\n    send_window_s: 90\n", ":2:", "send_window_s 90"),
            ("max_unblocks: 2000000\n", ":1:", "max_unblocks"),
            ("auth:\n  tokens:\n    - token: long-enough-1\n      agent: a\n      resync: maybe\n",
             ":5:", "auth.tokens[].resync"),
            ("auth:\n  tokens:\n    - token: long-enough-1\n      agent: a\n"
             "      max_unblocks: -1\n", ":5:", "auth.tokens[].max_unblocks"),
            ("pools: [\n", ":", "YAML"),
        ]
        for text, line, key in cases:
            with self.subTest(key):
                rc, out = self.run_check(text)
                self.assertEqual(rc, 1, out)
                self.assertIn(line, out)
                self.assertIn(key, out)

    def test_non_loopback_listener_without_tokens_refuses_to_start(self):
        p = subprocess.run([SLUICED, "--listen", "0.0.0.0:0"], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(p.returncode, 1)
        self.assertIn("loopback", p.stderr)


if __name__ == "__main__":
    unittest.main()
