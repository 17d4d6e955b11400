"""test_limits_parity.py - one scenario on the memory backend and on Redis (limits.lua), the
same answers: a check held (on_limit: queue) across a reload that removes or changes its
limit re-checks against the configuration then running."""
import signal
import threading
import time
import unittest

from redis_harness import Redis, replica, wait_until
from harness import Sluiced

POOLS = """  default:
    input_tpm: 6000
    output_tpm: 600000
"""

SLOW = """limits:
  slow:
    algorithm: gcra
    rate: 1
    period_s: 2
    burst: 1
    on_limit: queue
"""


def check(s, name, body, **kw):
    return s.call("POST", "/v1/limits/%s/check" % name, body, **kw)


class HeldAcrossReload(unittest.TestCase):
    def setUp(self):
        self.redis = Redis()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.stop()
        self.redis.close()

    def both(self, limits):
        """A memory sluiced and a Redis one, each with `limits`, ready."""
        mem = Sluiced("pools:\n%s%s" % (POOLS, limits))
        red = replica(self.redis, POOLS + limits)
        self.procs += [mem, red]
        self.assertTrue(wait_until(lambda: red.call("GET", "/readyz")[0] == 200, 10))
        return {"memory": mem, "redis": red}

    def held_through_reload(self, s, new_limits):
        """Takes slow's room, holds a second check, reloads with `new_limits` (SIGHUP)
        while it waits; returns the held check's answer."""
        self.assertEqual(check(s, "slow", {"agent": "h"})[0], 200)
        out = {}
        t = threading.Thread(target=lambda: out.update(
            answer=check(s, "slow", {"agent": "h", "wait": 10}, timeout_s=20)))
        t.start()
        time.sleep(0.3)
        with open(s.config_path) as f:
            text = f.read()
        s.write_config(text[:text.index("limits:")] + new_limits)
        s.proc.send_signal(signal.SIGHUP)
        want = sorted(n.split(":")[0].strip() for n in new_limits.splitlines()[1:]
                      if n.startswith("  ") and not n.startswith("    "))
        self.assertTrue(wait_until(lambda: sorted(
            l["name"] for l in s.call("GET", "/v1/limits")[1]["limits"]) == want, 10))
        t.join(15)
        return out["answer"]

    def test_a_held_check_on_a_removed_limit_answers_404_on_both_backends(self):
        for backend, s in self.both(SLOW).items():
            status, body, _ = self.held_through_reload(s, "limits:\n  other:\n    rate: 1\n")
            self.assertEqual(status, 404, (backend, body))
            self.assertIn("slow", body["error"]["message"], backend)

    def test_a_held_check_re_checks_the_changed_limit_on_both_backends(self):
        # slow becomes a fixed window of 1 per 10 minutes: a changed limit starts with
        # fresh keys, so the held check is allowed against the new window and the next
        # one is denied by it for the rest of the window.
        new = SLOW.replace("algorithm: gcra\n    rate: 1\n    period_s: 2\n    burst: 1",
                           "algorithm: fixed_window\n    rate: 1\n    period_s: 600")
        for backend, s in self.both(SLOW).items():
            status, body, _ = self.held_through_reload(s, new)
            self.assertEqual((status, body["limit"], body["checked"][0]["max"]), (200, 1, 1),
                             (backend, body))
            self.assertGreater(body["reset_after"], 2, (backend, body))
            status, body, _ = check(s, "slow", {"agent": "h"})
            self.assertEqual(status, 429, (backend, body))
            self.assertGreater(body["retry_after"], 2, (backend, body))


if __name__ == "__main__":
    unittest.main()
