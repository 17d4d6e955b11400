"""test_output_reserve.py - what the proxy reserves for output equals what the provider holds.

The provider holds a call's whole max_tokens from its start (Anthropic's output-TPM
estimate, OpenAI's TPM), so: a call above what the pool can ever hold is refused here,
in the provider's own error shape, before it costs the pool a 429 (issue 25 item 8).
"""
import json
import unittest

from harness import EMU_FAST, Emu, Sluiced, chat, message, pool_yaml


def emu_at(limits):
    """Instant answers, with the provider's real limits (given as emulator flags)."""
    args = list(EMU_FAST)
    for flag, value in limits.items():
        args[args.index(flag) + 1] = str(value)
    return Emu(args)


class NeverFitsIsRefusedLocally(unittest.TestCase):
    def test_max_tokens_128000_on_a_60000_output_tpm_pool_is_400_and_never_upstream(self):
        with emu_at({"--input-tpm": 400000, "--output-tpm": 60000, "--rpm": 4000}) as emu, \
                Sluiced("pools:\n" + pool_yaml("claude", emu.url, "anthropic",
                                               "input_tpm: 400000\noutput_tpm: 60000\n"
                                               "rpm: 4000")) as s:
            status, _, payload = s.anthropic(message(max_tokens=128000), agent="big")
            self.assertEqual(status, 400, payload)
            body = json.loads(payload)
            self.assertEqual(body["type"], "error")
            self.assertEqual(body["error"]["type"], "invalid_request_error")
            msg = body["error"]["message"]
            for part in ("output_tokens", "128000", "60000"):
                self.assertIn(part, msg)
            self.assertEqual(emu.stats()["requests"], 0)  # never forwarded
            pool = s.pool("claude")
            self.assertAlmostEqual(pool["margin"], 0.85)
            # The pool is as it was: the next ordinary call is served at once.
            status, _, payload = s.anthropic(message(max_tokens=8192), agent="big")
            self.assertEqual(status, 200, payload)
            self.assertEqual(emu.stats()["http_429"], 0)
            self.assertAlmostEqual(s.pool("claude")["margin"], 0.85)

    def test_a_combined_openai_bucket_refuses_input_plus_max_tokens_above_it(self):
        with emu_at({"--input-tpm": 0, "--output-tpm": 0, "--rpm": 500}) as emu, \
                Sluiced("pools:\n" + pool_yaml("gpt", emu.url, "openai",
                                               "tokens_tpm: 30000\nrpm: 500")) as s:
            status, _, payload = s.openai(chat(max_tokens=26000), agent="big")
            self.assertEqual(status, 400, payload)
            err = json.loads(payload)["error"]
            self.assertEqual(err["type"], "invalid_request_error")
            self.assertIn("tokens", err["message"])
            self.assertIn("30000", err["message"])
            self.assertEqual(emu.stats()["requests"], 0)
            self.assertAlmostEqual(s.pool("gpt")["margin"], 0.85)


if __name__ == "__main__":
    unittest.main()
