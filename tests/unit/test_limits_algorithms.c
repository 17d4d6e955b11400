/* test_limits_algorithms.c - each action-limit algorithm at its boundaries, on the injected clock. */
#include "limits_harness.h"
#include "test_main.h"

#define ONE(alg, extra) "{\"x\": {\"algorithm\": \"" alg "\", \"per\": \"global\"" extra "}}"

static void expect(const sl_limit_result_t *r, bool allowed, int64_t remaining, int64_t retry_us,
                   int64_t reset_us)
{
    if (r->allowed != allowed || r->remaining != remaining || r->retry_after_us != retry_us ||
        (reset_us >= 0 && r->reset_after_us != reset_us))
        fail_msg("want allowed=%d remaining=%lld retry=%lld reset=%lld, got %d %lld %lld %lld",
                 allowed, (long long)remaining, (long long)retry_us, (long long)reset_us, r->allowed,
                 (long long)r->remaining, (long long)r->retry_after_us,
                 (long long)r->reset_after_us);
}

/* ---- token bucket ---- */

static void test_token_bucket_allows_the_burst_then_refills_continuously(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("token_bucket", ", \"rate\": 10, \"period_s\": 1, \"burst\": 5"));
    for (int i = 0; i < 5; i++) {
        sl_limit_result_t r = harness_check(ls, "x", "a", 1, 0);
        expect(&r, true, 4 - i, 0, US(0.1) * (i + 1));
        assert_int_equal(r.limit, 5);
    }
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 0);
    expect(&r, false, 0, US(0.1), US(0.5));
    assert_int_equal(r.checked[0].reason, SL_LIMIT_RATE);
    /* 0.05 s refills half a token: still no. At 0.1 s one whole token. */
    r = harness_check(ls, "x", "a", 1, 0.05);
    expect(&r, false, 0, US(0.05), -1);
    r = harness_check(ls, "x", "a", 1, 0.1);
    expect(&r, true, 0, 0, US(0.5));
    /* A second later the bucket is full again, never more than burst. */
    r = harness_check(ls, "x", "a", 0, 10);
    expect(&r, true, 5, 0, 0);
    r = harness_check(ls, "x", "a", 6, 10);
    expect(&r, false, 5, -1, 0);
    assert_int_equal(r.checked[0].reason, SL_LIMIT_NEVER);
    sl_limits_free(ls);
}

/* ---- fixed window ---- */

static void test_fixed_window_lets_twice_the_rate_through_across_a_boundary(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("fixed_window", ", \"rate\": 10, \"period_s\": 1"));
    int allowed = 0;
    for (int i = 0; i < 12; i++) allowed += harness_check(ls, "x", "a", 1, 0.9).allowed;
    assert_int_equal(allowed, 10);
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 0.95);
    expect(&r, false, 0, US(0.05), US(0.05));
    /* The documented trade-off: the next window starts empty, 0.1 s later. */
    for (int i = 0; i < 12; i++) allowed += harness_check(ls, "x", "a", 1, 1.0).allowed;
    assert_int_equal(allowed, 20); /* 20 within 0.1 s of a 10-per-second limit */
    r = harness_check(ls, "x", "a", 0, 1.5);
    expect(&r, true, 0, 0, US(0.5));
    sl_limits_free(ls);
}

static void test_an_earlier_time_counts_as_the_latest_one_seen(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("fixed_window", ", \"rate\": 3, \"period_s\": 1"));
    assert_true(harness_check(ls, "x", "a", 3, 1.5).allowed);
    /* A clock that stepped back into the previous window does not find it empty. */
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 0.5);
    assert_false(r.allowed);
    assert_int_equal(r.retry_after_us, US(0.5));
    sl_limits_free(ls);
}

/* ---- sliding window (exact) ---- */

static void test_sliding_window_has_no_boundary_burst(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("sliding_window", ", \"rate\": 10, \"period_s\": 1"));
    int allowed = 0;
    for (int i = 0; i < 12; i++) allowed += harness_check(ls, "x", "a", 1, 0.9).allowed;
    assert_int_equal(allowed, 10);
    /* Where the fixed window opened again, the log still holds all ten. */
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 1.0);
    expect(&r, false, 0, US(0.9), US(0.9));
    r = harness_check(ls, "x", "a", 1, 1.9 - 1e-6);
    assert_false(r.allowed);
    r = harness_check(ls, "x", "a", 10, 1.9);
    expect(&r, true, 0, 0, US(1));
    sl_limits_free(ls);
}

static void test_sliding_window_retry_waits_for_the_oldest_entries_needed(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("sliding_window", ", \"rate\": 5, \"period_s\": 10"));
    assert_true(harness_check(ls, "x", "a", 2, 0).allowed);
    assert_true(harness_check(ls, "x", "a", 1, 3).allowed);
    assert_true(harness_check(ls, "x", "a", 2, 6).allowed);
    /* 3 units need the entries of t=0 (2) and t=3 (1) gone: at t=13. */
    sl_limit_result_t r = harness_check(ls, "x", "a", 3, 7);
    expect(&r, false, 0, US(6), US(9));
    r = harness_check(ls, "x", "a", 3, 13);
    expect(&r, true, 0, 0, US(10));
    sl_limits_free(ls);
}

/* ---- sliding window (approximate) ---- */

static void test_sliding_window_approx_weights_the_previous_window(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("sliding_window_approx", ", \"rate\": 10, \"period_s\": 1"));
    for (int i = 0; i < 10; i++) assert_true(harness_check(ls, "x", "a", 1, 0.9).allowed);
    /* At the boundary the previous window weighs fully: no 2x burst. */
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 1.0);
    expect(&r, false, 0, US(0.1), US(1.0));
    /* At 1.5 s it weighs half: 5 left. */
    r = harness_check(ls, "x", "a", 0, 1.5);
    expect(&r, true, 5, 0, US(0.5));
    r = harness_check(ls, "x", "a", 5, 1.5);
    expect(&r, true, 0, 0, US(1.5));
    r = harness_check(ls, "x", "a", 1, 1.5);
    assert_false(r.allowed);
    assert_true(harness_check(ls, "x", "a", 1, 1.5 + r.retry_after_us / 1e6).allowed);
    sl_limits_free(ls);
}

/* ---- GCRA: the answers of redis-cell's CL.THROTTLE ---- */

typedef struct cl_case {
    double t_s;
    int64_t quantity, remaining;
    double reset_after_s, retry_after_s; /* retry -1: allowed, as CL.THROTTLE answers */
    bool limited;
} cl_case_t;

/* redis-cell's own table (max_burst 4, 1 per second): limit 5. */
static void test_gcra_answers_as_cl_throttle_table(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("gcra", ", \"rate\": 1, \"period_s\": 1, \"burst\": 5"));
    static const cl_case_t cases[] = {
        {0, 6, 5, 0, -1, true}, /* never more than the limit at once */
        {0, 1, 4, 1, -1, false},       {0, 1, 3, 2, -1, false},       {0, 1, 2, 3, -1, false},
        {0, 1, 1, 4, -1, false},       {0, 1, 0, 5, -1, false},       {0, 1, 0, 5, 1, true},
        {3.0, 1, 2, 3.0, -1, false},   {3.1, 1, 1, 3.9, -1, false},   {4.0, 1, 1, 4.0, -1, false},
        {8.0, 1, 4, 1.0, -1, false},   {9.5, 1, 4, 1.0, -1, false},   {9.5, 0, 4, 1.0, -1, false},
        {9.5, 2, 2, 3.0, -1, false},   {9.5, 5, 2, 3.0, 3.0, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const cl_case_t *c = &cases[i];
        sl_limit_result_t r = harness_check(ls, "x", "a", c->quantity, c->t_s);
        if (r.allowed == c->limited || r.limit != 5 || r.remaining != c->remaining ||
            r.reset_after_us != US(c->reset_after_s) ||
            (c->limited ? r.retry_after_us != (c->retry_after_s < 0 ? -1 : US(c->retry_after_s))
                        : r.retry_after_us != 0))
            fail_msg("case %zu: got allowed=%d limit=%lld remaining=%lld reset=%lld retry=%lld", i,
                     r.allowed, (long long)r.limit, (long long)r.remaining,
                     (long long)r.reset_after_us, (long long)r.retry_after_us);
    }
    sl_limits_free(ls);
}

/* The README's example: CL.THROTTLE user123 15 30 60 -> 0 16 15 -1 2. */
static void test_gcra_matches_cl_throttle_readme_example(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("gcra", ", \"rate\": 30, \"period_s\": 60, \"burst\": 16"));
    sl_limit_result_t r = harness_check(ls, "x", "user123", 1, 0);
    assert_true(r.allowed);
    assert_int_equal(r.limit, 16);
    assert_int_equal(r.remaining, 15);
    assert_int_equal(sl_limits_cl_seconds(r.allowed ? -1 : r.retry_after_us), -1);
    assert_int_equal(sl_limits_cl_seconds(r.reset_after_us), 2);
    /* CL.THROTTLE rounds up a partial second of a millisecond or more. */
    assert_int_equal(sl_limits_cl_seconds(US(2.0)), 2);
    assert_int_equal(sl_limits_cl_seconds(US(2.001)), 3);
    assert_int_equal(sl_limits_cl_seconds(US(2.0009)), 2);
    assert_int_equal(sl_limits_cl_seconds(0), 0);
    sl_limits_free(ls);
}

/* ---- leaky bucket ---- */

static void test_leaky_bucket_spaces_actions_and_refuses_when_the_queue_is_full(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("leaky_bucket", ", \"rate\": 10, \"period_s\": 1, \"burst\": 3"));
    /* Three fit: the first runs now, the others wait their turn 0.1 s apart. */
    for (int i = 0; i < 3; i++) {
        sl_limit_result_t r = harness_check(ls, "x", "a", 1, 0);
        expect(&r, true, 2 - i, 0, US(0.1) * (i + 1));
        assert_int_equal(r.delay_us, US(0.1) * i);
    }
    /* The queue holds 3 units: the fourth overflows until one has drained. */
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 0);
    expect(&r, false, 0, US(0.1), US(0.3));
    assert_int_equal(r.delay_us, 0);
    r = harness_check(ls, "x", "a", 1, 0.1);
    expect(&r, true, 0, 0, US(0.3));
    assert_int_equal(r.delay_us, US(0.2));
    r = harness_check(ls, "x", "a", 4, 5);
    assert_int_equal(r.checked[0].reason, SL_LIMIT_NEVER);
    sl_limits_free(ls);
}

static void test_leaky_bucket_of_one_is_a_strict_meter(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("leaky_bucket", ", \"rate\": 2, \"period_s\": 1, \"burst\": 1"));
    assert_true(harness_check(ls, "x", "a", 1, 0).allowed);
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 0.25);
    expect(&r, false, 0, US(0.25), US(0.25));
    r = harness_check(ls, "x", "a", 1, 0.5);
    expect(&r, true, 0, 0, US(0.5));
    assert_int_equal(r.delay_us, 0);
    sl_limits_free(ls);
}

/* ---- concurrency ---- */

static void test_concurrency_holds_until_release(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("concurrency", ", \"rate\": 2, \"ttl_s\": 10"));
    sl_limit_request_t req = harness_req("a", 1);
    assert_true(harness_check(ls, "x", "a", 1, 0).allowed);
    assert_true(harness_check(ls, "x", "a", 1, 1).allowed);
    sl_limit_result_t r = harness_check(ls, "x", "a", 1, 2);
    expect(&r, false, 0, US(8), US(9)); /* the first hold's TTL ends at 10 s */
    assert_int_equal(sl_limits_release(ls, "x", &req, AT(3)), SL_OK);
    sl_limit_key_info_t info;
    assert_int_equal(sl_limits_key_info(ls, "x", &req, AT(3), &info), SL_OK);
    assert_int_equal(info.held, 1);
    r = harness_check(ls, "x", "a", 1, 3);
    expect(&r, true, 0, 0, US(10));
    assert_int_equal(sl_limits_release(ls, "x", &req, AT(4)), SL_OK);
    assert_int_equal(sl_limits_release(ls, "x", &req, AT(4)), SL_OK);
    assert_int_equal(sl_limits_release(ls, "x", &req, AT(4)), SL_ENOTFOUND);
    sl_limits_free(ls);
}

static void test_concurrency_hold_ends_by_its_ttl(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ONE("concurrency", ", \"rate\": 1, \"ttl_s\": 5"));
    sl_limit_request_t req = harness_req("a", 1);
    assert_true(harness_check(ls, "x", "a", 1, 0).allowed);
    assert_false(harness_check(ls, "x", "a", 1, 5 - 1e-6).allowed);
    assert_true(harness_check(ls, "x", "a", 1, 5).allowed);
    /* The hold that lapsed cannot be released again; the new one can. */
    assert_int_equal(sl_limits_release(ls, "x", &req, AT(6)), SL_OK);
    assert_int_equal(sl_limits_release(ls, "x", &req, AT(6)), SL_ENOTFOUND);
    sl_limits_free(ls);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_token_bucket_allows_the_burst_then_refills_continuously),
    cmocka_unit_test(test_fixed_window_lets_twice_the_rate_through_across_a_boundary),
    cmocka_unit_test(test_an_earlier_time_counts_as_the_latest_one_seen),
    cmocka_unit_test(test_sliding_window_has_no_boundary_burst),
    cmocka_unit_test(test_sliding_window_retry_waits_for_the_oldest_entries_needed),
    cmocka_unit_test(test_sliding_window_approx_weights_the_previous_window),
    cmocka_unit_test(test_gcra_answers_as_cl_throttle_table),
    cmocka_unit_test(test_gcra_matches_cl_throttle_readme_example),
    cmocka_unit_test(test_leaky_bucket_spaces_actions_and_refuses_when_the_queue_is_full),
    cmocka_unit_test(test_leaky_bucket_of_one_is_a_strict_meter),
    cmocka_unit_test(test_concurrency_holds_until_release),
    cmocka_unit_test(test_concurrency_hold_ends_by_its_ttl))
