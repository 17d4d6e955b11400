"""test_tokens.py - the caps of a token's tier reach sluice.lua: a tokens_file token and a
minted token of a tier with max_concurrent 1 are queued (202 agent_cap) behind their own
lease on the Redis backend, as caps.agents would be, and a reload raising the tier's cap
lets a second lease through at once. A lease naming a task waits for Redis to say the
task's role before its token's bounds are checked: a reload (here, by a changed
tokens_file) in that wait must not free the token under it."""
import hashlib
import os
import secrets
import tempfile
import threading
import time
import unittest

from paced_redis import PacedRedis
from redis_harness import Redis, replica, wait_until

ADMIN = "admin-secret-1"


def sha(token):
    return hashlib.sha256(token.encode()).hexdigest()


class TierCapsOnRedis(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sluice-tokens-")
        self.addCleanup(self.tmp.cleanup)
        self.file_token = secrets.token_hex(32)
        path = os.path.join(self.tmp.name, "tokens.yaml")
        with open(path, "w") as f:
            f.write("tokens:\n  - sha256: %s\n    agent: f1\n    tier: one\n"
                    % sha(self.file_token))
        self.pools = ("  default:\n    input_tpm: 1000000\n    output_tpm: 100000\n"
                      "    max_queue_wait_s: 300\n"
                      "tiers:\n  one:\n    max_concurrent: 1\n"
                      "auth:\n  admin_token: %s\n  tokens_file: %s\n  minted_file: %s\n"
                      % (ADMIN, path, os.path.join(self.tmp.name, "minted.tokens")))
        self.redis = Redis()
        self.addCleanup(self.redis.close)
        self.s = replica(self.redis, self.pools, cold_start="full")
        self.s.__enter__()
        self.addCleanup(self.s.__exit__, None, None, None)
        self.assertTrue(wait_until(lambda: self.s.call("GET", "/readyz")[0] == 200, 10))

    def lease(self, token, agent):
        return self.s.call("POST", "/v1/leases",
                           {"agent": agent, "input_tokens": 10, "output_tokens": 10},
                           token=token)[:2]

    def test_a_tier_cap_queues_file_and_minted_tokens_and_a_reload_raises_it(self):
        status, minted, _ = self.s.call("POST", "/v1/admin/tokens",
                                        {"agent": "m1", "tier": "one"}, token=ADMIN)
        self.assertEqual(status, 201, minted)
        parked = {}
        for token, agent in ((self.file_token, "f1"), (minted["token"], "m1")):
            self.assertEqual(self.lease(token, agent)[0], 200)
            status, queued = self.lease(token, agent)
            self.assertEqual((status, queued.get("limited_by")), (202, "agent_cap"), queued)
            parked[token] = queued["ticket"]
        self.s.write_config(self.s_config().replace("max_concurrent: 1", "max_concurrent: 3"))
        status, body, _ = self.s.call("POST", "/v1/admin/reload", token=ADMIN)
        self.assertEqual(status, 200, body)
        for token, agent in ((self.file_token, "f1"), (minted["token"], "m1")):
            # Redis takes the new caps with the reload's configure, one round trip later.
            self.assertTrue(wait_until(lambda: self.s.call(
                "GET", "/v1/tickets/" + parked[token], token=token)[0] == 200, 10))
            self.assertEqual(self.lease(token, agent)[0], 200)

    def s_config(self):
        with open(self.s.config_path) as f:
            return f.read()


class ReloadDuringATaskLookup(unittest.TestCase):
    def test_a_lease_waiting_for_its_task_role_keeps_its_token_across_a_reload(self):
        tmp = tempfile.TemporaryDirectory(prefix="sluice-tokens-")
        self.addCleanup(tmp.cleanup)
        token = secrets.token_hex(32)
        path = os.path.join(tmp.name, "tokens.yaml")
        with open(path, "w") as f:
            f.write("tokens:\n  - sha256: %s\n    agent_prefix: w-\n    roles: [worker]\n"
                    % sha(token))
        redis = Redis()
        self.addCleanup(redis.close)
        paced = PacedRedis(redis.port)
        self.addCleanup(paced.close)
        pools = ("  default:\n    input_tpm: 1000000\n    output_tpm: 100000\n"
                 "auth:\n  admin_token: %s\n  tokens_file: %s\n" % (ADMIN, path))
        s = replica(paced, pools, cold_start="full", timeout_ms=5000, tick_ms=5000)
        s.__enter__()
        self.addCleanup(s.__exit__, None, None, None)
        self.assertTrue(wait_until(lambda: s.call("GET", "/readyz")[0] == 200, 10))
        st, body, _ = s.call("PUT", "/v1/tasks/t1", {"role": "worker", "state": "running"},
                             token=ADMIN)
        self.assertEqual(st, 200, body)
        paced.pace_s = 1.0
        s.call("GET", "/v1/pools/default", token=ADMIN)  # the next reply waits 1 s after this
        answer = {}

        def lease():
            answer["got"] = s.call("POST", "/v1/leases", {
                "agent": "w-1", "task": "t1", "input_tokens": 10, "output_tokens": 10},
                token=token)[:2]

        t = threading.Thread(target=lease)
        t.start()
        time.sleep(0.3)  # the lease is waiting for the task's role
        st, body, _ = s.call("POST", "/v1/admin/reload", token=ADMIN)
        paced.pace_s = 0  # the role's reply is already held back; what follows need not be
        self.assertEqual(st, 200, body)
        t.join(30)
        self.assertEqual(answer["got"][0], 200, answer)


if __name__ == "__main__":
    unittest.main()
