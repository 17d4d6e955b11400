/* test_provider_accel.c - the provider model's acceleration limit: a ramp after idle, its 429, its end. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "provider.h"
#include "test_main.h"

/* input 1,000,000 TPM; ramps after 60 s idle from 10,000 TPM, x2 per minute. */
static sl_provider_t *make(double idle_s)
{
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.input_tpm = 1000000;
    c.accel_idle_s = idle_s;
    c.accel_factor = 2;
    c.accel_floor_tpm = 10000;
    sl_provider_t *p = sl_provider_new(&c, 1000, NULL, 0);
    assert_non_null(p);
    return p;
}

static sl_provider_result_t call(sl_provider_t *p, double now, int64_t in)
{
    sl_provider_call_t c = {.input_tokens = in, .max_tokens = 1, .output_tokens = 1};
    sl_provider_result_t r;
    sl_provider_begin(p, &c, now, &r);
    if (r.refusal == SL_PROVIDER_OK) sl_provider_end(p, &r, now);
    return r;
}

static void test_off_by_default_admits_a_burst(void **state)
{
    (void)state;
    sl_provider_t *p = make(0);
    for (int i = 0; i < 50; i++) assert_int_equal(call(p, 1000, 10000).refusal, SL_PROVIDER_OK);
    assert_true(sl_provider_accel_allowance(p, 1000) < 0);
    sl_provider_free(p);
}

static void test_a_cold_burst_beyond_the_floor_is_refused_with_its_own_text(void **state)
{
    (void)state;
    sl_provider_t *p = make(60);
    assert_int_equal(call(p, 1000, 6000).refusal, SL_PROVIDER_OK);
    sl_provider_result_t r = call(p, 1000.5, 6000); /* 12,000 > 10,000 in the minute */
    assert_int_equal(r.refusal, SL_PROVIDER_RATE_LIMITED);
    assert_int_equal(r.limit, SL_PROVIDER_LIMIT_ACCELERATION);
    assert_int_equal(r.http_status, 429);
    /* 12,000 is allowed once 10,000 x 2^(t/60) reaches it: t = 60 log2(1.2) = 15.8 s. */
    assert_true(r.retry_after_s == 16.0);
    char body[512];
    sl_provider_error_body(p, SL_PROVIDER_ANTHROPIC, &r, body, sizeof body);
    assert_non_null(strstr(body, "\"rate_limit_error\""));
    assert_non_null(strstr(body, "\"details\":{\"error_code\":\"ramp_limit_exceeded\"}"));
    assert_non_null(strstr(body, "acceleration limit"));
    sl_provider_error_body(p, SL_PROVIDER_OPENAI, &r, body, sizeof body);
    assert_non_null(strstr(body, "rate_limit_exceeded"));
    assert_non_null(strstr(body, "acceleration limit"));
    sl_provider_stats_t s;
    sl_provider_stats(p, &s);
    assert_int_equal(s.http_429_acceleration, 1);
    assert_int_equal(s.http_429_rate, 1);
    assert_int_equal(s.input_tokens, 6000); /* the refused call billed nothing */
    sl_provider_free(p);
}

static void test_the_allowance_doubles_each_minute_then_the_ramp_ends(void **state)
{
    (void)state;
    sl_provider_t *p = make(60);
    assert_int_equal(call(p, 1000, 1).refusal, SL_PROVIDER_OK); /* the ramp starts here */
    assert_true(fabs(sl_provider_accel_allowance(p, 1060) - 20000) < 1e-6);
    assert_true(fabs(sl_provider_accel_allowance(p, 1120) - 40000) < 1e-6);
    /* Within a minute of the last call (else the pool was idle: a new ramp), 18,000 fits
     * under 10,000 x 2^(59/60) = 19,770; 2,000 more do not. */
    assert_int_equal(call(p, 1059, 18000).refusal, SL_PROVIDER_OK);
    assert_int_equal(call(p, 1059, 2000).limit, SL_PROVIDER_LIMIT_ACCELERATION);
    /* Calls every 30 s keep it busy; 10,000 x 2^6.7 > 1,000,000: the input limit binds
     * from then on. */
    for (double t = 1089; t < 1000 + 60 * 6.7; t += 30)
        assert_int_equal(call(p, t, 1).refusal, SL_PROVIDER_OK);
    assert_true(sl_provider_accel_allowance(p, 1000 + 60 * 6.7) < 0);
    assert_int_equal(call(p, 1000 + 60 * 6.7, 900000).refusal, SL_PROVIDER_OK);
    sl_provider_free(p);
}

static void test_idle_again_rearms_the_ramp(void **state)
{
    (void)state;
    sl_provider_t *p = make(60);
    for (double t = 1000; t < 1500; t += 30)
        assert_int_equal(call(p, t, 1).refusal, SL_PROVIDER_OK);
    assert_int_equal(call(p, 1500, 500000).refusal, SL_PROVIDER_OK); /* ramp over by then */
    /* 30 s later: not idle long enough, no ramp. */
    assert_int_equal(call(p, 1530, 100000).refusal, SL_PROVIDER_OK);
    /* 300 s idle: the recent minute is empty, so the floor again. */
    assert_int_equal(call(p, 1830, 9000).refusal, SL_PROVIDER_OK);
    assert_int_equal(call(p, 1831, 9000).limit, SL_PROVIDER_LIMIT_ACCELERATION);
    sl_provider_free(p);
}

static void test_bad_settings_are_refused_naming_the_field(void **state)
{
    (void)state;
    sl_provider_config_t c;
    sl_provider_config_init(&c);
    c.accel_idle_s = 60;
    c.accel_factor = 1;
    char err[200];
    assert_null(sl_provider_new(&c, 0, err, sizeof err));
    assert_non_null(strstr(err, "accel_factor"));
}

SL_TEST_MAIN(
    cmocka_unit_test(test_off_by_default_admits_a_burst),
    cmocka_unit_test(test_a_cold_burst_beyond_the_floor_is_refused_with_its_own_text),
    cmocka_unit_test(test_the_allowance_doubles_each_minute_then_the_ramp_ends),
    cmocka_unit_test(test_idle_again_rearms_the_ramp),
    cmocka_unit_test(test_bad_settings_are_refused_naming_the_field))
