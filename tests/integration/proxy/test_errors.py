"""test_errors.py - provider errors through the proxy: an overloaded provider (Anthropic 529, OpenAI
503) and a stream that breaks off with an error event, and how their leases are settled."""
import json
import unittest

from harness import EMU_FAST, Emu, Sluiced, chat, message, parse_sse, pool_yaml, wait_for

LIMITS = "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000"
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def settled_events(s, agent):
    return [e for e in s.events() if e["event"] == "settled" and e.get("agent") == agent]


class Overloaded(unittest.TestCase):
    def test_a_529_reaches_the_client_in_anthropics_shape_and_bills_nothing(self):
        with Emu(EMU_FAST + ["--overload-rate", "1"]) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", LIMITS)) as s:
            status, h, payload = s.anthropic(message(max_tokens=500), agent="busy")
            self.assertEqual(status, 529, payload)
            self.assertEqual(json.loads(payload), OVERLOADED)
            self.assertNotIn("retry-after", h)
            wait_for(lambda: s.agent("busy")["leases"] == 0, 5, "the lease to be settled")
            a = s.agent("busy")
            self.assertEqual(a["tokens_in"], 0)
            self.assertEqual(a["tokens_out"], 0)
            self.assertEqual(a["got_429"], 0)
            kinds = [e["event"] for e in s.events()]
            self.assertNotIn("upstream_429", kinds)
            self.assertEqual(emu.stats()["overloaded"], 1, "the proxy retried the call")

    def test_a_streaming_call_refused_with_529_gets_the_529(self):
        with Emu(EMU_FAST + ["--overload-rate", "1"]) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", LIMITS)) as s:
            status, _, payload = s.anthropic(message(stream=True), agent="busy")
            self.assertEqual(status, 529, payload)
            self.assertEqual(json.loads(payload), OVERLOADED)
            wait_for(lambda: s.agent("busy")["leases"] == 0, 5, "the lease to be settled")
            a = s.agent("busy")
            self.assertEqual((a["tokens_in"], a["tokens_out"], a["got_429"]), (0, 0, 0))

    def test_an_openai_503_reaches_the_client_in_openais_shape_and_bills_nothing(self):
        with Emu(EMU_FAST + ["--overload-rate", "1"]) as emu, Sluiced(
                "pools:\n" + pool_yaml("gpt", emu.url, "openai", LIMITS)) as s:
            status, _, payload = s.openai(chat(max_tokens=500), agent="busy")
            self.assertEqual(status, 503, payload)
            err = json.loads(payload)["error"]
            self.assertEqual(err["message"],
                             "The engine is currently overloaded, please try again later")
            wait_for(lambda: s.agent("busy")["leases"] == 0, 5, "the lease to be settled")
            a = s.agent("busy")
            self.assertEqual((a["tokens_in"], a["tokens_out"], a["got_429"]), (0, 0, 0))
            self.assertEqual(emu.stats()["overloaded"], 1, "the proxy retried the call")


class BrokenStream(unittest.TestCase):
    def test_a_stream_broken_off_reaches_the_client_and_is_settled_with_what_was_seen(self):
        # 60 tokens at 300 tokens/s: deltas of a few tokens each over about 0.2 s, then the
        # provider breaks the stream off somewhere in the middle.
        emu_args = list(EMU_FAST)
        emu_args[emu_args.index("--tokens-per-s") + 1] = "300"
        emu_args[emu_args.index("--output-tokens") + 1] = "60"
        with Emu(emu_args + ["--stream-error-rate", "1"]) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", LIMITS)) as s:
            status, _, payload = s.anthropic(message(max_tokens=500, stream=True), agent="broken")
            self.assertEqual(status, 200, payload)
            events = parse_sse(payload)
            names = [n for n, _ in events if n not in (":", "ping")]
            self.assertEqual(names[0], "message_start")
            self.assertIn("content_block_delta", names)
            self.assertEqual(names[-1], "error", names)
            self.assertNotIn("message_stop", names)
            self.assertEqual(json.loads(events[-1][1]), OVERLOADED)
            start_usage = json.loads(events[0][1])["message"]["usage"]

            wait_for(lambda: s.agent("broken")["leases"] == 0, 5, "the lease to be settled")
            st = emu.stats()
            self.assertEqual(st["stream_errors"], 1)
            billed_out = st["tokens"]["output"]
            self.assertGreater(billed_out, 0)
            self.assertLess(billed_out, 60)
            a = s.agent("broken")
            self.assertEqual(a["got_429"], 0)
            # The input the provider reported in message_start; the output seen so far.
            self.assertEqual(a["tokens_in"], start_usage["input_tokens"])
            self.assertGreater(a["tokens_out"], 0)
            self.assertLess(a["tokens_out"], 500, "settled at max_tokens, not at what was seen")
            # The proxy counts the output it saw from the deltas' sizes (no usage came):
            # near, not equal to, what the provider billed.
            self.assertLessEqual(abs(a["tokens_out"] - billed_out), max(3, billed_out // 2),
                                 (a["tokens_out"], billed_out))
            settled = settled_events(s, "broken") or [e for e in s.events()
                                                      if e["event"] == "settled"]
            self.assertEqual(len(settled), 1)
            self.assertEqual(settled[0]["output_tokens"], a["tokens_out"])


if __name__ == "__main__":
    unittest.main()
