"""test_suspend.py - a suspension holds on every replica sharing one Redis, and so does its release.

Replica A flags and suspends a runaway (its anomaly detection judges A's traffic); the
record is in Redis (`sluice:{agents}:suspended`), so replica B refuses the agent within
the documented bound (docs/observe.md, "Suspension": B reads the hash every 0.25 s, plus
one Redis round trip) and lists it as suspended; a release on B lets A serve it again
and empties A's windows. A replica started afterwards refuses the agent too, and a
Redis restarted empty gets the suspensions back from the replicas. Every wait
is bounded; the measured delays are printed, never asserted."""
import time
import unittest

from redis_harness import Redis, Sluiced, wait_until
from test_anomaly import ADMIN, AGENT, CONFIG as ANOMALY_CONFIG

# test_anomaly.py's fleet (its judge, tokens and limit), suspending, on Redis.
CONFIG = "backend: %s\n" + ANOMALY_CONFIG.replace("%s", "true")


def served(r, agent):
    st, body, _ = r.call("POST", "/v1/leases",
                         {"agent": agent, "input_tokens": 10, "output_tokens": 10}, token=AGENT)
    if st == 200:
        st2, b2, _ = r.call("POST", "/v1/leases/%s/settle" % body["lease"],
                            {"input_tokens": 10, "output_tokens": 10}, token=AGENT)
        assert st2 == 200, b2
        return True
    assert (st, body.get("reason")) == (429, "suspended"), (st, body)
    return False


def refused(r, agent):
    return not served(r, agent)


def agents(r):
    st, body, _ = r.call("GET", "/v1/agents", token=ADMIN)
    assert st == 200, body
    return {a["name"]: a for a in body["agents"]}


def delay_until(pred, timeout_s):
    t0 = time.monotonic()
    ok = wait_until(pred, timeout_s, step_s=0.01)
    return ok, time.monotonic() - t0


class SuspendAcrossReplicas(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        url = self.redis.url(tick_ms=200, timeout_ms=300, cold_start="full")
        self.config = CONFIG % url
        self.replicas = []

    def tearDown(self):
        for r in self.replicas:
            r.stop()
        self.redis.close()

    def stored(self):
        """The agents in Redis's hash (without the marker field "")."""
        return [f for f in self.redis.command("HKEYS", "sluice:{agents}:suspended") if f]

    def replica(self):
        r = Sluiced(self.config)
        self.replicas.append(r)
        self.assertTrue(wait_until(lambda: r.call("GET", "/readyz")[0] == 200, 10))
        return r

    def test_suspended_on_a_is_refused_on_b_and_released_on_b_is_served_on_a(self):
        a, b = self.replica(), self.replica()
        self.assertTrue(served(b, "runaway"))
        for i in range(8):
            for _ in range(4):
                self.assertTrue(served(a, "w%d" % i))
        for _ in range(80):
            if refused(a, "runaway"):
                break
        self.assertTrue(wait_until(lambda: refused(a, "runaway"), 5), "A never suspended it")
        self.assertEqual(self.stored(), ["runaway"])

        ok, waited_s = delay_until(lambda: refused(b, "runaway"), 10)
        self.assertTrue(ok, "B still serves the runaway")
        print("refused on B %.3f s after A suspended it" % waited_s)
        self.assertTrue(served(b, "w1"))
        rec = agents(b)["runaway"]
        self.assertTrue(rec["suspended"])
        self.assertEqual((rec["suspension"]["reason"], rec["suspension"]["metric"]),
                         ("anomaly", "requests"))
        st, fleet, _ = b.call("GET", "/v1/fleet", token=ADMIN)
        self.assertEqual([f["agent"] for f in fleet["anomalies"] if f["suspended"]], ["runaway"])

        # A replica started now refuses it as well.
        c = self.replica()
        ok, _ = delay_until(lambda: refused(c, "runaway"), 10)
        self.assertTrue(ok)

        # Released on B: served on A (whose windows were emptied: not flagged again at once).
        st, body, _ = b.call("POST", "/v1/agents/runaway/release", token=AGENT)
        self.assertEqual(st, 403, body)
        st, body, _ = b.call("POST", "/v1/agents/runaway/release", token=ADMIN)
        self.assertEqual((st, body["status"]), (200, "released"), body)
        self.assertEqual(self.stored(), [])
        self.assertTrue(served(b, "runaway"))
        ok, waited_s = delay_until(lambda: served(a, "runaway"), 10)
        self.assertTrue(ok, "A still refuses the released agent")
        print("served on A %.3f s after B released it" % waited_s)
        self.assertTrue(wait_until(lambda: not agents(a)["runaway"]["suspended"], 5))
        st, fleet, _ = a.call("GET", "/v1/fleet", token=ADMIN)
        self.assertEqual([f["agent"] for f in fleet["anomalies"]], [])
        self.assertTrue(wait_until(lambda: served(c, "runaway"), 10))
        st, body, _ = a.call("POST", "/v1/agents/runaway/release", token=ADMIN)
        self.assertEqual(st, 404, body)

    def test_an_admin_suspension_on_one_replica_holds_on_the_others(self):
        a, b = self.replica(), self.replica()
        st, body, _ = b.call("POST", "/v1/agents/looper/suspend", token=ADMIN)
        self.assertEqual((st, body["reason"]), (200, "admin"), body)
        self.assertTrue(refused(b, "looper"))
        ok, waited_s = delay_until(lambda: refused(a, "looper"), 10)
        self.assertTrue(ok)
        print("admin suspension on B refused on A after %.3f s" % waited_s)
        st, again, _ = a.call("POST", "/v1/agents/looper/suspend", token=ADMIN)
        self.assertEqual((st, again["suspended_at"]), (200, body["suspended_at"]), again)
        st, body, _ = a.call("POST", "/v1/agents/looper/release", token=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertTrue(wait_until(lambda: served(b, "looper"), 10))

    def test_a_suspension_outlives_redis_losing_its_state(self):
        a, b = self.replica(), self.replica()
        st, body, _ = a.call("POST", "/v1/agents/looper/suspend", token=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertTrue(wait_until(lambda: refused(b, "looper"), 10))
        self.redis.restart_empty()
        # The replicas tell a lost hash from released agents and write theirs back.
        self.assertTrue(wait_until(
            lambda: "looper" in self.stored(), 10))
        self.assertTrue(wait_until(lambda: a.call("GET", "/readyz")[0] == 200, 10))
        self.assertTrue(refused(a, "looper"))
        self.assertTrue(refused(b, "looper"))
        st, body, _ = b.call("POST", "/v1/agents/looper/release", token=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertTrue(wait_until(lambda: served(a, "looper"), 10))

    def test_with_redis_down_a_release_is_refused_and_changes_nothing(self):
        a = self.replica()
        st, body, _ = a.call("POST", "/v1/agents/looper/suspend", token=ADMIN)
        self.assertEqual(st, 200, body)
        self.redis.stop_signal()
        try:
            # Once the replica has marked Redis down (a command unanswered for timeout_ms)
            # a release is refused without being sent. (One sent just before may still be
            # applied by Redis after its timeout: the replicas then follow Redis.)
            self.assertTrue(wait_until(lambda: a.call("GET", "/readyz")[0] == 503, 10))
            st, body, _ = a.call("POST", "/v1/agents/looper/release", token=ADMIN)
            self.assertEqual(st, 503, body)
            self.assertTrue(refused(a, "looper"))  # what the replica knew still holds
        finally:
            self.redis.cont_signal()
        self.assertEqual(self.stored(), ["looper"])


if __name__ == "__main__":
    unittest.main()
