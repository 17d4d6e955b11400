"""test_anomaly.py - per-agent anomaly detection, suspension and release (docs/observe.md).

Agents make lease requests; sluiced judges each agent once a second against the other
agents of its role (anomaly.c). Every wait is bounded; no timing gates a result.
"""
import json
import os
import subprocess
import unittest

from harness import Sluiced, wait_until

CONFIG = """
fleet:
  anomaly_window_s: 120
  anomaly_min_agents: 5
  anomaly_min_count: 20
  suspend_anomalous: %s
auth:
  admin_token: admin-secret-1
  tokens:
    - {token: fleet-token, agent_prefix: ""}
limits:
  tool.call:
    algorithm: fixed_window
    rate: 100000
    period_s: 600
pools:
  default:
    input_tpm: 100000000
    output_tpm: 100000000
"""

ADMIN = "admin-secret-1"
AGENT = "fleet-token"


def lease(s, agent, role=None):
    body = {"agent": agent, "input_tokens": 10, "output_tokens": 10}
    if role:
        body["role"] = role
    return s.call("POST", "/v1/leases", body, token=AGENT)


def settle(s, grant):
    st, body, _ = s.call("POST", "/v1/leases/%s/settle" % grant["lease"],
                         {"input_tokens": 10, "output_tokens": 10}, token=AGENT)
    assert st == 200, body


def requests(s, agent, n, role=None):
    for _ in range(n):
        st, body, _ = lease(s, agent, role)
        assert st == 200, body
        settle(s, body)


def burst(s, agent, n, role=None):
    """n lease requests, cut short when the agent is suspended mid-way (the judge runs
    once a second, so it may catch the burst before its end). Returns how many went."""
    for i in range(n):
        st, body, _ = lease(s, agent, role)
        if st == 429 and body.get("reason") == "suspended":
            return i
        assert st == 200, body
        settle(s, body)
    return n


def agents(s):
    st, body, _ = s.call("GET", "/v1/agents", token=ADMIN)
    assert st == 200, body
    return {a["name"]: a for a in body["agents"]}


def flagged(s):
    st, body, _ = s.call("GET", "/v1/fleet", token=ADMIN)
    assert st == 200, body
    return {a["agent"]: a for a in body["anomalies"] if a["anomaly"]}


def metric(s, line_start):
    st, text, _ = s.call("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return None


class Runaway(unittest.TestCase):
    def test_a_runaway_among_normal_agents_is_flagged_suspended_and_released(self):
        with Sluiced(CONFIG % "true") as s:
            for i in range(8):
                requests(s, "w%d" % i, 4)
            sent = burst(s, "runaway", 80)
            self.assertTrue(wait_until(lambda: "runaway" in flagged(s), 5), flagged(s))
            f = flagged(s)
            self.assertEqual(set(f), {"runaway"})
            self.assertEqual(f["runaway"]["anomaly"]["metric"], "requests")
            self.assertGreater(f["runaway"]["anomaly"]["z"], 3)
            self.assertGreaterEqual(f["runaway"]["anomaly"]["count"], 20)  # anomaly_min_count
            self.assertLessEqual(f["runaway"]["anomaly"]["count"], sent)
            self.assertTrue(f["runaway"]["suspended"])
            a = agents(s)
            self.assertTrue(a["runaway"]["suspended"])
            self.assertFalse(a["w0"]["suspended"])
            self.assertIsNone(a["w0"]["anomaly"])
            # The alert is an event naming the agent, the metric and the z-score.
            alerts = [e for e in s.events() if e.get("alert") == "anomaly"]
            self.assertEqual(len(alerts), 1, alerts)
            self.assertEqual((alerts[0]["agent"], alerts[0]["metric"], alerts[0]["active"]),
                             ("runaway", "requests", True))
            self.assertGreater(alerts[0]["z"], 3)
            self.assertEqual(metric(s, 'sluice_alert{name="anomaly",pool=""}'), 1)
            self.assertEqual(metric(s, "sluice_agents_suspended"), 1)
            # `sluice agents` says so on the agent's line.
            p = subprocess.run([os.environ.get("SLUICE", "sluice"), "agents", "--server",
                                "http://127.0.0.1:%d" % s.port, "--token", ADMIN],
                               capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 0, p.stderr)
            line = [l for l in p.stdout.splitlines() if l.startswith("runaway ")][0]
            self.assertRegex(line, r"\(anomaly: requests z \d+\.\d\) \(suspended\)$")
            w0 = [l for l in p.stdout.splitlines() if l.startswith("w0 ")][0]
            self.assertNotIn("anomaly", w0)

            # Its leases and its limit checks are refused 429 `suspended`; others pass.
            st, body, hdrs = lease(s, "runaway")
            self.assertEqual((st, body["reason"]), (429, "suspended"), body)
            self.assertIn("retry-after", hdrs)
            st, body, _ = s.call("POST", "/v1/limits/tool.call/check", {"agent": "runaway"},
                                 token=AGENT)
            self.assertEqual((st, body.get("reason")), (429, "suspended"), body)
            st, body, _ = lease(s, "w1")
            self.assertEqual(st, 200, body)
            settle(s, body)

            # Release: admin only; 404 for an agent never seen or not suspended.
            st, body, _ = s.call("POST", "/v1/agents/runaway/release", token=AGENT)
            self.assertEqual(st, 403, body)
            st, body, _ = s.call("POST", "/v1/agents/nobody/release", token=ADMIN)
            self.assertEqual(st, 404, body)
            st, body, _ = s.call("POST", "/v1/agents/w1/release", token=ADMIN)
            self.assertEqual(st, 404, body)
            self.assertIn("not suspended", body["error"]["message"])
            st, body, _ = s.call("POST", "/v1/agents/runaway/release", token=ADMIN)
            self.assertEqual((st, body["status"]), (200, "released"), body)
            st, body, _ = s.call("POST", "/v1/agents/runaway/release", token=ADMIN)
            self.assertEqual(st, 404, body)
            st, body, _ = lease(s, "runaway")
            self.assertEqual(st, 200, body)
            self.assertEqual(metric(s, "sluice_agents_suspended"), 0)
            self.assertTrue(wait_until(lambda: not flagged(s), 5))

    def test_a_refused_request_of_a_suspended_agent_changes_nothing_else(self):
        with Sluiced(CONFIG % "true") as s:
            s.token = ADMIN
            for i in range(6):
                requests(s, "w%d" % i, 3)
            burst(s, "runaway", 60)
            self.assertTrue(wait_until(lambda: "runaway" in flagged(s), 5))
            before_pool = s.pool()
            before_agents = agents(s)
            before_events = len(s.events())
            _, limit_before, _ = s.call("GET", "/v1/limits/tool.call?key=runaway", token=ADMIN)
            for _ in range(5):
                st, body, _ = lease(s, "runaway")
                self.assertEqual(st, 429, body)
                st, body, _ = s.call("POST", "/v1/limits/tool.call/check", {"agent": "runaway"},
                                     token=AGENT)
                self.assertEqual(st, 429, body)
            after_pool = s.pool()
            for k in ("totals", "leases_in_flight", "queue"):
                self.assertEqual(before_pool[k], after_pool[k], k)
            self.assertEqual(before_agents["runaway"], agents(s)["runaway"])
            self.assertEqual(len(s.events()), before_events)
            _, limit_after, _ = s.call("GET", "/v1/limits/tool.call?key=runaway", token=ADMIN)
            self.assertEqual(limit_before["state"]["remaining"], limit_after["state"]["remaining"])
            self.assertEqual(limit_before["checks"], limit_after["checks"])

    def test_without_suspend_anomalous_the_agent_is_flagged_but_served(self):
        with Sluiced(CONFIG % "false") as s:
            for i in range(6):
                requests(s, "w%d" % i, 3)
            requests(s, "runaway", 60)
            self.assertTrue(wait_until(lambda: "runaway" in flagged(s), 5))
            self.assertFalse(flagged(s)["runaway"]["suspended"])
            st, body, _ = lease(s, "runaway")
            self.assertEqual(st, 200, body)


class Baselines(unittest.TestCase):
    def test_a_planner_burst_is_not_flagged_while_a_runaway_worker_is(self):
        with Sluiced(CONFIG % "true") as s:
            for i in range(8):
                requests(s, "w%d" % i, 4)
            # A planning phase: six planners fan their tasks out at once, each far above
            # what a worker asks (a pooled baseline would flag every one of them).
            for i, n in enumerate((30, 45, 60, 75, 80)):
                requests(s, "p%d" % i, n, role="planner")
            requests(s, "lead", 80, role="planner")
            burst(s, "runaway", 80)
            # The worker is flagged: the evaluation ran over every agent ...
            self.assertTrue(wait_until(lambda: "runaway" in flagged(s), 5), flagged(s))
            # ... and judged the planners against planners, where 80 is not 3 sd out.
            self.assertEqual(set(flagged(s)), {"runaway"})
            self.assertFalse(agents(s)["lead"]["suspended"])
            st, body, _ = lease(s, "lead", role="planner")
            self.assertEqual(st, 200, body)

    def test_a_fleet_smaller_than_anomaly_min_agents_never_flags(self):
        with Sluiced(CONFIG % "true") as s:
            for i in range(3):
                requests(s, "w%d" % i, 2)
            requests(s, "runaway", 80)  # four agents of the role: below 5
            # A planner role of five active agents is judged meanwhile (a control that
            # the evaluation runs): its runaway is flagged, the small worker role is not.
            for i in range(5):
                requests(s, "p%d" % i, 2, role="planner")
            burst(s, "ploop", 60, role="planner")
            self.assertTrue(wait_until(lambda: "ploop" in flagged(s), 5), flagged(s))
            self.assertNotIn("runaway", flagged(s))
            st, body, _ = lease(s, "runaway")
            self.assertEqual(st, 200, body)

    def test_the_fleet_section_is_validated_naming_the_key(self):
        import subprocess
        import os
        import tempfile
        from harness import SLUICED
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("fleet:\n  anomaly_z: -1\n")
        try:
            p = subprocess.run([SLUICED, "--config", f.name, "--check-config"],
                               capture_output=True, text=True, timeout=10)
        finally:
            os.unlink(f.name)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(":2: fleet.anomaly_z: '-1' must be a number between", p.stderr)


PUPPETS = """
fleet:
  anomaly_window_s: 12
  suspend_anomalous: true
auth:
  admin_token: admin-secret-1
  tokens:
    - {token: puppet-token, agent_prefix: "m-"}
    - {token: bob-token, agent: bob}
    - {token: carol-token, agent: carol}
pools:
  default:
    input_tpm: 100000000
    output_tpm: 100000000
"""


def own_requests(s, agent, token, n):
    """n lease+settle calls of `agent` on its own token; returns the first refusal or None."""
    for _ in range(n):
        st, body, _ = s.call("POST", "/v1/leases",
                             {"agent": agent, "input_tokens": 10, "output_tokens": 10},
                             token=token)
        if st != 200:
            return st, body
        st, body, _ = s.call("POST", "/v1/leases/%s/settle" % body["lease"],
                             {"input_tokens": 10, "output_tokens": 10}, token=token)
        assert st == 200, body
    return None


def puppet_leases(s, n_agents, each):
    """`each` leases (never settled) of every one of agents m-0 .. m-(n_agents - 1)."""
    for i in range(n_agents):
        for _ in range(each):
            st, body, _ = s.call("POST", "/v1/leases", {"agent": "m-%d" % i, "input_tokens": 10,
                                                        "output_tokens": 10},
                                 token="puppet-token")
            assert st == 200, body


class Puppets(unittest.TestCase):
    """One token's many agents must not make the baseline another token's agent is judged
    against (issue 25 item 2)."""

    def test_one_tokens_idle_puppets_cannot_get_another_tokens_agent_suspended(self):
        with Sluiced(PUPPETS) as s:
            puppet_leases(s, 6, 1)
            self.assertIsNone(own_requests(s, "bob", "bob-token", 25))
            # The judge runs once a second: give it three chances to (wrongly) flag bob.
            self.assertFalse(wait_until(lambda: "bob" in flagged(s), 3), flagged(s))
            st, body, _ = s.call("POST", "/v1/leases",
                                 {"agent": "bob", "input_tokens": 10, "output_tokens": 10},
                                 token="bob-token")
            self.assertEqual(st, 200, body)

    def test_twenty_puppets_with_a_few_requests_each_count_as_one_agent(self):
        with Sluiced(PUPPETS) as s:
            puppet_leases(s, 20, 2)
            self.assertIsNone(own_requests(s, "bob", "bob-token", 30))
            self.assertIsNone(own_requests(s, "carol", "carol-token", 2))
            self.assertFalse(wait_until(lambda: "bob" in flagged(s), 3), flagged(s))

    def test_a_principals_own_agents_still_make_its_baseline(self):
        # The puppet token's own runaway is judged against its other agents as before.
        with Sluiced(PUPPETS) as s:
            for i in range(6):
                own_requests(s, "m-w%d" % i, "puppet-token", 2)
            refused = own_requests(s, "m-loop", "puppet-token", 60)
            self.assertTrue(wait_until(lambda: "m-loop" in flagged(s), 5), flagged(s))
            if refused is None:
                refused = own_requests(s, "m-loop", "puppet-token", 1)
            self.assertEqual(refused[0], 429)
            self.assertEqual(refused[1]["reason"], "suspended")


if __name__ == "__main__":
    unittest.main()
