"""test_estimator.py - the proxy's estimator never downgrades silently: the tokenizer
vocabulary is loaded at start (a missing one is a startup error naming its path) unless
the configuration says `proxy.estimator: bytes`; /metrics says which is in use and from
where; a reload to the tokenizer without a vocabulary is refused."""
import os
import signal
import subprocess
import tempfile
import unittest
from unittest import mock

from harness import SLUICED, Sluiced, refused_config, wait_until

POOL = "pools:\n  default:\n    input_tpm: 6000\n"
MISSING = "/nonexistent/sluice-test/claude.json"


def estimator_line(s):
    _, text, _ = s.call("GET", "/metrics")
    lines = [l for l in text.splitlines() if l.startswith("sluice_proxy_estimator_info{")]
    assert len(lines) == 1, lines
    return lines[0]


class Estimator(unittest.TestCase):
    def test_a_missing_vocabulary_is_a_startup_error_naming_its_path(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(POOL)
            f.flush()
            p = subprocess.run([SLUICED, "--config", f.name, "--listen", "127.0.0.1:0"],
                               capture_output=True, text=True, timeout=20,
                               env=dict(os.environ, SLUICE_VOCAB=MISSING))
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(MISSING, p.stderr)
        self.assertIn("proxy.estimator: bytes", p.stderr)
        self.assertNotIn("listening on", p.stdout + p.stderr)

    def test_the_tokenizer_is_loaded_and_named_in_the_metrics(self):
        with Sluiced(POOL) as s:
            line = estimator_line(s)
            self.assertIn('estimator="tokenizer"', line)
            self.assertRegex(line, r'vocabulary="[^"]*claude\.json"\} 1$')

    def test_bytes_said_explicitly_starts_without_a_vocabulary(self):
        with mock.patch.dict(os.environ, {"SLUICE_VOCAB": MISSING}):
            s = Sluiced(POOL + "proxy:\n  estimator: bytes\n")
        with s:
            self.assertEqual(estimator_line(s),
                             'sluice_proxy_estimator_info{estimator="bytes",vocabulary=""} 1')
            st, body, _ = s.lease("a", 10)
            self.assertEqual(st, 200, body)

    def test_a_reload_to_the_tokenizer_without_a_vocabulary_is_refused(self):
        with mock.patch.dict(os.environ, {"SLUICE_VOCAB": MISSING}):
            s = Sluiced(POOL + "proxy:\n  estimator: bytes\n")
        with s:
            s.write_config(POOL.replace("6000", "7000"))
            st, body, _ = s.call("POST", "/v1/admin/reload")
            self.assertEqual(st, 400, body)
            self.assertIn(MISSING, str(body))
            self.assertEqual(s.pool()["limits"]["input_tpm"], 6000)
            self.assertIn('estimator="bytes"', estimator_line(s))

    def test_an_unknown_estimator_names_the_key_and_value(self):
        out = refused_config(POOL + "proxy:\n  estimator: words\n")
        self.assertIsNotNone(out)
        self.assertIn("proxy.estimator", out)
        self.assertIn("'words' must be tokenizer or bytes", out)


if __name__ == "__main__":
    unittest.main()
