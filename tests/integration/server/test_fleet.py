"""test_fleet.py - the four numbers (GET /v1/fleet, /metrics) and seed 001's metrics.

The task graph is written through /v1/tasks and leases name their task; the numbers
are read back exactly where they are counts, and as bounds where they are durations
(no timing gates a result: a duration is only checked to be positive or unchanged).
"""
import re
import time
import unittest

from harness import SMALL_POOL, Sluiced, wait_until

CONFIG = """
fleet:
  metrics_top_agents: 5
limits:
  tool.call:
    algorithm: fixed_window
    rate: 2
    period_s: 600
pools:
  default:""" + SMALL_POOL


def fleet(s):
    st, body, _ = s.call("GET", "/v1/fleet")
    assert st == 200, body
    return body


def metrics(s):
    st, text, _ = s.call("GET", "/metrics")
    assert st == 200, text
    return text


def value(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def put_task(s, task, **body):
    st, b, _ = s.call("PUT", "/v1/tasks/" + task, body)
    assert st == 200, b


def settle(s, lease, i, o, **kw):
    body = {"input_tokens": i, "output_tokens": o}
    body.update(kw)
    st, b, _ = s.call("POST", "/v1/leases/%s/settle" % lease, body)
    assert st == 200, b


class FourNumbers(unittest.TestCase):
    def test_the_four_numbers_follow_the_task_graph_and_the_settles(self):
        with Sluiced(CONFIG) as s:
            f = fleet(s)
            self.assertIsNone(f["upstream_429"]["rate"])
            self.assertIsNone(f["tokens_per_finished_task"]["tokens"])
            self.assertIsNone(f["task_time_s"]["p50"])
            put_task(s, "build", state="running")
            put_task(s, "review", depends_on=["build"])
            put_task(s, "docs", depends_on=["build"])
            st, g, _ = s.lease("a1", 5000, task="build")
            self.assertEqual(g["status"], "granted", g)
            # A second request of `build` queues: both waiting tasks now wait on it.
            st, q, _ = s.lease("a1", 5000, task="build")
            self.assertEqual(q["status"], "queued", q)
            f = fleet(s)
            self.assertEqual(f["critical_path_wait"]["blocked_tasks"], 2)
            self.assertEqual(f["tasks"], {"waiting": 2, "running": 1, "done": 0})
            self.assertTrue(wait_until(lambda: fleet(s)["critical_path_wait"]["total_s"] > 0, 5))
            st, b, _ = s.call("DELETE", "/v1/tickets/" + q["ticket"])
            self.assertEqual(st, 200, b)
            f = fleet(s)
            self.assertEqual(f["critical_path_wait"]["blocked_tasks"], 0)
            waited = f["critical_path_wait"]["total_s"]
            time.sleep(0.05)
            self.assertEqual(fleet(s)["critical_path_wait"]["total_s"], waited)
            self.assertAlmostEqual(
                value(metrics(s), "sluice_fleet_critical_path_wait_seconds_total"), waited)

            # Tokens per finished task and its running -> done time.
            settle(s, g["lease"], 4000, 500)
            put_task(s, "build", state="done")
            f = fleet(s)
            self.assertEqual(f["tokens_per_finished_task"],
                             {"tokens": 4500, "finished_tasks": 1, "finished_task_tokens": 4500})
            self.assertEqual(f["task_time_s"]["samples"], 1)
            self.assertGreater(f["task_time_s"]["p50"], 0)
            self.assertEqual(f["task_time_s"]["p50"], f["task_time_s"]["p95"])

            # The 429 rate: one of the two settles in the window came back 429.
            self.assertEqual(f["upstream_429"]["rate"], 0)
            self.assertTrue(wait_until(lambda: s.lease("a2", 100)[1]["status"] == "granted", 60))
            _, g2, _ = s.lease("a2", 100)
            settle(s, g2["lease"], 100, 10, got_429=True)
            f = fleet(s)
            self.assertEqual((f["upstream_429"]["count"], f["upstream_429"]["settled"]), (1, 2))
            self.assertAlmostEqual(f["upstream_429"]["rate"], 1 / 2)
            m = metrics(s)
            self.assertAlmostEqual(value(m, "sluice_fleet_upstream_429_ratio"), 1 / 2)
            self.assertEqual(value(m, "sluice_fleet_tokens_per_finished_task"), 4500)
            self.assertEqual(value(m, 'sluice_fleet_tasks{state="done"}'), 1)
            # A task written done again counts once; reopened, it is no longer finished.
            put_task(s, "build", state="done")
            self.assertEqual(fleet(s)["tokens_per_finished_task"]["finished_tasks"], 1)
            put_task(s, "build", state="running")
            self.assertEqual(fleet(s)["tokens_per_finished_task"],
                             {"tokens": None, "finished_tasks": 0, "finished_task_tokens": 0})
            self.assertAlmostEqual(value(m, 'sluice_fleet_task_seconds{quantile="0.5"}'),
                                   f["task_time_s"]["p50"])


class SeedMetrics(unittest.TestCase):
    def test_throttle_retry_after_margin_and_bands_are_exported(self):
        with Sluiced(CONFIG.replace("max_queue_wait_s: 600", "max_queue_wait_s: 30")) as s:
            _, g, _ = s.lease("a", 5000)
            _, q, _ = s.lease("b", 2000)  # about 22 s away at 85 tokens/s: queued
            self.assertEqual(q["status"], "queued", q)
            st, r, _ = s.lease("c", 5000)  # more than 30 s away: refused
            self.assertEqual(st, 429, r)
            settle(s, g["lease"], 5000, 10, got_429=True)  # cuts the margin
            for _ in range(3):
                s.call("POST", "/v1/limits/tool.call/check", {"agent": "a"})
            self.assertTrue(wait_until(
                lambda: (value(metrics(s), 'sluice_bucket_band_seconds_total{pool="default",'
                               'bucket="input_tokens",band="below_10pct"}') or 0)
                + (value(metrics(s), 'sluice_bucket_band_seconds_total{pool="default",'
                                     'bucket="input_tokens",band="between"}') or 0) > 0, 5))
            m = metrics(s)
            self.assertAlmostEqual(value(m, 'sluice_pool_throttle_ratio{pool="default"}'), 2 / 3)
            self.assertEqual(value(m, 'sluice_retry_after_seconds_count{pool="default"}'), 1)
            self.assertEqual(value(m, 'sluice_margin_adjustments_total{pool="default",'
                                      'direction="down"}'), 1)
            self.assertAlmostEqual(value(m, 'sluice_limit_throttle_ratio{limit="tool.call"}'),
                                   1 / 3)
            self.assertEqual(value(m, 'sluice_limit_retry_after_seconds_count{limit="tool.call"}'),
                             1)
            self.assertIsNotNone(value(m, 'sluice_bucket_utilisation_ratio{pool="default",'
                                          'bucket="input_tokens"}'))
            self.assertIn('sluice_upstream_429_throttle_correlation{pool="default"}', m)
            self.assertEqual(value(m, 'sluice_agent_violations_total{agent="c"}'), 1)

    def test_an_idle_pool_has_a_429_throttle_correlation_of_zero_not_nan(self):
        # Nothing throttled and no 429 in the window: no co-movement, which is 0; a NaN
        # breaks Grafana's lines and every aggregate taken over it.
        with Sluiced(CONFIG) as s:
            self.assertEqual(value(metrics(s),
                                   'sluice_upstream_429_throttle_correlation{pool="default"}'), 0)
            s.lease("a", 10)  # requests, none throttled: still constant, still 0
            self.assertEqual(value(metrics(s),
                                   'sluice_upstream_429_throttle_correlation{pool="default"}'), 0)

    def test_two_thousand_agents_make_at_most_n_plus_one_series_per_metric(self):
        with Sluiced(CONFIG.replace("input_tpm: 6000", "input_tpm: 100000000")) as s:
            c = s.conn()
            for i in range(2000):
                body = '{"agent": "agent-%d", "input_tokens": 1, "output_tokens": 1}' % i
                c.request("POST", "/v1/leases", body=body,
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                self.assertEqual(r.status, 200)
            for _ in range(3):  # agent-0 .. agent-4 lead: 4 requests each
                for i in range(5):
                    s.lease("agent-%d" % i, 1)
            c.close()
            m = metrics(s)
            series = {}
            for line in m.splitlines():
                hit = re.match(r'^(sluice_agent_\w+)\{agent="([^"]*)"', line)
                if hit:
                    series.setdefault(hit.group(1), []).append(hit.group(2))
            self.assertIn("sluice_agent_requests_total", series)
            for name, agents in series.items():
                self.assertLessEqual(len(agents), 6, name)
            req = series["sluice_agent_requests_total"]
            self.assertEqual(sorted(req), ["agent-%d" % i for i in range(5)] + ["other"])
            self.assertEqual(value(m, 'sluice_agent_requests_total{agent="agent-0"}'), 4)
            self.assertEqual(value(m, 'sluice_agent_requests_total{agent="other"}'), 1995)

    def test_with_auth_on_the_open_metrics_names_agents_only_to_the_admin(self):
        cfg = CONFIG.replace("fleet:\n", "auth:\n  admin_token: admin-secret-9\n  tokens:\n"
                             "    - {token: token-agent-a, agent_prefix: \"\"}\nfleet:\n", 1)
        with Sluiced(cfg) as s:
            for i in range(3):
                st, g, _ = s.call("POST", "/v1/leases", {"agent": "secret-%d" % i,
                                                         "input_tokens": 1, "output_tokens": 1},
                                  token="token-agent-a")
                self.assertEqual(st, 200, g)
            for tok in (None, "token-agent-a", "wrong-token-1"):
                with self.subTest(token=tok):
                    st, m, _ = s.call("GET", "/metrics", token=tok or "")
                    self.assertEqual(st, 200, m)  # /metrics stays open
                    self.assertNotIn("secret-", m)
                    self.assertEqual(value(m, 'sluice_agent_requests_total{agent="other"}'), 3)
            st, m, _ = s.call("GET", "/metrics", token="admin-secret-9")
            self.assertEqual(value(m, 'sluice_agent_requests_total{agent="secret-0"}'), 1)


if __name__ == "__main__":
    unittest.main()
