"""test_tier_limits.py - a tier's limit_multiplier on the Redis backend: the gold copy of a
per-agent limit is one state in Redis that both replicas draw from (twice the per-agent
rate in all, not per replica), and a token of no tier keeps the configured rate."""
import unittest

from redis_harness import TwoReplicas, replica

LIMITS = """  default:
    input_tpm: 6000
    output_tpm: 600000
tiers:
  gold: {limit_multiplier: 2}
limits:
  tool:
    algorithm: fixed_window
    rate: 3
    period_s: 3600
auth:
  admin_token: admin-secret-1
  tokens:
    - {token: gold-secret-1, agent: g1, tier: gold}
    - {token: none-secret-1, agent: n1}
"""


def check(r, token, agent):
    return r.call("POST", "/v1/limits/tool/check", {"agent": agent}, token=token)


class TierCopiesOnRedis(TwoReplicas):
    def test_the_gold_copy_is_shared_by_the_replicas(self):
        self.start(lambda redis: replica(redis, LIMITS))
        codes = [check(r, "gold-secret-1", "g1")[0] for r in (self.a, self.b) * 4]
        self.assertEqual(codes, [200] * 6 + [429] * 2)
        codes = [check(r, "none-secret-1", "n1")[0] for r in (self.a, self.b) * 2]
        self.assertEqual(codes, [200] * 3 + [429])
        st, body, _ = self.b.call("GET", "/v1/limits/tool?key=g1", token="gold-secret-1")
        self.assertEqual((st, body["name"], body["state"]["remaining"]), (200, "tool@gold", 0))


if __name__ == "__main__":
    unittest.main()
