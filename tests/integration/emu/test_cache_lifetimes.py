"""sluice-emu's 1-hour prompt-cache writes and long-context limits (issue 28 item 5).

Lifetimes are scaled down with --cache-ttl-s / --cache-ttl-1h-s so that "after the
5-minute entry lapsed" takes about a second of real time."""
import json
import time
import unittest

from harness import Emu, message, prose

BASE = ["--ttft-ms", "0", "--tokens-per-s", "1000000", "--latency-spread", "0",
        "--output-tokens", "10", "--input-tpm", "100000000", "--output-tpm", "100000000",
        "--rpm", "1000000"]


def block(text, ttl=None):
    cc = {"type": "ephemeral"}
    if ttl:
        cc["ttl"] = ttl
    return {"type": "text", "text": text, "cache_control": cc}


def body(system_blocks, question="What now?"):
    return {"model": "claude-emu-1", "max_tokens": 50, "system": system_blocks,
            "messages": [{"role": "user", "content": question}]}


def usage(emu, b):
    status, _, payload = emu.anthropic(b)
    assert status == 200, payload
    return json.loads(payload)["usage"]


class OneHourWrites(unittest.TestCase):
    def test_a_1h_write_is_billed_as_a_1h_write(self):
        with Emu(BASE) as emu:
            u = usage(emu, body([block(prose(1500), "1h")]))
            self.assertGreater(u["cache_creation_input_tokens"], 1024)
            self.assertEqual(u["cache_creation"]["ephemeral_1h_input_tokens"],
                             u["cache_creation_input_tokens"])
            self.assertEqual(u["cache_creation"]["ephemeral_5m_input_tokens"], 0)
            st = emu.stats()
            self.assertEqual(st["cache_creation_1h_input_tokens"],
                             u["cache_creation_input_tokens"])

    def test_a_5m_write_is_billed_as_a_5m_write(self):
        with Emu(BASE) as emu:
            for ttl in (None, "5m"):
                u = usage(emu, body([block(prose(1500, seed=len(str(ttl))), ttl)]))
                self.assertGreater(u["cache_creation_input_tokens"], 1024)
                self.assertEqual(u["cache_creation"]["ephemeral_5m_input_tokens"],
                                 u["cache_creation_input_tokens"])
                self.assertEqual(u["cache_creation"]["ephemeral_1h_input_tokens"], 0)

    def test_a_1h_entry_outlives_the_5m_lifetime(self):
        # 5-minute entries live 1 s here, 1-hour entries 60 s.
        with Emu(BASE + ["--cache-ttl-s", "1", "--cache-ttl-1h-s", "60"]) as emu:
            long_b = body([block(prose(1500, seed=1), "1h")])
            short_b = body([block(prose(1500, seed=2))])
            w1, w5 = usage(emu, long_b), usage(emu, short_b)
            self.assertGreater(w1["cache_creation_input_tokens"], 0)
            self.assertGreater(w5["cache_creation_input_tokens"], 0)
            time.sleep(1.3)
            r1, r5 = usage(emu, long_b), usage(emu, short_b)
            self.assertEqual(r1["cache_read_input_tokens"], w1["cache_creation_input_tokens"])
            self.assertEqual(r1["cache_creation_input_tokens"], 0)
            self.assertEqual(r5["cache_read_input_tokens"], 0)  # lapsed: written again
            self.assertEqual(r5["cache_creation_input_tokens"], w5["cache_creation_input_tokens"])

    def test_mixed_ttls_bill_1h_up_to_the_last_1h_breakpoint(self):
        with Emu(BASE + ["--cache-breakpoints", "2"]) as emu:
            first = block(prose(1500, seed=3), "1h")
            only_first = usage(emu, body([dict(first, text=first["text"] + " ")]))
            whole = usage(emu, body([first, block(prose(1500, seed=4), "5m")]))
            one_h = whole["cache_creation"]["ephemeral_1h_input_tokens"]
            five_m = whole["cache_creation"]["ephemeral_5m_input_tokens"]
            self.assertEqual(one_h + five_m, whole["cache_creation_input_tokens"])
            self.assertGreater(one_h, 1024)
            self.assertGreater(five_m, 1024)
            # the 1-hour part is about the first block alone
            self.assertLess(abs(one_h - only_first["cache_creation_input_tokens"]), 20)

    def test_a_1h_breakpoint_after_a_5m_one_is_refused(self):
        with Emu(BASE) as emu:
            b = body([block(prose(1500, seed=5), "5m"), block(prose(1500, seed=6), "1h")])
            status, _, payload = emu.anthropic(b)
            self.assertEqual(status, 400, payload)
            err = json.loads(payload)["error"]
            self.assertEqual(err["type"], "invalid_request_error")
            self.assertIn("longer TTLs must come before shorter ones", err["message"])
            self.assertEqual(emu.stats()["admitted"], 0)

    def test_an_unknown_ttl_is_refused_naming_the_field(self):
        with Emu(BASE) as emu:
            status, _, payload = emu.anthropic(body([block(prose(1500), "2h")]))
            self.assertEqual(status, 400, payload)
            self.assertIn("cache_control.ttl", json.loads(payload)["error"]["message"])


class LongContext(unittest.TestCase):
    def test_long_prompts_draw_from_their_own_buckets(self):
        # Prompts above 2000 tokens are "long context": 6000 input tokens a minute for
        # them, while the standard input limit is practically unlimited.
        flags = BASE + ["--long-context-threshold", "2000", "--long-context-input-tpm", "6000",
                        "--long-context-output-tpm", "100000"]
        with Emu(flags) as emu:
            big = message(prose(3500), max_tokens=20)
            status, _, payload = emu.anthropic(big)
            self.assertEqual(status, 200, payload)
            status, headers, payload = emu.anthropic(big)
            self.assertEqual(status, 429, payload)
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            err = json.loads(payload)["error"]
            self.assertEqual(err["type"], "rate_limit_error")
            self.assertIn("long context input tokens per minute", err["message"])
            # a short prompt still passes: the standard buckets are untouched
            status, _, payload = emu.anthropic(message(prose(500), max_tokens=20))
            self.assertEqual(status, 200, payload)
            st = emu.stats()
            self.assertEqual(st["long_context"], 1)
            self.assertEqual(st["http_429_rate"], 1)

    def test_without_the_threshold_the_same_prompts_pass(self):
        flags = BASE + ["--long-context-input-tpm", "6000"]
        with Emu(flags) as emu:
            big = message(prose(3500), max_tokens=20)
            for _ in range(3):
                status, _, payload = emu.anthropic(big)
                self.assertEqual(status, 200, payload)
            self.assertEqual(emu.stats()["long_context"], 0)


if __name__ == "__main__":
    unittest.main()
