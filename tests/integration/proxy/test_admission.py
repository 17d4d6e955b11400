"""test_admission.py - the lease API and the proxy admit a call through one path: the same
identity (token, role, task) gets the same decision and status on both (src/server/core/admit.c)."""
import json
import unittest

from harness import Emu, Sluiced, message, pool_yaml

LIMITS = "input_tpm: 1000000\noutput_tpm: 60000\nrpm: 10000"
ADMIN = "admin-token-0001"


def config(emu):
    return ("pools:\n%s" % pool_yaml("claude", emu.url, "anthropic", LIMITS) +
            "auth:\n  admin_token: %s\n  tokens:\n" % ADMIN +
            "    - token: agent-token-workers\n      agent_prefix: worker-\n"
            "      roles: [worker]\n"
            "    - token: agent-token-leads\n      agent_prefix: lead-\n"
            "      roles: [worker, planner]\n")


class OneAdmission(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.emu = Emu()
        cls.sluiced = Sluiced(config(cls.emu))
        cls.sluiced.bearer = ADMIN
        admin = {"authorization": "Bearer " + ADMIN, "content-type": "application/json"}
        for task, role in (("plan-1", "planner"), ("work-1", "worker")):
            status, _, payload = cls.sluiced.request(
                "PUT", "/v1/tasks/" + task, {"role": role, "state": "running"}, headers=admin)
            assert status == 200, payload
        cls.n = 0

    @classmethod
    def tearDownClass(cls):
        cls.sluiced.stop()
        cls.sluiced.dir.cleanup()
        cls.emu.stop()

    def both(self, token, prefix, role=None, task=None, max_tokens=100):
        """Asks once through the lease API and once through the proxy with the same claims;
        returns ((status, error message, agent), (status, error message, agent))."""
        s = self.sluiced
        type(self).n += 1
        lease_agent, proxy_agent = "%sl%d" % (prefix, self.n), "%sp%d" % (prefix, self.n)
        body = {"agent": lease_agent, "input_tokens": 10, "output_tokens": max_tokens,
                "pool": "claude"}
        extra = {"x-sluice-pool": "claude"}
        if role:
            body["role"] = role
            extra["x-sluice-role"] = role
        if task:
            body["task"] = task
            extra["x-sluice-task"] = task
        status, _, payload = s.request("POST", "/v1/leases", body, headers={
            "authorization": "Bearer " + token, "content-type": "application/json"})
        lease = (status, json.loads(payload).get("error", {}), lease_agent)
        status, _, payload = s.anthropic(message(max_tokens=max_tokens), agent=proxy_agent,
                                         key=token, extra=extra)
        proxy = (status, json.loads(payload).get("error", {}), proxy_agent)
        return lease, proxy

    def role_of(self, agent):
        a = self.sluiced.agent(agent)
        return a and a["role"]

    def test_a_task_registered_as_planner_needs_a_token_allowed_planner_on_both(self):
        lease, proxy = self.both("agent-token-workers", "worker-", task="plan-1")
        self.assertEqual(lease[0], 403, lease)
        self.assertEqual(proxy[0], 403, proxy)
        self.assertEqual(proxy[1]["type"], "permission_error", proxy)  # the provider's shape
        for msg in (lease[1]["message"], proxy[1]["message"]):
            self.assertIn("role: this token may not use role 'planner' (the role of task "
                          "'plan-1')", msg)
        self.assertIsNone(self.sluiced.agent(proxy[2]))  # refused before any lease

    def test_a_task_gives_its_registered_role_on_both(self):
        lease, proxy = self.both("agent-token-leads", "lead-", task="plan-1")
        self.assertEqual((lease[0], proxy[0]), (200, 200), (lease, proxy))
        self.assertEqual(self.role_of(lease[2]), "planner")
        self.assertEqual(self.role_of(proxy[2]), "planner")

    def test_a_role_other_than_the_tasks_is_refused_400_on_both(self):
        lease, proxy = self.both("agent-token-leads", "lead-", role="planner", task="work-1")
        self.assertEqual((lease[0], proxy[0]), (400, 400), (lease, proxy))
        for msg in (lease[1]["message"], proxy[1]["message"]):
            self.assertIn("role: 'planner' is not the role 'worker' task 'work-1' is "
                          "registered with", msg)

    def test_a_role_the_token_is_not_allowed_is_refused_403_naming_it_on_both(self):
        lease, proxy = self.both("agent-token-workers", "worker-", role="planner")
        self.assertEqual((lease[0], proxy[0]), (403, 403), (lease, proxy))
        for msg in (lease[1]["message"], proxy[1]["message"]):
            self.assertIn("role: this token may not use role 'planner'", msg)

    def test_an_unknown_task_keeps_the_role_asked_on_both(self):
        lease, proxy = self.both("agent-token-workers", "worker-", task="not-in-the-graph")
        self.assertEqual((lease[0], proxy[0]), (200, 200), (lease, proxy))
        self.assertEqual(self.role_of(lease[2]), "worker")
        self.assertEqual(self.role_of(proxy[2]), "worker")

    def test_a_need_that_can_never_fit_is_413_on_the_lease_api_and_the_providers_400(self):
        # One table (src/common/errors.def): the proxy's 400 is the provider's own answer
        # for an oversized request (docs/proxy.md), in its error shape.
        lease, proxy = self.both("agent-token-workers", "worker-", max_tokens=60001)
        self.assertEqual(lease[0], 413, lease)
        self.assertEqual(lease[1]["type"], "exceeds_capacity", lease)
        self.assertEqual(proxy[0], 400, proxy)
        self.assertEqual(proxy[1]["type"], "invalid_request_error", proxy)
        self.assertIn("output", proxy[1]["message"])


if __name__ == "__main__":
    unittest.main()
