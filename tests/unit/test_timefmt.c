/* test_timefmt.c - unit tests for the RFC 3339 and Go duration parsers. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

#include "sluice/engine.h"
#include "test_main.h"

/* A value the parsers never produce, to see that errors leave the output alone. */
#define UNTOUCHED (-12345.5)

/* Expected Unix times were computed with `date -u -d <stamp> +%s`. */
struct known_time {
    const char *stamp;
    double unix_s;
};

static void assert_rfc3339(const char *s, double want)
{
    double got = UNTOUCHED;
    if (sl_parse_rfc3339(s, &got) != SL_OK) fail_msg("\"%s\" was rejected", s);
    if (fabs(got - want) > 1e-6) fail_msg("\"%s\" gave %.9f, want %.9f", s, got, want);
}

static void assert_rfc3339_rejected(const char *s)
{
    double got = UNTOUCHED;
    if (sl_parse_rfc3339(s, &got) != SL_EINVAL)
        fail_msg("\"%s\" was accepted as %.9f", s ? s : "(null)", got);
    assert_true(got == UNTOUCHED);
}

static void assert_duration(const char *s, double want_s)
{
    double got = UNTOUCHED;
    if (sl_parse_duration(s, &got) != SL_OK) fail_msg("\"%s\" was rejected", s);
    if (fabs(got - want_s) > 1e-12 * (1.0 + want_s))
        fail_msg("\"%s\" gave %.12f s, want %.12f s", s, got, want_s);
}

static void assert_duration_rejected(const char *s)
{
    double got = UNTOUCHED;
    if (sl_parse_duration(s, &got) != SL_EINVAL)
        fail_msg("\"%s\" was accepted as %.12f s", s ? s : "(null)", got);
    assert_true(got == UNTOUCHED);
}

/* ---- RFC 3339 ---- */

static void test_rfc3339_utc_matches_known_unix_times(void **state)
{
    (void)state;
    static const struct known_time known[] = {
        {"2026-11-30T03:39:42Z", 1796009982},
        {"1970-01-01T00:00:00Z", 0},
        {"1969-12-31T23:59:59Z", -1},
        {"2001-09-09T01:46:40Z", 1000000000},
        {"2038-01-19T03:14:08Z", 2147483648.0},
        {"2000-02-29T12:00:00Z", 951825600},
        {"2024-02-29T12:00:00Z", 1709208000},
        {"2100-03-01T00:00:00Z", 4107542400.0},
        {"1900-03-01T00:00:00Z", -2203891200.0},
        {"1600-03-01T00:00:00Z", -11670912000.0},
        {"0000-01-01T00:00:00Z", -62167219200.0},
        {"9999-12-31T23:59:59Z", 253402300799.0},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        assert_rfc3339(known[i].stamp, known[i].unix_s);
}

static void test_rfc3339_fraction_is_added_to_the_second(void **state)
{
    (void)state;
    assert_rfc3339("2026-11-30T03:39:42.123456Z", 1796009982.123456);
    assert_rfc3339("2026-11-30T03:39:42.5Z", 1796009982.5);
    assert_rfc3339("1970-01-01T00:00:00.000000001Z", 1e-9);
    /* Digits past what a double can carry are read and ignored. */
    assert_rfc3339("2026-11-30T03:39:42.25000000000000000000000000000001Z", 1796009982.25);
}

static void test_rfc3339_with_offset_is_converted_to_utc(void **state)
{
    (void)state;
    assert_rfc3339("2026-11-30T03:39:42+01:00", 1796006382);
    assert_rfc3339("2026-11-29T22:09:42-05:30", 1796009982);
    assert_rfc3339("2026-12-01T00:30:00+14:00", 1796034600);
    assert_rfc3339("2026-11-30T03:39:42.75+01:00", 1796006382.75);
}

static void test_rfc3339_negative_zero_offset_is_utc(void **state)
{
    (void)state;
    assert_rfc3339("2026-11-30T03:39:42-00:00", 1796009982);
    assert_rfc3339("2026-11-30T03:39:42+00:00", 1796009982);
}

static void test_rfc3339_lower_case_t_and_z_are_accepted(void **state)
{
    (void)state;
    assert_rfc3339("2026-11-30t03:39:42z", 1796009982);
    assert_rfc3339("2026-11-30t03:39:42.5z", 1796009982.5);
}

static void test_rfc3339_leap_second_counts_as_the_next_second(void **state)
{
    (void)state;
    double leap = UNTOUCHED, next = UNTOUCHED;
    assert_int_equal(sl_parse_rfc3339("2016-12-31T23:59:60Z", &leap), SL_OK);
    assert_int_equal(sl_parse_rfc3339("2017-01-01T00:00:00Z", &next), SL_OK);
    assert_true(leap == next);
    assert_true(leap == 1483228800.0);
    assert_rfc3339("2016-12-31T23:59:60.5Z", 1483228800.5);
}

static void test_rfc3339_leap_day_follows_gregorian_rules(void **state)
{
    (void)state;
    assert_rfc3339("2024-02-29T23:59:59Z", 1709251199);
    assert_rfc3339("2000-02-29T12:00:00Z", 951825600);
    assert_rfc3339_rejected("2023-02-29T00:00:00Z");
    assert_rfc3339_rejected("1900-02-29T00:00:00Z");
    assert_rfc3339_rejected("2100-02-29T00:00:00Z");
    assert_rfc3339_rejected("2024-02-30T00:00:00Z");
}

static void test_rfc3339_out_of_range_fields_are_rejected(void **state)
{
    (void)state;
    assert_rfc3339_rejected("2026-00-10T00:00:00Z"); /* month 0 */
    assert_rfc3339_rejected("2026-13-10T00:00:00Z"); /* month 13 */
    assert_rfc3339_rejected("2026-01-00T00:00:00Z"); /* day 0 */
    assert_rfc3339_rejected("2026-01-32T00:00:00Z");
    assert_rfc3339_rejected("2026-04-31T00:00:00Z"); /* April has 30 days */
    assert_rfc3339_rejected("2026-06-31T00:00:00Z");
    assert_rfc3339_rejected("2026-09-31T00:00:00Z");
    assert_rfc3339_rejected("2026-11-31T00:00:00Z");
    assert_rfc3339_rejected("2026-11-30T24:00:00Z"); /* hour 24 */
    assert_rfc3339_rejected("2026-11-30T23:60:00Z"); /* minute 60 */
    assert_rfc3339_rejected("2026-11-30T23:59:61Z"); /* second 61 */
    assert_rfc3339_rejected("2026-11-30T23:59:99Z");
}

static void test_rfc3339_bad_offsets_are_rejected(void **state)
{
    (void)state;
    assert_rfc3339_rejected("2026-11-30T03:39:42+24:00");
    assert_rfc3339_rejected("2026-11-30T03:39:42+01:60");
    assert_rfc3339_rejected("2026-11-30T03:39:42+0100"); /* no colon */
    assert_rfc3339_rejected("2026-11-30T03:39:42+01");
    assert_rfc3339_rejected("2026-11-30T03:39:42+1:00");
    assert_rfc3339_rejected("2026-11-30T03:39:42+");
    assert_rfc3339_rejected("2026-11-30T03:39:42"); /* no zone at all */
    assert_rfc3339_rejected("2026-11-30T03:39:42UTC");
    assert_rfc3339_rejected("2026-11-30T03:39:42 Z");
}

static void test_rfc3339_malformed_date_and_time_are_rejected(void **state)
{
    (void)state;
    assert_rfc3339_rejected("2026-1-30T03:39:42Z"); /* one-digit month */
    assert_rfc3339_rejected("26-11-30T03:39:42Z");  /* two-digit year */
    assert_rfc3339_rejected("+2026-11-30T03:39:42Z");
    assert_rfc3339_rejected("2026-11-30 03:39:42Z"); /* space for T */
    assert_rfc3339_rejected("2026-11-30X03:39:42Z");
    assert_rfc3339_rejected("2026-11-30T03:39Z"); /* no seconds */
    assert_rfc3339_rejected("2026-11-30T3:39:42Z");
    assert_rfc3339_rejected("2026/11/30T03:39:42Z");
    assert_rfc3339_rejected("2026-11-30T03.39.42Z");
    assert_rfc3339_rejected("2026-11-30T03:39:42.Z"); /* dot without digits */
    assert_rfc3339_rejected("2026-11-30T03:39:42,5Z");
    assert_rfc3339_rejected("2026-11-30");
    assert_rfc3339_rejected("2026-11-30T");
    assert_rfc3339_rejected("1796009982");
}

static void test_rfc3339_trailing_garbage_is_rejected(void **state)
{
    (void)state;
    assert_rfc3339_rejected("2026-11-30T03:39:42Zx");
    assert_rfc3339_rejected("2026-11-30T03:39:42Z ");
    assert_rfc3339_rejected(" 2026-11-30T03:39:42Z");
    assert_rfc3339_rejected("2026-11-30T03:39:42+01:00:00");
    assert_rfc3339_rejected("2026-11-30T03:39:42ZZ");
}

static void test_rfc3339_empty_and_null_are_rejected(void **state)
{
    (void)state;
    assert_rfc3339_rejected("");
    assert_rfc3339_rejected(NULL);
    assert_int_equal(sl_parse_rfc3339("2026-11-30T03:39:42Z", NULL), SL_EINVAL);
}

/* ---- Go durations ---- */

static void test_duration_go_forms_are_parsed_to_seconds(void **state)
{
    (void)state;
    assert_duration("6m0s", 360);
    assert_duration("1s", 1);
    assert_duration("12ms", 0.012);
    assert_duration("1h2m3.5s", 3723.5);
    assert_duration("250us", 250e-6);
    assert_duration("100ns", 100e-9);
    assert_duration("2h", 7200);
    assert_duration("1h0m0s", 3600);
    assert_duration("1m30s500ms", 90.5);
    assert_duration("17.5ms", 0.0175);
}

static void test_duration_micro_sign_and_greek_mu_mean_microseconds(void **state)
{
    (void)state;
    assert_duration("250\xc2\xb5s", 250e-6); /* U+00B5 MICRO SIGN, what Go prints */
    assert_duration("250\xce\xbcs", 250e-6); /* U+03BC GREEK SMALL LETTER MU */
    assert_duration("1.5us", 1.5e-6);
}

static void test_duration_fractions_are_scaled_by_their_unit(void **state)
{
    (void)state;
    assert_duration("1.5s", 1.5);
    assert_duration("0.5ms", 0.0005);
    assert_duration("0.25h", 900);
    assert_duration("1.5m", 90);
    assert_duration(".5s", 0.5); /* Go accepts a missing integer part */
    assert_duration("1.s", 1);   /* and a missing fraction */
    assert_duration("0.123456789s", 0.123456789);
    /* Sub-nanosecond digits are truncated, as in Go. */
    assert_duration("1.0000000009s", 1.0);
    assert_duration("0.1234567890123456789012345s", 0.123456789);
}

static void test_duration_zero_is_zero(void **state)
{
    (void)state;
    assert_duration("0", 0);
    assert_duration("0s", 0);
    assert_duration("0.0", 0);
    assert_duration("0ms", 0);
}

static void test_duration_bare_number_is_seconds(void **state)
{
    (void)state;
    assert_duration("20", 20);
    assert_duration("1.5", 1.5);
    assert_duration("007", 7);
}

static void test_duration_number_without_unit_after_a_component_is_rejected(void **state)
{
    (void)state;
    assert_duration_rejected("1m30");
    assert_duration_rejected("1.5.5");
    assert_duration_rejected("1s.5");
}

static void test_duration_negative_and_signed_values_are_rejected(void **state)
{
    (void)state;
    assert_duration_rejected("-1s");
    assert_duration_rejected("-0");
    assert_duration_rejected("-1");
    assert_duration_rejected("+1s");
    assert_duration_rejected("1m-5s");
}

static void test_duration_unknown_units_are_rejected(void **state)
{
    (void)state;
    assert_duration_rejected("5d");
    assert_duration_rejected("5x");
    assert_duration_rejected("5S"); /* units are case-sensitive, as in Go */
    assert_duration_rejected("5Ms");
    assert_duration_rejected("5sec");
    assert_duration_rejected("5mss");
    assert_duration_rejected("5\xc2s"); /* a truncated micro sign */
    assert_duration_rejected("s");
    assert_duration_rejected("ms");
}

static void test_duration_trailing_garbage_is_rejected(void **state)
{
    (void)state;
    assert_duration_rejected("1s ");
    assert_duration_rejected(" 1s");
    assert_duration_rejected("1 s");
    assert_duration_rejected("1s!");
    assert_duration_rejected("20 ");
    assert_duration_rejected("1s.");
}

static void test_duration_empty_and_null_are_rejected(void **state)
{
    (void)state;
    assert_duration_rejected("");
    assert_duration_rejected(NULL);
    assert_duration_rejected(".");
    assert_duration_rejected(".s");
    assert_int_equal(sl_parse_duration("1s", NULL), SL_EINVAL);
}

static void test_duration_nan_inf_and_exponents_are_rejected(void **state)
{
    (void)state;
    assert_duration_rejected("nan");
    assert_duration_rejected("NaN");
    assert_duration_rejected("inf");
    assert_duration_rejected("infinity");
    assert_duration_rejected("1e3");
    assert_duration_rejected("1e3s");
    assert_duration_rejected("0x10");
}

static void test_duration_ten_years_is_the_largest_accepted(void **state)
{
    (void)state;
    /* Ten Julian years: 10 * 365.25 * 86400 = 315576000 s = 87660 h. */
    assert_duration("87660h", 315576000);
    assert_duration("315576000", 315576000);
    assert_duration("87659h59m59.999999999s", 315575999.999999999);
    assert_duration_rejected("87660h1ns");
    assert_duration_rejected("87661h");
    assert_duration_rejected("315576000.000000001");
    assert_duration_rejected("87000h87000h");
}

static void test_duration_overflowing_values_are_rejected(void **state)
{
    (void)state;
    assert_duration_rejected("9223372036854775807ns9223372036854775807ns");
    assert_duration_rejected("18446744073709551616ns");
    assert_duration_rejected("99999999999999999999999999999999s");
    assert_duration_rejected("5124095576030431h");
    assert_duration_rejected("1000000000000000000000000000000000000000");
    /* Many digits are fine while the value in the unit stays within the bound. */
    assert_duration("315576000000000000ns", 315576000);
    assert_duration_rejected("315576000000000001ns");
}

SL_TEST_MAIN(
    cmocka_unit_test(test_rfc3339_utc_matches_known_unix_times),
    cmocka_unit_test(test_rfc3339_fraction_is_added_to_the_second),
    cmocka_unit_test(test_rfc3339_with_offset_is_converted_to_utc),
    cmocka_unit_test(test_rfc3339_negative_zero_offset_is_utc),
    cmocka_unit_test(test_rfc3339_lower_case_t_and_z_are_accepted),
    cmocka_unit_test(test_rfc3339_leap_second_counts_as_the_next_second),
    cmocka_unit_test(test_rfc3339_leap_day_follows_gregorian_rules),
    cmocka_unit_test(test_rfc3339_out_of_range_fields_are_rejected),
    cmocka_unit_test(test_rfc3339_bad_offsets_are_rejected),
    cmocka_unit_test(test_rfc3339_malformed_date_and_time_are_rejected),
    cmocka_unit_test(test_rfc3339_trailing_garbage_is_rejected),
    cmocka_unit_test(test_rfc3339_empty_and_null_are_rejected),
    cmocka_unit_test(test_duration_go_forms_are_parsed_to_seconds),
    cmocka_unit_test(test_duration_micro_sign_and_greek_mu_mean_microseconds),
    cmocka_unit_test(test_duration_fractions_are_scaled_by_their_unit),
    cmocka_unit_test(test_duration_zero_is_zero),
    cmocka_unit_test(test_duration_bare_number_is_seconds),
    cmocka_unit_test(test_duration_number_without_unit_after_a_component_is_rejected),
    cmocka_unit_test(test_duration_negative_and_signed_values_are_rejected),
    cmocka_unit_test(test_duration_unknown_units_are_rejected),
    cmocka_unit_test(test_duration_trailing_garbage_is_rejected),
    cmocka_unit_test(test_duration_empty_and_null_are_rejected),
    cmocka_unit_test(test_duration_nan_inf_and_exponents_are_rejected),
    cmocka_unit_test(test_duration_ten_years_is_the_largest_accepted),
    cmocka_unit_test(test_duration_overflowing_values_are_rejected))
