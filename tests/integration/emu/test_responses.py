"""The OpenAI Responses API of sluice-emu: shapes, the streamed event sequence, tools, reasoning,
structured output, previous_response_id, limits and errors."""
import json
import unittest

from harness import Emu, SharedEmu, FAST, KEY, estimate, parse_sse

USAGE_KEYS = {"input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details",
              "total_tokens"}
TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file",
          "parameters": {"type": "object",
                         "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
                         "required": ["path"], "additionalProperties": False}}]


def req(input="Say hello", **extra):
    body = {"model": "gpt-emu", "input": input}
    body.update(extra)
    return body


def events(payload):
    """The stream's events as dicts, checking the SSE name equals the type and the sequence
    numbers count from 0."""
    out = []
    for i, (name, data) in enumerate(parse_sse(payload)):
        d = json.loads(data)
        assert name == d["type"], (name, d["type"])
        assert d["sequence_number"] == i, (i, d)
        out.append(d)
    return out


class Responses(SharedEmu):
    def ok(self, body):
        status, headers, payload = self.emu.responses(body)
        self.assertEqual(status, 200, payload)
        return headers, payload

    def test_plain_response_has_the_documented_shape(self):
        headers, payload = self.ok(req(instructions="Be brief.", max_output_tokens=100,
                                       metadata={"run": "7"}))
        self.assertIn("x-request-id", headers)
        self.assertIn("x-ratelimit-limit-requests", headers)
        self.assertIn("x-ratelimit-remaining-tokens", headers)
        r = json.loads(payload)
        self.assertTrue(r["id"].startswith("resp_"))
        self.assertEqual(r["object"], "response")
        self.assertEqual(r["status"], "completed")
        self.assertEqual(r["model"], "gpt-emu")
        self.assertEqual(r["instructions"], "Be brief.")
        self.assertEqual(r["max_output_tokens"], 100)
        self.assertEqual(r["metadata"], {"run": "7"})
        self.assertIsNone(r["error"])
        self.assertIsNone(r["incomplete_details"])
        self.assertEqual(len(r["output"]), 1)
        item = r["output"][0]
        self.assertEqual((item["type"], item["role"], item["status"]),
                         ("message", "assistant", "completed"))
        self.assertTrue(item["id"].startswith("msg_"))
        part = item["content"][0]
        self.assertEqual(part["type"], "output_text")
        self.assertEqual(part["annotations"], [])
        self.assertTrue(part["text"])
        u = r["usage"]
        self.assertEqual(set(u), USAGE_KEYS)
        self.assertEqual(u["output_tokens"], 24)
        self.assertEqual(u["input_tokens_details"], {"cached_tokens": 0})
        self.assertEqual(u["output_tokens_details"], {"reasoning_tokens": 0})
        self.assertEqual(u["total_tokens"], u["input_tokens"] + u["output_tokens"])

    def test_input_is_counted_as_the_equivalent_chat_request(self):
        items = [{"role": "developer", "content": "Answer in French."},
                 {"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": "What is in README.md?"}]},
                 {"type": "function_call", "call_id": "call_1", "name": "read_file",
                  "arguments": "{\"path\":\"README.md\"}"},
                 {"type": "function_call_output", "call_id": "call_1",
                  "output": "sluice owns the quota of a fleet of agents"}]
        _, payload = self.ok(req(items, instructions="Be brief.", tools=TOOLS))
        got = json.loads(payload)["usage"]["input_tokens"]
        chat = {"model": "gpt-emu", "tools": TOOLS, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": [{"type": "text", "text": "What is in README.md?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\":\"README.md\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1",
             "content": "sluice owns the quota of a fleet of agents"}]}
        est = estimate(chat, api="openai")
        self.assertIsNotNone(est, "sluice CLI not built ($SLUICE_CLI)")
        self.assertEqual(got, est["input_tokens"])
        # A string input is one user message.
        _, payload = self.ok(req("What is in README.md?"))
        one = estimate({"model": "gpt-emu", "messages": [
            {"role": "user", "content": "What is in README.md?"}]}, api="openai")
        self.assertEqual(json.loads(payload)["usage"]["input_tokens"], one["input_tokens"])

    def test_stream_sends_the_documented_event_sequence(self):
        _, payload = self.ok(req(stream=True))
        evs = events(payload)
        types = [e["type"] for e in evs]
        deltas = [e for e in evs if e["type"] == "response.output_text.delta"]
        self.assertGreaterEqual(len(deltas), 1)
        expected = (["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] +
                    ["response.output_text.delta"] * len(deltas) +
                    ["response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.completed"])
        self.assertEqual(types, expected)
        created = evs[0]["response"]
        self.assertEqual((created["status"], created["output"], created["usage"]),
                         ("in_progress", [], None))
        added = evs[2]
        self.assertEqual((added["output_index"], added["item"]["type"], added["item"]["status"],
                          added["item"]["content"]), (0, "message", "in_progress", []))
        item_id = added["item"]["id"]
        self.assertEqual(evs[3]["part"], {"type": "output_text", "annotations": [], "logprobs": [],
                                          "text": ""})
        for e in evs[3:-2]:
            self.assertEqual((e["item_id"], e["output_index"]), (item_id, 0))
        text = "".join(d["delta"] for d in deltas)
        done = evs[-4]
        self.assertEqual(done["text"], text)
        self.assertEqual(evs[-3]["part"]["text"], text)
        self.assertEqual(evs[-2]["item"]["content"][0]["text"], text)
        self.assertEqual(evs[-2]["item"]["status"], "completed")
        final = evs[-1]["response"]
        self.assertEqual(final["status"], "completed")
        self.assertEqual(final["id"], created["id"])
        self.assertEqual(final["output"][0]["content"][0]["text"], text)
        self.assertEqual(set(final["usage"]), USAGE_KEYS)
        self.assertEqual(final["usage"]["output_tokens"], 24)
        tokens = estimate({"model": "m", "max_tokens": 1,
                           "messages": [{"role": "user", "content": text}]})
        if tokens is not None:  # the filler text counts what was billed (+ framing)
            plain = estimate({"model": "m", "max_tokens": 1,
                              "messages": [{"role": "user", "content": ""}]})
            self.assertEqual(tokens["input_tokens"] - plain["input_tokens"], 24)

    def test_forced_function_call_plain_and_streamed(self):
        _, payload = self.ok(req(tools=TOOLS, tool_choice="required"))
        r = json.loads(payload)
        self.assertEqual(r["status"], "completed")
        call = r["output"][0]
        self.assertEqual((call["type"], call["name"], call["status"]),
                         ("function_call", "read_file", "completed"))
        self.assertTrue(call["id"].startswith("fc_"))
        self.assertTrue(call["call_id"].startswith("call_"))
        self.assertEqual(json.loads(call["arguments"]), {"path": "filler"})

        _, payload = self.ok(req(tools=TOOLS, tool_choice={"type": "function", "name": "read_file"},
                                 stream=True))
        evs = events(payload)
        types = [e["type"] for e in evs]
        n = types.count("response.function_call_arguments.delta")
        self.assertGreaterEqual(n, 1)
        self.assertEqual(types, ["response.created", "response.in_progress",
                                 "response.output_item.added"] +
                         ["response.function_call_arguments.delta"] * n +
                         ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"])
        added = evs[2]["item"]
        self.assertEqual((added["type"], added["arguments"], added["status"]),
                         ("function_call", "", "in_progress"))
        args = "".join(e["delta"] for e in evs if e["type"].endswith("arguments.delta"))
        self.assertEqual(evs[-3]["arguments"], args)
        self.assertEqual(json.loads(args), {"path": "filler"})
        self.assertEqual(evs[-1]["response"]["output"][0]["arguments"], args)

        status, _, payload = self.emu.responses(
            req(tools=TOOLS, tool_choice={"type": "function", "name": "nope"}))
        self.assertEqual(status, 400)
        err = json.loads(payload)["error"]
        self.assertEqual((err["type"], err["param"]), ("invalid_request_error", "tool_choice"))
        self.assertIn("nope", err["message"])

    def test_reasoning_effort_adds_a_reasoning_item_and_reasoning_tokens(self):
        _, payload = self.ok(req(reasoning={"effort": "medium"}))
        r = json.loads(payload)
        self.assertEqual([o["type"] for o in r["output"]], ["reasoning", "message"])
        self.assertTrue(r["output"][0]["id"].startswith("rs_"))
        self.assertEqual(r["reasoning"]["effort"], "medium")
        u = r["usage"]
        self.assertEqual(u["output_tokens"], 24)
        self.assertEqual(u["output_tokens_details"]["reasoning_tokens"], 6)
        self.assertNotIn("encrypted_content", r["output"][0])
        # store: false clients (Codex) ask for the reasoning to come back encrypted.
        _, payload = self.ok(req(reasoning={"effort": "low", "summary": "auto"}, store=False,
                                 include=["reasoning.encrypted_content"]))
        r = json.loads(payload)
        self.assertTrue(r["output"][0]["encrypted_content"])
        history = [{"role": "user", "content": "Say hello"}] + r["output"] + [
            {"role": "user", "content": "again"}]
        self.ok(req(history, store=False, include=["reasoning.encrypted_content"]))
        _, payload = self.ok(req(reasoning={"effort": "medium"}, stream=True))
        types = [e["type"] for e in events(payload)]
        self.assertEqual(types[2:4], ["response.output_item.added", "response.output_item.done"])

    def test_max_output_tokens_cut_is_incomplete(self):
        _, payload = self.ok(req(max_output_tokens=16, tools=TOOLS, tool_choice="auto"))
        r = json.loads(payload)
        self.assertEqual(r["usage"]["output_tokens"], 16)
        self.assertEqual(r["status"], "incomplete")
        self.assertEqual(r["incomplete_details"], {"reason": "max_output_tokens"})
        _, payload = self.ok(req(max_output_tokens=16, stream=True))
        self.assertEqual(events(payload)[-1]["type"], "response.incomplete")
        status, _, payload = self.emu.responses(req(max_output_tokens=8))
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(payload)["error"]["param"], "max_output_tokens")

    def test_json_schema_format_answers_matching_json(self):
        schema = {"type": "object", "additionalProperties": False,
                  "required": ["city", "days", "sunny", "tags", "level"],
                  "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                 "sunny": {"type": "boolean"},
                                 "tags": {"type": "array", "items": {"type": "string"}},
                                 "level": {"type": "string", "enum": ["low", "high"]}}}
        fmt = {"type": "json_schema", "name": "forecast", "schema": schema, "strict": True}
        for stream in (False, True):
            _, payload = self.ok(req(text={"format": fmt}, stream=stream))
            r = events(payload)[-1]["response"] if stream else json.loads(payload)
            value = json.loads(r["output"][0]["content"][0]["text"])
            self.assertEqual(value, {"city": "filler", "days": 1, "sunny": True,
                                     "tags": ["filler"], "level": "low"})
            self.assertEqual(r["text"]["format"]["name"], "forecast")
        _, payload = self.ok(req(text={"format": {"type": "json_object"}}))
        self.assertIsInstance(json.loads(json.loads(payload)["output"][0]["content"][0]["text"]),
                              dict)

    def test_previous_response_id_continues_the_stored_conversation(self):
        _, payload = self.ok(req("Read the README", tools=TOOLS, tool_choice="required"))
        first = json.loads(payload)
        call = first["output"][0]
        follow = [{"type": "function_call_output", "call_id": call["call_id"],
                   "output": "sluice owns the quota"}]
        _, payload = self.ok(req(follow, previous_response_id=first["id"], tools=TOOLS))
        second = json.loads(payload)
        self.assertEqual(second["previous_response_id"], first["id"])
        # The same conversation sent whole costs the same input.
        whole = [{"type": "message", "role": "user", "content": "Read the README"},
                 {"type": "function_call", "call_id": call["call_id"], "name": call["name"],
                  "arguments": call["arguments"]}] + follow
        _, payload = self.ok(req(whole, tools=TOOLS))
        self.assertEqual(second["usage"]["input_tokens"],
                         json.loads(payload)["usage"]["input_tokens"])

        status, _, payload = self.emu.responses(req(follow, previous_response_id="resp_nope"))
        self.assertEqual(status, 400)
        err = json.loads(payload)["error"]
        self.assertEqual((err["param"], err["code"]),
                         ("previous_response_id", "previous_response_not_found"))
        self.assertIn("resp_nope", err["message"])
        _, payload = self.ok(req("not kept", store=False))
        unstored = json.loads(payload)
        self.assertFalse(unstored["store"])
        status, _, _ = self.emu.responses(req("x", previous_response_id=unstored["id"]))
        self.assertEqual(status, 400)

    def test_bad_requests_name_the_field(self):
        cases = [({"input": "x"}, "model"),
                 (req(123), "input"),
                 (req([{"content": "no role"}]), "input[0]"),
                 (req([{"type": "message", "role": "robot", "content": "x"}]), "input[0]"),
                 (req([{"type": "function_call_output", "output": "x"}]), "input[0]"),
                 (req(stream="yes"), "stream"),
                 (req(tools=[{"type": "function"}]), "tools[0]"),
                 (req(text={"format": {"type": "xml"}}), "text.format.type")]
        before = self.emu.stats()["requests"]
        for body, param in cases:
            status, _, payload = self.emu.responses(body)
            self.assertEqual(status, 400, body)
            err = json.loads(payload)["error"]
            self.assertEqual((err["type"], err["param"]), ("invalid_request_error", param), body)
        self.assertEqual(self.emu.stats()["requests"], before)  # nothing reached the provider
        status, _, payload = self.emu.responses(req(), key="sk-wrong-key-12345")
        self.assertEqual(status, 401)
        self.assertEqual(json.loads(payload)["error"]["code"], "invalid_api_key")

    def test_unknown_item_and_tool_types_are_counted_not_refused(self):
        items = [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                                                                   "text": "think first"}]},
                 {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "x"},
                 {"role": "user", "content": "go on"}]
        tools = TOOLS + [{"type": "custom", "name": "apply_patch"}, {"type": "web_search"}]
        _, payload = self.ok(req(items, tools=tools, include=["reasoning.encrypted_content"],
                                 parallel_tool_calls=False, prompt_cache_key="k"))
        self.assertFalse(json.loads(payload)["parallel_tool_calls"])


class ResponsesLimits(unittest.TestCase):
    def test_rate_limit_is_a_429_in_openai_shape_with_headers(self):
        args = [a for a in FAST]
        args[args.index("--rpm") + 1] = "1"
        with Emu(args) as emu:
            status, h1, _ = emu.responses(req())
            self.assertEqual(status, 200)
            self.assertEqual(h1["x-ratelimit-limit-requests"], "1")
            self.assertEqual(h1["x-ratelimit-remaining-requests"], "0")
            status, h2, payload = emu.responses(req(stream=True))
            self.assertEqual(status, 429)
            err = json.loads(payload)["error"]
            self.assertEqual((err["type"], err["code"]), ("requests", "rate_limit_exceeded"))
            self.assertGreaterEqual(int(h2["retry-after"]), 1)
            self.assertIn("x-ratelimit-reset-requests", h2)
            s = emu.stats()
            self.assertEqual((s["admitted"], s["http_429"]), (1, 1))
            self.assertEqual((s["http"]["responses"], s["http"]["responses_stream"]), (2, 1))


if __name__ == "__main__":
    unittest.main()
