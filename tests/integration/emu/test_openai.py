"""The OpenAI Chat Completions API of sluice-emu: shapes, streams with include_usage, tools, auth."""
import json
import unittest

from harness import Emu, SharedEmu, parse_sse

USAGE_KEYS = {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
              "completion_tokens_details"}


def chat(content="Hello there", **extra):
    body = {"model": "gpt-emu", "messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": content}]}
    body.update(extra)
    return body


def data_chunks(payload):
    events = parse_sse(payload)
    for name, _ in events:
        assert name is None, name  # OpenAI streams have no event names
    datas = [d for _, d in events]
    assert datas[-1] == "[DONE]", datas[-1]
    return [json.loads(d) for d in datas[:-1]]


class ChatCompletions(SharedEmu):
    def test_non_streaming_completion_has_the_documented_shape(self):
        status, headers, payload = self.emu.openai(chat(max_tokens=100))
        self.assertEqual(status, 200, payload)
        self.assertIn("x-request-id", headers)
        c = json.loads(payload)
        self.assertTrue(c["id"].startswith("chatcmpl-"))
        self.assertEqual(c["object"], "chat.completion")
        self.assertIsInstance(c["created"], int)
        self.assertEqual(c["model"], "gpt-emu")
        self.assertEqual(len(c["choices"]), 1)
        choice = c["choices"][0]
        self.assertEqual(choice["index"], 0)
        self.assertEqual(choice["finish_reason"], "stop")
        self.assertEqual(choice["message"]["role"], "assistant")
        self.assertIsInstance(choice["message"]["content"], str)
        self.assertTrue(USAGE_KEYS <= set(c["usage"]))
        u = c["usage"]
        self.assertEqual(u["completion_tokens"], 24)
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertEqual(u["prompt_tokens_details"]["cached_tokens"], 0)

    def test_max_completion_tokens_gives_finish_reason_length(self):
        _, _, payload = self.emu.openai(chat(max_completion_tokens=4))
        c = json.loads(payload)
        self.assertEqual(c["usage"]["completion_tokens"], 4)
        self.assertEqual(c["choices"][0]["finish_reason"], "length")

    def test_stream_without_include_usage_has_no_usage(self):
        status, headers, payload = self.emu.openai(chat(stream=True))
        self.assertEqual(status, 200, payload)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"))
        chunks = data_chunks(payload)
        ids = {c["id"] for c in chunks}
        self.assertEqual(len(ids), 1)
        for c in chunks:
            self.assertEqual(c["object"], "chat.completion.chunk")
            self.assertNotIn("usage", c)
            self.assertEqual(len(c["choices"]), 1)
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(chunks[-1]["choices"][0]["delta"], {})
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "stop")
        for c in chunks[:-1]:
            self.assertIsNone(c["choices"][0]["finish_reason"])

    def test_stream_with_include_usage_ends_with_a_usage_chunk(self):
        body = chat(stream=True, stream_options={"include_usage": True})
        _, _, payload = self.emu.openai(body)
        chunks = data_chunks(payload)
        last = chunks[-1]
        self.assertEqual(last["choices"], [])
        self.assertTrue(USAGE_KEYS <= set(last["usage"]))
        for c in chunks[:-1]:
            self.assertIn("usage", c)
            self.assertIsNone(c["usage"])
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
        self.assertTrue(text)
        self.assertEqual(last["usage"]["completion_tokens"], 24)
        _, _, plain = self.emu.openai(chat())
        self.assertEqual(last["usage"]["prompt_tokens"], json.loads(plain)["usage"]["prompt_tokens"])

    def test_required_tool_choice_gives_tool_calls(self):
        tools = [{"type": "function",
                  "function": {"name": "open_gate",
                               "parameters": {"type": "object",
                                              "properties": {"gate": {"type": "integer"},
                                                             "why": {"type": "string"}},
                                              "required": ["gate"]}}}]
        _, _, payload = self.emu.openai(chat(tools=tools, tool_choice="required"))
        c = json.loads(payload)
        choice = c["choices"][0]
        self.assertEqual(choice["finish_reason"], "tool_calls")
        self.assertIsNone(choice["message"]["content"])
        call = choice["message"]["tool_calls"][0]
        self.assertEqual(call["type"], "function")
        self.assertEqual(call["function"]["name"], "open_gate")
        self.assertEqual(json.loads(call["function"]["arguments"]), {"gate": 1})

        named = {"type": "function", "function": {"name": "open_gate"}}
        _, _, payload = self.emu.openai(chat(tools=tools, tool_choice=named))
        self.assertEqual(json.loads(payload)["choices"][0]["finish_reason"], "stop")

        _, _, payload = self.emu.openai(chat(tools=tools, tool_choice="required", stream=True))
        chunks = data_chunks(payload)
        first = chunks[0]["choices"][0]["delta"]["tool_calls"][0]
        self.assertEqual(first["function"]["name"], "open_gate")
        self.assertTrue(first["id"].startswith("call_"))
        args = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                       for c in chunks[:-1])
        self.assertEqual(json.loads(args), {"gate": 1})
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "tool_calls")

    def test_wrong_key_is_401_invalid_api_key(self):
        status, _, payload = self.emu.openai(chat(), key="sk-agent-own-key-123")
        self.assertEqual(status, 401)
        err = json.loads(payload)["error"]
        self.assertEqual(err["code"], "invalid_api_key")
        self.assertNotIn("sk-agent-own-key-123", err["message"])
        status, _, payload = self.emu.openai(chat(), key=None)
        self.assertEqual(status, 401)

    def test_invalid_requests_name_the_param(self):
        cases = [({"messages": [{"role": "user", "content": "x"}]}, "model"),
                 ({"model": "m"}, "messages"),
                 (chat(stream_options={"include_usage": True}), "stream_options"),
                 (chat(max_tokens=0), "max_tokens")]
        for body, param in cases:
            status, _, payload = self.emu.openai(body)
            self.assertEqual(status, 400, body)
            err = json.loads(payload)["error"]
            self.assertEqual(err["type"], "invalid_request_error")
            self.assertEqual(err["param"], param)


if __name__ == "__main__":
    unittest.main()
