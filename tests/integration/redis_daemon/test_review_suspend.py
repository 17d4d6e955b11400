"""test_review_suspend.py - admin suspensions on Redis at their edges: a 128-byte name with
`:` and `.` is suspended on one replica and refused on the other, released there and
served again; an agent's own token may neither suspend nor release it (403); a name
with `{}` or of 129 bytes is 400 naming the value; a release right after a suspension
on the other replica holds on both (no re-read brings it back)."""
import time
import unittest

from redis_harness import Sluiced, TwoReplicas, wait_until
from test_suspend import ADMIN, CONFIG, served

SELF = "self-token"


class SuspendEdges(TwoReplicas):
    def setUp(self):
        self.start(lambda redis: Sluiced((CONFIG % redis.url(
            tick_ms=200, timeout_ms=300, cold_start="full")).replace(
            '    - {token: fleet-token, agent_prefix: ""}',
            '    - {token: fleet-token, agent_prefix: ""}\n    - {token: %s, agent: self-1}' % SELF)))

    def test_odd_names_and_tokens(self):
        name = "x:" + "a." * 63  # 128 bytes
        st, body, _ = self.a.call("POST", "/v1/agents/%s/suspend" % name, {}, token=ADMIN)
        self.assertEqual((st, body.get("agent")), (200, name), body)
        self.assertTrue(wait_until(lambda: not served(self.b, name), 3))
        for verb in ("suspend", "release"):
            st, body, _ = self.b.call("POST", "/v1/agents/self-1/%s" % verb, {}, token=SELF)
            self.assertEqual(st, 403, body)
        self.assertTrue(served(self.b, "self-1"))  # the refused suspension changed nothing
        st, body, _ = self.b.call("POST", "/v1/agents/a%7Bb%7D/suspend", {}, token=ADMIN)
        self.assertEqual(st, 400, body)
        self.assertIn("'a{b}'", body["error"]["message"])
        st, body, _ = self.b.call("POST", "/v1/agents/%s/suspend" % ("y" * 129), {}, token=ADMIN)
        self.assertEqual(st, 400, body)
        self.assertIn("yyyy", body["error"]["message"])
        self.assertTrue(served(self.a, "y" * 128))
        st, body, _ = self.b.call("POST", "/v1/agents/%s/release" % name, {}, token=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertTrue(wait_until(lambda: served(self.a, name), 3))

    def test_a_release_right_after_a_suspension_holds_on_both(self):
        for i in range(5):
            n = "race-%d" % i
            self.assertEqual(self.a.call("POST", "/v1/agents/%s/suspend" % n, {},
                                         token=ADMIN)[0], 200)
            self.assertEqual(self.b.call("POST", "/v1/agents/%s/release" % n, {},
                                         token=ADMIN)[0], 200)
        for i in range(5):
            for r in (self.a, self.b):
                self.assertTrue(wait_until(lambda r=r, i=i: served(r, "race-%d" % i), 3))
        time.sleep(0.6)  # more re-reads (0.25 s each): none brings a suspension back
        for i in range(5):
            self.assertTrue(served(self.a, "race-%d" % i))
            self.assertTrue(served(self.b, "race-%d" % i))


if __name__ == "__main__":
    unittest.main()
