"""test_proxy_long_context.py - long-context calls and the standard RPM through the proxy,
on the Redis backend.

The case of tests/integration/proxy/test_long_context_rpm.py runs with sluiced on a private
redis-server: the long-context pool "claude:long_context" takes each grant's request from
its parent's bucket in the parent's slot (RP in sluice.lua, on one Redis server), and the
burst above the emulator's RPM meets none of its 429s; with `keys:`, each key's
long-context pool shares that key's bucket.
"""
import unittest

import proxy_cases

setUpModule, tearDownModule, (RedisLongContextRpm, RedisLongContextKeys) = proxy_cases.on_redis(
    __name__, "test_long_context_rpm.py", "LongContextRpm", "LongContextKeys")

if __name__ == "__main__":
    unittest.main()
