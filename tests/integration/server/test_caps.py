"""test_caps.py - caps, teams and budgets from the config, and calibration, through HTTP."""
import unittest

from harness import Sluiced, check_config

CONFIG = """
pools:
  default:
    input_tpm: 1000000
    output_tpm: 100000
    rpm: 10000
    price_input_per_mtok: 3
    price_output_per_mtok: 15
caps:
  agents:
    "*":
      max_rpm: 2
    spender:
      budget_usd_per_hour: 0.01
  teams:
    lint:
      members: [lint-1, lint-2]
      max_concurrent: 1
"""


class Caps(unittest.TestCase):
    def test_agent_cap_rejects_with_reason_and_retry_after(self):
        with Sluiced(CONFIG) as s:
            for _ in range(2):
                status, body, _ = s.lease("chatty", 10)
                self.assertEqual(status, 200, body)
            status, body, hdrs = s.lease("chatty", 10)
            self.assertEqual(status, 429, body)
            self.assertEqual(body["reason"], "agent_cap")
            self.assertAlmostEqual(body["retry_after"], 30, delta=0.5)
            self.assertEqual(hdrs["retry-after"], "30")
            status, body, _ = s.lease("other", 10)  # another agent is not affected
            self.assertEqual(status, 200, body)

    def test_team_cap_and_budget(self):
        with Sluiced(CONFIG) as s:
            status, body, _ = s.lease("lint-1", 10)
            self.assertEqual(status, 200, body)
            # A fresh daemon queues for the team's release, with the ETA of the prior lease
            # duration (30 s per release of the one slot), and rejects only past 60 s.
            for eta in (30, 60):
                status, body, _ = s.lease("lint-2", 10)
                self.assertEqual(status, 202, body)
                self.assertEqual(body["limited_by"], "team_cap")
                self.assertAlmostEqual(body["eta"], eta, delta=1)
            status, body, _ = s.lease("lint-2", 10)
            self.assertEqual(status, 429, body)
            self.assertEqual(body["reason"], "team_cap")
            self.assertAlmostEqual(body["retry_after"], 90, delta=1)
            _, agents, _ = s.call("GET", "/v1/agents")
            teams = {a["name"]: a.get("team") for a in agents["agents"]}
            self.assertEqual(teams["lint-1"], "lint")
            # $0.0075 each against $0.01 per hour: the second is over budget.
            status, body, _ = s.lease("spender", 2000, 100)
            self.assertEqual(status, 200, body)
            status, body, _ = s.lease("spender", 2000, 100)
            self.assertEqual(status, 429, body)
            self.assertEqual(body["reason"], "budget_exhausted")

    def test_bad_caps_config_names_the_key_and_line(self):
        rc, out = check_config("caps:\n  agents:\n    a:\n      max_share: 1.5\n")
        self.assertNotEqual(rc, 0)
        self.assertIn(":4:", out)
        self.assertIn("caps.agents.a", out)
        self.assertIn("max_share 1.5", out)


QUEUE_CONFIG = """
pools:
  default:
    input_tpm: 1000000
    output_tpm: 100000
    rpm: 10000
    max_queue_wait_s: 300
caps:
  agents:
    solo:
      max_concurrent: 1
"""


class ConcurrencyCapQueues(unittest.TestCase):
    def test_second_lease_of_an_agent_at_max_concurrent_is_queued_and_granted_on_release(self):
        with Sluiced(QUEUE_CONFIG) as s:
            status, first, _ = s.lease("solo", 10)
            self.assertEqual(status, 200, first)
            status, queued, _ = s.lease("solo", 10)
            self.assertEqual(status, 202, queued)
            self.assertEqual(queued["limited_by"], "agent_cap")
            self.assertLessEqual(queued["eta"], 120)  # the lease's expiry bounds it
            status, other, _ = s.lease("other", 10)  # the pool's queue is not blocked
            self.assertEqual(status, 200, other)
            self.assertEqual(s.pool()["queue"]["depth"], 1)
            status, body, _ = s.call("GET", "/v1/tickets/%s" % queued["ticket"])
            self.assertEqual(status, 202, body)
            status, body, _ = s.call("POST", "/v1/leases/%s/settle" % first["lease"],
                                     {"input_tokens": 10, "output_tokens": 10})
            self.assertEqual(status, 200, body)
            status, body, _ = s.call("GET", "/v1/tickets/%s?wait=5" % queued["ticket"])
            self.assertEqual(status, 200, body)
            self.assertEqual(body["status"], "granted")

    def test_a_fresh_daemons_semaphore_queues_the_third_lease(self):
        # Issue 25 item 12: with nothing settled yet, the third lease of `concurrency: 2`
        # was 429 with retry_after 120 (the lease TTL). It waits for a release now, with
        # the ETA of the documented prior (lease_duration_prior_s 30 s, over 2 slots).
        config = "pools:\n  default:\n    input_tpm: 1000000\n    concurrency: 2\n"
        with Sluiced(config) as s:
            first = [s.lease("a%d" % i, 10) for i in range(2)]
            self.assertEqual([f[0] for f in first], [200, 200], first)
            status, queued, _ = s.lease("c", 10)
            self.assertEqual(status, 202, queued)
            self.assertEqual(queued["limited_by"], "concurrency")
            self.assertAlmostEqual(queued["eta"], 15, delta=1)
            self.assertEqual(s.pool()["config"]["lease_duration_prior_s"], 30)
            status, body, _ = s.call("DELETE", "/v1/leases/%s" % first[0][1]["lease"])
            self.assertEqual(status, 200, body)
            status, body, _ = s.call("GET", "/v1/tickets/%s?wait=5" % queued["ticket"])
            self.assertEqual(status, 200, body)
            self.assertEqual(body["status"], "granted")


class Calibration(unittest.TestCase):
    def test_ratio_is_learned_and_visible_in_pool_and_metrics(self):
        with Sluiced(CONFIG.replace("max_rpm: 2", "max_rpm: 1000")) as s:
            for i in range(5):
                status, body, _ = s.lease("est", 1000, model="claude-x")
                self.assertEqual(status, 200, body)
                status, body, _ = s.call("POST", "/v1/leases/%s/settle" % body["lease"],
                                         {"input_tokens": 1250, "output_tokens": 10})
                self.assertEqual(status, 200, body)
            cal = s.pool()["calibration"]
            self.assertEqual(cal, [{"model": "claude-x", "ratio": 1.25, "samples": 5}])
            status, body, _ = s.lease("est", 1000, model="claude-x")
            self.assertEqual(body["charged"]["input_tokens"], 1250)
            _, text, _ = s.call("GET", "/metrics")
            self.assertIn('sluice_calibration_ratio{pool="default",model="claude-x"} 1.25', text)


if __name__ == "__main__":
    unittest.main()
