/* test_calibrate.c - per pool and model, estimates are corrected by the learned ratio. */
#include "engine_harness.h"
#include "test_main.h"

static sl_decision_t request_model(sl_engine_t *e, const char *model, int64_t in, int64_t cached,
                                   double now)
{
    sl_request_t r = harness_req("agent", in, 100);
    r.model = model;
    r.cached_tokens = cached;
    sl_decision_t d = harness_request_as(e, &r, now, SL_GRANTED);
    return d;
}

static void settle_actual(sl_engine_t *e, uint64_t lease, int64_t in, double now)
{
    sl_settle_t s = harness_settle(in, 100);
    assert_int_equal(sl_engine_settle(e, lease, &s, now, NULL), SL_OK);
}

typedef struct seen {
    double ratio;
    int64_t samples;
    int models;
} seen_t;

static void on_calib(const sl_calibration_info_t *c, void *ud)
{
    seen_t *s = ud;
    if (strcmp(c->model, "claude-x") == 0) {
        s->ratio = c->ratio;
        s->samples = c->samples;
    }
    s->models++;
}

static void test_learned_ratio_corrects_later_estimates(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 10000);
    double t = T0;
    for (int i = 0; i < 4; i++) {
        sl_decision_t d = request_model(e, "claude-x", 1000, 0, t);
        assert_int_equal(d.charged_input_tokens, 1000); /* too few samples: ratio 1 */
        settle_actual(e, d.lease, 1100, t += 1);
    }
    sl_decision_t d = request_model(e, "claude-x", 1000, 0, t);
    settle_actual(e, d.lease, 1100, t += 1);
    d = request_model(e, "claude-x", 1000, 0, t);
    assert_int_equal(d.charged_input_tokens, 1100);
    /* Another model, and no model at all, are not corrected. */
    d = request_model(e, "gpt-y", 1000, 0, t);
    assert_int_equal(d.charged_input_tokens, 1000);
    d = request_model(e, NULL, 1000, 0, t);
    assert_int_equal(d.charged_input_tokens, 1000);
    seen_t s = {0, 0, 0};
    assert_int_equal(sl_engine_calibration_foreach(e, "default", on_calib, &s), SL_OK);
    assert_true(fabs(s.ratio - 1.1) < 1e-9);
    assert_int_equal(s.samples, 5);
    assert_int_equal(s.models, 2);
    assert_int_equal(sl_engine_calibration_foreach(e, "nope", on_calib, &s), SL_ENOTFOUND);
    harness_end(e);
}

static void test_the_ratio_is_robust_to_outliers(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 10000);
    double t = T0;
    const int64_t actual[] = {1200, 1200, 0, 1200, 50000, 1200, 1200};
    for (int i = 0; i < 7; i++) {
        sl_decision_t d = request_model(e, "claude-x", 1000, 0, t);
        settle_actual(e, d.lease, actual[i], t += 1);
    }
    seen_t s = {0, 0, 0};
    sl_engine_calibration_foreach(e, "default", on_calib, &s);
    assert_true(fabs(s.ratio - 1.2) < 1e-9);
    /* The cached prefix is corrected too, and counts when the cache is cold. */
    sl_decision_t d = request_model(e, "claude-x", 1000, 10000, t + 400); /* cache lapsed */
    assert_int_equal(d.charged_input_tokens, 1200 + 12000);
    harness_end(e);
}

static void test_tiny_estimates_are_not_sampled(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 10000);
    for (int i = 0; i < 10; i++) {
        sl_decision_t d = request_model(e, "claude-x", 50, 0, T0 + i);
        settle_actual(e, d.lease, 500, T0 + i);
    }
    seen_t s = {0, 0, 0};
    sl_engine_calibration_foreach(e, "default", on_calib, &s);
    assert_int_equal(s.samples, 0);
    assert_true(fabs(s.ratio - 1.0) < 1e-12);
    sl_engine_free(e);
}

static void test_failed_calls_are_not_samples_but_give_the_reservation_back(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 10000);
    double t = T0;
    for (int i = 0; i < 5; i++) {
        sl_decision_t d = request_model(e, "claude-x", 1000, 0, t);
        settle_actual(e, d.lease, 1500, t += 1);
    }
    sl_agent_info_t before;
    assert_int_equal(sl_engine_agent_info(e, "agent", &before), SL_OK);
    for (int i = 0; i < 6; i++) {
        sl_decision_t d = request_model(e, "claude-x", 1000, 0, t);
        sl_settle_t s = harness_settle(0, 0);
        s.failed = true;                                /* a 400 */
        if (i == 5) s.got_429 = true, s.failed = false; /* a 429 implies it */
        sl_settle_result_t r;
        assert_int_equal(sl_engine_settle(e, d.lease, &s, t, &r), SL_OK);
        assert_true(r.not_counted);
        assert_int_equal(r.adjust_input_tokens, 1500); /* everything back */
        harness_check(e);
    }
    seen_t s = {0, 0, 0};
    sl_engine_calibration_foreach(e, "default", on_calib, &s);
    assert_int_equal(s.samples, 5);
    assert_true(fabs(s.ratio - 1.5) < 1e-9);
    sl_agent_info_t after;
    assert_int_equal(sl_engine_agent_info(e, "agent", &after), SL_OK);
    assert_true(fabs(after.estimate_error - before.estimate_error) < 1e-12);
    harness_end(e);
}

static void test_a_failed_call_leaves_the_cache_cold(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 10000);
    sl_decision_t d = request_model(e, NULL, 10, 5000, T0);
    assert_true(d.cache_penalty);
    sl_settle_t s = harness_settle(0, 0);
    s.failed = true;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 1, NULL), SL_OK);
    d = request_model(e, NULL, 10, 5000, T0 + 2);
    assert_true(d.cache_penalty);
    assert_int_equal(d.charged_input_tokens, 5010);
    sl_engine_free(e);
}

static void test_the_spend_cap_alert_clears_on_success_or_at_the_reset(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 10000);
    sl_pool_info_t info;
    for (int round = 0; round < 2; round++) {
        double t = T0 + round * 10000;
        sl_decision_t d = request_model(e, NULL, 1000, 0, t);
        sl_settle_t s = harness_settle(0, 0);
        s.got_429 = true;
        s.spend_cap = true;
        assert_int_equal(sl_engine_settle(e, d.lease, &s, t, NULL), SL_OK);
        sl_engine_pool_info(e, "default", &info);
        assert_true(info.alert_spend_cap);
        if (round == 0) { /* a call that succeeds clears it */
            d = request_model(e, NULL, 1000, 0, t + 1);
            settle_actual(e, d.lease, 1000, t + 2);
        } else { /* the configured reset (3600 s by default) clears it */
            assert_true(sl_engine_next_wakeup(e) <= t + 3600);
            assert_int_equal(sl_engine_advance(e, t + 3599), SL_OK);
            sl_engine_pool_info(e, "default", &info);
            assert_true(info.alert_spend_cap);
            assert_int_equal(sl_engine_advance(e, t + 3600), SL_OK);
        }
        sl_engine_pool_info(e, "default", &info);
        assert_false(info.alert_spend_cap);
    }
    sl_engine_free(e);
}

static void test_learned_output_reserves_the_95th_percentile_only_for_capped_calls(void **state)
{
    (void)state;
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = 10000000;
    cfg.output_tpm = 1000000;
    cfg.output_reserve_learned = true;
    sl_engine_t *e = harness_engine_config(&cfg);
    double t = T0;
    for (int i = 0; i < 20; i++) {
        sl_request_t r = harness_req("agent", 1000, 32000);
        r.model = "claude-x";
        sl_decision_t d;
        assert_int_equal(sl_engine_request(e, &r, t, &d), SL_OK);
        /* Until 20 outputs are known: max_tokens. */
        assert_int_equal(d.charged_output_tokens, 32000);
        sl_settle_t s = harness_settle(1000, 100 * (i + 1)); /* 100 .. 2000 */
        if (i == 19) {                                       /* a failed call teaches nothing */
            sl_decision_t f;
            assert_int_equal(sl_engine_request(e, &r, t, &f), SL_OK);
            sl_settle_t fs = harness_settle(0, 0);
            fs.failed = true;
            assert_int_equal(sl_engine_settle(e, f.lease, &fs, t, NULL), SL_OK);
        }
        assert_int_equal(sl_engine_settle(e, d.lease, &s, t += 1, NULL), SL_OK);
    }
    sl_request_t r = harness_req("agent", 1000, 32000);
    r.model = "claude-x";
    sl_decision_t d;
    /* A call whose max_tokens is sent as is: the provider holds all of it. */
    assert_int_equal(sl_engine_request(e, &r, t, &d), SL_OK);
    assert_int_equal(d.charged_output_tokens, 32000);
    assert_int_equal(sl_engine_cancel(e, d.lease, t), SL_OK);
    /* A call capped to its reservation reserves the percentile. */
    r.output_capped = true;
    assert_int_equal(sl_engine_request(e, &r, t, &d), SL_OK);
    assert_int_equal(d.charged_output_tokens, 1900); /* nearest rank 19 of 20 */
    /* A longer answer is charged as debt at the settle. */
    sl_settle_t s = harness_settle(1000, 5000);
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, t += 1, &res), SL_OK);
    assert_int_equal(res.adjust_output_tokens, -3100);
    /* A smaller max_tokens stays; another model is not learned yet. */
    r.output_tokens = 500;
    assert_int_equal(sl_engine_request(e, &r, t, &d), SL_OK);
    assert_int_equal(d.charged_output_tokens, 500);
    r.output_tokens = 32000;
    r.model = "claude-y";
    assert_int_equal(sl_engine_request(e, &r, t, &d), SL_OK);
    assert_int_equal(d.charged_output_tokens, 32000);
    harness_end(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_learned_ratio_corrects_later_estimates),
    cmocka_unit_test(test_the_ratio_is_robust_to_outliers),
    cmocka_unit_test(test_tiny_estimates_are_not_sampled),
    cmocka_unit_test(test_failed_calls_are_not_samples_but_give_the_reservation_back),
    cmocka_unit_test(test_a_failed_call_leaves_the_cache_cold),
    cmocka_unit_test(test_the_spend_cap_alert_clears_on_success_or_at_the_reset),
    cmocka_unit_test(test_learned_output_reserves_the_95th_percentile_only_for_capped_calls))
