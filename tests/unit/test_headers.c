/* test_headers.c - resync from Anthropic and OpenAI rate-limit headers. */
#include "engine_harness.h"
#include "test_main.h"

static int resync(sl_engine_t *e, const char *const *names, const char *const *values, size_t n,
                  double now)
{
    int changed = -1;
    int rc = sl_engine_resync(e, "default", names, values, n, now, &changed);
    return rc == SL_OK ? changed : rc;
}

static void test_remaining_lowers_the_level_and_never_raises_it(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 100); /* input capacity 85,000 */
    /* Provider room 50,000 (+500 rounding) minus our 15,000 reserve: 35,500. */
    const char *n1[] = {"anthropic-ratelimit-input-tokens-remaining"};
    const char *v1[] = {"50000"};
    assert_int_equal(resync(e, n1, v1, 1, T0), 1);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 35500) < 1e-6);
    /* More room than we believe: unchanged. */
    const char *v2[] = {"99000"};
    assert_int_equal(resync(e, n1, v2, 1, T0), 0);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 35500) < 1e-6);
    harness_end(e);
}

/* Requests are not rounded to thousands, but the provider sends a whole number, its
 * fractional level rounded down: 40 + 1 - 15 reserve = 26. */
static void test_requests_remaining_is_allowed_its_rounding_down(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 100); /* rpm capacity 85 */
    const char *n[] = {"anthropic-ratelimit-requests-remaining"};
    const char *v[] = {"40"};
    assert_int_equal(resync(e, n, v, 1, T0), 1);
    assert_true(fabs(harness_level(e, SL_BUCKET_REQUESTS) - 26) < 1e-6);
    sl_engine_free(e);
}

static void test_a_limit_that_disagrees_is_adopted(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 100);
    const char *n[] = {"anthropic-ratelimit-input-tokens-limit",
                       "anthropic-ratelimit-input-tokens-reset",
                       "anthropic-ratelimit-output-tokens-limit"};
    const char *v[] = {"80000", "2026-11-30T03:39:42Z", "20000"};
    assert_int_equal(resync(e, n, v, 3, T0), 1);
    sl_pool_info_t info;
    sl_engine_pool_info(e, "default", &info);
    assert_int_equal(info.limit[SL_BUCKET_INPUT], 80000);
    assert_true(fabs(info.capacity[SL_BUCKET_INPUT] - 68000) < 1e-6);
    assert_true(info.level[SL_BUCKET_INPUT] <= 68000 + 1e-6);
    assert_int_equal(info.config.input_tpm, 80000);
    harness_end(e);
}

static void test_openai_headers_drive_the_requests_and_tokens_buckets(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(0, 0, 500);
    const char *n[] = {"x-ratelimit-limit-requests",     "x-ratelimit-limit-tokens",
                       "x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens",
                       "x-ratelimit-reset-requests",     "x-ratelimit-reset-tokens"};
    const char *v[] = {"500", "30000", "100", "10000", "6m0s", "12ms"};
    assert_int_equal(resync(e, n, v, 6, T0), 3); /* tokens limit adopted, two levels lowered */
    sl_pool_info_t info;
    sl_engine_pool_info(e, "default", &info);
    assert_int_equal(info.limit[SL_BUCKET_TOKENS], 30000);
    /* whole numbers, rounded down by the provider: 1 allowed */
    assert_true(fabs(info.level[SL_BUCKET_TOKENS] - (10000 + 1 - 4500)) < 1e-6);
    assert_true(fabs(info.level[SL_BUCKET_REQUESTS] - (100 + 1 - 75)) < 1e-6);
    harness_end(e);
}

static void test_malformed_header_is_rejected_and_changes_nothing(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 100);
    harness_snapshot_t before = harness_snapshot(e);
    const char *n[] = {"anthropic-ratelimit-input-tokens-remaining",
                       "anthropic-ratelimit-input-tokens-reset"};
    const char *v[] = {"10", "tomorrow"};
    assert_int_equal(resync(e, n, v, 2, T0), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "tomorrow"));
    const char *v2[] = {"-5", "2026-11-30T03:39:42Z"};
    assert_int_equal(resync(e, n, v2, 2, T0), SL_EINVAL);
    const char *n3[] = {"x-ratelimit-reset-tokens"};
    const char *v3[] = {"6 minutes"};
    assert_int_equal(resync(e, n3, v3, 1, T0), SL_EINVAL);
    assert_string_equal(before.text, harness_snapshot(e).text);
    /* Unknown headers are ignored. */
    const char *n4[] = {"content-type"};
    const char *v4[] = {"application/json"};
    assert_int_equal(resync(e, n4, v4, 1, T0), 0);
    sl_engine_free(e);
}

static void test_settle_resyncs_from_headers_after_the_refund(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 100);
    uint64_t l = harness_grant(e, "a", 10000, 1000, T0);
    sl_settle_t s = harness_settle(10000, 1000);
    const char *n[] = {"anthropic-ratelimit-input-tokens-remaining"};
    const char *v[] = {"30000"};
    s.header_names = n;
    s.header_values = v;
    s.header_count = 1;
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 15500) < 1e-6);
    /* A malformed header refuses the settle, and the lease stays live. */
    l = harness_grant(e, "a", 1000, 100, T0);
    const char *bad[] = {"many"};
    s = harness_settle(1000, 100);
    s.header_names = n;
    s.header_values = bad;
    s.header_count = 1;
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_EINVAL);
    s.header_count = 0;
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_OK);
    harness_end(e);
}

/* The classifier the engine and the Redis backend share: every name it reads, and the
 * near misses it must not. */
static void test_header_classify_names_bucket_and_field(void **state)
{
    (void)state;
    sl_header_kind_t h = sl_header_classify("anthropic-ratelimit-input-tokens-remaining");
    assert_true(h.known && h.anthropic);
    assert_int_equal(h.bucket, SL_BUCKET_INPUT);
    assert_int_equal(h.field, SL_HEADER_REMAINING);
    h = sl_header_classify("anthropic-ratelimit-tokens-reset");
    assert_true(h.known && h.anthropic);
    assert_int_equal(h.bucket, -1); /* validated, not applied */
    assert_int_equal(h.field, SL_HEADER_RESET);
    h = sl_header_classify("x-ratelimit-limit-tokens");
    assert_true(h.known && !h.anthropic);
    assert_int_equal(h.bucket, SL_BUCKET_TOKENS);
    assert_int_equal(h.field, SL_HEADER_LIMIT);
    h = sl_header_classify("x-ratelimit-remaining-requests");
    assert_true(h.known);
    assert_int_equal(h.bucket, SL_BUCKET_REQUESTS);
    const char *const unknown[] = {"x-ratelimit-limit-images", "anthropic-ratelimit-requests-used",
                                   "anthropic-ratelimit-requests", "retry-after", ""};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        h = sl_header_classify(unknown[i]);
        assert_false(h.known);
        assert_int_equal(h.bucket, -1);
    }
}

/* The families the settle path keeps from callers without the right to resync and the
 * proxy hands to resync: every name the classifier reads, and its unread neighbours. */
static void test_header_is_ratelimit_covers_every_classified_name(void **state)
{
    (void)state;
    const char *const buckets[] = {"requests", "input-tokens", "output-tokens", "tokens"};
    const char *const fields[] = {"limit", "remaining", "reset"};
    char name[80];
    for (size_t b = 0; b < 4; b++) {
        for (size_t f = 0; f < 3; f++) {
            snprintf(name, sizeof name, "anthropic-ratelimit-%s-%s", buckets[b], fields[f]);
            assert_true(sl_header_classify(name).known);
            assert_true(sl_header_is_ratelimit(name));
            if (b == 0 || b == 3) { /* OpenAI's requests and tokens */
                snprintf(name, sizeof name, "x-ratelimit-%s-%s", fields[f], buckets[b]);
                assert_true(sl_header_classify(name).known);
                assert_true(sl_header_is_ratelimit(name));
            }
        }
    }
    assert_true(sl_header_is_ratelimit("x-ratelimit-limit-images")); /* read by no one */
    assert_false(sl_header_classify("x-ratelimit-limit-images").known);
    assert_true(sl_header_is_ratelimit("anthropic-ratelimit-requests-used"));
    const char *const other[] = {"retry-after", "anthropic-version", "ratelimit", "x-ratelimit",
                                 "content-type", ""};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        assert_false(sl_header_is_ratelimit(other[i]));
}

static void test_header_parse_count_takes_digits_up_to_the_token_maximum(void **state)
{
    (void)state;
    int64_t v = -1;
    assert_true(sl_header_parse_count("0", &v));
    assert_int_equal(v, 0);
    assert_true(sl_header_parse_count("9007199254740992", &v)); /* SL_TOKENS_MAX */
    assert_int_equal(v, SL_TOKENS_MAX);
    v = 7;
    const char *const bad[] = {"", "-1", "+1", "1.5", "12 ", "9007199254740993"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(sl_header_parse_count(bad[i], &v));
    assert_int_equal(v, 7);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_remaining_lowers_the_level_and_never_raises_it),
    cmocka_unit_test(test_requests_remaining_is_allowed_its_rounding_down),
    cmocka_unit_test(test_a_limit_that_disagrees_is_adopted),
    cmocka_unit_test(test_openai_headers_drive_the_requests_and_tokens_buckets),
    cmocka_unit_test(test_malformed_header_is_rejected_and_changes_nothing),
    cmocka_unit_test(test_settle_resyncs_from_headers_after_the_refund),
    cmocka_unit_test(test_header_classify_names_bucket_and_field),
    cmocka_unit_test(test_header_is_ratelimit_covers_every_classified_name),
    cmocka_unit_test(test_header_parse_count_takes_digits_up_to_the_token_maximum))
