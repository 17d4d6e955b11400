"""test_agent_forget.py - on the Redis backend, idle agents are forgotten in Redis too: their
records and their copies of "*" caps leave the pool's keys (sluice.lua agent_forget), an
agent holding a lease stays (docs/server.md "agents")."""
import unittest

from redis_harness import Redis, replica, wait_until

POOL = """  default:
    input_tpm: 100000000
    output_tpm: 100000000
caps:
  agents:
    "*": {max_rpm: 1000}
agents:
  forget_idle_s: 1
"""


class Forget(unittest.TestCase):
    def test_idle_agents_leave_redis_and_a_holder_stays(self):
        redis = Redis()
        try:
            with replica(redis, POOL, cold_start="full") as s:
                self.assertTrue(wait_until(lambda: s.call("GET", "/readyz")[0] == 200, 10))
                st, held, _ = s.lease("holder", 10)
                self.assertEqual(st, 200, held)
                for i in range(30):
                    st, body, _ = s.lease("a%d" % i, 10)
                    self.assertEqual(st, 200, body)
                    self.assertEqual(s.call("DELETE", "/v1/leases/" + body["lease"])[0], 200)
                names = redis.command("SMEMBERS", "sluice:{default}:agents")
                self.assertEqual(len(names), 31)
                # "*" caps (max_rpm 1000) refill within 60 / 1000 s of each request.
                self.assertTrue(wait_until(lambda: s.metric("sluice_agents_known") == 1, 20),
                                s.metric("sluice_agents_known"))
                self.assertEqual(redis.command("SMEMBERS", "sluice:{default}:agents"),
                                 ["holder"])
                self.assertEqual(redis.command("EXISTS", "sluice:{default}:A:a0",
                                               "sluice:{default}:H:a:a0"), 0)
                self.assertEqual(redis.command("EXISTS", "sluice:{default}:A:holder"), 1)
                st, body, _ = s.call("GET", "/v1/agents")
                self.assertEqual([a["name"] for a in body["agents"]], ["holder"])
        finally:
            redis.close()


if __name__ == "__main__":
    unittest.main()
