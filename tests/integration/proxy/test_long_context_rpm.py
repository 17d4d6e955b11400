"""Long-context calls count against the standard RPM (issue 28 item 5), through the proxy,
against sluice-emu.

The provider lists no RPM of its own for long-context requests, and sluice-emu (as the
provider's page reads) counts each of them against --rpm. sluiced's long-context pool
therefore shares its parent's request bucket (docs/design.md "Long context",
request_parent): a burst of short and long calls that together exceed the RPM is held at
the pool's capacity (rpm x margin) by sluiced, the rest wait for its refill, and the
emulator answers none with a 429. Without the shared bucket the long calls took no request
from the parent, and the same burst met the emulator's RPM 429s."""
import json
import threading
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, pool_yaml

SONNET = "claude-sonnet-4-5-20250929"
LONG = "You are a coding agent working in a large repository. " * 300  # about 3,000 tokens
RPM = 120
MARGIN = 0.95  # capacity 114: the 10 calls above it wait about 5 s for the refill
SHORT_CALLS = LONG_CALLS = 62  # 124 calls at once: more than the emulator's 120 per minute


def emu_args():
    args = list(EMU_FAST)
    args[args.index("--rpm") + 1] = str(RPM)
    return args + ["--long-context-threshold", "2000", "--long-context-input-tpm", "10000000",
                   "--long-context-output-tpm", "10000000"]


class LongContextRpm(unittest.TestCase):
    POOL = ("input_tpm: 10000000\noutput_tpm: 10000000\nrpm: %d\nmargin_start: %g\n"
            "max_queue_wait_s: 60\nlong_context: {threshold_tokens: 2000, "
            "input_tpm: 10000000, output_tpm: 10000000}" % (RPM, MARGIN))

    def test_a_burst_of_long_and_short_calls_meets_no_emulator_429(self):
        with Emu(emu_args()) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", self.POOL)) as s:
            answers, lock = [], threading.Lock()

            def call(i, text):
                status, _, payload = s.anthropic(message(text, model=SONNET), agent="a%d" % i)
                with lock:
                    answers.append((status, payload))

            texts = ["short"] * SHORT_CALLS + [LONG] * LONG_CALLS
            threads = [threading.Thread(target=call, args=(i, t)) for i, t in enumerate(texts)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(len(answers), len(texts))
            self.assertEqual([a for a in answers if a[0] != 200], [])
            stats = emu.stats()
            # Every call reached the provider once, and it refused none.
            self.assertEqual(stats["http_429"], 0, stats)
            self.assertEqual(stats["admitted"], len(texts), stats)
            self.assertEqual(stats["long_context"], LONG_CALLS, stats)
            # Both pools' grants took from the one request bucket, the parent's: what did
            # not fit its capacity at once waited in either queue for its refill.
            pools = {p["name"]: p for p in s.get("/v1/pools")["pools"]}
            names = ("claude", "claude:long_context")
            self.assertEqual(sum(pools[n]["totals"]["granted"] for n in names), len(texts))
            self.assertGreater(sum(pools[n]["totals"]["queued"] for n in names), 0, pools)


if __name__ == "__main__":
    unittest.main()
