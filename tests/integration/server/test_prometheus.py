"""test_prometheus.py - /metrics passes `promtool check metrics`, and a real Prometheus server
scrapes it (target up, sluice_ series queryable)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from harness import SMALL_POOL, Sluiced  # noqa: E402

CONFIG = "pools:\n  default:" + SMALL_POOL


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout_s=5):
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return json.loads(r.read())


class Prometheus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Sluiced(CONFIG)
        # Something in every series: a grant, a settle, a queue, a reject-free wait.
        status, g, _ = cls.s.lease("m1", 5000)
        cls.s.lease("m2", 3000)
        cls.s.call("POST", "/v1/leases/%s/settle" % g["lease"],
                   {"input_tokens": 4000, "output_tokens": 5})

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def test_promtool_accepts_metrics(self):
        status, text, _ = self.s.call("GET", "/metrics")
        self.assertEqual(status, 200)
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout.strip() + p.stderr.strip(), "", "promtool lint findings")

    def test_real_prometheus_scrapes_sluiced(self):
        port = free_port()
        with tempfile.TemporaryDirectory(prefix="sluice-prom-") as d:
            cfg = os.path.join(d, "prometheus.yml")
            with open(cfg, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                        "scrape_configs:\n  - job_name: sluiced\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % self.s.port)
            prom = subprocess.Popen(
                ["prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + d + "/data",
                 "--web.listen-address=127.0.0.1:%d" % port],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                base = "http://127.0.0.1:%d" % port
                health = None
                deadline = time.monotonic() + 40
                while time.monotonic() < deadline and health != "up":
                    time.sleep(0.5)
                    try:
                        t = get_json(base + "/api/v1/targets")
                        active = t["data"]["activeTargets"]
                        health = active[0]["health"] if active else None
                    except OSError:
                        continue
                self.assertEqual(health, "up", active if health else "prometheus never answered")
                value = None
                while time.monotonic() < deadline and value is None:
                    q = get_json(base + "/api/v1/query?query=sluice_margin_ratio")
                    if q["data"]["result"]:
                        value = float(q["data"]["result"][0]["value"][1])
                    else:
                        time.sleep(0.5)
                self.assertAlmostEqual(value, 0.85)
                q = get_json(base + "/api/v1/query?query=sluice_lease_wait_seconds_count")
                self.assertTrue(q["data"]["result"])
            finally:
                prom.terminate()
                try:
                    prom.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    prom.kill()
                    prom.wait()
                prom.stderr.close()


if __name__ == "__main__":
    unittest.main()
