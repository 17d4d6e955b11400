"""test_proxy_resync.py - the proxy's resync from provider headers, on the Redis backend.

The same cases as tests/integration/proxy/test_resync.py (issue 24 item 1, issue 25 item
7), run with sluiced on a private redis-server: the headers reach sluice.lua's resync
when they arrive, through the backend's resync operation, and the settle's refund stands.
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


# The proxy tests import their harness as `harness`, a name redis_harness gave the server
# tests' harness: load the proxy's under that name while its test module loads.
_server_harness = sys.modules.get("harness")
sys.modules["harness"] = _load("proxy_harness", os.path.join(HERE, "..", "proxy", "harness.py"))
cases = _load("proxy_test_resync", os.path.join(HERE, "..", "proxy", "test_resync.py"))
sys.modules["harness"] = _server_harness

REDIS = None


def setUpModule():
    global REDIS
    REDIS = Redis()
    cases.backend_config = lambda: "backend: %s\n" % REDIS.url(
        cold_start="full", tick_ms=200, timeout_ms=300)


def tearDownModule():
    REDIS.close()


class RedisResyncAgreesWithTheCall(cases.ResyncAgreesWithTheCall):
    def setUp(self):
        REDIS.command("FLUSHALL")


class RedisProxyHeadersAreBounded(cases.ProxyHeadersAreBounded):
    def setUp(self):
        REDIS.command("FLUSHALL")


del cases.ResyncAgreesWithTheCall, cases.ProxyHeadersAreBounded

if __name__ == "__main__":
    unittest.main()
