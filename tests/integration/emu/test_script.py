"""Scripted conversations (--script): an agent loop that runs the scripted tool calls (read a file,
run a command) and sends the results back gets the same turns, in the same order, with the output
tokens the script gives, on the Anthropic Messages, Chat Completions and Responses APIs, plain and
streamed."""
import json
import os
import subprocess
import tempfile
import unittest

from harness import Emu, FAST, SLUICE_EMU, estimate, parse_sse

MAX_STEPS = 6  # every loop is bounded


def script(path_to_read):
    return {"turns": [
        {"tool_calls": [{"name": "read_file", "input": {"path": path_to_read}}],
         "output_tokens": 80},
        {"text": "Now I run the tests.",
         "tool_calls": [{"name": "run_command", "input": {"command": "echo tests-ok"}}]},
        {"text": "All done: the tests pass.", "output_tokens": 40},
    ]}


def run_tool(name, args):
    """What the harness does with a call: really reads the file, really runs the command."""
    if name == "read_file":
        with open(args["path"]) as f:
            return f.read()
    if name == "run_command":
        out = subprocess.run(args["command"], shell=True, capture_output=True, text=True,
                             timeout=10)
        return out.stdout
    raise AssertionError("unexpected tool %s" % name)


# ---- one adapter per API: send the conversation, parse the answer (text, calls, output tokens) ---

def anthropic_turn(emu, history, stream):
    body = {"model": "claude-emu-1", "max_tokens": 1000, "messages": history, "stream": stream,
            "tools": [{"name": n, "input_schema": {"type": "object"}}
                      for n in ("read_file", "run_command")]}
    status, _, payload = emu.anthropic(body)
    assert status == 200, payload
    if stream:
        blocks, usage = [], None
        for name, data in parse_sse(payload):
            d = json.loads(data)
            if name == "content_block_start":
                blocks.append(dict(d["content_block"], _json=""))
            elif name == "content_block_delta" and d["delta"]["type"] == "text_delta":
                blocks[-1]["text"] += d["delta"]["text"]
            elif name == "content_block_delta" and d["delta"]["type"] == "input_json_delta":
                blocks[-1]["_json"] += d["delta"]["partial_json"]
            elif name == "message_delta":
                usage, stop = d["usage"], d["delta"]["stop_reason"]
        for b in blocks:
            if b["type"] == "tool_use":
                b["input"] = json.loads(b["_json"])
            b.pop("_json")
    else:
        m = json.loads(payload)
        blocks, usage, stop = m["content"], m["usage"], m["stop_reason"]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    calls = [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
    assert stop == ("tool_use" if calls else "end_turn"), stop
    history.append({"role": "assistant", "content": blocks})
    if calls:
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": i, "content": run_tool(n, a)}
            for i, n, a in calls]})
    return text, [n for _, n, _ in calls], usage["output_tokens"]


def chat_turn(emu, history, stream):
    body = {"model": "gpt-emu", "messages": history, "stream": stream,
            "tools": [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                      for n in ("read_file", "run_command")]}
    if stream:
        body["stream_options"] = {"include_usage": True}
    status, _, payload = emu.openai(body)
    assert status == 200, payload
    if stream:
        text, calls, usage, finish = "", {}, None, None
        for _, data in parse_sse(payload)[:-1]:
            d = json.loads(data)
            if d.get("usage"):
                usage = d["usage"]
            for ch in d["choices"]:
                delta = ch["delta"]
                text += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    c = calls.setdefault(tc["index"], {"id": tc.get("id"), "name": "", "args": ""})
                    c["name"] += tc.get("function", {}).get("name") or ""
                    c["args"] += tc.get("function", {}).get("arguments") or ""
                finish = ch["finish_reason"] or finish
        calls = [(c["id"], c["name"], c["args"]) for _, c in sorted(calls.items())]
    else:
        c = json.loads(payload)
        msg, usage, finish = c["choices"][0]["message"], c["usage"], c["choices"][0]["finish_reason"]
        text = msg["content"] or ""
        calls = [(t["id"], t["function"]["name"], t["function"]["arguments"])
                 for t in msg.get("tool_calls") or []]
    assert finish == ("tool_calls" if calls else "stop"), finish
    history.append({"role": "assistant", "content": text or None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
        for i, n, a in calls]} if calls else {"role": "assistant", "content": text})
    for i, n, a in calls:
        history.append({"role": "tool", "tool_call_id": i, "content": run_tool(n, json.loads(a))})
    return text, [n for _, n, _ in calls], usage["completion_tokens"]


def responses_turn(emu, history, stream):
    body = {"model": "gpt-emu", "input": history, "stream": stream,
            "tools": [{"type": "function", "name": n, "parameters": {"type": "object"}}
                      for n in ("read_file", "run_command")]}
    status, _, payload = emu.responses(body)
    assert status == 200, payload
    if stream:
        r = json.loads(parse_sse(payload)[-1][1])["response"]
    else:
        r = json.loads(payload)
    assert r["status"] == "completed", r["status"]
    text = "".join(p["text"] for o in r["output"] if o["type"] == "message" for p in o["content"])
    calls = [o for o in r["output"] if o["type"] == "function_call"]
    history.extend(r["output"])
    for c in calls:
        history.append({"type": "function_call_output", "call_id": c["call_id"],
                        "output": run_tool(c["name"], json.loads(c["arguments"]))})
    return text, [c["name"] for c in calls], r["usage"]["output_tokens"]


def first_message(api):
    if api is responses_turn:
        return [{"role": "user", "content": [{"type": "input_text", "text": "fix the build"}]}]
    return [{"role": "user", "content": "fix the build"}]


def drive(emu, turn_fn, stream):
    """The agent loop: until the model answers without a tool call (bounded)."""
    history, seen = first_message(turn_fn), []
    for _ in range(MAX_STEPS):
        text, calls, out = turn_fn(emu, history, stream)
        seen.append((text, calls, out))
        if not calls:
            return seen
    raise AssertionError("the loop did not end in %d steps: %r" % (MAX_STEPS, seen))


def tokens_of(text):
    est = estimate({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": text}]})
    est0 = estimate({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": ""}]})
    return est["input_tokens"] - est0["input_tokens"]


class ScriptedLoop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.readme = os.path.join(cls.dir.name, "README.md")
        with open(cls.readme, "w") as f:
            f.write("sluice owns the quota\n")
        cls.script = os.path.join(cls.dir.name, "script.json")
        with open(cls.script, "w") as f:
            json.dump(script(cls.readme), f)
        cls.emu = Emu(FAST + ["--script", cls.script])

    @classmethod
    def tearDownClass(cls):
        cls.emu.stop()
        cls.dir.cleanup()

    def check(self, seen):
        self.assertEqual([calls for _, calls, _ in seen],
                         [["read_file"], ["run_command"], []])
        self.assertEqual(seen[0][2], 80)
        self.assertEqual(seen[1][0], "Now I run the tests.")
        self.assertTrue(seen[2][0].startswith("All done: the tests pass. "), seen[2][0])
        self.assertEqual(seen[2][2], 40)
        self.assertEqual(tokens_of(seen[2][0]), 40)
        # Turn 2 costs its text and its call: name + input JSON + 1.
        self.assertEqual(seen[1][2], tokens_of("Now I run the tests.") + tokens_of("run_command") +
                         tokens_of('{"command":"echo tests-ok"}') + 1)

    def test_anthropic_messages_loop(self):
        for stream in (False, True):
            self.check(drive(self.emu, anthropic_turn, stream))

    def test_chat_completions_loop(self):
        for stream in (False, True):
            self.check(drive(self.emu, chat_turn, stream))

    def test_responses_loop(self):
        for stream in (False, True):
            self.check(drive(self.emu, responses_turn, stream))

    def test_the_first_turn_pads_with_text_before_the_call(self):
        _, _, payload = self.emu.anthropic({"model": "m", "max_tokens": 1000,
                                            "messages": first_message(anthropic_turn)})
        m = json.loads(payload)
        self.assertEqual([b["type"] for b in m["content"]], ["text", "tool_use"])
        self.assertEqual(m["content"][1]["input"], {"path": self.readme})
        self.assertEqual(m["usage"]["output_tokens"], 80)

    def test_turns_past_the_script_are_filler(self):
        history = [{"role": "user", "content": "x"}] + [
            {"role": r, "content": "y"} for r in ("assistant", "user") * 3]
        _, _, payload = self.emu.anthropic({"model": "m", "max_tokens": 1000, "messages": history})
        m = json.loads(payload)
        self.assertEqual([b["type"] for b in m["content"]], ["text"])
        self.assertEqual(m["usage"]["output_tokens"], 24)  # --output-tokens

    def test_max_tokens_cuts_a_scripted_turn(self):
        history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                   {"role": "user", "content": "z"}, {"role": "assistant", "content": "y"},
                   {"role": "user", "content": "z"}]
        _, _, payload = self.emu.anthropic({"model": "m", "max_tokens": 5, "messages": history})
        m = json.loads(payload)
        self.assertEqual((m["stop_reason"], m["usage"]["output_tokens"]), ("max_tokens", 5))
        self.assertTrue("All done: the tests pass.".startswith(m["content"][0]["text"]))


class TwoCallTurn(unittest.TestCase):
    """A turn of two calls is one turn on every API: the next request gets turns[1]."""

    def test_two_calls_then_text_on_each_api(self):
        with tempfile.TemporaryDirectory() as d:
            readme = os.path.join(d, "README.md")
            with open(readme, "w") as f:
                f.write("x\n")
            path = os.path.join(d, "s.json")
            with open(path, "w") as f:
                json.dump({"turns": [
                    {"tool_calls": [{"name": "read_file", "input": {"path": readme}},
                                    {"name": "run_command", "input": {"command": "echo a"}}]},
                    {"text": "finished"}]}, f)
            with Emu(FAST + ["--script", path]) as emu:
                for turn_fn in (anthropic_turn, chat_turn, responses_turn):
                    for stream in (False, True):
                        seen = drive(emu, turn_fn, stream)
                        self.assertEqual([c for _, c, _ in seen],
                                         [["read_file", "run_command"], []], turn_fn.__name__)
                        self.assertEqual(seen[1][0], "finished")


class ScriptFile(unittest.TestCase):
    def run_emu(self, content):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write(content)
        try:
            out = subprocess.run([SLUICE_EMU, "--listen", "127.0.0.1:0", *FAST, "--script", f.name],
                                 capture_output=True, text=True, timeout=20)
        finally:
            os.unlink(f.name)
        return out.returncode, out.stderr

    def test_bad_scripts_are_refused_naming_the_field(self):
        cases = [("{", "script"),
                 ('{"turns": []}', "turns"),
                 ('{"turns": [{"txt": "x"}]}', "turns[0].txt"),
                 ('{"turns": [{"text": 3}]}', "turns[0].text"),
                 ('{"turns": [{"output_tokens": 0}]}', "turns[0].output_tokens"),
                 ('{"turns": [{"tool_calls": [{"input": {}}]}]}', "turns[0].tool_calls[0]"),
                 ('{"turns": [{"tool_calls": [{"name": "a", "input": 1}]}]}',
                  "turns[0].tool_calls[0]"),
                 ('{"turns": [{"text": "a"}], "after_last": "loop"}', "after_last"),
                 ('{"turns": [{"text": "a"}], "extra": 1}', "extra")]
        for content, field in cases:
            rc, err = self.run_emu(content)
            self.assertEqual(rc, 2, content)
            self.assertIn("--script", err)
            self.assertIn(field, err, content)

    def test_after_last_repeat_cycles_the_turns(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.json")
            with open(path, "w") as f:
                json.dump({"turns": [{"text": "one"}, {"text": "two"}], "after_last": "repeat"}, f)
            with Emu(FAST + ["--script", path]) as emu:
                texts = []
                history = [{"role": "user", "content": "go"}]
                for _ in range(4):
                    _, _, payload = emu.anthropic({"model": "m", "max_tokens": 100,
                                                   "messages": history})
                    texts.append(json.loads(payload)["content"][0]["text"])
                    history += [{"role": "assistant", "content": texts[-1]},
                                {"role": "user", "content": "more"}]
                self.assertEqual(texts, ["one", "two", "one", "two"])


if __name__ == "__main__":
    unittest.main()
