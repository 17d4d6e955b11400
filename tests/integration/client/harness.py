"""harness.py - the real sluiced on a free 127.0.0.1 port, plus the sluice CLI, for the
client tests. Standard library only; binaries come from $SLUICED, $SLUICE, $CLIENT_FLEET
and $AGENT_LOOP (CTest sets them). Every wait is bounded."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import procs  # noqa: E402  (tests/integration/procs.py)

SLUICED = os.environ.get("SLUICED", "sluiced")
SLUICE = os.environ.get("SLUICE", "sluice")
CLIENT_FLEET = os.environ.get("CLIENT_FLEET", "client_fleet")
AGENT_LOOP = os.environ.get("AGENT_LOOP", "agent_loop")
SOURCE_DIR = os.environ.get(
    "SLUICE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "../../..")))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sluiced(procs.Stoppable):
    """One sluiced on a fixed free port, so it can be killed and started again there."""

    def __init__(self, config_text, port=None):
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-client-test-")
        self.config_path = os.path.join(self.dir.name, "sluice.yaml")
        with open(self.config_path, "w") as f:
            # Full buckets at start unless the config says otherwise (the example does).
            cold = "" if "cold_start:" in config_text else "cold_start: full\n"
            f.write("event_log: %s\n%s%s" % (os.path.join(self.dir.name, "events.jsonl"),
                                             cold, config_text))
        self.port = port or free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self.start()

    def start(self, timeout_s=10):
        self.proc = subprocess.Popen(
            [SLUICED, "--config", self.config_path, "--listen", "127.0.0.1:%d" % self.port],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.read_banner(self.proc, "sluiced", timeout_s)

    def kill(self):
        """SIGKILL: the daemon dies as in a crash."""
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()

    def stop(self):
        """SIGTERM and wait; a non-zero exit (a crash, a sanitizer report) fails the test.
        A daemon already killed (kill()) is only cleaned up after."""
        try:
            if self.proc and not self.proc.stdout.closed:
                procs.stop(self.proc, "sluiced", 5)
        finally:
            self.dir.cleanup()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=5) as r:
            return json.loads(r.read())

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def pool(self, name="default"):
        return self.get("/v1/pools/" + name)


def sluice(*args, url=None, timeout_s=60, env=None, stdin=None):
    """Runs the sluice CLI; returns (exit code, stdout, stderr)."""
    e = dict(os.environ)
    e.pop("SLUICE_URL", None)
    e.pop("SLUICE_TOKEN", None)
    if url:
        e["SLUICE_URL"] = url
    e.update(env or {})
    p = subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=timeout_s,
                       env=e, input=stdin)
    return p.returncode, p.stdout, p.stderr


def sluice_json(*args, **kw):
    code, out, err = sluice(*args, **kw)
    lines = [l for l in out.splitlines() if l.strip()]
    assert len(lines) == 1, "expected one JSON line, got %r (stderr %r)" % (out, err)
    return code, json.loads(lines[0]), err
