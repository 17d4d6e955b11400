"""test_paths.py - every path a client sends: base URLs with and without /v1, the model lists,
Anthropic's /api/hello, ?beta=true, and a clear refusal naming the path for what sluice does not
coordinate; the Claude-Code-shaped request estimated without the bytes / 4 fallback."""
import json
import sys
import unittest

from harness import Emu, SharedProxy, Sluiced, chat, message, pool_yaml

LIMITS = "input_tpm: 10000000\noutput_tpm: 10000000\nrpm: 10000"

TOKENS = ("auth:\n  admin_token: admin-token-0001\n  tokens:\n"
          "    - token: agent-token-claude\n      agent: cc-1\n")

# What Claude Code (2.1) sends, with the history shapes of a long session: a system
# message inside messages, thinking with its signature, a PDF, server-tool blocks, a
# tool result with an image, output_config, context_management, metadata.
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                      "data": "JVBERi0xLjQK"}}
PNG_URL = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
CLAUDE_CODE = {
    "model": "claude-sonnet-4-5", "max_tokens": 32000, "stream": True,
    "system": [{"type": "text", "text": "You are Claude Code, Anthropic's CLI. " * 40,
                "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "Tool%d" % i, "description": "Does thing %d. " % i * 10,
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
              for i in range(16)],
    "messages": [
        {"role": "system", "content": "Extra system reminder text."},
        {"role": "user", "content": [{"type": "text", "text": "fix the bug"}, PDF]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Let me look at the file.",
             "signature": "EqQBCkYIBxgCKkBsignaturebytes0123456789abcdef"},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "sluice"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
             "content": [{"type": "web_search_result", "url": "https://example.com",
                          "title": "x", "encrypted_content": "abc"}]},
            {"type": "tool_use", "id": "toolu_1", "name": "Tool1", "input": {"path": "a.png"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [PNG_URL]},
            {"type": "text", "text": "and then?", "cache_control": {"type": "ephemeral"}}]}],
    "thinking": {"type": "enabled", "budget_tokens": 31999},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"}, "metadata": {"user_id": "user_abc"},
    "temperature": 1,
}


def config(emu):
    return "pools:\n%s%s" % (pool_yaml("claude", emu.url, "anthropic", LIMITS),
                             pool_yaml("gpt", emu.url, "openai", LIMITS))


class Paths(SharedProxy):
    config = staticmethod(config)

    def get(self, path, method="GET", anthropic=True):
        headers = {"x-api-key": "t", "anthropic-version": "2023-06-01"} if anthropic else {
            "authorization": "Bearer t"}
        return self.sluiced.request(method, path, headers=headers)

    def test_model_lists_are_passed_through_for_both_providers_without_a_lease(self):
        s = self.sluiced
        before = self.emu.stats()["requests"]
        for path in ("/anthropic/v1/models", "/anthropic/models"):
            status, _, payload = self.get(path)
            self.assertEqual(status, 200, (path, payload))
            body = json.loads(payload)
            self.assertTrue(body["data"] and body["data"][0]["type"] == "model", body)
        first = body["data"][0]["id"]
        status, _, payload = self.get("/anthropic/v1/models/" + first)
        self.assertEqual((status, json.loads(payload)["id"]), (200, first))
        for path in ("/openai/v1/models", "/openai/models"):
            status, _, payload = self.get(path, anthropic=False)
            self.assertEqual(status, 200, (path, payload))
            body = json.loads(payload)
            self.assertEqual(body["object"], "list")
        status, _, payload = self.get("/openai/v1/models/gpt-4.1", anthropic=False)
        self.assertEqual((status, json.loads(payload)["id"]), (200, "gpt-4.1"))
        self.assertIsNone(s.agent("anonymous"), "a model list took a lease")
        self.assertEqual(self.emu.stats()["requests"], before, "a model list was billed")
        status, h, payload = s.request("POST", "/openai/v1/models", {},
                                       {"content-type": "application/json"})
        self.assertEqual(status, 405, payload)
        self.assertEqual(h["allow"], "GET, HEAD")

    def test_api_hello_is_answered_for_head_and_get(self):
        for method in ("HEAD", "GET"):
            status, _, payload = self.sluiced.request(method, "/anthropic/api/hello")
            self.assertEqual(status, 200, (method, payload))

    def test_base_urls_with_and_without_v1_and_beta_query_reach_the_same_endpoint(self):
        s = self.sluiced
        for path in ("/anthropic/messages", "/anthropic/v1/messages",
                     "/anthropic/v1/messages?beta=true"):
            status, _, payload = s.anthropic(message("hi"), agent="paths-a", path=path)
            self.assertEqual(status, 200, (path, payload))
        self.assertEqual(s.agent("paths-a")["leases"], 0)
        status, _, payload = s.anthropic(message("count"), agent="paths-a",
                                         path="/anthropic/messages/count_tokens")
        self.assertEqual(status, 200, payload)
        self.assertIn("input_tokens", json.loads(payload))
        for path in ("/openai/chat/completions", "/openai/v1/chat/completions"):
            status, _, payload = s.request("POST", path, chat("hi"), {
                "content-type": "application/json", "x-sluice-agent": "paths-o",
                "authorization": "Bearer t"})
            self.assertEqual(status, 200, (path, payload))
        self.assertGreater(s.agent("paths-o")["tokens_in"], 0)

    def test_what_sluice_does_not_coordinate_is_refused_naming_the_path(self):
        s = self.sluiced
        for path, shape in (("/anthropic/v1/files", "anthropic"),
                            ("/anthropic/v1/messages/batches", "anthropic"),  # no batch pool
                            ("/openai/v1/batches", "openai"),
                            ("/openai/v1/fine_tuning/jobs", "openai"),
                            ("/openai/v1/audio/speech", "openai"),
                            ("/openai/v1/chat", "openai")):
            status, _, payload = s.request("POST", path, {}, {"content-type": "application/json"})
            self.assertEqual(status, 404, (path, payload))
            body = json.loads(payload)
            msg = body["error"]["message"]
            self.assertIn(path, msg)
            self.assertIn("docs/proxy.md", msg)
            if shape == "anthropic":
                self.assertEqual(body["error"]["type"], "not_found_error")
            else:
                self.assertEqual(body["error"]["code"], "not_found")

    def test_claude_codes_request_is_estimated_close_to_the_providers_count(self):
        s = self.sluiced
        status, h, payload = s.anthropic(
            CLAUDE_CODE, agent="cc-est", path="/anthropic/v1/messages?beta=true",
            extra={"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
                                     "context-management-2025-06-27"})
        self.assertEqual(status, 200, payload[:400])
        self.assertNotIn("x-sluice-estimate", h)
        start = json.loads(payload.split(b"data: ", 1)[1].split(b"\n", 1)[0])
        usage = start["message"]["usage"]
        billed = (usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) +
                  usage.get("cache_creation_input_tokens", 0))
        grant = [e for e in s.events() if e["event"] == "granted" and e["agent"] == "cc-est"][-1]
        # Within 5% of what the emulator counted (it counts with the same model of the
        # provider's overheads, so this is equal unless the two drift apart).
        print("\n  Claude Code request: estimated %d, the emulator billed %d" % (grant["input_tokens"], billed), file=sys.stderr)
        self.assertLessEqual(abs(grant["input_tokens"] - billed), 0.05 * billed, (grant, usage))

    def test_a_body_outside_the_api_is_reserved_by_size_and_marked_fallback(self):
        s = self.sluiced
        body = message("x")
        body["messages"][0]["content"] = [{"type": "foo"}]
        status, h, payload = s.anthropic(body, agent="cc-fallback")
        self.assertEqual(status, 400, payload)  # the provider's verdict, passed on
        self.assertEqual(h.get("x-sluice-estimate"), "fallback")


class PathsWithAuth(unittest.TestCase):
    def test_model_lists_need_a_sluice_token_and_hello_does_not(self):
        emu = Emu()
        with emu, Sluiced(config(emu) + TOKENS) as s:
            status, _, payload = s.request("GET", "/anthropic/v1/models",
                                           headers={"x-api-key": "wrong"})
            self.assertEqual(status, 401, payload)
            status, _, payload = s.request("GET", "/anthropic/v1/models",
                                           headers={"x-api-key": "agent-token-claude",
                                                    "anthropic-version": "2023-06-01"})
            self.assertEqual(status, 200, payload)
            status, _, _ = s.request("HEAD", "/anthropic/api/hello")
            self.assertEqual(status, 200)


if __name__ == "__main__":
    unittest.main()
