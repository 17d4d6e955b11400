"""The client library (through `sluice acquire/settle/cancel`) against a real sluiced:
grant; queue then grant; reject then retry at retry_at; idempotent request_id; cached
tokens reach the server."""
import contextlib
import json
import os
import subprocess
import tempfile
import time
import unittest

from harness import SLUICE, Sluiced, sluice, sluice_json

# capacity 51,000 input tokens, refilled at 850/s; queue waits up to 60 s.
POOL = """
pools:
  default:
    input_tpm: 60000
    output_tpm: 600000
    max_queue_wait_s: 60
    ticket_idle_s: 60
"""

# The same, but anything that would wait more than 1 s is rejected.
REJECTING_POOL = POOL.replace("max_queue_wait_s: 60", "max_queue_wait_s: 1")


@contextlib.contextmanager
def acquiring(url, *args):
    """`sluice acquire ARGS --json` running in the background, killed if still running at
    the end."""
    p = subprocess.Popen([SLUICE, "acquire", *args, "--json", "--server", url],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def queue_depth(d, want, timeout_s):
    """The pool's queue depth once it reaches `want`, or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while d.pool()["queue"]["depth"] < want and time.monotonic() < deadline:
        time.sleep(0.05)
    return d.pool()["queue"]["depth"]


class LeaseFlow(unittest.TestCase):
    def test_grant_then_settle_refunds_the_difference(self):
        with Sluiced(POOL) as d:
            code, g, _ = sluice_json("acquire", "--agent", "a1", "--input", "1000", "--output",
                                     "100", "--json", url=d.url)
            self.assertEqual(code, 0)
            self.assertEqual(g["status"], "granted")
            self.assertEqual(g["charged"], {"input_tokens": 1000, "output_tokens": 100})
            self.assertEqual(len(g["request_id"]), 32)
            code, s, _ = sluice_json("settle", g["lease"], "--input", "400", "--output", "50",
                                     "--json", url=d.url)
            self.assertEqual(code, 0)
            self.assertEqual(s["adjust"], {"input_tokens": 600, "output_tokens": 50})
            self.assertEqual(s["backoff_s"], 0)

    def test_queued_request_is_granted_when_capacity_returns(self):
        with Sluiced(POOL) as d:
            code, big, _ = sluice_json("acquire", "--agent", "big", "--input", "50000",
                                       "--output", "10", "--json", url=d.url)
            self.assertEqual(code, 0)
            with acquiring(d.url, "--agent", "small", "--input", "20000", "--output", "10",
                           "--wait", "30") as waiter:
                self.assertEqual(queue_depth(d, 1, 5), 1)
                time.sleep(1.0)
                self.assertIsNone(waiter.poll(), "the queued acquire must keep waiting")
                code, _, _ = sluice("settle", big["lease"], "--input", "100", "--output", "10",
                                    url=d.url)
                self.assertEqual(code, 0)
                out, err = waiter.communicate(timeout=10)
            self.assertEqual(waiter.returncode, 0, err)
            g = json.loads(out)
            self.assertEqual(g["status"], "granted")
            self.assertGreaterEqual(g["waited"], 1.0)
            self.assertEqual(d.pool()["queue"]["depth"], 0)

    def test_rejected_request_comes_back_at_retry_at_and_is_granted(self):
        with Sluiced(REJECTING_POOL) as d:
            status, body = d.post("/v1/leases", {"agent": "hog", "input_tokens": 51000,
                                                 "output_tokens": 1})
            self.assertEqual(status, 200)
            # 4,250 tokens need 5 s of refill: more than max_queue_wait_s, so a reject.
            status, probe = d.post("/v1/leases", {"agent": "probe", "input_tokens": 4250,
                                                  "output_tokens": 1})
            self.assertEqual(status, 429)
            self.assertGreater(probe["retry_after"], 3)
            started = time.time()
            code, g, err = sluice_json("acquire", "--agent", "late", "--input", "4250",
                                       "--output", "1", "--wait", "30", "--json", url=d.url)
            elapsed = time.time() - started
            self.assertEqual(code, 0, err)
            self.assertEqual(g["status"], "granted")
            # It came back no earlier than retry_at (less the time already refilled).
            self.assertGreaterEqual(elapsed, probe["retry_after"] - 1.0)
            self.assertLess(elapsed, probe["retry_after"] + 5)

    def test_checkpointed_acquire_is_held_in_the_queue_instead_of_sleeping(self):
        # Issue 24 item 5: an acquire that saves a checkpoint asks to be held (max_wait up
        # to 540 s, here its --wait of 30 s), so past the pool's max_queue_wait_s it waits
        # in the queue, where a release or refill serves it at once, not asleep.
        with Sluiced(REJECTING_POOL) as d, tempfile.TemporaryDirectory() as tmp:
            cp = os.path.join(tmp, "held.checkpoint")
            self.assertEqual(sluice("checkpoint", "save", cp, "--goal", "hold")[0], 0)
            status, _ = d.post("/v1/leases", {"agent": "hog", "input_tokens": 51000,
                                              "output_tokens": 1})
            self.assertEqual(status, 200)
            with acquiring(d.url, "--agent", "held", "--input", "4250", "--output", "1",
                           "--wait", "30", "--checkpoint", cp) as waiter:
                self.assertEqual(queue_depth(d, 1, 3), 1, "held in the queue")
                out, err = waiter.communicate(timeout=20)
            self.assertEqual(waiter.returncode, 0, err)
            self.assertEqual(json.loads(out)["status"], "granted")

    def test_reject_beyond_the_wait_exits_5_with_retry_at(self):
        with Sluiced(REJECTING_POOL) as d:
            d.post("/v1/leases", {"agent": "hog", "input_tokens": 51000, "output_tokens": 1})
            code, r, _ = sluice_json("acquire", "--agent", "a", "--input", "20000", "--output",
                                     "1", "--wait", "1", "--json", url=d.url)
            self.assertEqual(code, 5)
            self.assertEqual(r["status"], "rejected")
            self.assertEqual(r["reason"], "queue_wait_exceeds_max")
            self.assertGreater(r["retry_at"], time.time())
            self.assertGreater(r["retry_after"], 1)

    def test_same_request_id_is_charged_once(self):
        with Sluiced(POOL) as d:
            args = ("acquire", "--agent", "a", "--input", "10000", "--output", "1",
                    "--request-id", "retry-me-1", "--json")
            _, first, _ = sluice_json(*args, url=d.url)
            _, second, _ = sluice_json(*args, url=d.url)
            self.assertEqual(first["lease"], second["lease"])
            level = d.pool()["buckets"]["input_tokens"]["level"]
            self.assertLess(level, 51000 - 10000 + 2000)  # refill allowance
            self.assertGreater(level, 51000 - 20000)

    def test_cached_prefix_is_charged_when_the_cache_is_cold(self):
        with Sluiced(POOL) as d:
            code, g, _ = sluice_json("acquire", "--agent", "cold", "--input", "1000", "--cached",
                                     "8000", "--output", "10", "--json", url=d.url)
            self.assertEqual(code, 0)
            self.assertTrue(g["cache_penalty"])
            self.assertEqual(g["charged"]["input_tokens"], 9000)

    def test_cancel_refunds_and_second_cancel_exits_6(self):
        with Sluiced(POOL) as d:
            _, g, _ = sluice_json("acquire", "--agent", "a", "--input", "30000", "--output",
                                  "1", "--json", url=d.url)
            code, c, _ = sluice_json("cancel", g["lease"], "--json", url=d.url)
            self.assertEqual((code, c["status"]), (0, "cancelled"))
            self.assertGreater(d.pool()["buckets"]["input_tokens"]["level"], 50000)
            code, e, _ = sluice_json("cancel", g["lease"], "--json", url=d.url)
            self.assertEqual(code, 6)
            self.assertEqual(e["error"]["type"], "already_settled")


if __name__ == "__main__":
    unittest.main()
