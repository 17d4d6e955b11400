"""test_estimate.py - POST /v1/estimate counts a provider request body as the proxy would: the
tokenizer's input and cached tokens (the same figures as `sluice estimate`), the output the
provider holds (the limit times `n`, 4096 when none is named), the cache prefix's hash;
errors name the field, nothing is charged (issue 29 item 1)."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import Sluiced  # noqa: E402

CONFIG = """
pools:
  default:
    input_tpm: 100000
    output_tpm: 100000
"""

SYSTEM = [{"type": "text", "text": "You review patches. " * 40,
           "cache_control": {"type": "ephemeral"}}]
ANTHROPIC = {"model": "claude-sonnet-4-5", "max_tokens": 700, "system": SYSTEM,
             "messages": [{"role": "user", "content": "Review this diff: - a\n+ b"}]}
OPENAI = {"model": "gpt-4.1", "n": 3, "max_completion_tokens": 200,
          "messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": "What is 2 + 2?"}]}
RESPONSES = {"model": "gpt-5", "instructions": "be brief", "input": "What is 2 + 2?",
             "max_output_tokens": 64}


def cli_estimate(body, api):
    out = subprocess.run([os.environ.get("SLUICE", "sluice"), "estimate", "--api", api, "-"],
                         input=json.dumps(body), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class Estimate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Sluiced(CONFIG)

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def estimate(self, body):
        return self.s.call("POST", "/v1/estimate", body)

    def test_anthropic_body_counts_as_the_tokenizer_and_names_its_prefix(self):
        status, a, _ = self.estimate({"request": ANTHROPIC})
        self.assertEqual(status, 200, a)
        want = cli_estimate(ANTHROPIC, "anthropic")
        self.assertEqual(a["api"], "anthropic")
        self.assertEqual((a["input_tokens"], a["cached_tokens"]),
                         (want["input_tokens"], want["cached_tokens"]))
        self.assertGreater(a["cached_tokens"], 100)
        self.assertEqual(a["output_tokens"], 700)
        self.assertEqual(a["model"], "claude-sonnet-4-5")
        self.assertEqual(len(a["cache_prefix_hash"]), 64)
        # the same prefix with another question: same hash; another system prompt: another
        other_q = dict(ANTHROPIC, messages=[{"role": "user", "content": "and this one?"}])
        other_sys = dict(ANTHROPIC, system=[dict(SYSTEM[0], text="You write tests.")])
        self.assertEqual(self.estimate({"request": other_q})[1]["cache_prefix_hash"],
                         a["cache_prefix_hash"])
        self.assertNotEqual(self.estimate({"request": other_sys})[1]["cache_prefix_hash"],
                            a["cache_prefix_hash"])

    def test_openai_output_is_the_limit_times_n_and_4096_when_unnamed(self):
        status, a, _ = self.estimate({"request": OPENAI})
        self.assertEqual(status, 200, a)
        self.assertEqual(a["api"], "openai")
        self.assertEqual(a["input_tokens"], cli_estimate(OPENAI, "openai")["input_tokens"])
        self.assertEqual(a["output_tokens"], 600)
        self.assertTrue(a["output_limit_named"])
        unnamed = {k: v for k, v in OPENAI.items() if k not in ("n", "max_completion_tokens")}
        status, b, _ = self.estimate({"request": unnamed, "api": "openai"})
        self.assertEqual((b["output_tokens"], b["output_limit_named"]), (4096, False))

    def test_responses_body_is_recognised_by_its_shape(self):
        status, a, _ = self.estimate({"request": RESPONSES, "model": "override"})
        self.assertEqual(status, 200, a)
        self.assertEqual(a["api"], "responses")
        self.assertEqual(a["input_tokens"], cli_estimate(RESPONSES, "responses")["input_tokens"])
        self.assertEqual((a["output_tokens"], a["model"]), (64, "override"))

    def test_a_body_larger_than_the_lease_apis_limit_is_counted(self):
        big = dict(ANTHROPIC, messages=[{"role": "user", "content": "word " * 30000}])
        status, a, _ = self.estimate({"request": big})
        self.assertEqual(status, 200, a)
        self.assertGreater(a["input_tokens"], 20000)

    def test_errors_name_the_field_and_nothing_is_charged(self):
        before = self.s.pool()
        cases = [
            ({"request": {"messages": [{"role": "user", "content": [{"type": "foo"}]}]}},
             400, "request.messages[0].content[0].type"),
            ({"request": dict(OPENAI, n=0)}, 400, "request.n"),
            ({"request": ANTHROPIC, "api": "gemini"}, 400, "api"),
            ({"request": "hello"}, 400, "request"),
            ({}, 400, "request"),
            ({"request": ANTHROPIC, "extra": 1}, 400, "extra"),
            ({"request": ANTHROPIC, "pool": "nope"}, 404, "nope"),
        ]
        for body, status, named in cases:
            got, ans, _ = self.estimate(body)
            self.assertEqual(got, status, (body, ans))
            self.assertIn(named, ans["error"]["message"])
        after = self.s.pool()
        self.assertEqual(after["leases_in_flight"], 0)
        self.assertEqual(after["buckets"], before["buckets"])


if __name__ == "__main__":
    unittest.main()
