"""test_limits.py - two sluiced replicas on one redis-server share their action limits
(limits.lua): a limit is not overdrawn by checks spread over both, all or nothing across
levels, a hold taken on one is released on the other, an adaptive rate reported to one is
the other's, and one replica's view shows the other's state."""
import threading
import time
import unittest

from redis_harness import Redis, replica, wait_until

POOLS = """  default:
    input_tpm: 6000
    output_tpm: 600000
limits:
  calls:
    algorithm: sliding_window
    rate: 10
    period_s: 600
    per: global
  tool:
    algorithm: token_bucket
    rate: 1
    period_s: 600
    burst: 3
    parents: [tools.all]
  tools.all:
    algorithm: fixed_window
    rate: 4
    period_s: 600
    per: global
  sem:
    algorithm: concurrency
    rate: 1
    ttl_s: 600
  api:
    algorithm: gcra
    rate: 100
    period_s: 1
    burst: 10
    adaptive: {min_rate: 10, max_rate: 200, window: 10}
  slow:
    algorithm: gcra
    rate: 2
    period_s: 1
    burst: 1
    per: global
    on_limit: queue
"""


def check(r, name, agent, **kw):
    body = {"agent": agent}
    body.update(kw)
    return r.call("POST", "/v1/limits/%s/check" % name, body)


class SharedLimits(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.a = replica(self.redis, POOLS)
        self.b = replica(self.redis, POOLS)
        for r in (self.a, self.b):
            self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))
        # The limits library is loaded by the replicas as they connect.
        self.assertTrue(wait_until(self.library_loaded, 10))

    def library_loaded(self):
        try:
            return self.redis.command("FCALL", "sluice_limits_version", "0") in ("3", b"3")
        except Exception:  # not loaded yet: Redis answers an error
            return False

    def tearDown(self):
        for r in (self.a, self.b):
            r.stop()
        self.redis.close()

    def test_a_global_limit_is_not_overdrawn_by_checks_on_two_replicas(self):
        results = []
        lock = threading.Lock()

        def run(r, n, agent):
            for _ in range(n):
                st, body, _ = check(r, "calls", agent)
                with lock:
                    results.append((st, body))

        threads = [threading.Thread(target=run, args=(r, 8, "ag-%d" % i))
                   for i, r in enumerate((self.a, self.b, self.a, self.b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        allowed = [b for st, b in results if st == 200]
        denied = [b for st, b in results if st == 429]
        self.assertEqual(len(results), 32)
        self.assertEqual(len(allowed), 10)  # each replica alone would allow 10
        self.assertEqual(len(denied), 22)
        self.assertEqual(sorted(b["remaining"] for b in allowed), list(range(10)))
        for b in denied:
            self.assertEqual(b["denied_by"]["limit"], "calls")
            self.assertEqual(b["remaining"], 0)
        st, body, _ = self.b.call("GET", "/v1/limits/calls?key=*")
        self.assertEqual(st, 200)
        self.assertEqual(body["state"]["remaining"], 0)
        self.assertTrue(body["state"]["tracked"])

    def test_a_deny_at_one_level_takes_nothing_at_any_level_across_replicas(self):
        # tools.all allows 4 in all; each agent's bucket 3.
        self.assertEqual(check(self.a, "tool", "x", hits=3)[0], 200)
        st, body, _ = check(self.b, "tool", "y", hits=2)  # y has 3, the parent 1 left
        self.assertEqual(st, 429)
        self.assertEqual(body["denied_by"], {"limit": "tools.all", "key": "*", "reason": "rate"})
        st, body, _ = check(self.a, "tool", "y", hits=0)  # a peek: y's bucket untouched
        self.assertEqual(st, 200)
        levels = {c["limit"]: c for c in body["checked"]}
        self.assertEqual(levels["tool"]["remaining"], 3)
        self.assertEqual(levels["tools.all"]["remaining"], 1)
        self.assertEqual(check(self.b, "tool", "y")[0], 200)
        self.assertEqual(check(self.a, "tool", "z")[0], 429)

    def test_a_hold_taken_on_one_replica_is_released_on_the_other(self):
        self.assertEqual(check(self.a, "sem", "w")[0], 200)
        st, body, _ = check(self.b, "sem", "w")
        self.assertEqual(st, 429)
        self.assertAlmostEqual(body["retry_after"], 600, delta=1)
        st, body, _ = self.b.call("POST", "/v1/limits/sem/release", {"agent": "w"})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["held"], 0)
        self.assertEqual(self.a.call("POST", "/v1/limits/sem/release", {"agent": "w"})[0], 404)
        self.assertEqual(check(self.a, "sem", "w")[0], 200)

    def test_an_adaptive_rate_reported_to_one_replica_is_the_others(self):
        st, body, _ = self.a.call("POST", "/v1/limits/api/report",
                                  {"agent": "m", "successes": 0, "errors": 5})
        self.assertEqual(st, 200, body)
        self.assertAlmostEqual(body["rate"], 90)
        st, body, _ = check(self.b, "api", "m", hits=0)
        self.assertEqual(st, 200)
        self.assertAlmostEqual(body["checked"][0]["rate"], 90)
        adapted = [e for e in self.a.events() if e.get("event") == "limit_adapted"]
        self.assertEqual(len(adapted), 1)
        self.assertAlmostEqual(adapted[0]["new_rate"], 90)

    def test_a_queued_check_waits_for_room_taken_on_the_other_replica(self):
        self.assertEqual(check(self.a, "slow", "q")[0], 200)
        st, body, _ = check(self.b, "slow", "q", wait=0)
        self.assertEqual(st, 429)
        st, body, _ = check(self.b, "slow", "q", wait=5)
        self.assertEqual(st, 200, body)
        self.assertGreater(body.get("waited", 0), 0.1)

    def test_keys_of_one_tree_share_a_hash_tag_and_every_key_expires(self):
        self.assertEqual(check(self.a, "tool", "x")[0], 200)
        self.assertEqual(check(self.b, "calls", "x")[0], 200)
        self.assertEqual(check(self.b, "sem", "x")[0], 200)
        keys = [k.decode() if isinstance(k, bytes) else k
                for k in self.redis.command("KEYS", "sluice:{L*")]
        tags = {}
        for k in keys:
            tag = k[k.index("{"):k.index("}") + 1]
            # sluice:{L<tree>}:<kind>:<config>:<name length>:<name>:<key>
            parts = k.split(":", 5)
            name = parts[5][:int(parts[4])]
            tags.setdefault(tag, set()).add(name)
            ttl = self.redis.command("PTTL", k)
            self.assertGreater(ttl, 0, k)
            # at least the rest time and a second (600 s here but for the fixed window's,
            # the rest of its window), at most twice that
            if name != "tools.all":
                self.assertGreater(ttl, 590000, k)
            self.assertLessEqual(ttl, 1202000, k)
        self.assertIn({"tool", "tools.all"}, list(tags.values()))  # one tree, one slot
        self.assertIn({"calls"}, list(tags.values()))
        self.assertEqual(len(tags), 3)

    def test_a_records_ttl_is_kept_while_it_lasts_long_enough(self):
        # A second check finds the TTL set by the first long enough (twice the rest time)
        # and keeps it: the record's TTL goes down between the checks instead of being set
        # again (a SET with PX costs Redis about twice a SET with KEEPTTL).
        self.assertEqual(check(self.a, "api", "k")[0], 200)
        keys = [k.decode() if isinstance(k, bytes) else k
                for k in self.redis.command("KEYS", "sluice:{L*")]
        key = [k for k in keys if k.split(":")[2] == "S"][0]
        first = self.redis.command("PTTL", key)
        time.sleep(0.05)
        self.assertEqual(check(self.b, "api", "k")[0], 200)
        second = self.redis.command("PTTL", key)
        self.assertGreater(second, 0)
        self.assertLess(second, first - 20)

    def test_a_check_is_decided_in_the_replicas_own_set_while_redis_is_away(self):
        self.assertEqual(check(self.a, "sem", "v")[0], 200)  # held in Redis
        self.redis.stop_signal()
        try:
            st, body, _ = check(self.a, "sem", "v")  # the FCALL times out: a's own set
            self.assertEqual(st, 200, body)
        finally:
            self.redis.cont_signal()
        self.assertTrue(wait_until(lambda: check(self.b, "sem", "v")[0] == 429, 10))

    def test_the_library_is_loaded_again_after_redis_lost_it(self):
        self.redis.command("FUNCTION", "FLUSH")
        check(self.a, "calls", "u")  # decided locally; a reloads the library
        self.assertTrue(wait_until(self.library_loaded, 10))
        self.assertEqual(check(self.a, "calls", "u")[1]["remaining"], 9)
        self.assertEqual(check(self.b, "calls", "u")[1]["remaining"], 8)

    def test_refusals_are_the_same_as_in_memory(self):
        st, body, _ = check(self.a, "nope", "x")
        self.assertEqual(st, 404)
        st, body, _ = check(self.a, "calls", "x", hits=-1)
        self.assertEqual(st, 400)
        st, body, _ = self.a.call("POST", "/v1/limits/calls/release", {"agent": "x"})
        self.assertEqual(st, 400)
        self.assertIn("nothing to release", body["error"]["message"])


if __name__ == "__main__":
    unittest.main()
