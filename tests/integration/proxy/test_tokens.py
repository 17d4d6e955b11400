"""test_tokens.py - hashed tokens through the proxy: the SDK's API key is a tokens_file token
or a minted one, bounded by its tier's roles as on the lease API; a revoked one is 401."""
import hashlib
import json
import os
import secrets
import tempfile
import unittest

from harness import Emu, Sluiced, message, pool_yaml

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

    def test_file_and_minted_tokens_are_sdk_keys_bounded_by_their_tier(self):
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
        status, _, payload = self.s.anthropic(message(), agent="w-1", key=self.file_token,
                                              extra={"x-sluice-role": "worker"})
        self.assertEqual(status, 200, payload)
        self.admin("DELETE", "/v1/admin/tokens/" + t["id"])
        status, _, payload = self.s.anthropic(message(), agent="m-1", key=t["token"])
        self.assertEqual(status, 401, payload)


if __name__ == "__main__":
    unittest.main()
