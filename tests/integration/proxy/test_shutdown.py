"""test_shutdown.py - SIGTERM during proxied calls: a stream the provider is already
answering is drained to its end (a broken turn costs an agent a re-plan), a queued call
gets a clear error at once, and a stream longer than the drain window ends with an error
event, settled; sluiced exits 0 within 5 s either way."""
import signal
import time
import unittest

from harness import Emu, Sluiced, pool_yaml, read_until
# EMU_SLOW: streams of 24 tokens at 12 tokens/s (about 2 s); in queue_config's pool one
# big_stream fills the output bucket, so a second one queues.
from test_queue import EMU_SLOW, big_stream, queue_config


def read_to_close(sock, timeout_s):
    deadline = time.monotonic() + timeout_s
    got = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk
    raise AssertionError("the connection stayed open; got %r" % got[-300:])


class Shutdown(unittest.TestCase):
    def test_a_stream_in_flight_is_drained_and_a_queued_call_is_told_at_once(self):
        with Emu(EMU_SLOW) as emu, Sluiced(queue_config(emu)) as s:
            first = big_stream(s, "first")
            read_until(first, b"message_start", 10)
            queued = big_stream(s, "second")
            read_until(queued, b"event: ping", 5)
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            rest = read_to_close(queued, 3)
            self.assertLess(time.monotonic() - t0, 1.0)
            self.assertIn(b"event: error", rest)
            self.assertIn(b"shutting down", rest)
            body = read_to_close(first, 5)
            self.assertIn(b"message_stop", body, "the stream in flight was cut")
            self.assertNotIn(b"event: error", body)
            s.proc.wait(timeout=5)
            self.assertLess(time.monotonic() - t0, 5.0)
            self.assertEqual(s.proc.returncode, 0)
            settled = [e for e in s.events() if e["event"] == "settled"]
            self.assertEqual([e["agent"] for e in settled], ["first"])
            self.assertEqual(settled[0]["output_tokens"], 24)

    def test_a_stream_longer_than_the_drain_ends_with_an_error_and_is_settled(self):
        slow = list(EMU_SLOW)
        slow[slow.index("--output-tokens") + 1] = "240"  # about 20 s
        with Emu(slow) as emu, Sluiced(
                "pools:\n" + pool_yaml("claude", emu.url, "anthropic",
                                       "input_tpm: 1000000\noutput_tpm: 1000000\nrpm: 10000")) as s:
            sock = big_stream(s, "long")
            read_until(sock, b"content_block_delta", 10)
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            body = read_to_close(sock, 6)
            self.assertIn(b"event: error", body)
            s.proc.wait(timeout=6)
            self.assertLess(time.monotonic() - t0, 5.0)
            self.assertGreater(time.monotonic() - t0, 3.0, "the stream was not given time to finish")
            self.assertEqual(s.proc.returncode, 0)
            settled = [e for e in s.events() if e["event"] == "settled"]
            self.assertEqual(len(settled), 1)
            self.assertGreater(settled[0]["output_tokens"], 0)
            self.assertLess(settled[0]["output_tokens"], 240)


if __name__ == "__main__":
    unittest.main()
