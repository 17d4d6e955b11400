"""test_logs.py - sluiced's log lines: an RFC 3339 UTC time and a level on every line, one
JSON object per line with `log_format: json`, the access log (to a file or stderr), and no
secret in any of them (tokens, the admin token, the provider key)."""
import json
import os
import re
import signal
import tempfile
import time
import unittest

from harness import Sluiced, check_config, procs, wait_until

POOL = """
pools:
  default:
    input_tpm: 100000000
    output_tpm: 100000000
"""
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (info|warn|error) sluiced: \S")
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class Keep(Sluiced):
    """A sluiced whose banner line (stdout, read at start) is kept as `banner`."""

    def _read_banner(self, timeout_s):
        self.banner = super()._read_banner(timeout_s)
        return self.banner


def stop(s):
    """Stops sluiced and returns (stdout, stderr)."""
    out, err = procs.stop(s.proc, "sluiced")
    s.dir.cleanup()
    return out, err


def break_config_and_reload(s):
    """A reload from a file that does not parse: sluiced warns and keeps running."""
    with open(s.config_path, "a") as f:
        f.write("no_such_key: 1\n")
    s.proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)


def lease_settle_and_miss(s):
    st, g, _ = s.lease("a1", 10)
    assert st == 200, g
    st, b, _ = s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                      {"input_tokens": 5, "output_tokens": 5})
    assert st == 200, b
    st, b, _ = s.call("GET", "/v1/nothing-here")
    assert st == 404, b
    return g["lease"]


class LogLines(unittest.TestCase):
    def test_text_lines_have_an_rfc3339_utc_time_and_a_level(self):
        s = Keep(POOL)
        break_config_and_reload(s)
        out, err = stop(s)
        lines = [l for l in err.splitlines() if l]
        self.assertTrue(any(" warn sluiced: reload refused" in l for l in lines), err)
        self.assertTrue(any(" info sluiced: SIGTERM: draining" in l for l in lines), err)
        for line in lines:
            self.assertRegex(line, TEXT_LINE)
        self.assertRegex(s.banner, TEXT_LINE)  # on stdout
        self.assertIn(" info sluiced: listening on http://127.0.0.1:", s.banner)

    def test_log_format_json_writes_one_object_per_line(self):
        s = Keep("log_format: json\n" + POOL)
        break_config_and_reload(s)
        out, err = stop(s)
        lines = [json.loads(l) for l in (s.banner + out + err).splitlines() if l]
        self.assertGreaterEqual(len(lines), 3)
        for line in lines:
            self.assertEqual(sorted(line), ["fields", "level", "msg", "time"])
            self.assertRegex(line["time"], RFC3339_UTC)
            self.assertIn(line["level"], ("info", "warn", "error"))
        self.assertTrue(any(l["level"] == "warn" and l["msg"].startswith("reload refused")
                            for l in lines), lines)
        self.assertTrue(any(l["msg"].startswith("listening on http://") for l in lines), lines)

    def test_the_backends_messages_are_log_lines_too(self):
        state = tempfile.TemporaryDirectory(prefix="sluiced-state-")
        self.addCleanup(state.cleanup)
        config = "log_format: json\nstate_file: %s/state\n%s" % (state.name, POOL)
        s = Sluiced(config)
        st, g, _ = s.lease("a1", 10)  # in flight at the restart
        self.assertEqual(st, 200, g)
        stop(s)
        s = Sluiced(config)
        _, err = stop(s)
        lines = [json.loads(l) for l in err.splitlines() if l]
        restored = [l for l in lines if l["msg"].startswith("state_file: 1 leases in flight")]
        self.assertEqual(len(restored), 1, err)
        self.assertEqual(restored[0]["level"], "info")

    def test_a_bad_log_format_names_the_key_and_the_value(self):
        status, output = check_config("log_format: xml\n" + POOL)
        self.assertNotEqual(status, 0)
        self.assertIn("log_format: 'xml' must be text or json", output)


class AccessLog(unittest.TestCase):
    def test_access_log_to_a_file_has_method_path_status_agent_pool_duration_and_lease(self):
        logs = tempfile.TemporaryDirectory(prefix="sluiced-access-")
        self.addCleanup(logs.cleanup)
        path = os.path.join(logs.name, "access.log")
        s = Sluiced("access_log: %s\n%s" % (path, POOL))
        lease = lease_settle_and_miss(s)
        self.assertTrue(wait_until(lambda: open(path).read().count("\n") >= 3, 5))
        with open(path) as f:
            lines = f.read().splitlines()
        stop(s)
        for line in lines:
            self.assertRegex(line, TEXT_LINE)
        grant = next(l for l in lines if "path=/v1/leases " in l)
        self.assertRegex(grant, r" info sluiced: access method=POST path=/v1/leases status=200 "
                                r"agent=a1 pool=default duration_ms=\d+\.\d{3} lease=%s$" % lease)
        settle = next(l for l in lines if "/settle" in l)
        self.assertIn("agent=a1 pool=default", settle)
        self.assertIn("lease=" + lease, settle)
        missing = next(l for l in lines if "/v1/nothing-here" in l)
        self.assertIn("method=GET path=/v1/nothing-here status=404", missing)

    def test_a_reload_reopens_the_access_log_and_refuses_one_it_cannot_open(self):
        logs = tempfile.TemporaryDirectory(prefix="sluiced-access-")
        self.addCleanup(logs.cleanup)
        path = os.path.join(logs.name, "access.log")
        config = "access_log: %s\n%s" % (path, POOL)
        s = Sluiced(config)
        s.call("GET", "/healthz")
        os.rename(path, path + ".1")  # logrotate moves it ...
        st, b, _ = s.call("POST", "/v1/admin/reload", {})  # ... and signals a reload
        self.assertEqual(st, 200, b)
        s.call("GET", "/v1/pools")
        s.write_config(config.replace(path, os.path.join(logs.name, "missing", "access.log")))
        st, b, _ = s.call("POST", "/v1/admin/reload", {})
        self.assertEqual(st, 400, b)
        self.assertIn("access_log: cannot open '%s/missing/access.log'" % logs.name,
                      b["error"]["message"])
        s.call("GET", "/v1/fleet")  # still logged where it was
        stop(s)
        with open(path + ".1") as f:
            self.assertIn("path=/healthz", f.read())
        with open(path) as f:
            text = f.read()
        self.assertIn("path=/v1/pools", text)
        self.assertIn("path=/v1/fleet", text)
        self.assertNotIn("path=/healthz", text)

    def test_access_log_to_stderr_in_json(self):
        s = Sluiced("log_format: json\naccess_log: stderr\n" + POOL)
        lease = lease_settle_and_miss(s)
        _, err = stop(s)
        access = [json.loads(l) for l in err.splitlines() if '"msg":"access"' in l]
        self.assertEqual(len(access), 3, err)
        grant = access[0]["fields"]
        self.assertEqual(grant["method"], "POST")
        self.assertEqual(grant["path"], "/v1/leases")
        self.assertEqual(grant["status"], 200)
        self.assertEqual(grant["agent"], "a1")
        self.assertEqual(grant["pool"], "default")
        self.assertEqual(grant["lease"], lease)
        self.assertIsInstance(grant["duration_ms"], float)
        self.assertEqual(access[2]["fields"]["status"], 404)
        self.assertNotIn("agent", access[2]["fields"])


SECRETS = ("admin-secret-0123456789", "agent-secret-0123456789", "sk-provider-secret-0123456789")


class NoSecrets(unittest.TestCase):
    def test_no_token_or_key_reaches_any_log(self):
        keys = tempfile.TemporaryDirectory(prefix="sluiced-key-")
        self.addCleanup(keys.cleanup)
        key_file = os.path.join(keys.name, "provider.key")
        with open(key_file, "w") as f:
            f.write(SECRETS[2] + "\n")
        config = ("access_log: stderr\nauth:\n  minted_file: %s/minted\n" % keys.name +
                  "  admin_token: %s\n  tokens:\n    - token: %s\n      agent: a1\n"
                  "pools:\n  default:\n    input_tpm: 100000000\n    output_tpm: 100000000\n"
                  "    upstream_url: http://127.0.0.1:9\n    provider: anthropic\n"
                  "    api_key_file: %s\n" % (SECRETS[0], SECRETS[1], key_file))
        s = Sluiced(config)
        admin, agent, _ = SECRETS
        st, g, _ = s.call("POST", "/v1/leases", {"agent": "a1", "input_tokens": 10,
                                                 "output_tokens": 10}, token=agent)
        self.assertEqual(st, 200, g)
        s.call("GET", "/v1/pools", token="wrong-" + agent)  # refused: the token is not echoed
        s.call("GET", "/?token=" + admin)  # the dashboard's login puts it in the query
        s.call("GET", "/v1/usage?since=" + admin, token=admin)  # echoed in a 400, not logged
        conn = s.conn()
        conn.request("POST", "/anthropic/v1/messages",
                     body=json.dumps({"model": "claude-x", "max_tokens": 10,
                                      "messages": [{"role": "user", "content": "hi"}]}),
                     headers={"x-api-key": agent, "x-sluice-agent": "a1",
                              "anthropic-version": "2023-06-01",
                              "content-type": "application/json"})
        self.assertEqual(conn.getresponse().status, 502)  # nothing listens on port 9
        conn.close()
        st, minted, _ = s.call("POST", "/v1/admin/tokens", {"agent": "a2"}, token=admin)
        self.assertEqual(st, 201, minted)
        st, g, _ = s.call("POST", "/v1/leases", {"agent": "a2", "input_tokens": 10,
                                                 "output_tokens": 10}, token=minted["token"])
        self.assertEqual(st, 200, g)
        break_config_and_reload(s)
        with open(s.event_log) as f:
            events = f.read()
        out, err = stop(s)
        self.assertIn("agent=a2", err)
        self.assertNotIn(minted["token"], out + err + events)
        self.assertIn("access method=GET path=/ status=", err)  # the login was logged ...
        for secret in SECRETS:  # ... without its query, and nothing else names a secret
            for name, text in (("stdout", out), ("stderr", err), ("event log", events)):
                self.assertNotIn(secret, text, "%s names %s" % (name, secret))


if __name__ == "__main__":
    unittest.main()
