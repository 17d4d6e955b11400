"""test_admin.py - sluice-emu's rate-limit endpoints, its limits knob and its acceleration 429 on the wire."""
import json
import unittest

from harness import FAST, KEY, Emu

ADMIN = "sk-ant-admin01-emu-test"
LIMITS = ["--input-tpm", "40000", "--output-tpm", "8000", "--rpm", "50", "--ttft-ms", "0",
          "--tokens-per-s", "100000", "--latency-spread", "0", "--output-tokens", "4",
          "--admin-key", ADMIN]


class Admin(unittest.TestCase):
    def test_anthropic_rate_limits_list_the_emulators_limits(self):
        with Emu(LIMITS + ["--count-tokens-rpm", "7"]) as emu:
            status, _, body = emu.request("GET", "/v1/organizations/rate_limits",
                                          headers={"x-api-key": ADMIN})
            self.assertEqual(status, 200, body)
            doc = json.loads(body)
            self.assertIsNone(doc["next_page"])
            groups = {g["group_type"]: g for g in doc["data"]}
            m = groups["model_group"]
            self.assertEqual(m["type"], "rate_limit")
            self.assertEqual(m["group"], {"type": "model_group", "id": "rlg_emu_models",
                                          "display_name": "sluice-emu models"})
            self.assertIn("claude-sonnet-4-5-20250929", m["models"])
            self.assertEqual({l["type"]: l["value"] for l in m["limits"]},
                             {"requests_per_minute": 50, "input_tokens_per_minute": 40000,
                              "output_tokens_per_minute": 8000})
            self.assertEqual(groups["token_count"]["limits"],
                             [{"type": "requests_per_minute", "value": 7}])
            # The model's key is not the admin key.
            status, _, body = emu.request("GET", "/v1/organizations/rate_limits",
                                          headers={"x-api-key": KEY})
            self.assertEqual(status, 401)
            self.assertEqual(json.loads(body)["error"]["type"], "authentication_error")

    def test_openai_project_rate_limits_and_the_limits_knob(self):
        with Emu(LIMITS + ["--tokens-tpm", "30000"]) as emu:
            path = "/v1/organization/projects/proj_x/rate_limits"
            auth = {"authorization": "Bearer " + ADMIN}
            doc = json.loads(emu.request("GET", path, headers=auth)[2])
            self.assertEqual(doc["object"], "list")
            gpt = [e for e in doc["data"] if e["model"] == "gpt-4o"][0]
            self.assertEqual(gpt["object"], "project.rate_limit")
            self.assertEqual(gpt["max_requests_per_1_minute"], 50)
            self.assertEqual(gpt["max_tokens_per_1_minute"], 30000)
            self.assertEqual(emu.request("POST", "/emu/limits", {"rpm": -1})[0], 400)
            self.assertEqual(emu.request("POST", "/emu/limits", {"rpm": 70})[0], 200)
            doc = json.loads(emu.request("GET", path, headers=auth)[2])
            self.assertEqual(doc["data"][0]["max_requests_per_1_minute"], 70)
            self.assertEqual(emu.request("GET", "/stats")[0], 200)

    def test_the_acceleration_429_on_the_wire(self):
        args = FAST + ["--accel-idle-s", "60", "--accel-floor-tpm", "1000"]
        with Emu(args) as emu:
            body = {"model": "claude-sonnet-4-5", "max_tokens": 8,
                    "messages": [{"role": "user", "content": "word " * 600}]}
            first = emu.anthropic(body)
            self.assertEqual(first[0], 200, first[2])
            status, headers, payload = emu.anthropic(body)
            self.assertEqual(status, 429)
            err = json.loads(payload)["error"]
            self.assertEqual(err["type"], "rate_limit_error")
            self.assertIn("acceleration limit", err["message"])
            # the code Anthropic's SDKs know it by (RampLimitExceededError)
            self.assertEqual(err["details"], {"error_code": "ramp_limit_exceeded"})
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            stats = json.loads(emu.request("GET", "/stats")[2])
            self.assertEqual(stats["http_429_acceleration"], 1)

    def test_acceleration_flags_are_checked(self):
        from test_server import run_emu
        p = run_emu(["--listen", "127.0.0.1:0", "--input-tpm", "1", "--output-tpm", "1",
                     "--rpm", "1", "--accel-factor", "1"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--accel-factor", p.stderr)


if __name__ == "__main__":
    unittest.main()
