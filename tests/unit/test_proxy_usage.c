/* test_proxy_usage.c - the proxy reads Anthropic's usage, the 1-hour cache writes included
 * (src/server/proxy/proxy_usage.c; issue 28). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "proxy.h"
#include "test_main.h"

static void test_anthropic_usage_reads_the_1h_part_of_the_cache_writes(void **state)
{
    (void)state;
    const char *body =
        "{\"type\":\"message\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":"
        "3000,\"cache_read_input_tokens\":500,\"cache_creation\":{\"ephemeral_5m_input_tokens\":"
        "1000,\"ephemeral_1h_input_tokens\":2000},\"output_tokens\":40}}";
    sl_usage_t u = {0};
    sl__usage_from_body(SL_UPSTREAM_ANTHROPIC, body, strlen(body), &u);
    assert_true(u.have_input);
    assert_int_equal(u.cache_creation_input_tokens, 3000);
    assert_int_equal(u.cache_creation_1h_input_tokens, 2000);
    assert_int_equal(u.cache_read_input_tokens, 500);
}

static void test_a_stream_takes_the_1h_writes_from_message_start(void **state)
{
    (void)state;
    const char *ev =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
        "{\"input_tokens\":5,\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":0,"
        "\"cache_creation\":{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":2048},"
        "\"output_tokens\":1}}}";
    sl_usage_t u = {0};
    assert_true(sl__usage_from_event(SL_UPSTREAM_ANTHROPIC, ev, strlen(ev), false, &u));
    assert_int_equal(u.cache_creation_1h_input_tokens, 2048);
    /* Without the breakdown (older answers) nothing is a 1-hour write. */
    const char *old = "{\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":2048,"
                      "\"output_tokens\":3}}";
    sl_usage_t v = {0};
    sl__usage_from_body(SL_UPSTREAM_ANTHROPIC, old, strlen(old), &v);
    assert_int_equal(v.cache_creation_input_tokens, 2048);
    assert_int_equal(v.cache_creation_1h_input_tokens, 0);
}

static void test_a_ramp_limit_429_is_known_by_its_error_code_or_its_words(void **state)
{
    (void)state;
    /* Anthropic's SDKs name the error code (error.details.error_code); the message's words
     * are not documented, so the code alone is enough. */
    const char *coded = "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                        "\"message\":\"Rate limited\",\"details\":{\"error_code\":"
                        "\"ramp_limit_exceeded\"}}}";
    assert_true(sl__is_acceleration_429(coded, strlen(coded)));
    const char *worded = "{\"error\":{\"message\":\"... exceeds the acceleration limit ...\"}}";
    assert_true(sl__is_acceleration_429(worded, strlen(worded)));
    const char *full = "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                       "\"message\":\"This request would exceed the rate limit\"}}";
    assert_false(sl__is_acceleration_429(full, strlen(full)));
}

SL_TEST_MAIN(
    cmocka_unit_test(test_anthropic_usage_reads_the_1h_part_of_the_cache_writes),
    cmocka_unit_test(test_a_stream_takes_the_1h_writes_from_message_start),
    cmocka_unit_test(test_a_ramp_limit_429_is_known_by_its_error_code_or_its_words))
