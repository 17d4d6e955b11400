"""test_proxy_cold_first_call.py - the first call through a freshly started sluiced on Redis (cold_start=empty) is not held for the refill.

The cases of tests/integration/proxy/test_cold_first_call.py with sluiced on a private
redis-server whose URL says `cold_start=empty` (or `full`): sluice.lua's pool reports its
cold-start window (`cold_until`), and the proxy's probe is leased, sent and applied
through the Redis backend as on the memory one.
"""
import unittest

import proxy_cases
from redis_harness import Redis

cases = proxy_cases.load("test_cold_first_call.py")
server = {}


def setUpModule():
    server["redis"] = Redis()
    cases.backend_config = lambda cold_start: "backend: %s\n" % server["redis"].url(
        cold_start=cold_start, tick_ms=200, timeout_ms=300)


def tearDownModule():
    server["redis"].close()


class RedisColdFirstCall(cases.ColdFirstCall):
    def setUp(self):
        server["redis"].command("FLUSHALL")  # a pool Redis holds no history of: cold


if __name__ == "__main__":
    unittest.main()
