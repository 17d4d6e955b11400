"""test_half_close.py - memory backend: a client that shuts its write side after whole
requests hears every answer; one that closes while it waits still leaves the queue."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SMALL_POOL, Sluiced  # noqa: E402
from halfclose import HalfClosedCases  # noqa: E402


class HalfClosedMemory(HalfClosedCases, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Sluiced("pools:\n  default:" + SMALL_POOL)

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()


if __name__ == "__main__":
    unittest.main()
