"""Long-context calls count against the standard RPM (issue 28 item 5), through the proxy,
against sluice-emu.

The provider lists no RPM of its own for long-context requests, and sluice-emu (as the
provider's page reads) counts each of them against --rpm. sluiced's long-context pool
therefore shares its parent's request bucket (docs/design.md "Long context",
request_parent): a burst of short and long calls that together exceed the RPM is held at
the pool's capacity (rpm x margin) by sluiced, the rest wait for its refill, and the
emulator answers none with a 429. Without the shared bucket the long calls took no request
from the parent, and the same burst met the emulator's RPM 429s. A pool with `keys:` gives each key a long-context pool
of its own, "claude:KEY:long_context", sharing that key's request bucket: a long call is
picked a key, leases from its long-context pool and goes out with that key."""
import json
import os
import threading
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, pool_yaml, wait_for

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


def backend_config():
    """The backend line: memory here; redis_daemon/test_proxy_long_context.py sets Redis."""
    return ""


def burst(s, texts):
    """Sends every text at once, one agent each; returns the (status, payload) answers."""
    answers, lock = [], threading.Lock()

    def call(i, text):
        status, _, payload = s.anthropic(message(text, model=SONNET), agent="a%d" % i)
        with lock:
            answers.append((status, payload))

    threads = [threading.Thread(target=call, args=(i, t)) for i, t in enumerate(texts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def granted(s):
    return [e for e in s.events() if e["event"] == "granted"]


class LongContextRpm(unittest.TestCase):
    POOL = ("input_tpm: 10000000\noutput_tpm: 10000000\nrpm: %d\nmargin_start: %g\n"
            "max_queue_wait_s: 60\nlong_context: {threshold_tokens: 2000, "
            "input_tpm: 10000000, output_tpm: 10000000}" % (RPM, MARGIN))

    def test_a_burst_of_long_and_short_calls_meets_no_emulator_429(self):
        with Emu(emu_args()) as emu, Sluiced(backend_config() + "pools:\n" + pool_yaml(
                "claude", emu.url, "anthropic", self.POOL)) as s:
            wait_for(lambda: s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")
            texts = ["short"] * SHORT_CALLS + [LONG] * LONG_CALLS
            answers = burst(s, texts)
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



KEY_BIG = "sk-ant-key-big-0123456789abcdef"
KEY_SMALL = "sk-ant-key-small-0123456789abcdef"


class LongContextKeys(unittest.TestCase):
    """Two keys, each a workspace on its own emulator with its own RPM and long-context
    limits; the pool's long_context gives each key its long-context pool."""

    def config(self, big, small):
        return (backend_config() + "pools:\n  claude:\n    provider: anthropic\n"
                "    upstream_url: %s\n    input_tpm: 10000000\n    output_tpm: 10000000\n"
                "    rpm: %d\n    margin_start: %g\n    max_queue_wait_s: 60\n"
                "    long_context: {threshold_tokens: 2000, input_tpm: 10000000, "
                "output_tpm: 10000000}\n    keys:\n"
                "      - name: big\n        api_key_env: SLUICE_KEY_BIG\n"
                "      - name: small\n        api_key_env: SLUICE_KEY_SMALL\n"
                "        upstream_url: %s\n" % (big.url, RPM // 2, MARGIN, small.url))

    def test_each_key_has_its_long_context_pool_and_a_burst_meets_no_429(self):
        os.environ["SLUICE_KEY_BIG"] = KEY_BIG
        os.environ["SLUICE_KEY_SMALL"] = KEY_SMALL
        args = emu_args()
        args[args.index("--rpm") + 1] = str(RPM // 2)
        with Emu(args, key=KEY_BIG) as big, Emu(args, key=KEY_SMALL) as small, \
                Sluiced(self.config(big, small)) as s:
            wait_for(lambda: s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")
            pools = {p["name"] for p in s.get("/v1/pools")["pools"]}
            self.assertTrue({"claude:big:long_context", "claude:small:long_context"} <= pools,
                            pools)
            # One long call: a key's long-context pool, forwarded with that key's secret.
            status, _, payload = s.anthropic(message(LONG, model=SONNET), agent="one")
            self.assertEqual(status, 200, payload)
            pool = granted(s)[-1]["pool"]
            self.assertIn(pool, ("claude:big:long_context", "claude:small:long_context"))
            emu = big if pool.startswith("claude:big") else small
            self.assertEqual(emu.stats()["long_context"], 1)
            # The lease API routes by input_tokens + cached_tokens, then to a key.
            status, _, payload = s.request(
                "POST", "/v1/leases",
                {"agent": "api", "pool": "claude", "input_tokens": 1500, "cached_tokens": 1000,
                 "output_tokens": 10}, {"content-type": "application/json"})
            self.assertEqual(status, 200, payload)
            self.assertTrue(granted(s)[-1]["pool"].endswith(":long_context"), granted(s)[-1])
            status, _, payload = s.request("DELETE", "/v1/leases/" + json.loads(payload)["lease"])
            self.assertEqual(status, 200, payload)
            # The keys' 60 requests per minute each, asked 124 long and short calls at once.
            texts = ["short"] * SHORT_CALLS + [LONG] * LONG_CALLS
            answers = burst(s, texts)
            self.assertEqual([a for a in answers if a[0] != 200], [])
            stats = big.stats(), small.stats()
            self.assertEqual([st["http_429"] for st in stats], [0, 0], stats)
            self.assertEqual(sum(st["admitted"] for st in stats), len(texts) + 1)
            self.assertEqual(sum(st["long_context"] for st in stats), LONG_CALLS + 1)
            used = {e["pool"] for e in granted(s)}
            self.assertTrue({"claude:big", "claude:small"} & used, used)


if __name__ == "__main__":
    unittest.main()
