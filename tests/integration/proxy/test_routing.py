"""test_routing.py - the proxy picks the pool from the request's model (pools.NAME.models)."""
import json
import unittest

from harness import EMU_FAST, Emu, Sluiced, chat, message, pool_yaml

ROOMY = "input_tpm: 10000000\noutput_tpm: 10000000\nrpm: 100000"


def config(emu, proxy=""):
    return ((("proxy:\n" + proxy) if proxy else "") + "pools:\n" +
            pool_yaml("large", emu.url, "anthropic", ROOMY,
                      "models: [\"claude-sonnet-*\", \"claude-opus-*\"]") +
            pool_yaml("small", emu.url, "anthropic", ROOMY, "models: [\"claude-haiku-*\"]") +
            pool_yaml("gpt", emu.url, "openai", ROOMY))


def pools_granted(s):
    return [e["pool"] for e in s.events() if e["event"] == "granted"]


class ModelsRouteToPools(unittest.TestCase):
    def test_each_model_goes_to_the_pool_that_lists_it_and_several_share_one(self):
        with Emu(EMU_FAST) as emu, Sluiced(config(emu)) as s:
            for model in ("claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001",
                          "claude-opus-4-5-20251101"):
                status, _, payload = s.anthropic(message(model=model), agent="cc")
                self.assertEqual(status, 200, payload)
            # The agent names a pool: that wins over the model.
            status, _, payload = s.anthropic(message(model="claude-haiku-4-5-20251001"),
                                             agent="cc", extra={"x-sluice-pool": "large"})
            self.assertEqual(status, 200, payload)
            # A pool without `models` still serves its API as before.
            status, _, payload = s.openai(chat(), agent="g")
            self.assertEqual(status, 200, payload)
            self.assertEqual(pools_granted(s), ["large", "small", "large", "large", "gpt"])

    def test_a_model_no_pool_serves_is_a_clear_400_or_goes_to_the_default_pool(self):
        with Emu(EMU_FAST) as emu:
            with Sluiced(config(emu)) as s:
                status, _, payload = s.anthropic(message(model="claude-mystery-9"), agent="cc")
                self.assertEqual(status, 400, payload)
                err = json.loads(payload)["error"]
                self.assertEqual(err["type"], "invalid_request_error")
                self.assertIn("claude-mystery-9", err["message"])
                self.assertIn("no pool", err["message"])
                self.assertEqual(emu.stats()["requests"], 0)
            with Sluiced(config(emu, "  default_pool: small\n")) as s:
                status, _, payload = s.anthropic(message(model="claude-mystery-9"), agent="cc")
                self.assertEqual(status, 200, payload)
                self.assertEqual(pools_granted(s), ["small"])

    def test_a_default_pool_that_is_not_a_proxied_pool_is_a_config_error(self):
        with Emu(EMU_FAST) as emu:
            try:
                s = Sluiced(config(emu, "  default_pool: nope\n"))
            except Exception as e:  # the banner never comes: sluiced exits
                self.assertIn("proxy.default_pool", str(e))
                return
            s.stop()
            self.fail("sluiced started with a default_pool that is not a pool")


if __name__ == "__main__":
    unittest.main()
