/* test_http_parse.c - unit tests for sluiced's HTTP/1.1 parser (src/server/http_parse.c). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "server/http_parse.h"

#define MAX_HEAD 4096

static sl_http_field_t fields[16];

static int parse(const char *s, sl_http_head_t *h, char *msg, size_t msglen)
{
    h->fields = fields;
    h->max_fields = 16;
    return sl_http_parse_head(s, strlen(s), MAX_HEAD, h, msg, msglen);
}

static void assert_bad(const char *s, int want, const char *msg_part)
{
    sl_http_head_t h;
    char msg[256] = "";
    int rc = parse(s, &h, msg, sizeof(msg));
    if (rc != want) fail_msg("%s: got %d, want %d (%s)", s, rc, want, msg);
    if (!strstr(msg, msg_part)) fail_msg("%s: message '%s' does not say '%s'", s, msg, msg_part);
}

static void test_a_post_with_its_fields_and_length(void **state)
{
    (void)state;
    const char *s = "POST /v1/leases?wait=5 HTTP/1.1\r\nHost: x\r\nContent-Type:  application/json \r\n"
                    "Content-Length: 12\r\n\r\n{\"agent\":\"a\"}";
    sl_http_head_t h;
    char msg[256];
    assert_int_equal(parse(s, &h, msg, sizeof(msg)), SL_HTTP_DONE);
    assert_int_equal(h.method, SL_HTTP_POST);
    assert_int_equal(h.target_len, strlen("/v1/leases?wait=5"));
    assert_memory_equal(h.target, "/v1/leases?wait=5", h.target_len);
    assert_int_equal(h.minor, 1);
    assert_int_equal(h.n_fields, 3);
    assert_int_equal(h.fields[1].value_len, strlen("application/json"));
    assert_memory_equal(h.fields[1].value, "application/json", h.fields[1].value_len);
    assert_int_equal(h.content_length, 12);
    assert_true(h.keep_alive);
    assert_false(h.chunked);
    assert_int_equal(h.head_len, strstr(s, "\r\n\r\n") + 4 - s);
}

static void test_every_prefix_of_a_head_needs_more(void **state)
{
    (void)state;
    const char *s = "GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
    size_t n = strlen(s);
    sl_http_head_t h = {.fields = fields, .max_fields = 16};
    char msg[256];
    for (size_t i = 0; i < n; i++)
        if (sl_http_parse_head(s, i, MAX_HEAD, &h, msg, sizeof(msg)) != SL_HTTP_MORE)
            fail_msg("prefix of %zu bytes was not 'more'", i);
    assert_int_equal(sl_http_parse_head(s, n, MAX_HEAD, &h, msg, sizeof(msg)), SL_HTTP_DONE);
    assert_int_equal(h.head_len, n);
}

static void test_bare_lf_and_leading_empty_lines_are_accepted(void **state)
{
    (void)state;
    sl_http_head_t h;
    char msg[256];
    assert_int_equal(parse("\r\n\nGET / HTTP/1.0\nConnection: Keep-Alive\n\n", &h, msg, sizeof(msg)),
                     SL_HTTP_DONE);
    assert_int_equal(h.minor, 0);
    assert_true(h.keep_alive);
    assert_int_equal(parse("GET / HTTP/1.0\r\n\r\n", &h, msg, sizeof(msg)), SL_HTTP_DONE);
    assert_false(h.keep_alive);
    assert_int_equal(parse("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n", &h, msg, sizeof(msg)),
                     SL_HTTP_DONE);
    assert_false(h.keep_alive);
}

static void test_methods_are_case_sensitive_and_unknown_ones_parse(void **state)
{
    (void)state;
    sl_http_head_t h;
    char msg[256];
    assert_int_equal(parse("DELETE /v1/leases/l_1 HTTP/1.1\r\n\r\n", &h, msg, sizeof(msg)),
                     SL_HTTP_DONE);
    assert_int_equal(h.method, SL_HTTP_DELETE);
    assert_int_equal(parse("get / HTTP/1.1\r\n\r\n", &h, msg, sizeof(msg)), SL_HTTP_DONE);
    assert_int_equal(h.method, SL_HTTP_OTHER);
    assert_int_equal(parse("BREW /pot HTTP/1.1\r\n\r\n", &h, msg, sizeof(msg)), SL_HTTP_DONE);
    assert_int_equal(h.method, SL_HTTP_OTHER);
}

static void test_malformed_heads_are_refused_naming_the_part(void **state)
{
    (void)state;
    assert_bad("GET  / HTTP/1.1\r\n\r\n", SL_HTTP_BAD, "request line");
    assert_bad("GET / HTTP/1.1 \r\n\r\n", SL_HTTP_BAD, "version");
    assert_bad("GET /a b HTTP/1.1\r\n\r\n", SL_HTTP_BAD, "version");
    assert_bad("GET /\x01 HTTP/1.1\r\n\r\n", SL_HTTP_BAD, "target");
    assert_bad("GET / HTTP/2.0\r\n\r\n", SL_HTTP_VERSION, "HTTP/2.0");
    assert_bad("GET / HTTP/1.1\r\nHost : x\r\n\r\n", SL_HTTP_BAD, "header 'Host'");
    assert_bad("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", SL_HTTP_BAD, "folded");
    assert_bad("GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", SL_HTTP_BAD, "control character 0x7f");
    assert_bad("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", SL_HTTP_BAD, "CR");
    assert_bad("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
               SL_HTTP_BAD, "Content-Length");
    assert_bad("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", SL_HTTP_BAD,
               "different");
    assert_bad("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", SL_HTTP_BAD, "digits");
    assert_bad("POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", SL_HTTP_BAD, "digits");
    assert_bad("POST / HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n", SL_HTTP_BAD,
               "digits");
    assert_bad("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", SL_HTTP_BAD, "gzip");
    assert_bad("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", SL_HTTP_BAD, "HTTP/1.0");
}

static void test_limits_give_too_large(void **state)
{
    (void)state;
    char big[MAX_HEAD + 64];
    snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nX: %0*d\r\n\r\n", MAX_HEAD, 0);
    assert_bad(big, SL_HTTP_TOO_LARGE, "over 4096 bytes");
    /* Without an end yet, but already too long. */
    big[MAX_HEAD + 1] = '\0';
    assert_bad(big, SL_HTTP_TOO_LARGE, "over");
    char many[2048] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 17; i++)
        strcat(many, "X: 1\r\n");
    strcat(many, "\r\n");
    assert_bad(many, SL_HTTP_TOO_LARGE, "more than 16 fields");
}

static void test_expect_continue_and_chunked_are_recognised(void **state)
{
    (void)state;
    sl_http_head_t h;
    char msg[256];
    assert_int_equal(parse("POST / HTTP/1.1\r\nExpect: 100-Continue\r\nTransfer-Encoding: Chunked\r\n\r\n",
                           &h, msg, sizeof(msg)),
                     SL_HTTP_DONE);
    assert_true(h.expect_continue);
    assert_true(h.chunked);
    assert_int_equal(h.content_length, -1);
}

static void test_chunked_bodies_decode_and_need_all_their_bytes(void **state)
{
    (void)state;
    const char *wire = "4;name=value\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";
    size_t n = strlen(wire) - 4, w = 0, b = 0;
    char msg[256], out[16];
    for (size_t i = 0; i < n; i++)
        if (sl_http_scan_chunked(wire, i, 100, &w, &b, msg, sizeof(msg)) != SL_HTTP_MORE)
            fail_msg("prefix of %zu bytes was not 'more'", i);
    assert_int_equal(sl_http_scan_chunked(wire, n + 4, 100, &w, &b, msg, sizeof(msg)), SL_HTTP_DONE);
    assert_int_equal(w, n);
    assert_int_equal(b, 7);
    sl_http_decode_chunked(wire, w, out);
    assert_memory_equal(out, "{\"a\":1}", 7);
    /* The limit is known from the sizes alone. */
    assert_int_equal(sl_http_scan_chunked("ffff\r\n", 6, 100, &w, &b, msg, sizeof(msg)),
                     SL_HTTP_TOO_LARGE);
    assert_non_null(strstr(msg, "100 bytes"));
    assert_int_equal(sl_http_scan_chunked("zz\r\n", 4, 100, &w, &b, msg, sizeof(msg)), SL_HTTP_BAD);
    assert_int_equal(sl_http_scan_chunked("2\r\nabc\r\n", 8, 100, &w, &b, msg, sizeof(msg)),
                     SL_HTTP_BAD);
    assert_int_equal(
        sl_http_scan_chunked("1000000000000000\r\n", 18, 100, &w, &b, msg, sizeof(msg)),
        SL_HTTP_BAD);
}

static void test_percent_decoding(void **state)
{
    (void)state;
    char out[32];
    assert_int_equal(sl_http_pct_decode("l_1%2F%41+b", 11, out), 7);
    assert_string_equal(out, "l_1/A+b");
    assert_int_equal(sl_http_pct_decode("a%2", 3, out), -1);
    assert_int_equal(sl_http_pct_decode("a%zz", 4, out), -1);
    assert_int_equal(sl_http_pct_decode("a%00b", 5, out), -1);
    assert_int_equal(sl_http_pct_decode("a\0b", 3, out), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_post_with_its_fields_and_length),
        cmocka_unit_test(test_every_prefix_of_a_head_needs_more),
        cmocka_unit_test(test_bare_lf_and_leading_empty_lines_are_accepted),
        cmocka_unit_test(test_methods_are_case_sensitive_and_unknown_ones_parse),
        cmocka_unit_test(test_malformed_heads_are_refused_naming_the_part),
        cmocka_unit_test(test_limits_give_too_large),
        cmocka_unit_test(test_expect_continue_and_chunked_are_recognised),
        cmocka_unit_test(test_chunked_bodies_decode_and_need_all_their_bytes),
        cmocka_unit_test(test_percent_decoding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
