"""test_caps.py - caps from the config reach sluice.lua and are shared by two sluiced
replicas on one redis-server: a request held back only by its agent's max_concurrent on
one replica is queued (202) and granted when the other replica's lease is settled; a
max_rpm, a team's cap and a budget count the requests of both replicas. While Redis is
away (fail: open) each replica's local share keeps the caps, at 1/replicas of each."""
import time
import unittest

from redis_harness import Redis, backend_unavailable, replica, wait_until

POOLS = """  default:
    input_tpm: 1000000
    output_tpm: 100000
    rpm: 10000
    max_queue_wait_s: 300
    price_input_per_mtok: 3
    price_output_per_mtok: 15
caps:
  agents:
    solo:
      max_concurrent: 1
    chatty:
      max_rpm: 2
    spender:
      budget_usd_per_hour: 0.01
  teams:
    lint:
      members: [lint-1, lint-2]
      max_rpm: 1
"""


class SharedCaps(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.a = replica(self.redis, POOLS, cold_start="full")
        self.b = replica(self.redis, POOLS, cold_start="full")
        self.a.__enter__()
        self.b.__enter__()
        for r in (self.a, self.b):
            self.assertTrue(wait_until(lambda r=r: r.call("GET", "/readyz")[0] == 200, 10))

    def tearDown(self):
        self.b.__exit__(None, None, None)
        self.a.__exit__(None, None, None)
        self.redis.close()

    def test_max_concurrent_held_on_one_replica_queues_on_the_other_until_settled(self):
        status, first, _ = self.a.lease("solo", 10)
        self.assertEqual(status, 200, first)
        status, queued, _ = self.b.lease("solo", 10)
        self.assertEqual(status, 202, queued)
        self.assertEqual(queued["limited_by"], "agent_cap")
        self.assertLessEqual(queued["eta"], 120)  # bounded by the lease's expiry
        status, other, _ = self.b.lease("other", 10)  # the pool's queue is not blocked
        self.assertEqual(status, 200, other)
        status, body, _ = self.b.call("GET", "/v1/tickets/%s" % queued["ticket"])
        self.assertEqual(status, 202, body)
        status, body, _ = self.a.call("POST", "/v1/leases/%s/settle" % first["lease"],
                                      {"input_tokens": 10, "output_tokens": 10})
        self.assertEqual(status, 200, body)
        status, body, _ = self.b.call("GET", "/v1/tickets/%s?wait=5" % queued["ticket"])
        self.assertEqual(status, 200, body)
        self.assertEqual(body["status"], "granted")

    def test_max_rpm_team_cap_and_budget_count_both_replicas(self):
        for r in (self.a, self.b):
            status, body, _ = r.lease("chatty", 10)
            self.assertEqual(status, 200, body)
        status, body, hdrs = self.a.lease("chatty", 10)
        self.assertEqual(status, 429, body)
        self.assertEqual(body["reason"], "agent_cap")
        self.assertAlmostEqual(body["retry_after"], 30, delta=1)
        status, body, _ = self.b.lease("lint-1", 10)
        self.assertEqual(status, 200, body)
        status, body, _ = self.a.lease("lint-2", 10)
        self.assertEqual(status, 429, body)
        self.assertEqual(body["reason"], "team_cap")
        # $0.0075 each against $0.01 per hour: the second, on the other replica, is over.
        status, body, _ = self.a.lease("spender", 2000, 100)
        self.assertEqual(status, 200, body)
        status, body, _ = self.b.lease("spender", 2000, 100)
        self.assertEqual(status, 429, body)
        self.assertEqual(body["reason"], "budget_exhausted")


class CapsWhileRedisIsAway(unittest.TestCase):
    def test_the_local_share_keeps_the_caps(self):
        redis = Redis()
        replicas = [replica(redis, POOLS, fail="open", cold_start="full") for _ in range(2)]
        try:
            for r in replicas:
                self.assertTrue(wait_until(lambda r=r: r.call("GET", "/readyz")[0] == 200, 10))
            time.sleep(0.6)  # each heartbeat has counted both replicas: a share of 1/2
            a = replicas[0]
            redis.stop_signal()
            self.assertTrue(wait_until(lambda: backend_unavailable(a), 5))
            # the local share starts empty and refills: the first grant may take a moment
            deadline = time.monotonic() + 10
            status, body = 0, None
            while time.monotonic() < deadline:
                status, body, _ = a.lease("chatty", 10)
                if status == 200:
                    break
                self.assertIn(status, (202, 429), body)
                self.assertNotEqual(body.get("reason"), "agent_cap", body)
                if status == 202:
                    a.call("DELETE", "/v1/tickets/%s" % body["ticket"])
                time.sleep(0.1)
            self.assertEqual(status, 200, body)
            # max_rpm 2 over two replicas: 1 a minute in each local share
            status, body, _ = a.lease("chatty", 10)
            self.assertEqual(status, 429, body)
            self.assertEqual(body["reason"], "agent_cap")
        finally:
            redis.cont_signal()
            for r in replicas:
                r.stop()
            redis.close()


if __name__ == "__main__":
    unittest.main()
