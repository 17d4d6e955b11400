"""test_accounting.py - the lease API: failed calls teach nothing, answers name the binding bucket."""
import unittest

from harness import Sluiced, check_config

CONFIG = """
pools:
  default:
    input_tpm: 1000000
    output_tpm: 100000
    rpm: 10000
"""


def calibration(s, model):
    for c in s.pool()["calibration"]:
        if c["model"] == model:
            return c
    return None


class FailedCalls(unittest.TestCase):
    def test_failed_settles_are_not_counted_and_leave_the_calibration_alone(self):
        with Sluiced(CONFIG) as s:
            for _ in range(5):
                status, body, _ = s.lease("a", 1000, model="m1")
                self.assertEqual(status, 200, body)
                status, body, _ = s.call("POST", "/v1/leases/%s/settle" % body["lease"],
                                         {"input_tokens": 1200, "output_tokens": 10})
                self.assertEqual(status, 200, body)
                self.assertIs(body["counted"], True)
            ratio = calibration(s, "m1")["ratio"]
            self.assertAlmostEqual(ratio, 1.2)
            for failure in ({"failed": True}, {"got_429": True}, {"failed": True},
                            {"got_429": True, "spend_cap": True}, {"failed": True},
                            {"failed": True}):
                status, body, _ = s.lease("a", 1000, model="m1")
                self.assertEqual(status, 200, body)
                settle = {"input_tokens": 0, "output_tokens": 0}
                settle.update(failure)
                status, body, _ = s.call("POST", "/v1/leases/%s/settle" % body["lease"], settle)
                self.assertEqual(status, 200, body)
                self.assertIs(body["counted"], False)
                self.assertEqual(body["adjust"]["input_tokens"], 1200)
            c = calibration(s, "m1")
            self.assertEqual(c["samples"], 5)
            self.assertAlmostEqual(c["ratio"], ratio)
            status, body, _ = s.call("POST", "/v1/leases/l_1/settle",
                                     {"input_tokens": 0, "output_tokens": 0, "failed": 1})
            self.assertEqual(status, 400, body)
            self.assertIn("failed", body["error"]["message"])


class CacheIdentity(unittest.TestCase):
    def test_the_cache_is_per_model_and_prefix_hash(self):
        with Sluiced(CONFIG) as s:
            def lease(model, prefix):
                status, body, _ = s.lease("cc", 10, 10, cached_tokens=5000, model=model,
                                          cache_prefix_hash=prefix)
                self.assertEqual(status, 200, body)
                return body
            first = lease("sonnet", "abc")
            self.assertIs(first["cache_penalty"], True)
            status, body, _ = s.call("POST", "/v1/leases/%s/settle" % first["lease"],
                                     {"input_tokens": 10, "output_tokens": 10,
                                      "cache_creation_input_tokens": 5000})
            self.assertEqual(status, 200, body)
            self.assertLess(body["estimate_error"], 1e-9)  # a predicted cache write
            self.assertIs(lease("sonnet", "abc")["cache_penalty"], False)
            self.assertIs(lease("haiku", "abc")["cache_penalty"], True)
            self.assertIs(lease("sonnet", "xyz")["cache_penalty"], True)
            status, body, _ = s.lease("cc", 10, 10, cache_prefix_hash=7)
            self.assertEqual(status, 400, body)
            self.assertIn("cache_prefix_hash", body["error"]["message"])


class Agents(unittest.TestCase):
    def test_v1_agents_shows_the_current_weight(self):
        with Sluiced(CONFIG) as s:
            for _ in range(4):
                status, body, _ = s.lease("looper", 10)
                self.assertEqual(status, 200, body)
                s.call("POST", "/v1/leases/%s/settle" % body["lease"],
                       {"input_tokens": 10, "output_tokens": 10,
                        "failure_signature": "test_foo:abc"})
            _, agents, _ = s.call("GET", "/v1/agents")
            a = [x for x in agents["agents"] if x["name"] == "looper"][0]
            self.assertEqual(a["repeats"], 3)
            self.assertAlmostEqual(a["weight"], 0.125)


class LearnedOutput(unittest.TestCase):
    def test_output_reserve_learned_reserves_the_95th_percentile(self):
        with Sluiced(CONFIG + "    output_reserve: learned\n") as s:
            self.assertEqual(s.pool()["config"]["output_reserve"], "learned")
            for i in range(20):
                status, body, _ = s.lease("a", 100, 32000, model="m")
                self.assertEqual(body["charged"]["output_tokens"], 32000)
                s.call("POST", "/v1/leases/%s/settle" % body["lease"],
                       {"input_tokens": 100, "output_tokens": 100 * (i + 1)})
            # Only a client that sends charged.output_tokens as its max_tokens gets it.
            status, body, _ = s.lease("a", 100, 32000, model="m")
            self.assertEqual(status, 200, body)
            self.assertEqual(body["charged"]["output_tokens"], 32000)
            status, body, _ = s.lease("a", 100, 32000, model="m", cap_output=True)
            self.assertEqual(status, 200, body)
            self.assertEqual(body["charged"]["output_tokens"], 1900)

    def test_a_bad_output_reserve_names_the_key(self):
        rc, out = check_config("pools:\n  default:\n    rpm: 10\n    output_reserve: guess\n")
        self.assertNotEqual(rc, 0)
        self.assertIn("pools.default.output_reserve", out)
        self.assertIn("guess", out)


class LimitedBy(unittest.TestCase):
    def test_queued_and_rejected_answers_name_the_binding_bucket(self):
        with Sluiced(CONFIG + "  tight:\n    input_tpm: 1000000\n    output_tpm: 1200\n") as s:
            status, body, _ = s.lease("a", 10, 1000, pool="tight")
            self.assertEqual(status, 200, body)
            status, body, _ = s.lease("b", 10, 1000, pool="tight")
            self.assertEqual(status, 202, body)
            self.assertEqual(body["limited_by"], "output_tokens")
            status, body, _ = s.call("GET", "/v1/tickets/" + body["ticket"])
            self.assertEqual(body["limited_by"], "output_tokens")
            status, body, _ = s.lease("c", 10, 1000, pool="tight")
            self.assertEqual(status, 429, body)
            self.assertEqual(body["limited_by"], "output_tokens")
            self.assertEqual(body["reason"], "queue_wait_exceeds_max")


if __name__ == "__main__":
    unittest.main()
