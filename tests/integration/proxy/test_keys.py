"""test_keys.py - a pool of several keys: a fleet through the proxy uses every key, each
with its own limits, and meets no 429 from any (design.md, "A pool of several keys")."""
import http.server
import json
import os
import signal
import subprocess
import tempfile
import threading
import unittest

from harness import SLUICED, Emu, Sluiced, message, reply_json, wait_for

KEY_BIG = "sk-ant-key-big-0123456789abcdef"
KEY_SMALL = "sk-ant-key-small-0123456789abcdef"


def backend_config():
    """The backend line: memory here; redis_daemon/test_proxy_keys.py sets a Redis one."""
    return ""


def emu_args(output_tpm):
    """An emulator with `output_tpm` as its only binding limit and quick answers."""
    return ["--input-tpm", "100000000", "--output-tpm", str(output_tpm), "--rpm", "1000000",
            "--ttft-ms", "0", "--tokens-per-s", "100000", "--latency-spread", "0",
            "--output-tokens", "24"]


def two_keys_config(big, small):
    """Pool `claude` with two keys of unequal tiers, each on its own emulator (a workspace
    each), with the emulator's limits; the second also sends a workspace header."""
    return (backend_config() + "pools:\n  claude:\n    provider: anthropic\n    upstream_url: %s\n"
            "    input_tpm: 100000000\n    rpm: 100000\n    max_queue_wait_s: 120\n"
            "    keys:\n"
            "      - name: big\n        api_key_env: SLUICE_KEY_BIG\n        output_tpm: 6000\n"
            "      - name: small\n        api_key_env: SLUICE_KEY_SMALL\n"
            "        upstream_url: %s\n        output_tpm: 3000\n"
            "        headers:\n          anthropic-workspace: ws-small\n"
            % (big.url, small.url))


class TwoKeys(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["SLUICE_KEY_BIG"] = KEY_BIG
        os.environ["SLUICE_KEY_SMALL"] = KEY_SMALL
        cls.big = Emu(emu_args(6000), key=KEY_BIG)
        cls.small = Emu(emu_args(3000), key=KEY_SMALL)

    @classmethod
    def tearDownClass(cls):
        cls.big.stop()
        cls.small.stop()

    def setUp(self):  # full buckets for each test; the emulators' counts are read as deltas
        self.s = Sluiced(two_keys_config(self.big, self.small))
        wait_for(lambda: self.s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")
        self.before = self.big.stats()["admitted"], self.small.stats()["admitted"]

    def tearDown(self):
        self.s.stop()
        self.s.dir.cleanup()

    def test_a_fleet_uses_both_keys_and_meets_no_429(self):
        # 8 agents x 6 calls of max_tokens 1000: 48,000 output tokens reserved, far more
        # than one key holds at once (5,100 and 2,550 at the 0.85 margin).
        statuses, lock = [], threading.Lock()

        def agent(i):
            for _ in range(6):
                status, _, payload = self.s.anthropic(message(max_tokens=1000),
                                                      agent="fleet-%d" % i)
                with lock:
                    statuses.append((status, payload[:200]))

        threads = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(len(statuses), 48)
        self.assertEqual([s for s in statuses if s[0] != 200], [])
        big, small = self.big.stats(), self.small.stats()
        used = big["admitted"] - self.before[0], small["admitted"] - self.before[1]
        self.assertGreater(used[0], 0, big)
        self.assertGreater(used[1], 0, small)
        self.assertEqual(sum(used), 48)
        self.assertEqual(big["http_429"], 0)
        self.assertEqual(small["http_429"], 0)
        # Each key's pool settled what its emulator billed.
        pools = {p["name"]: p for p in self.s.get("/v1/pools")["pools"]}
        self.assertIn("claude:big", pools)
        self.assertIn("claude:small", pools)
        self.assertNotIn("claude", pools)
        self.assertEqual((pools["claude:small"]["key"], pools["claude:small"]["key_of"]),
                         ("small", "claude"))
        group = self.s.get("/v1/pools/claude")
        self.assertEqual(group["name"], "claude")
        self.assertEqual([k["key"] for k in group["keys"]], ["big", "small"])
        self.assertEqual(group["keys"][1]["limits"]["output_tpm"], 3000)
        _, _, metrics = self.s.request("GET", "/metrics")
        self.assertIn(b'sluice_pool_key{pool="claude:small",key_of="claude",key="small"} 1',
                      metrics)
        self.assertIn(b'sluice_leases_total{pool="claude:small",result="granted"} %d' % used[1],
                      metrics)
        self.assertEqual(pools["claude:big"]["totals"]["granted"], used[0])
        self.assertEqual(pools["claude:small"]["totals"]["granted"], used[1])

    def test_a_lease_names_its_key_never_the_secret(self):
        seen = set()
        for i in range(3):  # a fourth fits neither key's remaining output: it would queue
            status, _, payload = self.s.request(
                "POST", "/v1/leases",
                {"agent": "lease-%d" % i, "pool": "claude", "input_tokens": 10,
                 "output_tokens": 2000})
            self.assertEqual(status, 200, payload)
            body = json.loads(payload)
            self.assertIn(body["key"], ("big", "small"))
            self.assertEqual(body["pool"], "claude:" + body["key"])
            self.assertNotIn(b"sk-ant", payload)
            seen.add(body["key"])
        # 2,000 of 5,100 (big) and of 2,550 (small): the emptiest key takes each lease
        # (big, then small, then big again).
        self.assertEqual(seen, {"big", "small"})

    def test_a_settle_and_its_headers_land_on_its_keys_pool(self):
        def output_level(key):
            return self.s.get("/v1/pools/claude:" + key)["buckets"]["output_tokens"]["level"]

        status, _, payload = self.s.request(
            "POST", "/v1/leases", {"agent": "settler", "pool": "claude", "input_tokens": 10,
                                    "output_tokens": 2000})
        self.assertEqual(status, 200, payload)
        lease = json.loads(payload)
        key, other = "big", "small"
        self.assertEqual(lease["key"], key)  # both full: the tie goes to the first key
        before = output_level(key), output_level(other)
        # The provider says this key's output bucket is at 1,000 (a resync) and the call
        # used 50 of the 2,000 reserved (a refund of 1,950).
        status, _, payload = self.s.request(
            "POST", "/v1/leases/%s/settle" % lease["lease"],
            {"input_tokens": 10, "output_tokens": 50,
             "headers": {"anthropic-ratelimit-output-tokens-remaining": "1000",
                         "anthropic-ratelimit-output-tokens-limit": "6000"}})
        self.assertEqual(status, 200, payload)
        after = output_level(key), output_level(other)
        # The refund alone would have brought this key back to nearly full (before +
        # 1,950); the header it resynced from holds it well below that.
        self.assertLess(after[0], before[0] + 1950 - 400)
        # The other key's bucket only refilled (it was full: it stays full).
        self.assertAlmostEqual(after[1], before[1], delta=1)

    def test_a_replayed_request_id_answers_its_first_key(self):
        body = {"agent": "retrier", "pool": "claude", "input_tokens": 10, "output_tokens": 2000,
                "request_id": "req-1"}
        status, _, payload = self.s.request("POST", "/v1/leases", body)
        self.assertEqual(status, 200, payload)
        first = json.loads(payload)
        self.assertEqual(first["key"], "big")
        # big now holds 3,100 of 5,100 and small 2,550 of 2,550: a new request would go to
        # small; the retry of the same request is the first lease, on big.
        status, _, payload = self.s.request("POST", "/v1/leases", body)
        self.assertEqual(status, 200, payload)
        again = json.loads(payload)
        self.assertTrue(again.get("replayed"), again)
        self.assertEqual((again["lease"], again["key"], again["pool"]),
                         (first["lease"], "big", "claude:big"))

    def test_equal_etas_go_to_the_emptiest_key(self):
        # A fresh agent's lease when both keys could grant at once: the one with more room.
        pools = {p["name"]: p for p in self.s.get("/v1/pools")["pools"]}
        room = {k: pools["claude:" + k]["buckets"]["output_tokens"]["level"]
                / pools["claude:" + k]["buckets"]["output_tokens"]["capacity"]
                for k in ("big", "small")}
        status, _, payload = self.s.request(
            "POST", "/v1/leases", {"agent": "emptiest", "pool": "claude", "input_tokens": 1,
                                    "output_tokens": 1})
        self.assertEqual(status, 200, payload)
        self.assertEqual(json.loads(payload)["key"], max(room, key=room.get), room)

    def test_a_queued_lease_gets_the_soonest_eta_over_the_keys(self):
        # design.md "One queue over the keys": a ticket may be granted by any key of its
        # pool, so its QUEUED eta is the least over the keys, not its own key's.
        def lease(agent, output_tokens):
            status, _, payload = self.s.request(
                "POST", "/v1/leases", {"agent": agent, "pool": "claude", "input_tokens": 10,
                                        "output_tokens": output_tokens, "wait": 0})
            return status, json.loads(payload)

        def bucket(key):
            return self.s.get("/v1/pools/claude:" + key)["buckets"]["output_tokens"]

        status, first = lease("eta-a", 5100)  # all of big (small can never hold it)
        self.assertEqual((status, first["key"]), (200, "big"), first)
        status, second = lease("eta-b", 2550)  # all of small
        self.assertEqual((status, second["key"]), (200, "small"), second)
        # 2,000 more: big refills it in 23.5 s, small in 47 s: queued on big.
        status, queued = lease("eta-c", 2000)
        self.assertEqual((status, queued["status"], queued["key"]), (202, "queued", "big"), queued)
        # small gets 1,500 back (the call used 1,050 of 2,550): it now fits the ticket in
        # about 12 s, sooner than big; its queue is empty, so it would take the ticket.
        status, _, payload = self.s.request(
            "POST", "/v1/leases/%s/settle" % second["lease"],
            {"input_tokens": 10, "output_tokens": 1050})
        self.assertEqual(status, 200, payload)
        status, _, payload = self.s.request("GET", "/v1/tickets/%s?wait=0" % queued["ticket"])
        polled = json.loads(payload)
        self.assertEqual((status, polled["status"]), (202, "queued"), polled)

        def fit_s(key):
            b = bucket(key)
            return max(0.0, 2000 - b["level"]) / (b["capacity"] / 60.0)

        small_s, big_s = fit_s("small"), fit_s("big")
        self.assertGreater(big_s, small_s + 5, (big_s, small_s))
        # The poll's eta is small's time (read a moment later: refill moves it by ms).
        self.assertAlmostEqual(polled["eta"], small_s, delta=0.5)
        self.assertEqual(polled["limited_by"], "output_tokens")

    def test_an_agent_held_on_one_key_is_granted_on_the_other(self):
        # The agent's own 429 report holds it on that key's pool only (a workspace's
        # retry-after): the key the estimate chose rejects it (agent_retry_after), and the
        # other key, which may grant it, is asked next (design.md "A pool of several keys").
        self.s.stop()
        self.s.dir.cleanup()
        self.s = Sluiced(two_keys_config(self.big, self.small).replace(
            "    max_queue_wait_s: 120\n", "    max_queue_wait_s: 5\n    max_report_pool_block_s: 0\n"))
        wait_for(lambda: self.s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")

        def lease(agent):
            status, _, payload = self.s.request(
                "POST", "/v1/leases", {"agent": agent, "pool": "claude", "input_tokens": 10,
                                        "output_tokens": 100, "wait": 0})
            return status, json.loads(payload)

        status, first = lease("held")
        self.assertEqual((status, first["key"]), (200, "big"), first)  # both full: the first
        status, _, payload = self.s.request(
            "POST", "/v1/leases/%s/settle" % first["lease"],
            {"input_tokens": 10, "output_tokens": 0, "got_429": True, "retry_after": 90})
        self.assertEqual(status, 200, payload)
        # big itself is not held (max_report_pool_block_s 0) and still the estimate's choice
        # for another agent; this agent is held there for 90 s, not on small.
        status, again = lease("held")
        self.assertEqual((status, again.get("status"), again.get("key")), (200, "granted", "small"),
                         again)
        # Pinned to big, it is held there: the reject says how long.
        status, _, payload = self.s.request(
            "POST", "/v1/leases", {"agent": "held", "pool": "claude:big", "input_tokens": 10,
                                    "output_tokens": 100, "wait": 0})
        pinned = json.loads(payload)
        self.assertEqual((status, pinned["reason"]), (429, "agent_retry_after"), pinned)
        self.assertGreater(pinned["retry_after"], 80)
        # Both keys emptied: big would fit 2,000 sooner, but holds the agent 90 s; small
        # fits it in 47 s, past max_queue_wait_s: rejected on both, the answer is the sooner.
        for key in ("small", "big"):
            level = int(self.s.get("/v1/pools/claude:" + key)["buckets"]["output_tokens"]["level"])
            status, _, payload = self.s.request(
                "POST", "/v1/leases", {"agent": "fill-" + key, "pool": "claude:" + key,
                                        "input_tokens": 10, "output_tokens": level, "wait": 0})
            self.assertEqual(status, 200, payload)
        status, _, payload = self.s.request(
            "POST", "/v1/leases", {"agent": "held", "pool": "claude", "input_tokens": 10,
                                    "output_tokens": 2000, "wait": 0})
        both = json.loads(payload)
        self.assertEqual((status, both.get("reason")), (429, "queue_wait_exceeds_max"), both)
        self.assertAlmostEqual(both["retry_after"], 2000 / 42.5, delta=1)


class KeysAndTokens(unittest.TestCase):
    def test_a_token_of_the_pool_may_use_its_keys_and_no_other_token_may(self):
        auth = ("auth:\n  tokens:\n"
                "    - {token: tok-claude-0123456789, agent: a1, pools: [claude]}\n"
                "    - {token: tok-other-0123456789, agent: a2, pools: [other]}\n")
        os.environ["SLUICE_KEY_BIG"] = KEY_BIG
        os.environ["SLUICE_KEY_SMALL"] = KEY_SMALL
        with Emu(emu_args(6000), key=KEY_BIG) as big, Emu(emu_args(3000), key=KEY_SMALL) as small:
            text = two_keys_config(big, small) + (
                "  other:\n    input_tpm: 1000\n" + auth)
            with Sluiced(text) as s:
                def lease(token, agent, pool):
                    return s.request("POST", "/v1/leases",
                                     {"agent": agent, "pool": pool, "input_tokens": 1,
                                      "output_tokens": 1},
                                     {"authorization": "Bearer " + token})
                self.assertEqual(lease("tok-claude-0123456789", "a1", "claude")[0], 200)
                status, _, payload = lease("tok-claude-0123456789", "a1", "claude:small")
                self.assertEqual(status, 200, payload)
                self.assertEqual(json.loads(payload)["key"], "small")  # pinned
                self.assertEqual(lease("tok-other-0123456789", "a2", "claude")[0], 403)
                self.assertEqual(lease("tok-other-0123456789", "a2", "claude:small")[0], 403)


class Capture:
    """A stand-in provider on a free port that records each request's headers and answers
    a minimal Anthropic message."""

    def __init__(self):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                seen.append({k.lower(): v for k, v in self.headers.items()})
                reply_json(self, {
                    "id": "msg_1", "type": "message", "role": "assistant",
                    "model": "claude-emu-1", "stop_reason": "end_turn",
                    "content": [{"type": "text", "text": "hi"}],
                    "usage": {"input_tokens": 5, "output_tokens": 2}})

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class KeysForward(unittest.TestCase):
    def test_each_key_goes_with_its_secret_url_and_headers(self):
        os.environ["SLUICE_KEY_BIG"] = KEY_BIG
        os.environ["SLUICE_KEY_SMALL"] = KEY_SMALL
        big, small = Capture(), Capture()
        try:
            with Sluiced(two_keys_config(big, small)) as s:
                for pool in ("claude:big", "claude:small", "claude"):
                    status, _, payload = s.anthropic(message(max_tokens=10),
                                                     extra={"x-sluice-pool": pool})
                    self.assertEqual(status, 200, payload)
        finally:
            big.close()
            small.close()
        # Pinned to big, pinned to small, then the group: both full, the tie goes to the
        # first key, big (it has refilled the 10 tokens the first call held).
        self.assertEqual([h["x-api-key"] for h in big.seen], [KEY_BIG, KEY_BIG])
        self.assertEqual([h["x-api-key"] for h in small.seen], [KEY_SMALL])
        self.assertEqual(small.seen[0].get("anthropic-workspace"), "ws-small")
        self.assertTrue(all("anthropic-workspace" not in h for h in big.seen))


class Gate(Capture):
    """A Capture whose answers wait until release() (each call, in arrival order)."""

    def __init__(self):
        super().__init__()
        self.open = threading.Semaphore(0)
        handler = self.server.RequestHandlerClass
        base_post, gate = handler.do_POST, self

        def do_post(req):
            gate.arrived += 1
            gate.open.acquire(timeout=60)
            base_post(req)

        self.arrived = 0
        handler.do_POST = do_post

    def release(self):
        self.open.release()


class KeysOneQueue(unittest.TestCase):
    """One queue over the keys (design.md, "One queue over the keys"): a call queued on
    one key goes out with another key's secret when that key frees first."""

    def test_a_queued_call_goes_out_with_the_key_that_frees_first(self):
        os.environ["SLUICE_KEY_BIG"] = KEY_BIG
        os.environ["SLUICE_KEY_SMALL"] = KEY_SMALL
        big, small = Gate(), Gate()
        text = two_keys_config(big, small).replace(
            "        output_tpm: 6000\n", "        output_tpm: 6000\n        concurrency: 1\n").replace(
            "        output_tpm: 3000\n", "        output_tpm: 3000\n        concurrency: 1\n")
        results, other = {}, None

        def call(name, pool):
            extra = {"x-sluice-pool": pool} if pool else None
            results[name] = self.s.anthropic(message(max_tokens=10), agent=name, extra=extra)

        try:
            with Sluiced(text) as s:
                self.s = s
                wait_for(lambda: s.request("GET", "/readyz")[0] == 200, 10, "sluiced ready")
                threads = [threading.Thread(target=call, args=("on-big", "claude:big")),
                           threading.Thread(target=call, args=("on-small", "claude:small"))]
                for t in threads:
                    t.start()
                wait_for(lambda: big.arrived == 1 and small.arrived == 1, 10, "both keys busy")
                # Both keys at their concurrency: the third call queues on one of them.
                threads.append(threading.Thread(target=call, args=("queued", None)))
                threads[-1].start()

                def depth(key):
                    return s.get("/v1/pools/claude:" + key)["queue"]["depth"]

                wait_for(lambda: depth("big") + depth("small") == 1, 10, "the call queued")
                queued_on = "big" if depth("big") else "small"
                other, other_gate = ("small", small) if queued_on == "big" else ("big", big)
                own_gate = big if queued_on == "big" else small
                # The other key finishes first: the queued call goes out with it, while the
                # key it queued on still holds its call.
                other_gate.release()
                wait_for(lambda: other_gate.arrived == 2, 10, "the queued call on the other key")
                self.assertEqual(own_gate.arrived, 1)
                other_gate.release()
                own_gate.release()
                for t in threads:
                    t.join(30)
                self.assertEqual([results[n][0] for n in ("on-big", "on-small", "queued")],
                                 [200, 200, 200], results)
                self.assertEqual(s.get("/v1/pools/claude:" + other)["totals"]["granted"], 2)
                self.assertEqual(s.get("/v1/pools/claude:" + queued_on)["totals"]["granted"], 1)
                _, _, metrics = s.request("GET", "/metrics")
                self.assertIn(b'sluice_pool_key_taken_total{pool="claude:%s"} 1'
                              % other.encode(), metrics)
                self.assertIn(b'sluice_pool_key_taken_total{pool="claude:%s"} 0'
                              % queued_on.encode(), metrics)
        finally:
            for g in (big, small):
                for _ in range(3):
                    g.release()
                g.close()
        secret = KEY_SMALL if other == "small" else KEY_BIG
        seen = small.seen if other == "small" else big.seen
        self.assertEqual([h["x-api-key"] for h in seen], [secret, secret])


class KeysReload(unittest.TestCase):
    def test_a_reload_adds_a_key_and_changes_a_keys_limits(self):
        os.environ["SLUICE_KEY_BIG"] = KEY_BIG
        os.environ["SLUICE_KEY_SMALL"] = KEY_SMALL
        with Emu(emu_args(6000), key=KEY_BIG) as big, Emu(emu_args(3000), key=KEY_SMALL) as small:
            with Sluiced(two_keys_config(big, small)) as s:
                text = two_keys_config(big, small).replace("output_tpm: 3000", "output_tpm: 2000")
                text += ("      - name: third\n        api_key_env: SLUICE_KEY_BIG\n"
                         "        output_tpm: 1000\n")
                with open(s.config_path) as f:
                    head = f.read().split("pools:")[0]
                with open(s.config_path, "w") as f:
                    f.write(head + text)
                s.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: len(s.get("/v1/pools/claude")["keys"]) == 3, 10, "the reload")
                keys = {k["key"]: k for k in s.get("/v1/pools/claude")["keys"]}
                self.assertEqual(keys["small"]["limits"]["output_tpm"], 2000)
                self.assertEqual(keys["third"]["limits"]["output_tpm"], 1000)
                status, _, payload = s.request(
                    "POST", "/v1/leases", {"agent": "r", "pool": "claude:third",
                                            "input_tokens": 1, "output_tokens": 1})
                self.assertEqual(status, 200, payload)
                self.assertEqual(json.loads(payload)["key"], "third")


class BadKeys(unittest.TestCase):
    def check(self, text, needle):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sluice.yaml")
            with open(path, "w") as f:
                f.write(text)
            env = dict(os.environ, SLUICE_KEY_BIG=KEY_BIG)
            r = subprocess.run([SLUICED, "--config", path, "--check-config"], env=env,
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn(needle, r.stderr)
            self.assertNotIn(KEY_BIG, r.stderr + r.stdout)

    POOL = ("pools:\n  claude:\n    provider: anthropic\n    upstream_url: http://127.0.0.1:9\n"
            "    keys:\n")

    def test_a_key_without_its_secret_is_refused(self):
        self.check(self.POOL + "      - name: a\n", "pools.claude:a: upstream_url needs exactly one")

    def test_a_key_may_not_change_the_model_family(self):
        self.check(self.POOL + "      - name: a\n        api_key_env: SLUICE_KEY_BIG\n"
                   "        models: ['gpt-*']\n", "pools.claude.keys[0]: unknown key 'models'")

    def test_a_key_named_twice_is_refused(self):
        k = "      - name: a\n        api_key_env: SLUICE_KEY_BIG\n"
        self.check(self.POOL + k + k, "key 'claude:a' is named twice")

    def test_the_pool_key_is_not_also_given(self):
        self.check(self.POOL.replace("    keys:\n", "    api_key_env: SLUICE_KEY_BIG\n    keys:\n")
                   + "      - name: a\n        api_key_env: SLUICE_KEY_BIG\n",
                   "names each key's api_key_env")


if __name__ == "__main__":
    unittest.main()
