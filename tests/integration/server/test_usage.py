"""test_usage.py - chargeback: tokens and cost per agent, team and model in /metrics, the
day's rollup behind GET /v1/usage, and the 429/throttle correlation of an idle pool.

Every figure is computed from the prices the config states, so each is checked exactly.
"""
import json
import os
import subprocess
import time
import unittest

from harness import Sluiced, refused_config, wait_until
from test_fleet import metrics, value

CONFIG = """
fleet:
  metrics_top_agents: 3
caps:
  teams:
    red:
      members: [r1, r2]
prices:
  "test-model*":
    input_per_mtok: 2
    output_per_mtok: 10
    cache_read_per_mtok: 0.5
    cache_write_per_mtok: 4
pools:
  default:
    input_tpm: 100000000
    output_tpm: 100000000
    price_input_per_mtok: 1
    price_output_per_mtok: 3
"""


def lease_and_settle(s, agent, settle, model=None):
    body = {"input_tokens": 10, "output_tokens": 10}
    if model:
        body["model"] = model
    st, g, _ = s.lease(agent, **body)
    assert st == 200 and g["status"] == "granted", g
    st, b, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"], settle)
    assert st == 200, b


# 1000 input at 2, 100 output at 10, 500 cache reads at 0.5, 200 cache writes at 4 per Mtok.
PRICED = {"input_tokens": 1000, "output_tokens": 100, "cache_read_input_tokens": 500,
          "cache_creation_input_tokens": 200}
PRICED_USD = (1000 * 2 + 100 * 10 + 500 * 0.5 + 200 * 4) / 1e6
# No model: the pool's budget prices (1 and 3), cache at the input price.
POOL_PRICED_USD = (1000 * 1 + 100 * 3 + 500 * 1 + 200 * 1) / 1e6


class Chargeback(unittest.TestCase):
    def test_settles_are_counted_per_agent_team_and_model_at_the_configured_prices(self):
        with Sluiced(CONFIG) as s:
            lease_and_settle(s, "r1", PRICED, model="test-model-7")
            lease_and_settle(s, "r2", PRICED, model="test-model-7")
            lease_and_settle(s, "loner", PRICED)  # no model, no team
            m = metrics(s)
            self.assertEqual(value(m, 'sluice_agent_tokens_total{agent="r1",kind="input"}'), 1000)
            self.assertEqual(value(m, 'sluice_agent_tokens_total{agent="r1",kind="cache_write"}'),
                             200)
            self.assertAlmostEqual(value(m, 'sluice_agent_cost_usd_total{agent="r1"}'),
                                   PRICED_USD)
            self.assertEqual(value(m, 'sluice_team_tokens_total{team="red",kind="output"}'), 200)
            self.assertAlmostEqual(value(m, 'sluice_team_cost_usd_total{team="red"}'),
                                   2 * PRICED_USD)
            self.assertAlmostEqual(value(m, 'sluice_team_cost_usd_total{team="default"}'),
                                   POOL_PRICED_USD)
            self.assertEqual(
                value(m, 'sluice_model_tokens_total{model="test-model-7",kind="cache_read"}'), 1000)
            self.assertAlmostEqual(value(m, 'sluice_model_cost_usd_total{model="unknown"}'),
                                   POOL_PRICED_USD)

    def test_a_queued_lease_is_counted_with_the_model_its_request_named(self):
        tight = CONFIG.replace("input_tpm: 100000000", "input_tpm: 6000\n    max_queue_wait_s: 60"
                               "\n    ticket_idle_s: 60")
        with Sluiced(tight) as s:
            st, first, _ = s.lease("r1", 5000, model="test-model-1")
            self.assertEqual(first["status"], "granted", first)
            st, q, _ = s.lease("r2", 5000, model="test-model-1")
            self.assertEqual(q["status"], "queued", q)
            st, b, _ = s.call("DELETE", "/v1/leases/" + first["lease"])
            self.assertEqual(st, 200, b)
            st, g, _ = s.call("GET", "/v1/tickets/%s?wait=10" % q["ticket"])
            self.assertEqual(g["status"], "granted", g)
            st, b, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"], PRICED)
            self.assertEqual(st, 200, b)
            self.assertAlmostEqual(
                value(metrics(s), 'sluice_model_cost_usd_total{model="test-model-1"}'), PRICED_USD)

    def test_per_agent_series_are_the_top_n_and_other(self):
        with Sluiced(CONFIG) as s:
            for i in range(8):
                lease_and_settle(s, "agent-%d" % i, {"input_tokens": 100 * (i + 1),
                                                     "output_tokens": 1})
            m = metrics(s)
            series = [l for l in m.splitlines()
                      if l.startswith('sluice_agent_tokens_total{') and 'kind="input"' in l]
            self.assertEqual(len(series), 4, series)  # top 3 + other
            self.assertEqual(value(m, 'sluice_agent_tokens_total{agent="agent-7",kind="input"}'),
                             800)
            self.assertEqual(value(m, 'sluice_agent_tokens_total{agent="other",kind="input"}'),
                             100 + 200 + 300 + 400 + 500)

    def test_with_auth_on_an_anonymous_scrape_names_no_agent(self):
        auth = CONFIG + "auth:\n  admin_token: admin-secret-1\n  tokens:\n" \
                        "    - token: agent-secret-1\n      agent_prefix: r\n"
        with Sluiced(auth) as s:
            s.token = "agent-secret-1"
            lease_and_settle(s, "r1", PRICED, model="test-model-7")
            s.token = None
            m = metrics(s)
            agents = {l.split('agent="')[1].split('"')[0] for l in m.splitlines()
                      if l.startswith("sluice_agent_tokens_total{")}
            self.assertEqual(agents, {"other"})
            self.assertAlmostEqual(value(m, 'sluice_team_cost_usd_total{team="red"}'), PRICED_USD)
            s.token = "admin-secret-1"
            self.assertEqual(
                value(metrics(s), 'sluice_agent_tokens_total{agent="r1",kind="input"}'), 1000)

    def test_an_idle_pool_has_a_correlation_of_zero_not_nan(self):
        with Sluiced(CONFIG) as s:
            self.assertEqual(
                value(metrics(s), 'sluice_upstream_429_throttle_correlation{pool="default"}'), 0)


class PricesConfig(unittest.TestCase):
    def test_bad_prices_name_the_pattern_the_key_and_the_value(self):
        pool = "pools:\n  default:\n    input_tpm: 1000\n"
        cases = {
            '  "claude-x*":\n    input_per_mtok: 3\n':
                ':3: prices.claude-x*.output_per_mtok: missing: input_per_mtok and '
                'output_per_mtok are required',
            '  "claude-x*":\n    input_per_mtok: 3\n    output_per_mtok: -1\n':
                ":4: prices.claude-x*.output_per_mtok: '-1' must be a number between 0 and 1e+06",
            '  "claude-x*":\n    input_per_mtok: 3\n    output_per_mtok: 1\n    cache_hit: 2\n':
                ":5: prices.claude-x*.cache_hit: unknown key (known: input_per_mtok, "
                "output_per_mtok, cache_read_per_mtok, cache_write_per_mtok)",
            '  "claude-x*": 3\n': ":2: prices.claude-x*: expected a mapping",
        }
        for body, message in cases.items():
            out = refused_config("prices:\n" + body + pool)
            self.assertIsNotNone(out, body)
            self.assertIn(message, out)
        self.assertIsNone(refused_config("prices:\n" + '  "claude-x*":\n    input_per_mtok: 3\n'
                                         "    output_per_mtok: 15\n" + pool))


class UsageEndpoint(unittest.TestCase):
    def test_usage_by_team_agent_and_model(self):
        with Sluiced(CONFIG) as s:
            lease_and_settle(s, "r1", PRICED, model="test-model-7")
            lease_and_settle(s, "r2", PRICED, model="test-model-7")
            lease_and_settle(s, "loner", PRICED)
            st, u, _ = s.call("GET", "/v1/usage?by=team&since=10m")
            self.assertEqual(st, 200, u)
            self.assertEqual(u["by"], "team")
            self.assertEqual(u["resolution_s"], 60)
            self.assertLessEqual(u["from"], u["since"])
            self.assertEqual([r["team"] for r in u["rows"]], ["red", "default"])
            red = u["rows"][0]
            self.assertEqual((red["calls"], red["input_tokens"], red["output_tokens"],
                              red["cache_read_input_tokens"], red["cache_creation_input_tokens"]),
                             (2, 2000, 200, 1000, 400))
            self.assertAlmostEqual(red["cost_usd"], 2 * PRICED_USD)
            self.assertAlmostEqual(u["total"]["cost_usd"], 2 * PRICED_USD + POOL_PRICED_USD)
            st, u, _ = s.call("GET", "/v1/usage?by=agent")  # default since: the whole day kept
            self.assertEqual(u["resolution_s"], 3600)
            self.assertEqual(sorted(r["agent"] for r in u["rows"]), ["loner", "r1", "r2"])
            ten_minutes_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
            st, u, _ = s.call("GET", "/v1/usage?by=agent&since=" + ten_minutes_ago)
            self.assertEqual(st, 200, u)
            self.assertEqual((u["resolution_s"], u["total"]["calls"]), (60, 3))
            st, u, _ = s.call("GET", "/v1/usage?by=model&since=1h")
            self.assertEqual({r["model"]: r["calls"] for r in u["rows"]},
                             {"test-model-7": 2, "unknown": 1})

    def test_bad_queries_name_the_field_and_the_value(self):
        with Sluiced(CONFIG) as s:
            cases = {
                "by=user": "by: 'user' must be team, agent or model",
                "since=yesterday": "since: 'yesterday' must be an RFC 3339 time",
                "since=48h": "since: '48h' is 172800 s ago; this server keeps the last 24 h",
                "since=2000-01-01T00:00:00Z": "since: '2000-01-01T00:00:00Z' is",
                "since=4102444800": "since: '4102444800' is in the future",
                "limit=5": "query: unknown parameter 'limit' (known: by, since)",
            }
            for query, message in cases.items():
                st, b, _ = s.call("GET", "/v1/usage?" + query)
                self.assertEqual(st, 400, (query, b))
                self.assertIn(message, b["error"]["message"], query)

    def test_usage_needs_the_admin_token(self):
        auth = CONFIG + "auth:\n  admin_token: admin-secret-1\n  tokens:\n" \
                        "    - token: agent-secret-1\n      agent: r1\n"
        with Sluiced(auth) as s:
            st, b, _ = s.call("GET", "/v1/usage", token="agent-secret-1")
            self.assertEqual(st, 403, b)
            st, b, _ = s.call("GET", "/v1/usage", token="admin-secret-1")
            self.assertEqual(st, 200, b)

    def test_the_rollup_answers_within_the_minute_a_call_was_settled(self):
        with Sluiced(CONFIG) as s:
            lease_and_settle(s, "r1", PRICED, model="test-model-7")
            self.assertTrue(wait_until(
                lambda: s.call("GET", "/v1/usage?since=60s")[1]["total"]["calls"] == 1, 2))


def sluice(*args):
    p = subprocess.run([os.environ.get("SLUICE", "sluice"), "usage", *args],
                       capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout, p.stderr


class UsageCommand(unittest.TestCase):
    def test_sluice_usage_prints_a_row_per_team_and_the_total(self):
        with Sluiced(CONFIG) as s:
            lease_and_settle(s, "r1", PRICED, model="test-model-7")
            lease_and_settle(s, "loner", PRICED)
            url = "http://127.0.0.1:%d" % s.port
            code, out, err = sluice("--server", url, "--since", "10m")
            self.assertEqual(code, 0, err)
            lines = out.splitlines()
            self.assertEqual(lines[0].split(), ["TEAM", "CALLS", "INPUT", "OUTPUT", "CACHE_READ",
                                                "CACHE_WRITE", "COST_USD"])
            self.assertEqual(lines[1].split(), ["red", "1", "1000", "100", "500", "200",
                                                "%.4f" % PRICED_USD])
            self.assertEqual(lines[3].split()[:2], ["total", "2"])
            # An RFC 3339 time with an offset goes through the query encoded ('+' and ':').
            since = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 600))
            code, out, err = sluice("--server", url, "--by", "agent", "--since", since, "--json")
            self.assertEqual(code, 0, err)
            body = json.loads(out)
            self.assertEqual(sorted(r["agent"] for r in body["rows"]), ["loner", "r1"])
            code, _, err = sluice("--server", url, "--by", "user")
            self.assertEqual(code, 2)
            self.assertIn('--by: "user" must be team, agent or model', err)
            code, _, err = sluice("--server", url, "--since", "yesterday")
            self.assertEqual(code, 6)
            self.assertIn("since: 'yesterday' must be", err)


if __name__ == "__main__":
    unittest.main()
