"""test_agent_bounds.py - agent names are bounded: per token and in all (429 naming the
bound), idle agents are forgotten, and GET /v1/agents pages (docs/api.md, server.md).

Every wait is bounded; no timing gates a result.
"""
import unittest

from harness import KeepAlive, Sluiced, refused_config, wait_until

CONFIG = """
auth:
  admin_token: admin-secret-1
  tokens:
    - {token: fleet-token, agent_prefix: "m-"}
    - {token: other-token, agent_prefix: "n-"}
pools:
  default:
    input_tpm: 100000000
    output_tpm: 100000000
agents:
%s
"""
ADMIN = "admin-secret-1"


def agent_names(s, token=ADMIN):
    names, cursor = [], None
    for _ in range(100):
        path = "/v1/agents?limit=7" + ("&cursor=" + cursor if cursor else "")
        st, body, _ = s.call("GET", path, token=token)
        assert st == 200, body
        names += [a["name"] for a in body["agents"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return names
    raise AssertionError("no last page")


class Bounds(unittest.TestCase):
    def test_a_new_name_past_a_bound_is_refused_429_naming_it_and_changes_nothing(self):
        with Sluiced(CONFIG % "  max_per_token: 5\n  max_total: 8\n  forget_idle_s: 3600") as s:
            fleet, other = KeepAlive(s, "fleet-token"), KeepAlive(s, "other-token")
            for i in range(5):
                self.assertEqual(fleet.lease_and_cancel("m-%d" % i)[0], 200)
            st, body, hdrs = fleet.lease("m-5")
            self.assertEqual(st, 429, body)
            self.assertEqual((body["status"], body["reason"]), ("rejected", "too_many_agents"))
            self.assertIn("agents.max_per_token is 5", body["error"]["message"])
            self.assertEqual(hdrs.get("Retry-After"), "3600")
            # A name it knows still goes; another token has its own bound ...
            self.assertEqual(fleet.lease_and_cancel("m-0")[0], 200)
            for i in range(3):
                self.assertEqual(other.lease_and_cancel("n-%d" % i)[0], 200)
            # ... until the total: every token, the admin too.
            st, body, _ = other.lease("n-3")
            self.assertEqual(st, 429, body)
            self.assertIn("agents.max_total is 8", body["error"]["message"])
            st, body, _ = s.call("POST", "/v1/leases", {"agent": "x-admin", "input_tokens": 1,
                                                        "output_tokens": 1}, token=ADMIN)
            self.assertEqual(st, 429, body)
            # A refusal asked nothing of the backend: no agent, no lease, no event.
            names = agent_names(s)
            self.assertEqual(len(names), 8)
            self.assertNotIn("m-5", names)
            self.assertNotIn("x-admin", names)
            s.token = ADMIN
            self.assertEqual(s.pool()["leases_in_flight"], 0)
            self.assertFalse([e for e in s.events() if e.get("agent") in ("m-5", "n-3")])
            self.assertEqual(s.metric("sluice_agents_known"), 8)
            self.assertEqual(s.metric("sluice_agents_refused_total"), 3)
            fleet.close()
            other.close()

    def test_the_agents_section_is_validated_naming_the_key(self):
        self.assertIn("agents.max_per_token: '0' must be an integer between 1",
                      refused_config(CONFIG % "  max_per_token: 0"))
        self.assertIn("agents.forget_after_s: unknown key",
                      refused_config(CONFIG % "  forget_after_s: 5"))


class Forgetting(unittest.TestCase):
    def test_idle_agents_are_forgotten_and_free_their_place(self):
        with Sluiced(CONFIG % "  max_per_token: 40\n  forget_idle_s: 1") as s:
            fleet = KeepAlive(s, "fleet-token")
            st, held, _ = fleet.lease("m-holder")  # holds a lease: never forgotten
            self.assertEqual(st, 200, held)
            for i in range(39):
                self.assertEqual(fleet.lease_and_cancel("m-a%d" % i)[0], 200)
            self.assertEqual(fleet.lease("m-late")[0], 429)
            self.assertTrue(wait_until(lambda: s.metric("sluice_agents_known") == 1, 15),
                            s.metric("sluice_agents_known"))
            self.assertEqual(agent_names(s), ["m-holder"])
            self.assertEqual(s.metric("sluice_agents_forgotten_total"), 39)
            # The places are free again: 39 more fresh names.
            for i in range(39):
                self.assertEqual(fleet.lease_and_cancel("m-b%d" % i)[0], 200)
            # A forgotten agent comes back as new: its totals start over.
            self.assertTrue(wait_until(lambda: s.metric("sluice_agents_known") == 1, 15))
            st, body, _ = fleet.call("POST", "/v1/leases/%s/settle" % held["lease"],
                                     {"input_tokens": 10, "output_tokens": 10})
            self.assertEqual(st, 200, body)
            st, body, _ = s.call("GET", "/v1/agents", token=ADMIN)
            self.assertEqual([a["tokens_in"] for a in body["agents"]], [10])
            fleet.close()


class Paging(unittest.TestCase):
    def test_agents_page_by_name_with_a_cursor(self):
        with Sluiced(CONFIG % "  forget_idle_s: 3600") as s:
            fleet = KeepAlive(s, "fleet-token")
            made = sorted("m-%02d" % i for i in range(25))
            for name in reversed(made):
                self.assertEqual(fleet.lease_and_cancel(name)[0], 200)
            st, body, _ = s.call("GET", "/v1/agents?limit=10", token=ADMIN)
            self.assertEqual(st, 200, body)
            self.assertEqual([a["name"] for a in body["agents"]], made[:10])
            self.assertEqual(body["next_cursor"], made[9])
            st, body, _ = s.call("GET", "/v1/agents?limit=10&cursor=" + made[19], token=ADMIN)
            self.assertEqual([a["name"] for a in body["agents"]], made[20:])
            self.assertIsNone(body["next_cursor"])
            self.assertEqual(agent_names(s), made)
            # Without a limit: the first 1000, and where to go on (none here).
            st, body, _ = s.call("GET", "/v1/agents", token=ADMIN)
            self.assertEqual(len(body["agents"]), 25)
            self.assertIsNone(body["next_cursor"])
            # A token pages through its own agents only.
            st, body, _ = s.call("GET", "/v1/agents?limit=5", token="other-token")
            self.assertEqual((body["agents"], body["next_cursor"]), ([], None))
            for bad, field in (("limit=0", "limit"), ("limit=10001", "limit"),
                               ("limit=ten", "limit"), ("cursor=" + "x" * 200, "cursor")):
                st, body, _ = s.call("GET", "/v1/agents?" + bad, token=ADMIN)
                self.assertEqual(st, 400, bad)
                self.assertTrue(body["error"]["message"].startswith(field + ": "), body)
            fleet.close()


if __name__ == "__main__":
    unittest.main()
