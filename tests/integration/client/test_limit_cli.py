"""sluice limit check (and so sl_limit_check()): allowed, denied, waiting (queue on sluiced's
side, retry on the client's side), peeks, and every exit code."""
import time
import unittest

from harness import Sluiced, free_port, sluice, sluice_json

LIMITS = """
limits:
  tool.call:
    algorithm: token_bucket
    rate: 2
    period_s: 600
  db.query:
    algorithm: fixed_window
    rate: 3
    period_s: 600
    per: key
    costs: {write: 3}
  paced:
    algorithm: gcra
    rate: 4
    period_s: 1
    burst: 1
    on_limit: queue
  retried:
    algorithm: gcra
    rate: 4
    period_s: 1
    burst: 1
"""


class LimitCli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Sluiced(LIMITS)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_allowed_then_denied_exit_0_then_5(self):
        u = self.d.url
        code, out, _ = sluice("limit", "check", "tool.call", "--agent", "c1", url=u)
        self.assertEqual((code, out.strip()), (0, "allowed remaining=1"))
        code, out, _ = sluice("limit", "check", "tool.call", "--agent", "c1", "--hits", "0", url=u)
        self.assertEqual((code, out.strip()), (0, "allowed remaining=1"))  # a peek
        self.assertEqual(sluice("limit", "check", "tool.call", "--agent", "c1", url=u)[0], 0)
        code, j, _ = sluice_json("limit", "check", "tool.call", "--agent", "c1", "--json", url=u)
        self.assertEqual(code, 5)
        self.assertFalse(j["allowed"])
        self.assertEqual(j["denied_by"], {"limit": "tool.call", "key": "c1"})
        self.assertGreater(j["retry_after"], 0)

    def test_key_and_action_costs(self):
        u = self.d.url
        code, out, _ = sluice("limit", "check", "db.query", "--agent", "c2", "--key", "users",
                              "--action", "write", url=u)
        self.assertEqual((code, out.strip()), (0, "allowed remaining=0"))
        code, _, err = sluice("limit", "check", "db.query", "--agent", "c2", url=u)
        self.assertEqual(code, 6, err)  # per: key needs --key
        self.assertIn("key", err)

    def test_wait_on_a_queue_limit_and_on_a_reject_limit(self):
        u = self.d.url
        for name in ("paced", "retried"):
            self.assertEqual(sluice("limit", "check", name, "--agent", "w", url=u)[0], 0)
            t0 = time.monotonic()
            code, j, _ = sluice_json("limit", "check", name, "--agent", "w", "--wait", "5",
                                     "--json", url=u)
            self.assertEqual(code, 0, (name, j))
            self.assertGreater(j["waited"], 0.05, name)
            self.assertLess(time.monotonic() - t0, 5)
            self.assertEqual(sluice("limit", "check", name, "--agent", "w", url=u)[0], 5, name)

    def test_a_suspended_agent_is_denied_exit_5(self):
        # sluiced answers a suspended agent's check 429 {"status": "rejected", "reason":
        # "suspended"} (docs/api.md "Suspension"): a denial, not a protocol error.
        st, body = self.d.post("/v1/agents/susp/suspend", {})
        self.assertEqual(st, 200, body)
        code, out, err = sluice("limit", "check", "tool.call", "--agent", "susp", url=self.d.url)
        self.assertEqual(code, 5, (out, err))
        self.assertIn("suspended", out)

    def test_errors_and_usage(self):
        u = self.d.url
        self.assertEqual(sluice("limit", "check", "nope", "--agent", "a", url=u)[0], 6)
        self.assertEqual(sluice("limit", "check", "--agent", "a", url=u)[0], 2)
        self.assertEqual(sluice("limit", "check", "tool.call", "--hits", "-1", url=u)[0], 2)
        self.assertEqual(sluice("limit", "bogus", url=u)[0], 2)
        code, out, _ = sluice("limit", "--help")
        self.assertEqual(code, 0)
        self.assertIn("exit codes", out)
        # A wait longer than sluiced takes (1e9 s) is the longest it holds, not an error.
        self.assertEqual(sluice("limit", "check", "tool.call", "--agent", "long", "--wait",
                                "1e300", url=u)[0], 0)
        # A cost above the limit: denied for good, retry_after -1 (not -0.000001).
        code, j, _ = sluice_json("limit", "check", "tool.call", "--agent", "big", "--hits", "3",
                                 "--json", url=u)
        self.assertEqual((code, j["retry_after"]), (5, -1), j)
        dead = "http://127.0.0.1:%d" % free_port()
        self.assertEqual(sluice("limit", "check", "tool.call", "--agent", "a", url=dead)[0], 4)


if __name__ == "__main__":
    unittest.main()
