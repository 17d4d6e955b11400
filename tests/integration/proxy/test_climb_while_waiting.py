"""test_climb_while_waiting.py - one agent's call held for the refill lets the margin climb meanwhile.

Issue 24 ("one agent through the proxy is within 1.10x of direct on any call size"): when
one agent's calls bind the input bucket, its next call waits for the refill; straight to
sluice-emu its 429's retry-after says when. Through sluiced the margin (0.85 at the start)
made the bucket shallower and its refill slower, and with no other call in flight no
answer came to vouch for a step of its climb: two calls of ~300k input tokens on a 400k
pool took 46.1 s against 31.8 s straight (1.45x). Now the proxy asks the provider for its
word while such a call waits (proxy_probe.c), each agreeing answer a step.
"""
import time
import unittest

from harness import Emu, Sluiced, message, pool_yaml, wait_for

LIMITS = "input_tpm: 400000\noutput_tpm: 200000\nrpm: 4000"
EMU_400K = ["--input-tpm", "400000", "--output-tpm", "200000", "--rpm", "4000",
            "--ttft-ms", "0", "--tokens-per-s", "100000", "--latency-spread", "0",
            "--output-tokens", "24"]


def backend_config():
    """The `backend:` line: none here (memory)."""
    return ""


class ClimbWhileWaiting(unittest.TestCase):
    def test_a_held_call_is_granted_once_the_climbed_margin_holds_it(self):
        with Emu(EMU_400K) as emu, Sluiced(backend_config() + "pools:\n" + pool_yaml(
                "claude", emu.url, "anthropic", LIMITS)) as s:
            wait_for(lambda: s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")
            status, _, payload = s.anthropic(message("the " * 320000, max_tokens=64), agent="a")
            self.assertEqual(status, 200, payload[:300])
            started = time.monotonic()
            status, _, payload = s.anthropic(message("the " * 200000, max_tokens=64), agent="a")
            waited_s = time.monotonic() - started
            self.assertEqual(status, 200, payload[:300])
            events = s.events()
            margins = [e["margin"] for e in events if e["event"] == "margin"]
            probes = [e for e in events if e["event"] == "granted" and e["agent"] == "sluice-probe"]
            # The cause: the margin climbed to its ceiling while the call waited, one agreeing
            # probe a step (0.85 -> 0.97: 12 steps; the first call's own answer earns one).
            self.assertAlmostEqual(max(margins), 0.97, places=6, msg=margins)
            self.assertGreaterEqual(len(probes), 11, probes)
            # Straight the provider takes it after 18 s (0.3 of its bucket to refill); at
            # the start margin it waited 31.8 s, at 0.97 about 20.4 s.
            self.assertLess(waited_s, 26, (waited_s, margins))
            self.assertEqual(emu.stats()["http_429"], 0)


if __name__ == "__main__":
    unittest.main()
