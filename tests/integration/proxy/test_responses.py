"""test_responses.py - the OpenAI Responses API through the proxy: estimated from instructions, items
and tools, streamed event by event, settled from the Response's usage, refused in OpenAI's shape."""
import http.client
import json
import socket
import sys
import time
import unittest

from harness import (EMU_FAST, REAL_KEY, Emu, SharedProxy, Sluiced, parse_sse, pool_yaml, read_until,
                     rss_kb, streaming_pair, wait_for)
import procs  # noqa: E402  (tests/integration/procs.py, on the path once harness is in)

# limits_from: provider: the emulator's larger limits are adopted (by default the
# configured ones are a ceiling).
LIMITS = "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000\nlimits_from: provider"

TOOLS = [{"type": "function", "name": "read_file", "description": "Reads a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                         "required": ["path"]}},
         {"type": "function", "name": "shell", "description": "Runs a command",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]

# What Codex sends on its second turn: instructions, developer and user messages, its
# reasoning, a function call and its output, tools, include and store: false.
CODEX_TURN = {
    "model": "gpt-emu-1", "instructions": "You are Codex, a coding agent. " * 20,
    "input": [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Fix the failing test in src/a.c"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [
            {"type": "summary_text", "text": "I should read the file first."}],
         "encrypted_content": "gAAAAopaque"},
        {"type": "function_call", "call_id": "call_1", "name": "read_file",
         "arguments": json.dumps({"path": "src/a.c"})},
        {"type": "function_call_output", "call_id": "call_1",
         "output": "int main(void) { return 1; }\n" * 30},
    ],
    "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
    "include": ["reasoning.encrypted_content"], "prompt_cache_key": "sess-1",
    "max_output_tokens": 200,
}


def config(emu):
    return "pools:\n%s" % pool_yaml("gpt", emu.url, "openai", LIMITS)


def grant_for(events, agent):
    return [e for e in events if e["event"] == "granted" and e["agent"] == agent][-1]


class Responses(SharedProxy):
    config = staticmethod(config)

    def post(self, body, agent, path="/openai/v1/responses", key="agent-token"):
        headers = {"content-type": "application/json", "x-sluice-agent": agent,
                   "authorization": "Bearer " + key}
        return self.sluiced.request("POST", path, body, headers)

    def direct(self, body):
        """The same request straight to the emulator."""
        conn = http.client.HTTPConnection("127.0.0.1", self.emu.port, timeout=30)
        return procs.request(conn, "POST", "/v1/responses", body,
                             {"content-type": "application/json",
                              "authorization": "Bearer " + REAL_KEY})

    def test_plain_response_is_estimated_like_the_provider_and_settled_from_its_usage(self):
        s = self.sluiced
        status, h, payload = self.post(CODEX_TURN, "codex-1")
        self.assertEqual(status, 200, payload)
        body = json.loads(payload)
        self.assertEqual(body["object"], "response")
        self.assertNotIn("x-sluice-estimate", h)
        self.assertIn("x-ratelimit-remaining-tokens", h)
        usage = body["usage"]
        a = s.agent("codex-1")
        self.assertEqual(a["leases"], 0)
        self.assertEqual(a["tokens_in"], usage["input_tokens"])
        self.assertEqual(a["tokens_out"], usage["output_tokens"])
        events = s.events()
        # The emulator's x-ratelimit-* headers (limits of 100M tokens a minute) resynced the
        # pool, configured at 1M: its limits were adopted.
        adopted = {e["bucket"]: e["value"] for e in events
                   if e["event"] == "limit_adopted" and e["pool"] == "gpt"}
        self.assertEqual(adopted.get("requests"), 1000000, adopted)
        grant = grant_for(events, "codex-1")
        # The emulator bills this request by OpenAI's counting of the equivalent chat
        # request; sluice's estimate is within 5% of it (here: equal).
        self.assertLessEqual(abs(grant["input_tokens"] - usage["input_tokens"]),
                             0.05 * usage["input_tokens"], (grant, usage))
        self.assertEqual(grant["output_tokens"], 200)

    def test_string_input_and_the_no_v1_base_url(self):
        s = self.sluiced
        status, _, payload = self.post({"model": "gpt-emu-1", "input": "Hello there"}, "codex-2",
                                       path="/openai/responses")
        self.assertEqual(status, 200, payload)
        usage = json.loads(payload)["usage"]
        grant = grant_for(s.events(), "codex-2")
        self.assertEqual(grant["input_tokens"], usage["input_tokens"])
        self.assertEqual(grant["output_tokens"], 4096)  # none named: OpenAI's charge

    def test_stream_passes_every_response_event_and_is_settled_from_response_completed(self):
        s = self.sluiced
        body = dict(CODEX_TURN, stream=True)
        status, h, payload = self.post(body, "codex-3")
        self.assertEqual(status, 200, payload)
        self.assertTrue(h["content-type"].startswith("text/event-stream"))
        events = [(n, json.loads(d)) for n, d in parse_sse(payload) if n != ":"]
        names = [n for n, _ in events]
        _, _, direct = self.direct(body)

        def kinds(seq):  # the sequence, with each run of deltas as one
            return [n for i, n in enumerate(seq) if not (n.endswith(".delta") and seq[i - 1] == n)]
        self.assertEqual(kinds(names), kinds([n for n, _ in parse_sse(direct)]))
        self.assertEqual(names[:2], ["response.created", "response.in_progress"])
        self.assertIn(names[-1], ("response.completed", "response.incomplete"))
        self.assertEqual([d["sequence_number"] for _, d in events], list(range(len(events))))
        usage = events[-1][1]["response"]["usage"]
        self.assertIn("reasoning_tokens", usage["output_tokens_details"])
        a = wait_for(lambda: s.agent("codex-3")["leases"] == 0 and s.agent("codex-3"), 10,
                     "the stream to be settled")
        self.assertEqual(a["tokens_in"], usage["input_tokens"])
        self.assertEqual(a["tokens_out"], usage["output_tokens"])

    def test_a_stream_cut_at_max_output_tokens_is_settled_from_response_incomplete(self):
        s = self.sluiced
        body = {"model": "gpt-emu-1", "input": "Write a lot", "max_output_tokens": 16,
                "stream": True}
        status, _, payload = self.post(body, "codex-4")
        self.assertEqual(status, 200, payload)
        events = [(n, json.loads(d)) for n, d in parse_sse(payload) if n != ":"]
        self.assertEqual(events[-1][0], "response.incomplete")
        usage = events[-1][1]["response"]["usage"]
        a = wait_for(lambda: s.agent("codex-4")["leases"] == 0 and s.agent("codex-4"), 10,
                     "the stream to be settled")
        self.assertEqual(a["tokens_out"], usage["output_tokens"])
        self.assertEqual(a["tokens_out"], 16)

    def test_a_chained_response_does_not_teach_the_models_calibration(self):
        s = self.sluiced
        status, _, payload = self.post({"model": "gpt-emu-1", "input": "First"}, "chain-1")
        self.assertEqual(status, 200, payload)
        first = json.loads(payload)
        body = {"model": "gpt-chained-only", "input": "And then?",
                "previous_response_id": first["id"]}
        status, _, payload = self.post(body, "chain-1")
        self.assertEqual(status, 200, payload)
        usage = json.loads(payload)["usage"]
        self.assertGreater(usage["input_tokens"], grant_for(s.events(), "chain-1")["input_tokens"],
                           "the stored items were billed on top of the input sent")
        models = [c["model"] for c in s.pool("gpt").get("calibration", [])]
        self.assertNotIn("gpt-chained-only", models)
        self.assertIn("gpt-emu-1", models)

    def test_the_provider_error_shape_is_openais(self):
        body = {"model": "gpt-emu-1", "input": "x", "previous_response_id": "resp_nope"}
        status, _, payload = self.post(body, "codex-6")
        self.assertEqual(status, 400, payload)
        self.assertEqual(json.loads(payload)["error"]["code"], "previous_response_not_found")
        self.assertEqual(self.sluiced.agent("codex-6")["tokens_in"], 0)


class Refusals(unittest.TestCase):
    def test_a_body_the_estimator_cannot_read_is_reserved_by_size_and_says_so(self):
        emu = Emu()
        with emu, Sluiced(config(emu)) as s:
            body = {"model": "gpt-emu-1", "input": [{"role": "robot", "content": "x"}]}
            headers = {"content-type": "application/json", "x-sluice-agent": "codex-5",
                       "authorization": "Bearer t"}
            status, h, payload = s.request("POST", "/openai/v1/responses", body, headers)
            self.assertEqual(status, 400, payload)  # the provider judges it
            self.assertEqual(h.get("x-sluice-estimate"), "fallback")
            grant = grant_for(s.events(), "codex-5")
            self.assertEqual(grant["input_tokens"], len(json.dumps(body)) // 4)
            self.assertIn('input[0].role: unknown role "robot"', s.stop()[1])

    def test_reject_is_429_in_openais_shape_with_retry_after(self):
        emu = Emu()
        # proxy.max_hold_s 1: the proxy holds a call up to that long, then refuses.
        with emu, Sluiced("proxy:\n  max_hold_s: 1\npools:\n" + pool_yaml(
                "gpt", emu.url, "openai", "input_tpm: 1000\noutput_tpm: 1000\nrpm: 100",
                "max_queue_wait_s: 1")) as s:
            headers = {"content-type": "application/json", "x-sluice-agent": "big",
                       "authorization": "Bearer t"}
            body = {"model": "gpt-emu-1", "input": "word " * 500, "max_output_tokens": 100}
            status, _, payload = s.request("POST", "/openai/v1/responses", body, headers)
            self.assertEqual(status, 200, payload)  # spends most of the minute's input
            before = emu.stats()["requests"]
            status, h, payload = s.request("POST", "/openai/v1/responses", body, headers)
            self.assertEqual(status, 429, payload)
            err = json.loads(payload)["error"]
            self.assertEqual(err["code"], "rate_limit_exceeded")
            self.assertIn("retry-after", h)
            self.assertEqual(emu.stats()["requests"], before)
            # Streamed, refused before the stream starts: the same plain 429.
            status, h, payload = s.request("POST", "/openai/v1/responses",
                                           dict(body, stream=True), headers)
            self.assertEqual(status, 429, payload)
            self.assertEqual(json.loads(payload)["error"]["type"], "requests")

    def test_a_held_stream_gets_pings_then_a_providers_error_as_an_error_event(self):
        # One call of 1000 output tokens fills the pool's output bucket; a second waits
        # for its refund in an open stream (pings), then the provider refuses it.
        slow = ["--input-tpm", "100000000", "--output-tpm", "100000000", "--rpm", "1000000",
                "--ttft-ms", "0", "--tokens-per-s", "12", "--latency-spread", "0",
                "--output-tokens", "24"]
        emu = Emu(slow)
        with emu, Sluiced("proxy:\n  ping_interval_s: 0.2\npools:\n" + pool_yaml(
                "gpt", emu.url, "openai", "input_tpm: 1000000\noutput_tpm: 1200\nrpm: 10000",
                "max_queue_wait_s: 120")) as s:
            headers = {"content-type": "application/json", "authorization": "Bearer t"}
            first = s.open_stream("/openai/v1/responses",
                                  {"model": "gpt-emu-1", "input": "go", "stream": True,
                                   "max_output_tokens": 1000},
                                  dict(headers, **{"x-sluice-agent": "r-first"}))
            read_until(first, b"response.created", 10)
            second = s.open_stream("/openai/v1/responses",
                                   {"model": "gpt-emu-1", "input": "go", "stream": True,
                                    "max_output_tokens": 1000,
                                    "previous_response_id": "resp_unknown"},
                                   dict(headers, **{"x-sluice-agent": "r-second"}))
            got = read_until(second, b": ping", 5)
            got += read_until(second, b"previous_response_not_found", 30)
            first.close()
            second.close()
            # One event, sent in one piece: "event: error" and its data line.
            line = [l for l in got.split(b"\n") if b"previous_response_not_found" in l][0]
            before = got[:got.index(line)]
            self.assertTrue(before.endswith(b"event: error\n"), got[-400:])
            self.assertTrue(line.startswith(b"data: "), line)
            data = line[len(b"data: "):]
            ev = json.loads(data)
            self.assertEqual((ev["type"], ev["code"]), ("error", "previous_response_not_found"))
            self.assertEqual(ev["error"]["param"], "previous_response_id")
            wait_for(lambda: s.agent("r-second")["leases"] == 0, 10, "the refused call settled")
            self.assertEqual(s.agent("r-second")["tokens_in"], 0)

    def test_a_broken_stream_is_settled_with_what_it_wrote(self):
        fast = list(EMU_FAST)
        fast[fast.index("--output-tokens") + 1] = "4000"
        fast[fast.index("--tokens-per-s") + 1] = "2000"
        emu = Emu(fast)
        with emu, Sluiced("pools:\n" + pool_yaml("gpt", emu.url, "openai", LIMITS)) as s:
            sock = s.open_stream("/openai/v1/responses",
                                 {"model": "gpt-emu-1", "input": "go", "stream": True,
                                  "max_output_tokens": 4000},
                                 {"content-type": "application/json", "x-sluice-agent": "cut",
                                  "authorization": "Bearer t"})
            got = read_until(sock, b"response.output_text.delta", 20)
            got += read_until(sock, b"\n\n", 5)
            sock.close()  # the client leaves mid-stream
            a = wait_for(lambda: s.agent("cut")["leases"] == 0 and s.agent("cut"), 10,
                         "the cut stream to be settled")
            self.assertGreater(a["tokens_out"], 0)
            self.assertLess(a["tokens_out"], 4000)
            self.assertGreater(a["tokens_in"], 0)


if __name__ == "__main__":
    unittest.main()


class SlowClient(unittest.TestCase):
    """A client that stops reading a long Responses stream: the provider is paused, sluiced
    does not hold the stream, and nothing is lost when the client reads on."""

    def test_a_client_that_stops_reading_a_response_stream_pauses_the_provider(self):
        tokens = 400000  # about 9 MB of events
        emu, s = streaming_pair("gpt", "openai", tokens)
        with emu, s:
            before = rss_kb(s.proc.pid)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            sock.connect(("127.0.0.1", s.port))
            body = json.dumps({"model": "gpt-emu-1", "input": "go", "stream": True,
                               "max_output_tokens": tokens}).encode()
            sock.sendall(b"POST /openai/v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"content-type: application/json\r\nauthorization: Bearer t\r\n"
                         b"x-sluice-agent: slow\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(3.0)  # not reading while the provider sends
            peak = rss_kb(s.proc.pid)
            got = b""
            sock.settimeout(30)
            while b"event: response.incomplete" not in got or not got.endswith(b"\r\n0\r\n\r\n"):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                got += chunk
            sock.close()
            self.assertIn(b"event: response.incomplete", got)
            self.assertIn(b'"output_tokens":%d' % tokens, got.replace(b" ", b""))
            print("\n  sluiced grew by %d KiB while its client left a Responses stream of %d "
                  "bytes unread" % (peak - before, len(got)), file=sys.stderr)
            self.assertGreater(len(got), 6 << 20)
            self.assertLess(peak - before, 3 * 1024)
            wait_for(lambda: s.agent("slow")["leases"] == 0, 10, "the stream to be settled")
            self.assertEqual(s.agent("slow")["tokens_out"], tokens)
