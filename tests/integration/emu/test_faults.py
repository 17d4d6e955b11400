"""sluice-emu's optional provider behaviours: overload (529/503), streams that break off with an
error event, the token counting endpoint's own RPM limit, and prompt caching with several
cache_control breakpoints. Each is off by default; the defaults are checked to stay so."""
import json
import subprocess
import unittest

from harness import FAST, KEY, SLUICE_EMU, Emu, message, parse_sse, prose

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def chat(text="Hello", max_tokens=100, **extra):
    body = {"model": "gpt-emu-1", "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return body


def statuses(args, n):
    """The statuses of n plain Anthropic calls on a fresh emulator started with args."""
    with Emu(FAST + args) as emu:
        return [emu.anthropic(message())[0] for _ in range(n)]


class Overload(unittest.TestCase):
    def test_anthropic_overload_is_a_529_in_the_documented_shape_and_counts_nothing(self):
        with Emu(FAST + ["--overload-rate", "1", "--input-tpm", "50000"]) as emu:
            status, h, payload = emu.anthropic(message(prose(200)))
            self.assertEqual(status, 529, payload)
            self.assertEqual(json.loads(payload), OVERLOADED)
            self.assertNotIn("retry-after", h)
            self.assertIn("request-id", h)
            # A stream is refused the same way, before its event stream starts.
            status, h, payload = emu.anthropic(message(stream=True))
            self.assertEqual(status, 529, payload)
            self.assertEqual(json.loads(payload), OVERLOADED)
            st = emu.stats()
            self.assertEqual(st["overloaded"], 2)
            self.assertEqual(st["requests"], 2)
            self.assertEqual(st["admitted"], 0)
            self.assertEqual(st["http_429"], 0)
            self.assertEqual(st["tokens"], {"input": 0, "cache_creation_input": 0,
                                            "cache_read_input": 0, "output": 0})
            self.assertEqual(st["levels"]["input_tokens"], 50000)  # nothing was taken
            self.assertEqual(st["http"]["status_529"], 2)

    def test_openai_overload_is_a_503_with_the_documented_message(self):
        with Emu(FAST + ["--overload-rate", "1"]) as emu:
            status, h, payload = emu.openai(chat())
            self.assertEqual(status, 503, payload)
            err = json.loads(payload)["error"]
            self.assertEqual(err["message"],
                             "The engine is currently overloaded, please try again later")
            self.assertEqual(set(err), {"message", "type", "param", "code"})
            self.assertNotIn("retry-after", h)
            st = emu.stats()
            self.assertEqual(st["overloaded"], 1)
            self.assertEqual(st["http"]["status_503"], 1)

    def test_overloads_are_seeded_and_reproducible(self):
        args = ["--overload-rate", "0.5", "--seed", "7"]
        first = statuses(args, 20)
        self.assertEqual(first, statuses(args, 20))
        self.assertEqual(set(first), {200, 529})
        self.assertNotEqual(first, statuses(["--overload-rate", "0.5", "--seed", "8"], 20))

    def test_by_default_nothing_is_overloaded(self):
        self.assertEqual(set(statuses([], 20)), {200})


class StreamError(unittest.TestCase):
    def test_a_broken_stream_ends_with_the_error_event_and_bills_what_was_sent(self):
        with Emu(FAST + ["--stream-error-rate", "1", "--output-tokens", "40"]) as emu:
            status, _, payload = emu.anthropic(message(max_tokens=100, stream=True))
            self.assertEqual(status, 200, payload)
            events = parse_sse(payload)
            names = [e[0] for e in events]
            self.assertEqual(names[:2], ["message_start", "content_block_start"])
            self.assertEqual(names[-1], "error")
            self.assertNotIn("message_stop", names)
            self.assertNotIn("message_delta", names)
            self.assertIn("content_block_delta", names, "it broke off before any output")
            self.assertEqual(json.loads(events[-1][1]), OVERLOADED)
            start_usage = json.loads(events[0][1])["message"]["usage"]
            st = emu.stats()
            self.assertEqual(st["stream_errors"], 1)
            self.assertEqual(st["admitted"], 1)
            # Input was processed and is billed; output only up to the break.
            self.assertEqual(st["tokens"]["input"], start_usage["input_tokens"])
            self.assertGreaterEqual(st["tokens"]["output"], 1)
            self.assertLess(st["tokens"]["output"], 40)
            text = "".join(json.loads(d)["delta"]["text"] for n, d in events
                           if n == "content_block_delta")
            self.assertEqual(len(text.split()) + text.count("."), st["tokens"]["output"],
                             "the text sent is not the output billed")
            self.assertEqual(st["http"]["active"], 0)

    def test_plain_calls_and_openai_streams_are_not_broken_off(self):
        with Emu(FAST + ["--stream-error-rate", "1"]) as emu:
            status, _, payload = emu.anthropic(message())
            self.assertEqual(status, 200, payload)
            self.assertEqual(json.loads(payload)["stop_reason"], "end_turn")
            status, _, payload = emu.openai(chat(stream=True))
            self.assertEqual(status, 200, payload)
            self.assertTrue(payload.decode().endswith("data: [DONE]\n\n"))
            self.assertEqual(emu.stats()["stream_errors"], 0)

    def test_by_default_streams_complete(self):
        with Emu(FAST) as emu:
            for _ in range(5):
                names = [e[0] for e in parse_sse(emu.anthropic(message(stream=True))[2])]
                self.assertEqual(names[-1], "message_stop")
            self.assertEqual(emu.stats()["stream_errors"], 0)


class CountTokensLimit(unittest.TestCase):
    def test_count_tokens_has_its_own_rpm_with_429_and_retry_after(self):
        body = {"model": "claude-emu-1", "messages": [{"role": "user", "content": "Hello"}]}
        with Emu(FAST + ["--count-tokens-rpm", "2", "--rpm", "2"]) as emu:
            for _ in range(2):
                status, _, payload = emu.anthropic(body, path="/v1/messages/count_tokens")
                self.assertEqual(status, 200, payload)
            status, h, payload = emu.anthropic(body, path="/v1/messages/count_tokens")
            self.assertEqual(status, 429, payload)
            err = json.loads(payload)
            self.assertEqual(err["type"], "error")
            self.assertEqual(err["error"]["type"], "rate_limit_error")
            self.assertIn("token counting", err["error"]["message"])
            self.assertGreaterEqual(int(h["retry-after"]), 1)
            # Separate and independent: the Messages limits are untouched by it.
            for _ in range(2):
                self.assertEqual(emu.anthropic(message())[0], 200)
            st = emu.stats()
            self.assertEqual(st["count_tokens"], {"requests": 3, "http_429": 1, "limit_rpm": 2})
            self.assertEqual(st["requests"], 2)
            self.assertEqual(st["http_429"], 0)
            self.assertEqual(st["http"]["status_429"], 1)

    def test_by_default_count_tokens_is_not_limited(self):
        body = {"model": "claude-emu-1", "messages": [{"role": "user", "content": "Hello"}]}
        with Emu(FAST + ["--rpm", "1"]) as emu:
            for _ in range(10):
                status, h, payload = emu.anthropic(body, path="/v1/messages/count_tokens")
                self.assertEqual(status, 200, payload)
                self.assertNotIn("retry-after", h)


def two_breakpoints(history_text):
    """A stable system prompt (breakpoint 1) and a conversation turn (breakpoint 2)."""
    return {"model": "claude-emu-1", "max_tokens": 50,
            "system": [{"type": "text", "text": prose(1500, seed=11),
                        "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": history_text, "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "What next?"}]}


def usage(emu, body):
    status, _, payload = emu.anthropic(body)
    assert status == 200, payload
    return json.loads(payload)["usage"]


class SeveralBreakpoints(unittest.TestCase):
    def test_a_moved_last_breakpoint_reads_the_earlier_one(self):
        first = two_breakpoints(prose(900, seed=21))
        moved = two_breakpoints(prose(900, seed=22))
        with Emu(FAST + ["--cache-breakpoints", "4"]) as emu, Emu(FAST) as plain:
            u1 = usage(emu, first)
            self.assertEqual(u1["cache_read_input_tokens"], 0)
            u2 = usage(emu, moved)
            # The system prompt's prefix is read; only the new turn is written.
            system_only = dict(moved, messages=[{"role": "user", "content": "What next?"}])
            system_tokens = usage(plain, system_only)["cache_creation_input_tokens"]
            self.assertGreater(system_tokens, 1024)
            self.assertEqual(u2["cache_read_input_tokens"], system_tokens)
            whole = u1["cache_creation_input_tokens"]
            self.assertGreater(u2["cache_creation_input_tokens"], 0)
            self.assertLess(u2["cache_creation_input_tokens"], whole - system_tokens + 50)
            self.assertEqual(u2["input_tokens"], u1["input_tokens"])
            # The whole of the moved prefix was written: a repeat reads all of it.
            u3 = usage(emu, moved)
            self.assertEqual(u3["cache_read_input_tokens"],
                             u2["cache_read_input_tokens"] + u2["cache_creation_input_tokens"])
            self.assertEqual(u3["cache_creation_input_tokens"], 0)

            # With the default (the last breakpoint only) a moved breakpoint is a full miss.
            p1 = usage(plain, first)
            p2 = usage(plain, moved)
            self.assertEqual(p1, u1)
            self.assertEqual(p2["cache_read_input_tokens"], 0)
            self.assertEqual(p2["cache_creation_input_tokens"],
                             u2["cache_read_input_tokens"] + u2["cache_creation_input_tokens"])

    def test_single_breakpoint_results_do_not_change(self):
        def one(text):
            return {"model": "claude-emu-1", "max_tokens": 50,
                    "system": [{"type": "text", "text": prose(1400, seed=5),
                                "cache_control": {"type": "ephemeral"}}],
                    "messages": [{"role": "user", "content": text}]}
        calls = [one("a"), one("b"), one("a")]
        with Emu(FAST + ["--cache-breakpoints", "4"]) as emu, Emu(FAST) as plain:
            self.assertEqual([usage(emu, b) for b in calls], [usage(plain, b) for b in calls])
            self.assertEqual(emu.stats()["tokens"], plain.stats()["tokens"])

    def test_an_earlier_breakpoint_below_the_minimum_is_not_read(self):
        short = two_breakpoints(prose(900, seed=21))
        short["system"][0]["text"] = "A short system prompt."
        moved = json.loads(json.dumps(short))
        moved["messages"][0]["content"][0]["text"] = prose(900, seed=22)
        with Emu(FAST + ["--cache-breakpoints", "2"]) as emu:
            usage(emu, short)
            self.assertEqual(usage(emu, moved)["cache_read_input_tokens"], 0)


class BadFlags(unittest.TestCase):
    def test_out_of_range_values_are_refused_naming_the_flag(self):
        for flag, value in [("--overload-rate", "1.5"), ("--stream-error-rate", "-0.1"),
                            ("--count-tokens-rpm", "-1"), ("--cache-breakpoints", "5"),
                            ("--cache-breakpoints", "0")]:
            out = subprocess.run([SLUICE_EMU, "--listen", "127.0.0.1:0", "--input-tpm", "0",
                                  "--output-tpm", "0", "--rpm", "0", "--api-key", KEY, flag,
                                  value], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 2, (flag, value, out.stderr))
            self.assertIn(flag, out.stderr)
            self.assertIn(value, out.stderr)


if __name__ == "__main__":
    unittest.main()
