"""test_teams.py - teams' weights from the config order the queue of sluiced (memory backend)."""
import subprocess
import tempfile
import unittest

from harness import SLUICED, Sluiced
from teams_case import CAPS, POOL, check_positions


class Teams(unittest.TestCase):
    def test_team_weights_from_the_config_order_the_queue(self):
        with Sluiced("pools:\n" + POOL + CAPS) as s:
            check_positions(self, s)

    def test_bad_team_weight_names_the_field_and_value(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("caps:\n  teams:\n    a:\n      weight: 0\n")
            f.flush()
            p = subprocess.run([SLUICED, "--config", f.name, "--check-config"], capture_output=True,
                               text=True, timeout=10)
            self.assertNotEqual(p.returncode, 0)
            out = p.stderr + p.stdout
            self.assertIn(":4:", out)
            self.assertIn("caps.teams.a.weight", out)
            self.assertIn("weight 0", out)


if __name__ == "__main__":
    unittest.main()
