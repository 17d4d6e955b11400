"""test_transport.py - sluiced's HTTP/1.1 transport over raw sockets: pipelining, chunked
bodies, 100-continue, connection handling, HEAD, and the errors it answers itself (each a
JSON error naming what is wrong, after which nothing in the pool has changed)."""
import json
import random
import socket
import time
import unittest

from harness import Sluiced


class Conn:
    """A raw client connection that reads whole HTTP/1.1 responses."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise EOFError("connection closed")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode("latin-1")

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head_only=False):
        """(status, headers with lower-case names, body bytes)."""
        status = int(self._line().split(" ")[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if head_only or status == 100:
            return status, headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._line().split(";")[0], 16)
                if size == 0:
                    self._line()
                    return status, headers, body
                body += self._take(size)
                self._take(2)
        return status, headers, self._take(int(headers.get("content-length", "0")))

    def closed_by_server(self, timeout_s=5):
        self.s.settimeout(timeout_s)
        try:
            return self.s.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            return False

    def close(self):
        self.s.close()


LEASE = b'{"agent":"a1","input_tokens":100,"output_tokens":10}'


def post(path, body, extra=""):
    return (("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             "Content-Length: %d\r\n%s\r\n" % (path, len(body), extra)).encode() + body)


class Transport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Sluiced("pools:\n  default:\n    input_tpm: 600000\n    output_tpm: 600000\n")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def conn(self):
        c = Conn(self.d.port)
        self.addCleanup(c.close)
        return c

    def test_pipelined_requests_are_answered_in_order(self):
        c = self.conn()
        c.send(post("/v1/leases", LEASE) + b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
               b"GET /v1/pools/nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s1, _, b1 = c.response()
        s2, _, b2 = c.response()
        s3, _, b3 = c.response()
        self.assertEqual((s1, s2, s3), (200, 200, 404))
        self.assertEqual(json.loads(b1)["status"], "granted")
        self.assertEqual(json.loads(b2), {"status": "ok"})
        self.assertEqual(json.loads(b3)["error"]["type"], "not_found")

    def test_a_request_sent_byte_by_byte_is_served(self):
        c = self.conn()
        for b in post("/v1/leases", LEASE):
            c.send(bytes([b]))
        status, _, body = c.response()
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["status"], "granted")

    def test_a_chunked_body_is_decoded(self):
        c = self.conn()
        c.send(b"POST /v1/leases HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: application/json\r\n\r\n")
        for i in range(0, len(LEASE), 7):
            part = LEASE[i:i + 7]
            c.send(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
        c.send(b"0\r\nX-Trailer: t\r\n\r\n")
        status, _, body = c.response()
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["charged"]["input_tokens"], 100)

    def test_expect_100_continue_is_answered_before_the_body(self):
        c = self.conn()
        head = post("/v1/leases", LEASE, "Expect: 100-continue\r\n")[:-len(LEASE)]
        c.send(head)
        status, _, _ = c.response()
        self.assertEqual(status, 100)
        c.send(LEASE)
        status, _, body = c.response()
        self.assertEqual(status, 200, body)

    def test_keep_alive_and_close(self):
        c = self.conn()
        for _ in range(3):  # one connection, several requests
            c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            status, h, _ = c.response()
            self.assertEqual(status, 200)
            self.assertNotIn("connection", h)
            self.assertIn("date", h)
        c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        status, h, _ = c.response()
        self.assertEqual((status, h.get("connection")), (200, "close"))
        self.assertTrue(c.closed_by_server())
        old = self.conn()
        old.send(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, h, _ = old.response()
        self.assertEqual((status, h.get("connection")), (200, "close"))
        self.assertTrue(old.closed_by_server())
        ka = self.conn()
        ka.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        status, h, _ = ka.response()
        self.assertEqual((status, h.get("connection")), (200, "keep-alive"))
        ka.send(b"GET /healthz HTTP/1.0\r\n\r\n")
        self.assertEqual(ka.response()[0], 200)

    def test_head_answers_without_a_body(self):
        c = self.conn()
        c.send(b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, h, _ = c.response(head_only=True)
        self.assertEqual(status, 200)
        self.assertGreater(int(h["content-length"]), 0)
        c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # nothing stray in between
        self.assertEqual(c.response()[2], b'{"status":"ok"}\n')

    def test_a_method_the_path_does_not_allow_is_405_with_allow(self):
        c = self.conn()
        c.send(b"PATCH /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, h, body = c.response()
        self.assertEqual((status, h["allow"]), (405, "GET"))
        self.assertEqual(json.loads(body)["error"]["type"], "method_not_allowed")

    def assert_refused(self, data, status, etype, words):
        before = self.d.pool()
        c = self.conn()
        c.send(data)
        got, h, body = c.response()
        err = json.loads(body)["error"]
        self.assertEqual((got, err["type"]), (status, etype), body)
        self.assertIn(words, err["message"])
        self.assertEqual(h.get("connection"), "close")
        self.assertTrue(c.closed_by_server())
        after = self.d.pool()
        for k in ("leases_in_flight", "queue", "totals"):
            self.assertEqual(before[k], after[k], k)

    def test_malformed_requests_get_a_json_error_and_the_connection_closes(self):
        self.assert_refused(b"BREW /healthz HTTP/1.1\r\n\r\n", 400, "invalid_request",
                            "invalid HTTP method")
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n", 400,
                            "invalid_request", "whitespace between a field name and its colon")
        self.assert_refused(b"GET /healthz HTTP/2.0\r\n\r\n", 505, "invalid_request", "HTTP/2.0")
        self.assert_refused(b"POST /v1/leases HTTP/1.1\r\nContent-Length: 3\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
                            "invalid_request", "unexpected content-length header")
        self.assert_refused(b"POST /v1/leases HTTP/1.1\r\nContent-Length: x1\r\n\r\n", 400,
                            "invalid_request", "invalid character in content-length header")
        self.assert_refused(b"POST /v1/leases HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"zz\r\n", 400, "invalid_request", "chunk size")
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n",
                            431, "invalid_request", "over 32768 bytes")

    def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(self):
        self.assert_refused(b"POST /v1/leases HTTP/1.1\r\nContent-Length: 1073741824\r\n\r\n",
                            413, "body_too_large", "1073741824 bytes is over the limit")

    def test_garbage_and_cut_requests_never_take_the_server_down(self):
        # 300 seeded blobs: random bytes, valid requests cut or corrupted at random, some
        # pipelined; each on its own connection, closed at once or after reading a bit.
        rng = random.Random(3)
        valid = [post("/v1/leases", LEASE), b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                 b"POST /v1/leases HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n"]
        for i in range(300):
            kind = rng.randrange(4)
            if kind == 0:
                blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
            else:
                blob = bytearray(rng.choice(valid) * rng.randrange(1, 3))
                for _ in range(rng.randrange(0, 4)):
                    blob[rng.randrange(len(blob))] = rng.randrange(256)
                if kind == 2:
                    blob = blob[:rng.randrange(len(blob))]
                blob = bytes(blob)
            s = socket.create_connection(("127.0.0.1", self.d.port), timeout=5)
            try:
                s.sendall(blob)
                if rng.random() < 0.5:
                    s.settimeout(0.05)
                    try:
                        s.recv(4096)
                    except (socket.timeout, ConnectionResetError):
                        pass
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                s.close()
        c = self.conn()
        c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        self.assertEqual(c.response()[0], 200)
        self.assertIsNone(self.d.proc.poll(), "sluiced exited")

    def test_an_idle_client_does_not_hold_up_others(self):
        idle = self.conn()
        idle.send(b"POST /v1/leases HTTP/1.1\r\nContent-Length: 50\r\n\r\n{")  # and stops
        c = self.conn()
        c.send(post("/v1/leases", LEASE))
        self.assertEqual(c.response()[0], 200)
        idle.close()
        time.sleep(0.05)
        c.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        self.assertEqual(c.response()[0], 200)


if __name__ == "__main__":
    unittest.main()
