"""bodies.py - what the process-level tests send to a provider and read back: the
smallest request bodies, in the emulator's model names (message() for Anthropic Messages,
chat() for OpenAI Chat Completions), and parse_sse() for a streamed answer. Standard
library only; emu/harness.py and proxy/harness.py re-export them.
"""


def message(text="Hello, Claude", max_tokens=100, **extra):
    """An Anthropic Messages body: one user message `text`, `extra` fields added."""
    body = {"model": "claude-emu-1", "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return body


def chat(text="Hello", max_tokens=100, **extra):
    """An OpenAI Chat Completions body: one user message `text`, `extra` fields added."""
    body = {"model": "gpt-emu-1", "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": text}]}
    body.update(extra)
    return body


def parse_sse(payload, strict=True):
    """Parses an SSE body (bytes or str) into a list of (event name or None, data string).
    strict (the emulator's own streams): the body ends with a blank line, a line that is
    not `event:`, `data:` or a comment fails, comments are dropped. Not strict (what came
    through the proxy): comments (": ping") are kept as (":", text), other lines ignored."""
    events = []
    text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
    if strict:
        assert text.endswith("\n\n"), "stream does not end with a blank line: %r" % text[-40:]
    for block in text.split("\n\n"):
        if not (block if strict else block.strip()):
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data.append(line[len("data: "):])
            elif line.startswith(":"):
                if not strict:
                    name = name or ":"
                    data.append(line[1:].strip())
            elif strict:
                raise AssertionError("unexpected SSE line %r" % line)
        events.append((name, "\n".join(data)))
    return events
