/* test_provider_headers.c - rate-limit headers and their formats (Anthropic, OpenAI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine_harness.h"
#include "provider.h"
#include "test_main.h"

static const char *find(const sl_provider_header_t *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(h[i].name, name) == 0) return h[i].value;
    return NULL;
}

static void test_duration_format_is_go_style(void **state)
{
    (void)state;
    char b[32];
    const struct {
        double s;
        const char *want;
    } cases[] = {{360, "6m0s"}, {1, "1s"}, {0.012, "12ms"}, {1.5, "1.5s"}, {3723, "1h2m3s"},
                 {0, "0s"},     {-4, "0s"}, {59.25, "59.25s"}, {61, "1m1s"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_provider_format_duration(cases[i].s, b, sizeof b);
        assert_string_equal(b, cases[i].want);
        double back;
        assert_int_equal(sl_parse_duration(b, &back), SL_OK); /* the engine reads it */
    }
}

static void test_rfc3339_format(void **state)
{
    (void)state;
    char b[40];
    sl_provider_format_rfc3339(1796009982.7, b, sizeof b);
    assert_string_equal(b, "2026-11-30T03:39:42Z");
    double t;
    assert_int_equal(sl_parse_rfc3339(b, &t), SL_OK);
    assert_true(t == 1796009982.0);
}

static void test_anthropic_remaining_is_rounded_to_the_thousand(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.input_tpm = 100000;
    c.output_tpm = 20000;
    c.rpm = 50;
    sl_provider_t *p = sl_provider_new(&c, 1796009982, NULL, 0);
    sl_provider_call_t call = {.input_tokens = 87501, .max_tokens = 100, .output_tokens = 10};
    sl_provider_result_t r;
    sl_provider_begin(p, &call, 1796009982, &r);
    sl_provider_header_t h[SL_PROVIDER_MAX_HEADERS];
    size_t n = sl_provider_headers(p, SL_PROVIDER_ANTHROPIC, &r, 1796009982, h,
                                   SL_PROVIDER_MAX_HEADERS);
    assert_string_equal(find(h, n, "anthropic-ratelimit-input-tokens-limit"), "100000");
    assert_string_equal(find(h, n, "anthropic-ratelimit-input-tokens-remaining"), "12000"); /* 12499 */
    assert_string_equal(find(h, n, "anthropic-ratelimit-output-tokens-remaining"), "20000"); /* 19900 */
    assert_string_equal(find(h, n, "anthropic-ratelimit-requests-remaining"), "49");
    assert_string_equal(find(h, n, "anthropic-ratelimit-requests-limit"), "50");
    /* The input bucket misses 87501 at 100000/60 per second: full in 52.5 s. */
    assert_string_equal(find(h, n, "anthropic-ratelimit-input-tokens-reset"), "2026-11-30T03:40:34Z");
    /* tokens-*: the most restrictive token limit (input here). */
    assert_string_equal(find(h, n, "anthropic-ratelimit-tokens-limit"), "100000");
    assert_null(find(h, n, "retry-after"));
    /* The engine accepts every header. */
    const char *names[SL_PROVIDER_MAX_HEADERS], *values[SL_PROVIDER_MAX_HEADERS];
    for (size_t i = 0; i < n; i++) {
        names[i] = h[i].name;
        values[i] = h[i].value;
    }
    sl_engine_t *e = sl_engine_new(NULL);
    sl_pool_config_t pc = harness_pool(100000, 20000, 50);
    assert_int_equal(sl_engine_configure_pool(e, "default", &pc, 1796009982), SL_OK);
    assert_int_equal(sl_engine_resync(e, "default", names, values, n, 1796009982, NULL), SL_OK);
    sl_engine_free(e);
    /* A 429 adds retry-after in whole seconds. */
    sl_provider_begin(p, &call, 1796009983, &r);
    assert_int_equal(r.refusal, SL_PROVIDER_RATE_LIMITED);
    n = sl_provider_headers(p, SL_PROVIDER_ANTHROPIC, &r, 1796009983, h, SL_PROVIDER_MAX_HEADERS);
    assert_non_null(find(h, n, "retry-after"));
    char body[512];
    sl_provider_error_body(p, SL_PROVIDER_ANTHROPIC, &r, body, sizeof body);
    assert_non_null(strstr(body, "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\""));
    sl_provider_free(p);
}

static void test_openai_headers_use_the_combined_bucket_and_durations(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.tokens_tpm = 60000;
    c.rpm = 60;
    sl_provider_t *p = sl_provider_new(&c, 0, NULL, 0);
    sl_provider_call_t call = {.input_tokens = 5000, .max_tokens = 1000, .output_tokens = 1000};
    sl_provider_result_t r;
    sl_provider_begin(p, &call, 0, &r);
    sl_provider_header_t h[SL_PROVIDER_MAX_HEADERS];
    size_t n = sl_provider_headers(p, SL_PROVIDER_OPENAI, &r, 0, h, SL_PROVIDER_MAX_HEADERS);
    assert_string_equal(find(h, n, "x-ratelimit-limit-tokens"), "60000");
    assert_string_equal(find(h, n, "x-ratelimit-remaining-tokens"), "54000");
    assert_string_equal(find(h, n, "x-ratelimit-reset-tokens"), "6s");
    assert_string_equal(find(h, n, "x-ratelimit-limit-requests"), "60");
    assert_string_equal(find(h, n, "x-ratelimit-remaining-requests"), "59");
    assert_string_equal(find(h, n, "x-ratelimit-reset-requests"), "1s");
    sl_provider_free(p);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_duration_format_is_go_style),
    cmocka_unit_test(test_rfc3339_format),
    cmocka_unit_test(test_anthropic_remaining_is_rounded_to_the_thousand),
    cmocka_unit_test(test_openai_headers_use_the_combined_bucket_and_durations))
