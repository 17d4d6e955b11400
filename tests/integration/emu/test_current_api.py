"""sluice-emu keeps up with the APIs as clients use them now: role "system" inside Anthropic messages,
thinking blocks with signatures, output_config / output_format and response_format answered with JSON
that matches the schema, reasoning tokens, GET /v1/models in both shapes, and the fields, betas and
query strings current clients send."""
import json
import unittest

from harness import Emu, SharedEmu, KEY, ANTHROPIC_VERSION, estimate, message, parse_sse

# A schema with what generators produce: nesting, arrays, enums, bounds, $ref, nullable anyOf.
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 10},
        "count": {"type": "integer", "minimum": 3, "maximum": 9},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "done": {"type": "boolean"},
        "kind": {"type": "string", "enum": ["bug", "feature"]},
        "when": {"type": "string", "format": "date-time"},
        "owner": {"$ref": "#/$defs/person"},
        "steps": {"type": "array", "minItems": 2,
                  "items": {"type": "object", "properties": {"cmd": {"type": "string"}},
                            "required": ["cmd"], "additionalProperties": False}},
        "note": {"anyOf": [{"type": "null"}, {"type": "string"}]},
        "optional": {"type": "string"},
    },
    "required": ["title", "count", "ratio", "done", "kind", "when", "owner", "steps", "note"],
    "additionalProperties": False,
    "$defs": {"person": {"type": "object", "properties": {"name": {"type": "string"},
                                                         "age": {"type": "integer"}},
                         "required": ["name", "age"], "additionalProperties": False}},
}


def conforms(value, schema, root=None):
    """A small JSON Schema check of the keywords SCHEMA uses; returns an error string or None."""
    root = root or schema
    if "$ref" in schema:
        target = root
        for key in schema["$ref"].lstrip("#/").split("/"):
            target = target[key]
        return conforms(value, target, root)
    if "anyOf" in schema:
        errs = [conforms(value, s, root) for s in schema["anyOf"]]
        return None if None in errs else "anyOf: %r" % errs
    if "enum" in schema and value not in schema["enum"]:
        return "%r not in enum" % (value,)
    t = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if t in types and not isinstance(value, types[t]):
        return "%r is not %s" % (value, t)
    if t == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
        return "%r is not an integer" % (value,)
    if t == "number" and not isinstance(value, (int, float)):
        return "%r is not a number" % (value,)
    if t in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return "%r < minimum" % value
        if "maximum" in schema and value > schema["maximum"]:
            return "%r > maximum" % value
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return "%r <= exclusiveMinimum" % value
    if t == "string" and len(value) < schema.get("minLength", 0):
        return "%r shorter than minLength" % value
    if t == "array":
        if len(value) < schema.get("minItems", 0):
            return "fewer than minItems"
        for v in value:
            e = conforms(v, schema.get("items", {}), root)
            if e:
                return e
    if t == "object":
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                return "missing %s" % k
        for k, v in value.items():
            if k not in props:
                if schema.get("additionalProperties") is False:
                    return "extra property %s" % k
                continue
            e = conforms(v, props[k], root)
            if e:
                return "%s: %s" % (k, e)
    return None


def blocks_of_stream(payload):
    """Reassembles an Anthropic stream into its content blocks; checks index order."""
    blocks, open_index = [], None
    for name, data in parse_sse(payload):
        d = json.loads(data)
        if name == "content_block_start":
            assert d["index"] == len(blocks) and open_index is None, d
            blocks.append(dict(d["content_block"], _deltas=[]))
            open_index = d["index"]
        elif name == "content_block_delta":
            assert d["index"] == open_index, d
            blocks[-1]["_deltas"].append(d["delta"])
        elif name == "content_block_stop":
            assert d["index"] == open_index, d
            open_index = None
    assert open_index is None
    return blocks


class AnthropicNow(SharedEmu):
    def ok(self, body, **kw):
        status, headers, payload = self.emu.anthropic(body, **kw)
        self.assertEqual(status, 200, payload)
        return payload

    def test_system_role_inside_messages_is_accepted_and_counted(self):
        msgs = [{"role": "system", "content": "You are a careful engineer."},
                {"role": "user", "content": "Hello, Claude"}]
        body = {"model": "claude-emu-1", "max_tokens": 50, "messages": msgs}
        usage = json.loads(self.ok(body))["usage"]
        as_user = dict(body, messages=[dict(msgs[0], role="user"), msgs[1]])
        est = estimate(as_user)
        self.assertIsNotNone(est, "sluice CLI not built ($SLUICE_CLI)")
        self.assertEqual(usage["input_tokens"], est["input_tokens"])
        status, _, payload = self.emu.anthropic(body, path="/v1/messages/count_tokens")
        self.assertEqual((status, json.loads(payload)["input_tokens"]),
                         (200, est["input_tokens"]))
        status, _, payload = self.emu.anthropic(
            dict(body, messages=[{"role": "robot", "content": "x"}]))
        self.assertEqual(status, 400)
        self.assertIn("messages.0.role", json.loads(payload)["error"]["message"])

    def test_claude_code_shaped_request_is_served(self):
        tools = [{"name": "Tool%d" % i, "description": "tool %d" % i,
                  "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}
                 for i in range(14)]
        body = {"model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": True,
                "system": [{"type": "text", "text": "You are Claude Code.",
                            "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "system", "content": "Extra system text."},
                             {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]}],
                "tools": tools, "thinking": {"type": "enabled", "budget_tokens": 31999},
                "context_management": {"edits": [{"type": "clear_thinking_20251015",
                                                  "keep": "all"}]},
                "output_config": {"effort": "high"}, "metadata": {"user_id": "user_abc"},
                "temperature": 1}
        payload = self.ok(body, path="/v1/messages?beta=true",
                          extra={"anthropic-beta": "claude-code-20250219,interleaved-thinking-"
                                 "2025-05-14,context-management-2025-06-27"})
        blocks = blocks_of_stream(payload)
        self.assertEqual([b["type"] for b in blocks], ["thinking", "text"])

    def test_thinking_blocks_come_first_with_a_signature(self):
        body = message(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1024})
        m = json.loads(self.ok(body))
        self.assertEqual([b["type"] for b in m["content"]], ["thinking", "text"])
        think = m["content"][0]
        self.assertTrue(think["thinking"])
        self.assertGreaterEqual(len(think["signature"]), 40)
        self.assertEqual(m["usage"]["output_tokens"], 24)  # thinking is billed as output
        self.assertEqual(m["stop_reason"], "end_turn")
        est = estimate(message(think["thinking"]))
        est0 = estimate(message(""))
        self.assertEqual(est["input_tokens"] - est0["input_tokens"], 6)  # a quarter of 24

        blocks = blocks_of_stream(self.ok(dict(body, stream=True)))
        self.assertEqual([b["type"] for b in blocks], ["thinking", "text"])
        t = blocks[0]
        self.assertEqual((t["thinking"], t["signature"]), ("", ""))
        kinds = [d["type"] for d in t["_deltas"]]
        self.assertEqual(kinds[-1], "signature_delta")
        self.assertEqual(set(kinds[:-1]), {"thinking_delta"})
        self.assertGreaterEqual(len(t["_deltas"][-1]["signature"]), 40)
        self.assertTrue("".join(d["thinking"] for d in t["_deltas"][:-1]))
        self.assertEqual({d["type"] for d in blocks[1]["_deltas"]}, {"text_delta"})

        for thinking in ({"type": "adaptive"}, {"type": "enabled", "budget_tokens": 5000}):
            m = json.loads(self.ok(message(max_tokens=2000, thinking=thinking)))
            self.assertEqual(m["content"][0]["type"], "thinking")
        m = json.loads(self.ok(message(thinking={"type": "disabled"})))
        self.assertEqual([b["type"] for b in m["content"]], ["text"])
        # The thinking block goes back in the next turn's history and is counted.
        history = message(max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1024})
        history["messages"] += [{"role": "assistant", "content": [think, m["content"][0]]},
                                {"role": "user", "content": "and then?"}]
        self.ok(history)

    def test_bad_thinking_and_output_config_are_400_naming_the_field(self):
        tools = [{"name": "t", "input_schema": {"type": "object"}}]
        cases = [(message(thinking={"type": "enabled", "budget_tokens": 100}),
                  "thinking.enabled.budget_tokens"),
                 (message(thinking={"type": "sometimes"}), "thinking.type"),
                 (message(output_config={"effort": "extreme"}), "output_config.effort"),
                 (message(output_config={"format": {"type": "xml"}}), "output_config.format.type"),
                 (message(output_config={"format": {"type": "json_schema"}}),
                  "output_config.format.schema"),
                 (message(tools=tools, tool_choice={"type": "any"},
                          thinking={"type": "enabled", "budget_tokens": 1024}), "tool_choice")]
        before = self.emu.stats()["requests"]
        self.assert_refused(cases)
        self.assertEqual(self.emu.stats()["requests"], before)

    def test_output_config_format_answers_json_matching_the_schema(self):
        fmt = {"type": "json_schema", "schema": SCHEMA}
        for body in (message(output_config={"format": fmt, "effort": "low"}),
                     message(output_format=fmt)):
            m = json.loads(self.ok(dict(body, max_tokens=1000)))
            value = json.loads(m["content"][0]["text"])
            self.assertIsNone(conforms(value, SCHEMA), value)
            self.assertEqual(len(value["steps"]), 2)
            self.assertNotIn("optional", value)
            blocks = blocks_of_stream(self.ok(dict(body, max_tokens=1000, stream=True)))
            text = "".join(d["text"] for d in blocks[0]["_deltas"])
            self.assertEqual(json.loads(text), value)
            # The answer costs what its JSON counts.
            est = estimate(message(m["content"][0]["text"]))
            est0 = estimate(message(""))
            self.assertEqual(m["usage"]["output_tokens"],
                             est["input_tokens"] - est0["input_tokens"])

    def test_newer_block_types_in_history_are_counted_not_refused(self):
        body = message()
        body["messages"] = [
            {"role": "user", "content": "search it"},
            {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                 "input": {"query": "sluice"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                 "content": [{"type": "web_search_result", "url": "https://example.com",
                              "title": "x", "encrypted_content": "abc"}]}]},
            {"role": "user", "content": [{"type": "search_result", "source": "s", "title": "t",
                                          "content": [{"type": "text", "text": "found"}]}]}]
        self.ok(body)
        # PDFs (base64, url, file sources), also inside a tool result, are valid too.
        pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                               "data": "JVBERi0xLjQK"}}
        body["messages"] = [{"role": "user", "content": [
            pdf, {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
            {"type": "text", "text": "summarise"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read",
                                               "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": [pdf]}]}]
        self.ok(body)
        status, _, payload = self.emu.anthropic(
            dict(body, messages=[{"role": "user", "content": [{"type": "foo"}]}]))
        self.assertEqual(status, 400)
        self.assertIn("foo", json.loads(payload)["error"]["message"])


class OpenAINow(SharedEmu):
    def chat(self, **extra):
        body = {"model": "gpt-emu", "messages": [{"role": "user", "content": "plan it"}]}
        body.update(extra)
        status, _, payload = self.emu.openai(body)
        return status, payload

    def test_response_format_json_schema_and_json_object(self):
        rf = {"type": "json_schema", "json_schema": {"name": "plan", "schema": SCHEMA,
                                                     "strict": True}}
        status, payload = self.chat(response_format=rf)
        self.assertEqual(status, 200, payload)
        c = json.loads(payload)
        value = json.loads(c["choices"][0]["message"]["content"])
        self.assertIsNone(conforms(value, SCHEMA), value)
        self.assertEqual(c["choices"][0]["finish_reason"], "stop")
        status, payload = self.chat(response_format=rf, stream=True)
        text = "".join(json.loads(d)["choices"][0]["delta"].get("content") or ""
                       for _, d in parse_sse(payload)[:-1])
        self.assertEqual(json.loads(text), value)
        status, payload = self.chat(response_format={"type": "json_object"})
        self.assertIsInstance(json.loads(json.loads(payload)["choices"][0]["message"]["content"]),
                              dict)
        for rf, param in (({"type": "yaml"}, "response_format.type"),
                          ({"type": "json_schema", "json_schema": {"schema": SCHEMA}},
                           "response_format.json_schema.name")):
            status, payload = self.chat(response_format=rf)
            self.assertEqual(status, 400)
            self.assertEqual(json.loads(payload)["error"]["param"], param)

    def test_reasoning_effort_reports_reasoning_tokens(self):
        status, payload = self.chat(reasoning_effort="high")
        u = json.loads(payload)["usage"]
        self.assertEqual(u["completion_tokens"], 24)
        self.assertEqual(u["completion_tokens_details"]["reasoning_tokens"], 6)
        status, payload = self.chat(reasoning_effort="minimal")
        self.assertEqual(json.loads(payload)["usage"]["completion_tokens_details"]
                         ["reasoning_tokens"], 0)


class Models(SharedEmu):
    def get(self, path, anthropic):
        h = ({"x-api-key": KEY, "anthropic-version": ANTHROPIC_VERSION} if anthropic
             else {"authorization": "Bearer " + KEY})
        status, headers, payload = self.emu.request("GET", path, None, h)
        return status, headers, json.loads(payload)

    def test_anthropic_models_list_pages_and_gets(self):
        status, headers, page = self.get("/v1/models", True)
        self.assertEqual(status, 200)
        self.assertIn("request-id", headers)
        ids = [m["id"] for m in page["data"]]
        self.assertIn("claude-sonnet-4-5-20250929", ids)
        self.assertEqual((page["first_id"], page["last_id"], page["has_more"]),
                         (ids[0], ids[-1], False))
        m = page["data"][0]
        self.assertEqual(m["type"], "model")
        self.assertTrue(m["display_name"] and m["created_at"].endswith("Z"))
        _, _, first = self.get("/v1/models?limit=2", True)
        self.assertEqual(([m["id"] for m in first["data"]], first["has_more"]), (ids[:2], True))
        _, _, rest = self.get("/v1/models?limit=2&after_id=" + first["last_id"], True)
        self.assertEqual([m["id"] for m in rest["data"]], ids[2:4])
        status, _, one = self.get("/v1/models/claude-sonnet-4-5-20250929", True)
        self.assertEqual((status, one["id"], one["display_name"]),
                         (200, "claude-sonnet-4-5-20250929", "Claude Sonnet 4.5"))
        status, _, err = self.get("/v1/models?limit=0", True)
        self.assertEqual(status, 400)
        self.assertIn("limit", err["error"]["message"])

    def test_openai_models_list_and_get(self):
        status, headers, page = self.get("/v1/models", False)
        self.assertEqual(status, 200)
        self.assertIn("x-request-id", headers)
        self.assertEqual(page["object"], "list")
        self.assertTrue(all(m["object"] == "model" and isinstance(m["created"], int)
                            for m in page["data"]))
        status, _, one = self.get("/v1/models/gpt-5", False)
        self.assertEqual((status, one["id"], one["object"]), (200, "gpt-5", "model"))

    def test_models_need_the_key(self):
        status, _, payload = self.emu.request("GET", "/v1/models", None, {})
        self.assertEqual(status, 401)
        self.assertEqual(json.loads(payload)["error"]["code"], None)
        status, _, payload = self.emu.request("GET", "/v1/models", None,
                                              {"anthropic-version": ANTHROPIC_VERSION})
        self.assertEqual((status, json.loads(payload)["error"]["type"]),
                         (401, "authentication_error"))


if __name__ == "__main__":
    unittest.main()
