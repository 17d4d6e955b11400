"""test_browser.py - a web page cannot drive sluiced: the /v1 API's POSTs and PUTs need
Content-Type: application/json (a page can send text/plain or a form without a CORS
preflight), and with auth off a Host that is not this server's name is refused 421 (DNS
rebinding: a page's own name resolved to 127.0.0.1). Refused requests change nothing."""
import json
import unittest

from harness import SharedSluiced, Sluiced
from test_transport import Conn

POOL = "pools:\n  default:\n    input_tpm: 600000\n    output_tpm: 600000\n"
LEASE = json.dumps({"agent": "a1", "input_tokens": 100, "output_tokens": 10})


class ContentType(SharedSluiced):
    config = POOL

    def assert_415(self, path, ctype, method="POST", body=LEASE, origin=None):
        headers = {"Content-Type": ctype} if ctype is not None else {}
        if origin:
            headers["Origin"] = origin
        before = self.s.pool()
        c = self.s.conn()
        c.putrequest(method, path)
        for k, v in headers.items():
            c.putheader(k, v)
        c.putheader("Content-Length", str(len(body)))
        c.endheaders(body.encode())
        r = c.getresponse()
        answer = json.loads(r.read())
        c.close()
        self.assertEqual(r.status, 415, answer)
        err = answer["error"]
        self.assertEqual(err["type"], "unsupported_media_type")
        self.assertIn("Content-Type", err["message"])
        if ctype:
            self.assertIn(ctype, err["message"])
        after = self.s.pool()
        self.assertEqual(after["leases_in_flight"], before["leases_in_flight"])
        self.assertEqual(after["totals"], before["totals"])

    def test_text_plain_and_form_posts_are_415(self):
        self.assert_415("/v1/leases", "text/plain")
        self.assert_415("/v1/leases", "text/plain;charset=UTF-8")
        self.assert_415("/v1/leases", "application/x-www-form-urlencoded")
        self.assert_415("/v1/leases", "multipart/form-data; boundary=x")
        self.assert_415("/v1/leases", "application/jsonp")

    def test_a_post_without_content_type_is_415(self):
        self.assert_415("/v1/leases", None)
        # A bodyless POST without a type is curl's reload (test_reload_auth.py); a page's
        # fetch() sends the same, but with an Origin.
        self.assert_415("/v1/admin/reload", None, body="", origin="http://evil.example")
        self.assert_415("/v1/agents/a1/suspend", None, body="", origin="null")

    def test_put_of_a_task_needs_json_too(self):
        self.assert_415("/v1/tasks/t1", "text/plain", method="PUT", body='{"role":"worker"}')
        self.assertEqual(self.s.call("GET", "/v1/tasks/t1")[0], 404)

    def test_json_with_parameters_and_any_case_is_served(self):
        for ctype in ("application/json", "application/json; charset=utf-8",
                      "Application/JSON;charset=UTF-8"):
            status, body, _ = self.s.call("POST", "/v1/leases", raw=LEASE,
                                          headers={"Content-Type": ctype})
            self.assertEqual(status, 200, (ctype, body))
            lid = body["lease"]
            status, body, _ = self.s.call("POST", "/v1/leases/%s/settle" % lid,
                                          {"input_tokens": 90, "output_tokens": 5})
            self.assertEqual(status, 200, body)


class HostCheck(SharedSluiced):
    config = POOL + "server:\n  allowed_hosts: [Sluice.Internal, 'gw.local:9000']\n"

    def get(self, host, path="/v1/pools/default"):
        c = Conn(self.s.port)
        self.addCleanup(c.close)
        c.send(b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path.encode(), host.encode()))
        status, _, body = c.response()
        return status, json.loads(body)

    def test_names_of_this_server_are_served(self):
        p = self.s.port
        for host in ("localhost:%d" % p, "127.0.0.1:%d" % p, "[::1]:%d" % p, "LOCALHOST:%d" % p,
                     "127.0.0.1", "localhost", "sluice.internal:%d" % p, "sluice.internal:1",
                     "gw.local:9000"):
            self.assertEqual(self.get(host)[0], 200, host)

    def test_other_names_are_421_on_every_path(self):
        p = self.s.port
        for host in ("evil.example:%d" % p, "127.evil.com:%d" % p, "localhost.example:%d" % p,
                     "127.0.0.1:%d" % (p + 1 if p < 65535 else p - 1), "0.0.0.0:%d" % p,
                     "gw.local:9001", "[::]:%d" % p, "sluice.internal.evil:%d" % p):
            for path in ("/v1/pools/default", "/v1/events", "/healthz", "/metrics"):
                status, body = self.get(host, path)
                self.assertEqual(status, 421, (host, path, body))
                self.assertEqual(body["error"]["type"], "misdirected_request")
                self.assertIn("Host: '%s'" % host, body["error"]["message"])

    def test_a_rebound_post_changes_nothing(self):
        before = self.s.pool()
        status, body, _ = self.s.call("POST", "/v1/leases", raw=LEASE,
                                      headers={"Host": "attacker.example:%d" % self.s.port})
        self.assertEqual(status, 421, body)
        self.assertEqual(self.s.pool()["totals"], before["totals"])

    def test_the_proxy_paths_are_checked_too(self):
        c = Conn(self.s.port)
        self.addCleanup(c.close)
        body = b'{"model":"m","max_tokens":1,"messages":[]}'
        c.send(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: evil.example\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body))
        self.assertEqual(c.response()[0], 421)


class HostWithAuth(unittest.TestCase):
    def test_with_auth_on_the_token_decides_not_the_host(self):
        cfg = POOL + "auth:\n  admin_token: admin-secret\n"
        with Sluiced(cfg) as d:
            status, body, _ = d.call("GET", "/v1/pools/default", token="admin-secret",
                                     headers={"Host": "sluice.example.com"})
            self.assertEqual(status, 200, body)


if __name__ == "__main__":
    unittest.main()
