"""test_routes.py - the router's answers, one per kind of path: the core's routes and each
feature's (core/features.def) reached, open routes without a token, 401 before 404, 405 with
Allow, a body required or optional as the route says (and as its neighbours say for a path
no route has), and the paths a feature answers by itself (proxy, dashboard)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SMALL_POOL, SharedSluiced  # noqa: E402

ADMIN = "admin-secret-routes"
AGENT = "agent-secret-routes"
CONFIG = ("pools:\n  default:" + SMALL_POOL +
          "auth:\n  admin_token: " + ADMIN + "\n  tokens:\n"
          "    - token: " + AGENT + "\n      agent: a1\n")

# (method, path, raw body or None, token, status, error type or None, Allow or None)
CASES = [
    # open routes: no token needed
    ("GET", "/healthz", None, "", 200, None, None),
    ("GET", "/readyz", None, "", 200, None, None),
    ("GET", "/metrics", None, "", 200, None, None),
    # every other path: 401 before anything else, a path that does not exist included
    ("GET", "/v1/pools", None, "", 401, None, None),
    ("GET", "/v1/nothing", None, "", 401, None, None),
    ("POST", "/v1/leases", "", "", 401, None, None),
    # the core's routes
    ("GET", "/v1/pools", None, ADMIN, 200, None, None),
    ("GET", "/v1/pools/default", None, ADMIN, 200, None, None),
    ("GET", "/v1/tasks", None, ADMIN, 200, None, None),
    ("DELETE", "/v1/pools", None, ADMIN, 405, "method_not_allowed", "GET"),
    ("POST", "/v1/tasks/t1", "{}", ADMIN, 405, "method_not_allowed", "GET, PUT, DELETE"),
    ("POST", "/v1/admin/reload", "", AGENT, 403, "forbidden", None),  # body optional
    # the lease feature's
    ("POST", "/v1/leases", "", ADMIN, 400, "invalid_request", None),  # body required
    ("GET", "/v1/leases", None, ADMIN, 405, "method_not_allowed", "POST"),
    ("DELETE", "/v1/leases/l_999", None, ADMIN, 404, "not_found", None),
    ("GET", "/v1/tickets/t_999", None, ADMIN, 404, "not_found", None),
    ("PUT", "/v1/tickets/t_999", "{}", ADMIN, 405, "method_not_allowed", "GET, DELETE"),
    ("POST", "/v1/leases/l_1/nothing", "", ADMIN, 400, "invalid_request", None),
    # the fleet's
    ("GET", "/v1/agents", None, ADMIN, 200, None, None),
    ("GET", "/v1/fleet", None, ADMIN, 200, None, None),
    ("POST", "/v1/agents/a9/release", "", AGENT, 403, "forbidden", None),  # body optional
    ("POST", "/v1/agents/a9/nothing", "", ADMIN, 404, "not_found", None),  # as its neighbours
    # the limits'
    ("GET", "/v1/limits", None, ADMIN, 200, None, None),
    ("GET", "/v1/limits/none", None, ADMIN, 404, "not_found", None),
    ("POST", "/v1/limits/none/check", "", ADMIN, 400, "invalid_request", None),
    # the dashboard's
    ("GET", "/v1/history", None, AGENT, 403, "forbidden", None),
    ("GET", "/v1/history", None, ADMIN, 200, None, None),
    # a path no feature has
    ("GET", "/v1/nothing", None, ADMIN, 404, "not_found", None),
    ("POST", "/v1/admin/nothing", "", ADMIN, 404, "not_found", None),  # as reload: optional
    ("GET", "/v1/pools/a/b/c/d/e/f/g", None, ADMIN, 404, "not_found", None),
    # a /v1 POST that is not JSON
    ("POST", "/v1/leases", "x", ADMIN, 415, None, None),
]


class TestRoutes(SharedSluiced):
    config = CONFIG

    def test_each_kind_of_path_gets_the_routers_answer(self):
        for method, path, raw, token, status, etype, allow in CASES:
            with self.subTest(method=method, path=path, token=token[:5]):
                headers = {"Content-Type": "text/plain"} if raw == "x" else None
                st, body, hdrs = self.s.call(method, path, raw=raw, token=token,
                                             headers=headers)
                self.assertEqual(st, status, body)
                if etype:
                    self.assertEqual(body["error"]["type"], etype, body)
                if allow:
                    self.assertEqual(hdrs.get("allow"), allow)

    def test_the_features_own_paths_answer_in_their_own_shapes(self):
        # the proxy claims its paths before auth and answers in Anthropic's error shape
        st, body, _ = self.s.call("POST", "/anthropic/v1/messages", raw="{}", token="")
        self.assertEqual(st, 401)
        self.assertEqual(body["type"], "error")
        self.assertEqual(body["error"]["type"], "authentication_error")
        # the dashboard claims / and answers its login page, not the API's JSON 401
        st, body, hdrs = self.s.call("GET", "/", token="")
        self.assertEqual(st, 401)
        self.assertTrue(hdrs["content-type"].startswith("text/html"))
        self.assertIn("content-security-policy", hdrs)

if __name__ == "__main__":
    unittest.main()
