"""test_sdk.py - the SDK surface of issue 29 against a real sluiced: `with client.lease()` (settle
from anthropic/openai usage objects and dicts, cancel on an exception, a caught 429 settled
with its retry-after and backed off), lease_for() sized by POST /v1/estimate, the error tree,
fail-open to a local share when sluiced is stopped and back when it returns (as
libsluice-client), provider headers an agent token may not send reported, the default client
following the environment, and the native asyncio client holding 200 waits on one loop."""
import asyncio
import os
import sys
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sluice  # noqa: E402
from sluice.usage import usage_from  # noqa: E402
from sluiced_daemon import Daemon, free_port  # noqa: E402

NS = types.SimpleNamespace

CONFIG = """
cold_start: full
pools:
  default:
    input_tpm: 100000
    output_tpm: 100000
    rpm: 600
    max_queue_wait_s: 120
    ticket_idle_s: 600
  slow:
    input_tpm: 600
    output_tpm: 600000
    max_queue_wait_s: 120
    ticket_idle_s: 600
%s
"""


def daemon(extra=""):
    """sluiced with this file's pools and `extra` configuration."""
    return Daemon(CONFIG % extra, "sluice-sdk-test-")


class RateLimitError(Exception):
    """What the anthropic and openai SDKs raise for a 429 (duck-typed)."""

    status_code = 429

    def __init__(self, retry_after):
        super().__init__("429 rate_limit_error")
        self.response = NS(headers={"Retry-After": str(retry_after)})


ANTHROPIC_BODY = {"model": "claude-sonnet-4-5", "max_tokens": 300,
                  "system": [{"type": "text", "text": "You fix failing tests. " * 30,
                              "cache_control": {"type": "ephemeral"}}],
                  "messages": [{"role": "user", "content": "test_parse fails: fix it"}]}


class Usage(unittest.TestCase):
    def test_usage_of_each_sdk_shape(self):
        anthropic = NS(input_tokens=90, output_tokens=5, cache_creation_input_tokens=7,
                       cache_read_input_tokens=400)
        chat = NS(prompt_tokens=100, completion_tokens=7,
                  prompt_tokens_details=NS(cached_tokens=40))
        responses = NS(input_tokens=100, output_tokens=9,
                       input_tokens_details=NS(cached_tokens=30))
        for got, want in (
                (anthropic, (90, 5, 7, 400)), (chat, (60, 7, 0, 40)), (responses, (70, 9, 0, 30)),
                (NS(usage=anthropic, id="msg_1"), (90, 5, 7, 400)),
                ({"prompt_tokens": 10, "completion_tokens": 2}, (10, 2, 0, 0)),
                ({"input_tokens": 3, "output_tokens": 4}, (3, 4, 0, 0))):
            u = usage_from(got)
            self.assertEqual((u.input_tokens, u.output_tokens, u.cache_creation_input_tokens,
                              u.cache_read_input_tokens), want, got)
        u = usage_from(RateLimitError(7))
        self.assertEqual((u.got_429, u.retry_after), (True, 7.0))
        with self.assertRaises(ValueError):
            usage_from(NS(tokens=5))

    def test_backoff_is_full_jitter_never_below_retry_after(self):
        for attempt in range(12):
            ceiling = min(30.0, 2.0 ** attempt)
            for u in (0.0, 0.5, 0.999):
                d = sluice.backoff_delay_s(attempt, 1.0, 30.0, None, u)
                self.assertTrue(0 <= d <= ceiling, (attempt, u, d))
                self.assertGreaterEqual(sluice.backoff_delay_s(attempt, 1.0, 30.0, 45.0, u), 45.0)

    def test_typed_package(self):
        pkg = os.path.dirname(sluice.__file__)
        self.assertTrue(os.path.exists(os.path.join(pkg, "py.typed")))
        for cls in (sluice.LimitExceeded, sluice.Rejected, sluice.Unreachable,
                    sluice.Suspended, sluice.ExceedsCapacity, sluice.MaxWaitExceeded):
            self.assertTrue(issubclass(cls, sluice.Error), cls)


class Leases(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = daemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.close()

    def client(self, agent, **kw):
        c = sluice.Client(url=self.d.url, agent=agent, **kw)
        self.addCleanup(c.close)
        return c

    def in_flight(self):
        return self.client("observer").get_pool()["leases_in_flight"]

    def test_with_lease_settles_what_was_recorded(self):
        c = self.client("sdk-record")
        chat = NS(prompt_tokens=100, completion_tokens=7, prompt_tokens_details=NS(cached_tokens=40))
        with c.lease(input_tokens=200, output_tokens=50, model="gpt-4.1") as lease:
            self.assertIsInstance(lease.lease, sluice.Lease)
            self.assertEqual(lease.lease["lease"], lease.id)  # the dict-era accessor
            self.assertEqual(lease.max_tokens, 50)
            lease.record(chat)
        self.assertEqual(lease.result.adjust_output_tokens, 50 - 7)
        self.assertEqual(lease.result.adjust_input_tokens, 200 - 60)
        self.assertEqual(self.in_flight(), 0)

    def test_an_exception_cancels_the_lease(self):
        c = self.client("sdk-raise")
        with self.assertRaises(KeyError):
            with c.lease(input_tokens=100, output_tokens=10) as lease:
                raise KeyError("the model call failed")
        self.assertEqual(self.in_flight(), 0)
        with self.assertRaises(sluice.Conflict) as e:  # cancelled: nothing left to cancel
            c.cancel(lease.lease)
        self.assertEqual(e.exception.code, "already_settled")

    def test_extend_moves_the_lease_expiry(self):
        c = self.client("sdk-extend")
        with c.lease(input_tokens=10, output_tokens=10, ttl=5) as lease:
            before = lease.lease.expires_at
            c.extend(lease.lease, 300)
            self.assertGreater(lease.lease.expires_at, before + 200)
            lease.record({"input_tokens": 10, "output_tokens": 1})

    def test_a_clean_exit_without_record_settles_as_reserved(self):
        c = self.client("sdk-norecord")
        with c.lease(input_tokens=100, output_tokens=10) as lease:
            pass
        self.assertEqual((lease.result.adjust_input_tokens, lease.result.adjust_output_tokens),
                         (0, 0))

    def test_a_caught_429_is_settled_as_one_and_backed_off(self):
        c = self.client("sdk-429")
        with self.assertRaises(RateLimitError):
            with c.lease(input_tokens=100, output_tokens=10) as lease:
                raise RateLimitError(3)
        self.assertGreaterEqual(lease.result.backoff_s, 3.0)
        self.assertFalse(lease.result.counted)  # a refused call teaches nothing
        t0 = time.monotonic()
        with self.assertRaises(sluice.Rejected) as e:  # the next acquire backs off first
            c.acquire(input_tokens=10, output_tokens=10, max_wait_s=0.5)
        self.assertEqual(e.exception.reason, "backoff")
        self.assertLess(time.monotonic() - t0, 0.5)

    def test_lease_for_is_sized_by_the_estimator(self):
        c = self.client("sdk-estimate")
        est = c.estimate(ANTHROPIC_BODY)
        self.assertTrue(est.exact)
        self.assertGreater(est.cached_tokens, 100)
        self.assertEqual(est.output_tokens, 300)
        with c.lease_for(ANTHROPIC_BODY) as lease:
            self.assertEqual(lease.estimate, est)
            # a cold cache: the prefix is charged as input
            self.assertEqual(lease.lease.charged_input_tokens,
                             est.input_tokens + est.cached_tokens)
            self.assertEqual(lease.max_tokens, 300)
            lease.record({"input_tokens": est.input_tokens, "output_tokens": 20,
                          "cache_creation_input_tokens": est.cached_tokens})
        self.assertEqual(lease.result.estimate_error, 0)

    def test_errors_are_one_tree_carrying_the_answer(self):
        c = self.client("sdk-errors")
        with self.assertRaises(sluice.ExceedsCapacity) as e:
            c.acquire(input_tokens=10, output_tokens=10 ** 7)
        self.assertEqual(e.exception.code, "exceeds_capacity")
        self.assertIn("output", e.exception.message)
        with self.assertRaises(sluice.InvalidRequest) as e:
            c.estimate({"messages": [{"role": "user", "content": [{"type": "foo"}]}]})
        self.assertIn("request.messages[0]", e.exception.message)
        with self.assertRaises(sluice.NotFound):
            c.settle("l_1", input_tokens=1, output_tokens=1)
        with self.assertRaises(sluice.NotFound):
            c.check("no.such.limit")


class FailOpen(unittest.TestCase):
    def test_stopped_sluiced_gives_a_local_share_and_it_comes_back(self):
        d = daemon()
        self.addCleanup(d.close)
        lines = []
        c = sluice.Client(url=d.url, agent="sdk-local", fleet_size=4, probe_interval_s=0.3,
                          log=lines.append)
        self.addCleanup(c.close)
        with c.lease(input_tokens=100, output_tokens=10) as lease:  # learns the pool's limits
            lease.record({"input_tokens": 100, "output_tokens": 10})
        d.stop()
        t0 = time.monotonic()
        with c.lease(input_tokens=100, output_tokens=10) as lease:
            self.assertTrue(lease.lease.local)
            self.assertTrue(lease.id.startswith("local-"))
            lease.record({"input_tokens": 90, "output_tokens": 5})
        self.assertLess(time.monotonic() - t0, 2.0)  # one connect failure, then local
        self.assertTrue(lease.result.settled_locally)
        self.assertEqual(c.mode, "local")
        self.assertEqual(len(lines), 1)
        self.assertIn("ALERT agent sdk-local", lines[0])
        # the share is the pool's limits / fleet_size: 25000 input tokens a minute
        with self.assertRaises(sluice.ExceedsCapacity):
            c.acquire(input_tokens=30000, output_tokens=10)
        with self.assertRaises(sluice.MaxWaitExceeded):  # fits, not now
            c.acquire(input_tokens=24990, output_tokens=10, max_wait_s=0)
        with self.assertRaises(sluice.Unreachable):  # limits are never decided locally
            c.check("anything")
        with self.assertRaises(sluice.Unreachable):
            sluice.Client(url=d.url, agent="sdk-closed", fail_closed=True).acquire(
                input_tokens=1, output_tokens=1)
        d.start()
        time.sleep(0.5)  # past the probe interval (0.3 s ±50%)
        lease = c.acquire(input_tokens=10, output_tokens=10)
        self.assertFalse(lease.local)
        self.assertEqual(c.mode, "coordinated")
        self.assertIn("answers again", lines[-1])
        c.cancel(lease)


    def test_a_kept_alive_connection_closed_by_a_restart_is_sent_again(self):
        d = daemon()
        self.addCleanup(d.close)
        lines = []
        c = sluice.Client(url=d.url, agent="sdk-stale", log=lines.append)
        self.addCleanup(c.close)
        ac = sluice.AsyncClient(url=d.url, agent="sdk-astale", log=lines.append)

        async def main():
            opened = ac.connections_opened
            for restart in (False, True):
                if restart:  # both pools now hold a connection sluiced closed
                    d.stop()
                    d.start()
                with c.lease(input_tokens=10, output_tokens=10) as lease:
                    lease.record({"input_tokens": 10, "output_tokens": 1})
                self.assertFalse(lease.lease.local)
                async with ac.lease(input_tokens=10, output_tokens=10) as alease:
                    alease.record({"input_tokens": 10, "output_tokens": 1})
                self.assertFalse(alease.lease.local)
            self.assertEqual(ac.connections_opened - opened, 2)  # one more after the restart

        asyncio.run(main())
        asyncio.run(main())  # another event loop: the first loop's connections are dropped
        self.assertEqual(lines, [])  # never thought sluiced was gone
        self.assertEqual(c.mode, "coordinated")

    def test_the_asyncio_client_fails_open_the_same_way(self):
        port = free_port()  # nothing listens there
        lines = []

        async def main():
            async with sluice.AsyncClient(url="http://127.0.0.1:%d" % port, agent="sdk-alocal",
                                          local_input_tpm=1000, local_output_tpm=1000,
                                          local_rpm=10, log=lines.append) as c:
                async with c.lease(input_tokens=600, output_tokens=10) as lease:
                    lease.record({"input_tokens": 500, "output_tokens": 5})
                self.assertTrue(lease.lease.local)
                self.assertEqual(lease.result.adjust_input_tokens, 100)
                with self.assertRaises(sluice.MaxWaitExceeded):  # 500 left of 1000 a minute
                    await c.acquire(input_tokens=900, output_tokens=1, max_wait_s=0)
                body = {"max_tokens": 77, "messages": [{"role": "user", "content": "x" * 400}]}
                async with c.lease_for(body) as lease:  # counted as the proxy's fallback
                    lease.record({"input_tokens": 100, "output_tokens": 7})
                self.assertEqual((lease.estimate.exact, lease.max_tokens), (False, 77))
                self.assertGreater(lease.estimate.input_tokens, 100)
                with self.assertRaises(sluice.Unreachable):
                    await c.check("tool.call")

        asyncio.run(main())
        self.assertEqual(len(lines), 1, lines)


class Auth(unittest.TestCase):
    def test_provider_headers_an_agent_token_may_not_send_are_reported(self):
        d = daemon("auth:\n  tokens:\n    - token: worker-token-1\n      agent: w1\n")
        self.addCleanup(d.close)
        c = sluice.Client(url=d.url, agent="w1", token="worker-token-1")
        self.addCleanup(c.close)
        with c.lease(input_tokens=100, output_tokens=10) as lease:
            lease.record({"input_tokens": 60, "output_tokens": 4},
                         headers={"anthropic-ratelimit-input-tokens-limit": "1"})
        self.assertEqual(lease.result.headers_ignored, 1)
        self.assertEqual(lease.result.adjust_input_tokens, 40)  # applied without them


class Environment(unittest.TestCase):
    def test_default_client_follows_the_environment(self):
        keys = ("SLUICE_URL", "SLUICE_AGENT")
        saved = {k: os.environ.get(k) for k in keys}
        self.addCleanup(lambda: [os.environ.pop(k, None) if v is None else
                                 os.environ.__setitem__(k, v) for k, v in saved.items()])
        os.environ["SLUICE_URL"] = "http://127.0.0.1:1"
        os.environ["SLUICE_AGENT"] = "first"
        a = sluice.default_client()
        self.assertIs(sluice.default_client(), a)
        os.environ["SLUICE_AGENT"] = "second"
        b = sluice.default_client()
        self.assertIsNot(a, b)
        self.assertEqual((b.agent, b.url), ("second", "http://127.0.0.1:1"))


class Asyncio(unittest.TestCase):
    def test_200_held_waits_on_one_loop_without_threads(self):
        d = daemon()
        self.addCleanup(d.close)
        threads_before = threading.active_count()

        async def main():
            loop = asyncio.get_running_loop()
            # pool slow: 510 input tokens of capacity refilled at 10 a second; the 200
            # waits of 2 tokens each queue behind a lease of all of it
            async with sluice.AsyncClient(url=d.url, agent="sdk-async-big",
                                          pool="slow") as big_c:
                big = await big_c.acquire(input_tokens=510, output_tokens=10)
                clients = [sluice.AsyncClient(url=d.url, agent="sdk-async-%d" % i, pool="slow")
                           for i in range(4)]
                waits = [asyncio.ensure_future(clients[i % 4].acquire(
                    input_tokens=2, output_tokens=10)) for i in range(200)]
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    pool = await big_c.get_pool()
                    if pool["queue"]["depth"] >= 150:
                        break
                self.assertGreaterEqual(pool["queue"]["depth"], 150)  # held, not rejected
                self.assertEqual(threading.active_count(), threads_before)
                await big_c.cancel(big)
                leases = await asyncio.wait_for(asyncio.gather(*waits), 30)
                self.assertEqual(len({x.id for x in leases}), 200)
                for i, x in enumerate(leases):
                    await clients[i % 4].settle(x, input_tokens=2, output_tokens=1)
                self.assertIsNone(getattr(loop, "_default_executor", None))
                opened = sum(c.connections_opened for c in clients)
                self.assertLessEqual(opened, 200 + 8)  # one per held wait, then reused
                async with clients[0].lease(input_tokens=10, output_tokens=10) as lease:
                    lease.record({"input_tokens": 10, "output_tokens": 2})
                self.assertEqual(lease.result.adjust_output_tokens, 8)
                for c in clients:
                    await c.close()

        asyncio.run(main())
        self.assertEqual(threading.active_count(), threads_before)


if __name__ == "__main__":
    unittest.main()
