"""test_continue.py - proxy.continue_capped: an answer cut at the learned cap is continued, and the client sees one answer.

The emulator plays a script: the first turn is a long answer ("Alpha ..." of 300
tokens), the turn after an assistant message is "omega." So a call capped at the learned
percentile (80) is cut, continued with its partial answer as the assistant prefill, and
finished by the next part; the client gets one message whose text is the cut text
followed by "omega.", stop_reason end_turn and the output of both parts.
"""
import json
import os
import tempfile
import threading
import unittest

from harness import EMU_FAST, Emu, Sluiced, message, parse_sse, pool_yaml

POOL = "input_tpm: 4000000\noutput_tpm: 400000\nrpm: 40000\noutput_reserve: learned"
SCRIPT = {"turns": [{"text": "Alpha", "output_tokens": 300}, {"text": "omega."}],
          "after_last": "repeat"}


class ScriptedProxy(unittest.TestCase):
    """An emulator playing the class's `script` and a sluiced continuing capped answers."""
    script = SCRIPT

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="sluice-continue-")
        path = os.path.join(cls.dir.name, "script.json")
        with open(path, "w") as f:
            json.dump(cls.script, f)
        cls.emu = Emu(EMU_FAST + ["--script", path])
        cls.s = Sluiced("proxy:\n  continue_capped: true\npools:\n" +
                        pool_yaml("claude", cls.emu.url, "anthropic", POOL))
        # 20 answers cut at the client's own max_tokens 40 teach a percentile of 80
        # (an answer stopped at its reservation is recorded as twice it).
        for i in range(20):
            status, _, payload = cls.s.anthropic(message(max_tokens=40), agent="warm")
            assert status == 200, payload

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()
        cls.emu.stop()
        cls.dir.cleanup()


class CappedAndContinued(ScriptedProxy):
    def settled_since(self, n):
        return [e for e in self.s.events() if e["event"] == "settled"][n:]

    def test_a_cut_answer_is_continued_into_one_message(self):
        before = len(self.settled_since(0))
        requests = self.emu.stats()["requests"]
        status, _, payload = self.s.anthropic(message(max_tokens=4000), agent="c")
        self.assertEqual(status, 200, payload)
        m = json.loads(payload)
        self.assertEqual(m["stop_reason"], "end_turn")
        self.assertEqual([b["type"] for b in m["content"]], ["text"])
        text = m["content"][0]["text"]
        self.assertTrue(text.startswith("Alpha"), text[:40])
        self.assertTrue(text.endswith("omega."), text[-40:])
        parts = self.settled_since(before)
        self.assertEqual(len(parts), 2)
        self.assertEqual(parts[0]["output_tokens"], 80)  # cut at the learned cap
        self.assertEqual(m["usage"]["output_tokens"], sum(p["output_tokens"] for p in parts))
        self.assertEqual(self.emu.stats()["requests"], requests + 2)
        self.assertEqual(self.emu.stats()["http_429"], 0)

    def test_a_cut_stream_is_spliced_into_one_stream(self):
        before = len(self.settled_since(0))
        status, headers, payload = self.s.anthropic(message(max_tokens=4000, stream=True),
                                                    agent="d")
        self.assertEqual(status, 200, payload)
        events = [(n, json.loads(d)) for n, d in parse_sse(payload) if n not in (None, ":")]
        names = [n for n, _ in events]
        self.assertEqual(names.count("message_start"), 1)
        self.assertEqual(names.count("message_stop"), 1)
        self.assertEqual(names.count("content_block_start"), 1)
        self.assertEqual(names.count("content_block_stop"), 1)
        self.assertEqual(names.count("message_delta"), 1)
        self.assertEqual(names[-1], "message_stop")
        text = "".join(d["delta"].get("text", "") for n, d in events
                       if n == "content_block_delta")
        self.assertTrue(text.startswith("Alpha"), text[:40])
        self.assertTrue(text.endswith("omega."), text[-40:])
        self.assertTrue(all(d["index"] == 0 for n, d in events if n.startswith("content_block")))
        delta = [d for n, d in events if n == "message_delta"][0]
        self.assertEqual(delta["delta"]["stop_reason"], "end_turn")
        parts = self.settled_since(before)
        self.assertEqual(len(parts), 2)
        self.assertEqual(delta["usage"]["output_tokens"], sum(p["output_tokens"] for p in parts))

    def test_a_spliced_stream_ends_with_the_usage_of_the_whole_answer(self):
        # The API's message_delta carries the cumulative usage, input included, which the
        # SDKs copy over message_start's: the last part's input (prompt + prefill) must
        # not stand in for the first's, which the whole answer reports.
        status, _, payload = self.s.anthropic(message(max_tokens=4000), agent="f")
        self.assertEqual(status, 200, payload)
        whole = json.loads(payload)["usage"]
        status, _, payload = self.s.anthropic(message(max_tokens=4000, stream=True), agent="f")
        self.assertEqual(status, 200, payload)
        events = [(n, json.loads(d)) for n, d in parse_sse(payload) if n not in (None, ":")]
        start = [d for n, d in events if n == "message_start"][0]["message"]["usage"]
        final = dict(start, **[d for n, d in events if n == "message_delta"][0]["usage"])
        for field in ("input_tokens", "cache_creation_input_tokens",
                      "cache_read_input_tokens", "output_tokens"):
            self.assertEqual(final[field], whole[field], (field, final, whole))

    @unittest.skip("defect: adaptive thinking (Claude Code's default) is capped, and an "
                   "answer with a thinking block is no prefill: the client sees the cut")
    def test_an_adaptive_thinking_answer_is_never_cut_short_of_the_clients_limit(self):
        # Claude Code sends thinking {type: adaptive} with max_tokens 128000: capped at the
        # learned 80, the answer (thinking, then text) stops at max_tokens and, a thinking
        # block being no prefill, reaches the client as cut at 80 of its 4000.
        status, _, payload = self.s.anthropic(
            message(max_tokens=4000, thinking={"type": "adaptive"}), agent="g")
        self.assertEqual(status, 200, payload)
        self.assertNotEqual(json.loads(payload)["stop_reason"], "max_tokens", payload[:300])

    def test_a_call_within_the_cap_is_one_part(self):
        before = len(self.settled_since(0))
        body = message(max_tokens=4000)
        body["messages"] += [{"role": "assistant", "content": "Said."},
                             {"role": "user", "content": "Go on."}]
        status, _, payload = self.s.anthropic(body, agent="e")  # turn 1: "omega."
        self.assertEqual(status, 200, payload)
        m = json.loads(payload)
        self.assertEqual(m["content"][0]["text"], "omega.")
        self.assertEqual(m["stop_reason"], "end_turn")
        self.assertEqual(len(self.settled_since(before)), 1)


# The first turn: a short text, then a tool call whose input (~200 tokens) the cap of 80
# cuts; the turn after the prefill writes text (the model continues the text before it).
TOOL_SCRIPT = {"turns": [{"text": "Let me write it.",
                          "tool_calls": [{"name": "write_file",
                                          "input": {"path": "notes.txt",
                                                    "content": "word " * 200}}]},
                         {"text": " Done."}],
               "after_last": "repeat"}


class CutInsideAToolUse(ScriptedProxy):
    """docs/proxy.md: a cut inside a tool_use block drops the block and continues from the
    text before it; in a stream the client never sees the partial block."""
    script = TOOL_SCRIPT

    def test_a_stream_cut_in_a_tool_use_has_contiguous_block_indexes(self):
        status, _, payload = self.s.anthropic(message(max_tokens=4000, stream=True), agent="t")
        self.assertEqual(status, 200, payload)
        events = [(n, json.loads(d)) for n, d in parse_sse(payload) if n not in (None, ":")]
        started = []
        for n, d in events:
            if n == "content_block_start":
                # each new block takes the next index, as the API's own streams do (an SDK
                # accumulating by index drops the deltas of a block past a gap)
                self.assertEqual(d["index"], len(started), [e[0] for e in events])
                started.append(d["content_block"]["type"])
            elif n in ("content_block_delta", "content_block_stop"):
                self.assertLess(d["index"], len(started), (n, d))
        self.assertNotIn("tool_use", started)  # the partial block never reached the client
        text = "".join(d["delta"].get("text", "") for n, d in events
                       if n == "content_block_delta")
        self.assertTrue(text.startswith("Let me write it."), text)
        self.assertTrue(text.endswith("Done."), text)
        delta = [d for n, d in events if n == "message_delta"][-1]
        self.assertEqual(delta["delta"]["stop_reason"], "end_turn")

    def test_a_whole_answer_cut_in_a_tool_use_is_continued_from_the_text(self):
        status, _, payload = self.s.anthropic(message(max_tokens=4000), agent="u")
        self.assertEqual(status, 200, payload)
        m = json.loads(payload)
        self.assertEqual(m["stop_reason"], "end_turn")
        self.assertEqual([b["type"] for b in m["content"]], ["text"])
        self.assertEqual(m["content"][0]["text"], "Let me write it. Done.")


if __name__ == "__main__":
    unittest.main()
