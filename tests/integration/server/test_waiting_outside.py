"""test_waiting_outside.py - issue 24's waiting rules called from outside, as docs/api.md,
docs/server.md and docs/client.md write them: a held lease (`max_wait`) and the Python
client's checkpointed hold granted without sleeping through a REJECT, parked first calls
of the working set and what a client and the pool view see of them, backfilling past a
blocked head (its ETA never later; `backfill: false`), the margin's climb on agreeing
headers up to `margin_max` (pool view, metrics, events), and an output above an agent's
`max_share`. Every wait is bounded."""
import os
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Sluiced  # noqa: E402

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

# capacity 2,550 input tokens refilled at 42.5 per second (docs/api.md's tests use the same).
SMALL = """
pools:
  default:
    input_tpm: 3000
    output_tpm: 3000
    ticket_idle_s: 600
"""


def headers(input_remaining, output_remaining, limit=100000):
    """Anthropic's rate-limit headers as a settle carries them (docs/api.md, settle)."""
    return {"anthropic-ratelimit-input-tokens-limit": str(limit),
            "anthropic-ratelimit-input-tokens-remaining": str(input_remaining),
            "anthropic-ratelimit-output-tokens-limit": str(limit),
            "anthropic-ratelimit-output-tokens-remaining": str(output_remaining)}


def metric_lines(s, prefix):
    _, text, _ = s.call("GET", "/metrics")
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(prefix)}


class PoolView(unittest.TestCase):
    def test_the_pool_views_config_shows_backfill_and_working_set(self):
        # docs/server.md: pools.NAME.backfill (default true) and working_set (default false)
        # are pool keys like margin_max and output_reserve, which the view's `config` shows.
        with Sluiced(SMALL) as s:
            cfg = s.pool()["config"]
            self.assertIs(cfg["backfill"], True)
            self.assertIs(cfg["working_set"], False)
            self.assertEqual(cfg["margin_max"], 0.97)
        with Sluiced(SMALL + "    backfill: false\n    working_set: true\n") as s:
            cfg = s.pool()["config"]
            self.assertIs(cfg["backfill"], False)
            self.assertIs(cfg["working_set"], True)


class WorkingSet(unittest.TestCase):
    CONFIG = SMALL + "    working_set: true\n"

    def test_parked_first_calls_are_held_and_counted_in_the_depth_not_the_heads_eta(self):
        with Sluiced(self.CONFIG) as s:
            status, a, _ = s.lease("a", 100)  # the pool is idle: a first call that fits
            self.assertEqual(status, 200, a)
            s.call("POST", "/v1/leases/%s/settle" % a["lease"],
                   {"input_tokens": 100, "output_tokens": 5})
            self.assertEqual(s.lease("hog", 2400)[0], 200)
            # A first call that does not fit is parked: QUEUED, `limited_by: working_set`,
            # and never rejected for its wait (here ~22 s, then ~69 s past the pool's 60 s).
            status, b, _ = s.lease("b", 1000)
            self.assertEqual(status, 202, b)
            self.assertEqual(b["limited_by"], "working_set")
            status, far, _ = s.lease("far", 2500)
            self.assertEqual(status, 202, far)
            self.assertEqual(far["limited_by"], "working_set")
            self.assertGreater(far["eta"], 60)
            pool = s.pool()
            self.assertEqual(pool["queue"]["depth"], 2)
            self.assertIsNone(pool["queue"]["eta"])  # nothing in the queue proper
            # a's cache was settled: its next call continues a task and goes first, queued
            # at its tag, and past the wait limit it is rejected as any queued call
            status, cont, _ = s.lease("a", 1000)
            self.assertEqual(status, 202, cont)
            self.assertEqual(cont["limited_by"], "input_tokens")
            self.assertLess(cont["eta"], 30)
            status, rej, _ = s.lease("a", 2000)
            self.assertEqual(status, 429, rej)
            self.assertEqual(rej["reason"], "queue_wait_exceeds_max")
            # the parked ticket's poll: still parked, behind the continuation; its ETA and
            # position count every request queued or parked (docs/api.md, QUEUED)
            status, polled, _ = s.call("GET", "/v1/tickets/" + b["ticket"])
            self.assertEqual(status, 202, polled)
            self.assertEqual(polled["limited_by"], "working_set")
            self.assertGreater(polled["eta"], cont["eta"])
            self.assertEqual(polled["position"], 3)
            pool = s.pool()
            self.assertEqual(pool["queue"]["depth"], 3)
            self.assertAlmostEqual(pool["queue"]["eta"], cont["eta"], delta=1)


    def test_a_reload_turning_the_working_set_off_queues_the_parked_calls(self):
        with Sluiced(self.CONFIG) as s:
            self.assertEqual(s.lease("hog", 2500)[0], 200)
            status, b, _ = s.lease("b", 1000)
            self.assertEqual(b["limited_by"], "working_set")
            s.write_config("event_log: %s\n%s" % (s.event_log, SMALL))
            self.assertEqual(s.call("POST", "/v1/admin/reload")[0], 200)
            pool = s.pool()
            self.assertIs(pool["config"]["working_set"], False)
            self.assertAlmostEqual(pool["queue"]["eta"], b["eta"], delta=1)
            status, polled, _ = s.call("GET", "/v1/tickets/" + b["ticket"])
            self.assertEqual((status, polled["limited_by"]), (202, "input_tokens"))


class Backfill(unittest.TestCase):
    def blocked_head(self, s):
        """A head blocked on input for ~46 s; its ticket."""
        self.assertEqual(s.lease("big", 2500, 1000)[0], 200)
        status, head, _ = s.lease("h", 2000, 10)
        self.assertEqual(status, 202, head)
        self.assertEqual(head["limited_by"], "input_tokens")
        return head

    def test_a_call_needing_nothing_the_head_waits_for_passes_and_the_heads_eta_stays(self):
        with Sluiced(SMALL) as s:
            head = self.blocked_head(s)
            # the same agent's next call (a later tag): no input, output the head leaves
            status, g, _ = s.lease("h", 0, 500)
            self.assertEqual(status, 200, g)
            status, polled, _ = s.call("GET", "/v1/tickets/" + head["ticket"])
            self.assertEqual(status, 202, polled)
            self.assertLessEqual(polled["eta"], head["eta"])
            self.assertAlmostEqual(polled["eta"], head["eta"], delta=1)
            # one that fits in ~1.4 s of output refill is told that sooner ETA and is
            # granted then, by the pool's own wake-up
            status, c, _ = s.lease("h", 0, 1600)
            self.assertEqual(status, 202, c)
            self.assertEqual(c["limited_by"], "output_tokens")
            self.assertLess(c["eta"], 20)
            started = time.monotonic()
            status, g, _ = s.call("GET", "/v1/tickets/%s?wait=30" % c["ticket"], timeout_s=40)
            self.assertEqual(status, 200, g)
            self.assertLess(time.monotonic() - started, c["eta"] + 10)
            status, polled, _ = s.call("GET", "/v1/tickets/" + head["ticket"])
            self.assertLessEqual(polled["eta"], head["eta"])

    def test_a_backfilled_calls_excess_is_charged_and_delays_the_head(self):
        # docs/design.md "Backfilling": the head's ETA never moves later for what a
        # backfilled call reserved or gives back, but an excess it reports is charged (the
        # provider counted it) and delays the head by that excess over the refill.
        with Sluiced(SMALL) as s:
            head = self.blocked_head(s)
            for used_input, delay_s in ((0, 0), (500, 500 / 42.5)):
                status, g, _ = s.lease("h", 0, 500)
                self.assertEqual(status, 200, g)
                status, _, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                      {"input_tokens": used_input, "output_tokens": 100})
                self.assertEqual(status, 200)
                status, polled, _ = s.call("GET", "/v1/tickets/" + head["ticket"])
                self.assertAlmostEqual(polled["eta"], head["eta"] + delay_s, delta=1)

    def test_backfill_false_keeps_head_of_line_order(self):
        with Sluiced(SMALL + "    backfill: false\n") as s:
            head = self.blocked_head(s)
            status, q, _ = s.lease("h", 0, 500)
            self.assertEqual(status, 202, q)
            self.assertEqual(q["position"], 2)
            self.assertGreaterEqual(q["eta"], head["eta"] - 1)


class Margin(unittest.TestCase):
    CONFIG = """
pools:
  default:
    input_tpm: 100000
    output_tpm: 100000
    margin_max: 0.90
"""

    def room(self, s):
        """The room the pool believes in now, per bucket: level + the margin's reserve."""
        p = s.pool()
        reserve = (1 - p["margin"]) * 100000
        return (p["buckets"]["input_tokens"]["level"] + reserve,
                p["buckets"]["output_tokens"]["level"] + reserve)

    def test_agreeing_headers_climb_to_margin_max_and_less_room_goes_back_to_the_start(self):
        with Sluiced(self.CONFIG) as s:
            margins = []
            for _ in range(7):
                status, g, _ = s.lease("a", 10000, 1000)
                self.assertEqual(status, 200, g)
                room_in, room_out = self.room(s)  # right after the grant, as the provider
                status, r, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"], {
                    "input_tokens": 10000, "output_tokens": 100,
                    "headers": headers(int(room_in + 0.5), int(room_out + 0.5))})
                self.assertEqual(status, 200, r)
                margins.append(s.pool()["margin"])
            # one step per agreeing round trip, never above the configured ceiling
            self.assertEqual(margins, [0.86, 0.87, 0.88, 0.89, 0.90, 0.90, 0.90])
            self.assertEqual(s.pool()["buckets"]["input_tokens"]["capacity"], 90000)
            m = metric_lines(s, "sluice_margin")
            self.assertEqual(m['sluice_margin_ratio{pool="default"}'], 0.9)
            self.assertEqual(m['sluice_margin_adjustments_total{pool="default",direction="up"}'], 5)
            # a header with less room than the pool believes: back to the start at once
            status, g, _ = s.lease("a", 10000, 1000)
            room_in, room_out = self.room(s)
            status, r, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"], {
                "input_tokens": 10000, "output_tokens": 100,
                "headers": headers(int(room_in) - 20000, int(room_out + 0.5))})
            self.assertEqual(status, 200, r)
            self.assertEqual(s.pool()["margin"], 0.85)
            m = metric_lines(s, "sluice_margin_adjustments")
            self.assertEqual(m['sluice_margin_adjustments_total{pool="default",direction="down"}'], 1)
            events = [e["margin"] for e in s.events() if e["event"] == "margin"]
            self.assertEqual(events, [0.86, 0.87, 0.88, 0.89, 0.90, 0.85])

    def test_without_headers_the_margin_stays_at_its_start(self):
        with Sluiced(self.CONFIG) as s:
            for _ in range(3):
                status, g, _ = s.lease("a", 10000, 1000)
                s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                       {"input_tokens": 10000, "output_tokens": 100})
            self.assertEqual(s.pool()["margin"], 0.85)


class AgentShare(unittest.TestCase):
    def test_an_output_above_an_agents_share_is_413_unless_capped_to_it(self):
        # docs/api.md `cap_output`: only a capped call may be reserved less than its
        # output_tokens under an agent's max_share; an uncapped one above the cap can
        # never pass it: 413 exceeds_capacity naming the figure and the cap, nothing charged.
        config = SMALL.replace("3000", "100000") + "caps:\n  agents:\n    a:\n      max_share: 0.1\n"
        with Sluiced(config) as s:
            before = s.pool()["buckets"]
            status, body, _ = s.lease("a", 100, 20000)
            self.assertEqual(status, 413, body)
            self.assertEqual(body["error"]["type"], "exceeds_capacity")
            msg = body["error"]["message"]
            self.assertIn("output_tokens 20000", msg)
            self.assertIn("agent_cap", msg)
            self.assertIn("10000", msg)
            self.assertEqual(s.pool()["buckets"], before)
            self.assertEqual(s.pool()["leases_in_flight"], 0)
            status, g, _ = s.lease("a", 100, 20000, cap_output=True)
            self.assertEqual(status, 200, g)
            self.assertEqual(g["charged"]["output_tokens"], 10000)


class PythonClientHold(unittest.TestCase):
    def test_a_checkpointed_acquire_is_held_and_granted_when_room_comes(self):
        # docs/client.md: a checkpointed acquire sends max_wait (540 s), so past the
        # pool's max_queue_wait_s it waits queued and a release serves it at once, where
        # without the checkpoint it is rejected and sleeps until retry_at.
        sys.path.insert(0, os.path.join(SOURCE_DIR, "clients", "python"))
        import sluice
        config = SMALL + "    max_queue_wait_s: 1\n"
        with Sluiced(config) as s, tempfile.TemporaryDirectory() as d:
            url = "http://127.0.0.1:%d" % s.port
            status, hog, _ = s.lease("hog", 2500)
            self.assertEqual(status, 200, hog)
            waits = []
            c = sluice.Client(url=url, agent="held")

            def on_wait(kind, eta_s, answer):
                waits.append((kind, answer.get("status")))

            # ~11 s of refill: past the pool's 1 s, so only a held request is queued
            probe_status, probe, _ = s.lease("probe", 500)
            self.assertEqual(probe_status, 429, probe)
            timer = threading.Timer(1.0, s.call, ("DELETE", "/v1/leases/" + hog["lease"]))
            timer.start()
            started = time.monotonic()
            try:
                lease = c.acquire(input_tokens=500, output_tokens=10,
                                  checkpoint={"goal": "hold"},
                                  checkpoint_path=os.path.join(d, "held.checkpoint"),
                                  on_wait=on_wait, max_wait_s=60)
            finally:
                timer.join()
            elapsed = time.monotonic() - started
            self.assertEqual(waits, [("queued", "queued")])
            self.assertGreaterEqual(lease.waited, 0.5)
            self.assertLess(elapsed, probe["retry_after"] - 3)  # not asleep until retry_at
            c.cancel(lease)


if __name__ == "__main__":
    unittest.main()
