#!/usr/bin/env python3
"""agent_sdk.py - a three-turn agent on the sluice Python SDK (docs/client.md): every model call is
sized by sluiced's estimator and leased with `with`, the tool calls pass an action limit, the plan
is saved before any wait, and a dead sluiced only moves the agent to its local share.
usage: SLUICE_URL=... PROVIDER_URL=... PROVIDER_KEY=... agent_sdk.py TOOL [ARG...]"""
import json, os, subprocess, sys, urllib.request
import sluice

client = sluice.Client(agent="py-agent", probe_interval_s=1)
SYSTEM = [{"type": "text", "text": open(__file__).read(), "cache_control": {"type": "ephemeral"}}]
messages = [{"role": "user", "content": "Make the parser tests pass."}]

def call_model(body):  # the Messages API of Anthropic, or of sluice-emu
    req = urllib.request.Request(os.environ["PROVIDER_URL"] + "/v1/messages", json.dumps(body).encode(),
                                 {"content-type": "application/json", "anthropic-version": "2023-06-01",
                                  "x-api-key": os.environ["PROVIDER_KEY"]})
    return json.load(urllib.request.urlopen(req, timeout=60))

def checkpoint(request_id):  # called before any wait: the plan on disk, the request to resend
    sluice.save_checkpoint("agent.checkpoint", {"goal": messages[0]["content"], "request_id": request_id})
    print("checkpoint saved before a wait", flush=True)

for turn in (1, 2, 3):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "system": SYSTEM, "messages": messages}
    with client.lease_for(body, checkpoint=checkpoint) as lease:
        answer = call_model(dict(body, max_tokens=lease.max_tokens))
        lease.record(answer["usage"])
    try:
        with client.limit("tool.call") as allowed:
            tool = "%s (%d tool calls left)" % (subprocess.run(sys.argv[1:]).returncode, allowed.remaining)
    except sluice.LimitExceeded as e:
        tool = "denied, retry after %.0f s" % e.retry_after
    except sluice.Unreachable:  # limits are never decided locally: this agent runs its tool anyway
        tool = "%s (sluiced unreachable)" % subprocess.run(sys.argv[1:]).returncode
    messages += [{"role": "assistant", "content": answer["content"]}, {"role": "user", "content": "tool: " + tool}]
    print("turn %d: lease %s (%s mode), tool %s" % (turn, lease.id, client.mode, tool), flush=True)
