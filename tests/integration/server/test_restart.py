"""test_restart.py - what survives kill -9 of sluiced on the memory backend.

With a state_file: the levels (a restart grants no burst), the leases in flight (a settle
after the restart of a lease granted before it is applied with its refund; one that
expired meanwhile was reaped without refund: 410), and the ids (a new lease never gets
an old id). Without one: a cold start (empty buckets that refill; the first provider
headers may raise a level once) and ids that never repeat either. A damaged file is
moved aside and the start is cold (test_state_damage.py: damaged in every way)."""
import glob
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import procs  # noqa: E402
from harness import check_config  # noqa: E402  (tests/integration/server/harness.py)

SLUICED = os.environ.get("SLUICED", "sluiced")

# 600,000 input tokens a minute: capacity 510,000, refilled at 8,500 per second.
POOL = """pools:
  default:
    input_tpm: 600000
    output_tpm: 600000
    rpm: 100000
    max_queue_wait_s: 0
"""


class Daemon:
    """A sluiced that can be killed with SIGKILL and started again on the same config."""

    def __init__(self, tmp, config_text):
        self.config_path = os.path.join(tmp, "sluice.yaml")
        with open(self.config_path, "w") as f:
            f.write(config_text)
        self.proc = None
        self.started_at = None

    def start(self):
        self.proc = subprocess.Popen(
            [SLUICED, "--config", self.config_path, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = procs.read_banner(self.proc, "sluiced", 10)
        self.port = int(line.split("http://127.0.0.1:")[1].split()[0])
        self.started_at = time.monotonic()
        return self

    def kill9(self):
        self.proc.kill()
        self.proc.wait(timeout=5)
        self.proc.stdout.close()
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        return err

    def stop(self):
        if self.proc and not self.proc.stdout.closed:
            return procs.stop(self.proc, "sluiced")
        return None

    def call(self, method, path, body=None, token=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Authorization": "Bearer " + token} if token else None
        status, _, payload = procs.request(c, method, path, body=body, headers=headers)
        return status, json.loads(payload) if payload else None

    def lease(self, agent, input_tokens, **kw):
        body = {"agent": agent, "input_tokens": input_tokens, "output_tokens": 1}
        body.update(kw)
        return self.call("POST", "/v1/leases", body)

    def settle(self, lease, input_tokens, **kw):
        body = {"input_tokens": input_tokens, "output_tokens": 1}
        body.update(kw)
        return self.call("POST", "/v1/leases/%s/settle" % lease, body)

    def pool(self):
        status, body = self.call("GET", "/v1/pools/default")
        assert status == 200, body
        return body

    def input_level(self):
        return self.pool()["buckets"]["input_tokens"]["level"]


def lease_number(lease_id):
    assert lease_id.startswith("l_"), lease_id
    return int(lease_id[2:])


class WithStateDir(unittest.TestCase):
    """A test with a folder of its own (self.tmp) for a Daemon's state, started by
    start() and stopped after the test."""
    PREFIX = "sluiced-restart-"

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix=self.PREFIX)
        self.addCleanup(self.tmp.cleanup)
        self.daemon = None

    def tearDown(self):
        if self.daemon:
            self.daemon.stop()

    def start(self, config_text):
        self.daemon = Daemon(self.tmp.name, config_text).start()
        return self.daemon


class Restart(WithStateDir):

    def test_without_state_file_a_start_is_cold_and_refills(self):
        d = self.start(POOL)  # cold_start: empty is the default
        level = d.input_level()
        elapsed = time.monotonic() - d.started_at
        self.assertLessEqual(level, 8500 * (elapsed + 0.5))
        status, body = d.lease("big", 400000)
        self.assertEqual(status, 429, body)  # 47 s of refill away: rejected, not granted
        d.kill9()
        d.start()
        self.assertLessEqual(d.input_level(), 8500 * (time.monotonic() - d.started_at + 0.5))
        status, body = d.lease("big", 400000)
        self.assertEqual(status, 429, body)
        time.sleep(0.3)
        level = d.input_level()
        self.assertGreater(level, 0)  # it refills
        status, body = d.lease("small", 1000)
        self.assertEqual(status, 200, body)

    def test_cold_start_first_headers_raise_the_level_once(self):
        d = self.start(POOL)
        time.sleep(0.3)
        status, body = d.lease("a", 1000)
        self.assertEqual(status, 200, body)
        hdrs = {"anthropic-ratelimit-input-tokens-remaining": "400000"}
        status, body = d.settle(body["lease"], 1000, headers=hdrs)
        self.assertEqual(status, 200, body)
        # 400,000 the provider vouches for, less its rounding (500) and the reserve the
        # margin keeps (90,000), plus a little refill since.
        level = d.input_level()
        self.assertGreaterEqual(level, 309500)
        self.assertLess(level, 309500 + 8500 * 2)
        status, body = d.lease("b", 1000)
        self.assertEqual(status, 200, body)
        status, body = d.settle(body["lease"], 1000,
                                headers={"anthropic-ratelimit-input-tokens-remaining": "600000"})
        self.assertEqual(status, 200, body)
        self.assertLess(d.input_level(), 309500 + 8500 * 3)  # no second raise

    def test_a_restored_lease_is_still_its_owners_alone(self):
        # The owner of a lease granted before a kill -9 is known after it: another
        # agent's token gets 403 for settle, extend and cancel, and nothing changes.
        state = os.path.join(self.tmp.name, "state")
        auth = ("auth:\n  admin_token: admin-token-0001\n  tokens:\n"
                "    - token: alice-token-0001\n      agent: alice\n"
                "    - token: bob-token-0001\n      agent: bob\n")
        d = self.start("cold_start: full\nstate_file: %s\n%s%s" % (state, auth, POOL))
        status, a = d.call("POST", "/v1/leases",
                           {"agent": "alice", "input_tokens": 50000, "output_tokens": 1,
                            "ttl": 300}, token="alice-token-0001")
        self.assertEqual(status, 200, a)
        d.kill9()
        d.start()
        lease = a["lease"]
        before = d.call("GET", "/v1/pools/default", token="admin-token-0001")[1]
        for method, path, body in (
                ("POST", "/v1/leases/%s/settle" % lease, {"input_tokens": 1, "output_tokens": 1}),
                ("POST", "/v1/leases/%s/extend" % lease, {"ttl": 60}),
                ("DELETE", "/v1/leases/%s" % lease, None)):
            status, body = d.call(method, path, body, token="bob-token-0001")
            self.assertEqual(status, 403, (path, body))
            self.assertEqual(body["error"]["type"], "forbidden")
        after = d.call("GET", "/v1/pools/default", token="admin-token-0001")[1]
        self.assertEqual(after["leases_in_flight"], before["leases_in_flight"])
        self.assertLessEqual(after["buckets"]["input_tokens"]["level"],
                             before["buckets"]["input_tokens"]["level"] + 8500 * 2)
        status, body = d.call("POST", "/v1/leases/%s/settle" % lease,
                              {"input_tokens": 40000, "output_tokens": 1},
                              token="alice-token-0001")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["adjust"]["input_tokens"], 10000)

    def test_state_file_keeps_levels_and_leases_across_kill9(self):
        state = os.path.join(self.tmp.name, "state")
        d = self.start("cold_start: full\nstate_file: %s\n%s" % (state, POOL))
        status, a = d.lease("a", 400000, ttl=300)
        self.assertEqual(status, 200, a)
        status, b = d.lease("b", 50000, ttl=1)
        self.assertEqual(status, 200, b)
        old_ids = {lease_number(a["lease"]), lease_number(b["lease"])}
        killed_at = time.monotonic()
        d.kill9()
        time.sleep(1.2)  # b expires while sluiced is down
        d.start()
        down_s = time.monotonic() - killed_at
        # 510,000 - 450,000 + the refill of the time since the grants, not 510,000.
        level = d.input_level()
        self.assertLessEqual(level, 60000 + 8500 * (down_s + 0.5))
        status, body = d.lease("burst", 400000)
        self.assertEqual(status, 429, body)
        self.assertEqual(d.pool()["leases_in_flight"], 1)  # b was reaped, without refund
        before = d.input_level()
        status, body = d.settle(a["lease"], 100000)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["adjust"]["input_tokens"], 300000)
        self.assertGreaterEqual(d.input_level(), before + 300000 - 1)
        status, body = d.settle(a["lease"], 100000)
        self.assertEqual(status, 409, body)
        status, body = d.settle(b["lease"], 10)
        self.assertEqual(status, 410, body)
        status, c = d.lease("c", 1000)
        self.assertEqual(status, 200, c)
        self.assertGreater(lease_number(c["lease"]), max(old_ids))
        # A clean stop and a second start keep it all too.
        d.stop()
        d.start()
        status, body = d.settle(c["lease"], 1000)
        self.assertEqual(status, 200, body)

    def test_a_lease_cache_ttl_s_survives_a_restart(self):
        # The pool's caches live 2 s; the lease's prefix is a 1-hour write (ttl "1h").
        state = os.path.join(self.tmp.name, "state")
        d = self.start("cold_start: full\nstate_file: %s\n%s    cache_ttl_s: 2\n"
                       % (state, POOL))
        status, a = d.lease("a", 1000, cached_tokens=50000, cache_ttl_s=3600)
        self.assertEqual(status, 200, a)
        d.kill9()
        d.start()
        status, body = d.settle(a["lease"], 1000, cache_creation_input_tokens=50000,
                                cache_creation_1h_input_tokens=50000)
        self.assertEqual(status, 200, body)
        time.sleep(2.5)  # past the pool's 2 s, well within the hour
        status, b = d.lease("a", 1000, cached_tokens=50000)
        self.assertEqual(status, 200, b)
        # Warm: the cached prefix is not charged as input (cold, it would be 51,000).
        self.assertEqual(b["charged"]["input_tokens"], 1000, b)

    def test_margin_survives_a_restart(self):
        state = os.path.join(self.tmp.name, "state")
        d = self.start("cold_start: full\nstate_file: %s\n%s" % (state, POOL))
        status, a = d.lease("a", 1000)
        status, body = d.settle(a["lease"], 1000, got_429=True)
        self.assertEqual(status, 200, body)
        self.assertAlmostEqual(d.pool()["margin"], 0.80)
        d.kill9()
        d.start()
        self.assertAlmostEqual(d.pool()["margin"], 0.80)

    def test_learned_output_and_lease_durations_survive_a_restart(self):
        state = os.path.join(self.tmp.name, "state")
        pools = """pools:
  default:
    input_tpm: 600000
    output_tpm: 600000
    rpm: 100000
    concurrency: 1
    output_reserve: learned
"""
        d = self.start("cold_start: full\nstate_file: %s\n%s" % (state, pools))
        for _ in range(20):  # 20 outputs of 100 tokens: the learned p95 is 100
            status, a = d.lease("a", 1000, output_tokens=4000, model="m")
            self.assertEqual(status, 200, a)
            status, body = d.settle(a["lease"], 1000, output_tokens=100)
            self.assertEqual(status, 200, body)
        status, a = d.lease("a", 1000, output_tokens=4000, model="m", cap_output=True)
        self.assertEqual(a["charged"]["output_tokens"], 100)
        status, body = d.settle(a["lease"], 1000, output_tokens=100)
        d.kill9()
        d.start()
        status, a = d.lease("a", 1000, output_tokens=4000, model="m", cap_output=True)
        self.assertEqual(status, 200, a)
        self.assertEqual(a["charged"]["output_tokens"], 100)  # still learned
        # The slot is taken: with D (settles within seconds) known, the wait for it is
        # D, well inside max_queue_wait_s (60 s); unknown, it would be the lease's
        # expiry (120 s) and rejected.
        status, q = d.lease("b", 10)
        self.assertEqual(status, 202, q)
        self.assertEqual(q["limited_by"], "concurrency")
        self.assertLess(q["eta"], 60)

    def test_ids_never_repeat_across_restarts_without_state_file(self):
        d = self.start("cold_start: full\n" + POOL)
        status, first = d.lease("a", 1000, ttl=300)
        self.assertEqual(status, 200, first)
        d.kill9()
        d.start()
        status, second = d.lease("b", 1000, ttl=300)
        self.assertEqual(status, 200, second)
        self.assertGreater(lease_number(second["lease"]), lease_number(first["lease"]))
        # The old holder's settle names nobody now: 404, never another agent's lease.
        status, body = d.settle(first["lease"], 1)
        self.assertEqual(status, 404, body)
        self.assertEqual(d.pool()["leases_in_flight"], 1)
        status, body = d.settle(second["lease"], 1000)
        self.assertEqual(status, 200, body)

    def test_damaged_state_file_is_moved_aside_and_the_start_is_cold(self):
        state = os.path.join(self.tmp.name, "state")
        with open(state, "wb") as f:
            f.write(b"not a sluice state file\n")
        d = self.start("state_file: %s\n%s" % (state, POOL))
        self.assertEqual(len(glob.glob(state + ".damaged-*")), 1)
        self.assertLessEqual(d.input_level(), 8500 * (time.monotonic() - d.started_at + 0.5))
        status, body = d.lease("a", 1000, ttl=300)  # granted or queued: a cold start
        time.sleep(0.2)
        status, body = d.lease("a", 1000, ttl=300)
        self.assertEqual(status, 200, body)
        in_flight = d.pool()["leases_in_flight"]  # 1, or 2 when the start took long enough
        d.kill9()
        d.start()  # the new file is good
        self.assertEqual(d.pool()["leases_in_flight"], in_flight)

    def test_a_state_file_that_cannot_be_written_refuses_to_start(self):
        path = os.path.join(self.tmp.name, "no-such-dir", "state")
        d = Daemon(self.tmp.name, "state_file: %s\n%s" % (path, POOL))
        p = subprocess.run([SLUICED, "--config", d.config_path, "--listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=10)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("state_file", p.stderr)
        self.assertIn(path, p.stderr)

    def test_state_file_needs_the_memory_backend(self):
        rc, out = check_config("backend: redis://127.0.0.1:1/0\nstate_file: /tmp/x\n")
        self.assertNotEqual(rc, 0)
        self.assertIn("state_file", out)
        rc, out = check_config("cold_start: lukewarm\n")
        self.assertNotEqual(rc, 0)
        self.assertIn("cold_start", out)
        self.assertIn("lukewarm", out)


if __name__ == "__main__":
    unittest.main()
