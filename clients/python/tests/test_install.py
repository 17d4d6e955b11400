"""test_install.py - `pip install ./clients/python` works offline: into a fresh virtual
environment, with --no-index, with and without build isolation; the installed package imports."""
import os
import subprocess
import sys
import tempfile
import unittest

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Install(unittest.TestCase):
    def test_pip_installs_offline_into_a_fresh_venv(self):
        with tempfile.TemporaryDirectory(prefix="sluice-venv-") as d:
            venv = os.path.join(d, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
            py = os.path.join(venv, "bin", "python")
            for extra in (["--no-build-isolation"], []):
                p = subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", *extra,
                                    PACKAGE], capture_output=True, text=True, timeout=120,
                                   env=dict(os.environ, PIP_NO_INPUT="1"))
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = subprocess.run([py, "-c", "import os, sluice; print(sluice.__version__, "
                                "sluice.__file__, os.path.exists(os.path.join(os.path.dirname("
                                "sluice.__file__), 'py.typed')))"], capture_output=True,
                               text=True, timeout=30, cwd=d)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(p.stdout.startswith("0.2.0 " + venv), p.stdout)
            self.assertTrue(p.stdout.strip().endswith("True"), p.stdout)  # typed: py.typed


if __name__ == "__main__":
    unittest.main()
