"""test_tokens.py - agent tokens at fleet scale: minted through the admin API (shown once, kept
hashed, durable across kill -9), revoked (401 at once and after a restart), listed without
secrets, read hashed from a tokens_file (reloaded by SIGHUP and POST /v1/admin/reload),
bounded by tiers (a tier's change reaches every token of it on reload) and bounded in number
(auth.max_minted_tokens). A 2,000-token file loads and authenticates."""
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import SLUICED, Sluiced, wait_until

SLUICE = os.environ.get("SLUICE", "sluice")
ADMIN = "admin-secret-1"
POOL = "pools:\n  default:\n    input_tpm: 600000\n    output_tpm: 600000\n"


def sha(token):
    return hashlib.sha256(token.encode()).hexdigest()


def config(state_dir, tiers="", extra_auth=""):
    return (POOL + "state_file: %s/state.bin\n" % state_dir + tiers +
            "auth:\n  admin_token: %s\n" % ADMIN + extra_auth)


FREE_TIER = "tiers:\n  free:\n    max_concurrent: 2\n    roles: [worker]\n"


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sluice-tokens-")
        self.addCleanup(self.tmp.cleanup)
        self.state_dir = self.tmp.name

    def start(self, text):
        s = Sluiced(text)
        self.addCleanup(s.stop)
        return s

    def mint(self, s, body, status=201):
        code, answer, _ = s.call("POST", "/v1/admin/tokens", body, token=ADMIN)
        self.assertEqual(code, status, answer)
        return answer

    def lease(self, s, token, agent, **kw):
        body = {"agent": agent, "input_tokens": 10, "output_tokens": 10}
        body.update(kw)
        code, answer, _ = s.call("POST", "/v1/leases", body, token=token)
        return code, answer

    def listing(self, s):
        code, answer, _ = s.call("GET", "/v1/admin/tokens", token=ADMIN)
        self.assertEqual(code, 200, answer)
        return answer

    def kill9(self, s):
        s.proc.kill()
        s.proc.wait(timeout=5)
        s.proc.stdout.close()
        s.proc.stderr.close()
        s.dir.cleanup()


class MintListRevoke(Base):
    def test_a_minted_token_works_at_once_and_after_a_kill_9(self):
        text = config(self.state_dir)
        s = self.start(text)
        t = self.mint(s, {"agent": "b1"})
        self.assertTrue(t["token"].startswith("slt_") and len(t["token"]) == 68, t)
        self.assertEqual(self.lease(s, t["token"], "b1")[0], 200)
        self.assertEqual(self.lease(s, t["token"], "b2")[0], 403)
        self.kill9(s)  # the mint was on disk before it was answered
        s2 = self.start(text)
        self.assertEqual(self.lease(s2, t["token"], "b1")[0], 200)
        ids = [x["id"] for x in self.listing(s2)["tokens"]]
        self.assertIn(t["id"], ids)

    def test_a_revoked_token_is_refused_at_once_and_after_a_restart(self):
        text = config(self.state_dir)
        s = self.start(text)
        keep, gone = self.mint(s, {"agent": "k1"}), self.mint(s, {"agent_prefix": "g-"})
        self.assertEqual(self.lease(s, gone["token"], "g-1")[0], 200)
        code, answer, _ = s.call("DELETE", "/v1/admin/tokens/" + gone["id"], token=ADMIN)
        self.assertEqual((code, answer), (200, {"id": gone["id"], "status": "revoked"}))
        code, answer = self.lease(s, gone["token"], "g-1")
        self.assertEqual(code, 401, answer)
        code, answer, _ = s.call("DELETE", "/v1/admin/tokens/" + gone["id"], token=ADMIN)
        self.assertEqual(code, 404, answer)
        self.assertIn(gone["id"], answer["error"]["message"])
        s.stop()
        s2 = self.start(text)
        self.assertEqual(self.lease(s2, gone["token"], "g-1")[0], 401)
        self.assertEqual(self.lease(s2, keep["token"], "k1")[0], 200)

    def test_a_revoke_ends_the_event_streams_of_the_token(self):
        s = self.start(config(self.state_dir))
        gone, keep = self.mint(s, {"agent": "g1"}), self.mint(s, {"agent": "k1"})
        socks = {}
        for t in (gone, keep):
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            self.addCleanup(sock.close)
            sock.sendall(("GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Authorization: Bearer %s\r\n\r\n" % t["token"]).encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(1)
            self.assertIn(b" 200 ", head.split(b"\r\n")[0] + b" ")
            socks[t["id"]] = sock
        code, answer, _ = s.call("DELETE", "/v1/admin/tokens/" + gone["id"], token=ADMIN)
        self.assertEqual(code, 200, answer)
        ended, deadline = False, time.monotonic() + 5
        while not ended and time.monotonic() < deadline:
            ended = socks[gone["id"]].recv(65536) == b""  # pings or the end
        self.assertTrue(ended)
        socks[keep["id"]].settimeout(0.5)
        try:
            self.assertNotEqual(socks[keep["id"]].recv(65536), b"")  # still open
        except socket.timeout:
            pass

    def test_the_list_shows_no_secret_and_the_file_keeps_only_hashes(self):
        s = self.start(config(self.state_dir, extra_auth=(
            "  tokens:\n    - token: plain-secret-1\n      agent: p1\n")))
        t = self.mint(s, {"agent": "b1", "roles": ["worker"], "max_unblocks": 3})
        self.assertEqual(self.lease(s, t["token"], "b1", role="worker")[0], 200)
        body = self.listing(s)
        text = json.dumps(body)
        for secret in (t["token"], sha(t["token"]), "plain-secret-1", sha("plain-secret-1")):
            self.assertNotIn(secret, text)
        mine = [x for x in body["tokens"] if x["id"] == t["id"]][0]
        self.assertEqual((mine["agent"], mine["source"], mine["bounds"]["roles"],
                          mine["bounds"]["max_unblocks"]), ("b1", "minted", ["worker"], 3))
        self.assertIsNotNone(mine["created"])
        self.assertIsNotNone(mine["last_used"])
        self.assertEqual(body["minted"], 1)
        with open(os.path.join(self.state_dir, "state.bin.tokens")) as f:
            stored = f.read()
        self.assertNotIn(t["token"], stored)
        self.assertIn(sha(t["token"]), stored)

    def test_a_refused_mint_names_the_field_and_changes_nothing(self):
        s = self.start(config(self.state_dir, FREE_TIER))
        self.mint(s, {"agent": "b1"})
        before = self.listing(s)
        for body, field, value in (({"agent": "b", "max_rpm": -1}, "max_rpm", "-1"),
                                   ({"agent": "b", "tier": "gold"}, "tier", "gold"),
                                   ({"agent": "b", "colour": 1}, "colour", "colour"),
                                   ({"agent": "b", "agent_prefix": "c"}, "agent", "agent_prefix"),
                                   ({"agent_prefix": "c-", "max_concurrent": 2}, "caps", "c-"),
                                   ({"agent_prefix": "c-", "tier": "free"}, "tier", "c-")):
            answer = self.mint(s, body, status=400)
            msg = answer["error"]["message"]
            self.assertIn(field, msg, body)
            self.assertIn(value, msg, body)
        self.assertEqual(self.listing(s), before)

    def test_only_the_admin_token_mints_lists_and_revokes(self):
        s = self.start(config(self.state_dir))
        t = self.mint(s, {"agent": "b1"})
        for method, path in (("POST", "/v1/admin/tokens"), ("GET", "/v1/admin/tokens"),
                             ("DELETE", "/v1/admin/tokens/" + t["id"])):
            code, answer, _ = s.call(method, path, {"agent": "x"} if method == "POST" else None,
                                     token=t["token"])
            self.assertEqual(code, 403, (method, answer))
        self.assertEqual(self.lease(s, t["token"], "b1")[0], 200)

    def test_a_configured_token_is_not_revoked_through_the_api(self):
        s = self.start(config(self.state_dir, extra_auth=(
            "  tokens:\n    - token: plain-secret-1\n      agent: p1\n      id: p1-token\n")))
        code, answer, _ = s.call("DELETE", "/v1/admin/tokens/p1-token", token=ADMIN)
        self.assertEqual(code, 409, answer)
        self.assertIn("auth.tokens", answer["error"]["message"])
        self.assertEqual(self.lease(s, "plain-secret-1", "p1")[0], 200)

    def test_minting_past_max_minted_tokens_is_refused_with_the_key(self):
        s = self.start(config(self.state_dir, extra_auth="  max_minted_tokens: 3\n"))
        made = [self.mint(s, {"agent": "b%d" % i}) for i in range(3)]
        answer = self.mint(s, {"agent": "b9"}, status=409)
        self.assertIn("auth.max_minted_tokens", answer["error"]["message"])
        self.assertIn("3", answer["error"]["message"])
        self.assertEqual(self.listing(s)["minted"], 3)
        s.call("DELETE", "/v1/admin/tokens/" + made[0]["id"], token=ADMIN)
        self.mint(s, {"agent": "b9"})

    def test_a_damaged_minted_file_stops_the_start_naming_it(self):
        path = os.path.join(self.state_dir, "state.bin.tokens")
        cfg = os.path.join(self.state_dir, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(config(self.state_dir))
        for content, says in (("{not json", "not a minted-token file"),
                              ('{"version":1,"tokens":[{"id":"tok_1","sha256":"ab",'
                               '"agent":"a"}]}', "record 0"),
                              ('{"version":1,"tokens":[{"id":"tok_1","sha256":"%s",'
                               '"agent":"a","tier":"gold","bounds":{}}]}' % sha("x"), "gold")):
            with open(path, "w") as f:
                f.write(content)
            r = subprocess.run([SLUICED, "--config", cfg, "--listen", "127.0.0.1:0"],
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(path, r.stderr)
            self.assertIn(says, r.stderr)

    def test_minting_without_a_file_to_keep_tokens_is_refused(self):
        s = self.start(POOL + "auth:\n  admin_token: %s\n" % ADMIN)
        answer = self.mint(s, {"agent": "b1"}, status=409)
        self.assertIn("auth.minted_file", answer["error"]["message"])


class Tiers(Base):
    def test_tier_bounds_apply_to_its_tokens_and_a_reload_changes_them(self):
        text = config(self.state_dir, FREE_TIER, "  tokens:\n"
                      "    - token: yaml-secret-1\n      agent: y1\n      tier: free\n")
        s = self.start(text)
        minted = self.mint(s, {"agent": "m1", "tier": "free"})
        parked = {}
        for token, agent in (("yaml-secret-1", "y1"), (minted["token"], "m1")):
            self.assertEqual(self.lease(s, token, agent, role="worker")[0], 200)
            self.assertEqual(self.lease(s, token, agent, role="worker")[0], 200)
            code, answer = self.lease(s, token, agent, role="worker")  # the tier's cap: parked
            self.assertEqual((code, answer["status"]), (202, "queued"), answer)
            parked[token] = answer["ticket"]
            code, answer = self.lease(s, token, agent, role="planner")
            self.assertEqual(code, 403, answer)
        s.write_config(text.replace("max_concurrent: 2", "max_concurrent: 4").replace(
            "roles: [worker]", "roles: [worker, planner]"))
        code, answer, _ = s.call("POST", "/v1/admin/reload", token=ADMIN)
        self.assertEqual(code, 200, answer)
        for token, agent in (("yaml-secret-1", "y1"), (minted["token"], "m1")):
            code, answer, _ = s.call("GET", "/v1/tickets/" + parked[token], token=token)
            self.assertEqual((code, answer["status"]), (200, "granted"), answer)
            self.assertEqual(self.lease(s, token, agent, role="planner")[0], 200)
            code, answer = self.lease(s, token, agent, role="planner")
            self.assertEqual(code, 202, answer)
        listed = {x["id"]: x for x in self.listing(s)["tokens"]}
        self.assertEqual(listed[minted["id"]]["bounds"]["max_concurrent"], 4)
        self.assertEqual(listed[minted["id"]]["bounds"]["roles"], ["worker", "planner"])

    def test_a_token_own_bound_overrides_its_tier(self):
        s = self.start(config(self.state_dir, FREE_TIER))
        t = self.mint(s, {"agent": "m1", "tier": "free", "max_concurrent": 3})
        self.assertEqual(t["bounds"]["max_concurrent"], 3)
        self.assertEqual(t["bounds"]["roles"], ["worker"])
        for _ in range(3):
            self.assertEqual(self.lease(s, t["token"], "m1", role="worker")[0], 200)
        self.assertEqual(self.lease(s, t["token"], "m1", role="worker")[0], 202)

    def test_a_reload_dropping_a_tier_a_minted_token_names_is_refused(self):
        text = config(self.state_dir, FREE_TIER)
        s = self.start(text)
        t = self.mint(s, {"agent": "m1", "tier": "free"})
        s.write_config(text.replace(FREE_TIER, ""))
        code, answer, _ = s.call("POST", "/v1/admin/reload", token=ADMIN)
        self.assertEqual(code, 400, answer)
        self.assertIn(t["id"], answer["error"]["message"])
        self.assertIn("free", answer["error"]["message"])
        self.assertEqual(self.lease(s, t["token"], "m1", role="planner")[0], 403)


class TokensFile(Base):
    def write_tokens(self, entries):
        path = os.path.join(self.state_dir, "tokens.yaml")
        with open(path, "w") as f:
            f.write("tokens:\n")
            for e in entries:
                f.write("  - " + "\n    ".join("%s: %s" % kv for kv in e.items()) + "\n")
        return path

    def test_hashed_entries_authenticate_and_reload_picks_up_a_new_one(self):
        a, b = secrets.token_hex(32), secrets.token_hex(32)
        path = self.write_tokens([{"sha256": sha(a), "agent": "fa", "id": "fa-token"}])
        text = config(self.state_dir, extra_auth="  tokens_file: %s\n" % path)
        s = self.start(text)
        self.assertEqual(self.lease(s, a, "fa")[0], 200)
        self.assertEqual(self.lease(s, b, "fb")[0], 401)
        self.assertEqual(self.lease(s, sha(a), "fa")[0], 401)  # the hash is not the token
        self.write_tokens([{"sha256": sha(a), "agent": "fa"}, {"sha256": sha(b), "agent": "fb"}])
        s.proc.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: self.lease(s, b, "fb")[0] == 200, 5))
        self.write_tokens([{"sha256": sha(b), "agent": "fb"}])
        code, answer, _ = s.call("POST", "/v1/admin/reload", token=ADMIN)
        self.assertEqual(code, 200, answer)
        self.assertEqual(self.lease(s, a, "fa")[0], 401)
        listed = [x for x in self.listing(s)["tokens"] if x["source"] == "file"]
        self.assertEqual([x["agent"] for x in listed], ["fb"])

    def test_a_changed_tokens_file_is_picked_up_without_a_signal(self):
        a, b = secrets.token_hex(32), secrets.token_hex(32)
        path = self.write_tokens([{"sha256": sha(a), "agent": "fa"}])
        s = self.start(config(self.state_dir, extra_auth="  tokens_file: %s\n" % path))
        self.assertEqual(self.lease(s, b, "fb")[0], 401)
        tmp = path + ".new"
        os.rename(self.write_tokens([{"sha256": sha(b), "agent": "fb"}]), tmp)
        os.rename(tmp, path)  # as a secret store's sync would: whole, by rename
        self.assertTrue(wait_until(lambda: self.lease(s, b, "fb")[0] == 200, 10))
        self.assertEqual(self.lease(s, a, "fa")[0], 401)

    def test_errors_name_the_file_line_and_key(self):
        good = sha("x" * 64)
        for entries, line, key in (
                ([{"sha256": good, "agent": "a"}, {"sha256": "abc", "agent": "b"}], 4,
                 "tokens[].sha256"),
                ([{"sha256": good, "agent": "a", "max_rpm": "many"}], 4, "tokens[].max_rpm"),
                ([{"sha256": good, "agent": "a", "colour": "red"}], 4, "tokens[]"),
                ([{"sha256": good, "agent": "a", "tier": "gold"}], 2, "tokens[].tier"),
                ([{"sha256": good, "agent": "a"}, {"sha256": good, "agent": "b"}], 4,
                 "listed twice")):
            path = self.write_tokens(entries)
            cfg = os.path.join(self.state_dir, "sluice.yaml")
            with open(cfg, "w") as f:
                f.write(config(self.state_dir, extra_auth="  tokens_file: tokens.yaml\n"))
            r = subprocess.run([SLUICED, "--check-config", "--config", cfg],
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("%s:%d: " % (path, line), r.stderr)
            self.assertIn(key, r.stderr)

    def test_a_bad_tokens_file_on_reload_keeps_the_running_tokens(self):
        a = secrets.token_hex(32)
        path = self.write_tokens([{"sha256": sha(a), "agent": "fa"}])
        s = self.start(config(self.state_dir, extra_auth="  tokens_file: %s\n" % path))
        with open(path, "w") as f:
            f.write("tokens:\n  - sha256: nothex\n    agent: fa\n")
        code, answer, _ = s.call("POST", "/v1/admin/reload", token=ADMIN)
        self.assertEqual(code, 400, answer)
        self.assertIn(path + ":2", answer["error"]["message"])
        self.assertEqual(self.lease(s, a, "fa")[0], 200)

    def test_two_thousand_tokens_load_and_authenticate(self):
        tokens = [secrets.token_hex(32) for _ in range(2000)]
        path = self.write_tokens([{"sha256": sha(t), "agent": "agent-%04d" % i, "tier": "std"}
                                  for i, t in enumerate(tokens)])
        text = config(self.state_dir, "tiers:\n  std:\n    max_concurrent: 4\n",
                      "  tokens_file: %s\n" % path)
        cfg = os.path.join(self.state_dir, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(text)
        r = subprocess.run([SLUICED, "--check-config", "--config", cfg], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("auth on, 2000 agent tokens, 1 tier)", r.stdout)
        s = self.start(text)
        for i in (0, 1, 999, 1998, 1999):
            self.assertEqual(self.lease(s, tokens[i], "agent-%04d" % i)[0], 200, i)
            self.assertEqual(self.lease(s, tokens[i], "agent-%04d" % (i ^ 1))[0], 403, i)
        self.assertEqual(self.lease(s, secrets.token_hex(32), "agent-0000")[0], 401)
        first = self.listing(s)
        self.assertEqual((len(first["tokens"]), first["total"], first["next_cursor"]),
                         (1000, 2000, "1000"))
        code, rest, _ = s.call("GET", "/v1/admin/tokens?limit=5000&cursor=1000", token=ADMIN)
        self.assertEqual((code, len(rest["tokens"]), rest["next_cursor"]), (200, 1000, None))
        self.assertEqual(rest["tokens"][-1]["agent"], "agent-1999")
        for query, field in (("limit=0", "limit"), ("cursor=2001", "cursor"),
                             ("limit=x", "limit")):
            code, answer, _ = s.call("GET", "/v1/admin/tokens?" + query, token=ADMIN)
            self.assertEqual(code, 400, answer)
            self.assertIn(field, answer["error"]["message"])


class Cli(Base):
    def sluice(self, s, *args):
        env = dict(os.environ, SLUICE_URL="http://127.0.0.1:%d" % s.port, SLUICE_TOKEN=ADMIN)
        return subprocess.run([SLUICE, "token", *args], capture_output=True, text=True,
                              timeout=20, env=env)

    def test_create_list_revoke(self):
        s = self.start(config(self.state_dir, FREE_TIER))
        r = self.sluice(s, "create", "--agent", "c1", "--tier", "free", "--max-rpm", "5",
                        "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        made = json.loads(r.stdout)
        self.assertEqual(made["bounds"]["max_rpm"], 5)
        self.assertEqual(self.lease(s, made["token"], "c1", role="worker")[0], 200)
        r = self.sluice(s, "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(made["id"], r.stdout)
        self.assertNotIn(made["token"], r.stdout)
        r = self.sluice(s, "create", "--agent", "c2", "--tier", "gold")
        self.assertEqual(r.returncode, 6, r.stdout)
        self.assertIn("gold", r.stderr)
        r = self.sluice(s, "revoke", made["id"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.lease(s, made["token"], "c1", role="worker")[0], 401)
        r = self.sluice(s, "revoke", made["id"])
        self.assertEqual(r.returncode, 6, r.stdout)


if __name__ == "__main__":
    unittest.main()
