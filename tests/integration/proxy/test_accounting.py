"""test_accounting.py - what the proxy's settles teach the engine: only calls the provider answered."""
import json
import threading
import time
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, pool_yaml, read_until, wait_for

# One call of max_tokens 1000 takes nearly all of the output bucket (1020, refilled at
# 17 tokens/s): a second one queued behind it has an ETA of about 57 s.
TIGHT = "input_tpm: 1000000\noutput_tpm: 1200\nrpm: 10000"
# Answers that take about 2 s (24 tokens at 12 tokens/s).
EMU_SLOW = ["--input-tpm", "100000000", "--output-tpm", "100000000", "--rpm", "1000000",
            "--ttft-ms", "0", "--tokens-per-s", "12", "--latency-spread", "0",
            "--output-tokens", "24", "--ping-interval-ms", "100000"]
STREAM_HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01",
                  "x-api-key": "agent-token", "x-sluice-agent": "first"}

ROOMY = "input_tpm: 10000000\noutput_tpm: 10000000\nrpm: 100000"
PROMPT = "Please review the following change to the scheduler and explain each risk. " * 12


def calibration(s, pool, model):
    for c in s.pool(pool)["calibration"]:
        if c["model"] == model:
            return c
    return None


def refused(text=PROMPT, **extra):
    """A call the provider refuses with 400: a role the Messages API does not know."""
    body = message(text, **extra)
    body["messages"][0]["role"] = "tool"
    return body


class FailedCallsTeachNothing(unittest.TestCase):
    def test_six_refused_calls_leave_the_calibration_ratio_where_it_was(self):
        with Emu(EMU_FAST + ["--drift", "1.5"]) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY)) as s:
            for _ in range(5):
                status, _, payload = s.anthropic(message(PROMPT), agent="a")
                self.assertEqual(status, 200, payload)
            before = wait_for(lambda: (calibration(s, "claude", "claude-emu-1") or {})
                              .get("samples") == 5 and calibration(s, "claude", "claude-emu-1"),
                              10, "five calibration samples")
            self.assertGreater(before["ratio"], 1.3)
            err_before = s.agent("a")["estimate_error"]
            for _ in range(6):
                status, _, payload = s.anthropic(refused(), agent="a")
                self.assertEqual(status, 400, payload)
            wait_for(lambda: s.agent("a")["leases"] == 0, 10, "the refused calls to be settled")
            after = calibration(s, "claude", "claude-emu-1")
            self.assertEqual(after["samples"], 5)
            self.assertAlmostEqual(after["ratio"], before["ratio"], places=6)
            self.assertAlmostEqual(s.agent("a")["estimate_error"], err_before, places=6)
            settled = [e for e in s.events() if e["event"] == "settled"]
            self.assertEqual([e["counted"] for e in settled], [True] * 5 + [False] * 6)
            # The reservation went back: a refused call bills nothing.
            self.assertTrue(all(e["input_tokens"] == 0 for e in settled[5:]))

    def test_a_refused_call_does_not_warm_the_cache(self):
        system = [{"type": "text", "text": "You are a careful reviewer. " * 200,
                   "cache_control": {"type": "ephemeral"}}]
        with Emu(EMU_FAST) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY)) as s:
            status, _, payload = s.anthropic(refused("hi", system=system), agent="c")
            self.assertEqual(status, 400, payload)
            status, _, payload = s.anthropic(message("hi", system=system), agent="c")
            self.assertEqual(status, 200, payload)
            usage = json.loads(payload)["usage"]
            self.assertGreater(usage["cache_creation_input_tokens"], 1000)
            granted = [e for e in s.events() if e["event"] == "granted"]
            # Charged cold: the cached prefix counted as input, as the provider billed it.
            self.assertGreater(granted[1]["input_tokens"], 1000)

    def test_the_spend_cap_alert_clears_when_a_call_succeeds_again(self):
        with Emu(EMU_FAST + ["--spend-cap"]) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY)) as s:
            status, _, _ = s.anthropic(message(), agent="spender")
            self.assertEqual(status, 429)
            wait_for(lambda: "spend_cap" in s.pool("claude")["alerts"], 10, "the spend_cap alert")
            self.assertEqual(emu_post(emu, "/emu/spend-cap", {"capped": False}), 200)
            status, _, payload = s.anthropic(message(), agent="spender")
            self.assertEqual(status, 200, payload)
            wait_for(lambda: "spend_cap" not in s.pool("claude")["alerts"], 10,
                     "the spend_cap alert to clear")


SONNET, HAIKU = "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"
SYSTEM = [{"type": "text", "text": "You are a coding agent working in a large repository. " * 300,
           "cache_control": {"type": "ephemeral"}}]


def granted_input(s):
    return [e["input_tokens"] for e in s.events() if e["event"] == "granted"]


class CachePerPrefixAndModel(unittest.TestCase):
    def test_a_haiku_call_after_a_sonnet_call_is_charged_cold(self):
        with Emu(EMU_FAST) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY)) as s:
            status, _, payload = s.anthropic(message("hi", model=SONNET, system=SYSTEM),
                                             agent="cc")
            self.assertEqual(status, 200, payload)
            status, _, payload = s.anthropic(message("hi", model=SONNET, system=SYSTEM),
                                             agent="cc")
            self.assertGreater(json.loads(payload)["usage"]["cache_read_input_tokens"], 2000)
            status, _, payload = s.anthropic(message("hi", model=HAIKU, system=SYSTEM),
                                             agent="cc")
            self.assertEqual(status, 200, payload)
            # Another system prompt is another prefix: cold too.
            other = [dict(SYSTEM[0], text="You review pull requests carefully. " * 300)]
            status, _, payload = s.anthropic(message("hi", model=SONNET, system=other),
                                             agent="cc")
            self.assertEqual(status, 200, payload)
            charged = granted_input(s)
            self.assertGreater(charged[0], 2000)  # cold: the prefix charged as input
            self.assertLess(charged[1], 100)      # the same prefix and model: warm
            self.assertGreater(charged[2], 2000)  # Haiku after Sonnet: cold
            self.assertGreater(charged[3], 1500)  # another prefix (1,800 tokens): cold

    def test_a_claude_code_sized_agent_keeps_its_estimate_error_under_20_percent(self):
        # 20 turns of a growing conversation behind a 3,900-token cached system prompt,
        # the last breakpoint moving to the newest message each turn, as Claude Code does.
        with Emu(EMU_FAST) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY)) as s:
            messages = []
            for turn in range(20):
                messages.append({"role": "user", "content": [
                    {"type": "text", "text": "Step %d: run the tests and fix what fails. " % turn
                     * 20, "cache_control": {"type": "ephemeral"}}]})
                body = message("x", model=SONNET, system=SYSTEM)
                body["messages"] = messages
                status, _, payload = s.anthropic(body, agent="cc")
                self.assertEqual(status, 200, payload)
                del messages[-1]["content"][0]["cache_control"]
                messages.append({"role": "assistant", "content": json.loads(payload)["content"]})
            a = s.agent("cc")
            self.assertLess(a["estimate_error"], 0.20, a)
            self.assertFalse(a["estimate_error_alert"])


class HoldDontRefuse(unittest.TestCase):
    def test_a_call_queued_longer_than_max_queue_wait_s_is_held_and_succeeds(self):
        # max_queue_wait_s 1 would refuse the second call (ETA about 57 s); the proxy holds
        # it up to proxy.max_hold_s (540 by default) and it is served once the first call's
        # refund frees the output bucket, about 2 s later.
        with Emu(EMU_SLOW) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", TIGHT,
                                       "max_queue_wait_s: 1")) as s:
            first = s.open_stream("/anthropic/v1/messages",
                                  message(max_tokens=1000, stream=True), STREAM_HEADERS)
            read_until(first, b"message_start", 10)
            t0 = time.monotonic()
            status, _, payload = s.anthropic(message(max_tokens=1000), agent="second")
            held_s = time.monotonic() - t0
            first.close()
            self.assertEqual(status, 200, payload)
            self.assertGreater(held_s, 1.0)
            queued = [e for e in s.events() if e["event"] == "queued"]
            self.assertEqual(len(queued), 1)
            self.assertGreater(queued[0]["eta"], 1.0)
            self.assertEqual(emu.stats()["http_429"], 0)

    def test_beyond_max_hold_s_the_429_names_the_binding_bucket_and_when_it_frees(self):
        with Emu(EMU_SLOW) as emu, Sluiced(
                "proxy:\n  max_hold_s: 5\npools:\n" +
                pool_yaml("claude", emu.url, "anthropic", TIGHT)) as s:
            first = s.open_stream("/anthropic/v1/messages",
                                  message(max_tokens=1000, stream=True), STREAM_HEADERS)
            read_until(first, b"message_start", 10)
            status, h, payload = s.anthropic(message(max_tokens=1000), agent="second")
            first.close()
            self.assertEqual(status, 429, payload)
            text = json.loads(payload)["error"]["message"]
            self.assertIn("output_tokens", text)
            self.assertIn("max_hold_s", text)
            self.assertGreater(int(h["retry-after"]), 5)


class SemaphoreQueues(unittest.TestCase):
    def test_two_concurrency_bound_calls_queue_and_are_granted_on_release(self):
        with Emu(EMU_SLOW) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic",
                                       ROOMY + "\nconcurrency: 1")) as s:
            status, _, payload = s.anthropic(message(), agent="warmup")  # one 2 s lease seen
            self.assertEqual(status, 200, payload)
            first = s.open_stream("/anthropic/v1/messages", message(stream=True), STREAM_HEADERS)
            read_until(first, b"message_start", 10)
            answers = {}

            def call(agent):
                answers[agent] = s.anthropic(message(), agent=agent)

            threads = [threading.Thread(target=call, args=(a,)) for a in ("b", "c")]
            for t in threads:
                t.start()
            wait_for(lambda: s.pool("claude")["queue"]["depth"] == 2, 10, "two queued calls")
            read_until(first, b"message_stop", 10)
            first.close()
            for t in threads:
                t.join(30)
            self.assertEqual([answers[a][0] for a in ("b", "c")], [200, 200],
                             [answers[a][2][:200] for a in ("b", "c")])
            queued = [e for e in s.events() if e["event"] == "queued"]
            self.assertEqual(len(queued), 2)
            self.assertTrue(all(0 < e["eta"] < 60 for e in queued), queued)
            self.assertEqual(emu.stats()["http_429"], 0)


    def test_a_call_held_by_its_agents_max_concurrent_is_held_and_sent_on_release(self):
        caps = "caps:\n  agents:\n    solo:\n      max_concurrent: 1\n"
        with Emu(EMU_SLOW) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", ROOMY) + caps) as s:
            headers = dict(STREAM_HEADERS, **{"x-sluice-agent": "solo"})
            first = s.open_stream("/anthropic/v1/messages", message(stream=True), headers)
            read_until(first, b"message_start", 10)
            answers = {}

            def call():
                answers["second"] = s.anthropic(message(), agent="solo")

            t = threading.Thread(target=call)
            t.start()
            # No lease was settled yet: the ETA is the lease's expiry (120 s), above
            # max_queue_wait_s (60 s) but within proxy.max_hold_s, so it is held.
            wait_for(lambda: s.pool("claude")["queue"]["depth"] == 1, 10, "the held call")
            status, _, payload = s.anthropic(message(), agent="other")  # others pass
            self.assertEqual(status, 200, payload)
            read_until(first, b"message_stop", 10)
            first.close()
            t.join(30)
            self.assertEqual(answers["second"][0], 200, answers["second"][2][:200])
            queued = [e for e in s.events() if e["event"] == "queued"]
            self.assertEqual(len(queued), 1)
            self.assertEqual(emu.stats()["http_429"], 0)


def emu_post(emu, path, body):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


if __name__ == "__main__":
    unittest.main()
