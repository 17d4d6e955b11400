"""test_fleet_watch.py - the fleet watch through the proxy: a suspended agent's calls are refused before
any lease or upstream call; a call naming its task (x-sluice-task) counts toward that task's tokens."""
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


class Tasks(unittest.TestCase):
    def test_a_proxied_call_naming_its_task_counts_toward_tokens_per_finished_task(self):
        with Emu(EMU_FAST) as emu, Sluiced(config(emu)) as s:
            for state in ("running", None):
                body = {"state": state} if state else {"depends_on": ["t1"]}
                status, _, payload = s.request("PUT", "/v1/tasks/" + ("t1" if state else "t2"),
                                               body, {"content-type": "application/json"})
                self.assertEqual(status, 200, payload)
            status, _, payload = s.anthropic(message(max_tokens=10), agent="coder",
                                             extra={"x-sluice-task": "t1"})
            self.assertEqual(status, 200, payload)
            status, _, payload = s.request("PUT", "/v1/tasks/t1", {"state": "done"},
                                           {"content-type": "application/json"})
            self.assertEqual(status, 200, payload)
            a = s.agent("coder")
            f = s.get("/v1/fleet")
            self.assertGreater(a["tokens_in"] + a["tokens_out"], 0)
            self.assertEqual(f["tokens_per_finished_task"],
                             {"tokens": a["tokens_in"] + a["tokens_out"], "finished_tasks": 1,
                              "finished_task_tokens": a["tokens_in"] + a["tokens_out"]})
            self.assertEqual(f["tasks"], {"waiting": 1, "running": 0, "done": 1})


if __name__ == "__main__":
    unittest.main()
