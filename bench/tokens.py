#!/usr/bin/env python3
"""tokens.py - what the number of agent tokens costs sluiced: a tokens_file of N hashed tokens
(N = 1, the reference, then 2,000 and 100,000 by default), measured in one run.

Printed per N: the time `sluiced --check-config` takes to read the configuration with the
file (YAML parse, one SHA-256 entry each, the index), sluiced's RSS once started, and the
lease + cancel round trips per second one keep-alive client makes for BENCH_SECONDS with a
token taken from the file (authentication is one SHA-256 and one probe whatever N is; the
rate at N = 1 is the reference it is printed next to).

usage: tokens.py SLUICED   (env: BENCH_TOKENS="2000 100000", BENCH_SECONDS=3)
"""
import hashlib
import http.client
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import procs  # noqa: E402  (the banner reader the process tests use)

SIZES = [1] + [int(n) for n in os.environ.get("BENCH_TOKENS", "2000 100000").split()]
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))


def write_files(tmp, n):
    tokens = [secrets.token_hex(32) for _ in range(n)]
    path = os.path.join(tmp, "tokens-%d.yaml" % n)
    with open(path, "w") as f:
        f.write("tokens:\n")
        for i, t in enumerate(tokens):
            f.write("  - {sha256: %s, agent: agent-%d, tier: std}\n"
                    % (hashlib.sha256(t.encode()).hexdigest(), i))
    config = os.path.join(tmp, "sluice-%d.yaml" % n)
    with open(config, "w") as f:
        f.write("cold_start: full\npools:\n  default: {input_tpm: 100000000, output_tpm: "
                "100000000, rpm: 100000000}\ntiers:\n  std: {roles: [worker]}\n"
                "agents:\n  max_total: 100000000\n"
                "auth:\n  admin_token: admin-bench-0001\n  tokens_file: %s\n" % path)
    return config, tokens


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def round_trips_per_s(port, token, agent):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    body = json.dumps({"agent": agent, "input_tokens": 10, "output_tokens": 10})
    done, end = 0, time.monotonic() + SECONDS
    while time.monotonic() < end:
        conn.request("POST", "/v1/leases", body, h)
        r = conn.getresponse()
        lease = json.loads(r.read())["lease"]
        conn.request("DELETE", "/v1/leases/" + lease, None, h)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        done += 1
    conn.close()
    return done / SECONDS


def main():
    sluiced = sys.argv[1]
    print("%9s %12s %10s %16s" % ("tokens", "load_s", "rss_MiB", "lease+cancel/s"))
    with tempfile.TemporaryDirectory(prefix="sluice-bench-tokens-") as tmp:
        for n in SIZES:
            config, tokens = write_files(tmp, n)
            t0 = time.monotonic()
            subprocess.run([sluiced, "--check-config", "--config", config], check=True,
                           capture_output=True, timeout=600)
            load_s = time.monotonic() - t0
            proc = subprocess.Popen([sluiced, "--config", config, "--listen", "127.0.0.1:0"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                line = procs.read_banner(proc, "sluiced", 600)
                port = int(line.split("http://127.0.0.1:")[1].split()[0])
                rss = rss_kb(proc.pid) / 1024
                i = n // 2
                rate = round_trips_per_s(port, tokens[i], "agent-%d" % i)
            finally:
                procs.stop(proc, "sluiced", 10)
            print("%9d %12.3f %10.1f %16.0f%s" % (n, load_s, rss, rate,
                                                  "  (reference)" if n == 1 else ""))


if __name__ == "__main__":
    main()
