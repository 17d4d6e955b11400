"""test_tls.py - the proxy verifies the provider's certificate against the CA file in the config."""
import json
import ssl
import tempfile
import unittest

from harness import REAL_KEY, Emu, Sluiced, message, parse_sse, pool_yaml
import procs  # noqa: E402  (tests/integration/procs.py, on the path by harness)

LIMITS = "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000"


class Tls(unittest.TestCase):
    def test_calls_go_over_https_verified_with_the_configured_ca(self):
        with tempfile.TemporaryDirectory(prefix="sluice-proxy-tls-") as d:
            ca, crt, key = procs.make_ca(d, "sluice proxy test CA")
            with Emu(tls=(crt, key)) as emu:
                self.assertEqual(emu.scheme, "https")
                cfg = "pools:\n" + pool_yaml("trusted", emu.url, "anthropic", LIMITS,
                                             "ca_file: " + ca)
                cfg += pool_yaml("untrusted", emu.url, "anthropic", LIMITS)
                with Sluiced(cfg) as s:
                    status, _, payload = s.anthropic(message(), agent="tls-1")
                    self.assertEqual(status, 200, payload)
                    self.assertEqual(s.agent("tls-1")["leases"], 0)
                    # Without the CA the certificate is refused: 502, and the lease is
                    # cancelled (the provider never saw the call).
                    status, _, payload = s.anthropic(message(), agent="tls-2",
                                                     extra={"x-sluice-pool": "untrusted"})
                    self.assertEqual(status, 502, payload)
                    self.assertEqual(json.loads(payload)["type"], "error")
                    self.assertIn("certificate", json.loads(payload)["error"]["message"].lower())
                    a = s.agent("tls-2")
                    self.assertEqual((a["leases"], a["tokens_in"]), (0, 0))
                    cancelled = [e for e in s.events() if e["event"] == "cancelled"]
                    self.assertEqual(len(cancelled), 1)

    def test_streams_go_over_https(self):
        with tempfile.TemporaryDirectory(prefix="sluice-proxy-tls-") as d:
            ca, crt, key = procs.make_ca(d, "sluice proxy test CA")
            with Emu(tls=(crt, key)) as emu:
                cfg = "pools:\n" + pool_yaml("trusted", emu.url, "anthropic", LIMITS,
                                             "ca_file: " + ca)
                with Sluiced(cfg) as s:
                    # Several calls, so that the upstream connection is reused between
                    # streams and plain answers.
                    for i, stream in enumerate((True, True, False, True)):
                        status, _, payload = s.anthropic(message(stream=stream), agent="tls-3")
                        self.assertEqual(status, 200, payload)
                        if stream:
                            self.assertEqual(parse_sse(payload)[-1][0], "message_stop", i)
                        else:
                            self.assertEqual(json.loads(payload)["type"], "message", i)
                    a = s.agent("tls-3")
                    self.assertEqual(a["leases"], 0)
                    self.assertGreater(a["tokens_out"], 0)
                ctx = ssl.create_default_context(cafile=ca)
                st = emu.stats(context=ctx)
                self.assertEqual(st["http"]["messages"], 4)
                self.assertEqual(st["http"]["client_gone"], 0)

    def test_an_unreachable_provider_is_a_502_and_the_lease_is_refunded(self):
        with Sluiced("pools:\n" + pool_yaml("dead", "http://127.0.0.1:9", "anthropic", LIMITS)) as s:
            status, _, payload = s.anthropic(message(), agent="lost")
            self.assertEqual(status, 502, payload)
            self.assertEqual(s.agent("lost")["leases"], 0)
            self.assertEqual([e["event"] for e in s.events() if e["event"] == "cancelled"],
                             ["cancelled"])


if __name__ == "__main__":
    unittest.main()
