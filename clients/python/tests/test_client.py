"""test_client.py - the sluice Python package against a real sluiced on a free port: leases
(grant, queue with checkpoint-before-wait, settle), limit checks (allowed, denied, waits),
the context manager and decorator, errors, and the asyncio twin."""
import asyncio
import json
import os
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sluice  # noqa: E402
from sluiced_daemon import Daemon, free_port  # noqa: E402

CONFIG = """
cold_start: full
pools:
  default:
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 600
    ticket_idle_s: 600
  hold:
    input_tpm: 3000
    output_tpm: 600000
    ticket_idle_s: 600
limits:
  tool.call:
    algorithm: token_bucket
    rate: 2
    period_s: 600
  db.query:
    algorithm: fixed_window
    rate: 5
    period_s: 600
    per: key
    costs: {write: 5}
  paced:
    algorithm: gcra
    rate: 5
    period_s: 1
    burst: 1
    on_limit: queue
  sem:
    algorithm: concurrency
    rate: 1
    ttl_s: 600
  api:
    algorithm: token_bucket
    rate: 100
    adaptive: {min_rate: 10, max_rate: 200, window: 10}
  sem.child:
    algorithm: concurrency
    rate: 5
    ttl_s: 600
    parents: [tight.parent]
  tight.parent:
    algorithm: token_bucket
    rate: 3
    period_s: 600
  bucket.child:
    algorithm: token_bucket
    rate: 100
    period_s: 600
    per: key
    parents: [sem.parent]
  sem.parent:
    algorithm: concurrency
    rate: 1
    ttl_s: 600
"""


class PythonClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(CONFIG)

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def client(self, agent):
        return sluice.Client(url=self.d.url, agent=agent)

    def test_lease_granted_then_settled(self):
        c = self.client("py-lease")
        lease = c.acquire(input_tokens=100, output_tokens=10)
        self.assertTrue(lease.id.startswith("l"))
        ans = c.settle(lease, input_tokens=90, output_tokens=5)
        self.assertEqual(ans["status"], "settled")

    def test_queued_lease_saves_the_checkpoint_before_waiting(self):
        c = self.client("py-queue")
        big = c.acquire(input_tokens=5000, output_tokens=10)  # empties the small pool
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.checkpoint")
            waits = []

            def on_wait(kind, eta, answer):
                waits.append(kind)
                self.assertTrue(os.path.exists(path))  # saved before the first wait
                with open(path) as f:
                    self.assertEqual(json.load(f)["goal"], "fix it")
                return True  # give up at once

            with self.assertRaises(sluice.MaxWaitExceeded):
                c.acquire(input_tokens=2000, output_tokens=10, checkpoint={"goal": "fix it"},
                          checkpoint_path=path, on_wait=on_wait)
            self.assertEqual(waits, ["queued"])
            with open(path) as f:
                cp = json.load(f)
            self.assertEqual(cp["sluice_checkpoint"], 1)
            self.assertEqual(len(cp["request_id"]), 32)
        c.cancel(big)

    def test_checkpointed_acquire_is_held_in_the_queue_not_rejected(self):
        # Issue 24 item 5: past the pool's max_queue_wait_s (60 s) a request was rejected
        # and its agent slept until retry_at. With a checkpoint the client asks to be held
        # (max_wait, 540 s by default); without one the pool's limit still applies.
        c = sluice.Client(url=self.d.url, agent="py-hold", pool="hold")
        big = c.acquire(input_tokens=2500, output_tokens=10)  # capacity 2550: empty now
        status, ahead, _ = c.call("POST", "/v1/leases", {"agent": "py-ahead", "pool": "hold",
                                                         "input_tokens": 2000,
                                                         "output_tokens": 10})
        self.assertEqual(status, 202, ahead)  # ~46 s: queued
        waits = []

        def on_wait(kind, eta, answer):
            waits.append((kind, eta))
            return True  # give up at once

        with self.assertRaises(sluice.MaxWaitExceeded):
            c.acquire(input_tokens=2000, output_tokens=10, on_wait=on_wait)
        self.assertEqual(waits[0][0], "rejected")  # no checkpoint: ~93 s is past 60 s
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(sluice.MaxWaitExceeded):
                c.acquire(input_tokens=2000, output_tokens=10, checkpoint={"goal": "hold"},
                          checkpoint_path=os.path.join(d, "h.checkpoint"), on_wait=on_wait)
        self.assertEqual(waits[1][0], "queued")
        self.assertGreater(waits[1][1], 60)
        # A client that asks for no hold is rejected as before.
        c0 = sluice.Client(url=self.d.url, agent="py-hold", pool="hold", max_hold_s=0)
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(sluice.MaxWaitExceeded):
                c0.acquire(input_tokens=2000, output_tokens=10, checkpoint={"goal": "hold"},
                           checkpoint_path=os.path.join(d, "h.checkpoint"), on_wait=on_wait)
        self.assertEqual(waits[2][0], "rejected")
        c.call("DELETE", "/v1/tickets/%s" % ahead["ticket"])
        c.cancel(big)

    def test_check_allowed_denied_and_peek(self):
        c = self.client("py-check")
        a = c.check("tool.call")
        self.assertTrue(a.allowed)
        self.assertEqual((a.limit, a.remaining), (2, 1))
        self.assertEqual(c.check("tool.call", hits=0).remaining, 1)
        self.assertTrue(c.check("tool.call"))
        a = c.check("tool.call")
        self.assertFalse(a)
        self.assertEqual(a.denied_by["limit"], "tool.call")
        self.assertIn("retry-after", a.headers)
        self.assertIn("ratelimit", a.headers)

    def test_waits_on_queue_and_reject_limits(self):
        c = self.client("py-wait")
        self.assertTrue(c.check("paced"))
        a = c.check("paced", wait=5)
        self.assertTrue(a.allowed)
        self.assertGreater(a.waited, 0.05)
        self.assertFalse(c.check("paced"))

    def test_context_manager_and_decorator(self):
        c = self.client("py-ctx")
        with c.limit("sem") as a:  # a concurrency hold, released on exit
            self.assertTrue(a.allowed)
            self.assertFalse(c.check("sem", hits=1))
        self.assertTrue(c.check("sem"))
        c.release("sem")
        calls = []

        @c.limited("db.query", key="orders", action="write")
        def write():
            calls.append(1)

        write()
        with self.assertRaises(sluice.LimitExceeded):
            write()
        self.assertEqual(calls, [1])

    def held(self, name, key):
        with urllib.request.urlopen("%s/v1/limits/%s?key=%s" % (self.d.url, name, key)) as r:
            return json.loads(r.read())["state"]["held"]

    def test_context_manager_releases_the_hold_whichever_level_is_tightest(self):
        # The concurrency limit is not the most restrictive level (its parent has fewer
        # left), so the headers are the parent's: the hold is released all the same.
        c = self.client("py-ctx-child")
        with c.limit("sem.child") as a:
            self.assertEqual(a.checked[0]["limit"], "sem.child")
            self.assertEqual(self.held("sem.child", "py-ctx-child"), 1)
        self.assertEqual(self.held("sem.child", "py-ctx-child"), 0)
        # A token bucket under a concurrency parent (the tighter level): exiting releases
        # the parent's hold and raises nothing (the bucket has nothing to release).
        c = self.client("py-ctx-parent")
        for _ in range(2):
            with c.limit("bucket.child", key="k"):
                self.assertEqual(self.held("sem.parent", "py-ctx-parent"), 1)
            self.assertEqual(self.held("sem.parent", "py-ctx-parent"), 0)

    def test_an_endless_wait_is_sent_as_a_number(self):
        # wait=inf (sluice.client.FOREVER, as acquire's max_wait_s) is not JSON: the
        # client sends the most sluiced takes, and sluiced holds up to its max_wait_s.
        c = self.client("py-forever")
        self.assertTrue(c.check("paced", wait=sluice.client.FOREVER))
        a = c.check("paced", wait=sluice.client.FOREVER)
        self.assertTrue(a.allowed)
        self.assertGreater(a.waited, 0.05)

    def test_a_suspended_agent_is_denied_by_suspended(self):
        # sluiced refuses a suspended agent's check 429 {"status": "rejected", "reason":
        # "suspended"} before any limit is asked (docs/api.md "Suspension").
        req = urllib.request.Request(self.d.url + "/v1/agents/py-susp/suspend", data=b"{}",
                                     headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(req, timeout=5).read()
        c = self.client("py-susp")
        a = c.check("tool.call")
        self.assertFalse(a.allowed)
        self.assertEqual(a.denied_by, {"reason": "suspended"})
        with self.assertRaises(sluice.Suspended) as e:  # one class for a suspended agent
            with c.limit("tool.call"):
                pass
        self.assertIn("suspended", str(e.exception))
        self.assertIsInstance(e.exception, sluice.Error)
        with self.assertRaises(sluice.Suspended):  # and for its leases
            c.acquire(input_tokens=10, output_tokens=10, max_wait_s=0)

    def test_context_manager_of_a_peek_releases_nothing(self):
        c = self.client("py-ctx-peek")
        self.assertTrue(c.check("sem"))  # a hold of this agent's, outside any block
        with c.limit("sem", hits=0) as a:  # a peek takes no hold...
            self.assertTrue(a.allowed)
        self.assertEqual(self.held("sem", "py-ctx-peek"), 1)  # ...and ends none on exit
        c.release("sem")

    def test_module_level_limit_uses_the_environment(self):
        os.environ["SLUICE_URL"] = self.d.url
        os.environ["SLUICE_AGENT"] = "py-env"
        sluice.client._default = None
        try:
            with sluice.limit("db.query", key="env"):
                pass
            self.assertEqual(sluice.default_client().agent, "py-env")
        finally:
            del os.environ["SLUICE_URL"], os.environ["SLUICE_AGENT"]
            sluice.client._default = None

    def test_errors(self):
        c = self.client("py-err")
        with self.assertRaises(sluice.Error) as e:
            c.check("nope")
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(sluice.Error) as e:
            c.check("db.query")  # per: key needs a key
        self.assertEqual(e.exception.status, 400)
        self.assertIn("key", e.exception.message)
        dead = sluice.Client(url="http://127.0.0.1:%d" % free_port(), agent="x")
        with self.assertRaises(sluice.Unreachable):
            dead.check("tool.call")

    def test_report_adapts(self):
        c = self.client("py-rep")
        self.assertAlmostEqual(c.report("api", successes=1, errors=9)["rate"], 90)

    def test_asyncio(self):
        async def main():
            ac = sluice.AsyncClient(url=self.d.url, agent="py-async")
            answers = await asyncio.gather(*(ac.check("tool.call") for _ in range(3)))
            self.assertEqual(sorted(a.allowed for a in answers), [False, True, True])
            async with ac.limit("db.query", key="async") as a:
                self.assertTrue(a.allowed)

            @ac.limited("sem")
            async def hold():
                return "ran"

            self.assertEqual(await hold(), "ran")
            self.assertEqual(await hold(), "ran")  # the first released its hold
            lease = await ac.acquire(input_tokens=10, output_tokens=10)
            await ac.settle(lease, input_tokens=10, output_tokens=1)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
