"""test_proxy_resync.py - the proxy's resync from provider headers, on the Redis backend.

The same cases as tests/integration/proxy/test_resync.py (issue 24 items 1 and 6, issue 25
item 7), run with sluiced on a private redis-server: the headers reach sluice.lua's resync
when they arrive, through the backend's resync operation, and the settle's refund stands.
"""
import unittest

import proxy_cases

setUpModule, tearDownModule, (RedisResyncAgreesWithTheCall,
                              RedisProxyHeadersAreBounded,
                              RedisLeaseApiSettleKeepsRefunds,
                              RedisARefusedCallsHeadersCountWithoutIt) = proxy_cases.on_redis(
    __name__, "test_resync.py", "ResyncAgreesWithTheCall", "ProxyHeadersAreBounded",
    "LeaseApiSettleKeepsRefunds", "ARefusedCallsHeadersCountWithoutIt")

if __name__ == "__main__":
    unittest.main()
