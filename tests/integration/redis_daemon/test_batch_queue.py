"""test_batch_queue.py - the batch pool's processing-queue bound holds across replicas.

Two sluiced replicas on one redis-server proxy to one sluice-emu. The requests of the
batches created through replica A count against a create through replica B (refused 429
in the provider's shape, before the provider sees it), and a batch that ended leaves the
shared count once, whichever replica sees it end (docs/proxy.md, "The processing queue").
"""
import importlib.util
import json
import os
import sys
import time
import unittest

from redis_harness import Redis

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# As test_proxy_keys.py: the proxy harness, loaded under its own name.
proxy = _load("proxy_harness_batchq", os.path.join(HERE, "..", "proxy", "harness.py"))

REDIS = None


def setUpModule():
    global REDIS
    REDIS = Redis()


def tearDownModule():
    REDIS.close()


def config(emu, bound):
    return ("backend: %s\npools:\n" % REDIS.url(tick_ms=200, timeout_ms=300) +
            proxy.pool_yaml("claude-batch", emu.url, "anthropic", "rpm: 1000",
                            "batch: true\nmax_batch_requests: %d" % bound))


def batch_of(n, prefix):
    return {"requests": [{"custom_id": "%s%d" % (prefix, i), "params": proxy.message("hi")}
                         for i in range(n)]}


def batches(s, method, path="", body=None, agent="a"):
    headers = {"x-api-key": "t", "anthropic-version": "2023-06-01", "x-sluice-agent": agent}
    if body is not None:
        headers["content-type"] = "application/json"
    status, h, payload = s.request(method, "/anthropic/v1/messages/batches" + path, body, headers)
    return status, h, json.loads(payload)


class SharedQueue(unittest.TestCase):
    def setUp(self):
        REDIS.command("FLUSHALL")

    def test_creates_through_one_replica_count_against_a_create_through_another(self):
        with proxy.Emu(proxy.EMU_FAST + ["--batch-seconds", "0.5"]) as emu, \
                proxy.Sluiced(config(emu, 4)) as a, proxy.Sluiced(config(emu, 4)) as b:
            status, _, first = batches(a, "POST", body=batch_of(3, "a"), agent="a")
            self.assertEqual(status, 200, first)
            created = emu.stats()["batches"]["anthropic"]["batches"]
            status, h, refused = batches(b, "POST", body=batch_of(2, "b"), agent="b")
            self.assertEqual(status, 429, refused)
            self.assertEqual(refused["error"]["type"], "rate_limit_error")
            self.assertIn("has 3 requests", refused["error"]["message"])
            self.assertIn("max_batch_requests 4", refused["error"]["message"])
            self.assertEqual(h["retry-after"], "60")
            self.assertEqual(emu.stats()["batches"]["anthropic"]["batches"], created)
            # One more fits beside A's three, through B.
            status, _, one = batches(b, "POST", body=batch_of(1, "c"), agent="b")
            self.assertEqual(status, 200, one)
            status, _, _ = batches(a, "POST", body=batch_of(1, "d"), agent="a")
            self.assertEqual(status, 429)
            # A's batch ends; both replicas see it: it leaves the count once (3), so B's
            # batch of 1 still counts and 3 more fit, 4 do not.
            time.sleep(0.7)
            for s in (a, b):
                status, _, ended = batches(s, "GET", "/" + first["id"])
                self.assertEqual(ended["processing_status"], "ended", ended)
            status, _, _ = batches(a, "POST", body=batch_of(4, "e"), agent="a")
            self.assertEqual(status, 429)
            status, _, fits = batches(b, "POST", body=batch_of(3, "f"), agent="b")
            self.assertEqual(status, 200, fits)


if __name__ == "__main__":
    unittest.main()
