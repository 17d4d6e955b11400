"""test_path_dots.py - only the documented proxy paths, byte for byte, leave with the pool's key:
dot segments (raw or percent-encoded), empty segments, backslashes and encoded slashes are refused
with 404 before anything reaches the provider. The upstream here records every request line it
receives (a recording server, not the emulator), so what would leave is seen byte for byte."""
import http.server
import json
import threading
import unittest

from harness import REAL_KEY, Sluiced, pool_yaml, reply_json

LIMITS = "input_tpm: 10000000\noutput_tpm: 10000000\nrpm: 10000"

# What a client may try to make the router normalise into another endpoint. None of these is
# a documented path (docs/proxy.md "Paths"): each must be a 404 that sends nothing upstream.
TRICKS = [
    "/openai/v1/models/..?x=1", "/openai/v1/models/.", "/openai/v1/models/./",
    "/openai/v1/models/..", "/openai/v1/models/%2e%2e", "/openai/v1/models/%2E%2E?x=1",
    "/openai/v1/models/%2e", "/openai/v1/models/%2E", "/openai/v1/models/.%2e",
    "/openai/v1/models/../../v1/files", "/openai/v1/models/..%2Ffiles",
    "/openai/v1/models/a%2Fb", "/openai/v1/models/a%2fb", "/openai/v1/models/a%5Cb",
    "/openai/v1/models/a\\b", "/openai/v1\\models", "/openai/v1/models/",
    "/openai//v1/models", "/openai/v1//models", "/openai/v1/models//gpt-4.1",
    "/openai/./v1/models", "/openai/v1/./models", "/openai/v1/%2e/models",
    "/openai/%761/models", "/openai/v1/%6dodels", "/openai/v1/models%2Fgpt-4.1",
    "/anthropic/v1/models/..", "/anthropic/v1/models/.", "/anthropic/v1/models/%2e%2e",
    "/anthropic/v1/models/%2E", "/anthropic//v1/models", "/anthropic/v1/models/",
    "/anthropic/v1/models/x/..", "/anthropic/api/./hello",
    # The batch APIs' ids follow the same rules (a batch pool is configured below).
    "/openai/v1/files/..", "/openai/v1/files/.", "/openai/v1/files/%2e%2e/content",
    "/openai/v1/files/a%2Fb", "/openai/v1/files/", "/openai/v1//files", "/openai/v1/files/a\\b",
    "/openai/v1/files/file-1/content/", "/openai/v1/files/file-1/%63ontent",
    "/openai/v1/batches/..", "/openai/v1/batches/%2E%2E", "/openai/v1/batches/a%2fb",
    "/anthropic/v1/messages/batches/%2e%2e/results", "/anthropic/v1/messages/batches/a%5Cb",
    "/anthropic/v1/messages/batches/x/", "/anthropic/v1/messages/batches//results",
    "/anthropic/v1/messages/batches/./results", "/anthropic/v1/files",
]


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with an empty model list and records its request line and key."""
    seen = []

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        key = self.headers.get("x-api-key") or self.headers.get("authorization") or ""
        Recorder.seen.append((self.path, key))
        reply_json(self, {"object": "list", "data": [], "id": "x", "type": "model"})

    def log_message(self, *args):
        pass


class PathDots(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        threading.Thread(target=cls.upstream.serve_forever, daemon=True).start()
        url = "http://127.0.0.1:%d" % cls.upstream.server_address[1]
        cls.sluiced = Sluiced("pools:\n%s%s%s%s" % (
            pool_yaml("claude", url, "anthropic", LIMITS), pool_yaml("gpt", url, "openai", LIMITS),
            pool_yaml("claude-batch", url, "anthropic", "rpm: 10000", "batch: true"),
            pool_yaml("gpt-batch", url, "openai", "rpm: 10000", "batch: true")))

    @classmethod
    def tearDownClass(cls):
        cls.sluiced.stop()
        cls.upstream.shutdown()
        cls.upstream.server_close()

    def get(self, path):
        headers = ({"authorization": "Bearer t"} if path.startswith("/openai")
                   else {"x-api-key": "t", "anthropic-version": "2023-06-01"})
        return self.sluiced.request("GET", path, headers=headers)

    def test_documented_model_paths_reach_the_provider_byte_for_byte(self):
        Recorder.seen.clear()
        for path, upstream in (("/openai/v1/models", "/v1/models"),
                               ("/openai/models?limit=2", "/v1/models?limit=2"),
                               ("/openai/v1/models/gpt-4.1", "/v1/models/gpt-4.1"),
                               ("/anthropic/v1/models/claude-sonnet-4-5",
                                "/v1/models/claude-sonnet-4-5"),
                               ("/openai/v1/models/ft%3Agpt-4.1%3Aacme",
                                "/v1/models/ft:gpt-4.1:acme")):
            status, _, payload = self.get(path)
            self.assertEqual(status, 200, (path, payload))
            self.assertEqual(Recorder.seen[-1][0], upstream, path)
            self.assertIn(REAL_KEY, Recorder.seen[-1][1], path)

    def test_batch_paths_reach_the_provider_byte_for_byte_with_their_ids_decoded(self):
        Recorder.seen.clear()
        for path, upstream in (("/openai/v1/files/file-abc", "/v1/files/file-abc"),
                               ("/openai/files/file-abc/content", "/v1/files/file-abc/content"),
                               ("/openai/v1/files/ft%3Afile", "/v1/files/ft:file"),
                               ("/openai/v1/batches?limit=2", "/v1/batches?limit=2"),
                               ("/openai/v1/batches/batch_1", "/v1/batches/batch_1"),
                               ("/anthropic/v1/messages/batches/msgbatch_1/results",
                                "/v1/messages/batches/msgbatch_1/results"),
                               ("/anthropic/messages/batches", "/v1/messages/batches")):
            status, _, payload = self.get(path)
            self.assertEqual(status, 200, (path, payload))
            self.assertEqual(Recorder.seen[-1][0], upstream, path)
            self.assertIn(REAL_KEY, Recorder.seen[-1][1], path)

    def test_dot_segments_empty_segments_and_encoded_slashes_never_leave(self):
        Recorder.seen.clear()
        answered = []
        for path in TRICKS:
            status, _, payload = self.get(path)
            message = json.loads(payload).get("error", {}).get("message", "")
            if status != 404 or "not an endpoint" not in message:
                answered.append((path, status))
        self.assertEqual(answered, [], "paths that are not documented were served")
        self.assertEqual(Recorder.seen, [], "a path that is not documented reached the provider")


if __name__ == "__main__":
    unittest.main()
