"""test_review_limits.py - an outsider's cases against the /v1/limits routes in memory: the
largest hits on a slow limit, a key view with bytes no check can name, a cost for an action
no check can name, a release waking the check held on its semaphore."""
import threading
import time
import unittest

from harness import SharedSluiced, check_config

CONFIG = """
limits:
  slow:
    algorithm: gcra
    rate: 1
    period_s: 86400
    burst: 10
  keyed:
    algorithm: fixed_window
    rate: 3
    period_s: 600
    per: key
  sem:
    algorithm: concurrency
    rate: 1
    ttl_s: 600
    on_limit: queue
  sem.two:
    algorithm: concurrency
    rate: 2
    ttl_s: 600
    on_limit: queue
    per: global
  sem.child:
    algorithm: token_bucket
    rate: 100
    period_s: 1
    parents: [sem]
    on_limit: queue
"""


class ReviewLimits(SharedSluiced):
    config = CONFIG

    def test_a_billion_hits_on_a_slow_limit_is_never_allowed(self):
        # hits x T passes 2^63 µs: it must be a deny for good (retry_after -1), with
        # sane headers, and take nothing.
        status, body, hdrs = self.s.check("slow", {"agent": "big", "hits": 1000000000})
        self.assertEqual((status, body["retry_after"], body["denied_by"]["reason"]),
                         (429, -1, "never"), body)
        self.assertEqual(body["checked"][0]["retry_after"], -1, body)  # not -0.000001
        self.assertNotIn("retry-after", hdrs)
        self.assertEqual(hdrs["ratelimit"], '"slow";r=10;t=0')
        status, body, _ = self.s.check("slow", {"agent": "big", "hits": 10})
        self.assertEqual((status, body["remaining"], body["reset_after"]), (200, 0, 864000), body)

    def test_a_key_view_with_bytes_that_are_not_utf8_is_refused_naming_the_key(self):
        status, body, _ = self.s.call("GET", "/v1/limits/keyed?key=a%FFb")
        self.assertEqual(status, 400, body)
        self.assertIn("key", body["error"]["message"])
        self.assertIn("UTF-8", body["error"]["message"])
        status, body, _ = self.s.call("GET", "/v1/limits/keyed?key=%C3%A9")
        self.assertEqual((status, body["state"]["key"]), (200, "\u00e9"), body)


    def test_a_release_wakes_the_check_held_on_the_semaphore(self):
        # on_limit: queue on a concurrency limit: the hold's TTL (600 s) is beyond the
        # wait, but a release can make room sooner, so the check is held for its wait and
        # the release serves it.
        for name in ("sem", "sem.child"):  # the semaphore itself, or as a parent
            self.assertEqual(self.s.check("sem", {"agent": "w"})[0], 200)
            out = {}
            t = threading.Thread(target=lambda: out.update(answer=self.s.check(
                name, {"agent": "w", "wait": 8}, timeout_s=20)))
            t.start()
            time.sleep(0.5)
            st, body, _ = self.s.call("POST", "/v1/limits/sem/release", {"agent": "w"})
            self.assertEqual(st, 200, body)
            t.join(15)
            st, body, _ = out["answer"]
            self.assertEqual((st, body["allowed"]), (200, True), (name, body))
            self.assertGreater(body["waited"], 0, body)
            self.assertEqual(self.s.call("POST", "/v1/limits/sem/release",
                                         {"agent": "w"})[0], 200)
        # Nobody releases: answered 429 when the wait runs out, nothing taken.
        self.assertEqual(self.s.check("sem", {"agent": "w"})[0], 200)
        st, body, _ = self.s.check("sem", {"agent": "w", "wait": 0.5})
        self.assertEqual((st, body["denied_by"]["limit"]), (429, "sem"), body)
        self.assertEqual(self.s.call("POST", "/v1/limits/sem/release", {"agent": "w"})[0], 200)
        self.assertEqual(self.s.call("POST", "/v1/limits/sem/release", {"agent": "w"})[0], 404)

    def test_threads_queued_on_a_semaphore_are_all_served_never_more_than_its_rate(self):
        # 8 threads x 8 checks, each held up to 5 s, on a global semaphore of 2 whose TTL
        # (600 s) is beyond any wait: the releases serve them. A holder counts itself in
        # from its grant until just before its release, so more than 2 in at once would
        # mean an overdrawn semaphore.
        lock, active, peak, served, refused = threading.Lock(), [0], [0], [0], []

        def worker(i):
            for _ in range(8):
                st, body, _ = self.s.check("sem.two", {"agent": "t%d" % i, "wait": 5},
                                    timeout_s=20)
                if st != 200:
                    refused.append(body)
                    continue
                with lock:
                    active[0] += 1
                    served[0] += 1
                    peak[0] = max(peak[0], active[0])
                time.sleep(0.01)
                with lock:
                    active[0] -= 1
                st, body, _ = self.s.call("POST", "/v1/limits/sem.two/release",
                                          {"agent": "t%d" % i})
                self.assertEqual(st, 200, body)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual((served[0], refused, peak[0] <= 2), (64, [], True), peak)
        st, body, _ = self.s.call("GET", "/v1/limits/sem.two?key=*")
        self.assertEqual(body["state"]["held"], 0, body)


class ReviewLimitsConfig(unittest.TestCase):
    def test_a_cost_for_an_action_no_check_can_send_is_a_config_error(self):
        # A check's action is 1-128 of [A-Za-z0-9._:-]: a cost under any other name would
        # never apply (such checks are 400, the others cost 1), so the file is refused.
        for action, shown in (("db write", "'db write'"), ("x" * 129, "'" + "x" * 40)):
            rc, out = check_config("limits:\n  q:\n    rate: 5\n    costs:\n"
                                   "      '%s': 3\n" % action)
            self.assertNotEqual(rc, 0, out)
            self.assertIn(":5: limits.q.costs: ", out)  # the line of its costs
            self.assertIn(shown, out)
        rc, out = check_config("limits:\n  q:\n    rate: 5\n    costs: {db.write: 3, a-b_c:d: 0}\n")
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
