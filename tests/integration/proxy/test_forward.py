"""test_forward.py - calls through the proxy reach the provider with the pool's key and are settled."""
import json
import socket
import sys
import time
import unittest

from harness import (REAL_KEY, Emu, SharedProxy, Sluiced, chat, message, parse_sse, pool_yaml,
                     rss_kb, streaming_pair, wait_for)

LIMITS = "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000"


def config(emu):
    return "pools:\n%s%s" % (pool_yaml("claude", emu.url, "anthropic", LIMITS),
                             pool_yaml("gpt", emu.url, "openai", LIMITS))


def as_worker(s, headers):
    """A Messages call as worker-1 with the workers' token and the x-sluice-* `headers`."""
    return s.anthropic(message(), agent="worker-1", key="agent-token-workers", extra=headers)


def workers_sluiced(emu):
    """sluiced with auth: the admin token (its client's bearer) and a token for agents
    "worker-*"."""
    s = Sluiced(config(emu) + (
        "auth:\n  admin_token: admin-token-0001\n  tokens:\n"
        "    - token: agent-token-workers\n      agent_prefix: worker-\n"))
    s.bearer = "admin-token-0001"
    return s


class Forwarding(SharedProxy):
    config = staticmethod(config)

    def test_anthropic_call_is_answered_and_settled_with_the_providers_usage(self):
        s = self.sluiced
        status, h, payload = s.anthropic(message("Hello there, Claude"), agent="plain-1")
        self.assertEqual(status, 200, payload)
        body = json.loads(payload)
        self.assertEqual(body["type"], "message")
        self.assertIn("anthropic-ratelimit-requests-remaining", h)
        a = s.agent("plain-1")
        self.assertEqual(a["tokens_in"], body["usage"]["input_tokens"])
        self.assertEqual(a["tokens_out"], body["usage"]["output_tokens"])
        self.assertEqual(a["leases"], 0)
        settled = [e for e in s.events() if e["event"] == "settled" and e["agent"] == "plain-1"]
        self.assertEqual(len(settled), 1)
        self.assertEqual(settled[0]["output_tokens"], body["usage"]["output_tokens"])

    def test_a_proxied_body_keeps_the_proxys_limit_above_the_lease_apis(self):
        # 100 KiB: over the lease API's 64 KiB, under the proxy's 32 MiB (a pool is proxied).
        s = self.sluiced
        text = "word " * (100 * 1024 // 5)
        status, _, payload = s.anthropic(message(text), agent="big-body-1")
        self.assertEqual(status, 200, payload[:300])
        status, _, payload = s.request("POST", "/v1/leases", raw=json.dumps(
            {"agent": "a1", "input_tokens": 1, "output_tokens": 1, "note": text}).encode(),
            headers={"content-type": "application/json"})
        self.assertEqual(status, 413, payload[:300])

    def test_anthropic_stream_is_passed_through_and_settled_from_the_stream(self):
        s = self.sluiced
        status, h, payload = s.anthropic(message("Stream to me", stream=True), agent="stream-1")
        self.assertEqual(status, 200, payload)
        self.assertTrue(h["content-type"].startswith("text/event-stream"))
        events = parse_sse(payload)
        names = [e[0] for e in events]
        self.assertEqual(names[0], "message_start")
        self.assertEqual(names[-1], "message_stop")
        delta = [json.loads(d) for n, d in events if n == "message_delta"][-1]
        start = json.loads(events[0][1])
        a = s.agent("stream-1")
        self.assertEqual(a["tokens_out"], delta["usage"]["output_tokens"])
        self.assertEqual(a["tokens_in"], start["message"]["usage"]["input_tokens"])
        self.assertEqual(a["leases"], 0)

    def test_openai_stream_gets_usage_for_sluice_but_not_for_a_client_that_did_not_ask(self):
        s = self.sluiced
        status, _, payload = s.openai(chat("Count for me", stream=True), agent="oai-1")
        self.assertEqual(status, 200, payload)
        chunks = [d for _, d in parse_sse(payload)]
        self.assertEqual(chunks[-1], "[DONE]")
        parsed = [json.loads(c) for c in chunks[:-1]]
        self.assertTrue(all(c["choices"] for c in parsed), "the usage-only chunk leaked")
        a = s.agent("oai-1")
        self.assertGreater(a["tokens_out"], 0)
        self.assertGreater(a["tokens_in"], 0)
        # A client that asks gets the usage chunk.
        status, _, payload = s.openai(
            chat("Count for me", stream=True, stream_options={"include_usage": True}),
            agent="oai-2")
        parsed = [json.loads(d) for _, d in parse_sse(payload) if d != "[DONE]"]
        self.assertEqual(parsed[-1]["choices"], [])
        usage = parsed[-1]["usage"]
        a = s.agent("oai-2")
        self.assertEqual(a["tokens_out"], usage["completion_tokens"])
        self.assertEqual(a["tokens_in"], usage["prompt_tokens"])

    def test_openai_call_is_settled(self):
        s = self.sluiced
        status, _, payload = s.openai(chat("Non-streaming"), agent="oai-3")
        self.assertEqual(status, 200, payload)
        usage = json.loads(payload)["usage"]
        a = s.agent("oai-3")
        self.assertEqual(a["tokens_out"], usage["completion_tokens"])
        self.assertEqual(a["tokens_in"], usage["prompt_tokens"])

    def test_count_tokens_is_passed_through_without_a_lease(self):
        s = self.sluiced
        before = s.pool("claude")["granted_total"] if "granted_total" in s.pool("claude") else None
        status, _, payload = s.anthropic(
            {"model": "claude-emu-1", "messages": [{"role": "user", "content": "count me"}]},
            agent="counter-1", path="/anthropic/v1/messages/count_tokens")
        self.assertEqual(status, 200, payload)
        self.assertGreater(json.loads(payload)["input_tokens"], 0)
        self.assertIsNone(s.agent("counter-1"))
        if before is not None:
            self.assertEqual(s.pool("claude")["granted_total"], before)

    def test_errors_come_in_the_providers_shape(self):
        s = self.sluiced
        status, _, payload = s.request("GET", "/anthropic/v1/messages")
        self.assertEqual(status, 405)
        self.assertEqual(json.loads(payload)["type"], "error")
        status, _, payload = s.request("POST", "/anthropic/v1/complete", raw=b"{}")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(payload)["error"]["type"], "not_found_error")
        status, _, payload = s.request("POST", "/anthropic/v1/messages", raw=b"{not json",
                                       headers={"x-sluice-agent": "x",
                                                "content-type": "application/json"})
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(payload)["error"]["type"], "invalid_request_error")
        # What a web page can send without a preflight is refused before anything is spent.
        status, _, payload = s.request("POST", "/anthropic/v1/messages",
                                       raw=json.dumps(message()).encode(),
                                       headers={"x-sluice-agent": "x",
                                                "content-type": "text/plain"})
        self.assertEqual(status, 415)
        err = json.loads(payload)["error"]
        self.assertEqual(err["type"], "invalid_request_error")
        self.assertIn("Content-Type: 'text/plain'", err["message"])
        status, _, payload = s.openai(chat(), extra={"x-sluice-pool": "nope"})
        self.assertEqual(status, 404)
        self.assertIn("error", json.loads(payload))
        status, _, payload = s.anthropic(message(), agent="bad agent name")
        self.assertEqual(status, 400)
        # The provider's own 400 passes through, and the lease is refunded.
        status, _, payload = s.anthropic({"model": "m", "max_tokens": 0, "messages": []},
                                         agent="invalid-1")
        self.assertEqual(status, 400, payload)
        self.assertEqual(s.agent("invalid-1")["leases"], 0)

    def test_too_many_headers_and_too_big_bodies_are_refused(self):
        s = self.sluiced
        many = {"x-filler-%d" % i: "v" for i in range(120)}
        status, _, payload = s.anthropic(message(), extra=many)
        self.assertEqual(status, 431)
        self.assertEqual(json.loads(payload)["type"], "error")


class Keys(unittest.TestCase):
    """The emulator takes only the pool's key; agents present their sluice tokens."""

    def test_the_agents_token_is_replaced_by_the_pool_key_which_never_leaks(self):
        with Emu() as emu:
            cfg = config(emu) + (
                "auth:\n  admin_token: admin-token-0001\n  tokens:\n"
                "    - token: agent-token-planner-1\n      agent: planner-1\n"
                "    - token: agent-token-workers\n      agent_prefix: worker-\n")
            with Sluiced(cfg) as s:
                s.bearer = "admin-token-0001"
                status, h, payload = s.anthropic(message(stream=True), agent=None,
                                                 key="agent-token-planner-1")
                self.assertEqual(status, 200, payload)
                seen = [payload, json.dumps(h).encode()]
                self.assertIsNotNone(s.agent("planner-1"))
                # Bearer works too (OpenAI SDK style), with the agent named by header.
                status, h, payload = s.openai(chat(), agent="worker-7", key="agent-token-workers")
                self.assertEqual(status, 200, payload)
                seen += [payload, json.dumps(h).encode()]
                self.assertIsNotNone(s.agent("worker-7"))
                # A prefix token must name its agent; a wrong or missing key is refused.
                status, _, payload = s.openai(chat(), agent=None, key="agent-token-workers")
                self.assertEqual(status, 403, payload)
                status, _, payload = s.openai(chat(), agent="planner-1", key="agent-token-workers")
                self.assertEqual(status, 403, payload)
                status, _, payload = s.anthropic(message(), key="wrong-token-123")
                self.assertEqual(status, 401)
                self.assertEqual(json.loads(payload)["error"]["type"], "authentication_error")
                seen.append(payload)
                status, _, payload = s.anthropic(message(), key=None)
                self.assertEqual(status, 401)
                # Headers alone are not enough while allow_unauthenticated is off.
                status, _, payload = s.anthropic(message(), key=None, agent="sneaky")
                self.assertEqual(status, 401)
                for path in ("/v1/pools", "/v1/agents", "/metrics"):
                    seen.append(s.request("GET", path, headers={
                        "authorization": "Bearer admin-token-0001"})[2])
                stats = emu.stats()
                self.assertEqual(stats["http"]["status_401"], 0, "the agent's token reached it")
                log = s.event_log_text()
            out, err = s.output
            for blob in seen + [log.encode(), out.encode(), err.encode()]:
                self.assertNotIn(REAL_KEY.encode(), blob)
                self.assertNotIn(REAL_KEY[8:].encode(), blob)

    def test_unauthenticated_agents_use_headers_when_the_config_allows(self):
        with Emu() as emu:
            cfg = config(emu) + (
                "proxy:\n  allow_unauthenticated: true\n"
                "auth:\n  admin_token: admin-token-0001\n  tokens:\n    - token: agent-token-planner-1\n      agent: planner-1\n")
            with Sluiced(cfg) as s:
                s.bearer = "admin-token-0001"
                status, _, payload = s.anthropic(
                    message(), key="anything", agent="guest-3",
                    extra={"x-sluice-role": "reviewer", "x-sluice-priority": "high",
                           "x-sluice-unblocks": "2"})
                self.assertEqual(status, 200, payload)
                a = s.agent("guest-3")
                self.assertEqual(a["role"], "reviewer")

    def test_x_sluice_unblocks_is_bound_to_the_token(self):
        with Emu() as emu:
            with workers_sluiced(emu) as s:
                status, _, payload = as_worker(s, {"x-sluice-unblocks": "9007199254740992"})
                self.assertEqual(status, 403, payload)
                self.assertIn(b"x-sluice-unblocks", payload)
                self.assertIn(b"max_unblocks", payload)
                self.assertIsNone(s.agent("worker-1"))  # refused before any lease
                status, _, payload = as_worker(s, {"x-sluice-unblocks": "8"})
                self.assertEqual(status, 200, payload)
                self.assertEqual(s.agent("worker-1")["weight"], 5)  # 1 x (1 + 0.5 x 8)

    def test_x_sluice_task_naming_a_hub_is_bound_to_the_tokens_max_unblocks(self):
        # Twelve waiting tasks depend on "hub": a worker token (max_unblocks 8) naming it
        # through the proxy gets the weight of 8 unblocks, as the lease API gives.
        with Emu() as emu:
            with workers_sluiced(emu) as s:
                admin = {"authorization": "Bearer admin-token-0001",
                         "content-type": "application/json"}
                status, _, payload = s.request("PUT", "/v1/tasks/hub", {"role": "worker",
                                               "state": "running"}, headers=admin)
                self.assertEqual(status, 200, payload)
                for i in range(12):
                    status, _, payload = s.request("PUT", "/v1/tasks/leaf-%d" % i,
                                                   {"depends_on": ["hub"], "state": "waiting"},
                                                   headers=admin)
                    self.assertEqual(status, 200, payload)
                status, _, payload = as_worker(s, {"x-sluice-task": "hub"})
                self.assertEqual(status, 200, payload)
                self.assertEqual(s.agent("worker-1")["weight"], 5)  # 1 x (1 + 0.5 x 8), not 7

    def test_x_sluice_priority_is_bound_to_the_token(self):
        # A worker token may not ask for "high" through the proxy either (its default
        # priorities are those with a factor <= 1), and nothing is leased.
        with Emu() as emu:
            with workers_sluiced(emu) as s:
                status, _, payload = as_worker(s, {"x-sluice-priority": "high"})
                self.assertEqual(status, 403, payload)
                self.assertIn(b"x-sluice-priority", payload)
                self.assertIn(b"high", payload)
                self.assertIsNone(s.agent("worker-1"))  # refused before any lease
                status, _, payload = as_worker(s, {"x-sluice-priority": "low"})
                self.assertEqual(status, 200, payload)

    def test_a_missing_key_variable_is_a_config_error_naming_it(self):
        with Emu() as emu:
            with self.assertRaises(RuntimeError) as ctx:
                Sluiced(config(emu), key="")
            self.assertIn("SLUICE_TEST_KEY", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()


class SlowClient(unittest.TestCase):
    """A client that stops reading a long stream: the provider is paused rather than the
    whole answer piling up in sluiced, and nothing is lost when the client reads on."""

    def test_a_client_that_stops_reading_pauses_the_provider_and_loses_nothing(self):
        # About 12 MB of events of about 80 KB (the emulator sends what is due every 50 ms),
        # well past what the kernel's socket buffers can hold (4 MB here), in about 8 s.
        tokens = 3000000
        emu, s = streaming_pair("claude", "anthropic", tokens)
        with emu, s:
            before = rss_kb(s.proc.pid)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            sock.connect(("127.0.0.1", s.port))
            body = json.dumps(message(max_tokens=tokens, stream=True)).encode()
            sock.sendall(b"POST /anthropic/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"content-type: application/json\r\nanthropic-version: 2023-06-01\r\n"
                         b"x-api-key: agent-token\r\nx-sluice-agent: slow\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(4.0)  # not reading while the provider sends 6 MB
            peak = rss_kb(s.proc.pid)
            got = b""
            sock.settimeout(30)
            while b"event: message_stop" not in got:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                got += chunk
            sock.close()
            self.assertIn(b"event: message_stop", got)
            self.assertIn(b'"output_tokens":%d' % tokens, got.replace(b" ", b""))
            self.assertGreater(len(got), 10 << 20)
            print("\n  sluiced grew by %d KiB while its client left a stream of %d bytes unread"
                  % (peak - before, len(got)), file=sys.stderr)
            self.assertLess(peak - before, 3 * 1024,
                            "sluiced grew by %d KiB holding a stream nobody read" % (peak - before))
            wait_for(lambda: s.agent("slow")["leases"] == 0, 10, "the stream to be settled")
            self.assertEqual(s.agent("slow")["tokens_out"], tokens)
