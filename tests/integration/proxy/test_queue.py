"""test_queue.py - held requests, rejections, provider 429s and clients that leave, through the proxy."""
import json
import threading
import time
import unittest

from harness import (EMU_FAST, Emu, Sluiced, message, chat, parse_sse, pool_yaml, read_until,
                     wait_for)

# One call of max_tokens 1000 takes nearly all of the output bucket (1020), which
# refills at 17 tokens/s: a second such call waits for the first one's refund.
TIGHT = "input_tpm: 1000000\noutput_tpm: 1200\nrpm: 10000"
# Answers that take about 2 s (24 tokens at 12 tokens/s).
EMU_SLOW = ["--input-tpm", "100000000", "--output-tpm", "100000000", "--rpm", "1000000",
            "--ttft-ms", "0", "--tokens-per-s", "12", "--latency-spread", "0",
            "--output-tokens", "24", "--ping-interval-ms", "100000"]


def stream_headers(agent):
    return {"content-type": "application/json", "anthropic-version": "2023-06-01",
            "x-api-key": "agent-token", "x-sluice-agent": agent}


def queue_config(emu):
    """The TIGHT pool on `emu`, queued calls held up to 120 s, pinged every 0.2 s."""
    return ("proxy:\n  ping_interval_s: 0.2\npools:\n" +
            pool_yaml("claude", emu.url, "anthropic", TIGHT, "max_queue_wait_s: 120"))


def big_stream(s, agent):
    """A streaming call of max_tokens 1000: one fills TIGHT's output bucket."""
    return s.open_stream("/anthropic/v1/messages", message(max_tokens=1000, stream=True),
                         stream_headers(agent))


class Queued(unittest.TestCase):
    def test_a_queued_stream_gets_pings_then_the_answer(self):
        with Emu(EMU_SLOW) as emu, Sluiced(queue_config(emu)) as s:
            first = big_stream(s, "first")
            read_until(first, b"message_start", 10)
            t0 = time.monotonic()
            second = big_stream(s, "second")
            head = read_until(second, b"event: ping", 5)
            self.assertLess(time.monotonic() - t0, 1.0, "the queued stream was not started at once")
            self.assertIn(b"200 OK", head)
            self.assertEqual(s.agent("second")["queued"], 1)
            got = head + read_until(second, b"message_stop", 30)
            first.close()
            second.close()
            body = got.split(b"\r\n\r\n", 1)[1]
            order = got.index(b"event: ping"), got.index(b"message_start")
            self.assertLess(order[0], order[1])
            self.assertGreaterEqual(body.count(b"event: ping"), 3)
            wait_for(lambda: s.agent("second")["leases"] == 0 and s.agent("second")["tokens_out"],
                     10, "the queued call to be settled")
            self.assertGreater(s.agent("second")["tokens_in"], 0)

    def test_a_queued_plain_call_is_answered_once_granted(self):
        with Emu(EMU_SLOW) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", TIGHT,
                                       "max_queue_wait_s: 120")) as s:
            first = big_stream(s, "first")
            read_until(first, b"message_start", 10)
            status, _, payload = s.anthropic(message(max_tokens=1000), agent="second")
            first.close()
            self.assertEqual(status, 200, payload)
            self.assertGreater(s.agent("second")["tokens_out"], 0)


class Rejected(unittest.TestCase):
    def test_a_reject_is_a_429_in_the_providers_shape_with_retry_after(self):
        with Emu(EMU_SLOW) as emu, Sluiced(
                "proxy:\n  max_hold_s: 1\npools:\n" +
                pool_yaml("claude", emu.url, "anthropic", TIGHT, "max_queue_wait_s: 1") +
                pool_yaml("gpt", emu.url, "openai", TIGHT, "max_queue_wait_s: 1")) as s:
            first = big_stream(s, "first")
            read_until(first, b"message_start", 10)
            status, h, payload = s.anthropic(message(max_tokens=1000), agent="second")
            self.assertEqual(status, 429, payload)
            body = json.loads(payload)
            self.assertEqual(body["type"], "error")
            self.assertEqual(body["error"]["type"], "rate_limit_error")
            self.assertGreaterEqual(int(h["retry-after"]), 1)
            self.assertIn("retry-after-ms", h)
            # A streaming request that is rejected at once gets a plain 429 too.
            status, h, payload = s.anthropic(message(max_tokens=1000, stream=True), agent="third")
            self.assertEqual(status, 429, payload)
            first.close()
            # OpenAI's shape.
            gfirst = s.open_stream("/openai/v1/chat/completions",
                                   chat(max_tokens=1000, stream=True),
                                   {"content-type": "application/json",
                                    "authorization": "Bearer x", "x-sluice-agent": "g1"})
            read_until(gfirst, b"data:", 10)
            status, h, payload = s.openai(chat(max_tokens=1000), agent="g2")
            gfirst.close()
            self.assertEqual(status, 429, payload)
            err = json.loads(payload)["error"]
            self.assertEqual(err["code"], "rate_limit_exceeded")
            self.assertIn("retry-after", h)
            self.assertEqual(emu.stats()["http_429"], 0, "a rejected call reached the provider")


class Upstream429(unittest.TestCase):
    def test_a_providers_429_is_settled_as_got_429_and_passed_on(self):
        # The provider counts 20x what sluice's tokenizer counts (a newer model) and
        # allows 1000 input tokens a minute; sluice believes in 1000000. The first call
        # passes; sluice learns the limit from the headers, but its estimate is still 20x
        # short, so a later call runs into the provider's 429.
        emu_args = list(EMU_FAST)
        emu_args[emu_args.index("--input-tpm") + 1] = "1000"
        emu_args += ["--drift", "20"]
        with Emu(emu_args) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic",
                                       "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000")) as s:
            margin0 = s.pool("claude")["margin"]
            answers = []
            for _ in range(4):
                answers.append(s.anthropic(message("a few words of prompt " * 3), agent="hasty"))
                if answers[-1][0] == 429:
                    break
            statuses = [a[0] for a in answers]
            self.assertEqual(statuses[0], 200)
            self.assertEqual(statuses[-1], 429, statuses)
            status, h, payload = answers[-1]
            self.assertEqual(json.loads(payload)["error"]["type"], "rate_limit_error")
            self.assertGreaterEqual(int(h["retry-after"]), 1)
            a = s.agent("hasty")
            self.assertEqual(a["got_429"], 1)
            self.assertEqual(a["leases"], 0)
            self.assertLess(s.pool("claude")["margin"], margin0)
            kinds = [e["event"] for e in s.events()]
            self.assertIn("upstream_429", kinds)
            self.assertEqual(emu.stats()["http_429"], 1)

    def test_a_spend_cap_429_is_reported_as_one(self):
        with Emu(EMU_FAST + ["--spend-cap"]) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic",
                                       "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000")) as s:
            status, h, payload = s.anthropic(message(), agent="spender")
            self.assertEqual(status, 429, payload)
            self.assertNotIn("retry-after", h)
            evs = [e for e in s.events() if e["event"] == "upstream_429"]
            self.assertEqual(evs[0]["kind"], "spend_cap")


class ClientLeaves(unittest.TestCase):
    def test_a_client_leaving_mid_stream_stops_the_upstream_call_and_settles_what_was_seen(self):
        slow = [a if a != "12" else "20" for a in EMU_SLOW]
        slow[slow.index("--output-tokens") + 1] = "400"  # about 20 s
        with Emu(slow) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic",
                                       "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000")) as s:
            sock = big_stream(s, "leaver")
            read_until(sock, b"content_block_delta", 10)
            time.sleep(0.5)
            t0 = time.monotonic()
            sock.close()
            wait_for(lambda: s.agent("leaver")["leases"] == 0, 5, "the lease to be settled")
            wait_for(lambda: emu.stats()["http"]["client_gone"] >= 1, 5,
                     "the upstream call to be dropped")
            self.assertLess(time.monotonic() - t0, 5)
            settled = [e for e in s.events() if e["event"] == "settled"]
            self.assertEqual(len(settled), 1)
            self.assertGreater(settled[0]["output_tokens"], 0)
            self.assertLess(settled[0]["output_tokens"], 1000)

    def test_a_client_leaving_while_queued_gives_up_its_place(self):
        with Emu(EMU_SLOW) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic", TIGHT,
                                       "max_queue_wait_s: 120")) as s:
            first = big_stream(s, "first")
            read_until(first, b"message_start", 10)
            second = s.open_stream("/anthropic/v1/messages", message(max_tokens=1000),
                                   stream_headers("second"))
            wait_for(lambda: (s.agent("second") or {}).get("queued") == 1, 5, "queued")
            second.close()
            wait_for(lambda: s.pool("claude")["queue"]["depth"] == 0, 5, "the place to go")
            first.close()
            self.assertEqual(emu.stats()["requests"], 1)


if __name__ == "__main__":
    unittest.main()
