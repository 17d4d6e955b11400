/* test_http_parse.c - unit tests for sluiced's request reader (src/server/core/http_parse.c):
 * requests assembled from pieces, limits, refusals, pipelining, 100-continue. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "server/core/http_parse.h"
#include "test_main.h"

static const sl_http_limits_t LIMITS = {.max_head_bytes = 4096, .max_fields = 16,
                                        .max_body_bytes = 100};

/* Feeds `s` in pieces of `step` bytes; returns the outcome and the bytes used. */
static int feed(sl_http_reader_t *r, const char *s, size_t len, size_t step, size_t *used,
                char *msg, size_t msglen)
{
    int rc = SL_HTTP_MORE;
    *used = 0;
    while (*used < len) {
        size_t n = len - *used < step ? len - *used : step;
        size_t u = sl_http_reader_feed(r, s + *used, n, &rc, msg, msglen);
        *used += u;
        if (rc != SL_HTTP_MORE) return rc;
        if (u != n) fail_msg("'more' but only %zu of %zu bytes used", u, n);
    }
    return rc;
}

static const char *header(const sl_http_request_t *q, const char *name)
{
    for (size_t i = 0; i < q->n_fields; i++)
        if (!strcmp(q->fields[i].name, name)) return q->fields[i].value;
    return NULL;
}

static void test_a_request_arrives_whole_however_it_is_cut(void **state)
{
    (void)state;
    const char *s = "POST /v1/leases?wait=5 HTTP/1.1\r\nHost: x\r\nContent-Type:  application/json \r\n"
                    "Content-Length: 13\r\nX-Empty:\r\n\r\n{\"agent\":\"a\"}";
    for (size_t step = 1; step <= strlen(s); step++) {
        sl_http_reader_t *r = sl_http_reader_new(&LIMITS);
        size_t used;
        char msg[256];
        assert_int_equal(feed(r, s, strlen(s), step, &used, msg, sizeof(msg)), SL_HTTP_DONE);
        assert_int_equal(used, strlen(s));
        const sl_http_request_t *q = sl_http_reader_request(r);
        assert_int_equal(q->method, SL_HTTP_POST);
        assert_string_equal(q->target, "/v1/leases?wait=5");
        assert_int_equal(q->minor, 1);
        assert_true(q->keep_alive);
        assert_int_equal(q->n_fields, 4);
        assert_string_equal(header(q, "Content-Type"), "application/json");
        assert_string_equal(header(q, "X-Empty"), "");
        assert_string_equal(header(q, "Host"), "x");
        assert_int_equal(q->body_len, 13);
        assert_memory_equal(q->body, "{\"agent\":\"a\"}", 13);
        sl_http_reader_free(r);
    }
}

static void test_pipelined_requests_come_one_at_a_time(void **state)
{
    (void)state;
    const char *s = "GET /a HTTP/1.1\r\n\r\nDELETE /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nxyGET /c";
    sl_http_reader_t *r = sl_http_reader_new(&LIMITS);
    int rc;
    char msg[256];
    size_t off = 0, len = strlen(s);
    off += sl_http_reader_feed(r, s, len, &rc, msg, sizeof(msg));
    assert_int_equal(rc, SL_HTTP_DONE);
    assert_string_equal(sl_http_reader_request(r)->target, "/a");
    /* Until `next`, nothing more is read. */
    assert_int_equal(sl_http_reader_feed(r, s + off, len - off, &rc, msg, sizeof(msg)), 0);
    assert_int_equal(rc, SL_HTTP_DONE);
    sl_http_reader_next(r);
    off += sl_http_reader_feed(r, s + off, len - off, &rc, msg, sizeof(msg));
    assert_int_equal(rc, SL_HTTP_DONE);
    const sl_http_request_t *q = sl_http_reader_request(r);
    assert_int_equal(q->method, SL_HTTP_DELETE);
    assert_memory_equal(q->body, "xy", 2);
    assert_string_equal(s + off, "GET /c");
    sl_http_reader_next(r);
    assert_false(sl_http_reader_partial(r));
    off += sl_http_reader_feed(r, s + off, len - off, &rc, msg, sizeof(msg));
    assert_int_equal(rc, SL_HTTP_MORE);
    assert_int_equal(off, len);
    assert_true(sl_http_reader_partial(r));
    sl_http_reader_free(r);
}

static void test_a_chunked_body_is_decoded(void **state)
{
    (void)state;
    const char *s = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "4;name=value\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\n";
    for (size_t step = 1; step <= strlen(s); step += 3) {
        sl_http_reader_t *r = sl_http_reader_new(&LIMITS);
        size_t used;
        char msg[256];
        assert_int_equal(feed(r, s, strlen(s), step, &used, msg, sizeof(msg)), SL_HTTP_DONE);
        const sl_http_request_t *q = sl_http_reader_request(r);
        assert_int_equal(q->body_len, 7);
        assert_memory_equal(q->body, "{\"a\":1}", 7);
        assert_null(header(q, "X-Trailer")); /* trailers are not fields */
        sl_http_reader_free(r);
    }
}

static void test_http10_and_connection_close_end_the_connection(void **state)
{
    (void)state;
    const char *cases[][2] = {{"GET / HTTP/1.0\r\n\r\n", "close"},
                              {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "keep"},
                              {"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", "close"},
                              {"GET / HTTP/1.1\r\n\r\n", "keep"}};
    for (size_t i = 0; i < 4; i++) {
        sl_http_reader_t *r = sl_http_reader_new(&LIMITS);
        int rc;
        char msg[256];
        sl_http_reader_feed(r, cases[i][0], strlen(cases[i][0]), &rc, msg, sizeof(msg));
        assert_int_equal(rc, SL_HTTP_DONE);
        assert_int_equal(sl_http_reader_request(r)->keep_alive, !strcmp(cases[i][1], "keep"));
        sl_http_reader_free(r);
    }
}

static void assert_refused(const char *s, int want, const char *words)
{
    sl_http_reader_t *r = sl_http_reader_new(&LIMITS);
    int rc;
    char msg[256] = "";
    sl_http_reader_feed(r, s, strlen(s), &rc, msg, sizeof(msg));
    if (rc != want) fail_msg("%s: got %d, want %d (%s)", s, rc, want, msg);
    if (!strstr(msg, words)) fail_msg("%s: message '%s' does not say '%s'", s, msg, words);
    sl_http_reader_free(r);
}

static void test_malformed_and_ambiguous_requests_are_refused(void **state)
{
    (void)state;
    assert_refused("BREW /pot HTTP/1.1\r\n\r\n", SL_HTTP_BAD, "method");
    assert_refused("GET / HTTP/2.0\r\n\r\n", SL_HTTP_VERSION, "HTTP/2.0");
    assert_refused("GET / HTTP/1.1\r\nHost : x\r\n\r\n", SL_HTTP_BAD, "whitespace");
    assert_refused("GET / HTTP/1.1\r\nX: a\x01\r\n\r\n", SL_HTTP_BAD, "header");
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                   SL_HTTP_BAD, "content-length");
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                   SL_HTTP_BAD, "content-length");
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", SL_HTTP_BAD,
                   "content-length");
    assert_refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", SL_HTTP_BAD,
                   "transfer-encoding");
    assert_refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", SL_HTTP_BAD,
                   "chunk size");
}

static void test_limits(void **state)
{
    (void)state;
    char big[LIMITS.max_head_bytes + 64];
    snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nX: %0*d\r\n\r\n", (int)LIMITS.max_head_bytes, 0);
    assert_refused(big, SL_HTTP_TOO_LARGE, "over 4096 bytes");
    char many[2048] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 17; i++)
        strcat(many, "X: 1\r\n");
    strcat(many, "\r\n");
    assert_refused(many, SL_HTTP_TOO_LARGE, "more than 16 fields");
    /* A declared body over the limit is refused before any of it arrives. */
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", SL_HTTP_BODY_TOO_LARGE,
                   "101 bytes is over the limit of 100 bytes");
    char chunks[512] = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 11; i++)
        strcat(chunks, "a\r\n0123456789\r\n");
    assert_refused(chunks, SL_HTTP_BODY_TOO_LARGE, "chunked body is over the limit of 100");
}

static void test_expect_continue_is_told_once_before_the_body(void **state)
{
    (void)state;
    const char *head = "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    sl_http_reader_t *r = sl_http_reader_new(&LIMITS);
    int rc;
    char msg[256];
    assert_int_equal(sl_http_reader_feed(r, head, strlen(head), &rc, msg, sizeof(msg)),
                     strlen(head));
    assert_int_equal(rc, SL_HTTP_MORE);
    assert_true(sl_http_reader_take_continue(r));
    assert_false(sl_http_reader_take_continue(r));
    sl_http_reader_feed(r, "{}", 2, &rc, msg, sizeof(msg));
    assert_int_equal(rc, SL_HTTP_DONE);
    sl_http_reader_free(r);
}

/* 10 bytes for /small, the reader's own 100 for everything else. */
static size_t small_limit(sl_http_method_t method, const char *target, void *ud)
{
    (void)method;
    (*(int *)ud)++;
    return strncmp(target, "/small", 6) == 0 ? 10 : SIZE_MAX;
}

static void test_a_request_body_limit_is_decided_from_its_head(void **state)
{
    (void)state;
    int asked = 0;
    sl_http_limits_t lim = LIMITS;
    lim.body_limit_for = small_limit;
    lim.body_limit_ud = &asked;
    int rc;
    char msg[256] = "";
    const char *big = "POST /small HTTP/1.1\r\nContent-Length: 11\r\n\r\n";
    sl_http_reader_t *r = sl_http_reader_new(&lim);
    sl_http_reader_feed(r, big, strlen(big), &rc, msg, sizeof(msg));
    assert_int_equal(rc, SL_HTTP_BODY_TOO_LARGE); /* before any of the body */
    assert_non_null(strstr(msg, "11 bytes is over the limit of 10 bytes"));
    assert_int_equal(asked, 1);
    sl_http_reader_free(r);
    /* Elsewhere the reader's limit applies; the body's progress is visible. */
    const char *head = "POST /other HTTP/1.1\r\nContent-Length: 50\r\n\r\n0123456789";
    r = sl_http_reader_new(&lim);
    size_t body_bytes = 99;
    assert_false(sl_http_reader_in_body(r, &body_bytes));
    sl_http_reader_feed(r, head, strlen(head), &rc, msg, sizeof(msg));
    assert_int_equal(rc, SL_HTTP_MORE);
    assert_true(sl_http_reader_in_body(r, &body_bytes));
    assert_int_equal(body_bytes, 10);
    sl_http_reader_free(r);
}

static void test_targets_split_into_path_and_query(void **state)
{
    (void)state;
    const char *t[] = {"/v1/tickets/t_1?wait=5", "http://h:1/v1/pools?x=1", "/healthz", "*"};
    const char *want_path[] = {"/v1/tickets/t_1", "/v1/pools", "/healthz", "*"};
    const char *want_query[] = {"wait=5", "x=1", NULL, NULL};
    for (size_t i = 0; i < 4; i++) {
        size_t po, pl, qo, ql;
        sl_http_split_target(t[i], strlen(t[i]), &po, &pl, &qo, &ql);
        assert_int_equal(pl, strlen(want_path[i]));
        assert_memory_equal(t[i] + po, want_path[i], pl);
        if (want_query[i]) {
            assert_int_equal(ql, strlen(want_query[i]));
            assert_memory_equal(t[i] + qo, want_query[i], ql);
        } else {
            assert_int_equal(qo, 0);
        }
    }
    assert_string_equal(sl_http_reason(429), "Too Many Requests");
}

SL_TEST_MAIN(
    cmocka_unit_test(test_a_request_arrives_whole_however_it_is_cut),
    cmocka_unit_test(test_pipelined_requests_come_one_at_a_time),
    cmocka_unit_test(test_a_chunked_body_is_decoded),
    cmocka_unit_test(test_http10_and_connection_close_end_the_connection),
    cmocka_unit_test(test_malformed_and_ambiguous_requests_are_refused),
    cmocka_unit_test(test_limits),
    cmocka_unit_test(test_expect_continue_is_told_once_before_the_body),
    cmocka_unit_test(test_a_request_body_limit_is_decided_from_its_head),
    cmocka_unit_test(test_targets_split_into_path_and_query))
