/* test_provider.c - the provider model: refill, admission, prompt cache, usage, spend cap. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "provider.h"
#include "test_main.h"

static sl_provider_t *make(int64_t in_tpm, int64_t out_tpm, int64_t rpm)
{
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.input_tpm = in_tpm;
    c.output_tpm = out_tpm;
    c.rpm = rpm;
    sl_provider_t *p = sl_provider_new(&c, 0, NULL, 0);
    assert_non_null(p);
    return p;
}

static sl_provider_result_t call(sl_provider_t *p, double now, int64_t in, int64_t prefix,
                                 uint64_t key, int64_t max_tokens, int64_t out)
{
    sl_provider_call_t c = {.input_tokens = in, .cached_prefix_tokens = prefix, .cache_key = key,
                            .max_tokens = max_tokens, .output_tokens = out};
    sl_provider_result_t r;
    sl_provider_begin(p, &c, now, &r);
    return r;
}

static void test_buckets_refill_continuously_not_at_the_minute(void **state)
{
    (void)state;
    sl_provider_t *p = make(60000, 0, 0);
    sl_provider_result_t r = call(p, 0, 60000, 0, 0, 1, 1);
    assert_int_equal(r.refusal, SL_PROVIDER_OK);
    sl_provider_levels_t l;
    sl_provider_levels(p, 1.0, &l);
    assert_true(fabs(l.input_tokens - 1000.0) < 1e-6);
    sl_provider_levels(p, 30.0, &l);
    assert_true(fabs(l.input_tokens - 30000.0) < 1e-6);
    sl_provider_levels(p, 500.0, &l);
    assert_true(fabs(l.input_tokens - 60000.0) < 1e-6); /* capped at the limit */
    sl_provider_free(p);
}

static void test_429_has_retry_after_and_changes_nothing(void **state)
{
    (void)state;
    sl_provider_t *p = make(60000, 0, 0);
    assert_int_equal(call(p, 0, 57000, 0, 0, 1, 1).refusal, SL_PROVIDER_OK);
    sl_provider_result_t r = call(p, 0, 9000, 0, 0, 1, 1);
    assert_int_equal(r.refusal, SL_PROVIDER_RATE_LIMITED);
    assert_int_equal(r.http_status, 429);
    assert_int_equal(r.limit, SL_PROVIDER_LIMIT_INPUT);
    assert_true(r.retry_after_s == 6.0); /* 6000 missing at 1000/s */
    assert_int_equal(r.input_tokens, 0);
    sl_provider_levels_t l;
    sl_provider_levels(p, 0, &l);
    assert_true(fabs(l.input_tokens - 3000.0) < 1e-6);
    /* After retry-after it fits. */
    assert_int_equal(call(p, 6.0, 9000, 0, 0, 1, 1).refusal, SL_PROVIDER_OK);
    sl_provider_stats_t st;
    sl_provider_stats(p, &st);
    assert_int_equal(st.requests, 3);
    assert_int_equal(st.http_429, 1);
    assert_int_equal(st.http_429_rate, 1);
    sl_provider_free(p);
}

static void test_a_call_above_the_limit_is_always_refused(void **state)
{
    (void)state;
    sl_provider_t *p = make(10000, 0, 0);
    sl_provider_result_t r = call(p, 0, 10001, 0, 0, 1, 1);
    assert_int_equal(r.refusal, SL_PROVIDER_RATE_LIMITED);
    assert_true(r.retry_after_s >= 1);
    sl_provider_free(p);
}

static void test_output_is_charged_max_tokens_then_corrected(void **state)
{
    (void)state;
    sl_provider_t *p = make(0, 60000, 0);
    sl_provider_result_t r = call(p, 0, 100, 0, 0, 8000, 1000);
    assert_int_equal(r.output_tokens, 1000);
    sl_provider_levels_t l;
    sl_provider_levels(p, 0, &l);
    assert_true(fabs(l.output_tokens - 52000.0) < 1e-6);
    sl_provider_end(p, &r, 0);
    sl_provider_levels(p, 0, &l);
    assert_true(fabs(l.output_tokens - 59000.0) < 1e-6);
    sl_provider_free(p);
}

static void test_cache_reads_are_free_and_ttl_is_refreshed_on_each_hit(void **state)
{
    (void)state;
    sl_provider_t *p = make(1000000, 0, 0);
    sl_provider_result_t r = call(p, 0, 500, 50000, 42, 10, 5);
    assert_int_equal(r.input_tokens, 500);
    assert_int_equal(r.cache_creation_input_tokens, 50000);
    assert_int_equal(r.cache_read_input_tokens, 0);
    sl_provider_levels_t before, after;
    sl_provider_levels(p, 200, &before);
    r = call(p, 200, 500, 50000, 42, 10, 5); /* hit: only the tail counts */
    assert_int_equal(r.cache_read_input_tokens, 50000);
    assert_int_equal(r.cache_creation_input_tokens, 0);
    sl_provider_levels(p, 200, &after);
    assert_true(fabs(before.input_tokens - after.input_tokens - 500) < 1e-6);
    /* 450 s after creation, but 250 s after the last hit: still warm. */
    r = call(p, 450, 500, 50000, 42, 10, 5);
    assert_int_equal(r.cache_read_input_tokens, 50000);
    assert_true(sl_provider_cache_warm(p, 42, 749));
    assert_false(sl_provider_cache_warm(p, 42, 751));
    /* Lapsed: billed in full as cache creation again. */
    r = call(p, 760, 500, 50000, 42, 10, 5);
    assert_int_equal(r.cache_creation_input_tokens, 50000);
    assert_int_equal(r.cache_read_input_tokens, 0);
    sl_provider_free(p);
}

/* The cache life runs from the start of the call that used the prefix, not from its end
 * (Anthropic: "refreshed each time the cached content is used"; docs/design.md): a long
 * call does not keep its prefix warm for longer. */
static void test_cache_life_runs_from_the_calls_start(void **state)
{
    (void)state;
    sl_provider_t *p = make(1000000, 0, 0);
    sl_provider_result_t r = call(p, 0, 500, 50000, 7, 20000, 12000); /* 200 s of output */
    assert_int_equal(r.cache_creation_input_tokens, 50000);
    assert_true(r.duration_s > 150);
    sl_provider_end(p, &r, r.duration_s);
    assert_true(sl_provider_cache_warm(p, 7, 299));
    assert_false(sl_provider_cache_warm(p, 7, 301)); /* 100 s or less after the call ended */
    r = call(p, 301, 500, 50000, 7, 10, 5);
    assert_int_equal(r.cache_creation_input_tokens, 50000);
    sl_provider_free(p);
}

/* A 1-hour write is billed as one and kept an hour; a 5-minute read of it never shortens it;
 * mixed lifetimes bill 1-hour up to the last 1-hour breakpoint (issue 28). */
static void test_1h_writes_are_billed_and_kept_an_hour(void **state)
{
    (void)state;
    sl_provider_t *p = make(10000000, 0, 0);
    sl_provider_call_t c = {.input_tokens = 100, .cached_prefix_tokens = 50000, .cache_key = 9,
                            .max_tokens = 10, .output_tokens = 5, .ttl_1h = true};
    sl_provider_result_t r;
    sl_provider_begin(p, &c, 0, &r);
    assert_int_equal(r.cache_creation_input_tokens, 50000);
    assert_int_equal(r.cache_creation_1h_input_tokens, 50000);
    assert_true(sl_provider_cache_warm(p, 9, 3599));
    c.ttl_1h = false; /* a 5-minute read at 3000 s: the hour still ends at 3600 */
    sl_provider_begin(p, &c, 3000, &r);
    assert_int_equal(r.cache_read_input_tokens, 50000);
    assert_true(sl_provider_cache_warm(p, 9, 3599));
    assert_false(sl_provider_cache_warm(p, 9, 3601));
    /* Mixed: a 1-hour breakpoint at 20,000 then a 5-minute one at 60,000, both cold. */
    sl_provider_call_t m = {.input_tokens = 100, .cached_prefix_tokens = 60000, .cache_key = 11,
                            .max_tokens = 10, .output_tokens = 5, .earlier_count = 1,
                            .earlier = {{.prefix_tokens = 20000, .cache_key = 10, .ttl_1h = true}}};
    sl_provider_begin(p, &m, 4000, &r);
    assert_int_equal(r.cache_creation_input_tokens, 60000);
    assert_int_equal(r.cache_creation_1h_input_tokens, 20000);
    /* A 1-hour breakpoint after a 5-minute one is invalid. */
    m.earlier[0].ttl_1h = false;
    m.ttl_1h = true;
    m.cache_key = 12;
    sl_provider_begin(p, &m, 4001, &r);
    assert_int_equal(r.refusal, SL_PROVIDER_INVALID);
    sl_provider_free(p);
}

/* Prompts above the long-context threshold draw from buckets of their own. */
static void test_long_context_calls_have_their_own_buckets(void **state)
{
    (void)state;
    sl_provider_config_t cfg;
    sl_provider_config_init(&cfg);
    cfg.input_tpm = 1000000;
    cfg.long_context_threshold_tokens = 200000;
    cfg.long_context_input_tpm = 300000;
    sl_provider_t *p = sl_provider_new(&cfg, 0, NULL, 0);
    assert_non_null(p);
    sl_provider_result_t r = call(p, 0, 250000, 0, 0, 10, 5);
    assert_int_equal(r.refusal, SL_PROVIDER_OK);
    assert_true(r.long_context);
    r = call(p, 0, 250000, 0, 0, 10, 5); /* 50,000 left in the long-context bucket */
    assert_int_equal(r.refusal, SL_PROVIDER_RATE_LIMITED);
    assert_int_equal(r.limit, SL_PROVIDER_LIMIT_LONG_CONTEXT_INPUT);
    assert_int_equal((int64_t)r.retry_after_s, 40); /* 200,000 at 5,000 a second */
    r = call(p, 0, 190000, 0, 0, 10, 5); /* at the threshold or below: the standard bucket */
    assert_int_equal(r.refusal, SL_PROVIDER_OK);
    assert_false(r.long_context);
    sl_provider_stats_t st;
    sl_provider_stats(p, &st);
    assert_int_equal(st.long_context, 1);
    sl_provider_free(p);
}

static void test_short_prefixes_are_not_cached(void **state)
{
    (void)state;
    sl_provider_t *p = make(0, 0, 0);
    sl_provider_result_t r = call(p, 0, 100, 800, 7, 10, 5);
    assert_int_equal(r.input_tokens, 900);
    assert_int_equal(r.cache_creation_input_tokens, 0);
    r = call(p, 1, 100, 800, 7, 10, 5);
    assert_int_equal(r.cache_read_input_tokens, 0);
    sl_provider_free(p);
}

static void test_cache_reads_count_when_configured(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.input_tpm = 100000;
    c.cache_reads_count = true;
    sl_provider_t *p = sl_provider_new(&c, 0, NULL, 0);
    call(p, 0, 0, 40000, 1, 10, 5);
    sl_provider_result_t r = call(p, 0, 0, 40000, 1, 10, 5);
    assert_int_equal(r.cache_read_input_tokens, 40000);
    sl_provider_levels_t l;
    sl_provider_levels(p, 0, &l);
    assert_true(fabs(l.input_tokens - 20000.0) < 1e-6);
    sl_provider_free(p);
}

static void test_drift_scales_the_providers_counts(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.drift = 1.1;
    sl_provider_t *p = sl_provider_new(&c, 0, NULL, 0);
    assert_int_equal(sl_provider_count(p, 1000), 1100);
    sl_provider_result_t r = call(p, 0, 1000, 20000, 3, 100, 50);
    assert_int_equal(r.input_tokens, 1100);
    assert_int_equal(r.cache_creation_input_tokens, 22000);
    sl_provider_free(p);
}

static void test_usage_sums_equal_the_stats(void **state)
{
    (void)state;
    sl_provider_t *p = make(200000, 50000, 100);
    int64_t sum = 0;
    for (int i = 0; i < 200; i++) {
        sl_provider_result_t r = call(p, i * 0.7, 1000 + i, (i % 3) ? 5000 : 0, (uint64_t)(i % 5),
                                      2000, -1);
        sum += r.input_tokens + r.cache_creation_input_tokens + r.cache_read_input_tokens +
               r.output_tokens;
        sl_provider_end(p, &r, i * 0.7 + 1);
    }
    sl_provider_stats_t st;
    sl_provider_stats(p, &st);
    assert_int_equal(sum, st.input_tokens + st.cache_creation_input_tokens +
                              st.cache_read_input_tokens + st.output_tokens);
    assert_int_equal(st.requests, 200);
    assert_int_equal(st.admitted + st.http_429, 200);
    sl_provider_free(p);
}

static void test_spend_cap_is_a_429_without_retry_after(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.spend_cap_tokens = 1000;
    sl_provider_t *p = sl_provider_new(&c, 0, NULL, 0);
    assert_int_equal(call(p, 0, 900, 0, 0, 200, 200).refusal, SL_PROVIDER_OK);
    sl_provider_result_t r = call(p, 1, 10, 0, 0, 10, 10);
    assert_int_equal(r.refusal, SL_PROVIDER_SPEND_CAP);
    assert_int_equal(r.http_status, 429);
    assert_true(r.retry_after_s < 0);
    char body[512];
    sl_provider_error_body(p, SL_PROVIDER_ANTHROPIC, &r, body, sizeof body);
    assert_non_null(strstr(body, "\"type\":\"rate_limit_error\""));
    assert_non_null(strstr(body, "spend limit"));
    sl_provider_error_body(p, SL_PROVIDER_OPENAI, &r, body, sizeof body);
    assert_non_null(strstr(body, "\"code\":\"insufficient_quota\""));
    sl_provider_header_t h[SL_PROVIDER_MAX_HEADERS];
    size_t n = sl_provider_headers(p, SL_PROVIDER_ANTHROPIC, &r, 1, h, SL_PROVIDER_MAX_HEADERS);
    for (size_t i = 0; i < n; i++) assert_string_not_equal(h[i].name, "retry-after");
    sl_provider_set_spend_capped(p, false);
    sl_provider_free(p);
}

static void test_invalid_calls_are_400(void **state)
{
    (void)state;
    sl_provider_t *p = make(0, 0, 0);
    sl_provider_result_t r = call(p, 0, -1, 0, 0, 10, 1);
    assert_int_equal(r.refusal, SL_PROVIDER_INVALID);
    assert_int_equal(r.http_status, 400);
    r = call(p, 0, 1, 0, 0, 0, 1);
    assert_int_equal(r.http_status, 400);
    sl_provider_free(p);
}

static void test_bad_config_names_the_field(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.outside_share = 1.5;
    char err[128];
    assert_null(sl_provider_new(&c, 0, err, sizeof err));
    assert_non_null(strstr(err, "outside_share"));
}

static void test_outside_traffic_is_seeded_and_takes_its_share(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.input_tpm = 600000;
    c.outside_share = 0.2;
    c.outside_rpm = 30;
    c.seed = 9;
    sl_provider_t *a = sl_provider_new(&c, 0, NULL, 0), *b = sl_provider_new(&c, 0, NULL, 0);
    sl_provider_levels_t la, lb;
    sl_provider_levels(a, 3600, &la);
    for (int i = 1; i <= 3600; i++) sl_provider_levels(b, i, &lb); /* polled often */
    assert_true(fabs(la.input_tokens - lb.input_tokens) < 1e-3);
    sl_provider_stats_t st;
    sl_provider_stats(a, &st);
    /* ~30 a minute for an hour, each 0.2 x 600000 / 30 = 4000 tokens. */
    assert_true(st.outside_requests > 1500 && st.outside_requests < 2100);
    assert_int_equal(st.outside_input_tokens, (int64_t)st.outside_requests * 4000);
    sl_provider_free(a);
    sl_provider_free(b);
}

static void test_rng_is_deterministic(void **state)
{
    (void)state;
    sl_rng_t a, b;
    sl_rng_seed(&a, 5);
    sl_rng_seed(&b, 5);
    for (int i = 0; i < 100; i++) assert_true(sl_rng_next(&a) == sl_rng_next(&b));
    for (int i = 0; i < 1000; i++) {
        double u = sl_rng_uniform(&a);
        assert_true(u >= 0 && u < 1);
    }
}

static sl_provider_t *make_cfg(void (*tune)(sl_provider_config_t *c))
{
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.input_tpm = 1000000;
    c.output_tpm = 1000000;
    c.rpm = 1000;
    tune(&c);
    sl_provider_t *p = sl_provider_new(&c, 0, NULL, 0);
    assert_non_null(p);
    return p;
}

static void all_overloaded(sl_provider_config_t *c)
{
    c->overload_rate = 1.0;
}

static void test_an_overloaded_call_counts_nothing(void **state)
{
    (void)state;
    sl_provider_t *p = make_cfg(all_overloaded);
    sl_provider_levels_t before, after;
    sl_provider_levels(p, 0, &before);
    sl_provider_result_t r = call(p, 0, 5000, 0, 0, 100, 10);
    assert_int_equal(r.refusal, SL_PROVIDER_OVERLOADED);
    assert_int_equal(sl_provider_http_status(SL_PROVIDER_ANTHROPIC, &r), 529);
    assert_int_equal(sl_provider_http_status(SL_PROVIDER_OPENAI, &r), 503);
    assert_int_equal(r.input_tokens + r.output_tokens + r.cache_creation_input_tokens, 0);
    sl_provider_levels(p, 0, &after);
    assert_true(before.input_tokens == after.input_tokens);
    assert_true(before.output_tokens == after.output_tokens);
    assert_true(before.requests == after.requests);
    sl_provider_stats_t st;
    sl_provider_stats(p, &st);
    assert_int_equal(st.overloaded, 1);
    assert_int_equal(st.input_tokens, 0);
    sl_provider_free(p);
}

static void all_streams_break(sl_provider_config_t *c)
{
    c->stream_error_rate = 1.0;
}

static void test_a_broken_stream_bills_the_output_written_before_the_error(void **state)
{
    (void)state;
    sl_provider_t *p = make_cfg(all_streams_break);
    for (int i = 0; i < 50; i++) {
        sl_provider_call_t c = {.input_tokens = 100, .max_tokens = 200, .output_tokens = 40,
                                .stream = true};
        sl_provider_result_t r;
        sl_provider_begin(p, &c, i, &r);
        assert_int_equal(r.refusal, SL_PROVIDER_OK);
        assert_true(r.stream_error);
        assert_true(r.output_tokens >= 1 && r.output_tokens <= 39);
        sl_provider_end(p, &r, i + r.duration_s);
    }
    /* Not a stream: never broken off. */
    sl_provider_result_t r = call(p, 100, 100, 0, 0, 200, 40);
    assert_false(r.stream_error);
    assert_int_equal(r.output_tokens, 40);
    sl_provider_stats_t st;
    sl_provider_stats(p, &st);
    assert_int_equal(st.stream_errors, 50);
    sl_provider_free(p);
}

static void two_counts_per_minute(sl_provider_config_t *c)
{
    c->count_tokens_rpm = 2;
}

static void test_token_counting_has_its_own_requests_per_minute(void **state)
{
    (void)state;
    sl_provider_t *p = make_cfg(two_counts_per_minute);
    sl_provider_levels_t before, after;
    sl_provider_levels(p, 0, &before);
    sl_provider_result_t r;
    sl_provider_count_tokens(p, 0, &r);
    assert_int_equal(r.refusal, SL_PROVIDER_OK);
    sl_provider_count_tokens(p, 0, &r);
    assert_int_equal(r.refusal, SL_PROVIDER_OK);
    sl_provider_count_tokens(p, 0, &r);
    assert_int_equal(r.refusal, SL_PROVIDER_RATE_LIMITED);
    assert_int_equal(r.limit, SL_PROVIDER_LIMIT_COUNT_TOKENS);
    assert_true(r.retry_after_s >= 1);
    sl_provider_levels(p, 0, &after);
    assert_true(before.requests == after.requests); /* the Messages limits are untouched */
    sl_provider_count_tokens(p, 30.0, &r);          /* one request back per 30 s */
    assert_int_equal(r.refusal, SL_PROVIDER_OK);
    sl_provider_free(p);
}

static void test_several_breakpoints_read_the_longest_cached_prefix(void **state)
{
    (void)state;
    sl_provider_t *p = make(10000000, 0, 0);
    /* Turn 1 caches a 3,000-token system prompt (key 1). */
    sl_provider_result_t r = call(p, 0, 100, 3000, 1, 10, 5);
    assert_int_equal(r.cache_creation_input_tokens, 3000);
    /* Turn 2 keeps that breakpoint and adds one after the conversation (key 2, 5,000). */
    sl_provider_call_t c = {.input_tokens = 100, .cached_prefix_tokens = 5000, .cache_key = 2,
                            .max_tokens = 10, .output_tokens = 5, .earlier_count = 1,
                            .earlier = {{.prefix_tokens = 3000, .cache_key = 1}}};
    sl_provider_begin(p, &c, 10, &r);
    assert_int_equal(r.cache_read_input_tokens, 3000);
    assert_int_equal(r.cache_creation_input_tokens, 2000);
    assert_int_equal(r.input_tokens, 100);
    sl_provider_end(p, &r, 10 + r.duration_s);
    /* Turn 3 reads all 5,000 at the last breakpoint. */
    sl_provider_begin(p, &c, 20, &r);
    assert_int_equal(r.cache_read_input_tokens, 5000);
    assert_int_equal(r.cache_creation_input_tokens, 0);
    sl_provider_free(p);
}

/* OpenAI's n: every choice may write max_tokens, so n x max_tokens is held from the
 * start and every choice's output is billed; the end gives back the unused rest. */
static void test_choices_hold_max_tokens_times_n_and_bill_every_choice(void **state)
{
    (void)state;
    sl_provider_t *p = make(0, 40000, 0);
    sl_provider_call_t c = {.input_tokens = 10, .max_tokens = 4000, .output_tokens = 24,
                            .choices = 8};
    sl_provider_result_t r;
    sl_provider_begin(p, &c, 0, &r);
    assert_int_equal(r.refusal, SL_PROVIDER_OK);
    assert_int_equal(r.choices, 8);
    assert_int_equal(r.reserved_output_tokens, 32000);
    sl_provider_levels_t l;
    sl_provider_levels(p, 0, &l);
    assert_true(fabs(l.output_tokens - 8000.0) < 1e-6);
    sl_provider_result_t again;
    sl_provider_begin(p, &c, 0, &again); /* 32,000 more do not fit */
    assert_int_equal(again.refusal, SL_PROVIDER_RATE_LIMITED);
    assert_int_equal(again.limit, SL_PROVIDER_LIMIT_OUTPUT);
    sl_provider_end(p, &r, 0);
    sl_provider_levels(p, 0, &l);
    assert_true(fabs(l.output_tokens - (40000.0 - 8 * 24)) < 1e-6);
    sl_provider_stats_t st;
    sl_provider_stats(p, &st);
    assert_int_equal(st.output_tokens, 8 * 24);
    c.choices = SL_PROVIDER_MAX_CHOICES + 1;
    sl_provider_begin(p, &c, 1, &r);
    assert_int_equal(r.refusal, SL_PROVIDER_INVALID);
    sl_provider_free(p);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_buckets_refill_continuously_not_at_the_minute),
    cmocka_unit_test(test_choices_hold_max_tokens_times_n_and_bill_every_choice),
    cmocka_unit_test(test_an_overloaded_call_counts_nothing),
    cmocka_unit_test(test_a_broken_stream_bills_the_output_written_before_the_error),
    cmocka_unit_test(test_token_counting_has_its_own_requests_per_minute),
    cmocka_unit_test(test_several_breakpoints_read_the_longest_cached_prefix),
    cmocka_unit_test(test_429_has_retry_after_and_changes_nothing),
    cmocka_unit_test(test_a_call_above_the_limit_is_always_refused),
    cmocka_unit_test(test_output_is_charged_max_tokens_then_corrected),
    cmocka_unit_test(test_cache_reads_are_free_and_ttl_is_refreshed_on_each_hit),
    cmocka_unit_test(test_cache_life_runs_from_the_calls_start),
    cmocka_unit_test(test_short_prefixes_are_not_cached),
    cmocka_unit_test(test_cache_reads_count_when_configured),
    cmocka_unit_test(test_1h_writes_are_billed_and_kept_an_hour),
    cmocka_unit_test(test_long_context_calls_have_their_own_buckets),
    cmocka_unit_test(test_drift_scales_the_providers_counts),
    cmocka_unit_test(test_usage_sums_equal_the_stats),
    cmocka_unit_test(test_spend_cap_is_a_429_without_retry_after),
    cmocka_unit_test(test_invalid_calls_are_400),
    cmocka_unit_test(test_bad_config_names_the_field),
    cmocka_unit_test(test_outside_traffic_is_seeded_and_takes_its_share),
    cmocka_unit_test(test_rng_is_deterministic))
