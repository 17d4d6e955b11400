"""test_review.py - an outsider's cases against the fleet, teams, limits and caps surface.

Each test is a defect found by review (or a case next to one): teams' memberships,
refusal order of a suspended agent, parked tickets across a reload. Every wait is
bounded; no timing gates a result.
"""
import json
import socket
import threading
import time
import unittest

from harness import Sluiced, check_config, wait_until
from teams_case import CAPS, POOL, queue_twelve

ADMIN = "admin-review-1"
AGENT = "agents-review-1"

SUSPEND_CONFIG = """
auth: {admin_token: %s, tokens: [{token: %s, agent_prefix: ""}]}
limits: {tool.call: {rate: 100000, period_s: 600}}
pools: {default: {input_tpm: 100000000, output_tpm: 100000000}}
fleet: {anomaly_window_s: 120, anomaly_min_agents: 3, anomaly_min_count: 10,
        suspend_anomalous: true}
""" % (ADMIN, AGENT)


def check(s, agent, **kw):
    body = {"agent": agent}
    body.update(kw)
    return s.call("POST", "/v1/limits/tool.call/check", body, token=AGENT)


def suspend(test, s, agent):
    """Makes `agent` a runaway among three quiet agents, until it is suspended."""
    for quiet in ("q1", "q2", "q3"):
        st, body, _ = check(s, quiet)
        test.assertEqual(st, 200, body)
    for _ in range(200):
        st, body, _ = check(s, agent)
        if st == 429 and body.get("reason") == "suspended":
            return
        test.assertEqual(st, 200, body)
    test.assertTrue(wait_until(lambda: check(s, agent)[0] == 429, 5))


class Teams(unittest.TestCase):
    def test_an_agent_in_two_teams_is_refused_naming_the_agent_and_both_teams(self):
        # The engine would put it in the last team and per: team limits in the first.
        rc, out = check_config("caps:\n  teams:\n    red:\n      members: [x, y]\n"
                               "    blue:\n      members: [z, x]\n")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("caps.teams.blue.members", out)
        self.assertIn("'x'", out)
        self.assertIn("red", out)
        self.assertIn(":6:", out)  # the line of the second listing

    def test_a_team_without_members_and_distinct_members_are_accepted(self):
        rc, out = check_config("caps:\n  teams:\n    red:\n      members: [x, y, x]\n"
                               "    blue:\n      weight: 2\n      members: []\n")
        self.assertEqual(rc, 0, out)


class SuspendedRefusalOrder(unittest.TestCase):
    def test_a_suspended_agents_bad_check_is_400_naming_the_field_and_value(self):
        # docs/api.md: the 429 `suspended` comes after the 400/403 checks.
        with Sluiced(SUSPEND_CONFIG) as s:
            suspend(self, s, "runaway")
            st, body, _ = check(s, "runaway", hits=-3)
            self.assertEqual(st, 400, body)
            self.assertIn("hits", body["error"]["message"])
            self.assertIn("-3", body["error"]["message"])
            st, body, _ = check(s, "runaway", wait="soon")
            self.assertEqual(st, 400, body)
            self.assertIn("wait", body["error"]["message"])
            st, body, _ = check(s, "runaway", hits=10 ** 12)
            self.assertEqual(st, 400, body)
            self.assertIn("hits", body["error"]["message"])
            st, body, _ = check(s, "runaway")
            self.assertEqual((st, body.get("reason")), (429, "suspended"), body)


PARK_CONFIG = """
pools:
  default:
    input_tpm: 1000000
    output_tpm: 1000000
    lease_ttl_s: 300
    max_queue_wait_s: 600
caps:
  agents:
    solo:
      max_concurrent: %d
"""


class ParkedAcrossReload(unittest.TestCase):
    def park_one(self, s):
        """Holds solo's one slot with a 300 s lease and parks a second request; returns
        the parked ticket's answer."""
        st, first, _ = s.lease("solo", 10)
        self.assertEqual(st, 200, first)
        st, queued, _ = s.lease("solo", 10)
        self.assertEqual((st, queued.get("limited_by")), (202, "agent_cap"), queued)
        return queued

    def reload_then_granted(self, s, queued, config_text):
        s.write_config("cold_start: full\nevent_log: %s\n%s" % (s.event_log, config_text))
        st, body, _ = s.call("POST", "/v1/admin/reload")
        self.assertEqual(st, 200, body)
        # A slot is free now: granted without waiting for a release (the first lease
        # lives 300 s).
        st, body, _ = s.call("GET", "/v1/tickets/%s?wait=3" % queued["ticket"])
        self.assertEqual((st, body.get("status")), (200, "granted"), body)

    def test_raising_max_concurrent_by_reload_grants_the_parked_ticket(self):
        with Sluiced(PARK_CONFIG % 1) as s:
            self.reload_then_granted(s, self.park_one(s), PARK_CONFIG % 2)

    def test_lifting_the_cap_by_reload_grants_the_parked_ticket(self):
        with Sluiced(PARK_CONFIG % 1) as s:
            self.reload_then_granted(s, self.park_one(s), PARK_CONFIG.split("caps:")[0])

    def test_a_parked_ticket_cancelled_is_gone_and_the_cap_still_holds(self):
        with Sluiced(PARK_CONFIG % 1) as s:
            queued = self.park_one(s)
            self.assertEqual(s.call("DELETE", "/v1/tickets/%s" % queued["ticket"])[0], 200)
            self.assertEqual(s.pool()["queue"]["depth"], 0)
            st, again, _ = s.lease("solo", 10)
            self.assertEqual((st, again.get("limited_by")), (202, "agent_cap"), again)
            self.assertGreater(again["eta"], 0)
            self.assertLessEqual(again["eta"], 300)


CROWD_CONFIG = """
fleet:
  anomaly_window_s: 12
  anomaly_min_agents: 3
  anomaly_min_count: 10
  suspend_anomalous: true
auth:
  admin_token: %s
  tokens:
    - {token: %s, agent_prefix: ""}
limits:
  tool.call:
    rate: 100000000
    period_s: 600
""" % (ADMIN, AGENT)


def pipelined_checks(port, agents):
    """One limit check per agent on one keep-alive connection, pipelined; returns the
    number of answers read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    answers = [0]

    def read():
        buf = b""
        while answers[0] < len(agents):
            data = s.recv(1 << 16)
            if not data:
                break
            buf += data
            answers[0] += buf.count(b"HTTP/1.1 ")
            buf = buf[buf.rfind(b"HTTP/1.1 ") + 1:] if b"HTTP/1.1 " in buf else buf[-16:]

    t = threading.Thread(target=read)
    t.start()
    for i in range(0, len(agents), 500):
        chunk = []
        for a in agents[i:i + 500]:
            body = json.dumps({"agent": a}).encode()
            chunk.append(b"POST /v1/limits/tool.call/check HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (AGENT.encode(), len(body), body))
        s.sendall(b"".join(chunk))
    t.join(120)
    s.close()
    return answers[0]


class AnomalyCrowd(unittest.TestCase):
    def test_a_runaway_is_still_judged_after_100000_agent_names_went_idle(self):
        # The per-agent records are bounded (100,000); names seen once and idle since
        # must not keep every later agent from being judged (a way around suspension).
        with Sluiced(CROWD_CONFIG) as s:
            names = ["idle-%d" % i for i in range(100000)]
            self.assertEqual(pipelined_checks(s.port, names), len(names))
            time.sleep(13)  # past anomaly_window_s: every one of them is idle now
            suspend(self, s, "late-runaway")
            st, body, _ = check(s, "late-runaway")
            self.assertEqual((st, body.get("reason")), (429, "suspended"), body)


class TeamWeightsReloaded(unittest.TestCase):
    def test_a_reload_that_swaps_the_weights_reorders_the_queued_tickets(self):
        # docs/engine.md: a weight change applies to queued requests at once.
        def caps(wa, wb):
            a, b = CAPS.split("    b:")
            return a.replace("weight: 1", "weight: %d" % wa) + "    b:" + b.replace(
                "weight: 3", "weight: %d" % wb)

        def first_four(s, tickets):
            where = {}
            for agent, t in tickets:
                st, body, _ = s.call("GET", "/v1/tickets/%s" % t)
                self.assertEqual(st, 202, body)
                where[body["position"]] = agent
            self.assertEqual(sorted(where), list(range(1, 13)))
            return [where[p][0] for p in (1, 2, 3, 4)]

        with Sluiced("pools:\n" + POOL + caps(1, 3)) as s:
            tickets = [q[:2] for q in queue_twelve(self, s)]
            self.assertEqual(sorted(first_four(s, tickets)), ["a", "b", "b", "b"])
            s.write_config("cold_start: full\nevent_log: %s\npools:\n%s%s"
                           % (s.event_log, POOL, caps(3, 1)))
            st, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 200, body)
            self.assertEqual(sorted(first_four(s, tickets)), ["a", "a", "a", "b"])
            # Weights back as they were, then a team gone: its weight is 1 again.
            s.write_config("cold_start: full\nevent_log: %s\npools:\n%s" % (s.event_log, POOL))
            st, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 200, body)
            self.assertEqual(len(first_four(s, tickets)), 4)


class LongLimitName(unittest.TestCase):
    def test_a_limit_named_with_200_bytes_has_its_watch_metrics(self):
        name = "l" * 200  # limit names may be 1..256 bytes
        with Sluiced("limits:\n  %s:\n    rate: 1\n    period_s: 600\n" % name) as s:
            for _ in range(2):
                s.call("POST", "/v1/limits/%s/check" % name, {"agent": "a"})
            st, text, _ = s.call("GET", "/metrics")
            self.assertEqual(st, 200)
            self.assertIn('sluice_limit_checks_total{limit="%s",result="denied"} 1' % name, text)
            self.assertIn('sluice_limit_throttle_ratio{limit="%s"} 0.5' % name, text)
            self.assertIn('sluice_limit_retry_after_seconds_count{limit="%s"} 1' % name, text)


if __name__ == "__main__":
    unittest.main()
