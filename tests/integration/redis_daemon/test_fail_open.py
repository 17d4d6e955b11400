"""test_fail_open.py - fail-open is conservative: while Redis is away each replica grants
from a local share that starts empty and refills, with ids no other replica issues, and
what it granted is charged to Redis when Redis returns (once)."""
import time
import unittest

from redis_harness import SMALL, OnRedis, replica, wait_until

# SMALL shared by two replicas: a local share of 3000/min, capacity 2550, 42.5 tokens/s
# each.


def pool_no(lease_id):
    return int(lease_id.split("_")[1]) >> 40


class FailOpen(OnRedis):
    def setUp(self):
        super().setUp()
        self.replicas = [replica(self.redis, SMALL, fail="open", cold_start="full")
                         for _ in range(2)]
        self.ready(*self.replicas)
        time.sleep(0.6)  # each heartbeat has counted both replicas: a share of 1/2

    def stop_redis(self):
        self.redis.stop_signal()
        for r in self.replicas:
            self.assertTrue(wait_until(lambda: self.alert(r) == 1, 5))

    def local_grants(self, n, tokens, timeout_s=15):
        """n grants of `tokens` spread over the replicas, retried as the share refills.
        Returns [(replica index, lease id, charged input tokens)]."""
        got = []
        deadline = time.monotonic() + timeout_s
        i = 0
        while len(got) < n and time.monotonic() < deadline:
            k = i % len(self.replicas)
            i += 1
            st, d, _ = self.replicas[k].lease("w%d" % k, tokens, output_tokens=1)
            if st == 200:
                got.append((k, d["lease"], d["charged"]["input_tokens"]))
            else:
                self.assertIn(st, (202, 429), d)
                if st == 202:
                    self.replicas[k].call("DELETE", "/v1/tickets/%s" % d["ticket"])
                time.sleep(0.1)
        self.assertEqual(len(got), n, "the local shares did not refill")
        return got

    def test_local_share_starts_empty_and_local_ids_are_the_replicas_own(self):
        a, b = self.replicas
        self.stop_redis()
        t0 = time.monotonic()
        st, d, _ = a.lease("w", 2000, output_tokens=1)
        self.assertIn(st, (202, 429), d)  # not a full local share at the outage's start
        if st == 202:
            a.call("DELETE", "/v1/tickets/%s" % d["ticket"])
        got = self.local_grants(8, 20)
        elapsed = time.monotonic() - t0
        ids = [lease for _, lease, _ in got]
        self.assertEqual(len(set(ids)), len(ids))
        nos = {k: {pool_no(lease) for kk, lease, _ in got if kk == k} for k in (0, 1)}
        self.assertEqual(len(nos[0]), 1, nos)
        self.assertEqual(len(nos[1]), 1, nos)
        self.assertNotEqual(nos[0], nos[1], "both replicas issued local ids of one range")
        self.assertGreaterEqual(min(nos[0] | nos[1]), 4096)
        # What both shares granted is what they refilled (plus the first grant's rounding).
        spent = sum(c for _, _, c in got)
        self.assertLessEqual(spent, 2 * 42.5 * elapsed + 2 * 20)
        # A local lease is settled where it was granted; another replica does not know it.
        k, lease, _ = got[0]
        st, s, _ = self.replicas[1 - k].call("POST", "/v1/leases/%s/settle" % lease,
                                             {"input_tokens": 20, "output_tokens": 1})
        self.assertEqual(st, 404, s)
        st, s, _ = self.replicas[k].call("POST", "/v1/leases/%s/settle" % lease,
                                         {"input_tokens": 20, "output_tokens": 1})
        self.assertEqual(st, 200, s)

    def test_a_restarted_replica_issues_local_ids_above_its_earlier_ones(self):
        named = replica(self.redis, SMALL, fail="open", cold_start="full", replica="fo-named")
        self.replicas.append(named)
        self.assertTrue(wait_until(lambda: named.call("GET", "/readyz")[0] == 200, 10))
        self.stop_redis()
        self.assertTrue(wait_until(lambda: self.alert(named) == 1, 5))
        first = []
        self.assertTrue(wait_until(lambda: self.grant_into(named, first), 10, step_s=0.2))
        named.stop()
        self.replicas.remove(named)
        time.sleep(0.01)
        again = replica(self.redis, SMALL, fail="open", cold_start="full", replica="fo-named")
        self.replicas.append(again)
        self.assertTrue(wait_until(lambda: self.alert(again) == 1, 10))
        second = []
        self.assertTrue(wait_until(lambda: self.grant_into(again, second), 10, step_s=0.2))
        self.assertNotEqual(first[0], second[0])
        # The same number when both came from the same source (the registry's, or the
        # hash of the name when Redis was away at the start): then above the first.
        if pool_no(first[0]) == pool_no(second[0]):
            self.assertGreater(int(second[0].split("_")[1]), int(first[0].split("_")[1]))

    def grant_into(self, r, out):
        st, d, _ = r.lease("w", 20, output_tokens=1)
        if st == 202:
            r.call("DELETE", "/v1/tickets/%s" % d["ticket"])
        if st == 200:
            out.append(d["lease"])
        return st == 200

    def test_local_share_applies_the_margin_last_seen(self):
        a, b = self.replicas
        st, g, _ = a.lease("w", 100, output_tokens=1)
        self.assertEqual(st, 200, g)
        st, s, _ = a.call("POST", "/v1/leases/%s/settle" % g["lease"],
                          {"input_tokens": 100, "output_tokens": 1, "got_429": True})
        self.assertEqual(st, 200, s)
        self.assertAlmostEqual(a.pool()["margin"], 0.80)
        self.stop_redis()
        local = a.pool()  # the local share while Redis is away
        self.assertAlmostEqual(local["margin"], 0.80)
        self.assertEqual(local["buckets"]["input_tokens"]["limit"], 3000)
        self.assertAlmostEqual(local["buckets"]["input_tokens"]["capacity"], 2400)

    def test_local_grants_are_charged_to_redis_once_when_it_returns(self):
        a, b = self.replicas
        st, hog, _ = a.lease("hog", 5000, output_tokens=1)
        self.assertEqual(st, 200, hog)
        l0, t0 = self.level(a), time.monotonic()
        self.stop_redis()
        got = self.local_grants(14, 20)
        spent = sum(c for _, _, c in got)
        self.redis.cont_signal()
        for r in self.replicas:
            self.assertTrue(wait_until(lambda: self.alert(r) == 0, 10))
        time.sleep(0.5)  # the charges are sent as each replica recovers
        l1, t1 = self.level(a), time.monotonic()
        expected = l0 + 85 * (t1 - t0) - spent
        self.assertLess(expected + spent, 5100)  # no clamp at capacity hides a charge
        self.assertAlmostEqual(l1, expected, delta=spent / 3,
                               msg="level %.0f, expected %.0f after %d tokens granted locally"
                               % (l1, expected, spent))

    def test_a_local_share_reads_the_provider_s_headers_as_its_share(self):
        # The headers describe the provider's whole bucket, which both replicas' shares
        # spend: the local share adopts neither the whole limit nor the whole room, and
        # its margin does not climb on them.
        a, _ = self.replicas
        self.stop_redis()
        (_, lease, _), = self.local_grants(1, 20)
        headers = {"anthropic-ratelimit-input-tokens-limit": "6000",
                   "anthropic-ratelimit-input-tokens-remaining": "6000"}
        st, s, _ = a.call("POST", "/v1/leases/%s/settle" % lease,
                          {"input_tokens": 20, "output_tokens": 1, "headers": headers})
        self.assertEqual(st, 200, s)
        local = a.pool()["buckets"]["input_tokens"]
        self.assertEqual(local["limit"], 3000, local)
        self.assertAlmostEqual(a.pool()["margin"], 0.85)
        self.assertLessEqual(local["level"], 2550, local)

    def test_a_ticket_queued_before_the_outage_waits_for_the_shares_charges(self):
        # Redis's pool refills through the outage as if nobody spent; the replicas' local
        # shares spent that refill. The first call after Redis returns must not grant a
        # queued ticket from it before the shares' charges arrive.
        a, b = self.replicas
        st, hog, _ = a.lease("hog", 5000, output_tokens=1)
        self.assertEqual(st, 200, hog)
        st, q, _ = a.lease("queued", 1200, output_tokens=1)
        self.assertEqual(st, 202, q)  # queued in Redis, its ETA ~13 s at 85 tokens/s
        self.stop_redis()
        spent, t_end, i = 0, time.monotonic() + 16, 0
        while time.monotonic() < t_end and i < 2000:  # the shares spend all they refill
            r = self.replicas[i % 2]
            i += 1
            st, d, _ = r.lease("w%d" % (i % 2), 20, output_tokens=1)
            if st == 200:
                spent += d["charged"]["input_tokens"]
            else:
                if st == 202:
                    r.call("DELETE", "/v1/tickets/%s" % d["ticket"])
                time.sleep(0.05)
        self.assertGreater(spent, 900)
        self.redis.cont_signal()
        for r in self.replicas:
            self.assertTrue(wait_until(lambda: self.alert(r) == 0, 10))
        time.sleep(2.0)  # every replica's charge is in, the held refill released
        st, t, _ = a.call("GET", "/v1/tickets/%s" % q["ticket"])
        self.assertEqual(st, 202, "granted from the refill the local shares spent (%d tokens): %s"
                         % (spent, t))


if __name__ == "__main__":
    unittest.main()
