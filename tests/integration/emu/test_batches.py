"""sluice-emu's embeddings, moderations and batch APIs at the HTTP level: the errors a provider
gives (naming the field), auth, the batch life cycle and its bill, the batch limits. The
official SDKs' own calls are in tests/e2e/proxy_endpoints.test.mjs."""
import json
import time
import unittest

from harness import FAST, KEY, ANTHROPIC_VERSION, Emu, SharedEmu, message

OPENAI = {"authorization": "Bearer " + KEY, "content-type": "application/json"}
ANTHROPIC = {"x-api-key": KEY, "anthropic-version": ANTHROPIC_VERSION,
             "content-type": "application/json"}


def batch_of(n, prefix="r"):
    return {"requests": [{"custom_id": "%s%d" % (prefix, i), "params": message("hi %d" % i)}
                         for i in range(n)]}


class Endpoints(SharedEmu):
    def call(self, method, path, body=None, headers=OPENAI):
        status, h, payload = self.emu.request(method, path, body, headers)
        return status, h, json.loads(payload) if payload[:1] in (b"{", b"[") else payload

    def test_embeddings_refuse_bad_input_naming_the_field(self):
        for body, field in (({"input": "x"}, "model"),
                            ({"model": "text-embedding-3-small", "input": []}, "input"),
                            ({"model": "text-embedding-3-small", "input": ["a", 3]}, "input[1]"),
                            ({"model": "text-embedding-3-small", "input": "a", "dimensions": 5000},
                             "dimensions"),
                            ({"model": "text-embedding-3-small", "input": "a",
                              "encoding_format": "hex"}, "encoding_format")):
            status, _, err = self.call("POST", "/v1/embeddings", body)
            self.assertEqual(status, 400, body)
            self.assertIn(field, err["error"]["message"])
        status, _, ok = self.call("POST", "/v1/embeddings",
                                  {"model": "text-embedding-3-small", "input": "a",
                                   "dimensions": 8, "encoding_format": "float"})
        self.assertEqual(status, 200, ok)
        self.assertEqual(len(ok["data"][0]["embedding"]), 8)
        status, _, _ = self.call("POST", "/v1/embeddings", {"model": "m", "input": "a"},
                                 {"authorization": "Bearer wrong", "content-type": "application/json"})
        self.assertEqual(status, 401)
        status, _, _ = self.call("GET", "/v1/embeddings")
        self.assertEqual(status, 405)

    def test_files_refuse_what_is_not_an_upload_and_unknown_ids(self):
        status, _, err = self.call("POST", "/v1/files", {"purpose": "batch"})
        self.assertEqual(status, 400)
        self.assertIn("multipart", err["error"]["message"])
        body = (b"--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nnope\r\n"
                b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nx\r\n"
                b"--b--\r\n")
        status, _, err = self.raw_upload(body)
        self.assertEqual(status, 400)
        self.assertIn("purpose", err["error"]["message"])
        status, _, err = self.call("GET", "/v1/files/file-nope/content")
        self.assertEqual(status, 404)
        self.assertIn("file-nope", err["error"]["message"])

    def raw_upload(self, body):
        status, h, payload = self.emu.request(
            "POST", "/v1/files", headers={"authorization": "Bearer " + KEY,
                                          "content-type": "multipart/form-data; boundary=b"},
            raw=body)
        return status, h, json.loads(payload)

    def test_message_batches_refuse_bad_requests_naming_the_field(self):
        for body, what in (({"requests": []}, "requests"),
                           ({"requests": [{"custom_id": "a b", "params": {}}]}, "custom_id"),
                           ({"requests": [{"custom_id": "a", "params": {}},
                                          {"custom_id": "a", "params": {}}]}, "not unique"),
                           ({"requests": [{"custom_id": "a"}]}, "params")):
            status, _, err = self.call("POST", "/v1/messages/batches", body, ANTHROPIC)
            self.assertEqual(status, 400, body)
            self.assertEqual(err["error"]["type"], "invalid_request_error")
            self.assertIn(what, err["error"]["message"])
        status, _, err = self.call("GET", "/v1/messages/batches/msgbatch_nope", None, ANTHROPIC)
        self.assertEqual(status, 404)
        self.assertEqual(err["error"]["type"], "not_found_error")


class Lifecycle(unittest.TestCase):
    def test_a_batch_is_processed_after_its_time_billed_apart_and_deleted_once_ended(self):
        with Emu(FAST + ["--batch-seconds", "0.3"]) as emu:
            status, _, payload = emu.request("POST", "/v1/messages/batches",
                                             batch_of(2), ANTHROPIC)
            created = json.loads(payload)
            self.assertEqual(created["processing_status"], "in_progress")
            bid = created["id"]
            # Not ended yet: no results, and it cannot be deleted.
            status, _, payload = emu.request("GET", "/v1/messages/batches/%s/results" % bid,
                                             None, ANTHROPIC)
            self.assertEqual(status, 400, payload)
            status, _, _ = emu.request("DELETE", "/v1/messages/batches/" + bid, None, ANTHROPIC)
            self.assertEqual(status, 400)
            before = emu.stats()
            time.sleep(0.4)
            status, _, payload = emu.request("GET", "/v1/messages/batches/" + bid, None, ANTHROPIC)
            ended = json.loads(payload)
            self.assertEqual(ended["processing_status"], "ended")
            self.assertEqual(ended["request_counts"]["succeeded"], 2)
            status, h, payload = emu.request("GET", "/v1/messages/batches/%s/results" % bid,
                                             None, ANTHROPIC)
            lines = [json.loads(l) for l in payload.decode().splitlines()]
            billed = emu.stats()
            self.assertEqual(billed["batches"]["anthropic"]["output_tokens"],
                             sum(l["result"]["message"]["usage"]["output_tokens"] for l in lines))
            self.assertEqual(billed["batches"]["price_factor"], 0.5)
            # Batches are billed apart from the synchronous calls.
            self.assertEqual(billed["tokens"], before["tokens"])
            status, _, payload = emu.request("DELETE", "/v1/messages/batches/" + bid, None,
                                             ANTHROPIC)
            self.assertEqual(json.loads(payload)["type"], "message_batch_deleted")

    def test_a_cancel_ends_the_batch_with_its_requests_canceled(self):
        with Emu(FAST + ["--batch-seconds", "60"]) as emu:
            _, _, payload = emu.request("POST", "/v1/messages/batches", batch_of(3), ANTHROPIC)
            bid = json.loads(payload)["id"]
            _, _, payload = emu.request("POST", "/v1/messages/batches/%s/cancel" % bid, None,
                                        ANTHROPIC)
            self.assertEqual(json.loads(payload)["processing_status"], "canceling")
            _, _, payload = emu.request("GET", "/v1/messages/batches/" + bid, None, ANTHROPIC)
            ended = json.loads(payload)
            self.assertEqual(ended["processing_status"], "ended")
            self.assertEqual(ended["request_counts"]["canceled"], 3)
            self.assertEqual(emu.stats()["batches"]["anthropic"]["output_tokens"], 0)

    def test_the_batch_endpoints_have_their_own_rpm_and_queue_bound(self):
        with Emu(FAST + ["--batch-rpm", "3", "--batch-queue", "4", "--batch-seconds", "60"]) as emu:
            status, _, _ = emu.request("POST", "/v1/messages/batches", batch_of(3), ANTHROPIC)
            self.assertEqual(status, 200)
            status, h, payload = emu.request("POST", "/v1/messages/batches", batch_of(2, "q"),
                                             ANTHROPIC)
            self.assertEqual(status, 429, payload)
            self.assertIn("processing queue", json.loads(payload)["error"]["message"])
            status, _, _ = emu.request("GET", "/v1/messages/batches", None, ANTHROPIC)
            self.assertEqual(status, 200)
            status, h, payload = emu.request("GET", "/v1/messages/batches", None, ANTHROPIC)
            self.assertEqual(status, 429, payload)
            self.assertEqual(json.loads(payload)["error"]["type"], "rate_limit_error")
            self.assertGreaterEqual(int(h["retry-after"]), 1)
            # The synchronous endpoints are not limited by the batch bucket.
            status, _, _ = emu.anthropic(message("hi"))
            self.assertEqual(status, 200)


if __name__ == "__main__":
    unittest.main()
