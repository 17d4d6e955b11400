#!/usr/bin/env python3
"""recorder.py - a recording provider stub for the harness tests: logs every request a
harness makes (method, path, query, headers, body) as one JSON line each, and answers
minimally valid Anthropic Messages, OpenAI Chat Completions and OpenAI Responses API
replies (JSON, or SSE when the body says "stream": true), model lists, count_tokens and
HEAD probes. Anything else gets a 404 in OpenAI's error shape, and is logged too. With
--turns, the first model calls answer with the scripted tool calls or texts, so that a
harness runs a multi-turn loop (call a tool, send its result back, answer).

Standard library only. Listens on 127.0.0.1 only.

  python3 recorder.py --log requests.jsonl --answer "sluice-harness-ok" [--port 0] [--turns F]

prints "recorder: listening on http://127.0.0.1:PORT" on stdout once it accepts
connections; SIGTERM or SIGINT stops it (exit 0). Secrets never reach the log: the
values of authorization, x-api-key and api-key are replaced by "<redacted N chars>".
"""
import argparse
import http.server
import json
import signal
import sys
import threading
import time
import urllib.parse

SECRET_HEADERS = ("authorization", "x-api-key", "api-key")
INPUT_TOKENS = 12
OUTPUT_TOKENS = 5


class Recorder:
    """The log file and the answer text, shared by every handler thread."""

    def __init__(self, log_path, answer, turns):
        self.log = open(log_path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.answer = answer
        self.turns = list(turns)
        self.seq = 0

    def next_turn(self):
        """The next scripted turn ({"tool": NAME, "input": OBJECT} or {"text": T}), taken
        off the script, or None once it is used up."""
        with self.lock:
            return self.turns.pop(0) if self.turns else None

    def record(self, entry):
        with self.lock:
            self.seq += 1
            entry["seq"] = self.seq
            self.log.write(json.dumps(entry, sort_keys=True) + "\n")
            self.log.flush()
            return self.seq


def forced_tool(body):
    """The tool name an Anthropic or OpenAI request forces (tool_choice), or None."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") == "tool":
            return choice.get("name")
        if choice.get("type") == "function":
            fn = choice.get("function") or {}
            return fn.get("name") or choice.get("name")
    return None


def tool_input(answer):
    """The answer as a JSON object for a forced tool call: parsed when it is one."""
    try:
        value = json.loads(answer)
        if isinstance(value, dict):
            return value
    except ValueError:
        pass
    return {"answer": answer}


def requested_schema(body):
    """The JSON schema a request asks the answer to match (Anthropic output_config.format or
    output_format, OpenAI response_format, Responses text.format), or None."""
    for fmt in ((body.get("output_config") or {}).get("format"), body.get("output_format"),
                (body.get("text") or {}).get("format")):
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and "schema" in fmt:
            return fmt["schema"]
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        return (rf.get("json_schema") or {}).get("schema")
    return None


def value_for(schema, answer):
    """A value matching a plain JSON schema: every string is the answer text."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "object":
        return {k: value_for(v, answer) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return True
    return answer


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sluice-recorder"
    rec = None  # set by main()

    def log_message(self, fmt, *args):
        pass

    def _body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n > 0 else b""
        if not raw and self.headers.get("transfer-encoding", "").lower() == "chunked":
            raw = self._read_chunked()
        return raw

    def _read_chunked(self):
        out = b""
        while True:
            size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def _record(self, raw):
        url = urllib.parse.urlsplit(self.path)
        headers = {}
        for k, v in self.headers.items():
            k = k.lower()
            if k in SECRET_HEADERS:
                v = "<redacted %d chars>" % len(v)
            headers[k] = v if k not in headers else headers[k] + ", " + v
        entry = {"method": self.command, "path": url.path,
                 "query": urllib.parse.parse_qs(url.query, keep_blank_values=True),
                 "headers": headers, "body_bytes": len(raw), "t": time.time()}
        body = None
        if raw:
            try:
                body = json.loads(raw)
                entry["body"] = body
            except ValueError:
                entry["body_text"] = raw[:2000].decode("utf-8", "replace")
        self.seq = self.rec.record(entry)
        return url.path, body if isinstance(body, dict) else {}

    def _send(self, status, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_recorder_%d" % self.seq)
        self.send_header("x-request-id", "req_recorder_%d" % self.seq)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _sse(self, events):
        """Writes (event name or None, data object or string) pairs as one SSE answer and
        closes the connection: no content-length, so the end of the stream is the close."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.send_header("request-id", "req_recorder_%d" % self.seq)
        self.end_headers()
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            chunk = ("event: %s\n" % name if name else "") + "data: %s\n\n" % text
            self.wfile.write(chunk.encode())
            self.wfile.flush()
        self.close_connection = True

    def do_HEAD(self):
        self._record(b"")
        self._send(200, {})

    def do_GET(self):
        path, _ = self._record(b"")
        if path.endswith("/models"):
            if "anthropic" in path or "anthropic-version" in self.headers:
                return self._send(200, {"data": [{"type": "model", "id": "claude-sonnet-4-5",
                                                  "display_name": "Claude Sonnet 4.5",
                                                  "created_at": "2025-09-29T00:00:00Z"}],
                                        "has_more": False, "first_id": "claude-sonnet-4-5",
                                        "last_id": "claude-sonnet-4-5"})
            return self._send(200, {"object": "list", "data": [
                {"id": "gpt-4o-mini", "object": "model", "created": 0, "owned_by": "recorder"}]})
        self._not_found(path)

    def do_POST(self):
        path, body = self._record(self._body())
        if path.endswith("/messages/count_tokens"):
            return self._send(200, {"input_tokens": INPUT_TOKENS})
        for suffix, answer in (("/messages", self._anthropic), ("/chat/completions", self._chat),
                               ("/responses", self._responses)):
            if path.endswith(suffix):
                return answer(body, self._reply(body))
        self._not_found(path)

    def _reply(self, body):
        """What the model answers this call: the next scripted turn while any is left, a
        call of the tool the request forces, or the answer text (as JSON matching the
        schema when the request asks for one). Returns {"text": T} or {"tool": NAME,
        "input": OBJECT}."""
        turn = self.rec.next_turn()
        if turn is not None:
            return turn
        schema = requested_schema(body)
        text = self.rec.answer if schema is None else json.dumps(value_for(schema, self.rec.answer))
        tool = forced_tool(body)
        return {"tool": tool, "input": tool_input(text)} if tool else {"text": text}

    def _not_found(self, path):
        self._send(404, {"error": {"message": "recorder: no route for %s %s" % (self.command, path),
                                   "type": "invalid_request_error", "code": "not_found"}})

    # Anthropic Messages
    def _anthropic(self, body, reply):
        model = body.get("model", "claude-recorder")
        n = self.seq
        if "tool" in reply:
            block = {"type": "tool_use", "id": "toolu_recorder_%d" % n, "name": reply["tool"],
                     "input": reply["input"]}
            start = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(reply["input"])}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": reply["text"]}
            start = dict(block, text="")
            delta = {"type": "text_delta", "text": reply["text"]}
            stop = "end_turn"
        usage = {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        msg_id = "msg_recorder_%d" % n
        if not body.get("stream"):
            return self._send(200, {"id": msg_id, "type": "message", "role": "assistant",
                                    "model": model, "content": [block], "stop_reason": stop,
                                    "stop_sequence": None, "usage": usage})
        self._sse([
            ("message_start", {"type": "message_start", "message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": dict(usage, output_tokens=1)}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": OUTPUT_TOKENS}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    # OpenAI Chat Completions
    def _chat(self, body, reply):
        model = body.get("model", "gpt-recorder")
        n = self.seq
        cid = "chatcmpl-recorder-%d" % n
        usage = {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
                 "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}
        if "tool" in reply:
            call = {"id": "call_recorder_%d" % n, "type": "function",
                    "function": {"name": reply["tool"], "arguments": json.dumps(reply["input"])}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            delta = {"role": "assistant", "content": None, "tool_calls": [dict(call, index=0)]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": reply["text"]}
            delta = message
            finish = "stop"
        if not body.get("stream"):
            return self._send(200, {"id": cid, "object": "chat.completion", "created": int(time.time()),
                                    "model": model, "choices": [{"index": 0, "message": message,
                                                                 "finish_reason": finish}],
                                    "usage": usage})
        base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": model}
        events = [(None, dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}])),
                  (None, dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]))]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append((None, dict(base, choices=[], usage=usage)))
        events.append((None, "[DONE]"))
        self._sse(events)

    # OpenAI Responses API
    def _responses(self, body, reply):
        model = body.get("model", "gpt-recorder")
        n = self.seq
        rid = "resp_recorder_%d" % n
        if "tool" in reply:
            args = json.dumps(reply["input"])
            item = {"id": "fc_recorder_%d" % n, "type": "function_call", "status": "completed",
                    "call_id": "call_recorder_%d" % n, "name": reply["tool"], "arguments": args}
        else:
            item = {"id": "msg_recorder_%d" % n, "type": "message", "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply["text"], "annotations": []}]}
        usage = {"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}
        done = {"id": rid, "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": model, "output": [item], "usage": usage,
                "error": None, "incomplete_details": None, "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": []}
        if not body.get("stream"):
            return self._send(200, done)
        pending = dict(done, status="in_progress", output=[], usage=None)
        seq = iter(range(1000))
        ev = lambda name, **kw: (name, dict(type=name, sequence_number=next(seq), **kw))
        at = {"item_id": item["id"], "output_index": 0}
        if "tool" in reply:
            middle = [
                ev("response.output_item.added", output_index=0,
                   item=dict(item, status="in_progress", arguments="")),
                ev("response.function_call_arguments.delta", delta=args, **at),
                ev("response.function_call_arguments.done", arguments=args, **at),
            ]
        else:
            text = reply["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            middle = [
                ev("response.output_item.added", output_index=0,
                   item=dict(item, status="in_progress", content=[])),
                ev("response.content_part.added", content_index=0, part=part, **at),
                ev("response.output_text.delta", content_index=0, delta=text, **at),
                ev("response.output_text.done", content_index=0, text=text, **at),
                ev("response.content_part.done", content_index=0, part=item["content"][0], **at),
            ]
        self._sse([ev("response.created", response=pending),
                   ev("response.in_progress", response=pending)] + middle +
                  [ev("response.output_item.done", output_index=0, item=item),
                   ev("response.completed", response=done)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", required=True, help="JSON-lines file of the requests (appended)")
    ap.add_argument("--answer", default="sluice-harness-ok", help="the model's answer text")
    ap.add_argument("--turns", help='JSON file: a list of the first model calls\' answers, each '
                    '{"tool": NAME, "input": {...}} or {"text": T}; the answer text after them')
    args = ap.parse_args()
    turns = []
    if args.turns:
        with open(args.turns, encoding="utf-8") as f:
            turns = json.load(f)
        bad = [t for t in turns if not isinstance(t, dict) or not ("text" in t or "tool" in t)]
        if not isinstance(turns, list) or bad:
            print("recorder: --turns %s: each turn is {\"tool\": NAME, \"input\": {...}} or "
                  "{\"text\": T}, not %s" % (args.turns, json.dumps(bad[:1])), file=sys.stderr)
            return 2
    Handler.rec = Recorder(args.log, args.answer, turns)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    stop = lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("recorder: listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever(poll_interval=0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
