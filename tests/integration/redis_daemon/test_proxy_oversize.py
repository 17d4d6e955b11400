"""test_proxy_oversize.py - a call above the pool's starting capacity but within its limit, on the Redis backend.

The same cases as tests/integration/proxy/test_oversize.py (issue 24: one agent as fast as
direct on any call size), with sluiced on a private redis-server: sluice.lua waits for the
starting capacity and charges the whole need at the grant, as the engine does.
"""
import unittest

import proxy_cases

setUpModule, tearDownModule, (RedisOversize,) = proxy_cases.on_redis(
    __name__, "test_oversize.py", "Oversize")

if __name__ == "__main__":
    unittest.main()
