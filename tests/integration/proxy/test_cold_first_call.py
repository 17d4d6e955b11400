"""test_cold_first_call.py - the first call through a freshly started sluiced (cold_start: empty) is not held for the refill.

Issue 24 ("one agent through the proxy is within 1.10x of direct on any call size"): with
sluiced's default `cold_start: empty` a pool starts empty, refills over a minute, and the
provider's first rate-limit headers raise it. The first call of Claude Code (max_tokens
128,000) on a 200,000 output-TPM pool needed 128,000 of the refill and nothing else
brought headers: it waited 45 s (3.9 s straight to sluice-emu, 49.1 s through sluiced).
Now the proxy asks the provider where it stands with the smallest call (proxy_probe.c)
and the queued call is granted from its headers.
"""
import time
import unittest

from harness import Emu, Sluiced, message, pool_yaml, wait_for

LIMITS = "input_tpm: 400000\noutput_tpm: 200000\nrpm: 4000"
EMU_400K = ["--input-tpm", "400000", "--output-tpm", "200000", "--rpm", "4000",
            "--ttft-ms", "0", "--tokens-per-s", "100000", "--latency-spread", "0",
            "--output-tokens", "24"]


def backend_config(cold_start):
    """The `backend:` line and the cold start: the memory backend here; the Redis variant
    (tests/integration/redis_daemon/test_proxy_cold_first_call.py) replaces this."""
    return "cold_start: %s\n" % cold_start


def proxy(emu, cold_start, extra=""):
    s = Sluiced(backend_config(cold_start) + extra + "pools:\n" +
                pool_yaml("claude", emu.url, "anthropic", LIMITS))
    wait_for(lambda: s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")
    return s


class ColdFirstCall(unittest.TestCase):
    def test_three_max_tokens_128000_calls_on_a_cold_pool_are_answered_at_once(self):
        with Emu(EMU_400K) as emu, proxy(emu, "empty") as s:
            for stream in (False, True, False):
                started = time.monotonic()
                status, _, payload = s.anthropic(message(max_tokens=128000, stream=stream),
                                                 agent="cc")
                self.assertEqual(status, 200, payload[:300])
                # before: the first call waited ~45 s for 128,000 of the refill
                self.assertLess(time.monotonic() - started, 10)
            events = s.events()
            # one probe lease (asked again after a few ms when the refill had not yet
            # brought its request: queued, cancelled, asked again)
            probes = [e for e in events if e.get("agent") == "sluice-probe"]
            leases = [e for e in probes if e["event"] == "granted"]
            self.assertEqual(len(leases), 1, probes)
            self.assertEqual(leases[0]["output_tokens"], 1)
            self.assertEqual([e["event"] for e in probes][-2:], ["granted", "settled"], probes)
            self.assertEqual(emu.stats()["http_429"], 0)
            self.assertEqual(emu.stats()["requests"], 4)  # the probe and the three calls

    def test_probe_false_sends_the_provider_only_the_clients_calls(self):
        # proxy.probe: false (docs/proxy.md): the cold pool waits for its refill instead.
        # A call small enough for the first seconds of refill keeps the test short.
        with Emu(EMU_400K) as emu, proxy(emu, "empty", "proxy:\n  probe: false\n") as s:
            status, _, payload = s.anthropic(message(max_tokens=20000), agent="cc")
            self.assertEqual(status, 200, payload[:300])
            self.assertEqual([e for e in s.events() if e.get("agent") == "sluice-probe"], [])
            self.assertEqual(emu.stats()["requests"], 1)
            self.assertEqual(emu.stats()["http_429"], 0)

    def test_a_pool_started_full_sends_no_probe(self):
        with Emu(EMU_400K) as emu, proxy(emu, "full") as s:
            status, _, payload = s.anthropic(message(max_tokens=128000), agent="cc")
            self.assertEqual(status, 200, payload[:300])
            self.assertEqual(emu.stats()["requests"], 1)
            self.assertEqual([e for e in s.events() if e.get("agent") == "sluice-probe"], [])


if __name__ == "__main__":
    unittest.main()
