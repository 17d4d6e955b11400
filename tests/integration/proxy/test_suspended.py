"""test_suspended.py - a suspended agent's proxied calls are refused before any lease or upstream call."""
import json
import time
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, pool_yaml


def config(emu):
    return ("fleet:\n  anomaly_min_agents: 5\n  anomaly_min_count: 20\n"
            "  suspend_anomalous: true\npools:\n" +
            pool_yaml("claude", emu.url, "anthropic", "input_tpm: 100000000\n"
                      "output_tpm: 100000000"))


def lease(s, agent):
    body = {"agent": agent, "pool": "claude", "input_tokens": 1, "output_tokens": 1}
    status, _, payload = s.request("POST", "/v1/leases", body,
                                   {"content-type": "application/json"})
    assert status == 200, payload
    return json.loads(payload)


class Suspended(unittest.TestCase):
    def test_a_suspended_agents_proxied_call_is_refused_in_the_providers_shape(self):
        with Emu(EMU_FAST) as emu, Sluiced(config(emu)) as s:
            for i in range(6):
                for _ in range(3):
                    lease(s, "w%d" % i)
            for _ in range(60):
                lease(s, "runaway")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not (s.agent("runaway") or {}).get("suspended"):
                time.sleep(0.05)
            self.assertTrue(s.agent("runaway")["suspended"])
            calls_before = emu.stats()
            before = s.pool("claude")["totals"]
            status, headers, payload = s.anthropic(message(max_tokens=10), agent="runaway")
            self.assertEqual(status, 429, payload)
            err = json.loads(payload)
            self.assertEqual(err["type"], "error")
            self.assertIn("suspended", err["error"]["message"])
            self.assertIn("retry-after", headers)
            self.assertEqual(s.pool("claude")["totals"], before)  # no lease asked
            after = emu.stats()  # nothing sent upstream (the /stats reads aside)
            self.assertEqual(after["requests"], calls_before["requests"])
            self.assertEqual(after["http"]["requests"], calls_before["http"]["requests"] + 1)
            status, _, payload = s.anthropic(message(max_tokens=10), agent="w1")
            self.assertEqual(status, 200, payload)


if __name__ == "__main__":
    unittest.main()
