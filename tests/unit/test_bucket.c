/* test_bucket.c - token buckets: continuous refill, the cap, and debt. */
#include "engine_harness.h"
#include "test_main.h"

static void test_refill_is_continuous_at_capacity_per_minute_without_minute_reset(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(60000, 0, 0); /* capacity 51,000, 850 per second */
    harness_grant(e, "a", 51000, 0, T0);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT)) < 1e-6);
    /* Every second adds capacity/60, also across what would be a minute boundary. */
    for (int s = 1; s <= 59; s++) {
        assert_int_equal(sl_engine_advance(e, T0 + s), SL_OK);
        assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 850.0 * s) < 1e-6);
    }
    assert_int_equal(sl_engine_advance(e, T0 + 59.5), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 850.0 * 59.5) < 1e-6);
    harness_end(e);
}

static void test_level_never_exceeds_capacity(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(60000, 0, 0);
    harness_grant(e, "a", 1000, 0, T0);
    assert_int_equal(sl_engine_advance(e, T0 + 3600), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 51000.0) < 1e-6);
    harness_end(e);
}

static void test_underestimate_shows_as_debt_at_once_so_next_grants_wait(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 0, 0); /* capacity 85,000 */
    uint64_t l = harness_grant(e, "refactor", 10000, 0, T0);
    sl_settle_t s = harness_settle(40000, 0); /* 30k more than reserved */
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(e, l, &s, T0, &res), SL_OK);
    assert_int_equal(res.adjust_input_tokens, -30000);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 45000.0) < 1e-6);
    /* Another 50k turn no longer fits: it waits instead of causing a 429. */
    sl_request_t r = harness_req("lint", 50000, 0);
    harness_request_as(e, &r, T0, SL_QUEUED);
    harness_end(e);
}

static void test_debt_can_take_the_level_below_zero(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000, 0, 0); /* capacity 8,500 */
    uint64_t l = harness_grant(e, "a", 8000, 0, T0);
    sl_settle_t s = harness_settle(20000, 0);
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - (-11500.0)) < 1e-6);
    /* Even a zero-token request needs a non-negative level. */
    sl_request_t r = harness_req("b", 0, 0);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    assert_int_not_equal(d.status, SL_GRANTED);
    harness_end(e);
}

static void test_refund_is_capped_at_capacity(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000, 0, 0);
    uint64_t l = harness_grant(e, "a", 8000, 0, T0);
    assert_int_equal(sl_engine_advance(e, T0 + 100), SL_OK);
    sl_settle_t s = harness_settle(100, 0);
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 100, NULL), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 8500.0) < 1e-6);
    harness_end(e);
}

/* The names the API and the metrics use; anything else is "unknown". */
static void test_buckets_and_task_states_have_the_apis_names(void **state)
{
    (void)state;
    const char *buckets[] = {"input_tokens", "output_tokens", "requests", "tokens", "unknown"};
    for (int b = 0; b <= SL_BUCKET_COUNT; b++)
        assert_string_equal(sl_bucket_name((sl_bucket_t)b), buckets[b]);
    assert_string_equal(sl_bucket_name((sl_bucket_t)-1), "unknown");
    const char *states[] = {"waiting", "running", "done", "unknown"};
    for (int t = SL_TASK_WAITING; t <= SL_TASK_DONE + 1; t++)
        assert_string_equal(sl_task_state_name((sl_task_state_t)t), states[t]);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_refill_is_continuous_at_capacity_per_minute_without_minute_reset),
    cmocka_unit_test(test_level_never_exceeds_capacity),
    cmocka_unit_test(test_underestimate_shows_as_debt_at_once_so_next_grants_wait),
    cmocka_unit_test(test_debt_can_take_the_level_below_zero),
    cmocka_unit_test(test_refund_is_capped_at_capacity),
    cmocka_unit_test(test_buckets_and_task_states_have_the_apis_names))
