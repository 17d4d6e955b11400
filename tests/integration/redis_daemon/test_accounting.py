"""test_accounting.py - the accounting rules through sluiced on the Redis backend: a failed
settle is not counted and teaches no calibration, a max_tokens above the output bucket is
served with the capacity reserved, a model's cache is its own, QUEUED names what binds."""
import unittest

from redis_harness import Redis, replica, wait_until

POOLS = """  default:
    input_tpm: 100000
    output_tpm: 10000
    rpm: 10000
    max_queue_wait_s: 600
    ticket_idle_s: 600
    spend_cap_reset_s: 900
    output_reserve: learned
"""


class AccountingOnRedis(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.r = replica(self.redis, POOLS, fail="closed", cold_start="full")
        self.assertTrue(wait_until(lambda: self.r.call("GET", "/readyz")[0] == 200, 10))

    def tearDown(self):
        self.r.stop()
        self.redis.close()

    def lease(self, agent, tokens, out=10, **kw):
        body = {"agent": agent, "input_tokens": tokens, "output_tokens": out}
        body.update(kw)
        return self.r.call("POST", "/v1/leases", body)

    def settle(self, lease, body):
        return self.r.call("POST", "/v1/leases/%s/settle" % lease, body)

    def test_failed_settles_are_not_counted_and_leave_the_ratio(self):
        for _ in range(5):  # the ratio 0.5 for model m
            st, g, _ = self.lease("a", 1000, model="m")
            self.assertEqual(st, 200, g)
            st, s, _ = self.settle(g["lease"], {"input_tokens": 500, "output_tokens": 1})
            self.assertEqual(st, 200, s)
            self.assertTrue(s["counted"])
        for _ in range(6):
            st, g, _ = self.lease("a", 1000, model="m")
            self.assertEqual(g["charged"]["input_tokens"], 500)
            st, s, _ = self.settle(g["lease"], {"input_tokens": 0, "output_tokens": 0,
                                                "failed": True})
            self.assertEqual(st, 200, s)
            self.assertFalse(s["counted"])
        st, g, _ = self.lease("a", 1000, model="m")
        self.assertEqual(g["charged"]["input_tokens"], 500)

    def test_max_tokens_above_the_output_bucket_is_refused_and_a_model_cache_is_its_own(self):
        # The provider holds max_tokens from the start: 128,000 never fits 8,500.
        st, g, _ = self.lease("b", 100, out=128000)
        self.assertEqual(st, 413, g)
        self.assertEqual(g["error"]["type"], "exceeds_capacity")
        self.assertIn("output_tokens 128000", g["error"]["message"])
        st, g, _ = self.lease("b", 100, out=8500)
        self.assertEqual(st, 200, g)
        self.assertEqual(g["charged"]["output_tokens"], 8500)
        self.settle(g["lease"], {"input_tokens": 100, "output_tokens": 0})  # all back
        st, g, _ = self.lease("c", 100, out=10, cached_tokens=5000, model="sonnet")
        self.assertEqual(st, 200, g)
        self.assertEqual(g["charged"]["input_tokens"], 5100)  # cold: the prefix is charged
        self.settle(g["lease"], {"input_tokens": 100, "cache_creation_input_tokens": 5000,
                                 "output_tokens": 1})
        st, g, _ = self.lease("c", 100, out=10, cached_tokens=5000, model="sonnet")
        self.assertEqual(g["charged"]["input_tokens"], 100)  # warm now
        self.settle(g["lease"], {"input_tokens": 100, "cache_read_input_tokens": 5000,
                                 "output_tokens": 1})
        st, g, _ = self.lease("c", 100, out=10, cached_tokens=5000, model="haiku")
        self.assertEqual(g["charged"]["input_tokens"], 5100)  # another model: cold

    def test_the_pool_shows_the_accounting_settings_it_was_given(self):
        st, p, _ = self.r.call("GET", "/v1/pools/default")
        self.assertEqual(st, 200, p)
        cfg = p["config"]
        self.assertEqual(cfg["spend_cap_reset_s"], 900)
        self.assertEqual(cfg["output_reserve"], "learned")

    def test_queued_answer_names_the_binding_bucket(self):
        st, g, _ = self.lease("d", 100, out=8500)
        self.assertEqual(st, 200, g)
        st, q, _ = self.lease("e", 100, out=8500)
        self.assertEqual(st, 202, q)
        self.assertEqual(q["limited_by"], "output_tokens")


if __name__ == "__main__":
    unittest.main()
