"""test_observe.py - the monitoring files against a real sluiced: every metric name the
Prometheus rules and the Grafana dashboard use is in a live /metrics scrape (and every
alert name and lease result they select on), and `sluice overlay` reads a capture of
the live GET /v1/events stream."""
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
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from harness import SMALL_POOL, Sluiced, wait_until  # noqa: E402

SRC = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
RULES = os.path.join(SRC, "monitoring", "prometheus", "sluice.rules.yml")
DASHBOARD = os.path.join(SRC, "monitoring", "grafana", "sluice.json")
SLUICE = os.environ.get("SLUICE", "sluice")
# One action limit, so that the per-limit series exist (they are printed per configured limit).
# A price, so that the per-agent cost series have samples (top N of the nonzero ones).
CONFIG = ("limits:\n  tool.call:\n    algorithm: fixed_window\n    rate: 10\n    period_s: 60\n"
          "pools:\n  default:" + SMALL_POOL + "    price_input_per_mtok: 3\n")
N_CYCLES = 12


def referenced_names(text):
    """Metric names in PromQL text: sluice_ identifiers (recorded rules use sluice:...)."""
    return set(re.findall(r"\bsluice_[a-z0-9_]+\b", text))


def dashboard_exprs():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    for v in dash["templating"]["list"]:
        if v.get("type") == "query":
            exprs.append(v["definition"])
    return exprs


def rules_exprs():
    # The rules file is YAML; its expressions are the folded `expr:` values.
    exprs, cur = [], None
    with open(RULES) as f:
        for line in f:
            m = re.match(r"^(\s*)expr:\s*(>)?\s*(.*)$", line)
            if m:
                cur = [m.group(3)] if m.group(3) else []
                exprs.append(cur)
                indent = len(m.group(1))
                continue
            if cur is not None and line.strip() and len(line) - len(line.lstrip()) > indent:
                cur.append(line.strip())
            else:
                cur = None
    return [" ".join(e) for e in exprs]


class Capture(threading.Thread):
    """Reads GET /v1/events into a file as `curl -N` would, until stopped."""

    def __init__(self, port, path):
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        self.conn.request("GET", "/v1/events")
        self.resp = self.conn.getresponse()
        self.sock = self.conn.sock  # kept: the response owns it once the headers are read
        self.path = path
        self.bytes = 0

    def run(self):
        with open(self.path, "wb") as f:
            try:
                while True:
                    chunk = self.resp.read1(65536)
                    if not chunk:
                        return
                    f.write(chunk)
                    f.flush()
                    self.bytes += len(chunk)
            except (OSError, ValueError, AttributeError):  # closed by tearDownClass
                return


class Observe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="sluice-observe-")
        cls.s = Sluiced(CONFIG)
        cls.capture_path = os.path.join(cls.dir.name, "events.sse")
        cls.cap = Capture(cls.s.port, cls.capture_path)
        cls.cap.start()
        # Each cycle: an agent's turn takes a lease and its call comes back 429 (the
        # other series sluiced prints whether or not they have counted anything).
        for i in range(N_CYCLES):
            status, g, _ = cls.s.lease("agent%d" % i, 100)
            assert status == 200 and g.get("lease"), g
            status, body, _ = cls.s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                                         {"input_tokens": 100, "output_tokens": 5,
                                          "got_429": True})
            assert status == 200, body
        # A request to a path the proxy does not serve: the proxied-request counter has one.
        cls.s.call("GET", "/anthropic/v1/not-an-endpoint")
        # One agent past its action limit: the per-agent violation series has a sample.
        for _ in range(11):
            cls.s.call("POST", "/v1/limits/tool.call/check", {"agent": "agent0"})
        status, text, _ = cls.s.call("GET", "/metrics")
        assert status == 200, text
        cls.metrics = text
        def captured():
            with open(cls.capture_path) as f:
                text = f.read()
            return text.count("event: upstream_429") >= N_CYCLES
        assert wait_until(captured, 10), "the capture lacks the events"

    @classmethod
    def tearDownClass(cls):
        # Shut the socket down first: closing the response while the reader thread sits in
        # read1() would wait for that read to return (the next keep-alive comment, 15 s).
        cls.cap.sock.shutdown(socket.SHUT_RDWR)
        cls.cap.join(5)
        cls.cap.conn.close()
        cls.s.stop()
        cls.dir.cleanup()

    def scraped_names(self):
        names = set()
        for line in self.metrics.splitlines():
            if line and not line.startswith("#"):
                names.add(re.split(r"[{ ]", line, 1)[0])
        return names

    def test_every_metric_the_rules_and_dashboard_use_is_exported(self):
        scraped = self.scraped_names()
        used = {}
        for src, exprs in (("rules", rules_exprs()), ("dashboard", dashboard_exprs())):
            self.assertTrue(exprs, "no expressions found in the %s" % src)
            for e in exprs:
                for n in referenced_names(e):
                    used.setdefault(n, set()).add(src)
        self.assertGreaterEqual(len(used), 10, used)
        missing = {n: sorted(s) for n, s in used.items() if n not in scraped}
        self.assertEqual(missing, {}, "names used but not in sluiced's /metrics")

    def test_every_alert_and_result_selected_is_exported(self):
        text = " ".join(rules_exprs() + dashboard_exprs())
        alerts = set(re.findall(r'sluice_alert\{name="([a-z_]+)"', text))
        self.assertEqual(alerts, {"margin_at_floor", "estimate_error", "backend_unavailable",
                                  "spend_cap", "anomaly", "state_file_damaged",
                                  "provider_limits_changed"})
        for a in alerts:
            self.assertIn('sluice_alert{name="%s"' % a, self.metrics)
        results = set()
        for alt in re.findall(r'result=~"([a-z|]+)"', text):
            results.update(alt.split("|"))
        self.assertEqual(results, {"granted", "queued", "rejected"})
        for r in results:
            self.assertIn('result="%s"' % r, self.metrics)

    def test_a_name_sluiced_does_not_export_is_caught(self):
        self.assertNotIn("sluice_anomaly_score", self.scraped_names())
        self.assertEqual(referenced_names("rate(sluice_anomaly_score[5m]) > sluice:x"),
                         {"sluice_anomaly_score"})

    def test_overlay_reads_a_live_event_capture(self):
        p = subprocess.run([SLUICE, "overlay", "--events", self.capture_path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("429s: upstream_429 events; turns: granted (not after the agent's 429)",
                      p.stdout)
        # Each of the N 429s follows its own agent's grant by milliseconds.
        self.assertIn("429s %d, turn starts %d" % (N_CYCLES, N_CYCLES), p.stdout)
        self.assertIn("matched per agent", p.stdout)
        self.assertRegex(p.stdout, r"within 5 s after a turn start +%d +100\.0%%" % N_CYCLES)


if __name__ == "__main__":
    unittest.main()
