/* Unit tests of the fail-open local share: a continuously refilled three-bucket limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"
#include "test_main.h"

/* A local share limited to `in` input and `out` output tokens and `rpm` requests a minute
 * (0: not limited), full at `now_s`. */
static sl__cl_local_bucket_t share(int64_t in, int64_t out, int64_t rpm, double now_s)
{
    sl__cl_local_bucket_t b;
    const int64_t limits[SL__CL_LB_COUNT] = {in, out, rpm};
    sl__cl_local_bucket_init(&b, limits, now_s);
    return b;
}

static void test_full_bucket_grants_up_to_its_limit_then_waits(void **state)
{
    (void)state;
    sl__cl_local_bucket_t b = share(6000, 600, 60, 100.0);
    const int64_t need[SL__CL_LB_COUNT] = {2000, 100, 1};
    assert_true(sl__cl_local_bucket_take(&b, need, 100.0) == 0);
    assert_true(sl__cl_local_bucket_take(&b, need, 100.0) == 0);
    assert_true(sl__cl_local_bucket_take(&b, need, 100.0) == 0);
    /* Empty: 2000 input tokens at 100/s take 20 s. */
    double wait_s = sl__cl_local_bucket_take(&b, need, 100.0);
    assert_true(wait_s > 19.99 && wait_s < 20.01);
    assert_true(sl__cl_local_bucket_take(&b, need, 110.0) > 9.99);
    assert_true(sl__cl_local_bucket_take(&b, need, 120.0) == 0);
}

static void test_need_above_the_limit_never_fits(void **state)
{
    (void)state;
    sl__cl_local_bucket_t b = share(1000, 0, 0, 0);
    const int64_t need[SL__CL_LB_COUNT] = {1001, 5, 1};
    assert_true(sl__cl_local_bucket_take(&b, need, 0) < 0);
}

static void test_unlimited_buckets_never_block(void **state)
{
    (void)state;
    sl__cl_local_bucket_t b = share(0, 0, 0, 0);
    const int64_t need[SL__CL_LB_COUNT] = {1000000000, 1000000, 1};
    for (int i = 0; i < 100; i++)
        assert_true(sl__cl_local_bucket_take(&b, need, 0) == 0);
}

static void test_grants_over_a_minute_stay_within_the_share(void **state)
{
    (void)state;
    /* Greedy taking for 120 s never exceeds capacity + refill over the time. */
    sl__cl_local_bucket_t b = share(12000, 0, 0, 0);
    const int64_t need[SL__CL_LB_COUNT] = {700, 0, 1};
    int64_t granted = 0;
    for (double t = 0; t <= 120.0; t += 0.05)
        while (sl__cl_local_bucket_take(&b, need, t) == 0)
            granted += need[0];
    assert_true(granted <= 12000 + 12000 * 2);
    assert_true(granted >= 12000 + 12000 * 2 - 700);
}

static void test_settle_charges_debt_and_refunds_cap_at_limit(void **state)
{
    (void)state;
    sl__cl_local_bucket_t b = share(6000, 0, 0, 0);
    const int64_t need[SL__CL_LB_COUNT] = {6000, 0, 1};
    assert_true(sl__cl_local_bucket_take(&b, need, 0) == 0);
    const int64_t charge[SL__CL_LB_COUNT] = {-3000, 0, 0};
    sl__cl_local_bucket_adjust(&b, charge, 0); /* underestimated by 3000: debt */
    assert_true(b.level[0] == -3000);
    const int64_t small[SL__CL_LB_COUNT] = {100, 0, 0};
    double wait_s = sl__cl_local_bucket_take(&b, small, 0);
    assert_true(wait_s > 30.99 && wait_s < 31.01);
    const int64_t refund[SL__CL_LB_COUNT] = {1000000, 0, 0};
    sl__cl_local_bucket_adjust(&b, refund, 0);
    assert_true(b.level[0] == 6000);
}

static void test_lowering_the_limits_clamps_the_level(void **state)
{
    (void)state;
    sl__cl_local_bucket_t b = share(6000, 0, 0, 0);
    const int64_t lower[SL__CL_LB_COUNT] = {3000, 600, 0};
    sl__cl_local_bucket_set_limits(&b, lower, 1);
    assert_true(b.level[0] == 3000);
    assert_true(b.level[1] == 600); /* newly limited: starts full */
}

SL_TEST_MAIN(
    cmocka_unit_test(test_full_bucket_grants_up_to_its_limit_then_waits),
    cmocka_unit_test(test_need_above_the_limit_never_fits),
    cmocka_unit_test(test_unlimited_buckets_never_block),
    cmocka_unit_test(test_grants_over_a_minute_stay_within_the_share),
    cmocka_unit_test(test_settle_charges_debt_and_refunds_cap_at_limit),
    cmocka_unit_test(test_lowering_the_limits_clamps_the_level))
