"""test_batch_restart.py - the batch pool's processing queue survives a restart of sluiced.

On the memory backend the queue lives in the state file (journaled before a create is
answered): a sluiced killed with SIGKILL and started again on the same file still counts
the batches created before, so a create over max_batch_requests is refused 429 as before
the restart (docs/proxy.md, "The processing queue")."""
import json
import os
import signal
import tempfile
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, pool_yaml


def config(emu, state):
    return ("state_file: %s\npools:\n" % state +
            pool_yaml("claude-batch", emu.url, "anthropic", "rpm: 1000",
                      "batch: true\nmax_batch_requests: 4"))


def create(s, n, prefix):
    headers = {"x-api-key": "t", "anthropic-version": "2023-06-01", "x-sluice-agent": "a",
               "content-type": "application/json"}
    body = {"requests": [{"custom_id": "%s%d" % (prefix, i), "params": message("hi")}
                         for i in range(n)]}
    status, _, payload = s.request("POST", "/anthropic/v1/messages/batches", body, headers)
    return status, json.loads(payload)


class BatchRestart(unittest.TestCase):
    def test_a_restart_on_the_state_file_keeps_the_queue_count(self):
        with tempfile.TemporaryDirectory(prefix="sluice-batchq-") as d, \
                Emu(EMU_FAST + ["--batch-seconds", "600"]) as emu:
            state = os.path.join(d, "state")
            with Sluiced(config(emu, state)) as s:
                status, first = create(s, 3, "a")
                self.assertEqual(status, 200, first)
                s.proc.send_signal(signal.SIGKILL)  # no clean shutdown: the journal only
                s.proc.wait()
                s.proc.stdout.close()
                s.proc.stderr.close()
                s.output = ("", "")  # stopped here: the harness's stop has nothing to do
            with Sluiced(config(emu, state)) as s:
                status, refused = create(s, 2, "b")
                self.assertEqual(status, 429, refused)
                self.assertEqual(refused["error"]["type"], "rate_limit_error")
                self.assertIn("has 3 requests", refused["error"]["message"])
                status, one = create(s, 1, "c")
                self.assertEqual(status, 200, one)


if __name__ == "__main__":
    unittest.main()
