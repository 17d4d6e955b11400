"""Fail-open: kill sluiced under load; the clients go local within 1 s, keep making
progress within their local share, and return to coordinated mode after a restart."""
import collections
import json
import subprocess
import time
import unittest

from harness import CLIENT_FLEET, Sluiced

# input_tpm 60,000 split over a fleet of 4: each local share is 15,000 tokens a minute
# (250/s). sluiced itself hands out 51,000 (margin 0.85) so 4 clients queue: under load.
POOL = """
pools:
  default:
    input_tpm: 60000
    output_tpm: 600000
    max_queue_wait_s: 60
"""
THREADS, FLEET_SIZE, INPUT = 4, 4, 500
SHARE_PER_MIN = 60000 // FLEET_SIZE


class FailOpen(unittest.TestCase):
    def test_kill_restart_goes_local_then_back(self):
        with Sluiced(POOL) as d:
            fleet = subprocess.Popen(
                [CLIENT_FLEET, d.url, str(THREADS), "22", str(FLEET_SIZE), str(INPUT)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                time.sleep(3)
                self.assertGreater(d.pool()["totals"]["granted"], 10)
                killed_at = time.time()
                d.kill()
                time.sleep(4)
                restarted_at = time.time()
                d.start()
                out, err = fleet.communicate(timeout=60)
            finally:
                if fleet.poll() is None:
                    fleet.kill()
                    fleet.wait()
            self.assertEqual(fleet.returncode, 0, err)
        events = [json.loads(l) for l in out.splitlines() if l.strip()]
        per_client = collections.defaultdict(list)
        for e in events:
            per_client[e["client"]].append(e)
        self.assertEqual(sorted(per_client), list(range(THREADS)))
        for cid, evs in per_client.items():
            went_local = [e["t"] for e in evs if e["event"] == "alert" and e["to"] == "local"]
            came_back = [e["t"] for e in evs
                         if e["event"] == "alert" and e["to"] == "coordinated"]
            # One alert line per switch: exactly one into local mode and one out of it.
            self.assertEqual(len(went_local), 1, evs)
            self.assertEqual(len(came_back), 1, evs)
            self.assertLessEqual(went_local[0] - killed_at, 1.0, "client %d" % cid)
            self.assertGreaterEqual(went_local[0], killed_at - 0.05)
            # Back within one jittered probe interval (5 s +-50%) of the restart.
            self.assertGreaterEqual(came_back[0], restarted_at)
            self.assertLessEqual(came_back[0] - restarted_at, 7.5 + 1.5, "client %d" % cid)
            local = [e for e in evs if e["event"] == "grant" and e["local"] == 1]
            # Progress while sluiced was down...
            self.assertGreater(len(local), 0, "client %d made no local progress" % cid)
            for e in local:
                self.assertGreaterEqual(e["t"], went_local[0] - 0.01)
                self.assertLessEqual(e["t"], came_back[0] + 0.01)
            # ...within its share: a full bucket plus the refill over the local time.
            local_s = came_back[0] - went_local[0]
            taken = sum(e["input"] for e in local)
            self.assertLessEqual(taken, SHARE_PER_MIN + SHARE_PER_MIN / 60 * local_s + INPUT,
                                 "client %d took %d tokens in %.1f s" % (cid, taken, local_s))
            # And coordinated grants again after the restart.
            after = [e for e in evs if e["event"] == "grant" and e["local"] == 0
                     and e["t"] > came_back[0]]
            self.assertGreater(len(after), 0, "client %d" % cid)
            self.assertFalse([e for e in evs if e["event"] == "error"], evs)


if __name__ == "__main__":
    unittest.main()
