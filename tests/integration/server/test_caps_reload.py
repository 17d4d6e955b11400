"""test_caps_reload.py - a budget given by a reload to a capped agent starts full: what the
agent spent while it had no budget is not owed to the new one (its leases under only a
max_concurrent cap do not leave it refused budget_exhausted for hours)."""
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


class BudgetByReload(unittest.TestCase):
    def test_a_budget_added_by_reload_is_full_whatever_was_spent_before(self):
        with Sluiced(POOL % "") as s:
            # $0.165 each (50000 in, 1000 out), ten of them: $1.65 spent under no budget.
            for _ in range(10):
                st, body, _ = s.lease("spender", 50000, 1000)
                self.assertEqual(st, 200, body)
                st, done, _ = s.call("POST", "/v1/leases/%s/settle" % body["lease"],
                                     {"input_tokens": 50000, "output_tokens": 1000})
                self.assertEqual(st, 200, done)
            s.write_config("cold_start: full\nevent_log: %s\n%s" % (
                s.event_log, POOL % "      budget_usd_per_hour: 1"))
            st, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 200, body)
            st, body, _ = s.lease("spender", 50000, 1000)
            self.assertEqual(st, 200, body)  # $0.165 of a fresh $1 an hour


if __name__ == "__main__":
    unittest.main()
