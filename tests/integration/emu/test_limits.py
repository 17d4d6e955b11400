"""sluice-emu's limits: 429s and recovery, rate-limit headers, the prompt cache, spend cap, /stats."""
import datetime
import json
import time
import unittest

from harness import KEY, Emu, message, prose

BASE = ["--ttft-ms", "0", "--tokens-per-s", "1000000", "--latency-spread", "0",
        "--output-tokens", "10"]


def limits(input_tpm=100000000, output_tpm=100000000, rpm=1000000, extra=()):
    return ["--input-tpm", str(input_tpm), "--output-tpm", str(output_tpm), "--rpm", str(rpm),
            *BASE, *extra]


def rfc3339(s):
    assert s.endswith("Z"), s
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def cached_body(prefix_text, question):
    return {"model": "claude-emu-1", "max_tokens": 50,
            "system": [{"type": "text", "text": prefix_text,
                        "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": question}]}


class RateLimits(unittest.TestCase):
    def test_rpm_exhausted_gives_429_with_retry_after_then_recovers(self):
        # 120 requests per minute: a bucket of 120, refilled at 2 per second.
        with Emu(limits(rpm=120)) as emu:
            statuses = []
            # Bounded: the bucket holds 120 and refills 2 per second, so even a slow,
            # loaded machine (10 ms a request) runs dry well before 400.
            for _ in range(400):
                status, headers, payload = emu.anthropic(message(max_tokens=20))
                statuses.append(status)
                if status == 429:
                    break
            self.assertEqual(statuses[-1], 429, "no 429 after %d requests" % len(statuses))
            self.assertGreaterEqual(len(statuses), 110)  # refill during the loop is small
            err = json.loads(payload)
            self.assertEqual(err["type"], "error")
            self.assertEqual(err["error"]["type"], "rate_limit_error")
            retry = int(headers["retry-after"])
            self.assertEqual(retry, 1)
            self.assertEqual(headers["anthropic-ratelimit-requests-remaining"], "0")
            time.sleep(retry + 0.1)
            status, _, payload = emu.anthropic(message(max_tokens=20))
            self.assertEqual(status, 200, payload)
            st = emu.stats()
            self.assertEqual(st["http_429"], 1)
            self.assertEqual(st["http_429_rate"], 1)
            self.assertEqual(st["admitted"], len(statuses))

    def test_input_tpm_429_says_when_the_request_fits(self):
        # 6000 input tokens per minute: refilled at 100 per second.
        with Emu(limits(input_tpm=6000)) as emu:
            body = message(prose(4000))
            _, _, payload = emu.anthropic(body, path="/v1/messages/count_tokens")
            need = json.loads(payload)["input_tokens"]
            self.assertGreater(need, 3500)
            self.assertLess(need, 6000)
            status, headers, payload = emu.anthropic(body)
            self.assertEqual(status, 200, payload)
            t0 = time.time()
            status, headers, payload = emu.anthropic(body)
            self.assertEqual(status, 429, payload)
            left = 6000 - need
            expect = (need - left) / 100.0
            retry = int(headers["retry-after"])
            self.assertGreaterEqual(retry, int(expect) - 1)
            self.assertLessEqual(retry, int(expect) + 2)
            self.assertIn("input tokens", json.loads(payload)["error"]["message"])
            self.assertLess(time.time() - t0, 5)

    def test_openai_429_has_its_error_body_and_headers(self):
        with Emu(limits(rpm=60)) as emu:
            for _ in range(300):  # bounded; refill is 1 per second, so a slow machine still runs dry
                status, headers, payload = emu.openai(
                    {"model": "gpt-emu", "max_tokens": 5,
                     "messages": [{"role": "user", "content": "hi"}]})
                if status == 429:
                    break
            self.assertEqual(status, 429)
            err = json.loads(payload)["error"]
            self.assertEqual(err["code"], "rate_limit_exceeded")
            self.assertEqual(err["type"], "requests")
            self.assertIn("param", err)
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            for name in ("limit-requests", "remaining-requests", "reset-requests",
                         "limit-tokens", "remaining-tokens", "reset-tokens"):
                self.assertIn("x-ratelimit-" + name, headers)
            self.assertEqual(headers["x-ratelimit-limit-requests"], "60")
            self.assertEqual(headers["x-ratelimit-remaining-requests"], "0")
            self.assertRegex(headers["x-ratelimit-reset-requests"], r"^(\d+m)?\d+(\.\d+)?m?s$")


class Headers(unittest.TestCase):
    def test_anthropic_headers_round_token_counts_to_thousands(self):
        with Emu(limits(input_tpm=100000, output_tpm=50000, rpm=500)) as emu:
            body = message(prose(1200), max_tokens=3000)
            _, _, payload = emu.anthropic(body, path="/v1/messages/count_tokens")
            need = json.loads(payload)["input_tokens"]
            now = time.time()
            status, h, payload = emu.anthropic(body)
            self.assertEqual(status, 200, payload)
            for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
                for field in ("limit", "remaining", "reset"):
                    self.assertIn("anthropic-ratelimit-%s-%s" % (kind, field), h)
            self.assertEqual(h["anthropic-ratelimit-input-tokens-limit"], "100000")
            self.assertEqual(h["anthropic-ratelimit-output-tokens-limit"], "50000")
            self.assertEqual(h["anthropic-ratelimit-requests-limit"], "500")
            self.assertEqual(h["anthropic-ratelimit-requests-remaining"], "499")
            # Exact level right after the call: 100000 - need (+ refill, under 1 token/ms).
            self.assertEqual(int(h["anthropic-ratelimit-input-tokens-remaining"]),
                             int((100000 - need) / 1000.0 + 0.5) * 1000)
            self.assertEqual(int(h["anthropic-ratelimit-output-tokens-remaining"]) % 1000, 0)
            # The tokens-* trio repeats the most restrictive limit: output, 6% used, against
            # input, ~1.2% used.
            self.assertEqual(h["anthropic-ratelimit-tokens-limit"], "50000")
            for kind in ("requests", "input-tokens", "output-tokens"):
                reset = rfc3339(h["anthropic-ratelimit-%s-reset" % kind])
                self.assertGreaterEqual(reset, now - 1)
                self.assertLessEqual(reset, now + 61)
            self.assertNotIn("retry-after", h)

    def test_every_answer_carries_the_headers(self):
        with Emu(limits(input_tpm=100000, rpm=500)) as emu:
            answers = [emu.anthropic(message(), key="wrong"),
                       emu.anthropic(message(), path="/v1/messages/count_tokens"),
                       emu.anthropic({"model": "m"}),
                       emu.anthropic(message(stream=True))]
            for status, h, _ in answers:
                self.assertIn("anthropic-ratelimit-requests-remaining", h, status)
                self.assertIn("anthropic-ratelimit-input-tokens-reset", h, status)
            status, h, _ = emu.openai({"model": "gpt-emu",
                                       "messages": [{"role": "user", "content": "x"}]})
            self.assertIn("x-ratelimit-remaining-tokens", h)


class PromptCache(unittest.TestCase):
    def test_second_call_reads_the_cache_and_is_not_charged_input(self):
        # 8000 input tokens per minute; the prefix is ~5000 tokens: charged twice it would
        # not fit, read from the cache it costs nothing.
        with Emu(limits(input_tpm=8000)) as emu:
            prefix = prose(4400, seed=3)
            body = cached_body(prefix, "What is the level at gate 3?")
            status, _, payload = emu.anthropic(body)
            self.assertEqual(status, 200, payload)
            u1 = json.loads(payload)["usage"]
            self.assertGreater(u1["cache_creation_input_tokens"], 4100)
            self.assertEqual(u1["cache_read_input_tokens"], 0)
            self.assertLess(u1["input_tokens"], 30)
            self.assertEqual(u1["cache_creation"]["ephemeral_5m_input_tokens"],
                             u1["cache_creation_input_tokens"])
            level1 = emu.stats()["levels"]["input_tokens"]

            body["messages"][0]["content"] = "And at gate 4?"
            status, h, payload = emu.anthropic(body)
            self.assertEqual(status, 200, payload)
            u2 = json.loads(payload)["usage"]
            self.assertEqual(u2["cache_read_input_tokens"], u1["cache_creation_input_tokens"])
            self.assertEqual(u2["cache_creation_input_tokens"], 0)
            level2 = emu.stats()["levels"]["input_tokens"]
            # Only the uncached input was taken (the refill can only add).
            self.assertGreaterEqual(level2, level1 - u2["input_tokens"] - 0.001)
            st = emu.stats()
            self.assertEqual(st["tokens"]["cache_read_input"], u2["cache_read_input_tokens"])
            self.assertEqual(st["tokens"]["cache_creation_input"],
                             u1["cache_creation_input_tokens"])

            # A different prefix misses and, at ~5000 tokens, no longer fits.
            other = cached_body(prose(4400, seed=4), "What is the level at gate 3?")
            status, _, payload = emu.anthropic(other)
            self.assertEqual(status, 429, payload)

    def test_stream_reports_cache_fields_in_message_start(self):
        with Emu(limits(extra=["--cache-min-tokens", "0"])) as emu:
            body = cached_body("A short cached system prompt.", "hello")
            emu.anthropic(body)
            body["stream"] = True
            from harness import parse_sse
            status, _, payload = emu.anthropic(body)
            usage = json.loads(parse_sse(payload)[0][1])["message"]["usage"]
            self.assertGreater(usage["cache_read_input_tokens"], 0)
            self.assertEqual(usage["cache_creation_input_tokens"], 0)

    def test_entry_lapses_after_the_ttl(self):
        # A 4 s life and steps about a second away from each edge, so a loaded machine's
        # delays cannot move a call across one (a 1 s life failed under CI load).
        with Emu(limits(extra=["--cache-min-tokens", "0", "--cache-ttl-s", "4"])) as emu:
            body = cached_body("Cached for four seconds only.", "hello")
            u = [json.loads(emu.anthropic(body)[2])["usage"]]
            time.sleep(2.0)
            u.append(json.loads(emu.anthropic(body)[2])["usage"])  # hit: refreshed to t+6
            time.sleep(2.8)
            u.append(json.loads(emu.anthropic(body)[2])["usage"])  # at t+4.8: hit thanks to refresh
            time.sleep(5.2)
            u.append(json.loads(emu.anthropic(body)[2])["usage"])  # at t+10 > t+8.8: lapsed
            self.assertGreater(u[0]["cache_creation_input_tokens"], 0)
            self.assertGreater(u[1]["cache_read_input_tokens"], 0)
            self.assertGreater(u[2]["cache_read_input_tokens"], 0)
            self.assertEqual(u[3]["cache_read_input_tokens"], 0)
            self.assertGreater(u[3]["cache_creation_input_tokens"], 0)

    def test_short_prefix_is_not_cached(self):
        with Emu(limits()) as emu:  # cache_min_tokens 1024 by default
            body = cached_body("Too short to cache.", "hello")
            for _ in range(2):
                u = json.loads(emu.anthropic(body)[2])["usage"]
                self.assertEqual(u["cache_read_input_tokens"], 0)
                self.assertEqual(u["cache_creation_input_tokens"], 0)


class SpendCap(unittest.TestCase):
    def test_spend_cap_refuses_without_retry_after(self):
        with Emu(limits(extra=["--spend-cap"])) as emu:
            status, h, payload = emu.anthropic(message())
            self.assertEqual(status, 429, payload)
            self.assertNotIn("retry-after", h)
            err = json.loads(payload)
            self.assertEqual(err["type"], "error")
            self.assertIn("spend", err["error"]["message"].lower())
            status, h, payload = emu.openai({"model": "gpt-emu",
                                             "messages": [{"role": "user", "content": "x"}]})
            self.assertEqual(status, 429, payload)
            self.assertNotIn("retry-after", h)
            self.assertEqual(json.loads(payload)["error"]["code"], "insufficient_quota")
            st = emu.stats()
            self.assertEqual(st["http_429_spend_cap"], 2)
            self.assertTrue(st["spend_capped"])

            status, _, payload = emu.request("POST", "/emu/spend-cap", {"capped": False})
            self.assertEqual(status, 200, payload)
            self.assertEqual(emu.anthropic(message())[0], 200)

    def test_spend_cap_tokens_stops_after_the_budget(self):
        with Emu(limits(extra=["--spend-cap-tokens", "50"])) as emu:
            statuses = [emu.anthropic(message(max_tokens=20))[0] for _ in range(5)]
            # Each call bills ~10 input + 10 output tokens: the third passes 50.
            self.assertEqual(statuses[:3], [200, 200, 200])
            self.assertEqual(statuses[3:], [429, 429])


class Stats(unittest.TestCase):
    def test_stats_count_requests_refusals_and_tokens(self):
        with Emu(limits(rpm=3)) as emu:
            usages = []
            for _ in range(3):
                usages.append(json.loads(emu.anthropic(message())[2])["usage"])
            self.assertEqual(emu.anthropic(message())[0], 429)
            self.assertEqual(emu.anthropic(message(), key="bad")[0], 401)
            st = emu.stats()
            self.assertEqual(st["requests"], 4)
            self.assertEqual(st["admitted"], 3)
            self.assertEqual(st["http_429"], 1)
            self.assertEqual(st["tokens"]["input"], sum(u["input_tokens"] for u in usages))
            self.assertEqual(st["tokens"]["output"], sum(u["output_tokens"] for u in usages))
            self.assertEqual(st["http"]["status_401"], 1)
            self.assertEqual(st["http"]["status_429"], 1)
            self.assertEqual(st["http"]["messages"], 4)
            self.assertEqual(st["limits"]["rpm"], 3)
            self.assertEqual(st["http"]["active"], 0)

    def test_stats_count_bad_requests_and_unknown_paths_under_their_reason(self):
        with Emu(limits()) as emu:
            headers = {"content-type": "application/json", "x-api-key": KEY,
                       "anthropic-version": "2023-06-01"}
            conn = emu.connection()
            conn.request("POST", "/v1/messages", body="{not json", headers=headers)
            r = conn.getresponse()
            r.read()
            conn.close()
            self.assertEqual((r.status, r.reason), (400, "Bad Request"))
            conn = emu.connection()
            conn.request("GET", "/v1/nothing-here")
            r = conn.getresponse()
            r.read()
            conn.close()
            self.assertEqual((r.status, r.reason), (404, "Not Found"))
            st = emu.stats()
            self.assertEqual((st["http"]["status_400"], st["http"]["status_404"]), (1, 1))
            self.assertEqual(st["http"]["status_429"], 0)


class OutsideTraffic(unittest.TestCase):
    def test_outside_share_takes_part_of_the_refill(self):
        # 600 rpm refills 10 requests a second; outside traffic (Poisson arrivals, seeded)
        # uses half of that: after draining the bucket, 3 s of idling leave ~15, not 30.
        with Emu(limits(rpm=600, extra=["--outside-share", "0.5", "--seed", "7"])) as emu:
            for _ in range(800):
                if emu.anthropic(message(max_tokens=5))[0] == 429:
                    break
            before = emu.stats()
            time.sleep(3.0)
            after = emu.stats()
            gained = after["levels"]["requests"] - before["levels"]["requests"]
            outside = after["outside"]["requests"] - before["outside"]["requests"]
            self.assertGreater(outside, 5)
            self.assertLess(gained, 26)
            self.assertAlmostEqual(gained + outside, 30, delta=3)


if __name__ == "__main__":
    unittest.main()
