"""test_review_limits.py - an outsider's cases against the action limits on Redis (limits.lua):
keys with hash-tag characters and at the length bound, an agent token on another agent's
key, `hits` and `wait` out of range, Redis stopped in the middle of checks, a reload while a
check's FCALL is in flight."""
import signal
import threading
import time
import unittest

from redis_harness import Redis, replica, wait_until

ADMIN = "admin-rl-1"
AGENT = "agent-rl-1"

POOLS = """  default:
    input_tpm: 6000
    output_tpm: 600000
auth:
  admin_token: %s
  tokens:
    - {token: %s, agent: me}
caps:
  teams:
    red:
      members: [me]
    blue:
      members: [you]
limits:
  keyed:
    algorithm: fixed_window
    rate: 2
    period_s: 600
    per: key
  mine:
    algorithm: token_bucket
    rate: 3
    period_s: 600
  byteam:
    algorithm: token_bucket
    rate: 3
    period_s: 600
    per: team
  slow:
    algorithm: gcra
    rate: 1
    period_s: 600
    burst: 1
    per: global
    on_limit: queue
""" % (ADMIN, AGENT)


def library_loaded(redis):
    """limits.lua answers (the replicas load it as they connect)."""
    try:
        return bool(redis.command("FCALL", "sluice_limits_version", "0"))  # any version
    except Exception:  # not loaded yet: Redis answers an error
        return False


def check(r, name, token=AGENT, timeout_s=10, **body):
    return r.call("POST", "/v1/limits/%s/check" % name, body, token=token, timeout_s=timeout_s)


class ReviewLimits(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.a, self.b = (replica(self.redis, POOLS) for _ in range(2))
        up = lambda: all(r.call("GET", "/readyz")[0] == 200 for r in (self.a, self.b))  # noqa: E731
        self.assertTrue(wait_until(up, 10))
        self.assertTrue(wait_until(lambda: library_loaded(self.redis), 10))

    def tearDown(self):
        self.redis.cont_signal()
        for r in (self.a, self.b):
            r.stop()
        self.redis.close()

    def test_keys_with_braces_are_their_own_keys_shared_by_replicas(self):
        # `{` and `}` in a key must not become a hash tag of their own nor merge keys.
        for key in ("{a}b", "{a}c", "}{", "{}", "a{b}"):
            st, body, _ = check(self.a, "keyed", agent="me", key=key)
            self.assertEqual((st, body["remaining"]), (200, 1), (key, body))
            st, body, _ = check(self.b, "keyed", agent="me", key=key)
            self.assertEqual((st, body["remaining"]), (200, 0), (key, body))
            st, body, _ = check(self.a, "keyed", agent="me", key=key)
            self.assertEqual(st, 429, (key, body))

    def test_a_key_at_the_length_bound_works_and_one_above_is_400_naming_key(self):
        long_key = "k" * 256
        st, body, _ = check(self.a, "keyed", agent="me", key=long_key)
        self.assertEqual((st, body["remaining"]), (200, 1), body)
        st, body, _ = check(self.b, "keyed", agent="me", key=long_key[:-1] + "j")
        self.assertEqual((st, body["remaining"]), (200, 1), body)  # another key
        st, body, _ = check(self.a, "keyed", agent="me", key="k" * 257)
        self.assertEqual(st, 400, body)
        self.assertIn("key", body["error"]["message"])
        self.assertIn("257", body["error"]["message"])  # the value's length
        st, body, _ = self.a.call("GET", "/v1/limits/keyed?key=" + "q" * 300, token=AGENT)
        self.assertEqual(st, 400, body)
        self.assertIn("300 bytes", body["error"]["message"])

    def test_an_agent_token_cannot_check_or_read_another_agents_or_teams_key(self):
        st, body, _ = check(self.a, "mine", agent="you")
        self.assertEqual(st, 403, body)
        self.assertIn("you", body["error"]["message"])
        st, body, _ = self.a.call("GET", "/v1/limits/mine?key=you", token=AGENT)
        self.assertEqual(st, 403, body)
        st, body, _ = self.a.call("GET", "/v1/limits/byteam?key=blue", token=AGENT)
        self.assertEqual(st, 403, body)
        # Its own: allowed, and the refused calls took nothing.
        st, body, _ = self.b.call("GET", "/v1/limits/mine?key=me", token=AGENT)
        self.assertEqual((st, body["state"]["remaining"]), (200, 3), body)
        st, body, _ = self.b.call("GET", "/v1/limits/byteam?key=red", token=AGENT)
        self.assertEqual((st, body["state"]["remaining"]), (200, 3), body)
        st, body, _ = self.a.call("GET", "/v1/limits/mine?key=you", token=ADMIN)
        self.assertEqual((st, body["state"]["remaining"]), (200, 3), body)

    def test_hits_and_wait_out_of_range_are_400_and_take_nothing(self):
        for hits, shown in ((-1, "-1"), (1.5, "1.5"), (10 ** 30, "1e30"), ("2", "2")):
            st, body, _ = check(self.a, "mine", agent="me", hits=hits)
            self.assertEqual(st, 400, (hits, body))
            self.assertIn("hits", body["error"]["message"])
            self.assertIn(shown, body["error"]["message"], body)
        for wait in (-1, "x"):
            st, body, _ = check(self.a, "slow", agent="me", wait=wait)
            self.assertEqual(st, 400, (wait, body))
            self.assertIn("wait", body["error"]["message"])
        st, body, _ = self.a.call("GET", "/v1/limits/mine?key=me", token=AGENT)
        self.assertEqual(body["state"]["remaining"], 3, body)

    def test_a_huge_wait_is_bounded_by_max_wait(self):
        st, body, _ = check(self.a, "slow", agent="me")
        self.assertEqual(st, 200, body)
        # Above the documented bound: 400 naming wait and the value, nothing held.
        st, body, _ = check(self.b, "slow", agent="me", wait=1e300)
        self.assertEqual(st, 400, body)
        self.assertIn("wait", body["error"]["message"])
        self.assertIn("e300", body["error"]["message"])
        # At the bound: clamped to max_wait_s (600); the next slot is 600 s away, so it
        # is answered 429 at once instead of being held for 1e9 s.
        t0 = time.monotonic()
        st, body, _ = check(self.b, "slow", agent="me", wait=1e9)
        self.assertEqual(st, 429, body)
        self.assertLess(time.monotonic() - t0, 8)  # generous: it is not held 600 s

    def test_redis_stopped_mid_checks_decides_locally_then_shares_again(self):
        st, body, _ = check(self.a, "mine", agent="me")
        self.assertEqual((st, body["remaining"]), (200, 2), body)
        self.redis.stop_signal()
        st, body, _ = check(self.a, "mine", agent="me", timeout_s=15)
        self.assertIn(st, (200, 429), body)  # decided in a's own memory
        st, body, _ = self.a.call("POST", "/v1/limits/mine/report",
                                  {"agent": "me", "successes": 1}, token=AGENT)
        self.assertIn(st, (400, 503), body)  # never a 5xx without the error shape
        self.assertIn("error", body)
        self.redis.cont_signal()
        self.assertTrue(wait_until(lambda: self.a.call("GET", "/readyz")[0] == 200, 10))
        st, body, _ = check(self.b, "mine", agent="me")
        self.assertEqual(st, 200, body)



class ReloadInFlight(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        # A timeout long enough that the FCALL is still waiting when the reload is done.
        self.s = replica(self.redis, POOLS, timeout_ms=5000)
        self.assertTrue(wait_until(lambda: self.s.call("GET", "/readyz")[0] == 200, 10))
        self.assertTrue(wait_until(lambda: library_loaded(self.redis), 10))

    def tearDown(self):
        self.redis.cont_signal()
        self.s.stop()  # raises when sluiced died (it crashed here)
        self.redis.close()

    def test_an_answer_arriving_after_a_reload_removed_every_limit_is_sent(self):
        st, body, _ = check(self.s, "mine", agent="me")
        self.assertEqual(st, 200, body)
        self.redis.stop_signal()  # the next FCALL waits for Redis
        out = {}
        t = threading.Thread(target=lambda: out.update(answer=check(
            self.s, "mine", agent="me", timeout_s=20)))
        t.start()
        time.sleep(0.3)
        with open(self.s.config_path) as f:
            text = f.read()
        self.s.write_config(text[:text.index("limits:")])  # no limits at all
        self.s.proc.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: self.s.call(
            "GET", "/v1/limits", token=ADMIN)[1].get("limits") == [], 5))
        self.redis.cont_signal()
        t.join(15)
        st, body, hdrs = out["answer"]  # decided on Redis before the reload: answered
        self.assertEqual((st, body["remaining"]), (200, 1), body)
        self.assertNotIn("ratelimit", hdrs)  # no policy left to name
        st, body, _ = check(self.s, "mine", agent="me")
        self.assertEqual(st, 404, body)


if __name__ == "__main__":
    unittest.main()
