"""sluiced_daemon.py - a real sluiced for the package's tests: free_port(), and Daemon,
sluiced with a given configuration on a free 127.0.0.1 port, stoppable and restartable (the
fail-open tests). Standard library only; every wait is bounded."""
import os
import socket
import subprocess
import tempfile
import time
import urllib.request

SLUICED = os.environ.get("SLUICED", "sluiced")


def free_port():
    """A 127.0.0.1 port nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """sluiced with the YAML `config`, on a port kept across stop() and start(); started,
    and answering /healthz, when made."""

    def __init__(self, config, prefix="sluice-py-test-"):
        self.dir = tempfile.TemporaryDirectory(prefix=prefix)
        self.path = os.path.join(self.dir.name, "sluice.yaml")
        with open(self.path, "w") as f:
            f.write(config)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self.start()

    def start(self):
        """Starts sluiced; raises RuntimeError when it does not answer within 10 s."""
        self.proc = subprocess.Popen([SLUICED, "--config", self.path, "--listen",
                                      "127.0.0.1:%d" % self.port],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sluiced did not start")

    def stop(self):
        """SIGTERM; raises RuntimeError when sluiced does not exit 0."""
        self.proc.terminate()
        rc = self.proc.wait(10)
        if rc != 0:
            raise RuntimeError("sluiced exited %d" % rc)

    def close(self):
        """Stops sluiced if it runs, and removes its folder."""
        try:
            if self.proc.poll() is None:
                self.stop()
        finally:
            self.dir.cleanup()
