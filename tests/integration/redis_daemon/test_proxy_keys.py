"""test_proxy_keys.py - a pool of several keys through the proxy, on the Redis backend.

The cases of tests/integration/proxy/test_keys.py run with sluiced on a private
redis-server: each key is a pool of sluice.lua's, and the key is picked from the pools'
state read from Redis (an asynchronous answer, where the memory backend's is immediate).
"""
import unittest

import proxy_cases

# RedisKeysOneQueue: one queue over the keys on sluice.lua: the key that frees first takes
# the call queued on the other (KQ in sluice.lua, over the keys' slots of one Redis server).
setUpModule, tearDownModule, (RedisTwoKeys, RedisKeysOneQueue) = proxy_cases.on_redis(
    __name__, "test_keys.py", "TwoKeys", "KeysOneQueue")

if __name__ == "__main__":
    unittest.main()
