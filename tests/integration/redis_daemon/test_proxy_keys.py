"""test_proxy_keys.py - a pool of several keys through the proxy, on the Redis backend.

The cases of tests/integration/proxy/test_keys.py run with sluiced on a private
redis-server: each key is a pool of sluice.lua's, and the key is picked from the pools'
state read from Redis (an asynchronous answer, where the memory backend's is immediate).
"""
import importlib.util
import os
import sys
import unittest

from redis_harness import Redis

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# As test_proxy_resync.py: the proxy tests import their harness as `harness`.
_server_harness = sys.modules.get("harness")
sys.modules["harness"] = _load("proxy_harness", os.path.join(HERE, "..", "proxy", "harness.py"))
cases = _load("proxy_test_keys", os.path.join(HERE, "..", "proxy", "test_keys.py"))
sys.modules["harness"] = _server_harness

REDIS = None


def setUpModule():
    global REDIS
    REDIS = Redis()
    cases.backend_config = lambda: "backend: %s\n" % REDIS.url(
        cold_start="full", tick_ms=200, timeout_ms=300)


def tearDownModule():
    REDIS.close()


class RedisTwoKeys(cases.TwoKeys):
    def setUp(self):
        REDIS.command("FLUSHALL")
        super().setUp()


class RedisKeysOneQueue(cases.KeysOneQueue):
    """One queue over the keys on sluice.lua: the key that frees first takes the call
    queued on the other (KQ in sluice.lua, over the keys' slots of one Redis server)."""

    def setUp(self):
        REDIS.command("FLUSHALL")


del cases.TwoKeys, cases.BadKeys, cases.KeysOneQueue

if __name__ == "__main__":
    unittest.main()
