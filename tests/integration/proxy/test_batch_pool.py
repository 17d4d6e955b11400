"""test_batch_pool.py - the batch APIs go to a pool of their own (pools.NAME.batch: true): a
create counts its requests against max_batch_requests across agents, one over it is refused
429 before the provider sees it (state as before), a batch seen ended leaves the count, and
a batch pool takes no part in the routing of other calls."""
import json
import time
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, pool_yaml

ROOMY = "input_tpm: 10000000\noutput_tpm: 10000000\nrpm: 100000"


def config(emu, bound=4):
    # The batch pool first in the file: other calls must still go to "claude".
    return ("pools:\n" +
            pool_yaml("claude-batch", emu.url, "anthropic", "rpm: 1000",
                      "batch: true\nmax_batch_requests: %d" % bound) +
            pool_yaml("claude", emu.url, "anthropic", ROOMY))


def batch_of(n, prefix):
    return {"requests": [{"custom_id": "%s%d" % (prefix, i), "params": message("hi %d" % i)}
                         for i in range(n)]}


class BatchPool(unittest.TestCase):
    def batches(self, s, method, path="", body=None, agent="a", pool=None):
        headers = {"x-api-key": "t", "anthropic-version": "2023-06-01", "x-sluice-agent": agent}
        if pool:
            headers["x-sluice-pool"] = pool
        if body is not None:
            headers["content-type"] = "application/json"
        status, h, payload = s.request(method, "/anthropic/v1/messages/batches" + path, body,
                                       headers)
        return status, h, json.loads(payload)

    def test_the_queue_bound_holds_across_agents_and_frees_when_a_batch_is_seen_ended(self):
        with Emu(EMU_FAST + ["--batch-seconds", "0.3"]) as emu, Sluiced(config(emu)) as s:
            status, _, first = self.batches(s, "POST", body=batch_of(3, "a"), agent="a")
            self.assertEqual(status, 200, first)
            created = emu.stats()["batches"]["anthropic"]["batches"]
            status, h, refused = self.batches(s, "POST", body=batch_of(2, "b"), agent="b")
            self.assertEqual(status, 429, refused)
            self.assertEqual(refused["error"]["type"], "rate_limit_error")
            self.assertIn("max_batch_requests 4", refused["error"]["message"])
            self.assertEqual(h["retry-after"], "60")
            # Refused before the provider, and no lease left behind.
            self.assertEqual(emu.stats()["batches"]["anthropic"]["batches"], created)
            self.assertEqual(s.agent("b")["leases"] if s.agent("b") else 0, 0)
            # One batch bigger than the bound can never fit: the provider's 400.
            status, _, never = self.batches(s, "POST", body=batch_of(5, "c"), agent="b")
            self.assertEqual(status, 400, never)
            self.assertEqual(never["error"]["type"], "invalid_request_error")
            time.sleep(0.4)
            status, _, ended = self.batches(s, "GET", "/" + first["id"], agent="a")
            self.assertEqual(ended["processing_status"], "ended")
            status, _, again = self.batches(s, "POST", body=batch_of(2, "b"), agent="b")
            self.assertEqual(status, 200, again)
            granted = [e["pool"] for e in s.events() if e["event"] == "granted"]
            self.assertEqual(set(granted), {"claude-batch"})

    def test_other_calls_never_go_to_the_batch_pool(self):
        with Emu(EMU_FAST) as emu, Sluiced(config(emu)) as s:
            status, _, payload = s.anthropic(message("hi"), agent="m")
            self.assertEqual(status, 200, payload)
            granted = [e["pool"] for e in s.events() if e["event"] == "granted"]
            self.assertEqual(granted, ["claude"])
        # Not even when the batch pool lists the call's model, first in the file.
        routed = ("pools:\n" +
                  pool_yaml("claude-batch", "%s", "anthropic", "rpm: 1000",
                            "batch: true\nmodels: [\"claude-*\"]") +
                  pool_yaml("claude", "%s", "anthropic", ROOMY, "models: [\"claude-*\"]"))
        with Emu(EMU_FAST) as emu, Sluiced(routed.replace("%s", emu.url)) as s:
            status, _, payload = s.anthropic(message("hi", model="claude-x"), agent="m")
            self.assertEqual(status, 200, payload)
            granted = [e["pool"] for e in s.events() if e["event"] == "granted"]
            self.assertEqual(granted, ["claude"])

    def test_x_sluice_pool_may_pick_another_batch_pool_and_nothing_else(self):
        with Emu(EMU_FAST + ["--batch-seconds", "60"]) as emu:
            text = (config(emu) + pool_yaml("claude-batch-2", emu.url, "anthropic", "rpm: 1000",
                                            "batch: true\nmax_batch_requests: 2"))
            with Sluiced(text) as s:
                status, _, refused = self.batches(s, "POST", body=batch_of(1, "a"), agent="a",
                                                  pool="claude")
                self.assertEqual(status, 400, refused)
                self.assertIn("x-sluice-pool: 'claude' is not a batch pool",
                              refused["error"]["message"])
                self.assertEqual(emu.stats()["batches"]["anthropic"]["batches"], 0)
                status, _, ok = self.batches(s, "POST", body=batch_of(2, "b"), agent="a",
                                             pool="claude-batch-2")
                self.assertEqual(status, 200, ok)
                # That pool's own bound: 2 more do not fit there, and do in the first one.
                status, _, _ = self.batches(s, "POST", body=batch_of(2, "c"), agent="a",
                                            pool="claude-batch-2")
                self.assertEqual(status, 429)
                status, _, _ = self.batches(s, "POST", body=batch_of(2, "c"), agent="a")
                self.assertEqual(status, 200)
                granted = [e["pool"] for e in s.events() if e["event"] == "granted"]
                self.assertEqual(granted, ["claude-batch-2", "claude-batch"])

    def test_max_batch_requests_without_batch_is_a_config_error(self):
        with Emu(EMU_FAST) as emu:
            try:
                s = Sluiced("pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY,
                                                   "max_batch_requests: 10"))
            except Exception as e:  # the banner never comes: sluiced exits
                self.assertIn("max_batch_requests needs batch: true", str(e))
                return
            s.stop()
            self.fail("sluiced started with max_batch_requests on a pool without batch: true")


if __name__ == "__main__":
    unittest.main()
