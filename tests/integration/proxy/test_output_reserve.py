"""test_output_reserve.py - what the proxy reserves for output equals what the provider holds.

The provider holds a call's whole max_tokens from its start (Anthropic's output-TPM
estimate, OpenAI's TPM), so: a call above what the pool can ever hold is refused here,
in the provider's own error shape, before it costs the pool a 429 (issue 25 item 8);
`output_reserve: learned` caps the forwarded max_tokens to what it reserved (issue 24
item 2); OpenAI's `n` multiplies the output held (issue 25 item 1). The emulator holds
max_tokens (x n) from each call's start, as the providers do, and judges.
"""
import json
import threading
import unittest

from harness import EMU_FAST, Emu, Sluiced, chat, message, pool_yaml


def emu_at(limits):
    """Instant answers, with the provider's real limits (given as emulator flags)."""
    args = list(EMU_FAST)
    for flag, value in limits.items():
        args[args.index(flag) + 1] = str(value)
    return Emu(args)


class NeverFitsIsRefusedLocally(unittest.TestCase):
    def test_max_tokens_128000_on_a_60000_output_tpm_pool_is_400_and_never_upstream(self):
        with emu_at({"--input-tpm": 400000, "--output-tpm": 60000, "--rpm": 4000}) as emu, \
                Sluiced("pools:\n" + pool_yaml("claude", emu.url, "anthropic",
                                               "input_tpm: 400000\noutput_tpm: 60000\n"
                                               "rpm: 4000")) as s:
            status, _, payload = s.anthropic(message(max_tokens=128000), agent="big")
            self.assertEqual(status, 400, payload)
            body = json.loads(payload)
            self.assertEqual(body["type"], "error")
            self.assertEqual(body["error"]["type"], "invalid_request_error")
            msg = body["error"]["message"]
            for part in ("output_tokens", "128000", "60000"):
                self.assertIn(part, msg)
            self.assertEqual(emu.stats()["requests"], 0)  # never forwarded
            pool = s.pool("claude")
            self.assertAlmostEqual(pool["margin"], 0.85)
            # The pool is as it was: the next ordinary call is served at once.
            status, _, payload = s.anthropic(message(max_tokens=8192), agent="big")
            self.assertEqual(status, 200, payload)
            self.assertEqual(emu.stats()["http_429"], 0)
            # Not cut; the call's agreeing headers earn one step of the climb above the
            # start (a step per round trip, docs/design.md "Margin").
            self.assertAlmostEqual(s.pool("claude")["margin"], 0.86)

    def test_a_combined_openai_bucket_refuses_input_plus_max_tokens_above_it(self):
        with emu_at({"--input-tpm": 0, "--output-tpm": 0, "--rpm": 500}) as emu, \
                Sluiced("pools:\n" + pool_yaml("gpt", emu.url, "openai",
                                               "tokens_tpm: 30000\nrpm: 500")) as s:
            status, _, payload = s.openai(chat(max_tokens=30000), agent="big")  # + input > 30000
            self.assertEqual(status, 400, payload)
            err = json.loads(payload)["error"]
            self.assertEqual(err["type"], "invalid_request_error")
            self.assertIn("tokens", err["message"])
            self.assertIn("30000", err["message"])
            self.assertEqual(emu.stats()["requests"], 0)
            self.assertAlmostEqual(s.pool("gpt")["margin"], 0.85)


def parallel(fn, count):
    """Runs fn(i) for i in range(count) at once; returns the results in order."""
    results = [None] * count

    def run(i):
        results[i] = fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


class LearnedCapsTheForwardedMaxTokens(unittest.TestCase):
    # Answers of 24 tokens taking 1.5 s, a provider holding 40,000 output tokens a minute:
    # 12 calls in flight at max_tokens 8,192 would ask it to hold 98,304.
    EMU = {"--input-tpm": 4000000, "--output-tpm": 40000, "--rpm": 40000, "--tokens-per-s": 16}
    POOL = "input_tpm: 4000000\noutput_tpm: 40000\nrpm: 40000\noutput_reserve: learned"

    def test_learned_reservations_are_what_the_provider_is_asked_to_hold(self):
        with emu_at(self.EMU) as emu, \
                Sluiced("pools:\n" + pool_yaml("claude", emu.url, "anthropic", self.POOL)) as s:
            # 20 answers teach the percentile (each reserves max_tokens until then).
            warm = parallel(lambda i: s.anthropic(message(max_tokens=8192), agent="w%d" % i), 20)
            self.assertEqual([w[0] for w in warm], [200] * 20, [w[2][:200] for w in warm])
            calls = parallel(lambda i: s.anthropic(message(max_tokens=8192), agent="a%d" % i), 12)
            self.assertEqual([c[0] for c in calls], [200] * 12, [c[2][:200] for c in calls])
            for status, headers, payload in calls:
                cap = int(headers["x-sluice-output-cap"])
                self.assertLess(cap, 8192)
                self.assertLessEqual(json.loads(payload)["usage"]["output_tokens"], cap)
            self.assertEqual(emu.stats()["http_429"], 0)
            # Never cut (the headers, compared with the pool at each call's grant, may let
            # the margin climb above its start: design.md "When a header is compared").
            self.assertGreaterEqual(s.pool("claude")["margin"], 0.85 - 1e-9)
            # The lease API cannot cap the client's call: it reserves the client's figure
            # unless the client says it sends charged.output_tokens as its max_tokens.
            lease = {"agent": "lessee", "pool": "claude", "input_tokens": 10,
                     "output_tokens": 8192, "model": "claude-emu-1"}
            status, _, payload = s.request("POST", "/v1/leases", lease)
            self.assertEqual(status, 200, payload)
            self.assertEqual(json.loads(payload)["charged"]["output_tokens"], 8192)
            status, _, payload = s.request("POST", "/v1/leases", dict(lease, cap_output=True))
            self.assertEqual(status, 200, payload)
            self.assertLess(json.loads(payload)["charged"]["output_tokens"], 8192)
            status, _, payload = s.request("POST", "/v1/leases", dict(lease, cap_output="yes"))
            self.assertEqual(status, 400, payload)
            self.assertIn("cap_output", json.loads(payload)["error"]["message"])


class LearnedCapsOnTheResponsesApi(unittest.TestCase):
    """The Responses API refuses a max_output_tokens below 16: a learned percentile below it
    must not turn a valid call into the provider's 400."""
    EMU = {"--input-tpm": 4000000, "--output-tpm": 400000, "--rpm": 40000,
           "--output-tokens": 6}
    POOL = "input_tpm: 4000000\noutput_tpm: 400000\nrpm: 40000\noutput_reserve: learned"

    def post(self, s, body, agent):
        return s.request("POST", "/openai/v1/responses", body,
                         {"content-type": "application/json", "x-sluice-agent": agent,
                          "authorization": "Bearer agent-token"})

    def test_short_answers_never_cap_max_output_tokens_below_16(self):
        body = {"model": "gpt-emu-1", "input": "Yes or no?", "max_output_tokens": 1000}
        with emu_at(self.EMU) as emu, \
                Sluiced("pools:\n" + pool_yaml("gpt", emu.url, "openai", self.POOL)) as s:
            for i in range(20):  # 20 answers of 6 tokens teach a percentile of 6
                status, _, payload = self.post(s, body, "warm")
                self.assertEqual(status, 200, payload)
            status, headers, payload = self.post(s, body, "short")
            self.assertEqual(status, 200, payload)
            self.assertEqual(json.loads(payload)["status"], "completed")
            # What is sent is what is reserved: never fewer reserved than sent.
            granted = [e for e in s.events() if e["event"] == "granted"][-1]
            self.assertGreaterEqual(granted["output_tokens"], 16, granted)
            self.assertGreaterEqual(int(headers.get("x-sluice-output-cap", 1000)), 16)
            self.assertEqual(emu.stats()["http_429"], 0)


class ChoicesMultiplyTheOutput(unittest.TestCase):
    # Answers taking about 1 s, a provider holding 40,000 output tokens a minute.
    EMU = {"--input-tpm": 4000000, "--output-tpm": 40000, "--rpm": 40000, "--tokens-per-s": 24}

    def test_eight_parallel_n8_calls_reserve_max_tokens_times_n_and_see_no_429(self):
        with emu_at(self.EMU) as emu, \
                Sluiced("pools:\n" + pool_yaml("gpt", emu.url, "openai",
                                               "input_tpm: 4000000\noutput_tpm: 40000\n"
                                               "rpm: 40000")) as s:
            calls = parallel(lambda i: s.openai(chat(max_tokens=4000, n=8), agent="n%d" % i), 8)
            self.assertEqual([c[0] for c in calls], [200] * 8, [c[2][:200] for c in calls])
            for _, _, payload in calls:
                body = json.loads(payload)
                self.assertEqual(len(body["choices"]), 8)
                self.assertEqual(body["usage"]["completion_tokens"], 8 * 24)
            self.assertEqual(emu.stats()["http_429"], 0)
            granted = [e for e in s.events() if e["event"] == "granted"]
            self.assertEqual([e["output_tokens"] for e in granted], [32000] * 8)
            settled = [e for e in s.events() if e["event"] == "settled"]
            self.assertEqual([e["output_tokens"] for e in settled], [8 * 24] * 8)

    def test_n_above_what_the_pool_holds_is_refused_and_a_bad_n_is_400_naming_it(self):
        with emu_at(self.EMU) as emu, \
                Sluiced("pools:\n" + pool_yaml("gpt", emu.url, "openai",
                                               "input_tpm: 4000000\noutput_tpm: 40000\n"
                                               "rpm: 40000")) as s:
            status, _, payload = s.openai(chat(max_tokens=4000, n=11), agent="big")
            self.assertEqual(status, 400, payload)
            self.assertIn("output_tokens 44000", json.loads(payload)["error"]["message"])
            for bad in (0, 129, "2", 1.5):
                status, _, payload = s.openai(chat(n=bad), agent="bad")
                self.assertEqual(status, 400, (bad, payload))
                err = json.loads(payload)["error"]
                self.assertEqual(err["type"], "invalid_request_error")
                self.assertIn("n must be", err["message"])
            self.assertEqual(emu.stats()["requests"], 0)


if __name__ == "__main__":
    unittest.main()
