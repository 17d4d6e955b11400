"""test_caps_reload.py - a reload keeps what a budget has left: one that names the same
budget does not empty it (it did: every reload lifted then set the caps, and lifting
zeroed the budgets), and a budget a reload gives a capped agent starts full (what it
spent while it had no budget is not owed to the new one)."""
import unittest

from harness import Sluiced

POOL = """
pools:
  default:
    input_tpm: 10000000
    output_tpm: 10000000
    rpm: 10000
    price_input_per_mtok: 3
    price_output_per_mtok: 15
caps:
  agents:
    spender:
      max_concurrent: 4
%s"""


def spend_under_no_budget(test, s):
    """Ten settled calls of "spender" at $0.165 each (50000 in, 1000 out): $1.65."""
    for _ in range(10):
        st, body, _ = s.lease("spender", 50000, 1000)
        test.assertEqual(st, 200, body)
        st, done, _ = s.call("POST", "/v1/leases/%s/settle" % body["lease"],
                             {"input_tokens": 50000, "output_tokens": 1000})
        test.assertEqual(st, 200, done)


class BudgetByReload(unittest.TestCase):
    def test_a_budget_added_by_reload_is_full_whatever_was_spent_before(self):
        with Sluiced(POOL % "") as s:
            spend_under_no_budget(self, s)
            s.write_config("cold_start: full\nevent_log: %s\n%s" % (
                s.event_log, POOL % "      budget_usd_per_hour: 1"))
            st, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 200, body)
            st, body, _ = s.lease("spender", 50000, 1000)
            self.assertEqual(st, 200, body)  # $0.165 of a fresh $1 an hour

    def test_a_reload_naming_the_same_budget_keeps_what_is_left(self):
        cfg = POOL % "      budget_usd_per_hour: 0.3"
        with Sluiced(cfg) as s:
            st, body, _ = s.lease("spender", 5, 1)  # $0.00003 of $0.3
            self.assertEqual(st, 200, body)
            s.write_config("cold_start: full\nevent_log: %s\n%s" % (s.event_log, cfg))
            st, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 200, body)
            st, body, _ = s.lease("spender", 50000, 1000)
            self.assertEqual(st, 200, body)  # $0.165 of the $0.29997 left


if __name__ == "__main__":
    unittest.main()
