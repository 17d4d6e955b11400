"""procs.py - what the process-level test harnesses share: waiting for a server's
"listening on" banner, stopping it (a non-zero exit, such as a crash or a sanitizer
report, fails the test), and one HTTP request on a fresh connection.

Standard library only. Each harness puts this directory on sys.path and imports it.
"""
import json
import selectors
import signal
import subprocess
import time


def read_banner(proc, what, timeout_s):
    """Returns the stdout line of `proc` saying "listening on"; kills it and raises when
    none comes within `timeout_s` or it exits first."""
    deadline = time.monotonic() + timeout_s
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if sel.select(timeout=0.1):
            line = proc.stdout.readline()
            if "listening on" in line:
                return line
            if not line:
                break
    proc.kill()
    proc.wait(timeout=5)
    raise RuntimeError("%s did not start: %s" % (what, proc.stderr.read()))


def stop(proc, what, timeout_s=10):
    """SIGTERM, wait, and return (stdout, stderr); raises on a non-zero exit so that no
    test passes over a crash or a sanitizer report."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            raise RuntimeError("%s did not stop on SIGTERM" % what)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (what, proc.returncode, err))
    return out, err


def request(conn, method, path, body=None, headers=None, raw=None):
    """One request on `conn` (an http.client connection, closed after): returns (status,
    headers with lower-case names, body bytes). `body` is sent as JSON (with its
    Content-Type unless `headers` names one), `raw` as is."""
    try:
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        headers = dict(headers or {})
        if body is not None and raw is None and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        payload = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, payload
    finally:
        conn.close()
