"""test_review_caps.py - caps on the Redis backend answer as the engine does at the edges:
a reload that raises an agent's max_concurrent, or lifts its caps, grants the ticket
parked on it at once (as sl_engine_wake_parked does for the memory backend), in Redis
and in the fail-open local share; a parked ticket whose holder's lease is cancelled or
expires on the other replica is granted; a budget a reload gives starts full."""
import time
import unittest

from redis_harness import Redis, TwoReplicas, backend_unavailable, replica, wait_until
from test_caps_reload import POOL as CAPS_RELOAD_POOL, spend_under_no_budget

POOLS = """  default:
    input_tpm: 1000000
    output_tpm: 1000000
    lease_ttl_s: 300
    max_queue_wait_s: 600
"""
CAPS = """caps:
  agents:
    solo:
      max_concurrent: %d
"""


class ParkedOnRedis(TwoReplicas):
    def setUp(self):
        self.start(lambda redis: replica(redis, POOLS + CAPS % 1, cold_start="full"))

    def park_one(self):
        """Holds solo's one slot on a with a 300 s lease and parks a request on b."""
        st, first, _ = self.a.lease("solo", 10)
        self.assertEqual(st, 200, first)
        st, queued, _ = self.b.lease("solo", 10)
        self.assertEqual((st, queued.get("limited_by")), (202, "agent_cap"), queued)
        return first, queued

    def reload(self, r, pools_and_caps):
        r.write_config("cold_start: full\nevent_log: %s\nbackend: %s\npools:\n%s"
                       % (r.event_log, self.redis.url(tick_ms=200, timeout_ms=300,
                                                      cold_start="full"), pools_and_caps))
        st, body, _ = r.call("POST", "/v1/admin/reload")
        self.assertEqual(st, 200, body)

    def granted(self, queued):
        st, body, _ = self.b.call("GET", "/v1/tickets/%s?wait=3" % queued["ticket"])
        self.assertEqual((st, body.get("status")), (200, "granted"), body)

    def test_raising_max_concurrent_by_reload_grants_the_parked_ticket(self):
        _, queued = self.park_one()
        for r in (self.a, self.b):
            self.reload(r, POOLS + CAPS % 2)
        self.granted(queued)  # the first lease lives 300 s: no release frees it

    def test_lifting_the_caps_by_reload_grants_the_parked_ticket(self):
        _, queued = self.park_one()
        for r in (self.a, self.b):
            self.reload(r, POOLS)
        self.granted(queued)

    def test_a_parked_ticket_is_granted_when_the_lease_expires_on_the_other_replica(self):
        st, first, _ = self.a.lease("solo", 10, ttl=1)
        self.assertEqual(st, 200, first)
        st, queued, _ = self.b.lease("solo", 10)
        self.assertEqual((st, queued.get("limited_by")), (202, "agent_cap"), queued)
        self.assertLessEqual(queued["eta"], 2)  # bounded by the lease's expiry
        st, body, _ = self.b.call("GET", "/v1/tickets/%s?wait=5" % queued["ticket"])
        self.assertEqual((st, body.get("status")), (200, "granted"), body)

    def test_a_parked_ticket_is_granted_when_the_lease_is_cancelled_on_the_other_replica(self):
        first, queued = self.park_one()
        st, body, _ = self.a.call("DELETE", "/v1/leases/%s" % first["lease"])
        self.assertIn(st, (200, 204), body)
        self.granted(queued)



# test_caps_reload.py's pool and caps, as the lines under `pools:`.
BUDGET_POOLS = CAPS_RELOAD_POOL.split("pools:\n", 1)[1] % ""


class BudgetByReload(unittest.TestCase):
    def test_a_budget_added_by_reload_is_full_whatever_was_spent_before(self):
        redis = Redis()
        r = replica(redis, BUDGET_POOLS, cold_start="full")
        try:
            self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))
            spend_under_no_budget(self, r)  # $1.65
            r.write_config("cold_start: full\nevent_log: %s\nbackend: %s\npools:\n%s" % (
                r.event_log, redis.url(tick_ms=200, timeout_ms=300, cold_start="full"),
                BUDGET_POOLS + "      budget_usd_per_hour: 1"))
            st, body, _ = r.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 200, body)
            st, body, _ = r.lease("spender", 50000, 1000)
            self.assertEqual(st, 200, body)  # $0.165 of a fresh $1 an hour
        finally:
            r.stop()
            redis.close()


class ReloadWhileRedisIsAway(unittest.TestCase):
    def test_a_cap_lifted_by_reload_is_lifted_in_the_local_share(self):
        redis = Redis()
        r = replica(redis, POOLS + CAPS % 1, fail="open", cold_start="full")
        try:
            self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))
            redis.stop_signal()
            self.assertTrue(wait_until(lambda: backend_unavailable(r), 5))
            # the local share starts empty and refills: the first grant may take a moment
            first = None
            for _ in range(100):
                st, first, _ = r.lease("solo", 10)
                if st == 200:
                    break
                self.assertNotEqual(first.get("limited_by"), "agent_cap", first)
                if st == 202:
                    r.call("DELETE", "/v1/tickets/%s" % first["ticket"])
                time.sleep(0.1)
            self.assertEqual(st, 200, first)
            st, queued, _ = r.lease("solo", 10)
            self.assertEqual((st, queued.get("limited_by")), (202, "agent_cap"), queued)
            r.write_config("cold_start: full\nevent_log: %s\nbackend: %s\npools:\n%s"
                           % (r.event_log, redis.url(tick_ms=200, timeout_ms=300, fail="open",
                                                     cold_start="full"), POOLS))
            st, body, _ = r.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 200, body)
            st, body, _ = r.call("GET", "/v1/tickets/%s?wait=3" % queued["ticket"])
            self.assertEqual((st, body.get("status")), (200, "granted"), body)
            st, body, _ = r.lease("solo", 10)
            self.assertEqual(st, 200, body)  # no cap any more: a third one at once
        finally:
            redis.cont_signal()
            r.stop()
            redis.close()


if __name__ == "__main__":
    unittest.main()
