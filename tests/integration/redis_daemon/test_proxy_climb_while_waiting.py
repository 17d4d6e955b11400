"""test_proxy_climb_while_waiting.py - one agent's call held for the refill lets the margin climb meanwhile, on the Redis backend.

The case of tests/integration/proxy/test_climb_while_waiting.py with sluiced on a private
redis-server: the probes' leases, their headers' steps and the held call's grant go
through sluice.lua as through the engine.
"""
import unittest

import proxy_cases

setUpModule, tearDownModule, (RedisClimbWhileWaiting,) = proxy_cases.on_redis(
    __name__, "test_climb_while_waiting.py", "ClimbWhileWaiting")

if __name__ == "__main__":
    unittest.main()
