"""test_cold_start.py - a synchronised fleet start meets no acceleration 429 through sluice's ramp.

sluice-emu runs with its acceleration limit on: after an idle period (and at start) the
uncached input admitted in any 60 s may grow at most 20x per minute from a floor of
20,000 tokens per minute. 100 agents send one ~260-token request each at the same
instant (1.3 x the floor):
  - straight to the emulator, the ones past the floor are refused with the acceleration
    429 (the emulator models the limit);
  - through sluiced with `ramp: on` at the same floor and factor, none is: the pool
    admits at most the ramp's rate and queues the rest, and every agent is answered.
Bounded: the ramp admits the whole fleet in about 20 s.
"""
import http.client
import json
import threading
import time
import unittest

from harness import ANTHROPIC_VERSION, REAL_KEY, Emu, Sluiced, pool_yaml
import procs

AGENTS = 100
FLOOR_TPM = 20000
FACTOR = 20
EMU_ARGS = ["--input-tpm", "100000000", "--output-tpm", "100000000", "--rpm", "1000000",
            "--ttft-ms", "0", "--tokens-per-s", "100000", "--latency-spread", "0",
            "--output-tokens", "8", "--accel-idle-s", "60", "--accel-factor", str(FACTOR),
            "--accel-floor-tpm", str(FLOOR_TPM)]
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 16,
        "messages": [{"role": "user", "content": "ramp " * 250}]}


def fleet(send):
    """Runs `send(i)` for every agent at once (a barrier); returns their statuses."""
    statuses = [None] * AGENTS
    barrier = threading.Barrier(AGENTS)

    def run(i):
        barrier.wait(timeout=30)
        statuses[i] = send(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(AGENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return statuses


class ColdStart(unittest.TestCase):
    def test_straight_to_the_emulator_a_cold_burst_meets_acceleration_429s(self):
        with Emu(EMU_ARGS) as emu:
            def send(i):
                conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=60)
                status, _, body = procs.request(conn, "POST", "/v1/messages", BODY, {
                    "x-api-key": REAL_KEY, "anthropic-version": ANTHROPIC_VERSION})
                if status == 429:
                    self.assertIn(b"acceleration limit", body)
                return status
            statuses = fleet(send)
            stats = emu.stats()
        refused = statuses.count(429)
        print("straight to sluice-emu: %d of %d refused with the acceleration 429"
              % (refused, AGENTS))
        self.assertGreater(refused, 0)
        self.assertEqual(stats["http_429_acceleration"], refused)
        self.assertEqual(statuses.count(200) + refused, AGENTS)

    def test_through_sluiced_with_the_ramp_no_acceleration_429(self):
        extra = ("input_tpm: 100000000\nramp: on\nramp_floor_tpm: %d\nramp_factor: %d\n"
                 "ramp_idle_s: 60" % (FLOOR_TPM, FACTOR))
        with Emu(EMU_ARGS) as emu:
            with Sluiced("pools:\n" + pool_yaml("claude", emu.url, extra=extra)) as s:
                started = time.monotonic()
                answers = {}

                def send(i):
                    status, _, body = s.anthropic(BODY, agent="agent-%d" % i)
                    if status != 200:
                        answers[status] = body[:300]
                    return status
                statuses = fleet(send)
                took_s = time.monotonic() - started
                stats = emu.stats()
                _, err = s.stop()
        print("through sluiced (ramp x%d/min from %d TPM): %d answered, %d acceleration "
              "429s, %.1f s" % (FACTOR, FLOOR_TPM, statuses.count(200),
                                stats["http_429_acceleration"], took_s))
        self.assertEqual(stats["http_429_acceleration"], 0)
        self.assertEqual(statuses.count(200), AGENTS, (answers, err[-3000:]))
        self.assertLess(took_s, 60)

    def test_without_the_ramp_sluiced_meets_them_and_learns_the_ramp(self):
        # ramp: auto (the default): no ramp until the pool meets an acceleration 429.
        with Emu(EMU_ARGS) as emu:
            with Sluiced("pools:\n" + pool_yaml("claude", emu.url,
                                                 extra="input_tpm: 100000000")) as s:
                statuses = fleet(lambda i: s.anthropic(BODY, agent="agent-%d" % i)[0])
                stats = emu.stats()
                pool = s.pool("claude")
                _, _, metrics = s.request("GET", "/metrics")
                _, err = s.stop()
        met = stats["http_429_acceleration"]
        print("through sluiced without a ramp: %d acceleration 429s" % met)
        self.assertGreater(met, 0)
        self.assertEqual(statuses.count(429), met)
        self.assertIn("pool 'claude' met an acceleration 429: ramping again", err)
        cap = [l for l in metrics.decode().splitlines()
               if l.startswith('sluice_pool_ramp_cap_tpm{pool="claude"}')]
        self.assertEqual(len(cap), 1)
        self.assertGreater(int(cap[0].split()[-1]), 0)
        # Not an ordinary 429: the margin was not cut. It may have climbed above its start
        # on the answered calls' headers (a step per round trip) and been reset to the
        # start by a header showing less room; a cut takes it below the start (0.80), from
        # where only recover_every (180 s, longer than this test) brings it back.
        self.assertGreaterEqual(pool["margin"], 0.85)


if __name__ == "__main__":
    unittest.main()
