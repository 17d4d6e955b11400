"""halfclose.py - a raw client that sends whole requests, then shuts its write side
(shutdown(SHUT_WR)), and reads every answer until the server closes (HTTP/1.1 allows it)."""
import json
import socket
import sys
import time

from harness import wait_until


def lease_request(agent, tokens, wait_s=0, close=False):
    body = ('{"agent":"%s","input_tokens":%d,"output_tokens":1,"wait":%g}'
            % (agent, tokens, wait_s)).encode()
    return (b"POST /v1/leases HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s\r\n" % (len(body), b"Connection: close\r\n" if close else b"")
            + body)


def send_and_half_close(port, data):
    """Sends `data` on a fresh socket and shuts its write side; returns the socket."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    return s


def read_to_close(s, timeout_s):
    """Everything `s` receives until the server closes it or `timeout_s` passes."""
    data = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def answers(data):
    """[(status, body bytes)] of the answers in `data`, interim 1xx answers included."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        length = 0
        for line in lines[1:]:
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        out.append((status, rest[:length]))
        data = rest[length:]
    return out


def final_statuses(data):
    """The statuses of the final (non-1xx) answers in `data`."""
    return [st for st, _ in answers(data) if st >= 200]


class HalfClosedCases:
    """The cases both backends must pass; `self.s` is a running sluiced whose default pool
    holds 5100 input tokens (SMALL_POOL) from full buckets."""

    def in_flight(self):
        return self.s.pool()["leases_in_flight"]

    def settle_all(self, data):
        for st, body in answers(data):
            if st == 200:
                self.s.call("DELETE", "/v1/leases/" + json.loads(body)["lease"])

    def test_a_half_closed_lease_request_is_answered_and_charged_once(self):
        before = self.in_flight()
        s = send_and_half_close(self.s.port, lease_request("half", 1000))
        data = read_to_close(s, 10)
        self.assertEqual(final_statuses(data), [200], data)
        self.assertEqual(self.in_flight(), before + 1)
        lease = json.loads(answers(data)[-1][1])["lease"]
        status, _, _ = self.s.call("DELETE", "/v1/leases/" + lease)
        self.assertEqual(status, 200)
        self.assertEqual(self.in_flight(), before)

    def test_a_half_closed_pipelined_pair_gets_both_answers(self):
        before = self.in_flight()
        s = send_and_half_close(self.s.port,
                                lease_request("pair-a", 100) + lease_request("pair-b", 100))
        data = read_to_close(s, 10)
        self.assertEqual(final_statuses(data), [200, 200], data)
        leases = {json.loads(b)["lease"] for st, b in answers(data) if st == 200}
        self.assertEqual(len(leases), 2, data)
        self.assertEqual(self.in_flight(), before + 2)
        self.settle_all(data)
        self.assertEqual(self.in_flight(), before)

    def test_a_half_closed_long_poll_keeps_its_place_and_hears_its_grant(self):
        status, hold, _ = self.s.lease("holder", 5000)
        self.assertEqual(status, 200, hold)
        before = self.in_flight()
        s = send_and_half_close(self.s.port, lease_request("patient", 3000, wait_s=20))
        self.assertTrue(wait_until(lambda: self.s.pool()["queue"]["depth"] == 1, 5))
        time.sleep(0.5)  # a client taken for gone would have left the queue by now
        self.assertEqual(self.s.pool()["queue"]["depth"], 1)
        self.s.call("DELETE", "/v1/leases/" + hold["lease"])
        data = read_to_close(s, 10)
        # An interim 100 Continue (which a closed socket answers with a reset), then the grant.
        self.assertEqual([st for st, _ in answers(data)], [100, 200], data)
        self.assertEqual(self.in_flight(), before)  # the holder's went, the waiter's came
        self.settle_all(data)

    def test_a_closed_long_poll_still_gives_up_its_place_within_1s(self):
        status, hold, _ = self.s.lease("holder2", 5000)
        self.assertEqual(status, 200, hold)
        s = socket.create_connection(("127.0.0.1", self.s.port), timeout=10)
        s.sendall(lease_request("leaver", 3000, wait_s=20))
        self.assertTrue(wait_until(lambda: self.s.pool()["queue"]["depth"] == 1, 5))
        s.close()
        t0 = time.monotonic()
        self.assertTrue(wait_until(lambda: self.s.pool()["queue"]["depth"] == 0, 1.0))
        print("\n  a closed long-poll left the queue after %.3f s (%s)"
              % (time.monotonic() - t0, type(self).__name__), file=sys.stderr)
        before = self.in_flight()
        self.s.call("DELETE", "/v1/leases/" + hold["lease"])
        time.sleep(0.3)
        self.assertEqual(self.in_flight(), before - 1)  # nothing granted to the leaver
