"""test_state_loss.py - Redis losing the quota's state (restarted empty, FLUSHALL, a
failover to a copy that missed writes) is detected: alert backend_state_lost, a cold
start with empty buckets, and lease ids that never name an earlier lease."""
import threading
import time
import unittest

from redis_harness import OnRedis, wait_until


def lease_no(lease_id):
    return int(lease_id.split("_")[1])


class StateLoss(OnRedis):
    def start(self, n, **opts):
        opts.setdefault("fail", "closed")
        return super().start(n, **opts)

    def grant_some(self, replicas, n):
        """n small grants (the bucket starts empty and refills at 85 tokens/s)."""
        return [self.lease_when_possible(replicas[i % len(replicas)], 20) for i in range(n)]

    def alerts(self, r):
        st, p, _ = r.call("GET", "/v1/pools/default")
        return p["alerts"] if st == 200 else []  # 503 while the replica reconfigures

    def lease_when_possible(self, r, tokens, timeout_s=10):
        """A grant through `r`, retried while the replica is still recovering (503) or the
        empty bucket has not refilled enough (202/429)."""
        got = []

        def attempt():
            st, d, _ = r.lease("after", tokens, output_tokens=1)
            if st == 202:
                r.call("DELETE", "/v1/tickets/%s" % d["ticket"])
            if st == 200:
                got.append(d["lease"])
            return st == 200

        self.assertTrue(wait_until(attempt, timeout_s, step_s=0.2))
        return got[0]

    def assert_lost_and_cold(self, replicas, before_ids, gone_ids=None):
        a = replicas[0]
        self.assertTrue(wait_until(lambda: "backend_state_lost" in self.alerts(a), 10),
                        a.pool())
        # Empty, refilling at 85 tokens/s: far from the 5100 a full bucket would hold.
        self.assertLess(self.level(a), 2000)
        for r in replicas:
            self.assertTrue(wait_until(
                lambda: self.alert(r, "backend_state_lost", "default") == 1, 10))
        new_ids = [self.lease_when_possible(replicas[i % len(replicas)], 20) for i in range(6)]
        self.assertFalse(set(new_ids) & set(before_ids), (new_ids, before_ids))
        self.assertGreater(min(lease_no(x) for x in new_ids), max(lease_no(x) for x in before_ids))
        # An id the lost state issued names nothing now: never another agent's lease.
        for old in before_ids if gone_ids is None else gone_ids:
            st, body, _ = replicas[-1].call("POST", "/v1/leases/%s/settle" % old,
                                            {"input_tokens": 0, "output_tokens": 0})
            self.assertIn(st, (404, 410), body)
        return new_ids

    def test_first_start_is_cold_without_an_alert(self):
        a, = self.start(1)
        self.assertLess(self.level(a), 1000)
        self.assertNotIn("backend_state_lost", a.pool()["alerts"])
        self.assertEqual(self.alert(a, "backend_state_lost", "default"), 0)

    def test_in_the_cold_window_the_first_provider_report_may_raise_a_level(self):
        a, = self.start(1)
        lease = self.lease_when_possible(a, 10)
        h = "anthropic-ratelimit-input-tokens-remaining"
        st, s, _ = a.call("POST", "/v1/leases/%s/settle" % lease,
                          {"input_tokens": 10, "output_tokens": 1, "headers": {h: "3000"}})
        self.assertEqual(st, 200, s)
        # 3000 reported, less Anthropic's rounding (500) and the reserve (6000 - 5100).
        self.assertAlmostEqual(self.level(a), 1600, delta=60)
        lease = self.lease_when_possible(a, 10)
        st, s, _ = a.call("POST", "/v1/leases/%s/settle" % lease,
                          {"input_tokens": 10, "output_tokens": 1, "headers": {h: "5000"}})
        self.assertEqual(st, 200, s)
        self.assertLess(self.level(a), 1700)  # later reports only lower

    def test_cold_start_full_keeps_the_old_behaviour(self):
        a, = self.start(1, cold_start="full")
        self.assertGreater(self.level(a), 5000)

    def test_redis_restarted_empty_is_detected_and_ids_are_not_reused(self):
        reps = self.start(2)
        before = self.grant_some(reps, 4)
        self.redis.restart_empty()
        self.ready(*reps)
        self.assert_lost_and_cold(reps, before)

    def test_a_request_waiting_when_redis_restarts_empty_is_answered_at_once(self):
        a, = self.start(1, cold_start="full")
        st, hog, _ = a.lease("hog", 5000, output_tokens=1)
        self.assertEqual(st, 200, hog)
        answer = []
        t = threading.Thread(target=lambda: answer.append(
            a.call("POST", "/v1/leases", {"agent": "w", "input_tokens": 3000,
                                          "output_tokens": 1, "wait": 30}, timeout_s=40)))
        t.start()
        self.assertTrue(wait_until(lambda: a.pool()["queue"]["depth"] == 1, 5))
        t0 = time.monotonic()
        self.redis.restart_empty()
        t.join(40)
        # Its ticket went with Redis's state: told so, not left waiting its 30 s.
        self.assertLess(time.monotonic() - t0, 15)
        st, body, _ = answer[0]
        self.assertEqual(st, 404, body)

    def test_flushall_is_detected_on_the_next_call(self):
        reps = self.start(2)
        before = self.grant_some(reps, 4)
        self.assertEqual(self.redis.command("FLUSHALL"), "OK")
        self.assert_lost_and_cold(reps, before)

    def test_failover_to_a_copy_that_missed_writes_is_detected(self):
        reps = self.start(2)
        first = self.grant_some(reps, 2)
        keys = self.redis.command("KEYS", "sluice:*")
        snapshot = {k: self.redis.command("DUMP", k) for k in keys}
        later = self.grant_some(reps, 3)
        # The copy that took over has every key as it was before the later grants.
        for k in self.redis.command("KEYS", "sluice:*"):
            if k not in snapshot:
                self.redis.command("DEL", k)
        for k, v in snapshot.items():
            self.redis.command("RESTORE", k, 0, v, "REPLACE")
        # The leases the copy holds are still those leases; the later ones are gone.
        new_ids = self.assert_lost_and_cold(reps, first + later, later)
        self.assertEqual(len(set(new_ids)), len(new_ids))


if __name__ == "__main__":
    unittest.main()
