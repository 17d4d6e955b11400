"""The ten-line Python and C examples of docs/client.md ("Python and C side by side"), taken from
the page as written, against a real sluiced with examples/sluice.yaml (what `make run` serves):
three turns each, leased and settled."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

from harness import SOURCE_DIR, Sluiced
from test_examples import example_config

CLIENT_LIB = os.environ.get("SLUICE_CLIENT_LIB", "")


def block(lang, first_line):
    """The fenced `lang` block of docs/client.md whose first line starts with `first_line`."""
    with open(os.path.join(SOURCE_DIR, "docs", "client.md")) as f:
        text = f.read()
    for code in re.findall(r"```%s\n(.*?)```" % lang, text, re.S):
        if code.startswith(first_line):
            return code
    raise AssertionError("docs/client.md has no %s block starting %r" % (lang, first_line))


class DocExamples(unittest.TestCase):
    def check_turns(self, out):
        turns = [line for line in out.splitlines() if line.startswith("turn ")]
        self.assertEqual(len(turns), 3, out)
        for line in turns:
            self.assertRegex(line, r"lease l_\d+ \(charged \d+ in\), refund -?\d+ in")

    def test_python_example(self):
        code = block("python", "# demo.py")
        self.assertLessEqual(len(code.splitlines()), 10)
        with Sluiced(example_config()) as d:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=120, env=dict(os.environ, SLUICE_URL=d.url,
                               PYTHONPATH=os.path.join(SOURCE_DIR, "clients", "python")))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_turns(p.stdout)
        self.assertIn("coordinated mode", p.stdout)

    @unittest.skipUnless(CLIENT_LIB, "SLUICE_CLIENT_LIB is not set")
    def test_c_example(self):
        code = block("c", "/* demo.c")
        with tempfile.TemporaryDirectory() as tmp:
            src, exe = os.path.join(tmp, "demo.c"), os.path.join(tmp, "demo")
            with open(src, "w") as f:
                f.write(code)
            libs = subprocess.run(["pkg-config", "--libs", "libcurl", "libcrypto", "jansson"],
                                  capture_output=True, text=True, check=True).stdout.split()
            subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I",
                            os.path.join(SOURCE_DIR, "include"), src, CLIENT_LIB, *libs,
                            "-lpthread", "-lm", "-o", exe], check=True, timeout=120)
            with Sluiced(example_config()) as d:
                p = subprocess.run([exe], capture_output=True, text=True, timeout=120,
                                   env=dict(os.environ, SLUICE_URL=d.url))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_turns(p.stdout)


if __name__ == "__main__":
    unittest.main()
