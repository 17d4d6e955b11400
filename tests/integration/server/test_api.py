"""test_api.py - every endpoint of docs/api.md (but Proxy) through the real sluiced process."""
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (SMALL_POOL, SharedSluiced, Sluiced, raw_request, recv_until,  # noqa: E402
                     wait_until)

CONFIG = "pools:\n  default:" + SMALL_POOL + "  big:\n    input_tpm: 100000000\n    rpm: 1000000\n"


class Endpoints(SharedSluiced):
    config = CONFIG

    def test_healthz_and_readyz_answer_200(self):
        self.assertEqual(self.s.call("GET", "/healthz")[0], 200)
        status, body, _ = self.s.call("GET", "/readyz")
        self.assertEqual((status, body["status"]), (200, "ready"))

    def test_lease_grant_settle_and_second_settle(self):
        status, g, _ = self.s.lease("settler", 100, 50, pool="big")
        self.assertEqual(status, 200, g)
        self.assertEqual(g["status"], "granted")
        self.assertTrue(g["lease"].startswith("l_"))
        self.assertEqual(g["pool"], "big")
        self.assertEqual(g["charged"], {"input_tokens": 100, "output_tokens": 50, "requests": 1})
        for key in ("expires_at", "ttl", "weight", "waited"):
            self.assertIsInstance(g[key], (int, float))
        status, st, _ = self.s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                    {"input_tokens": 80, "output_tokens": 20})
        self.assertEqual(status, 200, st)
        self.assertEqual(st["status"], "settled")
        self.assertEqual(st["adjust"], {"input_tokens": 20, "output_tokens": 30})
        self.assertAlmostEqual(st["estimate_error"], 0.25)
        status, err, _ = self.s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                     {"input_tokens": 80, "output_tokens": 20})
        self.assertEqual((status, err["error"]["type"]), (409, "already_settled"))
        self.assertIn(g["lease"], err["error"]["message"])

    def test_lease_accepts_a_model_for_calibration(self):
        status, g, _ = self.s.lease("modeled", 100, 5, pool="big", model="claude-sonnet-4")
        self.assertEqual(status, 200, g)

    def test_extend_and_cancel(self):
        status, g, _ = self.s.lease("extender", 10, 10, pool="big")
        self.assertEqual(status, 200)
        status, e, _ = self.s.call("POST", "/v1/leases/%s/extend" % g["lease"], {"ttl": 300})
        self.assertEqual((status, e["status"]), (200, "extended"))
        self.assertGreater(e["expires_at"], g["expires_at"])
        status, c, _ = self.s.call("DELETE", "/v1/leases/" + g["lease"])
        self.assertEqual((status, c), (200, {"status": "cancelled"}))
        status, c, _ = self.s.call("DELETE", "/v1/leases/" + g["lease"])
        self.assertEqual((status, c["error"]["type"]), (409, "already_settled"))

    def test_idempotent_request_id_is_not_charged_twice(self):
        before = self.s.pool("big")["totals"]["granted"]
        a = self.s.lease("idem", 10, 10, pool="big", request_id="r-1")[1]
        b = self.s.lease("idem", 10, 10, pool="big", request_id="r-1")[1]
        self.assertEqual(a["lease"], b["lease"])
        self.assertEqual(self.s.pool("big")["totals"]["granted"], before + 1)

    def test_queue_ticket_poll_and_cancel(self):
        status, hold, _ = self.s.lease("holder", 5000, pool="default")
        self.assertEqual(status, 200, hold)
        try:
            status, q, _ = self.s.lease("queued-1", 3000)
            self.assertEqual(status, 202, q)
            self.assertEqual(q["status"], "queued")
            self.assertTrue(q["ticket"].startswith("t_"))
            self.assertEqual(q["position"], 1)
            self.assertGreater(q["eta"], 0)
            status, p, _ = self.s.call("GET", "/v1/tickets/" + q["ticket"])
            self.assertEqual((status, p["status"]), (202, "queued"))
            status, p, _ = self.s.call("GET", "/v1/tickets/%s?wait=0.2" % q["ticket"])
            self.assertEqual(status, 202)
            self.assertEqual(self.s.pool()["queue"]["depth"], 1)
            status, c, _ = self.s.call("DELETE", "/v1/tickets/" + q["ticket"])
            self.assertEqual((status, c), (200, {"status": "cancelled"}))
            self.assertEqual(self.s.pool()["queue"]["depth"], 0)
            status, p, _ = self.s.call("GET", "/v1/tickets/" + q["ticket"])
            self.assertEqual(status, 404)
        finally:
            self.s.call("DELETE", "/v1/leases/" + hold["lease"])

    def test_ticket_long_poll_is_answered_by_the_grant(self):
        status, hold, _ = self.s.lease("holder2", 5000)
        self.assertEqual(status, 200, hold)
        status, q, _ = self.s.lease("poller", 3000)
        self.assertEqual(status, 202, q)
        result = {}

        def poll():
            t0 = time.monotonic()
            result["answer"] = self.s.call("GET", "/v1/tickets/%s?wait=20" % q["ticket"])
            result["elapsed"] = time.monotonic() - t0

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.3)
        self.s.call("DELETE", "/v1/leases/" + hold["lease"])
        th.join(10)
        status, g, _ = result["answer"]
        self.assertEqual((status, g["status"]), (200, "granted"), g)
        self.assertEqual(g["pool"], "default")
        self.assertLess(result["elapsed"], 2.0)
        self.s.call("DELETE", "/v1/leases/" + g["lease"])

    def test_post_with_wait_is_granted_when_capacity_returns(self):
        status, hold, _ = self.s.lease("holder3", 5000)
        self.assertEqual(status, 200, hold)
        result = {}

        def ask():
            result["answer"] = self.s.lease("waiter", 3000, wait=20)

        th = threading.Thread(target=ask)
        th.start()
        time.sleep(0.3)
        self.s.call("DELETE", "/v1/leases/" + hold["lease"])
        th.join(10)
        status, g, _ = result["answer"]
        self.assertEqual(status, 200, g)
        self.assertGreater(g["waited"], 0.2)
        self.assertIn("ticket", g)
        self.s.call("DELETE", "/v1/leases/" + g["lease"])

    def test_wait_running_out_answers_202_with_fresh_eta(self):
        status, hold, _ = self.s.lease("holder4", 5000)
        t0 = time.monotonic()
        status, q, _ = self.s.lease("patient", 3000, wait=0.5)
        self.assertEqual(status, 202, q)
        self.assertGreaterEqual(time.monotonic() - t0, 0.45)
        self.s.call("DELETE", "/v1/tickets/" + q["ticket"])
        self.s.call("DELETE", "/v1/leases/" + hold["lease"])

    def test_reject_is_429_with_retry_after(self):
        s = Sluiced("pools:\n  default:\n    input_tpm: 6000\n    max_queue_wait_s: 1\n")
        try:
            status, hold, _ = s.lease("h", 5000)
            self.assertEqual(status, 200)
            status, r, h = s.lease("r", 4000)
            self.assertEqual(status, 429, r)
            self.assertEqual(r["status"], "rejected")
            self.assertEqual(r["reason"], "queue_wait_exceeds_max")
            self.assertGreater(r["retry_after"], 1)
            self.assertGreater(r["retry_at"], time.time())
            self.assertEqual(int(h["retry-after"]), -(-r["retry_after"] // 1))
            status, m, _ = s.call("GET", "/metrics")
            self.assertIn('sluice_leases_total{pool="default",result="rejected"} 1', m)
            kinds = [e["event"] for e in s.events()]
            self.assertIn("rejected", kinds)
        finally:
            s.stop()

    def test_exceeds_capacity_is_413(self):
        status, e, _ = self.s.lease("huge", 6001)  # above the 6,000 limit
        self.assertEqual((status, e["error"]["type"]), (413, "exceeds_capacity"))

    def test_unknown_pool_is_404(self):
        status, e, _ = self.s.lease("x", 1, pool="nope")
        self.assertEqual((status, e["error"]["type"]), (404, "not_found"))
        self.assertEqual(self.s.call("GET", "/v1/pools/nope")[0], 404)

    def test_pools_and_agents_views(self):
        status, body, _ = self.s.call("GET", "/v1/pools")
        self.assertEqual(status, 200)
        names = [p["name"] for p in body["pools"]]
        self.assertEqual(names[:2], ["default", "big"])
        p = self.s.pool()
        for key in ("limits", "margin", "buckets", "queue", "leases_in_flight", "alerts"):
            self.assertIn(key, p)
        for key in ("level", "capacity", "refill_per_s"):
            self.assertIn(key, p["buckets"]["input_tokens"])
        self.assertAlmostEqual(p["buckets"]["input_tokens"]["capacity"], 5100)
        self.s.lease("viewer", 1, pool="big")
        status, a, _ = self.s.call("GET", "/v1/agents")
        self.assertEqual(status, 200)
        viewer = [x for x in a["agents"] if x["name"] == "viewer"][0]
        for key in ("weight", "repeats", "estimate_error", "leases", "tokens_in", "tokens_out",
                    "got_429", "state"):
            self.assertIn(key, viewer)

    def test_task_graph_sets_unblocks(self):
        self.assertEqual(self.s.call("PUT", "/v1/tasks/base", {"role": "planner",
                                                               "state": "running"})[0], 200)
        for t in ("dep1", "dep2"):
            status, body, _ = self.s.call("PUT", "/v1/tasks/" + t,
                                          {"depends_on": ["base"], "state": "waiting"})
            self.assertEqual(status, 200, body)
        status, body, _ = self.s.call("GET", "/v1/tasks")
        base = [t for t in body["tasks"] if t["id"] == "base"][0]
        self.assertEqual(base["unblocks"], 2)
        status, g, _ = self.s.lease("tasker", 10, pool="big", task="base")
        status2, g2, _ = self.s.lease("tasker2", 10, pool="big")
        self.assertGreater(g["weight"], g2["weight"])  # 1 + 0.5 x 2 = 2x the plain weight
        status, one, _ = self.s.call("GET", "/v1/tasks/dep1")
        self.assertEqual((status, one["depends_on"], one["state"]), (200, ["base"], "waiting"))
        self.assertEqual(self.s.call("DELETE", "/v1/tasks/dep2")[0], 200)
        self.assertEqual(self.s.call("DELETE", "/v1/tasks/dep2")[0], 404)
        status, e, _ = self.s.call("PUT", "/v1/tasks/bad", {"state": "sleeping"})
        self.assertEqual(status, 400)
        self.assertIn("state", e["error"]["message"])

    def test_metrics_have_the_api_names(self):
        self.s.lease("metric", 10, pool="big")
        status, text, h = self.s.call("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn("text/plain; version=0.0.4", h["content-type"])
        for name in ("sluice_leases_total{pool=", "sluice_bucket_level{pool=",
                     "sluice_bucket_capacity{pool=", "sluice_margin_ratio{pool=",
                     "sluice_queue_depth{pool=", "sluice_lease_wait_seconds_bucket{",
                     "sluice_lease_wait_seconds_sum{", "sluice_lease_wait_seconds_count{",
                     "sluice_settles_total{pool=", "sluice_upstream_429_total{pool=",
                     "sluice_estimate_error_ratio_bucket{", "sluice_alert{name="):
            self.assertIn(name, text)
        self.assertIn('le="+Inf"', text)

    def test_events_stream_sends_lease_events(self):
        sock = raw_request(self.s.port, "GET", "/v1/events")
        sock.settimeout(5)
        time.sleep(0.2)
        self.s.lease("streamed", 10, pool="big")
        data = recv_until(sock, b"streamed")
        sock.close()
        self.assertIn(b"text/event-stream", data)
        self.assertIn(b"event: granted", data)
        line = [x for x in data.split(b"\n") if x.startswith(b"data: ") and b"streamed" in x][0]
        ev = json.loads(line[6:])
        self.assertEqual((ev["pool"], ev["agent"], ev["input_tokens"]), ("big", "streamed", 10))

    def test_event_log_has_one_line_per_event(self):
        status, g, _ = self.s.lease("logged", 10, pool="big")
        self.s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                    {"input_tokens": 12, "output_tokens": 3})
        evs = [e for e in self.s.events() if e.get("agent") == "logged"]
        self.assertEqual([e["event"] for e in evs], ["granted", "settled"])
        self.assertEqual(evs[0]["lease"], g["lease"])
        self.assertEqual(evs[1]["adjust_input_tokens"], -2)
        for e in evs:
            self.assertIsInstance(e["ts"], float)

    def test_unknown_path_and_method(self):
        self.assertEqual(self.s.call("GET", "/v2/nothing")[0], 404)
        status, e, h = self.s.call("GET", "/v1/leases")
        self.assertEqual((status, e["error"]["type"]), (405, "method_not_allowed"))


class Expiry(unittest.TestCase):
    def test_expired_lease_is_reaped_within_100ms_and_settle_says_410(self):
        with Sluiced(CONFIG) as s:
            status, g, _ = s.lease("short", 100, ttl=1)
            self.assertEqual(status, 200, g)
            time.sleep(max(0.0, g["expires_at"] - time.time()) + 0.1)
            self.assertEqual(s.pool()["leases_in_flight"], 0)
            status, e, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                  {"input_tokens": 1, "output_tokens": 1})
            self.assertEqual((status, e["error"]["type"]), (410, "lease_expired"))
            reaped = [e for e in s.events() if e["event"] == "reaped"]
            self.assertEqual(len(reaped), 1)
            self.assertLess(reaped[0]["ts"] - g["expires_at"], 0.1)


class WeightedFairQueue(unittest.TestCase):
    def test_queue_is_served_in_wfq_order_not_arrival(self):
        """A planner (weight 3) and a high-priority worker overtake plain workers queued
        earlier; equal weights keep arrival order."""
        with Sluiced(CONFIG) as s:
            status, hold, _ = s.lease("hold", 5000)
            self.assertEqual(status, 200)
            tickets = {}
            for agent, extra in (("w1", {}), ("w2", {}), ("p1", {"role": "planner"}),
                                 ("w3", {"priority": "low"}), ("h1", {"priority": "high"})):
                status, q, _ = s.lease(agent, 5000, **extra)
                self.assertEqual(status, 202, q)
                tickets[agent] = q["ticket"]
            positions = {a: s.call("GET", "/v1/tickets/" + t)[1]["position"]
                         for a, t in tickets.items()}
            order = sorted(positions, key=positions.get)
            self.assertEqual(order, ["h1", "p1", "w1", "w2", "w3"])
            # Drain one at a time: each grant fills the pool, its cancel lets the next in.
            granted = []
            current = hold["lease"]
            for _ in range(len(tickets)):
                s.call("DELETE", "/v1/leases/" + current)
                for agent in order:
                    if agent in granted:
                        continue
                    status, body, _ = s.call("GET", "/v1/tickets/" + tickets[agent])
                    if status == 200:
                        granted.append(agent)
                        current = body["lease"]
                        break
            self.assertEqual(granted, order)


if __name__ == "__main__":
    unittest.main()
