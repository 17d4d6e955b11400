"""The Anthropic Messages API of sluice-emu: shapes, streams, tools, count_tokens, auth."""
import json
import unittest

from harness import Emu, SharedEmu, FAST, KEY, message, parse_sse, estimate

MESSAGE_KEYS = {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
USAGE_KEYS = {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
              "output_tokens"}


def text_tokens(emu, text):
    """Tokens of `text` as the emulator's count_tokens sees it: the difference between
    a message holding "x" + text and one holding "x" (framing cancels out)."""
    counts = []
    for content in ("x" + text, "x"):
        status, _, payload = emu.anthropic(message(content), path="/v1/messages/count_tokens")
        assert status == 200, payload
        counts.append(json.loads(payload)["input_tokens"])
    return counts[0] - counts[1]


class AnthropicMessages(SharedEmu):
    def test_non_streaming_message_has_the_documented_shape(self):
        status, headers, payload = self.emu.anthropic(message(max_tokens=100))
        self.assertEqual(status, 200, payload)
        self.assertTrue(headers["content-type"].startswith("application/json"))
        self.assertTrue(headers["request-id"].startswith("req_"))
        m = json.loads(payload)
        self.assertTrue(MESSAGE_KEYS <= set(m), m)
        self.assertTrue(m["id"].startswith("msg_"))
        self.assertEqual((m["type"], m["role"], m["model"]), ("message", "assistant", "claude-emu-1"))
        self.assertEqual(m["stop_reason"], "end_turn")
        self.assertIsNone(m["stop_sequence"])
        self.assertEqual(len(m["content"]), 1)
        self.assertEqual(m["content"][0]["type"], "text")
        self.assertTrue(USAGE_KEYS <= set(m["usage"]))
        self.assertEqual(m["usage"]["output_tokens"], 24)
        self.assertEqual(m["usage"]["cache_read_input_tokens"], 0)

    def test_output_text_has_as_many_tokens_as_billed(self):
        _, _, payload = self.emu.anthropic(message())
        m = json.loads(payload)
        text = m["content"][0]["text"]
        self.assertFalse(text.startswith(" "))
        self.assertEqual(text_tokens(self.emu, " " + text), m["usage"]["output_tokens"])

    def test_input_usage_equals_count_tokens(self):
        body = message("Summarise the state of the river gates for the operators.")
        _, _, payload = self.emu.anthropic(body, path="/v1/messages/count_tokens")
        counted = json.loads(payload)["input_tokens"]
        _, _, payload = self.emu.anthropic(body)
        self.assertEqual(json.loads(payload)["usage"]["input_tokens"], counted)

    def test_max_tokens_stops_the_message(self):
        _, _, payload = self.emu.anthropic(message(max_tokens=5))
        m = json.loads(payload)
        self.assertEqual(m["usage"]["output_tokens"], 5)
        self.assertEqual(m["stop_reason"], "max_tokens")

    def test_stream_follows_the_documented_event_flow(self):
        status, headers, payload = self.emu.anthropic(message(stream=True))
        self.assertEqual(status, 200, payload)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"))
        events = parse_sse(payload)
        for name, data in events:
            self.assertEqual(json.loads(data)["type"], name)  # event name = data type
        names = [n for n, _ in events if n != "ping"]
        self.assertIn("ping", [n for n, _ in events])
        self.assertEqual(names[0], "message_start")
        self.assertEqual(names[1], "content_block_start")
        self.assertEqual(names[-3:], ["content_block_stop", "message_delta", "message_stop"])
        self.assertTrue(all(n == "content_block_delta" for n in names[2:-3]))
        self.assertGreaterEqual(len(names[2:-3]), 1)
        self.assertEqual(events[0][0], "message_start")  # nothing, not even a ping, before it

        start = json.loads(events[0][1])["message"]
        self.assertEqual(start["content"], [])
        self.assertIsNone(start["stop_reason"])
        self.assertTrue(USAGE_KEYS <= set(start["usage"]))
        datas = [json.loads(d) for n, d in events if n != "ping"]
        self.assertEqual(datas[1]["content_block"], {"type": "text", "text": ""})
        text = "".join(d["delta"]["text"] for d in datas[2:-3])
        for d in datas[1:-2]:
            self.assertEqual(d["index"], 0)
        delta = datas[-2]
        self.assertEqual(delta["delta"], {"stop_reason": "end_turn", "stop_sequence": None})
        self.assertEqual(delta["usage"]["output_tokens"], 24)
        self.assertEqual(delta["usage"]["input_tokens"], start["usage"]["input_tokens"])
        self.assertEqual(text_tokens(self.emu, " " + text), 24)

    def test_stream_and_non_stream_bill_the_same_input(self):
        body = message("one two three four five six")
        _, _, payload = self.emu.anthropic(body)
        plain = json.loads(payload)["usage"]["input_tokens"]
        body["stream"] = True
        _, _, payload = self.emu.anthropic(body)
        start = json.loads(parse_sse(payload)[0][1])
        self.assertEqual(start["message"]["usage"]["input_tokens"], plain)

    def test_forced_tool_answers_with_a_tool_use_block(self):
        tools = [{"name": "get_level", "description": "Water level at a gate",
                  "input_schema": {"type": "object",
                                   "properties": {"gate": {"type": "string"},
                                                  "unit": {"type": "string", "enum": ["m", "ft"]},
                                                  "depth": {"type": "integer"}},
                                   "required": ["gate", "unit"]}}]
        body = message(tools=tools, tool_choice={"type": "tool", "name": "get_level"})
        _, _, payload = self.emu.anthropic(body)
        m = json.loads(payload)
        self.assertEqual(m["stop_reason"], "tool_use")
        block = m["content"][0]
        self.assertEqual(block["type"], "tool_use")
        self.assertTrue(block["id"].startswith("toolu_"))
        self.assertEqual(block["name"], "get_level")
        self.assertEqual(set(block["input"]), {"gate", "unit"})
        self.assertEqual(block["input"]["unit"], "m")

        body["stream"] = True
        _, _, payload = self.emu.anthropic(body)
        datas = [json.loads(d) for n, d in parse_sse(payload) if n != "ping"]
        self.assertEqual(datas[1]["content_block"]["type"], "tool_use")
        self.assertEqual(datas[1]["content_block"]["input"], {})
        partial = "".join(d["delta"]["partial_json"] for d in datas[2:-3])
        self.assertEqual(json.loads(partial), block["input"])
        self.assertTrue(all(d["delta"]["type"] == "input_json_delta" for d in datas[2:-3]))
        self.assertEqual(datas[-2]["delta"]["stop_reason"], "tool_use")

    def test_auto_tool_choice_answers_with_text(self):
        tools = [{"name": "noop", "input_schema": {"type": "object"}}]
        _, _, payload = self.emu.anthropic(message(tools=tools))
        self.assertEqual(json.loads(payload)["content"][0]["type"], "text")

    def test_count_tokens_matches_sluice_tokenizer(self):
        body = message("The quick brown fox jumps over the lazy dog. " * 20,
                       system="You are a scientist")
        status, headers, payload = self.emu.anthropic(body, path="/v1/messages/count_tokens")
        self.assertEqual(status, 200, payload)
        self.assertIn("anthropic-ratelimit-requests-reset", headers)
        got = json.loads(payload)
        self.assertEqual(set(got), {"input_tokens"})
        est = estimate(body)
        self.assertIsNotNone(est, "sluice CLI not built ($SLUICE_CLI)")
        self.assertEqual(got["input_tokens"], est["input_tokens"] + est["cached_tokens"])

    def test_documented_example_counts_14_tokens(self):
        # Anthropic's token counting documentation: this request is 14 input tokens.
        body = {"model": "claude-emu-1", "system": "You are a scientist",
                "messages": [{"role": "user", "content": "Hello, Claude"}]}
        _, _, payload = self.emu.anthropic(body, path="/v1/messages/count_tokens")
        self.assertEqual(json.loads(payload)["input_tokens"], 14)

    def test_wrong_key_is_401_authentication_error(self):
        for key in ("sk-agent-own-key", None):
            status, headers, payload = self.emu.anthropic(message(), key=key)
            self.assertEqual(status, 401, payload)
            err = json.loads(payload)
            self.assertEqual(err["type"], "error")
            self.assertEqual(err["error"]["type"], "authentication_error")
            self.assertIn("anthropic-ratelimit-requests-limit", headers)

    def test_missing_anthropic_version_is_400(self):
        status, _, payload = self.emu.anthropic(message(), version=None)
        self.assertEqual(status, 400)
        self.assertIn("anthropic-version", json.loads(payload)["error"]["message"])

    def test_invalid_requests_name_the_field(self):
        cases = [
            ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
            ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
            ({"model": "m", "max_tokens": 5}, "messages"),
            ({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]},
             "max_tokens"),
            ({"model": "m", "max_tokens": 5,
              "messages": [{"role": "user", "content": [{"type": "foo"}]}]}, "messages[0]"),
        ]
        self.assert_refused(cases)
        status, _, payload = self.emu.anthropic(None, extra={})
        self.assertEqual(status, 400)
        status, _, _ = self.emu.request("POST", "/v1/messages", raw="{not json",
                                        headers={"x-api-key": KEY,
                                                 "anthropic-version": "2023-06-01"})
        self.assertEqual(status, 400)

    def test_unknown_path_is_404_not_found_error(self):
        status, _, payload = self.emu.anthropic(message(), path="/v1/nothing")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(payload)["error"]["type"], "not_found_error")


class Drift(unittest.TestCase):
    def test_count_tokens_applies_the_drift(self):
        body = message("The gates open at dawn and close at dusk, every day of the year. " * 30)
        with Emu() as plain, Emu(FAST + ["--drift", "1.1"]) as drifted:
            _, _, p1 = plain.anthropic(body, path="/v1/messages/count_tokens")
            _, _, p2 = drifted.anthropic(body, path="/v1/messages/count_tokens")
            _, _, p3 = drifted.anthropic(body)
        base = json.loads(p1)["input_tokens"]
        self.assertEqual(json.loads(p2)["input_tokens"], int(base * 1.1 + 0.5))
        self.assertEqual(json.loads(p3)["usage"]["input_tokens"], int(base * 1.1 + 0.5))


if __name__ == "__main__":
    unittest.main()
