"""test_limits.py - action limits through sluiced: every /v1/limits route and error, all or
nothing across parents under concurrent checks, queueing with wait, RateLimit headers,
token scoping, adaptive events and metrics, reload, config errors."""
import json
import signal
import subprocess
import threading
import time
import unittest

from harness import SharedSluiced, Sluiced, check_config, raw_request, recv_until

CONFIG = """
caps:
  teams:
    lint:
      members: [lint-1, lint-2]
limits:
  tool.call:
    algorithm: token_bucket
    rate: 3
    period_s: 600
    parents: [tools.team, tools.all]
  tools.team:
    algorithm: fixed_window
    rate: 50
    period_s: 600
    per: team
  tools.all:
    algorithm: sliding_window
    rate: 100
    period_s: 600
    per: global
  db.query:
    algorithm: sliding_window
    rate: 10
    period_s: 600
    per: key
    costs: {read: 1, write: 5}
  slow:
    algorithm: gcra
    rate: 5
    period_s: 1
    burst: 1
    on_limit: queue
  sem:
    algorithm: concurrency
    rate: 2
    ttl_s: 600
  api:
    algorithm: token_bucket
    rate: 100
    period_s: 1
    adaptive: {min_rate: 10, max_rate: 200, window: 10}
"""

NESTED = """
limits:
  leaf:
    algorithm: fixed_window
    rate: 1000
    period_s: 600
    per: key
    parents: [mid]
  mid:
    algorithm: fixed_window
    rate: 1000
    period_s: 600
    per: agent
    parents: [top]
  top:
    algorithm: token_bucket
    rate: 1
    period_s: 100000
    burst: 37
    per: global
"""


class Routes(SharedSluiced):
    config = CONFIG

    def test_check_allows_then_denies_with_the_contract_fields_and_headers(self):
        s = self.s
        for want in (2, 1, 0):
            status, body, h = s.check("tool.call", {"agent": "lint-1"})
            self.assertEqual(status, 200, body)
            self.assertTrue(body["allowed"])
            self.assertEqual((body["limit"], body["remaining"]), (3, want))
            self.assertEqual(body["retry_after"], 0)
            self.assertEqual([(c["limit"], c["key"]) for c in body["checked"]],
                             [("tool.call", "lint-1"), ("tools.team", "lint"), ("tools.all", "*")])
            self.assertEqual(h["ratelimit-policy"], '"tool.call";q=3;w=600')
            self.assertRegex(h["ratelimit"], r'^"tool.call";r=%d;t=\d+$' % want)
        status, body, h = s.check("tool.call", {"agent": "lint-1", "hits": 0})
        team_before = [c["remaining"] for c in body["checked"]]
        status, body, h = s.check("tool.call", {"agent": "lint-1"})
        self.assertEqual(status, 429, body)
        self.assertFalse(body["allowed"])
        self.assertEqual(body["denied_by"]["limit"], "tool.call")
        self.assertEqual(body["denied_by"]["key"], "lint-1")
        self.assertGreater(body["retry_after"], 0)
        self.assertEqual(int(h["retry-after"]), int(-(-body["retry_after"] // 1)))
        self.assertIn("reset_after", body)
        # nothing was taken at any level by the deny
        _, body, _ = s.check("tool.call", {"agent": "lint-1", "hits": 0})
        self.assertEqual([c["remaining"] for c in body["checked"]], team_before)

    def test_hits_zero_peeks_and_changes_nothing(self):
        s = self.s
        s.check("tool.call", {"agent": "lint-2"})
        for _ in range(3):
            status, body, _ = s.check("tool.call", {"agent": "lint-2", "hits": 0})
            self.assertEqual((status, body["remaining"]), (200, 2), body)

    def test_costs_per_action_and_key_rules(self):
        s = self.s
        status, body, _ = s.check("db.query", {"agent": "a", "key": "users", "action": "write"})
        self.assertEqual((status, body["remaining"]), (200, 5), body)
        status, body, _ = s.check("db.query", {"agent": "a", "key": "users", "action": "read"})
        self.assertEqual((status, body["remaining"]), (200, 4), body)
        status, body, _ = s.check("db.query", {"agent": "a"})
        self.assertEqual(status, 400, body)
        self.assertIn("key", body["error"]["message"])
        status, body, _ = s.check("tool.call", {"agent": "a", "key": "k"})
        self.assertEqual(status, 400, body)
        self.assertIn("key: 'k'", body["error"]["message"])

    def test_keys_are_escaped_in_short_and_long_answers(self):
        s = self.s
        for key in ('a"b\\c\nd\u00e9', '"' * 200 + "x" * 50):  # the second overflows the fast path
            for _ in range(2):
                status, body, _ = s.check("db.query", {"agent": "e", "key": key})
                self.assertEqual(status, 200, body)
                self.assertEqual(body["checked"][0]["key"], key)
            status, body, _ = s.check("db.query", {"agent": "e", "key": key, "action": "write"})
            self.assertEqual((status, body["remaining"]), (200, 3), body)
            status, body, _ = s.check("db.query", {"agent": "e", "key": key, "action": "write"})
            self.assertEqual(status, 429, body)
            self.assertEqual(body["denied_by"], {"limit": "db.query", "key": key, "reason": "rate"})
            self.assertEqual(body["remaining"], 3)

    def test_bad_fields_name_field_and_value(self):
        s = self.s
        cases = [({"agent": "a", "hits": -1}, "hits"), ({"agent": "a", "hits": "x"}, "hits"),
                 ({"agent": "a", "hits": 10**10}, "hits"), ({}, "agent"),
                 ({"agent": "a b"}, "agent"), ({"agent": "a", "wait": -2}, "wait"),
                 ({"agent": "a", "colour": 1}, "colour")]
        for body_in, field in cases:
            status, body, _ = s.check("tool.call", body_in)
            self.assertEqual(status, 400, (body_in, body))
            self.assertIn(field, body["error"]["message"])
        status, body, _ = s.check("nope", {"agent": "a"})
        self.assertEqual(status, 404, body)
        status, body, _ = s.call("GET", "/v1/limits/nope")
        self.assertEqual(status, 404, body)
        status, body, _ = s.call("GET", "/v1/limits/tool.call/check")
        self.assertEqual(status, 405, body)

    def test_per_team_level_needs_a_team(self):
        status, body, _ = self.s.check("tools.team", {"agent": "loner"})
        self.assertEqual(status, 400, body)
        self.assertIn("loner", body["error"]["message"])
        self.assertIn("team", body["error"]["message"])

    def test_concurrency_hold_and_release(self):
        s = self.s
        for want in (1, 0):
            status, body, _ = s.check("sem", {"agent": "w"})
            self.assertEqual((status, body["remaining"]), (200, want), body)
        status, body, _ = s.check("sem", {"agent": "w"})
        self.assertEqual(status, 429, body)
        status, body, _ = s.call("POST", "/v1/limits/sem/release", {"agent": "w"})
        self.assertEqual((status, body["held"]), (200, 1), body)
        status, body, _ = s.check("sem", {"agent": "w"})
        self.assertEqual(status, 200, body)
        status, body, _ = s.call("POST", "/v1/limits/sem/release", {"agent": "nobody"})
        self.assertEqual(status, 404, body)
        status, body, _ = s.call("POST", "/v1/limits/tool.call/release", {"agent": "w"})
        self.assertEqual(status, 400, body)

    def test_report_adapts_the_rate_with_an_event_and_metrics(self):
        s = self.s
        status, body, _ = s.call("POST", "/v1/limits/api/report",
                                 {"agent": "r", "successes": 2, "errors": 8})
        self.assertEqual(status, 200, body)
        self.assertAlmostEqual(body["rate"], 90)
        status, body, _ = s.call("POST", "/v1/limits/tool.call/report",
                                 {"agent": "r", "successes": 1})
        self.assertEqual(status, 400, body)
        status, body, _ = s.call("POST", "/v1/limits/api/report", {"agent": "r"})
        self.assertEqual(status, 400, body)
        ev = [e for e in s.events() if e.get("event") == "limit_adapted" and e["key"] == "r"]
        self.assertTrue(ev)
        self.assertEqual((ev[-1]["limit"], ev[-1]["key"], ev[-1]["new_rate"]), ("api", "r", 90))
        status, body, _ = s.call("GET", "/v1/limits/api?key=r")
        self.assertEqual(status, 200, body)
        self.assertAlmostEqual(body["state"]["rate"], 90)
        self.assertAlmostEqual(body["adaptive_rate"], 90)
        _, text, _ = s.call("GET", "/metrics")
        self.assertIn('sluice_limit_adaptive_rate{limit="api"} 90', text)
        self.assertRegex(text, r'sluice_limit_adaptive_changes_total\{limit="api",direction="down"\} [1-9]')
        self.assertRegex(text, r'sluice_limit_checks_total\{limit="tool.call",result="allowed"\} \d+')
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout.strip() + p.stderr.strip()), (0, ""))

    def test_adaptive_change_is_an_sse_event(self):
        s = self.s
        sock = raw_request(s.port, "GET", "/v1/events")
        sock.settimeout(5)
        time.sleep(0.2)
        status, body, _ = s.call("POST", "/v1/limits/api/report",
                                 {"agent": "sse", "successes": 0, "errors": 5})
        self.assertEqual(status, 200, body)
        data = recv_until(sock, b'"key":"sse"')
        sock.close()
        self.assertIn(b"event: limit_adapted", data)
        line = [x for x in data.split(b"\n") if x.startswith(b"data: ") and b'"sse"' in x][0]
        ev = json.loads(line[6:])
        self.assertEqual((ev["limit"], ev["old_rate"], ev["new_rate"]), ("api", 100, 90))
        self.assertEqual((ev["error_rate"], ev["window_outcomes"]), (1, 5))

    def test_views(self):
        s = self.s
        status, body, _ = s.call("GET", "/v1/limits")
        self.assertEqual(status, 200, body)
        names = [l["name"] for l in body["limits"]]
        self.assertEqual(sorted(names), sorted(["tool.call", "tools.team", "tools.all",
                                                "db.query", "slow", "sem", "api"]))
        status, body, _ = s.call("GET", "/v1/limits/db.query?key=fresh")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["config"]["costs"], {"read": 1, "write": 5})
        self.assertFalse(body["state"]["tracked"])
        self.assertEqual(body["state"]["remaining"], 10)


class Sweep(unittest.TestCase):
    def test_keys_at_rest_are_forgotten_by_housekeeping(self):
        with Sluiced("limits:\n  quick:\n    algorithm: token_bucket\n    rate: 1000\n") as s:
            for i in range(5):
                s.check("quick", {"agent": "k%d" % i})
            self.assertEqual(s.call("GET", "/v1/limits/quick")[1]["keys"], 5)
            deadline = time.monotonic() + 15  # the sweep runs every 10 s
            while time.monotonic() < deadline and s.call("GET", "/v1/limits/quick")[1]["keys"]:
                time.sleep(0.5)
            self.assertEqual(s.call("GET", "/v1/limits/quick")[1]["keys"], 0)
            status, body, _ = s.check("quick", {"agent": "k1"})  # a forgotten key is fresh
            self.assertEqual((status, body["remaining"]), (200, 999), body)


class Queue(unittest.TestCase):
    def test_queue_holds_until_room_within_wait_and_rejects_beyond(self):
        with Sluiced(CONFIG) as s:
            status, body, _ = s.check("slow", {"agent": "q"})
            self.assertEqual(status, 200, body)
            t0 = time.monotonic()
            status, body, _ = s.check("slow", {"agent": "q", "wait": 5})
            self.assertEqual(status, 200, body)
            self.assertGreater(body.get("waited", 0), 0.05)
            # no wait: answered at once
            status, body, h = s.check("slow", {"agent": "q"})
            self.assertEqual(status, 429, body)
            self.assertIn("retry-after", h)
            # a wait too short for the room is answered at once
            status, body, _ = s.check("slow", {"agent": "q", "wait": 0.01})
            self.assertEqual(status, 429, body)
            self.assertLess(time.monotonic() - t0, 5)

    def test_held_checks_of_one_queue_are_served_in_arrival_order(self):
        fifo = "limits:\n  bucket:\n    rate: 10\n    period_s: 1\n    on_limit: queue\n"
        with Sluiced(fifo) as s:
            status, body, _ = s.check("bucket", {"agent": "f", "hits": 10})
            self.assertEqual(status, 200, body)
            done = []

            def waiter(tag, hits):
                status, body, _ = s.check("bucket", {"agent": "f", "hits": hits, "wait": 5},
                                        timeout_s=20)
                done.append((tag, status, time.monotonic()))

            big = threading.Thread(target=waiter, args=("big", 10))
            big.start()
            time.sleep(0.2)
            small = threading.Thread(target=waiter, args=("small", 1))
            small.start()
            big.join(15)
            small.join(15)
            # the small check, which the refill could serve at once, waits behind the big one
            self.assertEqual([(t, st) for t, st, _ in done], [("big", 200), ("small", 200)])
            # another agent is another queue: not held behind them
            status, body, _ = s.check("bucket", {"agent": "g"})
            self.assertEqual(status, 200, body)

    def test_a_client_leaving_cancels_its_held_check(self):
        with Sluiced(CONFIG.replace("rate: 5\n    period_s: 1", "rate: 1\n    period_s: 3")) as s:
            s.check("slow", {"agent": "g"})
            sock = raw_request(s.port, "POST", "/v1/limits/slow/check",
                               json.dumps({"agent": "g", "wait": 10}).encode())
            time.sleep(0.3)
            _, text, _ = s.call("GET", "/metrics")
            self.assertIn("sluice_limit_held 1", text)
            sock.close()
            time.sleep(0.3)
            _, text, _ = s.call("GET", "/metrics")
            self.assertIn("sluice_limit_held 0", text)
            # the cancelled wait took nothing: after the interval the next check passes
            time.sleep(3.1)
            status, body, _ = s.check("slow", {"agent": "g"})
            self.assertEqual(status, 200, body)


class Concurrent(unittest.TestCase):
    def test_all_or_nothing_across_parents_under_concurrent_checks(self):
        with Sluiced(NESTED) as s:
            allowed = []
            lock = threading.Lock()

            def worker(i):
                c = s.conn()
                mine = 0
                for j in range(30):
                    body = json.dumps({"agent": "ag%d" % (i % 3), "key": "k%d" % (j % 4),
                                       "hits": 1 + (j % 2)})
                    c.request("POST", "/v1/limits/leaf/check", body=body,
                              headers={"Content-Type": "application/json"})
                    r = c.getresponse()
                    out = json.loads(r.read())
                    if r.status == 200:
                        mine += 1 + (j % 2)
                    else:
                        self.assertEqual(r.status, 429, out)
                        self.assertEqual(out["denied_by"]["limit"], "top")
                c.close()
                with lock:
                    allowed.append(mine)

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            taken = sum(allowed)
            self.assertLessEqual(taken, 37)
            self.assertGreaterEqual(taken, 36)  # a 2-hit check may not fit the last unit
            # every level took exactly what was allowed: nothing from the denies
            _, top, _ = s.call("GET", "/v1/limits/top?key=*")
            self.assertEqual(top["state"]["remaining"], 37 - taken)
            mids = 0
            for a in range(3):
                _, mid, _ = s.call("GET", "/v1/limits/mid?key=ag%d" % a)
                mids += 1000 - mid["state"]["remaining"]
            leaves = 0
            for k in range(4):
                _, leaf, _ = s.call("GET", "/v1/limits/leaf?key=k%d" % k)
                leaves += 1000 - leaf["state"]["remaining"]
            self.assertEqual((mids, leaves), (taken, taken))


TOKENS = """
auth:
  admin_token: admin-secret-1
  tokens:
    - {token: agent-a-token, agent: a}
"""


class Tokens(unittest.TestCase):
    def test_an_agent_token_checks_only_its_own_agent(self):
        with Sluiced(TOKENS + CONFIG) as s:
            status, body, _ = s.check("sem", {"agent": "a"}, token="agent-a-token")
            self.assertEqual(status, 200, body)
            status, body, _ = s.check("sem", {"agent": "b"}, token="agent-a-token")
            self.assertEqual(status, 403, body)
            status, body, _ = s.call("POST", "/v1/limits/sem/release", {"agent": "b"},
                                     token="agent-a-token")
            self.assertEqual(status, 403, body)
            status, body, _ = s.call("GET", "/v1/limits/sem?key=b", token="agent-a-token")
            self.assertEqual(status, 403, body)
            status, body, _ = s.call("GET", "/v1/limits/sem?key=a", token="agent-a-token")
            self.assertEqual((status, body["state"]["held"]), (200, 1), body)
            status, body, _ = s.check("sem", {"agent": "b"}, token="admin-secret-1")
            self.assertEqual(status, 200, body)
            status, body, _ = s.check("sem", {"agent": "a"})
            self.assertEqual(status, 401, body)


class Reload(unittest.TestCase):
    def test_reload_keeps_state_of_unchanged_limits_and_applies_new_ones(self):
        with Sluiced(CONFIG) as s:
            s.check("sem", {"agent": "r"})
            s.check("tool.call", {"agent": "lint-1"})
            s.write_config("event_log: %s\n%s" % (
                s.event_log, CONFIG.replace("rate: 3\n", "rate: 7\n") +
                "  fresh:\n    algorithm: fixed_window\n    rate: 2\n"))
            status, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(status, 200, body)
            status, body, _ = s.call("GET", "/v1/limits/sem?key=r")
            self.assertEqual(body["state"]["held"], 1, body)  # unchanged: kept
            status, body, _ = s.check("tool.call", {"agent": "lint-1"})
            self.assertEqual((body["limit"], body["remaining"]), (7, 6), body)  # changed: fresh
            status, body, _ = s.check("fresh", {"agent": "r"})
            self.assertEqual(status, 200, body)
            s.write_config("limits:\n  x:\n    algorithm: foo\n    rate: 1\n")
            status, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(status, 400, body)
            self.assertIn("limits.x.algorithm", body["error"]["message"])
            status, body, _ = s.check("fresh", {"agent": "r"})
            self.assertEqual(status, 200, body)  # the refused reload changed nothing


    def test_sighup_applies_new_limits_and_a_held_check_on_a_removed_one_answers_404(self):
        slow = CONFIG.replace("rate: 5\n    period_s: 1", "rate: 1\n    period_s: 2")
        with Sluiced(slow) as s:
            s.check("slow", {"agent": "h"})
            out = {}

            def held():
                out["answer"] = s.check("slow", {"agent": "h", "wait": 10}, timeout_s=20)

            t = threading.Thread(target=held)
            t.start()
            time.sleep(0.3)
            s.write_config("event_log: %s\nlimits:\n  other:\n    rate: 1\n" % s.event_log)
            s.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                names = [l["name"] for l in s.call("GET", "/v1/limits")[1]["limits"]]
                if names == ["other"]:
                    break
                time.sleep(0.05)
            self.assertEqual(names, ["other"])
            t.join(15)
            status, body, _ = out["answer"]
            self.assertEqual(status, 404, body)
            self.assertIn("slow", body["error"]["message"])


class ConfigErrors(unittest.TestCase):
    def run_config(self, text):
        return check_config(text)

    def test_errors_name_file_line_field_and_value(self):
        cases = [
            ("limits:\n  db.query:\n    algorithm: foo\n", ":3:", "limits.db.query.algorithm", "foo"),
            ("limits:\n  x:\n    rate: 5\n    colour: red\n", ":4:", "limits.x.colour", "colour"),
            ("limits:\n  x:\n    rate: 0\n", ":3:", "limits.x.rate", "0"),
            ("limits:\n  x:\n    rate: 5\n    parents: [nope]\n", ":4:", "limits.x.parents", "nope"),
            ("limits:\n  x:\n    algorithm: fixed_window\n    rate: 5\n    burst: 2\n", ":5:",
             "limits.x.burst", "2"),
            ("limits: 3\n", ":1:", "limits", "mapping"),
        ]
        for text, line, field, value in cases:
            rc, out = self.run_config(text)
            self.assertNotEqual(rc, 0, text)
            self.assertIn(line, out, text)
            self.assertIn(field, out, text)
            self.assertIn(value, out, text)
        rc, out = self.run_config(CONFIG)
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
