"""test_bad_input.py - every refused request gets docs/api.md's status and error type, a message
naming the field, and leaves the pool exactly as it was."""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SMALL_POOL, SharedSluiced, Sluiced  # noqa: E402

CONFIG = "pools:\n  default:" + SMALL_POOL + "  other:" + SMALL_POOL

GOOD = {"agent": "a1", "input_tokens": 100, "output_tokens": 10}


def with_(**kw):
    body = dict(GOOD)
    for k, v in kw.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return json.dumps(body)


# (name, raw body, status, error type, text the message must contain)
LEASE_CASES = [
    ("malformed JSON", '{"agent": "a1", "input_tokens": 1,', 400, "invalid_request", "JSON"),
    ("not an object", '[1, 2]', 400, "invalid_request", "object"),
    ("empty body", "", 400, "invalid_request", "body"),
    ("duplicate key", '{"agent":"a","agent":"b","input_tokens":1,"output_tokens":1}', 400,
     "invalid_request", "agent"),
    ("agent wrong type", with_(agent=5), 400, "invalid_request", "agent"),
    ("tokens as string", with_(input_tokens="100"), 400, "invalid_request", "input_tokens"),
    ("tokens as bool", with_(output_tokens=True), 400, "invalid_request", "output_tokens"),
    ("missing agent", with_(agent=None), 400, "invalid_request", "agent"),
    ("missing input_tokens", with_(input_tokens=None), 400, "invalid_request", "input_tokens"),
    ("missing output_tokens", with_(output_tokens=None), 400, "invalid_request", "output_tokens"),
    ("negative tokens", with_(input_tokens=-1), 400, "invalid_request", "input_tokens"),
    ("negative cached", with_(cached_tokens=-5), 400, "invalid_request", "cached_tokens"),
    ("2^63 tokens", with_(input_tokens=2**63), 400, "invalid_request", "input_tokens"),
    ("2^63-1 tokens", with_(output_tokens=2**63 - 1), 400, "invalid_request", "output_tokens"),
    ("2^53+1 tokens", with_(input_tokens=2**53 + 1), 400, "invalid_request", "input_tokens"),
    ("2^64 tokens", with_(cached_tokens=2**64), 400, "invalid_request", "cached_tokens"),
    ("float tokens", with_(input_tokens=1.5), 400, "invalid_request", "input_tokens"),
    ("float written as 10.0", with_(output_tokens=10.0), 400, "invalid_request", "output_tokens"),
    ("float unblocks", with_(unblocks=0.5), 400, "invalid_request", "unblocks"),
    ("unknown role", with_(role="overlord"), 400, "invalid_request", "role"),
    ("unknown priority", with_(priority="urgent"), 400, "invalid_request", "priority"),
    ("role wrong type", with_(role=3), 400, "invalid_request", "role"),
    ("agent too long", with_(agent="a" * 129), 400, "invalid_request", "agent"),
    ("agent bad chars", with_(agent="a b/c"), 400, "invalid_request", "agent"),
    ("task too long", with_(task="t" * 10000), 400, "invalid_request", "task"),
    ("request_id too long", with_(request_id="r" * 1000), 400, "invalid_request", "request_id"),
    ("cache_key too long", with_(cache_key="c" * 1000), 400, "invalid_request", "cache_key"),
    ("negative wait", with_(wait=-1), 400, "invalid_request", "wait"),
    ("wait as string", with_(wait="5"), 400, "invalid_request", "wait"),
    ("zero ttl", with_(ttl=0), 400, "invalid_request", "ttl"),
    ("unknown field", with_(imput_tokens=5), 400, "invalid_request", "imput_tokens"),
    ("10 MiB body", " " * (10 * 1024 * 1024), 413, "body_too_large", "body"),
    ("unknown pool", with_(pool="nope"), 404, "not_found", "nope"),
    ("never fits", with_(input_tokens=100000), 413, "exceeds_capacity", "input_tokens"),
]


class BadInput(SharedSluiced):
    config = CONFIG

    def check(self, status, body, want_status, want_type, want_text, name):
        self.assertEqual(status, want_status, "%s: %r" % (name, body))
        self.assertEqual(set(body), {"error"}, name)
        self.assertEqual(body["error"]["type"], want_type, name)
        self.assertIn(want_text, body["error"]["message"], name)

    def test_bad_lease_requests_are_refused_and_change_nothing(self):
        before = self.s.pool()
        for name, raw, want_status, want_type, want_text in LEASE_CASES:
            with self.subTest(name):
                status, body, _ = self.s.call("POST", "/v1/leases", raw=raw)
                self.check(status, body, want_status, want_type, want_text, name)
                self.assertEqual(self.s.pool(), before, name)

    def test_bad_lease_ids_and_settles(self):
        # Its own pool: the lease held here must not disturb "default"'s full buckets.
        status, g, _ = self.s.lease("settler", 10, pool="other")
        self.assertEqual(status, 200)
        lease = g["lease"]
        settle = "/v1/leases/%s/settle" % lease
        cases = [
            ("unknown lease", "POST", "/v1/leases/l_999999/settle",
             {"input_tokens": 1, "output_tokens": 1}, 404, "not_found", "999999"),
            ("malformed lease id", "POST", "/v1/leases/abc/settle",
             {"input_tokens": 1, "output_tokens": 1}, 404, "not_found", "abc"),
            ("lease id overflow", "DELETE", "/v1/leases/l_99999999999999999999999", None, 404,
             "not_found", "l_"),
            ("unknown ticket", "GET", "/v1/tickets/t_424242", None, 404, "not_found", "424242"),
            ("malformed ticket id", "DELETE", "/v1/tickets/x_1", None, 404, "not_found", "x_1"),
            ("settle missing field", "POST", settle, {"input_tokens": 1}, 400, "invalid_request",
             "output_tokens"),
            ("settle negative", "POST", settle, {"input_tokens": -3, "output_tokens": 1}, 400,
             "invalid_request", "input_tokens"),
            ("settle got_429 not bool", "POST", settle,
             {"input_tokens": 1, "output_tokens": 1, "got_429": "yes"}, 400, "invalid_request",
             "got_429"),
            ("settle headers not strings", "POST", settle,
             {"input_tokens": 1, "output_tokens": 1, "headers": {"retry-after": 5}}, 400,
             "invalid_request", "retry-after"),
            ("settle bad header value", "POST", settle,
             {"input_tokens": 1, "output_tokens": 1,
              "headers": {"anthropic-ratelimit-input-tokens-remaining": "lots"}}, 400,
             "invalid_request", "anthropic-ratelimit-input-tokens-remaining"),
            ("extend without ttl", "POST", "/v1/leases/%s/extend" % lease, {}, 400,
             "invalid_request", "ttl"),
            ("extend negative ttl", "POST", "/v1/leases/%s/extend" % lease, {"ttl": -1}, 400,
             "invalid_request", "ttl"),
            ("ticket bad wait", "GET", "/v1/tickets/t_1?wait=soon", None, 400,
             "invalid_request", "wait"),
        ]
        for name, method, path, body, want_status, want_type, want_text in cases:
            with self.subTest(name):
                before = self.s.pool("other")
                status, got, _ = self.s.call(method, path, body)
                self.check(status, got, want_status, want_type, want_text, name)
                after = self.s.pool("other")
                for bucket in ("input_tokens", "output_tokens"):
                    # Levels refill while the held lease is out; everything else must match.
                    before["buckets"][bucket].pop("level")
                    after["buckets"][bucket].pop("level")
                self.assertEqual(after, before, name)
        status, ok, _ = self.s.call("POST", settle, {"input_tokens": 10, "output_tokens": 1})
        self.assertEqual(status, 200, ok)
        status, got, _ = self.s.call("POST", settle, {"input_tokens": 10, "output_tokens": 1})
        self.check(status, got, 409, "already_settled", "", "settle twice")

    def test_settle_after_expiry_is_410_without_refund(self):
        status, g, _ = self.s.lease("expiring", 1000, ttl=1, pool="other")
        self.assertEqual(status, 200)
        time.sleep(1.2)
        status, got, _ = self.s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                     {"input_tokens": 0, "output_tokens": 0})
        self.check(status, got, 410, "lease_expired", "", "settle after expiry")


AUTH_CONFIG = CONFIG + """
auth:
  admin_token: admin-secret-1
  tokens:
    - token: planner-token-1
      agent: planner-1
      roles: [planner]
      pools: [default]
    - token: workers-token-1
      agent_prefix: "worker-"
"""


class Auth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Sluiced(AUTH_CONFIG)
        cls.s.token = "admin-secret-1"  # for the pool views; each test names its own

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def lease(self, token, agent, **kw):
        body = {"agent": agent, "input_tokens": 10, "output_tokens": 1}
        body.update(kw)
        return self.s.call("POST", "/v1/leases", body, token=token)

    def test_missing_or_wrong_token_is_401(self):
        for token in ("", "wrong-token-123"):
            status, body, _ = self.lease(token, "planner-1")
            self.assertEqual((status, body["error"]["type"]), (401, "unauthorized"))
            self.assertIn("Authorization", body["error"]["message"])
        self.assertEqual(self.s.call("GET", "/v1/pools", token="")[0], 401)

    def test_health_and_metrics_stay_open(self):
        for path in ("/healthz", "/readyz", "/metrics"):
            self.assertEqual(self.s.call("GET", path, token="")[0], 200, path)

    def test_token_limits_agent_role_and_pool(self):
        before = self.s.pool()
        status, body, _ = self.lease("planner-token-1", "planner-2")
        self.assertEqual((status, body["error"]["type"]), (403, "forbidden"))
        self.assertIn("planner-2", body["error"]["message"])
        status, body, _ = self.lease("planner-token-1", "planner-1", role="worker")
        self.assertEqual((status, body["error"]["type"]), (403, "forbidden"))
        self.assertIn("role", body["error"]["message"])
        self.assertEqual(self.s.pool(), before)
        status, g, _ = self.lease("planner-token-1", "planner-1", role="planner")
        self.assertEqual(status, 200, g)
        status, body, _ = self.s.call("DELETE", "/v1/leases/" + g["lease"],
                                      token="workers-token-1")
        self.assertEqual((status, body["error"]["type"]), (403, "forbidden"))
        status, g2, _ = self.lease("workers-token-1", "worker-7")
        self.assertEqual(status, 200, g2)
        self.assertEqual(self.s.call("DELETE", "/v1/leases/" + g["lease"],
                                     token="planner-token-1")[0], 200)

    def test_task_writes_need_the_admin_token(self):
        status, body, _ = self.s.call("PUT", "/v1/tasks/t1", {"state": "waiting"},
                                      token="workers-token-1")
        self.assertEqual((status, body["error"]["type"]), (403, "forbidden"))
        self.assertEqual(self.s.call("PUT", "/v1/tasks/t1", {"state": "waiting"},
                                     token="admin-secret-1")[0], 200)
        self.assertEqual(self.s.call("GET", "/v1/tasks", token="workers-token-1")[0], 200)


if __name__ == "__main__":
    unittest.main()
