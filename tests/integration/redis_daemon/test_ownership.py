"""test_ownership.py - on the Redis backend the owner of a lease or ticket is checked by
whichever replica receives the call, not only by the one that granted it."""
import unittest

from redis_harness import Redis, replica, wait_until

POOLS = """  default:
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 600
    ticket_idle_s: 600
auth:
  admin_token: admin-secret-1
  tokens:
    - token: alice-token-1
      agent: alice
    - token: bob-token-1
      agent: bob
    - token: team-token-1
      agent_prefix: "team-"
"""

ADMIN = "admin-secret-1"
ALICE = "alice-token-1"
BOB = "bob-token-1"


class OwnershipAcrossReplicas(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        # Full buckets from the start (the default cold start is tested in test_state_loss).
        self.a = replica(self.redis, POOLS, fail="closed", cold_start="full")
        self.b = replica(self.redis, POOLS, fail="closed", cold_start="full")
        for r in (self.a, self.b):
            self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))

    def tearDown(self):
        self.a.stop()
        self.b.stop()
        self.redis.close()

    def pool(self):
        st, p, _ = self.a.call("GET", "/v1/pools/default", token=ADMIN)
        self.assertEqual(st, 200, p)
        return p

    def state(self):
        """What a refused call must leave as it was."""
        p = self.pool()
        return (p["buckets"]["input_tokens"]["level"], p["queue"]["depth"],
                p["leases_in_flight"])

    def assert_unchanged(self, before):
        # The level refills at 85 tokens/s meanwhile; a wrongful settle or cancel would
        # move it by 2000 or more.
        now = self.state()
        self.assertEqual(now[1:], before[1:])
        self.assertAlmostEqual(now[0], before[0], delta=150)

    def lease(self, r, token, agent, tokens, **kw):
        body = {"agent": agent, "input_tokens": tokens, "output_tokens": 1}
        body.update(kw)
        return r.call("POST", "/v1/leases", body, token=token)

    def assert_forbidden(self, got, what):
        st, body, _ = got
        self.assertEqual(st, 403, (what, body))
        self.assertEqual(body["error"]["type"], "forbidden", what)
        self.assertIn("another agent", body["error"]["message"], what)

    def test_another_token_cannot_settle_cancel_or_extend_a_lease_through_another_replica(self):
        st, g, _ = self.lease(self.a, ALICE, "alice", 3000)
        self.assertEqual(st, 200, g)
        lease = g["lease"]
        before = self.state()
        path = "/v1/leases/%s" % lease
        self.assert_forbidden(self.b.call("POST", path + "/settle",
                                          {"input_tokens": 0, "output_tokens": 0}, token=BOB),
                              "settle")
        self.assert_forbidden(self.b.call("POST", path + "/extend", {"ttl": 600}, token=BOB),
                              "extend")
        self.assert_forbidden(self.b.call("DELETE", path, token=BOB), "cancel")
        self.assert_forbidden(self.b.call("POST", path + "/settle",
                                          {"input_tokens": 0, "output_tokens": 0},
                                          token="team-token-1"), "settle by a prefix token")
        self.assert_unchanged(before)
        # The owner's own settle, through the other replica, still works.
        st, s, _ = self.b.call("POST", path + "/settle", {"input_tokens": 1000, "output_tokens": 1},
                               token=ALICE)
        self.assertEqual(st, 200, s)
        self.assertEqual(s["adjust"]["input_tokens"], 2000)

    def test_admin_and_prefix_tokens_act_on_their_own(self):
        st, g, _ = self.lease(self.a, "team-token-1", "team-7", 100)
        self.assertEqual(st, 200, g)
        st, s, _ = self.b.call("POST", "/v1/leases/%s/extend" % g["lease"], {"ttl": 60},
                               token="team-token-1")
        self.assertEqual(st, 200, s)
        st, s, _ = self.b.call("DELETE", "/v1/leases/%s" % g["lease"], token=ADMIN)
        self.assertEqual(st, 200, s)

    def test_another_token_cannot_poll_hold_or_delete_a_ticket_through_another_replica(self):
        st, big, _ = self.lease(self.a, ALICE, "alice", 5000)
        self.assertEqual(st, 200, big)
        st, q, _ = self.lease(self.a, ALICE, "alice", 3000)
        self.assertEqual(st, 202, q)
        ticket = q["ticket"]
        before = self.state()
        path = "/v1/tickets/%s" % ticket
        self.assert_forbidden(self.b.call("GET", path, token=BOB), "poll")
        self.assert_forbidden(self.b.call("GET", path + "?wait=1", token=BOB), "long-poll")
        self.assert_forbidden(self.b.call("DELETE", path, token=BOB), "delete")
        self.assert_unchanged(before)
        st, t, _ = self.b.call("GET", path, token=ALICE)
        self.assertEqual((st, t["status"]), (202, "queued"), t)
        # Granted (alice's hog cancelled): the lease it became is alice's too.
        st, _, _ = self.a.call("DELETE", "/v1/leases/%s" % big["lease"], token=ALICE)
        self.assertEqual(st, 200)
        self.assert_forbidden(self.b.call("GET", path, token=BOB), "poll of a granted ticket")
        self.assert_forbidden(self.b.call("DELETE", path, token=BOB),
                              "delete of a granted ticket")
        st, t, _ = self.b.call("GET", path, token=ALICE)
        self.assertEqual((st, t["status"]), (200, "granted"), t)


if __name__ == "__main__":
    unittest.main()
