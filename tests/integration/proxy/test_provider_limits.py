"""test_provider_limits.py - `provider_limits:` configures pools from the provider's rate-limit endpoint.

A real sluice-emu serves Anthropic's Admin API (GET /v1/organizations/rate_limits) and
OpenAI's project rate limits from its own settings; sluiced reads them at start, on
reload (and hourly), keeps a lower configured figure as the ceiling, raises
provider_limits_changed when they change, and refuses to start without a usable admin
key, naming the variable.
"""
import json
import os
import subprocess
import tempfile
import time
import unittest

from harness import REAL_KEY, SLUICED, Emu, Sluiced, pool_yaml
import procs

ADMIN_KEY = "sk-ant-admin01-test-0123456789"
ADMIN_ENV = "SLUICE_TEST_ADMIN_KEY"
EMU_ARGS = ["--input-tpm", "40000", "--output-tpm", "8000", "--rpm", "50", "--ttft-ms", "0",
            "--tokens-per-s", "100000", "--latency-spread", "0", "--output-tokens", "8",
            "--admin-key", ADMIN_KEY]


def config(emu, limits="", section=None):
    section = section or ("provider_limits:\n  anthropic:\n    admin_key_env: %s\n" % ADMIN_ENV)
    return "pools:\n" + pool_yaml("claude", emu.url, limits=limits, extra="models: [claude-*]") + section


def post(port, path, body):
    import http.client
    return procs.request(http.client.HTTPConnection("127.0.0.1", port, timeout=10), "POST",
                         path, body)


class ProviderLimits(unittest.TestCase):
    def setUp(self):
        os.environ[ADMIN_ENV] = ADMIN_KEY

    def tearDown(self):
        os.environ.pop(ADMIN_ENV, None)

    def test_adopts_the_published_limits_and_keeps_a_lower_configured_one(self):
        with Emu(EMU_ARGS) as emu, Sluiced(config(emu, "input_tpm: 100000\noutput_tpm: 4000")) as s:
            limits = s.pool("claude")["limits"]
            self.assertEqual(limits["input_tpm"], 40000)   # published, below the configured
            self.assertEqual(limits["output_tpm"], 4000)   # configured, below the published
            self.assertEqual(limits["rpm"], 50)            # published, none configured
            _, err = s.stop()
        self.assertIn("pool 'claude' input_tpm 40000 in force (published 40000", err)
        self.assertIn("pool 'claude' output_tpm 4000 in force (published 8000", err)
        self.assertIn("the configured figure is the ceiling", err)
        self.assertIn("pool 'claude' rpm 50 in force", err)

    def test_a_changed_limit_is_adopted_on_reload_with_an_alert(self):
        with Emu(EMU_ARGS) as emu, Sluiced(config(emu)) as s:
            self.assertEqual(s.pool("claude")["limits"]["input_tpm"], 40000)
            status, _, _ = post(emu.port, "/emu/limits", {"input_tpm": 80000})
            self.assertEqual(status, 200)
            status, _, body = s.request("POST", "/v1/admin/reload")
            self.assertEqual(status, 200, body)
            deadline = time.monotonic() + 10
            while s.pool("claude")["limits"]["input_tpm"] != 80000:
                self.assertLess(time.monotonic(), deadline, "the new limit was not adopted")
                time.sleep(0.1)
            alerts = [e for e in s.events() if e.get("alert") == "provider_limits_changed"]
            self.assertEqual(len(alerts), 1, alerts)
            self.assertTrue(alerts[0]["active"])
            self.assertEqual(alerts[0]["pool"], "claude")
            self.assertEqual(alerts[0]["previous"]["input_tpm"], 40000)
            self.assertEqual(alerts[0]["published"]["input_tpm"], 80000)
            _, _, metrics = s.request("GET", "/metrics")
            self.assertIn(b'sluice_alert{name="provider_limits_changed",pool="claude"} 1', metrics)
            _, err = s.stop()
        self.assertIn("alert provider_limits_changed: pool 'claude' input_tpm published 80000, "
                      "was 40000", err)

    def test_openai_project_limits(self):
        emu_args = EMU_ARGS[:] + ["--tokens-tpm", "30000"]
        section = ("provider_limits:\n  openai:\n    admin_key_env: %s\n    project: proj_test\n"
                   % ADMIN_ENV)
        text = "pools:\n" + pool_yaml("gpt", "%s", provider="openai", extra="models: [gpt-4o]")
        with Emu(emu_args) as emu, Sluiced(text % emu.url + section) as s:
            limits = s.pool("gpt")["limits"]
            self.assertEqual(limits["tokens_tpm"], 30000)
            self.assertEqual(limits["rpm"], 50)

    def test_a_pool_drawing_from_another_group(self):
        # The token counting endpoint's own group, named for a pool under `groups:`.
        section = ("provider_limits:\n  anthropic:\n    admin_key_env: %s\n"
                   "  groups: {counting: token_count, batches: batch}\n" % ADMIN_ENV)
        with Emu(EMU_ARGS + ["--count-tokens-rpm", "7", "--batch-rpm", "9"]) as emu:
            text = ("pools:\n" + pool_yaml("claude", emu.url, extra="models: [claude-*]")
                    + pool_yaml("counting", emu.url, extra="models: [none-*]")
                    + pool_yaml("batches", emu.url, extra="models: [none-*]") + section)
            with Sluiced(text) as s:
                self.assertEqual(s.pool("counting")["limits"]["rpm"], 7)
                self.assertEqual(s.pool("batches")["limits"]["rpm"], 9)
                self.assertEqual(s.pool("claude")["limits"]["rpm"], 50)

    def start_failure(self, emu, env_value):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sluice.yaml")
            with open(path, "w") as f:
                f.write(config(emu))
            env = dict(os.environ, SLUICE_TEST_KEY=REAL_KEY)
            env.pop(ADMIN_ENV, None)
            if env_value is not None:
                env[ADMIN_ENV] = env_value
            p = subprocess.run([SLUICED, "--config", path, "--listen", "127.0.0.1:0"],
                               capture_output=True, text=True, env=env, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        return p.stderr

    def test_bad_values_are_refused_naming_the_key_and_value(self):
        cases = [
            ("pools:\n  p:\n    ramp: maybe\n", "pools.p.ramp: 'maybe' must be auto, on or off"),
            ("pools:\n  p:\n    ramp_factor: 1\n", "pools.p.ramp_factor: '1' must be a number"),
            ("provider_limits:\n  anthropic:\n    admin_key: sk-ant-admin01-x\n",
             "provider_limits.anthropic.admin_key: admin keys are not written in the "
             "configuration"),
            ("provider_limits:\n  openai:\n    admin_key_env: %s\n" % ADMIN_ENV,
             "provider_limits.openai: needs project"),
            ("provider_limits:\n  refresh_s: 5\n  anthropic:\n    admin_key_env: %s\n"
             % ADMIN_ENV, "provider_limits.refresh_s: '5' must be a number between 60 and 86400"),
            ("provider_limits:\n  groups: {p: nothing}\n",
             "provider_limits.groups.p: 'nothing' is not a group type"),
        ]
        for text, want in cases:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "sluice.yaml")
                with open(path, "w") as f:
                    f.write(text)
                p = subprocess.run([SLUICED, "--config", path, "--listen", "127.0.0.1:0"],
                                   capture_output=True, text=True, timeout=30)
            self.assertNotEqual(p.returncode, 0, text)
            self.assertIn(want, p.stderr)

    def test_a_missing_admin_key_is_a_startup_error_naming_the_variable(self):
        with Emu(EMU_ARGS) as emu:
            err = self.start_failure(emu, None)
        self.assertIn("provider_limits.anthropic", err)
        self.assertIn("the environment variable %s (admin_key_env) is not set" % ADMIN_ENV, err)

    def test_a_refused_admin_key_is_a_startup_error_naming_the_variable(self):
        with Emu(EMU_ARGS) as emu:
            err = self.start_failure(emu, "sk-ant-admin01-wrong")
        self.assertIn("refused the admin key in variable %s (HTTP 401)" % ADMIN_ENV, err)


if __name__ == "__main__":
    unittest.main()
