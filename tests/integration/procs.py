"""procs.py - what the process-level test harnesses share: waiting for a server's
"listening on" banner, stopping it (a non-zero exit, such as a crash or a sanitizer
report, fails the test), one HTTP request on a fresh connection, and a throw-away TLS
certificate authority.

Standard library only. Each harness puts this directory on sys.path and imports it.
"""
import json
import os
import selectors
import signal
import subprocess
import time


class Stoppable:
    """A process handle used as `with X(...) as x:`: its stop() runs when the block ends."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


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


def make_ca(d, name="sluice test CA"):
    """A throw-away CA (`name`) and a server certificate for 127.0.0.1 signed by it, made
    with openssl in folder d. Returns the paths (CA certificate, certificate, key)."""
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, csr, crt = (os.path.join(d, n) for n in ("srv.key", "srv.csr", "srv.crt"))
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_crt,
        "-days", "1", "-subj", "/CN=" + name)
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj",
        "/CN=127.0.0.1")
    run("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out",
        crt, "-days", "1", "-extfile", ext)
    return ca_crt, crt, key
