"""test_teams.py - teams' weights and members from the config reach sluice.lua's queue: the
Redis backend answers the scenario of tests/integration/server/teams_case.py like the
memory backend."""
import os
import sys
import unittest

from redis_harness import Redis, replica, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from teams_case import CAPS, POOL, check_positions  # noqa: E402


class Teams(unittest.TestCase):
    def test_team_weights_from_the_config_order_the_redis_queue(self):
        redis = Redis()
        try:
            with replica(redis, POOL + CAPS, cold_start="full") as s:
                self.assertTrue(wait_until(lambda: s.call("GET", "/readyz")[0] == 200, 10))
                check_positions(self, s)
        finally:
            redis.close()


if __name__ == "__main__":
    unittest.main()
