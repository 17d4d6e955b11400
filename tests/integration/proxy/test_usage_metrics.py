"""test_usage_metrics.py - what the proxy adds to chargeback: the tokens the provider reported,
priced by model, per agent, team and model; upstream latency and time to first token per
pool; proxied requests by endpoint and status; and the provider key in no log line."""
import json
import time
import unittest

from harness import REAL_KEY, Emu, Sluiced, message, pool_yaml, read_until

# Streams whose first output event comes 300 ms after the request (the emulator's TTFT).
EMU_TTFT = ["--input-tpm", "100000000", "--output-tpm", "100000000", "--rpm", "1000000",
            "--ttft-ms", "300", "--tokens-per-s", "1000", "--latency-spread", "0",
            "--output-tokens", "24"]
ROOMY = "input_tpm: 100000000\noutput_tpm: 100000000\nrpm: 100000"


def config(emu):
    return ("access_log: stderr\nlog_format: json\n"
            "caps:\n  teams:\n    blue:\n      members: [b1]\n"
            "prices:\n  claude-emu-*:\n    input_per_mtok: 3\n    output_per_mtok: 15\n"
            "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY))


def value(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def metrics(s):
    status, _, payload = s.request("GET", "/metrics")
    assert status == 200, payload
    return payload.decode()


def metrics_once_settled(s, series, want, within_s=5.0):
    """/metrics once `series` reaches `want`: a stream is settled when the provider's stream
    ends in sluiced, which may come just after the client has read its last event."""
    deadline = time.monotonic() + within_s
    while True:
        m = metrics(s)
        if value(m, series) == want or time.monotonic() > deadline:
            return m
        time.sleep(0.05)


class ProxyUsage(unittest.TestCase):
    def test_proxied_calls_are_priced_timed_and_counted_by_endpoint_and_status(self):
        with Emu(EMU_TTFT) as emu, Sluiced(config(emu)) as s:
            status, _, payload = s.anthropic(message(max_tokens=50), agent="b1")
            self.assertEqual(status, 200, payload)
            usage = json.loads(payload)["usage"]
            stream = s.open_stream("/anthropic/v1/messages", message(max_tokens=50, stream=True),
                                   {"content-type": "application/json",
                                    "anthropic-version": "2023-06-01",
                                    "x-api-key": "agent-token", "x-sluice-agent": "b1"})
            read_until(stream, b"message_stop", 20)
            stream.close()
            status, _, _ = s.request("GET", "/anthropic/v1/nope")
            self.assertEqual(status, 404)
            m = metrics_once_settled(s, 'sluice_team_tokens_total{team="blue",kind="input"}',
                                     2 * usage["input_tokens"])
            # Two calls of the same size: twice the reported usage, at 3 and 15 USD / Mtok.
            self.assertEqual(value(m, 'sluice_team_tokens_total{team="blue",kind="input"}'),
                             2 * usage["input_tokens"])
            self.assertEqual(value(m, 'sluice_team_tokens_total{team="blue",kind="output"}'),
                             2 * usage["output_tokens"])
            self.assertAlmostEqual(
                value(m, 'sluice_model_cost_usd_total{model="claude-emu-1"}'),
                2 * (usage["input_tokens"] * 3 + usage["output_tokens"] * 15) / 1e6)
            self.assertEqual(value(m, 'sluice_upstream_latency_seconds_count{pool="claude"}'), 2)
            self.assertEqual(
                value(m, 'sluice_upstream_time_to_first_token_seconds_count{pool="claude"}'), 1)
            # The emulator holds the first output event 300 ms: a lower bound, not a timing race.
            self.assertGreaterEqual(
                value(m, 'sluice_upstream_time_to_first_token_seconds_sum{pool="claude"}'), 0.3)
            self.assertEqual(value(m, 'sluice_upstream_time_to_first_token_seconds_bucket'
                                      '{pool="claude",le="0.25"}'), 0)
            self.assertEqual(value(m, 'sluice_proxy_requests_total'
                                      '{path="/anthropic/v1/messages",status="200"}'), 2)
            self.assertEqual(value(m, 'sluice_proxy_requests_total'
                                      '{path="/anthropic/other",status="404"}'), 1)
            _, err = s.stop()
        access = [json.loads(l)["fields"] for l in err.splitlines() if '"msg":"access"' in l]
        proxied = [a for a in access if a["path"] == "/anthropic/v1/messages"]
        self.assertEqual(len(proxied), 2, access)
        for a in proxied:
            self.assertEqual((a["status"], a["agent"], a["pool"]), (200, "b1", "claude"))
            self.assertTrue(a["lease"].startswith("l_"), a)
        self.assertNotIn(REAL_KEY, err)


if __name__ == "__main__":
    unittest.main()
