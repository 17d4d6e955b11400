#!/usr/bin/env python3
"""agent_loop.py - the agent loop of agent_loop.c in Python, standard library only,
speaking sluice's HTTP API directly (docs/client.md, docs/api.md).

usage: agent_loop.py [--server URL] [--agent NAME] [--turns N] [--checkpoint FILE] [FILE...]

Each turn reads FILEs, sizes its prompt, leases capacity (POST /v1/leases, then
long-polls GET /v1/tickets/{t}?wait=S while queued, or sleeps to retry_at when
rejected), makes the model call (simulated), and settles. Before any wait it saves a
checkpoint in libsluice-client's format (atomically: temporary file, fsync, rename,
fsync of the directory), so a restarted agent re-reads only changed files and
re-sends the call it had ready with the same request_id (never charged twice).
When sluiced is unreachable it falls back to full-jitter backoff and says so once.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

CHUNK_S = 20          # longest single long-poll
BASE_S, CAP_S = 1.0, 30.0


def backoff_delay_s(attempt, retry_after_s=None):
    """Full jitter: uniform in [0, min(cap, base * 2^attempt)], never below retry-after."""
    delay = random.uniform(0, min(CAP_S, BASE_S * 2 ** min(attempt, 32)))
    return max(delay, retry_after_s or 0)


class Sluice:
    def __init__(self, url, token=None):
        self.url = url.rstrip("/")
        self.token = token
        self.local = False

    def call(self, method, path, body=None, timeout_s=5.0):
        """Returns (status, JSON body). Raises OSError when sluiced is unreachable."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                status, text = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        if self.local:
            self.local = False
            print("sluice: sluiced answers again; coordinated mode", file=sys.stderr)
        return status, json.loads(text) if text else {}

    def went_unreachable(self, why):
        if not self.local:
            self.local = True
            print("sluice: ALERT sluiced at %s unreachable (%s); backing off locally"
                  % (self.url, why), file=sys.stderr)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 15), b""):
            h.update(block)
    return h.hexdigest()


def save_checkpoint(path, cp):
    """Atomic: a temporary file beside `path`, fsync, rename, fsync the directory."""
    cp["sluice_checkpoint"] = 1
    cp["saved_at"] = time.time()
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(cp, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def acquire(sl, agent, need, cp, cp_path, request_id):
    """Leases `need`; waits while queued or rejected; saves the checkpoint first.
    Returns the grant (a dict; {"local": True} when sluiced was unreachable)."""
    saved = False
    started = time.monotonic()
    attempt = 0

    def before_wait(what, eta):
        nonlocal saved
        if not saved:
            cp["request_id"] = request_id
            save_checkpoint(cp_path, cp)
            saved = True
        print("  waiting (%s): eta %.1f s, waited %.1f s" % (what, eta, time.monotonic() - started))

    while True:
        body = dict(need, agent=agent, request_id=request_id)
        try:
            status, ans = sl.call("POST", "/v1/leases", body)
            while status == 202:
                before_wait("queued, position %s" % ans.get("position"), ans["eta"])
                wait_s = min(CHUNK_S, max(1.0, ans["eta"] * 2))
                status, ans = sl.call("GET", "/v1/tickets/%s?wait=%.1f" % (ans["ticket"], wait_s),
                                      timeout_s=wait_s + 5)
                if status == 404:  # the ticket expired: ask again as a new request
                    request_id = uuid.uuid4().hex
                    break
        except OSError as e:  # refused, reset, timed out: fail open with backoff
            sl.went_unreachable(e)
            delay = backoff_delay_s(attempt)
            attempt += 1
            if attempt > 3:
                return {"local": True, "lease": None, "charged": {}, "waited": 0}
            before_wait("sluiced unreachable, backing off", delay)
            time.sleep(delay)
            continue
        if status == 200:
            ans["waited"] = time.monotonic() - started
            ans["request_id"] = request_id
            return ans
        if status == 404 and "error" not in ans:
            continue
        if status == 429:
            wait_s = max(0.0, min(ans["retry_after"], ans["retry_at"] - time.time()))
            before_wait("rejected: %s" % ans["reason"], wait_s)
            time.sleep(wait_s + random.uniform(0, min(0.25, 0.05 * wait_s)))
            request_id = uuid.uuid4().hex  # the same id would replay the reject
            continue
        if status != 404:
            raise RuntimeError("POST /v1/leases: %d %s" % (status, ans))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default=os.environ.get("SLUICE_URL", "http://127.0.0.1:8750"))
    ap.add_argument("--token", default=os.environ.get("SLUICE_TOKEN"))
    ap.add_argument("--agent", default="agent-loop-py")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--checkpoint")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    cp_path = args.checkpoint or "/tmp/agent_loop-%s.checkpoint" % args.agent
    sl = Sluice(args.server, args.token)

    cp = {"goal": "demonstrate a leased agent loop", "step": None, "files": [],
          "decisions": [], "next_call": None, "request_id": None}
    request_id = None
    if os.path.exists(cp_path):
        with open(cp_path) as f:
            cp = json.load(f)
        changed = [e["path"] for e in cp["files"]
                   if not os.path.exists(e["path"]) or sha256_file(e["path"]) != e["sha256"]]
        print("resuming \"%s\" at step \"%s\": %d of %d files changed"
              % (cp["goal"], cp["step"], len(changed), len(cp["files"])))
        for p in changed:
            print("  re-read " + p)
        request_id = cp.get("request_id")

    for turn in range(1, args.turns + 1):
        cp["step"] = "turn %d of %d: call the model" % (turn, args.turns)
        prompt_tokens = 2000
        for path in args.files:
            entry = {"path": path, "sha256": sha256_file(path),
                     "size_bytes": os.path.getsize(path)}
            cp["files"] = [e for e in cp["files"] if e["path"] != path] + [entry]
            prompt_tokens += entry["size_bytes"] // 4 + 1  # ~4 bytes a token
        cp["next_call"] = {"model": "claude", "max_tokens": 1024, "tools": {"cwd": "."},
                           "messages": [{"role": "user", "content": "turn %d" % turn}]}
        input_tokens = prompt_tokens // 4
        need = {"input_tokens": input_tokens, "cached_tokens": prompt_tokens - input_tokens,
                "output_tokens": 1024}
        grant = acquire(sl, args.agent, need, cp, cp_path, request_id or uuid.uuid4().hex)
        request_id = None
        if grant.get("local"):
            print("turn %d: no sluiced; calling with backoff only" % turn)
        else:
            print("turn %d: lease %s, charged %d input tokens%s, waited %.1f s"
                  % (turn, grant["lease"], grant["charged"]["input_tokens"],
                     " (cold cache)" if grant.get("cache_penalty") else "", grant["waited"]))
        time.sleep(0.2)  # the model call would go here
        if grant.get("lease"):
            cold = grant.get("cache_penalty")
            usage = {"input_tokens": input_tokens * 9 // 10, "output_tokens": 300,
                     "cache_creation_input_tokens": need["cached_tokens"] if cold else 0,
                     "cache_read_input_tokens": 0 if cold else need["cached_tokens"]}
            status, ans = sl.call("POST", "/v1/leases/%s/settle" % grant["lease"], usage)
            if status != 200:
                print("agent_loop.py: settle: %d %s" % (status, ans), file=sys.stderr)
                return 1
            print("turn %d: settled, refund %d input / %d output tokens"
                  % (turn, ans["adjust"]["input_tokens"], ans["adjust"]["output_tokens"]))
        cp["decisions"].append({"decision": "turn %d applied its edit" % turn,
                                "reason": "the tests passed after it"})
        cp["request_id"] = None
    if os.path.exists(cp_path):
        os.remove(cp_path)  # the goal is done: nothing to resume
    return 0


if __name__ == "__main__":
    sys.exit(main())
