"""test_suspend_restart.py - a suspended agent stays suspended across kill -9 of sluiced (memory backend).

The suspension is the backend's record (docs/observe.md, "Suspension"): with a
state_file it is journaled before sluiced answers, so a restart, even kill -9, still
refuses the agent 429 `suspended` from its first request until an admin releases it.
An admin may also suspend explicitly (POST /v1/agents/{agent}/suspend). Every wait is
bounded; no timing gates a result."""
import os
import tempfile
import unittest

from harness import wait_until
from test_anomaly import ADMIN, AGENT, CONFIG as ANOMALY_CONFIG
from test_restart import Daemon

# test_anomaly.py's fleet (its judge, tokens and limit), suspending, on a state file.
CONFIG = "cold_start: full\nstate_file: %s\n" + ANOMALY_CONFIG.replace("%s", "true")


def lease(d, agent):
    return d.call("POST", "/v1/leases", {"agent": agent, "input_tokens": 10, "output_tokens": 10},
                  token=AGENT)


def served(d, agent):
    st, body = lease(d, agent)
    if st == 200:
        st2, b2 = d.call("POST", "/v1/leases/%s/settle" % body["lease"],
                         {"input_tokens": 10, "output_tokens": 10}, token=AGENT)
        assert st2 == 200, b2
        return True
    assert (st, body.get("reason")) == (429, "suspended"), (st, body)
    return False


def agents(d):
    st, body = d.call("GET", "/v1/agents", token=ADMIN)
    assert st == 200, body
    return {a["name"]: a for a in body["agents"]}


class SuspendRestart(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sluiced-suspend-")
        self.d = Daemon(self.tmp.name, CONFIG % os.path.join(self.tmp.name, "state"))

    def tearDown(self):
        self.d.stop()
        self.tmp.cleanup()

    def suspend_by_anomaly(self, d, agent):
        for i in range(8):
            for _ in range(4):
                self.assertTrue(served(d, "w%d" % i))
        for _ in range(80):
            if not served(d, agent):
                break
        self.assertTrue(wait_until(lambda: not served(d, agent), 5), "never suspended")

    def test_a_suspension_by_anomaly_survives_kill9_until_released(self):
        d = self.d.start()
        self.suspend_by_anomaly(d, "runaway")
        before = agents(d)["runaway"]
        self.assertTrue(before["suspended"])
        d.kill9()

        d.start()
        # Refused from the first request after the restart, lease and limit check alike.
        st, body = lease(d, "runaway")
        self.assertEqual((st, body.get("reason")), (429, "suspended"), body)
        st, body = d.call("POST", "/v1/limits/tool.call/check", {"agent": "runaway"},
                          token=AGENT)
        self.assertEqual((st, body.get("reason")), (429, "suspended"), body)
        self.assertTrue(served(d, "w1"))
        self.assertEqual(before["suspension"]["reason"], "anomaly")
        self.assertEqual(before["suspension"]["metric"], "requests")
        # Listed although this run's engine has never seen it, with the same record.
        a = agents(d)["runaway"]
        self.assertTrue(a["suspended"])
        self.assertEqual(a["suspension"], before["suspension"])
        st, fleet = d.call("GET", "/v1/fleet", token=ADMIN)
        self.assertEqual(st, 200, fleet)
        self.assertEqual([f["agent"] for f in fleet["anomalies"] if f["suspended"]], ["runaway"])

        # A release after the restart works, and is itself durable.
        st, body = d.call("POST", "/v1/agents/runaway/release", {}, token=AGENT)
        self.assertEqual(st, 403, body)
        st, body = d.call("POST", "/v1/agents/runaway/release", {}, token=ADMIN)
        self.assertEqual((st, body["status"]), (200, "released"), body)
        self.assertGreater(body["suspended_s"], 0)
        self.assertTrue(served(d, "runaway"))
        d.kill9()
        d.start()
        self.assertTrue(served(d, "runaway"))
        self.assertFalse(agents(d)["runaway"]["suspended"])
        st, body = d.call("POST", "/v1/agents/runaway/release", {}, token=ADMIN)
        self.assertEqual(st, 404, body)
        self.assertIn("not suspended", body["error"]["message"])

    def test_an_admin_suspends_explicitly_and_it_survives_a_restart(self):
        d = self.d.start()
        self.assertTrue(served(d, "looper"))
        st, body = d.call("POST", "/v1/agents/looper/suspend", {}, token=AGENT)
        self.assertEqual(st, 403, body)
        self.assertIn("admin", body["error"]["message"])
        st, body = d.call("POST", "/v1/agents/bad%20name/suspend", {}, token=ADMIN)
        self.assertEqual(st, 400, body)
        self.assertIn("'bad name'", body["error"]["message"])
        self.assertTrue(served(d, "looper"))  # refused requests changed nothing

        st, body = d.call("POST", "/v1/agents/looper/suspend", {}, token=ADMIN)
        self.assertEqual((st, body["status"], body["reason"]), (200, "suspended", "admin"), body)
        self.assertFalse(served(d, "looper"))
        # Suspending again answers the standing record.
        st, again = d.call("POST", "/v1/agents/looper/suspend", {}, token=ADMIN)
        self.assertEqual((st, again["suspended_at"]), (200, body["suspended_at"]), again)
        # An agent never seen may be suspended before it shows up.
        st, body = d.call("POST", "/v1/agents/future/suspend", {}, token=ADMIN)
        self.assertEqual(st, 200, body)
        d.kill9()

        d.start()
        self.assertFalse(served(d, "looper"))
        self.assertFalse(served(d, "future"))
        self.assertEqual(agents(d)["looper"]["suspension"]["reason"], "admin")
        st, body = d.call("POST", "/v1/agents/looper/release", {}, token=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertTrue(served(d, "looper"))
        self.assertFalse(served(d, "future"))


if __name__ == "__main__":
    unittest.main()
