#!/usr/bin/env python3
"""synth.py - synthetic 429 and turn logs with a known cause, for sluice overlay's tests.

usage: synth.py KIND DIR   (KIND: work, retries, backoff, noise)
Writes DIR/events.sse (sluiced's GET /v1/events as curl -N captures it: granted
leases and upstream_429s per agent), DIR/429s.csv and DIR/turns.csv (Unix seconds,
fleet-wide), DIR/429s_iso.csv and DIR/turns_iso.csv (ISO-8601, a header, an agent
column). Seeded: the same files every run.
"""
import datetime
import json
import os
import random
import sys

T0 = 1796011200.0  # 2026-12-01T04:00:00Z


def work(rng):
    """20 agents in phase: a turn every 30 s (0-2 s jitter), a 429 1-3 s after most."""
    turns, errs = [], []
    for cycle in range(20):
        for a in range(20):
            t = cycle * 30.0 + rng.uniform(0, 2)
            turns.append((t, f"w{a}"))
            if rng.random() < 0.8:
                errs.append((t + rng.uniform(1, 3), f"w{a}"))
    return turns, errs


def retries(rng):
    """6 agents out of phase; a turn's call gets a 429, then its retries do too:
    exponential backoff 0.5, 1, 2, 4 s with jitter, 3-5 429s in a row."""
    turns, errs = [], []
    for a in range(6):
        t = rng.uniform(0, 60)
        while t < 600:
            turns.append((t, f"r{a}"))
            e = t + 0.2
            for k in range(rng.randint(3, 5)):
                errs.append((e, f"r{a}"))
                e += 0.5 * 2 ** k * rng.uniform(0.8, 1.0) + 0.2
            t = e + rng.uniform(40, 80)
    return turns, errs


def backoff(rng):
    """8 agents out of phase; a turn's call gets a 429, the agent backs off 3-11 s (longer
    than the 5 s window), retries, and the retry gets a 429 0.2-1 s later, 2-4 times in a
    row, then a retry goes through. Returns the retries' times too: the 429 right after each is the retries' fault."""
    turns, errs, tries = [], [], []
    for a in range(8):
        t = rng.uniform(0, 60)
        while t < 600:
            turns.append((t, f"b{a}"))
            e = t + rng.uniform(0.2, 1.0)
            errs.append((e, f"b{a}"))
            for _ in range(rng.randint(2, 4)):
                retry = e + rng.uniform(3, 11)
                tries.append((retry, f"b{a}"))
                e = retry + rng.uniform(0.2, 1.0)
                errs.append((e, f"b{a}"))
            done = e + rng.uniform(3, 11)  # the last retry goes through
            tries.append((done, f"b{a}"))
            t = done + rng.uniform(40, 80)
    return turns, errs, tries


def noise(rng):
    """429s and turns at unrelated random times."""
    turns = [(rng.uniform(0, 600), f"n{rng.randrange(10)}") for _ in range(40)]
    errs = [(rng.uniform(0, 600), f"n{rng.randrange(10)}") for _ in range(40)]
    return turns, errs


def iso(t):
    d = datetime.datetime.fromtimestamp(T0 + t, datetime.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def main():
    kind, out = sys.argv[1], sys.argv[2]
    rng = random.Random(17)
    made = {"work": work, "retries": retries, "backoff": backoff, "noise": noise}[kind](rng)
    turns, errs = made[0], made[1]
    # A retry takes a new lease: by default the grant right after each 429; `backoff` says
    # when its retries were made (after the backoff, so the grant follows the 429 by 3-11 s).
    tries = made[2] if len(made) > 2 else [(t + 0.1, a) for t, a in errs]
    os.makedirs(out, exist_ok=True)
    events = [(t, "granted", a) for t, a in turns] + [(t, "upstream_429", a) for t, a in errs]
    events += [(t, "granted", a) for t, a in tries]
    events.sort()
    with open(os.path.join(out, "events.sse"), "w") as f:
        f.write(": sluice events\n\n")
        for i, (t, name, a) in enumerate(events):
            obj = {"ts": T0 + t, "event": name, "pool": "default", "agent": a, "lease": f"l_{i + 1}"}
            f.write(f"event: {name}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n")
    for name, series in (("429s", errs), ("turns", turns), ("retries", tries)):
        with open(os.path.join(out, f"{name}.csv"), "w") as f:
            for t, _ in sorted(series):
                f.write(f"{T0 + t:.3f}\n")
        with open(os.path.join(out, f"{name}_iso.csv"), "w") as f:
            f.write("agent,when,note\n")
            for t, a in sorted(series):
                f.write(f"{a},{iso(t)},x\n")


if __name__ == "__main__":
    main()
