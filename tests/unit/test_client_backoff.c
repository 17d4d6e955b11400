/* Unit tests of the client's fallback backoff: full-jitter bounds and retry-after. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sluice/client.h"
#include "test_main.h"

static double next_u01(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static void test_delay_is_within_zero_and_capped_exponential(void **state)
{
    (void)state;
    uint64_t s = 42;
    for (unsigned attempt = 0; attempt < 70; attempt++) {
        double ceiling_s = fmin(30.0, ldexp(1.0, (int)(attempt > 60 ? 60 : attempt)));
        for (int k = 0; k < 2000; k++) {
            double d = sl_backoff_delay_s(attempt, 1.0, 30.0, -1, next_u01(&s));
            assert_true(d >= 0.0);
            assert_true(d <= ceiling_s);
        }
    }
}

static void test_delay_never_below_retry_after(void **state)
{
    (void)state;
    uint64_t s = 7;
    const double retry_after_s[] = {0.0, 0.5, 3.0, 29.0, 45.0, 120.0};
    for (size_t r = 0; r < sizeof(retry_after_s) / sizeof(retry_after_s[0]); r++)
        for (unsigned attempt = 0; attempt < 12; attempt++)
            for (int k = 0; k < 500; k++) {
                double d = sl_backoff_delay_s(attempt, 1.0, 30.0, retry_after_s[r], next_u01(&s));
                assert_true(d >= retry_after_s[r]);
                double ceiling_s = fmin(30.0, ldexp(1.0, (int)attempt));
                assert_true(d <= fmax(ceiling_s, retry_after_s[r]));
            }
}

static void test_full_jitter_spreads_over_the_whole_window(void **state)
{
    (void)state;
    /* attempt 3: window [0, 8). The extremes of u01 reach both ends. */
    assert_true(sl_backoff_delay_s(3, 1.0, 30.0, -1, 0.0) == 0.0);
    assert_true(sl_backoff_delay_s(3, 1.0, 30.0, -1, 0.999999) > 7.99);
    assert_true(sl_backoff_delay_s(3, 1.0, 30.0, -1, 1.0) < 8.0);
    /* A big attempt is held at the cap, not overflowed. */
    assert_true(sl_backoff_delay_s(4000000000u, 1.0, 30.0, -1, 0.5) == 15.0);
}

static void test_nonsense_inputs_count_as_zero(void **state)
{
    (void)state;
    assert_true(sl_backoff_delay_s(2, NAN, 30.0, -1, 0.5) == 0.0);
    assert_true(sl_backoff_delay_s(2, 1.0, -5.0, -1, 0.5) == 0.0);
    assert_true(sl_backoff_delay_s(2, 1.0, 30.0, NAN, -3.0) == 0.0);
    assert_true(sl_backoff_delay_s(2, 1.0, 30.0, INFINITY, 0.5) == 2.0);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_delay_is_within_zero_and_capped_exponential),
    cmocka_unit_test(test_delay_never_below_retry_after),
    cmocka_unit_test(test_full_jitter_spreads_over_the_whole_window),
    cmocka_unit_test(test_nonsense_inputs_count_as_zero))
