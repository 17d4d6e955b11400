#!/usr/bin/env python3
"""adversarial.py - what two attacks of issue 25 cost sluiced, measured (run by bench/adversarial.sh).

1. Agent-name flood: one prefix token leases and cancels under N fresh names. Printed:
   sluiced's RSS per name (VmRSS before and after, over the names it took), the 429s the
   bounds gave, and with forgetting on, what a second flood of N names adds once the
   first is forgotten.
2. An innocent agent's lease latency (lease + settle round trips on its own token, one
   every 5 ms): p50/p99 while nothing else happens, while one token holds event streams
   it never reads and a load client makes lease/cancel traffic (the events the streams
   are sent), and during the agent-name flood.

Every phase is bounded in time (PHASE_S) and count; every figure is measured in this run.
usage: adversarial.py SLUICED [REF_SLUICED]   (env: BENCH_NAMES=20000, BENCH_STREAMS=1000,
       BENCH_PHASE_S=8). REF_SLUICED, when given, is run through the same phases (e.g. main's
       build, to print the figures before the bounds next to those after).
"""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import procs  # noqa: E402  (the banner reader the process tests use)

NAMES = int(os.environ.get("BENCH_NAMES", "20000"))
STREAMS = int(os.environ.get("BENCH_STREAMS", "1000"))
PHASE_S = float(os.environ.get("BENCH_PHASE_S", "8"))

CONFIG = """cold_start: full
auth:
  admin_token: admin-bench-0001
  tokens:
    - {token: flood-token, agent_prefix: "f-"}
    - {token: load-token, agent_prefix: "w-"}
    - {token: bob-token, agent: bob}
pools:
  default:
    input_tpm: 100000000000
    output_tpm: 100000000000
    rpm: 1000000000
%s
"""


class Daemon:
    def __init__(self, binary, extra):
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-adv-")
        path = os.path.join(self.dir.name, "sluice.yaml")
        with open(path, "w") as f:
            f.write(CONFIG % extra)
        self.proc = subprocess.Popen([binary, "--config", path, "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        line = procs.read_banner(self.proc, "sluiced", 10)
        self.port = int(re.search(r"http://[^ ]*:(\d+)", line).group(1))

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.dir.cleanup()


class Conn:
    def __init__(self, port, token):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.h = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}

    def post(self, path, body):
        self.c.request("POST", path, json.dumps(body), self.h)
        r = self.c.getresponse()
        return r.status, json.loads(r.read() or b"null")

    def delete(self, path):
        self.c.request("DELETE", path, None, self.h)
        r = self.c.getresponse()
        r.read()
        return r.status

    def lease(self, agent):
        return self.post("/v1/leases", {"agent": agent, "input_tokens": 10, "output_tokens": 10})


def flood(port, prefix, n, deadline, stop=None):
    """Lease and cancel under n fresh names (until `deadline` or `stop`); (taken, refused)."""
    c = Conn(port, "flood-token")
    taken = refused = 0
    for i in range(n):
        if time.monotonic() > deadline or (stop and stop.is_set()):
            break
        st, body = c.lease("f-%s%d" % (prefix, i))
        if st == 200:
            c.delete("/v1/leases/" + body["lease"])
            taken += 1
        else:
            refused += 1
    return taken, refused


def known(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith("sluice_agents_known "):
            return int(float(line.split()[1]))
    return -1


def rss_per_name(binary, extra, rounds):
    """RSS after each flood round of NAMES fresh names (waiting between rounds until the
    names are forgotten, when the daemon forgets)."""
    d = Daemon(binary, extra)
    try:
        base = d.rss_kib()
        out = []
        for r in range(rounds):
            taken, refused = flood(d.port, "r%d-" % r, NAMES, time.monotonic() + 6 * PHASE_S)
            out.append((taken, refused, d.rss_kib()))
            deadline = time.monotonic() + 3 * PHASE_S
            while r + 1 < rounds and known(d.port) > 0 and time.monotonic() < deadline:
                time.sleep(0.2)
        return base, out
    finally:
        d.stop()


def innocent(port, stop, lat):
    c = Conn(port, "bob-token")
    while not stop.is_set():
        t0 = time.monotonic()
        st, body = c.lease("bob")
        if st == 200:
            c.post("/v1/leases/%s/settle" % body["lease"], {"input_tokens": 10, "output_tokens": 10})
        lat.append(time.monotonic() - t0)
        time.sleep(0.005)


def load(port, stop, count):
    c = Conn(port, "load-token")
    while not stop.is_set():
        st, body = c.lease("w-1")
        if st == 200:
            c.delete("/v1/leases/" + body["lease"])
            count[0] += 1


def silent_streams(port, n):
    """Opens n /v1/events streams of the flood token that are never read; how many opened."""
    socks, opened = [], 0
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Authorization: Bearer flood-token\r\n\r\n")
            head = s.recv(12)
            opened += head.startswith(b"HTTP/1.1 200")
        except OSError:
            pass
        socks.append(s)
    return socks, opened


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def latency_phase(binary, extra, attack):
    d = Daemon(binary, extra)
    socks = []
    try:
        note = ""
        if attack == "streams":
            socks, opened = silent_streams(d.port, STREAMS)
            note = "%d of %d streams opened" % (opened, STREAMS)
        stop, lat, count = threading.Event(), [], [0]
        threads = [threading.Thread(target=innocent, args=(d.port, stop, lat)),
                   threading.Thread(target=load, args=(d.port, stop, count))]
        result = {}
        if attack == "names":
            threads.append(threading.Thread(
                target=lambda: result.update(r=flood(d.port, "x", 10 ** 7,
                                                     time.monotonic() + PHASE_S, stop))))
        for t in threads:
            t.start()
        time.sleep(PHASE_S)
        stop.set()
        for t in threads:
            t.join(30)
        if attack == "names":
            note = "%d names taken, %d refused" % result.get("r", (0, 0))
        return pct(lat, 0.5), pct(lat, 0.99), len(lat), count[0] / PHASE_S, note, d.rss_kib()
    finally:
        for s in socks:
            s.close()
        d.stop()


def main():
    binaries = [("this build", sys.argv[1])] + ([("reference", sys.argv[2])] if len(sys.argv) > 2 else [])
    print("adversarial: %d fresh names per flood, %d silent event streams, %g s a phase"
          % (NAMES, STREAMS, PHASE_S))
    for label, binary in binaries:
        ref = label == "reference"
        print("\n== %s: %s" % (label, binary))
        # 1. RSS per agent name.
        unbounded = "" if ref else ("agents: {max_per_token: 100000000, max_total: 100000000, "
                                    "forget_idle_s: 3600}")
        base, rounds = rss_per_name(binary, unbounded, 1)
        taken, refused, rss = rounds[0]
        print("names, nothing forgotten%s: %d taken, %d refused; RSS %d -> %d KiB: %.0f bytes "
              "a name" % ("" if ref else " (bounds lifted)", taken, refused, base, rss,
                          (rss - base) * 1024.0 / max(taken, 1)))
        if not ref:
            base, rounds = rss_per_name(binary, "", 1)
            taken, refused, rss = rounds[0]
            print("names, default bounds (10000 a token): %d taken, %d refused 429; RSS %d -> "
                  "%d KiB" % (taken, refused, base, rss))
            base, rounds = rss_per_name(binary, "agents: {max_per_token: 100000000, "
                                        "forget_idle_s: 1}", 2)
            (t1, _, r1), (t2, _, r2) = rounds
            print("names, forgotten after 1 s idle: RSS %d -> %d KiB after %d names, -> %d KiB "
                  "after %d more once those were forgotten: %.0f bytes a name the second time"
                  % (base, r1, t1, r2, t2, (r2 - r1) * 1024.0 / max(t2, 1)))
        # 2. The innocent agent's latency.
        allow = "" if ref else "events: {max_streams: 2000, max_streams_per_token: 2000}"
        print("%-44s %9s %9s %7s %9s  %s" % ("innocent agent (lease+settle)", "p50 ms", "p99 ms",
                                             "calls", "load/s", "attack"))
        phases = [("quiet (load only)", "", None), ("silent event streams, default bounds", "",
                                                    "streams")]
        if not ref:
            phases.append(("silent event streams, bounds lifted to 2000", allow, "streams"))
        phases.append(("agent-name flood", "", "names"))
        for name, extra, attack in phases:
            p50, p99, n, rate, note, _ = latency_phase(binary, extra, attack)
            print("%-44s %9.2f %9.2f %7d %9.0f  %s" % (name, p50, p99, n, rate, note))


if __name__ == "__main__":
    main()
