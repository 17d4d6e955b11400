"""test_reports.py - what an agent reports and claims is bounded and bound to its token (issue 12).

Each case was first an attack that worked from outside: settle headers raising a pool's
limit to 10^12 or cutting it to 1, a settle of 2^53 tokens, a retry-after of a day,
`unblocks` of 2^53, `priority: high` and a planner's task from a worker token, every
agent's events on /v1/events, and the smaller ones (a stale error message, a 500 for bad
bytes, a lease reaped at once). Every refusal is checked for status, type, a message
naming the field and the bound, and a pool left as it was.
"""
import json
import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Sluiced, check_config  # noqa: E402

POOL = """
    input_tpm: 60000
    output_tpm: 60000
    max_queue_wait_s: 600
"""

CONFIG = """
pools:
  default:%s
  resync:%s    limits_from: provider
  capped:%s
  blocky:%s
  ceiling:%s
  margin:%s
  levels:%s
  tasks:%s
    rpm: 0
  unsynced:%s
auth:
  admin_token: admin-secret-1
  tokens:
    - token: workers-token-1
      agent_prefix: "w-"
      roles: [worker]
    - token: resync-token-1
      agent: reporter
      resync: true
    - token: planner-token-1
      agent: p1
      roles: [worker, planner]
      priorities: [high, normal]
    - token: alice-token-1
      agent: alice
    - token: bob-token-1
      agent: bob
""" % ((POOL,) * 9)

ADMIN = "admin-secret-1"
WORKER = "workers-token-1"
RESYNC = "resync-token-1"
PLANNER = "planner-token-1"


def steady(pool):
    """A pool's state without what moves on its own (levels refill, ETAs shrink)."""
    pool = json.loads(json.dumps(pool))
    for b in pool["buckets"].values():
        b.pop("level")
    pool["queue"].pop("eta")
    return pool


class Case(unittest.TestCase):
    def refused(self, got, status, err_type, *texts):
        code, body, _ = got
        self.assertEqual(code, status, body)
        self.assertEqual(body["error"]["type"], err_type, body)
        for t in texts:
            self.assertIn(t, body["error"]["message"])


class Reports(Case):
    @classmethod
    def setUpClass(cls):
        cls.s = Sluiced(CONFIG)
        cls.s.token = ADMIN

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def lease(self, token, agent, pool="default", **kw):
        body = {"agent": agent, "pool": pool, "input_tokens": 100, "output_tokens": 10}
        body.update(kw)
        return self.s.call("POST", "/v1/leases", body, token=token)

    def granted(self, token, agent, pool="default", **kw):
        status, g, _ = self.lease(token, agent, pool, **kw)
        self.assertEqual(status, 200, g)
        return g

    def settle(self, token, lease, **kw):
        body = {"input_tokens": 100, "output_tokens": 10}
        body.update(kw)
        return self.s.call("POST", "/v1/leases/%s/settle" % lease, body, token=token)

    # ---- defect 1: settle reports ----

    def test_worker_token_settle_is_applied_without_its_rate_limit_headers(self):
        # Issue 25 item 10: the headers are optional, the usage is not. A token without
        # the right to resync used to get 403 and lose the whole settle, so the lease
        # held its reservation until the reaper took it without refund.
        g = self.granted(WORKER, "w-1", "unsynced")
        before = self.s.pool("unsynced")
        status, body, _ = self.settle(
            WORKER, g["lease"], input_tokens=40, output_tokens=4,
            headers={"anthropic-ratelimit-input-tokens-limit": "1000000000000",
                     "anthropic-ratelimit-input-tokens-remaining": "0",
                     "x-ratelimit-limit-requests": "1"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["status"], "settled", body)
        self.assertEqual(body["adjust"], {"input_tokens": 60, "output_tokens": 6}, body)
        self.assertEqual(body["headers_ignored"]["count"], 3, body)
        self.assertIn("resync", body["headers_ignored"]["reason"])
        after = self.s.pool("unsynced")
        self.assertEqual(after["leases_in_flight"], before["leases_in_flight"] - 1)
        self.assertEqual(after["limits"], before["limits"])  # nothing taken from the headers
        # "remaining: 0" did not empty the bucket (a full one less 40 tokens, refilling)
        level = after["buckets"]["input_tokens"]
        self.assertGreaterEqual(level["level"], level["capacity"] - 40)
        # It was settled: a second settle is 409, not a second application.
        self.assertEqual(self.settle(WORKER, g["lease"])[0], 409)
        # A settle without headers says nothing about them.
        g = self.granted(WORKER, "w-1", "unsynced")
        status, body, _ = self.settle(WORKER, g["lease"])
        self.assertEqual(status, 200, body)
        self.assertNotIn("headers_ignored", body)

    def test_reported_limits_move_at_most_the_resync_factor(self):
        g = self.granted(RESYNC, "reporter", "resync")
        status, body, _ = self.settle(
            RESYNC, g["lease"], headers={"anthropic-ratelimit-input-tokens-limit": "1000000000000",
                                         "anthropic-ratelimit-requests-limit": "1"})
        self.assertEqual(status, 200, body)
        p = self.s.pool("resync")
        self.assertEqual(p["limits"]["input_tpm"], 120000)  # 2 x 60000, not 10^12
        self.assertEqual(p["limits"]["rpm"], 0)  # configured unlimited: no limit from a report
        g = self.granted(RESYNC, "reporter", "resync")
        status, body, _ = self.settle(RESYNC, g["lease"],
                                      headers={"anthropic-ratelimit-input-tokens-limit": "1"})
        self.assertEqual(status, 200, body)
        self.assertEqual(self.s.pool("resync")["limits"]["input_tpm"], 30000)  # 60000 / 2
        # A limit of "1" would have made this request 413 (exceeds_capacity) for ever.
        status, body, _ = self.lease(RESYNC, "reporter", "resync", input_tokens=20000)
        self.assertIn(status, (200, 202), body)

    def test_by_default_the_configured_limit_is_a_ceiling_for_reports(self):
        # Issue 25 item 7: one rule for every source. Without `limits_from: provider` no
        # report raises a limit; lowering stays bounded by max_resync_factor (a report
        # can lie).
        g = self.granted(RESYNC, "reporter", "capped")
        status, body, _ = self.settle(
            RESYNC, g["lease"], headers={"anthropic-ratelimit-input-tokens-limit": "1000000000000",
                                         "anthropic-ratelimit-output-tokens-limit": "40000"})
        self.assertEqual(status, 200, body)
        limits = self.s.pool("capped")["limits"]
        self.assertEqual(limits["input_tpm"], 60000)   # not 2 x 60000, not 10^12
        self.assertEqual(limits["output_tpm"], 40000)  # lowered
        g = self.granted(RESYNC, "reporter", "capped")
        status, body, _ = self.settle(RESYNC, g["lease"],
                                      headers={"anthropic-ratelimit-output-tokens-limit": "1"})
        self.assertEqual(status, 200, body)
        self.assertEqual(self.s.pool("capped")["limits"]["output_tpm"], 30000)  # 60000 / 2

    def test_a_bad_limits_from_names_the_key_and_the_value(self):
        rc, out = check_config("pools:\n  default:\n    rpm: 10\n    limits_from: agents\n")
        self.assertNotEqual(rc, 0)
        self.assertIn("pools.default.limits_from", out)
        self.assertIn("'agents' must be config or provider", out)

    def test_an_allowed_reporter_still_resyncs_levels(self):
        g = self.granted(ADMIN, "admin-agent", "levels")
        status, body, _ = self.settle(
            ADMIN, g["lease"], headers={"anthropic-ratelimit-output-tokens-remaining": "0"})
        self.assertEqual(status, 200, body)
        # Room 0 (+500 rounding) less the 15% reserve: the level drops well below capacity.
        level = self.s.pool("levels")["buckets"]["output_tokens"]["level"]
        self.assertLess(level, 1000)

    def test_settle_counts_above_the_pool_ceiling_are_400(self):
        g = self.granted(WORKER, "w-2", "ceiling")
        before = steady(self.s.pool("ceiling"))
        for field in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                      "cache_read_input_tokens"):
            with self.subTest(field):
                got = self.settle(WORKER, g["lease"], **{field: 9007199254740992})
                self.refused(got, 400, "invalid_request", field, "9007199254740992",
                             "max_settle_tokens 120000")
                self.assertEqual(steady(self.s.pool("ceiling")), before)
        got = self.settle(WORKER, g["lease"], input_tokens=120001)
        self.refused(got, 400, "invalid_request", "input_tokens", "120001")
        status, body, _ = self.settle(WORKER, g["lease"], input_tokens=120000)
        self.assertEqual(status, 200, body)
        level = self.s.pool("ceiling")["buckets"]["input_tokens"]["level"]
        self.assertGreater(level, -120000)  # never 9e15 in debt

    def test_reported_retry_after_holds_the_pool_at_most_60_s_and_its_agent_longer(self):
        # Issue 25 item 11: a worker's report of a day-long retry-after blocked every agent
        # for max_retry_after_s (300 s). Its word holds the pool at most
        # max_report_pool_block_s (60 s); the rest holds only the reporting agent.
        g = self.granted(WORKER, "w-3", "blocky")
        more = [self.granted(WORKER, "w-5%d" % i, "blocky")["lease"] for i in range(3)]
        t0 = time.time()
        status, body, _ = self.settle(WORKER, g["lease"], got_429=True, retry_after=86400)
        self.assertEqual(status, 200, body)
        blocked = self.s.pool("blocky")["blocked_until"]
        self.assertIsNotNone(blocked)
        self.assertLessEqual(blocked - t0, 60 + 5)
        # More reports of the same token (other leases, other agent names) do not add up:
        # the token holds the pool at most 60 s in a max_retry_after_s window.
        for lease in more:
            time.sleep(2)
            status, body, _ = self.settle(WORKER, lease, got_429=True, retry_after=86400)
            self.assertEqual(status, 200, body)
        self.assertLessEqual(self.s.pool("blocky")["blocked_until"], blocked + 0.5)
        # Another agent is served once the 60 s are over: queued now with that ETA.
        status, body, _ = self.lease(WORKER, "w-4", "blocky")
        self.assertEqual(status, 202, body)
        self.assertEqual(body["limited_by"], "retry_after", body)
        self.assertLessEqual(body["eta"], 60 + 5)
        # The reporting agent itself waits out its own report, up to max_retry_after_s.
        status, body, _ = self.lease(WORKER, "w-3", "blocky")
        self.assertEqual(status, 429, body)
        self.assertEqual(body["reason"], "agent_retry_after", body)
        self.assertGreater(body["retry_after"], 200)
        self.assertLessEqual(body["retry_after"], 300)

    def test_one_wave_of_429s_cuts_the_margin_once_whoever_reports_it(self):
        # Issue 25 item 9: five agents' 429s in one wave took the margin to the floor.
        held = [self.granted(WORKER, "w-8", "margin")["lease"] for _ in range(4)]
        others = [self.granted(WORKER, "w-9%d" % i, "margin")["lease"] for i in range(4)]
        self.assertEqual(self.s.pool("margin")["margin"], 0.85)
        for lease in held + others:
            status, body, _ = self.settle(WORKER, lease, got_429=True)
            self.assertEqual(status, 200, body)
            self.assertFalse(body["counted"], body)
        # Eight 429s on leases granted before the first cut are one event: one step.
        self.assertAlmostEqual(self.s.pool("margin")["margin"], 0.80)
        # A lease granted after the cut was decided at the new margin: a new event.
        lease = self.granted(WORKER, "w-8", "margin")["lease"]
        self.assertEqual(self.settle(WORKER, lease, got_429=True)[0], 200)
        self.assertAlmostEqual(self.s.pool("margin")["margin"], 0.75)

    # ---- defect 2: weight inputs ----

    def test_unblocks_is_bound_to_the_token(self):
        before = steady(self.s.pool())
        for n in (9007199254740992, 9):
            with self.subTest(n):
                got = self.lease(WORKER, "w-4", unblocks=n)
                self.refused(got, 403, "forbidden", "unblocks", str(n), "max_unblocks 8")
                self.assertEqual(steady(self.s.pool()), before)
        g = self.granted(WORKER, "w-4", unblocks=8)
        self.assertEqual(g["weight"], 5)  # 1 x (1 + 0.5 x 8)
        self.assertEqual(self.settle(WORKER, g["lease"])[0], 200)

    def test_priority_is_bound_to_the_token(self):
        before = steady(self.s.pool())
        got = self.lease(WORKER, "w-5", priority="high")
        self.refused(got, 403, "forbidden", "priority", "high")
        self.assertEqual(steady(self.s.pool()), before)
        g = self.granted(WORKER, "w-5", priority="low")
        self.assertEqual(self.settle(WORKER, g["lease"])[0], 200)
        g = self.granted(PLANNER, "p1", priority="high")
        self.assertEqual(g["weight"], 4)
        self.assertEqual(self.settle(PLANNER, g["lease"])[0], 200)

    def test_a_task_lease_takes_the_task_role_and_needs_it(self):
        for task, body in (("plan-1", {"role": "planner", "state": "running"}),
                           ("after-plan", {"depends_on": ["plan-1"], "state": "waiting"})):
            status, got, _ = self.s.call("PUT", "/v1/tasks/" + task, body)
            self.assertEqual(status, 200, got)
        before = steady(self.s.pool("tasks"))
        # A worker token naming a planner's task asked for the planner's count and its own
        # role; now the task's role is the lease's, and the token may not use it.
        got = self.lease(WORKER, "w-6", "tasks", task="plan-1")
        self.refused(got, 403, "forbidden", "role", "planner", "plan-1")
        got = self.lease(PLANNER, "p1", "tasks", task="plan-1", role="worker")
        self.refused(got, 400, "invalid_request", "role", "worker", "planner", "plan-1")
        self.assertEqual(steady(self.s.pool("tasks")), before)
        g = self.granted(PLANNER, "p1", "tasks", task="plan-1")
        self.assertEqual(g["weight"], 4.5)  # planner 3 x (1 + 0.5 x 1 waiting dependent)
        self.assertEqual(self.settle(PLANNER, g["lease"])[0], 200)

    def test_a_hub_task_gives_no_more_unblocks_than_the_token_may_claim(self):
        # A worker task that twelve waiting tasks depend on: naming it must not give a
        # worker token (max_unblocks 8) the weight of twelve unblocks.
        status, got, _ = self.s.call("PUT", "/v1/tasks/hub", {"role": "worker",
                                                               "state": "running"})
        self.assertEqual(status, 200, got)
        for i in range(12):
            status, got, _ = self.s.call("PUT", "/v1/tasks/leaf-%d" % i,
                                         {"depends_on": ["hub"], "state": "waiting"})
            self.assertEqual(status, 200, got)
        g = self.granted(WORKER, "w-7", "tasks", task="hub")
        self.assertEqual(g["weight"], 5)  # 1 x (1 + 0.5 x 8), not 1 x (1 + 0.5 x 12)
        self.assertEqual(self.settle(WORKER, g["lease"])[0], 200)


class AuthOff(Case):
    def test_without_auth_unblocks_has_a_ceiling_and_headers_still_are_bounded(self):
        with Sluiced("pools:\n  default:" + POOL) as s:
            before = steady(s.pool())
            got = s.lease("dev", 10, unblocks=1001)
            self.refused(got, 400, "invalid_request", "unblocks", "1001", "max_unblocks 1000")
            self.assertEqual(steady(s.pool()), before)
            status, g, _ = s.lease("dev", 10)
            self.assertEqual(status, 200, g)
            status, body, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                     {"input_tokens": 10, "output_tokens": 1, "headers":
                                      {"anthropic-ratelimit-input-tokens-limit": "10"}})
            self.assertEqual(status, 200, body)
            self.assertEqual(s.pool()["limits"]["input_tpm"], 30000)


def open_stream(port, token):
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(("GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
                  % token).encode())
    return sock


def read_until(sock, marker, timeout_s=5):
    data = b""
    deadline = time.monotonic() + timeout_s
    while marker not in data and time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


class Events(Case):
    def test_events_show_a_token_only_its_own_agents(self):
        with Sluiced(CONFIG) as s:
            alice = open_stream(s.port, "alice-token-1")
            admin = open_stream(s.port, ADMIN)
            read_until(alice, b"sluice events")
            read_until(admin, b"sluice events")
            status, g, _ = s.call("POST", "/v1/leases", {"agent": "bob", "input_tokens": 5,
                                                         "output_tokens": 1}, token="bob-token-1")
            self.assertEqual(status, 200, g)
            # Bob's 429 is his (hidden from alice); the margin it cuts is the pool's (shown).
            status, body, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                     {"input_tokens": 5, "output_tokens": 1, "got_429": True},
                                     token="bob-token-1")
            self.assertEqual(status, 200, body)
            status, g, _ = s.call("POST", "/v1/leases", {"agent": "alice", "input_tokens": 5,
                                                         "output_tokens": 1}, token="alice-token-1")
            self.assertEqual(status, 200, g)
            seen_alice = read_until(alice, b'"agent":"alice"')
            seen_admin = read_until(admin, b'"agent":"alice"')
            alice.close()
            admin.close()
            self.assertIn('"agent":"alice"', seen_alice)
            self.assertIn("event: margin", seen_alice)
            self.assertNotIn("bob", seen_alice)
            self.assertNotIn("upstream_429", seen_alice)
            self.assertIn('"agent":"bob"', seen_admin)
            self.assertIn("upstream_429", seen_admin)


class Smaller(Case):
    @classmethod
    def setUpClass(cls):
        cls.s = Sluiced("pools:\n  default:" + POOL)

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def test_unknown_pool_answers_with_its_own_message(self):
        self.refused(self.s.lease("a", 1, pool="secret-x"), 404, "not_found", "secret-x")
        got = self.s.call("GET", "/v1/pools/nope")
        self.refused(got, 404, "not_found", "nope")
        self.assertNotIn("secret-x", got[1]["error"]["message"])

    def test_bad_escape_before_invalid_utf8_is_400(self):
        before = steady(self.s.pool())
        raw = b'{"agent": "a", "input_tokens": 1, "output_tokens": 1, "ttl": "\\u0\xdd\x979"}'
        self.refused(self.s.call("POST", "/v1/leases", raw=raw), 400, "invalid_request", "JSON")
        self.assertEqual(steady(self.s.pool()), before)

    def test_counts_beyond_int64_are_400_naming_the_field(self):
        before = steady(self.s.pool())
        for big, says in (("9223372036854775808", "2^53"), ("1e300", "2^53"),
                          ("-9223372036854775809", ">= 0")):
            with self.subTest(big):
                raw = '{"agent": "a", "input_tokens": %s, "output_tokens": 1}' % big
                self.refused(self.s.call("POST", "/v1/leases", raw=raw), 400, "invalid_request",
                             "input_tokens", says)
                self.assertEqual(steady(self.s.pool()), before)

    def test_a_ttl_below_one_second_is_400(self):
        before = steady(self.s.pool())
        got = self.s.lease("a", 1, ttl=1e-300)
        self.refused(got, 400, "invalid_request", "ttl", ">= 1")
        self.assertEqual(steady(self.s.pool()), before)
        status, g, _ = self.s.lease("a", 1, ttl=1)
        self.assertEqual(status, 200, g)
        got = self.s.call("POST", "/v1/leases/%s/extend" % g["lease"], {"ttl": 1e-300})
        self.refused(got, 400, "invalid_request", "ttl", ">= 1")
        status, body, _ = self.s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                      {"input_tokens": 1, "output_tokens": 1})
        self.assertEqual(status, 200, body)


if __name__ == "__main__":
    unittest.main()
