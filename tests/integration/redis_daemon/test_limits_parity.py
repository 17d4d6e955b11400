"""test_limits_parity.py - one scenario on the memory backend and on Redis (limits.lua), the
same answers: a check held (on_limit: queue) across a reload that removes or changes its
limit re-checks against the configuration then running; holds ending by release and by
TTL, a release too many, a release serving a check held on its semaphore; a parent denying
what its child allows; adaptive bounds."""
import signal
import threading
import time
import unittest

from redis_harness import OnRedis, replica, wait_until
from harness import Sluiced

POOLS = """  default:
    input_tpm: 6000
    output_tpm: 600000
"""

SLOW = """limits:
  slow:
    algorithm: gcra
    rate: 1
    period_s: 4
    burst: 1
    on_limit: queue
"""


class HeldAcrossReload(OnRedis):
    def both(self, limits):
        """A memory sluiced and a Redis one, each with `limits`, ready."""
        mem = Sluiced("pools:\n%s%s" % (POOLS, limits))
        red = replica(self.redis, POOLS + limits)
        self.replicas += [mem, red]
        self.ready(red)
        return {"memory": mem, "redis": red}

    def held_through_reload(self, s, new_limits):
        """Takes slow's room, holds a second check, reloads with `new_limits` (SIGHUP)
        while it waits; returns the held check's answer."""
        self.assertEqual(s.check("slow", {"agent": "h"})[0], 200)
        out = {}
        t = threading.Thread(target=lambda: out.update(
            answer=s.check("slow", {"agent": "h", "wait": 10}, timeout_s=20)))
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
        new = SLOW.replace("algorithm: gcra\n    rate: 1\n    period_s: 4\n    burst: 1",
                           "algorithm: fixed_window\n    rate: 1\n    period_s: 600")
        for backend, s in self.both(SLOW).items():
            status, body, _ = self.held_through_reload(s, new)
            self.assertEqual((status, body["limit"], body["checked"][0]["max"]), (200, 1, 1),
                             (backend, body))
            self.assertGreater(body["reset_after"], 4, (backend, body))
            status, body, _ = s.check("slow", {"agent": "h"})
            self.assertEqual(status, 429, (backend, body))
            self.assertGreater(body["retry_after"], 4, (backend, body))

    def test_a_reload_adding_a_leaf_keeps_the_state_of_the_limits_it_joins(self):
        # Unchanged limits keep their keys across a reload (docs/limits.md "Reload"),
        # also when a new limit joins their tree: a new leaf under the global budget must
        # not give the budget back (on Redis the keys' hash tag is the tree's).
        tree = ("limits:\n  z.budget:\n    algorithm: fixed_window\n    rate: 5\n"
                "    period_s: 600\n    per: global\n  z.leaf:\n    rate: 100\n"
                "    period_s: 600\n    parents: [z.budget]\n")
        grown = tree + "  a.leaf:\n    rate: 100\n    period_s: 600\n    parents: [z.budget]\n"
        for backend, s in self.both(tree).items():
            for _ in range(4):
                self.assertEqual(s.check("z.leaf", {"agent": "r"})[0], 200, backend)
            with open(s.config_path) as f:
                text = f.read()
            s.write_config(text[:text.index("limits:")] + grown)
            s.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(lambda: len(s.call("GET", "/v1/limits")[1]["limits"]) == 3,
                                       10))
            st, body, _ = s.check("a.leaf", {"agent": "r"})
            self.assertEqual((st, body["checked"][1]["remaining"]), (200, 0), (backend, body))
            st, body, _ = s.check("z.leaf", {"agent": "r"})
            self.assertEqual((st, body["checked"][0]["remaining"]), (429, 95), (backend, body))


STEPS = """limits:
  sem:
    algorithm: concurrency
    rate: 2
    ttl_s: 3
  child:
    algorithm: token_bucket
    rate: 5
    period_s: 600
    per: key
    parents: [parent]
  parent:
    algorithm: fixed_window
    rate: 3
    period_s: 600
    per: global
  qsem:
    algorithm: concurrency
    rate: 1
    ttl_s: 600
    on_limit: queue
  ad:
    algorithm: gcra
    rate: 10
    period_s: 1
    burst: 2
    adaptive: {min_rate: 5, max_rate: 12, window: 4}
"""


class SameAnswers(OnRedis):
    """Each step on a memory sluiced and on a Redis one: the same status and fields."""

    def setUp(self):
        super().setUp()
        self.mem = Sluiced("pools:\n%s%s" % (POOLS, STEPS))
        self.red = replica(self.redis, POOLS + STEPS)
        self.replicas += [self.mem, self.red]
        self.ready(self.red)

    def step(self, method, path, body=None, fields=()):
        """The step's (status, {field: value}) on both, asserted equal; returned."""
        got = []
        for s in (self.mem, self.red):
            status, ans, _ = s.call(method, path, body)
            ans = ans if isinstance(ans, dict) else {}
            got.append((status, {f: ans.get(f) for f in fields}))
        self.assertEqual(got[0], got[1], (method, path, body))
        return got[0]

    def state(self, name, key, field):
        """`field` of the key's view on each backend."""
        return [s.call("GET", "/v1/limits/%s?key=%s" % (name, key))[1]["state"][field]
                for s in (self.mem, self.red)]

    def test_holds_end_by_release_and_by_ttl_and_a_release_too_many_is_404(self):
        chk = ("POST", "/v1/limits/sem/check", {"agent": "c"}, ("allowed", "remaining"))
        self.assertEqual(self.step(*chk), (200, {"allowed": True, "remaining": 1}))
        self.assertEqual(self.step(*chk), (200, {"allowed": True, "remaining": 0}))
        self.assertEqual(self.step(*chk)[0], 429)
        rel = ("POST", "/v1/limits/sem/release", {"agent": "c"}, ("status", "held"))
        self.assertEqual(self.step(*rel), (200, {"status": "released", "held": 1}))
        self.assertEqual(self.step(*rel), (200, {"status": "released", "held": 0}))
        self.assertEqual(self.step(*rel)[0], 404)
        self.assertEqual(self.step(*chk)[0], 200)
        time.sleep(3.3)  # the hold's TTL passes: gone, not releasable
        self.assertEqual(self.state("sem", "c", "held"), [0, 0])
        self.assertEqual(self.step(*rel)[0], 404)
        self.assertEqual(self.step(*chk), (200, {"allowed": True, "remaining": 1}))

    def test_a_parent_deny_takes_nothing_at_either_level(self):
        for i in range(3):
            self.step("POST", "/v1/limits/child/check", {"agent": "p", "key": "k%d" % i})
        st, f = self.step("POST", "/v1/limits/child/check", {"agent": "p", "key": "k9", "hits": 2},
                          fields=("allowed", "denied_by"))
        self.assertEqual((st, f["denied_by"]["limit"]), (429, "parent"))
        self.assertEqual(self.state("child", "k9", "tracked"), [False, False])
        self.assertEqual(self.state("parent", "*", "remaining"), [0, 0])
        st, f = self.step("POST", "/v1/limits/child/check", {"agent": "p", "key": "k9", "hits": 0},
                          fields=("allowed", "remaining"))
        self.assertEqual((st, f), (200, {"allowed": True, "remaining": 0}))

    def test_a_release_serves_the_check_held_on_the_semaphore(self):
        # The TTL (600 s) is beyond the wait: held for its wait all the same, as a release
        # can make room, and the release (through the same replica) serves it.
        for backend, s in (("memory", self.mem), ("redis", self.red)):
            self.assertEqual(s.check("qsem", {"agent": "q"})[0], 200)
            out = {}
            t = threading.Thread(target=lambda: out.update(answer=s.check(
                "qsem", {"agent": "q", "wait": 8}, timeout_s=20)))
            t.start()
            time.sleep(0.5)
            self.assertEqual(s.call("POST", "/v1/limits/qsem/release", {"agent": "q"})[0], 200)
            t.join(15)
            st, body, _ = out["answer"]
            self.assertEqual((st, body["allowed"]), (200, True), (backend, body))
            self.assertEqual(s.call("POST", "/v1/limits/qsem/release", {"agent": "q"})[0], 200)
            self.assertEqual(s.call("POST", "/v1/limits/qsem/release", {"agent": "q"})[0], 404)

    def test_adaptive_rates_stay_within_their_bounds(self):
        rep = "/v1/limits/ad/report"
        rates = [self.step("POST", rep, {"agent": "a", "successes": 0, "errors": 4},
                           fields=("rate",))[1]["rate"] for _ in range(8)]
        self.assertEqual(rates[-1], 5)
        self.assertTrue(all(5 <= r <= 10 for r in rates), rates)
        rates = [self.step("POST", rep, {"agent": "a", "successes": 4, "errors": 0},
                           fields=("rate",))[1]["rate"] for _ in range(12)]
        self.assertEqual(rates[-1], 12)
        for body in ({"agent": "a", "successes": 0, "errors": 0},
                     {"agent": "a", "successes": -1, "errors": 2},
                     {"agent": "a", "successes": 1000000000, "errors": 1}):
            self.assertEqual(self.step("POST", rep, body)[0], 400, body)
        self.assertEqual(self.step("POST", "/v1/limits/sem/report",
                                   {"agent": "a", "successes": 1})[0], 400)


if __name__ == "__main__":
    unittest.main()
