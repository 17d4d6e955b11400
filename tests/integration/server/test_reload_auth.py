"""test_reload_auth.py - a reload never weakens security: on a listener that is not loopback,
a reload (SIGHUP or POST /v1/admin/reload) whose file has no tokens is refused, the running
configuration kept and the reason logged or answered; loopback is decided from the address,
not its spelling (127.evil.com, localhost.example, 0.0.0.0 and :: are not loopback)."""
import signal
import subprocess
import time
import unittest

from harness import SLUICED, Sluiced, wait_until

POOL = "pools:\n  default:\n    input_tpm: 6000\n    output_tpm: 600000\n"
AUTH = POOL + ("auth:\n  admin_token: admin-secret-1\n  tokens:\n"
               "    - token: agent-secret-1\n      agent: a1\n")
NO_AUTH = POOL.replace("6000", "9000")


def stderr_so_far(proc, budget_s=2.0):
    """What sluiced wrote on stderr up to now (reads without blocking past `budget_s`)."""
    import os
    import select
    out, deadline = "", time.monotonic() + budget_s
    fd = proc.stderr.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            if out:
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk.decode(errors="replace")
    return out


class ReloadOnAWildcardListener(unittest.TestCase):
    def setUp(self):
        self.s = Sluiced(AUTH, listen="0.0.0.0:0")
        self.addCleanup(self.s.stop)

    def assert_still_protected(self):
        s = self.s
        status, body, _ = s.call("GET", "/v1/pools/default")
        self.assertEqual(status, 401, body)
        status, body, _ = s.call("POST", "/v1/admin/reload")
        self.assertEqual(status, 401, body)
        status, p, _ = s.call("GET", "/v1/pools/default", token="admin-secret-1")
        self.assertEqual((status, p["limits"]["input_tpm"]), (200, 6000))

    def test_sighup_without_auth_is_refused_and_logged(self):
        self.s.write_config(NO_AUTH)
        self.s.proc.send_signal(signal.SIGHUP)
        err = ""
        deadline = time.monotonic() + 5
        while "reload refused" not in err and time.monotonic() < deadline:
            err += stderr_so_far(self.s.proc, 0.5)
        self.assertIn("reload refused", err)
        self.assertIn("auth", err)
        self.assertIn("not a loopback address", err)
        self.assert_still_protected()

    def test_admin_reload_without_auth_is_4xx_with_the_reason(self):
        self.s.write_config(NO_AUTH)
        status, body, _ = self.s.call("POST", "/v1/admin/reload", token="admin-secret-1")
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["type"], "invalid_request")
        self.assertIn("auth", body["error"]["message"])
        self.assertIn("0.0.0.0", body["error"]["message"])
        self.assertIn("reload refused", stderr_so_far(self.s.proc))
        self.assert_still_protected()

    def test_a_reload_that_keeps_auth_is_applied(self):
        self.s.write_config(AUTH.replace("6000", "7000"))
        status, body, _ = self.s.call("POST", "/v1/admin/reload", token="admin-secret-1")
        self.assertEqual((status, body), (200, {"status": "reloaded"}))
        status, p, _ = self.s.call("GET", "/v1/pools/default", token="admin-secret-1")
        self.assertEqual(p["limits"]["input_tpm"], 7000)


class ReloadOnLoopback(unittest.TestCase):
    def test_loopback_may_switch_auth_off(self):
        with Sluiced(AUTH) as s:
            s.write_config(NO_AUTH)
            s.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(lambda: s.call("GET", "/v1/pools/default")[0] == 200, 5))


class ReloadWithoutABody(unittest.TestCase):
    """`curl -X POST .../v1/admin/reload` sends no body and no Content-Type: it reloads."""

    def post(self, s, headers):
        c = s.conn()
        c.request("POST", "/v1/admin/reload", headers=dict(headers, Authorization="Bearer admin-secret-1"))
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.status, text

    def test_a_post_without_body_or_content_type_reloads(self):
        with Sluiced(AUTH) as s:
            s.write_config(AUTH.replace("6000", "7000"))
            status, text = self.post(s, {})
            self.assertEqual(status, 200, text)
            self.assertIn('"reloaded"', text)
            st, p, _ = s.call("GET", "/v1/pools/default", token="admin-secret-1")
            self.assertEqual((st, p["limits"]["input_tpm"]), (200, 7000))

    def test_the_same_post_with_an_origin_is_415(self):
        # What a web page's fetch() sends: no body, no type, but an Origin.
        with Sluiced(AUTH) as s:
            s.write_config(AUTH.replace("6000", "7000"))
            status, text = self.post(s, {"Origin": "http://evil.example"})
            self.assertEqual(status, 415, text)
            st, p, _ = s.call("GET", "/v1/pools/default", token="admin-secret-1")
            self.assertEqual((st, p["limits"]["input_tpm"]), (200, 6000))

    def test_a_body_of_another_media_type_is_still_415(self):
        with Sluiced(AUTH) as s:
            c = s.conn()
            c.request("POST", "/v1/admin/reload", body="x=1",
                      headers={"Authorization": "Bearer admin-secret-1",
                               "Content-Type": "application/x-www-form-urlencoded"})
            r = c.getresponse()
            r.read()
            c.close()
            self.assertEqual(r.status, 415)


class LoopbackFromTheAddress(unittest.TestCase):
    def check(self, listen):
        r = subprocess.run([SLUICED, "--check-config", "--listen", listen],
                           capture_output=True, text=True, timeout=20)
        return r.returncode, r.stdout + r.stderr

    def test_names_that_only_look_loopback_are_not(self):
        for listen in ("127.evil.com:0", "localhost.example:0", "0.0.0.0:0", "[::]:0"):
            rc, out = self.check(listen)
            self.assertEqual(rc, 1, (listen, out))
            self.assertIn("is not a loopback address", out)

    def test_loopback_addresses_are(self):
        for listen in ("127.0.0.1:0", "127.1.2.3:0", "localhost:0", "[::1]:0",
                       "[::ffff:127.0.0.1]:0"):
            rc, out = self.check(listen)
            self.assertEqual(rc, 0, (listen, out))


if __name__ == "__main__":
    unittest.main()
