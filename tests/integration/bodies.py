"""bodies.py - the smallest provider request bodies the process-level tests send, in the
emulator's model names: message() for Anthropic Messages, chat() for OpenAI Chat
Completions. Standard library only; emu/harness.py and proxy/harness.py re-export them.
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
