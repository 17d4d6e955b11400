"""The sluice command's sluiced subcommands: exit codes, --json output, tables, --help,
and checkpoint save/verify."""
import http.server
import json
import os
import tempfile
import threading
import unittest

from harness import Sluiced, free_port, sluice, sluice_json

POOL = """
pools:
  default:
    input_tpm: 60000
    output_tpm: 600000
  small:
    input_tpm: 6000
    output_tpm: 6000
"""


class Cli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Sluiced(POOL)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_help_of_every_command_exits_0(self):
        for cmd in ("status", "agents", "tasks", "acquire", "settle", "cancel", "checkpoint"):
            code, out, _ = sluice(cmd, "--help")
            self.assertEqual(code, 0, cmd)
            self.assertIn("usage: sluice " + cmd, out)
            self.assertIn("exit codes", out)

    def test_usage_errors_exit_2(self):
        self.assertEqual(sluice("status", "--bogus")[0], 2)
        self.assertEqual(sluice("acquire", "--agent", "a", "--input", "-5", "--output", "1")[0], 2)
        self.assertEqual(sluice("acquire", "--agent", "a", "--input", "5")[0], 2)
        self.assertEqual(sluice("settle", "l_1", "--input", "x", "--output", "1")[0], 2)
        self.assertEqual(sluice("cancel")[0], 2)
        for extra in ("l_2", "--bogus"):  # one LEASE, connection options, nothing else
            code, _, err = sluice("cancel", "l_1", extra)
            self.assertEqual(code, 2, extra)
            self.assertIn('sluice cancel: unknown argument "%s"' % extra, err)
        self.assertEqual(sluice("checkpoint", "frobnicate", "x")[0], 2)

    def test_status_json_is_sluiceds_pools_and_the_table_names_them(self):
        code, j, _ = sluice_json("status", "--json", url=self.d.url)
        self.assertEqual(code, 0)
        self.assertEqual(sorted(p["name"] for p in j["pools"]), ["default", "small"])
        code, out, _ = sluice("status", url=self.d.url)
        self.assertEqual(code, 0)
        self.assertIn("MARGIN", out)
        self.assertIn("input_tokens", out)
        self.assertIn("small", out)
        code, j, _ = sluice_json("status", "--pool", "small", "--json", url=self.d.url)
        self.assertEqual((code, j["name"]), (0, "small"))
        code, _, _ = sluice("status", "--pool", "nosuch", url=self.d.url)
        self.assertEqual(code, 6)

    def test_server_flag_beats_the_environment(self):
        code, j, _ = sluice_json("status", "--json", "--server", self.d.url,
                                 url="http://127.0.0.1:1")
        self.assertEqual(code, 0)

    def test_agents_and_tasks(self):
        sluice("acquire", "--agent", "lister", "--input", "10", "--output", "1", url=self.d.url)
        status, _ = self.d.post("/v1/leases", {"agent": "x", "input_tokens": 1,
                                               "output_tokens": 1})
        code, j, _ = sluice_json("agents", "--json", url=self.d.url)
        self.assertEqual(code, 0)
        self.assertIn("lister", [a["name"] for a in j["agents"]])
        code, out, _ = sluice("agents", url=self.d.url)
        self.assertIn("lister", out)
        code, j, _ = sluice_json("tasks", "--json", url=self.d.url)
        self.assertEqual(code, 0)
        self.assertIn("tasks", j)
        self.assertEqual(sluice("tasks", url=self.d.url)[0], 0)

    def test_acquire_prints_the_lease_id_for_shell_scripts(self):
        code, out, _ = sluice("acquire", "--agent", "sh", "--input", "10", "--output", "1",
                              url=self.d.url)
        self.assertEqual(code, 0)
        lease = out.strip()
        self.assertTrue(lease)
        self.assertEqual(sluice("settle", lease, "--input", "10", "--output", "1",
                                url=self.d.url)[0], 0)
        code, j, _ = sluice_json("settle", lease, "--input", "10", "--output", "1", "--json",
                                 url=self.d.url)
        self.assertEqual((code, j["error"]["type"]), (6, "already_settled"))

    def test_settle_with_429_reports_it_and_prints_the_backoff(self):
        _, g, _ = sluice_json("acquire", "--agent", "hit", "--pool", "small", "--input", "10",
                              "--output", "1", "--json", url=self.d.url)
        code, s, _ = sluice_json("settle", g["lease"], "--input", "10", "--output", "1",
                                 "--got-429", "--retry-after", "2.5", "--header",
                                 "anthropic-ratelimit-input-tokens-limit: 6000",
                                 "--failure-signature", "test_x:abc", "--json", url=self.d.url)
        self.assertEqual(code, 0)
        self.assertGreaterEqual(s["backoff_s"], 2.5)
        self.assertLessEqual(s["backoff_s"], 2.5 + 1.0)
        pool = self.d.pool("small")
        self.assertEqual(pool["totals"]["upstream_429"], 1)
        self.assertAlmostEqual(pool["margin"], 0.80, places=3)

    def test_settle_by_a_token_without_resync_is_applied_and_says_its_headers_were_ignored(self):
        # Issue 25 item 10: docs/client.md passes the provider's headers to the settle; a
        # token that may not resync got 403 (exit 6) and its usage was never applied.
        auth = POOL + "auth:\n  tokens:\n    - token: worker-token-1\n      agent: w1\n"
        with Sluiced(auth) as d:
            env = {"SLUICE_TOKEN": "worker-token-1"}
            code, g, err = sluice_json("acquire", "--agent", "w1", "--input", "100", "--output",
                                       "10", "--json", url=d.url, env=env)
            self.assertEqual(code, 0, err)
            code, s, err = sluice_json("settle", g["lease"], "--input", "60", "--output", "4",
                                       "--header", "anthropic-ratelimit-input-tokens-remaining: 0",
                                       "--json", url=d.url, env=env)
            self.assertEqual(code, 0, err)
            self.assertEqual(s["adjust"], {"input_tokens": 40, "output_tokens": 6})
            self.assertEqual(s["headers_ignored"], 1)
            code, s, _ = sluice_json("settle", g["lease"], "--input", "60", "--output", "4",
                                     "--json", url=d.url, env=env)
            self.assertEqual((code, s["error"]["type"]), (6, "already_settled"))

    def test_unknown_pool_or_never_fitting_need_exits_6(self):
        code, j, _ = sluice_json("acquire", "--agent", "a", "--pool", "nosuch", "--input", "1",
                                 "--output", "1", "--json", url=self.d.url)
        self.assertEqual((code, j["error"]["type"]), (6, "not_found"))
        code, j, _ = sluice_json("acquire", "--agent", "a", "--input", "10000000", "--output",
                                 "1", "--json", url=self.d.url)
        self.assertEqual((code, j["error"]["type"]), (6, "exceeds_capacity"))

    def test_an_answer_that_is_not_the_apis_json_is_named_protocol_error(self):
        # Beyond sluiced's own types (api.md), --json names a failure by its result code's
        # name (sl_strerror), never a bare "error".
        class NotSluiced(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.send_response(500)
                self.send_header("Content-Length", "4")
                self.end_headers()
                self.wfile.write(b"oops")

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), NotSluiced)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        code, j, _ = sluice_json("cancel", "l_1", "--json",
                                 url="http://127.0.0.1:%d" % server.server_port)
        self.assertEqual((code, j["error"]["type"]), (6, "protocol_error"))

    def test_unreachable_sluiced_exits_4_for_every_command(self):
        url = "http://127.0.0.1:%d" % free_port()
        for args in (("status",), ("agents",), ("tasks",), ("cancel", "l_1"),
                     ("settle", "l_1", "--input", "1", "--output", "1"),
                     ("acquire", "--agent", "a", "--input", "1", "--output", "1")):
            code, j, _ = sluice_json(*args, "--json", url=url)
            self.assertEqual(code, 4, args)
            self.assertEqual(j["error"]["type"], "unreachable")

    def test_checkpoint_save_then_verify_finds_the_changed_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for i in range(20):
                p = os.path.join(tmp, "f%d.txt" % i)
                with open(p, "w") as f:
                    f.write("content %d\n" % i)
                files.append(p)
            cp = os.path.join(tmp, "agent.checkpoint")
            args = ["checkpoint", "save", cp, "--goal", "ship it", "--step", "2/3",
                    "--decision", "use jansson", "--reason", "exact 64-bit integers",
                    "--next-call", '{"messages":[{"role":"user","content":"hi"}]}']
            for p in files:
                args += ["--file", p]
            code, out, err = sluice(*args)
            self.assertEqual(code, 0, err)
            code, j, _ = sluice_json("checkpoint", "verify", cp, "--json")
            self.assertEqual(code, 0)
            self.assertEqual((j["goal"], j["step"], j["files"], j["changed"]),
                             ("ship it", "2/3", 20, []))
            self.assertEqual(j["next_call"]["messages"][0]["content"], "hi")
            with open(files[13], "a") as f:
                f.write("edited\n")
            code, out, _ = sluice("checkpoint", "verify", cp)
            self.assertEqual(code, 7)
            self.assertEqual(out, "changed\t%s\n" % files[13])
            code, j, _ = sluice_json("checkpoint", "verify", cp, "--json")
            self.assertEqual(j["changed"], [{"path": files[13], "state": "changed"}])
            # Bad input: 1.
            self.assertEqual(sluice("checkpoint", "verify", os.path.join(tmp, "nope"))[0], 1)
            self.assertEqual(sluice("checkpoint", "save", cp, "--goal", "g", "--file",
                                    os.path.join(tmp, "nope"))[0], 1)
            self.assertEqual(sluice("checkpoint", "save", cp, "--goal", "g", "--next-call",
                                    "{oops")[0], 1)
            with open(files[0], "w") as f:
                f.write("not a checkpoint")
            self.assertEqual(sluice("checkpoint", "verify", files[0])[0], 1)

    def test_acquire_saves_the_checkpoint_before_waiting(self):
        with tempfile.TemporaryDirectory() as tmp:
            cp = os.path.join(tmp, "wait.checkpoint")
            self.assertEqual(sluice("checkpoint", "save", cp, "--goal", "wait")[0], 0)
            # Fill the small pool (capacity 5100), then ask for more than is left.
            _, hog, _ = sluice_json("acquire", "--agent", "hog", "--pool", "small",
                                    "--input", "5000", "--output", "1", "--json", url=self.d.url)
            code, q, _ = sluice_json("acquire", "--agent", "waiter", "--pool", "small",
                                     "--input", "1000", "--output", "1", "--wait", "1",
                                     "--checkpoint", cp, "--json", url=self.d.url)
            self.assertEqual(code, 5)
            with open(cp) as f:
                saved = json.load(f)
            self.assertEqual(saved["request_id"], q["request_id"])
            self.assertEqual(saved["goal"], "wait")
            sluice("cancel", hog["lease"], url=self.d.url)


if __name__ == "__main__":
    unittest.main()
