/* test_jsonfmt.c - unit tests for the hot answers' number writing (src/server/core/jsonfmt.c). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "test_main.h"

static void assert_seconds(double v, const char *want)
{
    sl_jbuf_t b = {.len = 0};
    sl__jb_seconds(&b, v);
    sl__jb_lit(&b, "");
    if (b.len != strlen(want) || memcmp(b.buf, want, b.len) != 0)
        fail_msg("%.17g gave '%.*s', want '%s'", v, (int)b.len, b.buf, want);
}

static void test_seconds_keep_the_microsecond_and_drop_trailing_zeros(void **state)
{
    (void)state;
    assert_seconds(120, "120");
    assert_seconds(0, "0");
    assert_seconds(0.5, "0.5");
    assert_seconds(-0.25, "-0.25");
    assert_seconds(1796011572.7400531, "1796011572.740053");
    assert_seconds(0.0000004, "0");
    assert_seconds(0.0000006, "0.000001");
    assert_seconds(59.9999996, "60");
    assert_seconds(1e13, "10000000000000"); /* beyond the fast path: %.15g */
    assert_seconds(NAN, "0");
}

static void test_a_written_time_reads_back_within_a_microsecond(void **state)
{
    (void)state;
    srand(7);
    for (int i = 0; i < 100000; i++) {
        double v = 1.7e9 + (double)rand() / RAND_MAX * 1e8 + (double)rand() / RAND_MAX;
        sl_jbuf_t b = {.len = 0};
        sl__jb_seconds(&b, v);
        sl__jb_lit(&b, "");
        b.buf[b.len] = '\0';
        double back = strtod(b.buf, NULL);
        char g[32];
        snprintf(g, sizeof(g), "%.15g", v);
        if (fabs(back - v) > 1e-6) fail_msg("%.17g written as %s", v, b.buf);
        if (fabs(back - v) > fabs(strtod(g, NULL) - v) + 1e-6)
            fail_msg("%.17g written as %s, less exact than %s", v, b.buf, g);
    }
}

static void test_numbers_integers_and_overflow(void **state)
{
    (void)state;
    sl_jbuf_t b = {.len = 0};
    sl__jb_num(&b, 3);
    sl__jb_lit(&b, " ");
    sl__jb_num(&b, 0.05263157894736842);
    sl__jb_lit(&b, " ");
    sl__jb_i64(&b, INT64_MIN);
    sl__jb_lit(&b, " ");
    sl__jb_u64(&b, UINT64_MAX);
    b.buf[b.len] = '\0';
    assert_string_equal(b.buf, "3 0.0526315789473684 -9223372036854775808 18446744073709551615");
    assert_false(b.overflow);
    for (int i = 0; i < 100; i++)
        sl__jb_lit(&b, "0123456789");
    assert_true(b.overflow);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_seconds_keep_the_microsecond_and_drop_trailing_zeros),
    cmocka_unit_test(test_a_written_time_reads_back_within_a_microsecond),
    cmocka_unit_test(test_numbers_integers_and_overflow))
