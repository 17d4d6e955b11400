/* Unit tests of the proxy's batch APIs (proxy_batches.c) and embeddings (proxy_embeddings.c):
 * routes and ids, the processing-queue count, uploaded line counts, results usage,
 * results_url. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/proxy/proxy_endpoints.h"
#include "test_main.h"

static sl_batch_op_t resolve(sl_upstream_api_t api, const char *path, sl_http_method_t m, char *up,
                             char *id, const char **allow)
{
    return sl__batch_resolve(api, path, strlen(path), m, up, 320, id, allow);
}

static void test_routes_decode_ids_and_name_the_methods_a_path_takes(void **state)
{
    (void)state;
    char up[320], id[257];
    const char *allow;
    assert_int_equal(resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/v1/messages/batches", SL_HTTP_POST,
                             up, id, &allow),
                     SL_BATCH_CREATE);
    assert_string_equal(up, "/v1/messages/batches");
    assert_int_equal(resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/messages/batches/mb_1/results",
                             SL_HTTP_GET, up, id, &allow),
                     SL_BATCH_RESULTS);
    assert_string_equal(up, "/v1/messages/batches/mb_1/results");
    assert_string_equal(id, "mb_1");
    assert_int_equal(resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/v1/messages/batches/mb_1",
                             SL_HTTP_DELETE, up, id, &allow),
                     SL_BATCH_DELETE);
    assert_int_equal(
        resolve(SL_UPSTREAM_OPENAI, "/openai/v1/files/ft%3Aa/content", SL_HTTP_GET, up, id, &allow),
        SL_BATCH_FILE_CONTENT);
    assert_string_equal(up, "/v1/files/ft:a/content");
    /* A known path with another method: none, and the methods it takes. */
    assert_int_equal(
        resolve(SL_UPSTREAM_OPENAI, "/openai/v1/batches/b_1", SL_HTTP_DELETE, up, id, &allow),
        SL_BATCH_NONE);
    assert_string_equal(allow, "GET");
    /* Dot segments, encoded slashes, empty ids, the other API: not a batch path at all. */
    const char *bad[] = {"/openai/v1/files/..",      "/openai/v1/files/%2e%2e/content",
                         "/openai/v1/batches/a%2Fb", "/openai/v1/files/",
                         "/openai/v1//files",        "/openai/v1/files/a/content/",
                         "/anthropic/v1/files",      "/openai/v1/messages/batches"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_upstream_api_t api =
            !strncmp(bad[i], "/openai", 7) ? SL_UPSTREAM_OPENAI : SL_UPSTREAM_ANTHROPIC;
        assert_int_equal(resolve(api, bad[i], SL_HTTP_GET, up, id, &allow), SL_BATCH_NONE);
        assert_null(allow);
    }
}

static const char UPLOAD[] =
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
    "batch\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
    "Content-Type: application/jsonl\r\n\r\n"
    "{\"custom_id\":\"a\"}\r\n{\"custom_id\":\"b\"}\n\n{\"custom_id\":\"c\"}\r\n"
    "--XyZ--\r\n";

/* The ids on_answer reports ended, joined with ',' (the count itself is the backend's:
 * tests/unit/test_backend_batchq.c). */
static void note_ended(const char *id, void *ud)
{
    char *seen = ud;
    if (*seen) strcat(seen, ",");
    strcat(seen, id);
}

static void test_answers_name_the_creates_and_the_batches_that_ended(void **state)
{
    (void)state;
    sl_batch_queue_t *q = sl__batch_queue_new();
    assert_non_null(q);
    char err[256], ended[256] = "";
    /* An upload's lines (blank lines aside) become its file's request count. */
    const char up_answer[] = "{\"id\":\"file-1\",\"object\":\"file\"}";
    sl__batch_on_answer(q, SL_UPSTREAM_OPENAI, SL_BATCH_FILE_UPLOAD, up_answer, strlen(up_answer),
                        UPLOAD, strlen(UPLOAD), "multipart/form-data; boundary=\"XyZ\"", note_ended,
                        ended);
    json_t *create = json_loads("{\"input_file_id\":\"file-1\"}", 0, NULL);
    assert_int_equal(sl__batch_create_requests(q, SL_UPSTREAM_OPENAI, create, err, sizeof(err)), 3);
    json_decref(create);
    create = json_loads("{\"input_file_id\":\"file-unseen\"}", 0, NULL);
    assert_int_equal(sl__batch_create_requests(q, SL_UPSTREAM_OPENAI, create, err, sizeof(err)), 0);
    json_decref(create);
    create = json_loads("{\"requests\":3}", 0, NULL);
    assert_int_equal(sl__batch_create_requests(q, SL_UPSTREAM_ANTHROPIC, create, err, sizeof(err)),
                     -1);
    assert_non_null(strstr(err, "requests"));
    json_decref(create);

    /* A create's answer names the batch; its request count stays the body's. */
    char id[SL_BATCHQ_ID_MAX + 1];
    int64_t requests = 3;
    const char created[] = "{\"id\":\"mb_1\",\"processing_status\":\"in_progress\"}";
    assert_true(sl__batch_created(created, strlen(created), id, &requests));
    assert_string_equal(id, "mb_1");
    assert_int_equal(requests, 3);
    assert_false(sl__batch_created("{}", 2, id, &requests));
    /* Still in progress in a retrieve: nothing ended; ended in a list: reported. */
    sl__batch_on_answer(q, SL_UPSTREAM_ANTHROPIC, SL_BATCH_RETRIEVE, created, strlen(created), NULL,
                        0, NULL, note_ended, ended);
    assert_string_equal(ended, "");
    const char list[] = "{\"data\":[{\"id\":\"mb_1\",\"processing_status\":\"ended\"},"
                        "{\"id\":\"mb_2\",\"processing_status\":\"canceling\"}]}";
    sl__batch_on_answer(q, SL_UPSTREAM_ANTHROPIC, SL_BATCH_LIST, list, strlen(list), NULL, 0, NULL,
                        note_ended, ended);
    assert_string_equal(ended, "mb_1");
    /* OpenAI: a file the proxy did not see counts what the provider says it holds. */
    requests = 0;
    const char oa[] =
        "{\"id\":\"batch_1\",\"status\":\"in_progress\",\"request_counts\":{\"total\":7}}";
    assert_true(sl__batch_created(oa, strlen(oa), id, &requests));
    assert_int_equal(requests, 7);
    const char done[] = "{\"id\":\"batch_1\",\"status\":\"cancelled\"}";
    sl__batch_on_answer(q, SL_UPSTREAM_OPENAI, SL_BATCH_CANCEL, done, strlen(done), NULL, 0, NULL,
                        note_ended, ended);
    assert_string_equal(ended, "mb_1,batch_1");
    sl__batch_queue_free(q);
}

static void test_results_add_up_their_usage_and_results_url_points_at_the_proxy(void **state)
{
    (void)state;
    const char anth[] =
        "{\"custom_id\":\"a\",\"result\":{\"type\":\"succeeded\",\"message\":{\"usage\":"
        "{\"input_tokens\":10,\"output_tokens\":5,\"cache_read_input_tokens\":2}}}}\n"
        "{\"custom_id\":\"b\",\"result\":{\"type\":\"errored\"}}\n"
        "{\"custom_id\":\"c\",\"result\":{\"type\":\"succeeded\",\"message\":{\"usage\":"
        "{\"input_tokens\":1,\"output_tokens\":1}}}}\n";
    sl_usage_t u;
    sl__batch_results_usage(SL_UPSTREAM_ANTHROPIC, anth, strlen(anth), &u);
    assert_true(u.have_input && u.have_output);
    assert_int_equal(u.input_tokens, 11);
    assert_int_equal(u.output_tokens, 6);
    assert_int_equal(u.cache_read_input_tokens, 2);
    const char oa[] = "{\"custom_id\":\"r\",\"response\":{\"body\":{\"usage\":{\"prompt_tokens\":9,"
                      "\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":3}}}}}";
    sl__batch_results_usage(SL_UPSTREAM_OPENAI, oa, strlen(oa), &u);
    assert_int_equal(u.input_tokens, 6);
    assert_int_equal(u.cache_read_input_tokens, 3);
    assert_int_equal(u.output_tokens, 4);
    sl__batch_results_usage(SL_UPSTREAM_OPENAI, "not json", 8, &u);
    assert_int_equal(u.input_tokens + u.output_tokens, 0);

    const char obj[] = "{\"id\":\"mb_1\",\"results_url\":\"https://api.anthropic.com/v1/messages/"
                       "batches/mb_1/results\"}";
    char *again = sl__batch_rewrite_results_url(obj, strlen(obj), "http://h:8750/anthropic");
    assert_non_null(again);
    assert_non_null(strstr(again, "\"http://h:8750/anthropic/v1/messages/batches/mb_1/results\""));
    free(again);
    const char pending[] = "{\"id\":\"mb_1\",\"results_url\":null}";
    assert_null(sl__batch_rewrite_results_url(pending, strlen(pending), "http://h"));
}

static void test_embeddings_count_strings_and_token_arrays_and_name_bad_input(void **state)
{
    (void)state;
    char err[256];
    int64_t n = -1;
    json_t *b = json_loads("{\"input\":[[1,2,3],[4]]}", 0, NULL);
    assert_int_equal(sl__embeddings_input_tokens(NULL, b, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 4);
    json_decref(b);
    b = json_loads("{\"input\":[5,6,7,8,9]}", 0, NULL);
    assert_int_equal(sl__embeddings_input_tokens(NULL, b, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 5);
    json_decref(b);
    b = json_loads("{\"input\":[\"ok\",{}]}", 0, NULL);
    assert_int_equal(sl__embeddings_input_tokens(NULL, b, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "input[1]"));
    json_decref(b);
    b = json_loads("{\"model\":\"m\"}", 0, NULL);
    assert_int_equal(sl__embeddings_input_tokens(NULL, b, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "input"));
    json_decref(b);
    sl_usage_t u = {0};
    const char ans[] = "{\"object\":\"list\",\"usage\":{\"prompt_tokens\":12,\"total_tokens\":12}}";
    sl__embeddings_usage_from_body(ans, strlen(ans), &u);
    assert_true(u.have_input && u.have_output);
    assert_int_equal(u.input_tokens, 12);
    assert_int_equal(u.output_tokens, 0);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_routes_decode_ids_and_name_the_methods_a_path_takes),
    cmocka_unit_test(test_answers_name_the_creates_and_the_batches_that_ended),
    cmocka_unit_test(test_results_add_up_their_usage_and_results_url_points_at_the_proxy),
    cmocka_unit_test(test_embeddings_count_strings_and_token_arrays_and_name_bad_input))
