"""test_oversize.py - a call above the pool's starting capacity but within its limit is answered, as straight.

Issue 24 ("one agent through the proxy is within 1.10x of direct on any call size"): the
provider accepts a call whose input, or whose max_tokens, is above 85% of its limit (the
pool's starting margin) from a full bucket. sluiced refused it with a 400 (`can never
fit pool ...: its capacity is 170000`) while the same call straight to sluice-emu was
answered 200. It now waits for a full bucket (at once on a fresh pool) and is charged
whole; only a need above the limit is refused, as the provider would.
"""
import time
import unittest

from harness import Emu, Sluiced, message, pool_yaml, wait_for

LIMITS = "input_tpm: 400000\noutput_tpm: 200000\nrpm: 4000"
EMU_400K = ["--input-tpm", "400000", "--output-tpm", "200000", "--rpm", "4000",
            "--ttft-ms", "0", "--tokens-per-s", "100000", "--latency-spread", "0",
            "--output-tokens", "24"]


def backend_config():
    """The `backend:` line of the config: none here (memory); the Redis variant of these
    tests (tests/integration/redis_daemon/test_proxy_oversize.py) replaces this."""
    return ""


def proxy(emu, limits=LIMITS):
    s = Sluiced(backend_config() + "pools:\n" + pool_yaml("claude", emu.url, "anthropic", limits))
    wait_for(lambda: s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")
    return s


class Oversize(unittest.TestCase):
    def test_max_tokens_190000_on_a_200000_output_pool_is_answered_at_once(self):
        # 190,000 > 170,000 = 200,000 x 0.85; straight to the emulator: 200.
        with Emu(EMU_400K) as emu, proxy(emu) as s:
            for stream in (False, True):
                started = time.monotonic()
                status, _, payload = s.anthropic(message(max_tokens=190000, stream=stream),
                                                 agent="cc")
                self.assertEqual(status, 200, payload[:300])
                self.assertLess(time.monotonic() - started, 10)
                self.assertNotIn(b"error", payload[-400:] if stream else payload[:40])
            self.assertEqual([e for e in s.events() if e["event"] == "queued"], [])
            self.assertEqual(emu.stats()["http_429"], 0)

    def test_an_input_of_360000_tokens_on_a_400000_pool_is_answered(self):
        with Emu(EMU_400K) as emu, proxy(emu) as s:
            status, _, payload = s.anthropic(message("the " * 360000, max_tokens=1024),
                                             agent="cc")
            self.assertEqual(status, 200, payload[:300])
            bucket = s.pool("claude")["buckets"]["input_tokens"]
            # charged whole: the level went below zero (the provider holds it all)
            self.assertLess(bucket["level"], 0, bucket)
            self.assertEqual(emu.stats()["http_429"], 0)

    def test_a_need_above_the_limit_is_still_refused_naming_it(self):
        with Emu(EMU_400K) as emu, proxy(emu) as s:
            status, _, payload = s.anthropic(message(max_tokens=200001), agent="cc")
            self.assertEqual(status, 400, payload)
            self.assertIn(b"output_tokens 200001 can never fit", payload)
            self.assertIn(b"its limit is 200000", payload)
            self.assertEqual(emu.stats()["requests"], 0)  # never sent upstream


if __name__ == "__main__":
    unittest.main()
