#!/usr/bin/env python3
"""driver.py - runs one client's conformance runner against a real sluiced.

usage: driver.py --sluiced PATH [--cases FILE] -- RUNNER [ARG...]

Starts sluiced on a free 127.0.0.1 port with the cases file's `config` (a path relative to
the repository root), sends every case's `before` requests (raw HTTP, in file order), then
runs `RUNNER [ARG...] CASES_FILE` with $SLUICE_URL set and relays its output. Exit status:
the runner's, or 2 when sluiced did not start or did not stop cleanly. The format and the
runner's contract are in tests/clients/README.md. Standard library only.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER_TIMEOUT_S = 600


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def start_sluiced(binary, config):
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    proc = subprocess.Popen([binary, "--config", config, "--listen", "127.0.0.1:%d" % port],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("sluiced exited %d: %s" % (proc.returncode, proc.stderr.read()))
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("sluiced did not answer /healthz within 15 s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluiced", required=True)
    ap.add_argument("--cases", default=os.path.join(ROOT, "tests", "clients", "cases.json"))
    ap.add_argument("runner", nargs="+")
    a = ap.parse_args()
    with open(a.cases) as f:
        doc = json.load(f)
    proc, url = start_sluiced(a.sluiced, os.path.join(ROOT, doc["config"]))
    try:
        for case in doc["cases"]:
            for r in case.get("before", []):
                http(url, r["method"], r["path"], r.get("body"))
        env = dict(os.environ, SLUICE_URL=url)
        env.pop("SLUICE_TOKEN", None)
        rc = subprocess.run(a.runner + [a.cases], env=env, timeout=RUNNER_TIMEOUT_S).returncode
    finally:
        proc.terminate()
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -9
    if code != 0:
        print("driver: sluiced exited %d: %s" % (code, proc.stderr.read()[-2000:]))
        return 2
    return rc


if __name__ == "__main__":
    sys.exit(main())
