"""test_agent_emu.py - issue 29's "done when" for Python: examples/agent_sdk.py, a 30-line agent,
runs a three-turn loop against sluice-emu through the lease API: `with` leases sized by the
estimator, an action limit on its tool calls, a checkpoint before a forced wait (its first tool
call lets another agent take the whole pool), and fail-open when sluiced is stopped (its second
tool call stops it): the third turn runs on the local share and the agent finishes."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "emu"))
from harness import FAST, KEY, Emu  # noqa: E402  (tests/integration/emu/harness.py)
from sluiced_daemon import Daemon  # noqa: E402

AGENT = os.path.join(ROOT, "examples", "agent_sdk.py")

# 2550 input tokens of capacity (margin 0.85) refilled at 50 a second; two tool calls.
CONFIG = """
cold_start: full
pools:
  default:
    input_tpm: 3000
    output_tpm: 600000
    max_queue_wait_s: 60
limits:
  tool.call:
    algorithm: token_bucket
    rate: 2
    period_s: 600
"""

# The agent's tool: call 1 lets agent "hog" lease all the input room there is and gives it
# back 1.5 s later (the agent's next call must wait); call 2 stops sluiced and returns once
# its port refuses connections.
TOOL = r'''
import json, os, socket, subprocess, sys, time, urllib.request
url, counter = os.environ["SLUICE_URL"], os.environ["TOOL_COUNTER"]
n = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
open(counter, "w").write(str(n))
def api(method, path, body=None):
    req = urllib.request.Request(url + path, json.dumps(body).encode() if body is not None else None,
                                 {"content-type": "application/json"}, method=method)
    return json.load(urllib.request.urlopen(req, timeout=10))
if n == 1:
    level = [b for name, b in api("GET", "/v1/pools/default")["buckets"].items()
             if name.startswith("input")][0]["level"]
    lease = api("POST", "/v1/leases", {"agent": "hog", "input_tokens": int(level), "output_tokens": 1})
    subprocess.Popen([sys.executable, "-c", "import time, urllib.request\ntime.sleep(1.5)\ntry:\n"
                      "    urllib.request.urlopen(urllib.request.Request(%r, method='DELETE'))\n"
                      "except OSError:\n    pass  # sluiced already stopped" % (url + "/v1/leases/" + lease["lease"])])
elif n == 2:
    os.kill(int(os.environ["SLUICED_PID"]), 15)
    port = int(url.rsplit(":", 1)[1])
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            time.sleep(0.05)
        except OSError:
            break
'''


class AgentOnEmu(unittest.TestCase):
    def test_three_turns_checkpoint_before_a_wait_and_fail_open(self):
        with tempfile.TemporaryDirectory(prefix="sluice-agent-") as d, \
                Emu(FAST + ["--cache-min-tokens", "100"]) as emu:
            with open(os.path.join(d, "tool.py"), "w") as f:
                f.write(TOOL)
            sluiced = Daemon(CONFIG, "sluice-agent-sluiced-")
            self.addCleanup(lambda: sluiced.proc.poll() is None and sluiced.proc.kill())
            self.addCleanup(sluiced.dir.cleanup)
            url = sluiced.url
            env = dict(os.environ, SLUICE_URL=url, PROVIDER_URL="http://127.0.0.1:%d" % emu.port,
                       PROVIDER_KEY=KEY, SLUICED_PID=str(sluiced.proc.pid),
                       TOOL_COUNTER=os.path.join(d, "counter"),
                       PYTHONPATH=os.path.join(ROOT, "clients", "python"))
            env.pop("SLUICE_TOKEN", None)
            run = subprocess.run([sys.executable, AGENT, sys.executable, os.path.join(d, "tool.py")],
                                 cwd=d, env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertEqual(sluiced.proc.wait(10), 0)  # stopped cleanly by the second tool call
            out = run.stdout.splitlines()
            turns = [line for line in out if line.startswith("turn ")]
            self.assertEqual(len(turns), 3, run.stdout)
            # turns 1 and 2 leased from sluiced, the tool limit counting down
            self.assertRegex(turns[0], r"lease l_\d+ \(coordinated mode\), tool 0 \(1 tool calls left\)")
            self.assertRegex(turns[1], r"lease l_\d+ \(coordinated mode\), tool 0 \(0 tool calls left\)")
            # turn 2 waited for the hog's lease, with the checkpoint saved first
            self.assertEqual(out.index("checkpoint saved before a wait"), out.index(turns[0]) + 1)
            with open(os.path.join(d, "agent.checkpoint")) as f:
                cp = json.load(f)
            self.assertEqual(cp["sluice_checkpoint"], 1)
            self.assertRegex(cp["request_id"], r"^[0-9a-f]{32}$")
            # turn 3: sluiced is gone; the local share leases, the tool runs anyway
            self.assertRegex(turns[2], r"lease local-1 \(local mode\), tool 0 \(sluiced unreachable\)")
            self.assertEqual(len(re.findall(r"sluice: ALERT agent py-agent", run.stderr)), 1,
                             run.stderr)
            with open(os.path.join(d, "counter")) as f:
                self.assertEqual(f.read(), "3")

    def test_the_agent_is_thirty_lines(self):
        with open(AGENT) as f:
            code = f.read().split('"""', 2)[2]
        lines = [line for line in code.splitlines() if line.strip()]
        self.assertLessEqual(len(lines), 30, "\n".join(lines))


if __name__ == "__main__":
    unittest.main()
