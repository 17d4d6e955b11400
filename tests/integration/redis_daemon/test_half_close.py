"""test_half_close.py - Redis backend (asynchronous decisions): a client that shuts its write
side after whole requests hears every answer, as on the memory backend; one that closes
while it waits still leaves the queue."""
import unittest

from redis_harness import Redis, replica, wait_until
from halfclose import HalfClosedCases

POOL = """  default:
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 600
    ticket_idle_s: 600
"""


class HalfClosedRedis(HalfClosedCases, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = Redis()
        cls.s = replica(cls.redis, POOL, fail="closed", cold_start="full")
        assert wait_until(lambda: cls.s.call("GET", "/readyz")[0] == 200, 10)

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()
        cls.redis.close()


if __name__ == "__main__":
    unittest.main()
