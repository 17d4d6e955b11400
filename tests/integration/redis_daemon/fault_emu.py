"""fault_emu.py - Redis faults under a bounded load through the proxy, judged by sluice-emu:
Redis restarted without persistence, Redis stopped 10 s (fail open and fail closed), one
of three replicas killed with SIGKILL. The emulator's own buckets decide: each scenario
prints the grants, the emulator's 429s, the worst 60 s window of billed input tokens
against what the provider's bucket allowed in it (its level at the window's start plus a
minute's refill, both sampled from its /stats), and the lease ids reused, and requires no
emulator 429, no window above its allowance and no id reused.

Slow (about 35 s a scenario): CTest label `slow`.
"""
import importlib.util
import json
import os
import threading
import time
import unittest

from redis_harness import OnRedis, wait_until

# The proxy tests' harness (sluice-emu, a proxying sluiced), under a name of its own: the
# server tests' harness that redis_harness uses is also called `harness`.
_spec = importlib.util.spec_from_file_location(
    "proxy_harness", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proxy",
                                  "harness.py"))
proxy_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proxy_harness)
REAL_KEY, Emu, ProxySluiced = proxy_harness.REAL_KEY, proxy_harness.Emu, proxy_harness.Sluiced

LIMIT_TPM = 60000  # the provider's input tokens per minute, and the pool's
EMU_ARGS = ["--input-tpm", str(LIMIT_TPM), "--output-tpm", "100000000", "--rpm", "1000000",
            "--ttft-ms", "300", "--tokens-per-s", "1000", "--latency-spread", "0",
            "--output-tokens", "16"]
SENTENCE = "The quick brown fox jumps over the lazy dog. "  # about 10 tokens
PROMPT = SENTENCE * 200  # about 2,000 tokens: 16 agents in flight hold 32,000
AGENTS = 16


def config(emu_url, redis, fail):
    # cold_start named (the default, empty): the proxy harness adds `cold_start: full`
    # to a config without one, and full buckets against a provider spent at the start
    # are 429s the scenarios would blame on the fault.
    return ("cold_start: empty\nbackend: %s\npools:\n  default:\n    upstream_url: %s\n    provider: anthropic\n"
            "    api_key_env: SLUICE_TEST_KEY\n    input_tpm: %d\n    output_tpm: 100000000\n"
            "    max_queue_wait_s: 8\n"
            % (redis.url(fail=fail, tick_ms=200, timeout_ms=300), emu_url, LIMIT_TPM))


class Load:
    """AGENTS threads calling the proxies in turn until stopped; counts answers."""

    def __init__(self, proxies):
        self.proxies = list(proxies)
        self.stop_at = None
        self.lock = threading.Lock()
        self.status = {}
        self.errors = []
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(AGENTS)]

    def run(self, i):
        body = {"model": "claude-emu-1", "max_tokens": 16,
                "messages": [{"role": "user", "content": PROMPT}]}
        k = i
        while time.monotonic() < self.stop_at:
            with self.lock:
                targets = list(self.proxies)
            p = targets[k % len(targets)]
            k += 1
            try:
                st, _, _ = p.anthropic(body, agent="agent-%d" % i)
            except OSError as e:
                st = 0  # a killed replica
                with self.lock:
                    self.errors.append(repr(e))
            with self.lock:
                self.status[st] = self.status.get(st, 0) + 1
            if st != 200:
                time.sleep(0.2)

    def start(self, seconds):
        self.stop_at = time.monotonic() + seconds
        for t in self.threads:
            t.start()

    def join(self):
        for t in self.threads:
            t.join(60)


class Sampler:
    """The emulator's billed input tokens and its input bucket's level every 0.25 s, for
    the worst 60 s window (what was billed before it started is not counted).

    A token bucket lets a window hold what the bucket had at the window's start plus a
    window's refill (LIMIT_TPM for 60 s), never more: that is the provider's own rule,
    and sluice may use it all (its margin climbs toward what the provider's `remaining`
    headers vouch for), so each window is judged against that allowance."""

    def __init__(self, emu):
        self.emu = emu
        self.samples = [(time.monotonic(),) + self.billed_and_level()]
        self.done = False
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def billed_and_level(self):
        s = self.emu.stats()
        return (s["tokens"]["input"] + s["tokens"]["cache_creation_input"],
                s["levels"]["input_tokens"])

    def run(self):
        while not self.done:
            time.sleep(0.25)
            self.samples.append((time.monotonic(),) + self.billed_and_level())

    def stop(self):
        self.done = True
        self.thread.join(5)

    def worst_window(self, window_s=60.0):
        """(billed, allowed) of the window billed furthest above its allowance."""
        worst, j = (0, LIMIT_TPM), 0
        for t, billed, _ in self.samples:
            while self.samples[j][0] < t - window_s:
                j += 1
            # billed by t since the window began (a sample at or before its start), and
            # what the bucket held then: the emulator bills a call and takes it from its
            # bucket in one step, so one /stats answer has both as of the same instant
            start = self.samples[j - 1] if j > 0 else self.samples[0]
            cand = (billed - start[1], LIMIT_TPM * min(1.0, (t - start[0]) / window_s) + start[2])
            if cand[0] - cand[1] > worst[0] - worst[1]:
                worst = cand
        return worst


def reused_ids(replicas):
    """Lease ids granted to two different leases: a grant from a ticket may be logged by
    the granting replica and by the one holding the ticket (one lease, one ticket)."""
    seen = {}
    for r in replicas:
        for e in r.events_all():
            if e.get("event") == "granted" and e.get("lease"):
                seen.setdefault(e["lease"], []).append(e.get("ticket") or None)
    reused = 0
    for lease, tickets in seen.items():
        distinct = len([t for t in tickets if t is None]) + len({t for t in tickets if t})
        reused += distinct > 1
    return len(seen), reused


class Replica(ProxySluiced):
    def events_all(self):
        if not os.path.exists(self.event_log):
            return []
        with open(self.event_log) as f:
            return [json.loads(line) for line in f if line.strip()]


def drain_provider(emu):
    """Spends most of the emulator's bucket (about 51,000 of 60,000) with one call of its
    own, as a provider under steady load is: a 60 s window of what sluice then lets
    through is judged against the limit alone, not against the provider's full bucket at
    its start; what is left is about the margin's reserve."""
    body = {"model": "claude-emu-1", "max_tokens": 1,
            "messages": [{"role": "user", "content": SENTENCE * 5000}]}
    conn = proxy_harness.http.client.HTTPConnection("127.0.0.1", emu.port, timeout=30)
    st, _, payload = proxy_harness.procs.request(
        conn, "POST", "/v1/messages", body,
        {"content-type": "application/json", "x-api-key": REAL_KEY,
         "anthropic-version": proxy_harness.ANTHROPIC_VERSION})
    assert st == 200, payload
    return emu.stats()["levels"]["input_tokens"]


class Faults(OnRedis):
    def setUp(self):
        self.emu = Emu(EMU_ARGS)
        self.emu_level = drain_provider(self.emu)
        super().setUp()
        self.dead = []

    def tearDown(self):
        super().tearDown()
        for r in self.replicas + self.dead:
            r.dir.cleanup()
        self.emu.stop()

    def start(self, n, fail):
        for _ in range(n):
            self.replicas.append(Replica(config(self.emu.url, self.redis, fail), key=REAL_KEY))
        for r in self.replicas:
            self.assertTrue(wait_until(lambda: r.request("GET", "/readyz")[0] == 200, 10))
        time.sleep(0.6)  # heartbeats have counted the replicas

    def judge(self, name, load, sampler, logs):
        time.sleep(0.5)  # the last calls billed, the event logs flushed (every 250 ms)
        sampler.stop()
        stats = self.emu.stats()
        leases, reused = reused_ids(logs)
        worst, allowed = sampler.worst_window()
        print("%s: grants %d (answers %s), emulator 429s %d, worst 60 s window %d input tokens "
              "of %d the provider's bucket allowed in it (%.2fx; limit %d, the provider held "
              "%d at the start), lease ids reused %d"
              % (name, leases, dict(sorted(load.status.items())), stats["http_429"], worst,
                 allowed, worst / allowed, LIMIT_TPM, self.emu_level, reused))
        if load.errors:
            print("  connection errors: %s" % sorted(set(load.errors)))
        # The load got through: sluice refills 850 tokens/s (about 10 calls in 24 s).
        self.assertGreaterEqual(load.status.get(200, 0), 5)
        self.assertEqual(stats["http_429"], 0)
        self.assertLessEqual(worst, allowed)
        self.assertEqual(reused, 0)

    def run_with_fault(self, name, fault, before_s=12, after_s=12, fail="closed", n=2):
        self.start(n, fail)
        sampler = Sampler(self.emu)
        load = Load(self.replicas)
        load.start(before_s + after_s + 30)  # stopped below; bounded either way
        time.sleep(before_s)
        fault(load)
        time.sleep(after_s)
        load.stop_at = 0
        load.join()
        self.judge(name, load, sampler, self.replicas + self.dead)

    def test_redis_restarted_without_persistence(self):
        def fault(load):
            self.redis.restart_empty()
        self.run_with_fault("redis restarted empty", fault)

    def stopped_10_s(self, load):
        self.redis.stop_signal()
        time.sleep(10)
        self.redis.cont_signal()

    def test_redis_stopped_10_s_failing_open(self):
        self.run_with_fault("redis stopped 10 s, fail open", self.stopped_10_s, fail="open")

    def test_redis_stopped_10_s_failing_closed(self):
        self.run_with_fault("redis stopped 10 s, fail closed", self.stopped_10_s, fail="closed")

    def test_one_of_three_replicas_killed(self):
        def fault(load):
            victim = self.replicas[2]
            with load.lock:
                load.proxies.remove(victim)
            victim.proc.kill()
            victim.proc.wait(5)
            victim.proc.stdout.close()
            victim.proc.stderr.close()
            self.replicas.remove(victim)
            self.dead.append(victim)
        self.run_with_fault("one of three replicas killed", fault, n=3)


if __name__ == "__main__":
    unittest.main()
