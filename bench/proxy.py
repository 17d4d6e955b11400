#!/usr/bin/env python3
"""proxy.py - what sluice's proxy adds to a model call: latency and time to the first streamed byte.

Starts sluice-emu answering at once (no time to first token, 24 output tokens) and sluiced
proxying to it, then in one run alternates the same call straight to the emulator and
through sluiced (each over its own kept-alive connection, one at a time, so nothing
queues): N plain calls and N streaming calls. Prints p50/p99 of each path and of the
difference, for the whole answer (plain) and for the first body byte (stream). Through
sluice a call also pays for the lease: estimate, request, settle. Also printed: sluiced's
own CPU time per proxied call (Linux /proc/PID/schedstat; kernel network work done on its
behalf included), steadier than latency differences on a busy machine.
Goals (issue 6): under 0.3 ms added at p50, under 1 ms added to the first streamed byte.

Then THREADS agents call through sluiced at once (plain calls, each agent its own
connection), printing calls/s and sluiced's CPU per call under concurrency.

usage: bench/proxy.py [BUILD_DIR]   (env: BENCH_CALLS=2000, BENCH_THREADS=32)
"""
import http.client
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
CALLS = int(os.environ.get("BENCH_CALLS", "2000"))
THREADS = int(os.environ.get("BENCH_THREADS", "32"))  # the concurrent phase's agents
KEY = "sk-bench-pool-key"
EMU = os.path.join(BUILD, "src/emu/sluice-emu")
SLUICED = os.path.join(BUILD, "src/server/sluiced")


def start(argv, env=None):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if sel.select(timeout=0.1):
            line = proc.stdout.readline()
            if "listening on" in line:
                return proc, int(line.split("127.0.0.1:")[1].split()[0])
            if not line:
                break
    proc.kill()
    sys.exit("%s did not start: %s" % (argv[0], proc.stderr.read()))


def cpu_ns(pid):
    """Time the process has been on a CPU, in ns (None where /proc does not say)."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main():
    for b in (EMU, SLUICED):
        if not os.access(b, os.X_OK):
            sys.exit("proxy.py: build %s first" % b)
    emu, emu_port = start([EMU, "--listen", "127.0.0.1:0", "--api-key", KEY,
                           "--input-tpm", "0", "--output-tpm", "0", "--rpm", "0",
                           "--ttft-ms", "0", "--tokens-per-s", "1000000", "--latency-spread", "0",
                           "--output-tokens", "24"])
    tmp = tempfile.TemporaryDirectory(prefix="sluice-bench-proxy-")
    cfg = os.path.join(tmp.name, "sluice.yaml")
    with open(cfg, "w") as f:
        f.write("cold_start: full\npools:\n  default:\n    input_tpm: 1000000000\n"
                "    output_tpm: 1000000000\n"
                "    rpm: 100000000\n    upstream_url: http://127.0.0.1:%d\n"
                "    provider: anthropic\n    api_key_env: BENCH_KEY\n" % emu_port)
    env = dict(os.environ, BENCH_KEY=KEY)
    sluiced, sl_port = start([SLUICED, "--config", cfg, "--listen", "127.0.0.1:0"], env)
    try:
        direct = http.client.HTTPConnection("127.0.0.1", emu_port, timeout=30)
        proxied = http.client.HTTPConnection("127.0.0.1", sl_port, timeout=30)
        hdr_direct = {"content-type": "application/json", "x-api-key": KEY,
                      "anthropic-version": "2023-06-01"}
        hdr_proxied = dict(hdr_direct, **{"x-api-key": "agent-token", "x-sluice-agent": "bench"})
        body = {"model": "claude-bench", "max_tokens": 64,
                "messages": [{"role": "user", "content": "How high is the water at gate 3?"}]}
        plain, stream = json.dumps(body), json.dumps(dict(body, stream=True))

        def call(conn, path, data, headers, first_byte):
            t0 = time.perf_counter()
            conn.request("POST", path, body=data, headers=headers)
            r = conn.getresponse()
            if first_byte:
                r.read1(1)
                t = time.perf_counter() - t0
                r.read()
            else:
                r.read()
                t = time.perf_counter() - t0
            assert r.status == 200, r.status
            return t * 1000

        results, cpu = {}, {}
        for kind, data, fb in (("plain", plain, False), ("stream", stream, True)):
            d, p = [], []
            for i in range(100):  # warm up both paths (connections, caches)
                call(direct, "/v1/messages", data, hdr_direct, fb)
                call(proxied, "/anthropic/v1/messages", data, hdr_proxied, fb)
            cpu0 = cpu_ns(sluiced.pid)
            for i in range(CALLS):
                if i % 2:
                    d.append(call(direct, "/v1/messages", data, hdr_direct, fb))
                    p.append(call(proxied, "/anthropic/v1/messages", data, hdr_proxied, fb))
                else:
                    p.append(call(proxied, "/anthropic/v1/messages", data, hdr_proxied, fb))
                    d.append(call(direct, "/v1/messages", data, hdr_direct, fb))
            cpu1 = cpu_ns(sluiced.pid)
            results[kind] = (d, p)
            cpu[kind] = (cpu1 - cpu0) / CALLS / 1000 if cpu0 is not None and cpu1 else None
        print("proxy benchmark: %d calls per path, alternating, one at a time (ms)" % CALLS)
        print("%-28s %9s %9s %9s %9s" % ("", "direct", "sluice", "added", "goal"))
        for kind, label, goal in (("plain", "whole answer", 0.3),
                                  ("stream", "first streamed byte", 1.0)):
            d, p = results[kind]
            for q in (50, 99):
                added = pct(p, q) - pct(d, q)
                print("%-28s %9.3f %9.3f %9.3f %9s" % ("%s p%d" % (label, q), pct(d, q), pct(p, q),
                                                        added, "< %.1f" % goal if q == 50 else ""))
        if all(cpu.values()):
            print("sluiced CPU per proxied call: plain %.0f us, stream %.0f us"
                  % (cpu["plain"], cpu["stream"]))

        # Many agents at once: THREADS clients, each its own kept-alive connection, plain
        # calls through sluiced only. sluiced's CPU per call shows what one core can proxy.
        import threading
        per_thread = max(1, CALLS // THREADS)

        def agent(i, out):
            conn = http.client.HTTPConnection("127.0.0.1", sl_port, timeout=30)
            h = dict(hdr_proxied, **{"x-sluice-agent": "bench-%d" % i})
            for _ in range(per_thread):
                call(conn, "/anthropic/v1/messages", plain, h, False)
            conn.close()
            out.append(i)

        done = []
        threads = [threading.Thread(target=agent, args=(i, done)) for i in range(THREADS)]
        cpu0, t0 = cpu_ns(sluiced.pid), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall, cpu1 = time.perf_counter() - t0, cpu_ns(sluiced.pid)
        n = per_thread * len(done)
        line = "%d agents at once: %d proxied calls in %.2f s (%.0f calls/s, client-bound)" % (
            THREADS, n, wall, n / wall)
        if cpu0 is not None and cpu1:
            line += "; sluiced CPU per call %.0f us" % ((cpu1 - cpu0) / n / 1000)
        print(line)
    finally:
        for proc in (sluiced, emu):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
        tmp.cleanup()


if __name__ == "__main__":
    main()
