"""test_tier_limits.py - a tier's limit_multiplier scales the per-agent action limits of its
tokens' agents (issue 27 item 2), through the HTTP API: a gold agent gets twice the
per-agent rate, a token of no tier the configured one; a shared (per: global) parent is not
scaled and still bounds both; a copy cannot be checked by its own name; bad values are
refused naming the field and the value; a reload changes the multiplier."""
import unittest

from harness import Sluiced, refused_config, refused_start

ADMIN = "admin-secret-1"
BASE = (
    "pools:\n  default:\n    input_tpm: 600000\n    output_tpm: 600000\n"
    "tiers:\n  gold:\n    limit_multiplier: 2\n  free:\n    max_concurrent: 2\n"
    "limits:\n"
    "  tool:\n    algorithm: fixed_window\n    rate: 3\n    period_s: 3600\n"
    "    parents: [all]\n"
    "  all:\n    algorithm: fixed_window\n    rate: 100\n    period_s: 3600\n    per: global\n"
    "  burst:\n    rate: 2\n    burst: 4\n    period_s: 3600\n"
    "auth:\n  admin_token: %s\n  tokens:\n"
    "    - {token: gold-secret-1, agent: g1, tier: gold}\n"
    "    - {token: free-secret-1, agent: f1, tier: free}\n"
    "    - {token: none-secret-1, agent: n1}\n" % ADMIN)

# sliding_window keeps a log per key, so its rate is at most 10,000: 20 x 1000 is not
OUT_OF_RANGE = BASE.replace("limit_multiplier: 2", "limit_multiplier: 1000").replace(
    "  burst:\n    rate: 2", "  log:\n    algorithm: sliding_window\n    rate: 20\n"
    "  burst:\n    rate: 2")


def check(s, token, agent, limit="tool", **kw):
    body = {"agent": agent}
    body.update(kw)
    return s.call("POST", "/v1/limits/%s/check" % limit, body, token=token)


def allowed_in_a_row(s, token, agent, limit="tool", most=20):
    for n in range(most):
        code, answer, _ = check(s, token, agent, limit)
        if code != 200:
            return n, answer
    return most, None


class TierMultiplier(unittest.TestCase):
    def start(self, text=BASE):
        s = Sluiced(text)
        self.addCleanup(s.stop)
        return s

    def test_a_gold_agent_gets_twice_the_per_agent_rate(self):
        s = self.start()
        n, denied = allowed_in_a_row(s, "gold-secret-1", "g1")
        self.assertEqual(n, 6, denied)
        self.assertEqual(denied["denied_by"]["limit"], "tool@gold", denied)
        self.assertEqual(allowed_in_a_row(s, "free-secret-1", "f1")[0], 3)  # multiplier 1
        self.assertEqual(allowed_in_a_row(s, "none-secret-1", "n1")[0], 3)  # no tier
        # a token bucket's rate and burst both scale: 4 -> 8 at once
        self.assertEqual(allowed_in_a_row(s, "gold-secret-1", "g1", "burst")[0], 8)
        self.assertEqual(allowed_in_a_row(s, "none-secret-1", "n1", "burst")[0], 4)
        # the shared parent is one state for all: 6 + 3 + 3 hits counted, not scaled
        code, view, _ = s.call("GET", "/v1/limits/all?key=*", token=ADMIN)
        self.assertEqual(code, 200, view)
        self.assertEqual(view["state"]["remaining"], 100 - 12, view)
        self.assertEqual(view["rate"], 100)

    def test_the_shared_parent_still_bounds_a_gold_agent(self):
        s = self.start(BASE.replace("rate: 100", "rate: 4"))
        self.assertEqual(allowed_in_a_row(s, "gold-secret-1", "g1")[0], 4)
        code, answer, _ = check(s, "gold-secret-1", "g1")
        self.assertEqual((code, answer["denied_by"]["limit"]), (429, "all"), answer)

    def test_the_copy_is_listed_and_cannot_be_checked_by_its_name(self):
        s = self.start()
        code, answer, _ = s.call("GET", "/v1/limits", token=ADMIN)
        self.assertEqual(code, 200, answer)
        by_name = {x["name"]: x for x in answer["limits"]}
        self.assertNotIn("all@gold", by_name)  # per: global is not scaled
        self.assertNotIn("tool@free", by_name)  # a tier without a multiplier has no copy
        copy = by_name["tool@gold"]
        self.assertEqual((copy["of"], copy["tier"], copy["limit_multiplier"]), ("tool", "gold", 2))
        self.assertEqual(copy["rate"], 6)
        self.assertEqual(copy["config"]["parents"], ["all"])
        code, answer, _ = check(s, "none-secret-1", "n1", "tool@gold")
        self.assertEqual(code, 400, answer)
        self.assertIn("tier gold's copy of 'tool'", answer["error"]["message"])
        # a gold token's view of the limit is its tier's copy
        check(s, "gold-secret-1", "g1")
        code, view, _ = s.call("GET", "/v1/limits/tool?key=g1", token="gold-secret-1")
        self.assertEqual((code, view["name"], view["state"]["remaining"]), (200, "tool@gold", 5))

    def test_bad_multipliers_name_the_field_and_the_value(self):
        for bad, said in (("0", "'0' must be a number between 0.01 and 1000"),
                          ("-2", "'-2' must be a number"),
                          ("lots", "'lots' must be a number"),
                          ("5000", "'5000' must be a number"),
                          ("[2]", "expected a number")):
            out = refused_config(BASE.replace("limit_multiplier: 2", "limit_multiplier: " + bad))
            self.assertIsNotNone(out, bad)
            self.assertIn("tiers.gold.limit_multiplier: " + said, out)
        out = refused_config(BASE.replace("limit_multiplier: 2", "limit_multiplyer: 2"))
        self.assertIn("limit_multiplier", out)  # the known keys name it

    def test_a_scaled_limit_out_of_range_stops_the_start_naming_the_tier(self):
        err = refused_start(OUT_OF_RANGE)
        self.assertIsNotNone(err)
        self.assertIn("tiers.gold.limit_multiplier: scaling the per-agent limits gives "
                      "limits.log@gold.rate: 20000", err)

    def test_a_reload_changes_the_multiplier_and_a_bad_one_keeps_the_running(self):
        s = self.start()
        self.assertEqual(allowed_in_a_row(s, "gold-secret-1", "g1", "burst")[0], 8)
        s.write_config(BASE.replace("limit_multiplier: 2", "limit_multiplier: 3"))
        code, answer, _ = s.call("POST", "/v1/admin/reload", token=ADMIN)
        self.assertEqual(code, 200, answer)
        # a changed copy starts with fresh keys: 3 x 4 at once
        self.assertEqual(allowed_in_a_row(s, "gold-secret-1", "g1", "burst")[0], 12)
        s.write_config(OUT_OF_RANGE)
        code, answer, _ = s.call("POST", "/v1/admin/reload", token=ADMIN)
        self.assertEqual(code, 400, answer)
        self.assertIn("tiers.gold.limit_multiplier", answer["error"]["message"])
        code, answer, _ = s.call("GET", "/v1/limits/burst@gold", token=ADMIN)
        self.assertEqual((code, answer["limit_multiplier"]), (200, 3), answer)


if __name__ == "__main__":
    unittest.main()
