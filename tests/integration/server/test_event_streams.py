"""test_event_streams.py - /v1/events is bounded: subscribers per token and in all, and a
subscriber that does not read is let go without slowing anyone (docs/api.md "Events").

Every wait is bounded; no timing gates a result.
"""
import socket
import unittest

from harness import KeepAlive, Sluiced, refused_config, wait_until

CONFIG = """
auth:
  admin_token: admin-secret-1
  tokens:
    - {token: fleet-token, agent_prefix: "m-"}
    - {token: bob-token, agent: bob}
pools:
  default:
    input_tpm: 100000000
    output_tpm: 100000000
%s
"""


def subscribe(port, token, rcvbuf=None):
    """Opens /v1/events and reads the answer's head; returns (status, socket, head)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(("GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               "Authorization: Bearer %s\r\n\r\n" % (port, token)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    status = int(head.split(b" ")[1]) if head else 0
    return status, s, head


class Bounds(unittest.TestCase):
    def test_one_token_past_its_stream_bound_is_refused_429_naming_it(self):
        with Sluiced(CONFIG % "") as s:
            held = []
            try:
                for _ in range(4):  # the default events.max_streams_per_token
                    st, sock, _ = subscribe(s.port, "fleet-token")
                    held.append(sock)
                    self.assertEqual(st, 200)
                st, sock, head = subscribe(s.port, "fleet-token")
                held.append(sock)
                self.assertEqual(st, 429, head)
                body = sock.recv(65536).decode()
                self.assertIn("events.max_streams_per_token", body)
                self.assertIn("too_many_streams", body)
                # Another token is not held back by the first one's streams.
                st, sock, _ = subscribe(s.port, "bob-token")
                held.append(sock)
                self.assertEqual(st, 200)
                self.assertEqual(s.metric("sluice_event_streams"), 5)
                # A closed stream frees its place.
                held[0].close()
                self.assertTrue(wait_until(lambda: s.metric("sluice_event_streams") == 4, 5))
                st, sock, _ = subscribe(s.port, "fleet-token")
                held.append(sock)
                self.assertEqual(st, 200)
            finally:
                for h in held:
                    h.close()

    def test_the_total_bound_holds_across_tokens_and_the_admin(self):
        with Sluiced(CONFIG % "events: {max_streams: 3, max_streams_per_token: 2}") as s:
            held = []
            try:
                for tok in ("fleet-token", "fleet-token", "bob-token"):
                    st, sock, _ = subscribe(s.port, tok)
                    held.append(sock)
                    self.assertEqual(st, 200)
                for tok in ("bob-token", "admin-secret-1"):
                    st, sock, head = subscribe(s.port, tok)
                    held.append(sock)
                    self.assertEqual(st, 429, head)
                    self.assertIn("events.max_streams is 3", sock.recv(65536).decode())
            finally:
                for h in held:
                    h.close()

    def test_a_bad_bound_is_refused_naming_the_key(self):
        self.assertIn("events.max_streams_per_token: '0' must be an integer between 1",
                      refused_config(CONFIG % "events: {max_streams_per_token: 0}"))
        self.assertIn("unknown key 'stream_buffer'",
                      refused_config(CONFIG % "events: {stream_buffer: 10}"))


class SlowReaders(unittest.TestCase):
    def test_a_subscriber_that_does_not_read_is_disconnected_and_others_served(self):
        with Sluiced(CONFIG % "events: {stream_buffer_bytes: 4096}") as s:
            st, slow, _ = subscribe(s.port, "fleet-token", rcvbuf=1024)
            self.assertEqual(st, 200)
            st, reader, _ = subscribe(s.port, "bob-token")
            self.assertEqual(st, 200)
            conn = KeepAlive(s, "fleet-token")
            dropped = False
            for _ in range(200):  # bounded: 200 x 25 leases, far past what any buffer holds
                for _ in range(25):
                    self.assertEqual(conn.lease_and_cancel("m-1")[0], 200)
                if s.metric("sluice_event_streams_dropped_total") == 1:
                    dropped = True
                    break
            self.assertTrue(dropped, "the non-reading subscriber is still held")
            self.assertEqual(s.metric("sluice_event_streams"), 1)
            # The slow subscriber's socket ends once what was sent is read.
            slow.settimeout(10)
            ended = False
            for _ in range(100000):
                try:
                    if not slow.recv(65536):
                        ended = True
                        break
                except ConnectionResetError:
                    ended = True
                    break
            self.assertTrue(ended)
            # The reading one, of another token, still gets pool-wide events and is open.
            self.assertEqual(s.metric("sluice_event_streams"), 1)
            conn.close()
            slow.close()
            reader.close()


if __name__ == "__main__":
    unittest.main()
