"""The examples (examples/agent_loop.c and agent_loop.py) against a real sluiced with
examples/sluice.yaml, and the C loop resuming from its checkpoint after a kill."""
import os
import subprocess
import sys
import tempfile
import time
import unittest

from harness import AGENT_LOOP, SOURCE_DIR, Sluiced

EXAMPLE_YAML = os.path.join(SOURCE_DIR, "examples", "sluice.yaml")
AGENT_LOOP_PY = os.path.join(SOURCE_DIR, "examples", "agent_loop.py")

SMALL = """
pools:
  default:
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 600
    ticket_idle_s: 600
"""


def example_config():
    with open(EXAMPLE_YAML) as f:
        # The event log path of the example is machine-wide; the harness sets its own.
        return "".join(l for l in f if not l.startswith("event_log:") and
                       not l.startswith("listen:"))


class Examples(unittest.TestCase):
    def test_both_agent_loops_run_against_the_example_config(self):
        with Sluiced(example_config()) as d, tempfile.TemporaryDirectory() as tmp:
            for cmd in ([AGENT_LOOP], [sys.executable, AGENT_LOOP_PY]):
                p = subprocess.run(
                    cmd + ["--server", d.url, "--agent", "ex-%d" % len(cmd), "--turns", "3",
                           "--checkpoint", os.path.join(tmp, "cp-%d" % len(cmd)),
                           EXAMPLE_YAML],
                    capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stdout.count("settled"), 3, p.stdout)
                self.assertIn("(cold cache)", p.stdout)  # the first turn's cache is cold
                self.assertFalse(os.path.exists(os.path.join(tmp, "cp-%d" % len(cmd))))

    def test_c_loop_resumes_from_its_checkpoint_rereading_only_the_changed_file(self):
        with Sluiced(SMALL) as d, tempfile.TemporaryDirectory() as tmp:
            files = []
            for i in range(5):
                files.append(os.path.join(tmp, "f%d.txt" % i))
                with open(files[-1], "w") as f:
                    f.write("x" * 400)
            cp = os.path.join(tmp, "agent.checkpoint")
            status, hog = d.post("/v1/leases", {"agent": "hog", "input_tokens": 5000,
                                                "output_tokens": 1})
            self.assertEqual(status, 200)
            first = subprocess.Popen([AGENT_LOOP, "--server", d.url, "--agent", "resumer",
                                      "--turns", "1", "--checkpoint", cp, *files],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 10
                while not os.path.exists(cp) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertTrue(os.path.exists(cp), "no checkpoint before the wait")
            finally:
                first.kill()
                first.communicate()
            with open(files[3], "a") as f:
                f.write("changed while the agent was down")
            d.post("/v1/leases/%s/settle" % hog["lease"], {"input_tokens": 1,
                                                          "output_tokens": 1})
            p = subprocess.run([AGENT_LOOP, "--server", d.url, "--agent", "resumer",
                                "--turns", "1", "--checkpoint", cp, *files],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("1 of 5 files changed", p.stdout)
            self.assertIn("re-read " + files[3], p.stdout)
            self.assertEqual(p.stdout.count("re-read"), 1)
            self.assertIn("settled", p.stdout)


if __name__ == "__main__":
    unittest.main()
