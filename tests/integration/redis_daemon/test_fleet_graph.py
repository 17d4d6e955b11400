"""test_fleet_graph.py - GET /v1/fleet on one replica sees the task graph written through
another, and a lease naming a hub task counts no more of its dependants than the
token's max_unblocks (the Redis path's graph count, as the engine's)."""
import unittest

from redis_harness import Redis, replica, wait_until

POOLS = """  default:
    input_tpm: 6000
    output_tpm: 600000
"""


class FleetGraph(unittest.TestCase):
    def test_a_task_written_through_one_replica_counts_on_the_other(self):
        redis = Redis()
        a = b = None
        try:
            a = replica(redis, POOLS, cold_start="full")
            b = replica(redis, POOLS, cold_start="full")
            for r in (a, b):
                self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))
            # A task write on the Redis backend answers 200 (it used to store the task
            # and answer 503: the function's 'ok' was read as a lease reply).
            for task, body in (("build", {"state": "running"}),
                               ("review", {"depends_on": ["build"]})):
                st, got, _ = a.call("PUT", "/v1/tasks/" + task, body)
                self.assertEqual(st, 200, got)
                self.assertEqual(got["id"], task)
            self.assertEqual(a.call("GET", "/v1/fleet")[1]["tasks"],
                             {"waiting": 1, "running": 1, "done": 0})
            # b learns the graph from the backend (every 10 s), not from the writes.
            self.assertTrue(wait_until(
                lambda: b.call("GET", "/v1/fleet")[1]["tasks"] ==
                {"waiting": 1, "running": 1, "done": 0}, 15))
            st, got, _ = a.call("DELETE", "/v1/tasks/review")
            self.assertEqual(st, 200, got)
            self.assertTrue(wait_until(
                lambda: b.call("GET", "/v1/fleet")[1]["tasks"] ==
                {"waiting": 0, "running": 1, "done": 0}, 15))
        finally:
            for r in (a, b):
                if r:
                    r.stop()
            redis.close()

    def test_a_hub_task_gives_no_more_unblocks_than_the_token_may_claim(self):
        redis = Redis()
        r = None
        try:
            r = replica(redis, POOLS + "auth:\n  admin_token: admin-token-0001\n  tokens:\n"
                        "    - {token: worker-token, agent_prefix: worker-}\n",
                        cold_start="full")
            self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))
            admin = "admin-token-0001"
            st, got, _ = r.call("PUT", "/v1/tasks/hub", {"role": "worker", "state": "running"},
                                token=admin)
            self.assertEqual(st, 200, got)
            for i in range(12):
                st, got, _ = r.call("PUT", "/v1/tasks/leaf-%d" % i,
                                    {"depends_on": ["hub"], "state": "waiting"}, token=admin)
                self.assertEqual(st, 200, got)
            st, got, _ = r.call("POST", "/v1/leases", {"agent": "worker-7", "task": "hub",
                                "input_tokens": 10, "output_tokens": 10}, token="worker-token")
            self.assertEqual(st, 200, got)
            self.assertEqual(got["weight"], 5)  # 1 x (1 + 0.5 x 8), not 1 x (1 + 0.5 x 12)
        finally:
            if r:
                r.stop()
            redis.close()


if __name__ == "__main__":
    unittest.main()
