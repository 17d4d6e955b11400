"""test_waiting_outside.py - issue 24's waiting rules through sluiced on the Redis backend,
called as docs/api.md writes them: the pool view's `config` shows `backfill` and
`working_set`, a parked first call is QUEUED `limited_by: working_set` and counted in the
queue's depth, and `max_wait` holds a request past the pool's max_queue_wait_s."""
import unittest

from redis_harness import OnRedis, replica, wait_until

POOLS = """  default:
    input_tpm: 3000
    output_tpm: 3000
    ticket_idle_s: 600
    backfill: false
    working_set: true
  plain:
    input_tpm: 3000
    output_tpm: 3000
    ticket_idle_s: 600
"""


class WaitingOnRedis(OnRedis):
    def setUp(self):
        super().setUp()
        self.r = replica(self.redis, POOLS, fail="closed", cold_start="full")
        self.replicas.append(self.r)
        self.assertTrue(wait_until(lambda: self.r.call("GET", "/readyz")[0] == 200, 10))

    def lease(self, agent, tokens, **kw):
        body = {"agent": agent, "input_tokens": tokens, "output_tokens": 10}
        body.update(kw)
        return self.r.call("POST", "/v1/leases", body)

    def test_the_pool_views_config_shows_backfill_and_working_set(self):
        cfg = self.r.pool("default")["config"]
        self.assertIs(cfg["backfill"], False)
        self.assertIs(cfg["working_set"], True)
        cfg = self.r.pool("plain")["config"]
        self.assertIs(cfg["backfill"], True)
        self.assertIs(cfg["working_set"], False)

    def test_a_parked_first_call_is_queued_never_rejected_and_counted_in_the_depth(self):
        self.assertEqual(self.lease("hog", 2500)[0], 200)
        status, b, _ = self.lease("b", 2000)
        self.assertEqual(status, 202, b)
        self.assertEqual(b["limited_by"], "working_set")
        status, far, _ = self.lease("far", 2500)  # ~105 s, past the pool's 60 s
        self.assertEqual(status, 202, far)
        self.assertEqual(far["limited_by"], "working_set")
        self.assertGreater(far["eta"], 60)
        queue = self.r.pool("default")["queue"]
        self.assertEqual(queue["depth"], 2)
        self.assertIsNone(queue["eta"])

    def test_max_wait_holds_past_the_pools_wait_limit(self):
        self.assertEqual(self.lease("hog", 2500, pool="plain")[0], 200)
        self.assertEqual(self.lease("a", 2000, pool="plain")[0], 202)  # ~46 s
        status, b, _ = self.lease("b", 2000, pool="plain")  # ~93 s
        self.assertEqual(status, 429, b)
        self.assertEqual(b["reason"], "queue_wait_exceeds_max")
        depth = self.r.pool("plain")["queue"]["depth"]
        status, b, _ = self.lease("b", 2000, pool="plain", max_wait=120)
        self.assertEqual(status, 202, b)
        self.assertAlmostEqual(b["eta"], 93, delta=3)
        self.assertEqual(self.r.pool("plain")["queue"]["depth"], depth + 1)
        status, bad, _ = self.lease("c", 10, pool="plain", max_wait=0)
        self.assertEqual(status, 400, bad)
        self.assertIn("max_wait", bad["error"]["message"])
        self.assertEqual(self.r.pool("plain")["queue"]["depth"], depth + 1)


if __name__ == "__main__":
    unittest.main()
