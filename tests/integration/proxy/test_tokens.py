"""test_tokens.py - minted and tokens_file tokens through the proxy: the SDK's API key is a
minted token (its tier's roles bound it as the lease API's would), and a call whose body is
still arriving when a reload replaces the configuration finishes with the token it
authenticated with (the replaced tokens are kept a while, not freed under the call: under
ASan, .ci/run, a freed one is a heap-use-after-free)."""
import hashlib
import json
import os
import secrets
import socket
import tempfile
import time
import unittest

from harness import ANTHROPIC_VERSION, Emu, Sluiced, message, pool_yaml, read_until

ADMIN = "admin-token-0001"


def sha(token):
    return hashlib.sha256(token.encode()).hexdigest()


class TokensThroughTheProxy(unittest.TestCase):
    def setUp(self):
        self.emu = Emu()
        self.addCleanup(self.emu.stop)
        self.file_token = secrets.token_hex(32)
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-proxy-tokens-")
        self.addCleanup(self.dir.cleanup)
        self.tokens_file = os.path.join(self.dir.name, "tokens.yaml")
        with open(self.tokens_file, "w") as f:
            f.write("tokens:\n  - sha256: %s\n    agent_prefix: w-\n    tier: workers\n"
                    % sha(self.file_token))
        self.config = ("pools:\n%s" % pool_yaml("claude", self.emu.url, "anthropic",
                                                "input_tpm: 1000000\noutput_tpm: 60000") +
                       "tiers:\n  workers:\n    roles: [worker]\n"
                       "auth:\n  admin_token: %s\n  tokens_file: %s\n  minted_file: %s\n"
                       % (ADMIN, self.tokens_file, os.path.join(self.dir.name, "m.tokens")))
        self.s = Sluiced(self.config)
        self.addCleanup(self.s.stop)

    def admin(self, method, path, body=None):
        status, _, payload = self.s.request(method, path, body, headers={
            "authorization": "Bearer " + ADMIN, "content-type": "application/json"})
        return status, json.loads(payload) if payload else None

    def test_a_minted_token_is_an_sdk_key_bounded_by_its_tier(self):
        status, t = self.admin("POST", "/v1/admin/tokens",
                               {"agent_prefix": "m-", "tier": "workers"})
        self.assertEqual(status, 201, t)
        status, _, payload = self.s.anthropic(message(), agent="m-1", key=t["token"],
                                              extra={"x-sluice-role": "worker"})
        self.assertEqual(status, 200, payload)
        status, _, payload = self.s.anthropic(message(), agent="m-1", key=t["token"],
                                              extra={"x-sluice-role": "planner"})
        self.assertEqual(status, 403, payload)
        self.assertIn(b"planner", payload)
        self.admin("DELETE", "/v1/admin/tokens/" + t["id"])
        status, _, payload = self.s.anthropic(message(), agent="m-1", key=t["token"])
        self.assertEqual(status, 401, payload)

    def test_a_call_whose_body_arrives_across_a_reload_keeps_its_token(self):
        body = json.dumps(message()).encode()
        head = ("POST /anthropic/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/json\r\nanthropic-version: %s\r\n"
                "x-api-key: %s\r\nx-sluice-agent: w-1\r\nx-sluice-role: worker\r\n"
                "Content-Length: %d\r\n\r\n" % (ANTHROPIC_VERSION, self.file_token, len(body)))
        sock = socket.create_connection(("127.0.0.1", self.s.port), timeout=30)
        self.addCleanup(sock.close)
        sock.sendall(head.encode() + body[:10])
        time.sleep(0.3)  # the head is read and the token identified
        for _ in range(3):  # each reload replaces every configured token
            status, answer = self.admin("POST", "/v1/admin/reload")
            self.assertEqual(status, 200, answer)
        sock.sendall(body[10:])
        reply = read_until(sock, b"\r\n\r\n", 30)
        self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:200])


if __name__ == "__main__":
    unittest.main()
