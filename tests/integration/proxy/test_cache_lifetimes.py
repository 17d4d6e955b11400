"""The proxy and 1-hour prompt caches and long-context limits (issue 28 item 5), against
sluice-emu.

Time is scaled: the emulator's and the pool's 5-minute lifetime is 2 s here (so 1 s
stands for 2.5 minutes, and a 3 s pause for the 7.5 minutes a 5-minute entry does not
outlive), while a "ttl": "1h" write lives 60 s in the emulator and, as the proxy reads
it from cache_control, 3600 s in sluiced."""
import json
import time
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, pool_yaml

ROOMY = "input_tpm: 10000000\noutput_tpm: 10000000\nrpm: 100000\ncache_ttl_s: 2"
SONNET = "claude-sonnet-4-5-20250929"
TEXT = "You are a coding agent working in a large repository. " * 300


def system(ttl=None):
    cc = {"type": "ephemeral"}
    if ttl:
        cc["ttl"] = ttl
    return [{"type": "text", "text": TEXT, "cache_control": cc}]


def granted(s):
    return [e for e in s.events() if e["event"] == "granted"]


class OneHourCache(unittest.TestCase):
    def run_pair(self, ttl):
        """Two calls of one agent with the same cached system prompt, 3 s apart: the
        provider's usage of the second, and what sluiced charged each."""
        emu_args = EMU_FAST + ["--cache-ttl-s", "2", "--cache-ttl-1h-s", "60"]
        with Emu(emu_args) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY)) as s:
            status, _, payload = s.anthropic(message("hi", model=SONNET, system=system(ttl)),
                                             agent="cc")
            self.assertEqual(status, 200, payload)
            first = json.loads(payload)["usage"]
            time.sleep(3)
            status, _, payload = s.anthropic(message("hi", model=SONNET, system=system(ttl)),
                                             agent="cc")
            self.assertEqual(status, 200, payload)
            second = json.loads(payload)["usage"]
            return first, second, [e["input_tokens"] for e in granted(s)]

    def test_a_1h_prefix_reused_after_the_5m_life_is_a_read_charged_warm(self):
        first, second, charged = self.run_pair("1h")
        self.assertGreater(first["cache_creation"]["ephemeral_1h_input_tokens"], 2000)
        self.assertEqual(second["cache_read_input_tokens"],
                         first["cache_creation_input_tokens"])  # the provider kept it
        self.assertGreater(charged[0], 2000)  # cold: the prefix charged as input
        self.assertLess(charged[1], 100)      # warm: sluiced knew it lives an hour

    def test_a_5m_prefix_reused_after_its_life_is_written_again_and_charged_cold(self):
        first, second, charged = self.run_pair(None)
        self.assertEqual(second["cache_read_input_tokens"], 0)
        self.assertEqual(second["cache_creation_input_tokens"],
                         first["cache_creation_input_tokens"])
        self.assertGreater(charged[0], 2000)
        self.assertGreater(charged[1], 2000)


class LongContext(unittest.TestCase):
    POOL = ROOMY + "\nlong_context: {threshold_tokens: 2000, input_tpm: 600000, output_tpm: 600000}"

    def test_a_long_prompt_leases_from_the_long_context_pool(self):
        emu_args = EMU_FAST + ["--long-context-threshold", "2000",
                               "--long-context-input-tpm", "600000"]
        with Emu(emu_args) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", self.POOL)) as s:
            status, _, payload = s.anthropic(message(TEXT, model=SONNET), agent="lc")
            self.assertEqual(status, 200, payload)
            status, _, payload = s.anthropic(message("short", model=SONNET), agent="lc")
            self.assertEqual(status, 200, payload)
            pools = [e["pool"] for e in granted(s)]
            self.assertEqual(pools, ["claude:long_context", "claude"])
            self.assertEqual(emu.stats()["long_context"], 1)
            lc = s.pool("claude:long_context")
            self.assertEqual(lc["limits"]["input_tpm"], 600000)
            # the lease API routes by input_tokens + cached_tokens
            status, _, payload = s.request(
                "POST", "/v1/leases",
                {"agent": "api", "pool": "claude", "input_tokens": 1500, "cached_tokens": 1000,
                 "output_tokens": 10}, {"content-type": "application/json"})
            self.assertEqual(status, 200, payload)
            self.assertEqual([e["pool"] for e in granted(s)][-1], "claude:long_context")

    def test_a_bad_long_context_key_is_refused_naming_it(self):
        with Emu(EMU_FAST) as emu:
            bad = ROOMY + "\nlong_context: {threshold_tokens: 2000, input_tmp: 5}"
            with self.assertRaises(RuntimeError) as cm:
                Sluiced("pools:\n" + pool_yaml("claude", emu.url, "anthropic", bad))
            self.assertIn("pools.claude.long_context: unknown key 'input_tmp'", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
