/* test_limits_adaptive.c - AIMD of an adaptive limit: the seed's steps, clamps, events, and convergence on a synthetic error rate. */
#include "limits_harness.h"
#include "test_main.h"

typedef struct events {
    int n, up, down;
    double last_old, last_new, last_error_rate;
    char last_key[64];
} events_t;

static void on_adapt(const sl_limit_adapt_event_t *ev, void *user)
{
    events_t *e = user;
    e->n++;
    if (ev->new_rate > ev->old_rate) e->up++;
    else e->down++;
    e->last_old = ev->old_rate;
    e->last_new = ev->new_rate;
    e->last_error_rate = ev->error_rate;
    snprintf(e->last_key, sizeof e->last_key, "%s", ev->key);
}

#define ADAPTIVE(alg, rate, extra)                                                             \
    "{\"x\": {\"algorithm\": \"" alg "\", \"rate\": " #rate ", \"period_s\": 1" extra         \
    ", \"adaptive\": {\"min_rate\": 10, \"max_rate\": 500, \"decrease\": 0.9, \"increase\": 1.1," \
    " \"high_error\": 0.10, \"low_error\": 0.02, \"window\": 100}}}"

static double report(sl_limits_t *ls, const char *agent, int64_t ok, int64_t err, double t_s)
{
    sl_limit_request_t req = harness_req(agent, 0);
    double rate = 0;
    int rc = sl_limits_report(ls, "x", &req, ok, err, AT(t_s), &rate);
    if (rc) fail_msg("report failed: %s", sl_limits_errmsg(ls));
    return rate;
}

static void test_one_outcome_per_report_steps_as_the_seed(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ADAPTIVE("token_bucket", 100, ""));
    events_t ev = {0};
    sl_limits_set_adapt_cb(ls, on_adapt, &ev);
    /* A success: error rate 0 < 2%: x1.1. */
    assert_true(fabs(report(ls, "a", 1, 0, 0) - 110) < 1e-9);
    /* An error: 1 of 2 = 50% > 10%: x0.9. */
    assert_true(fabs(report(ls, "a", 0, 1, 0) - 99) < 1e-9);
    assert_int_equal(ev.n, 2);
    assert_int_equal(ev.up, 1);
    assert_int_equal(ev.down, 1);
    assert_true(fabs(ev.last_error_rate - 0.5) < 1e-12);
    assert_string_equal(ev.last_key, "a");
    /* Between the thresholds the rate stays and no event is sent: 5 errors in 100. */
    sl_limits_free(ls);
    ls = harness_set(ADAPTIVE("token_bucket", 100, ""));
    sl_limits_set_adapt_cb(ls, on_adapt, &ev);
    ev.n = 0;
    assert_true(fabs(report(ls, "b", 95, 5, 0) - 100) < 1e-9);
    assert_int_equal(ev.n, 0);
    /* Keys adapt apart. */
    assert_true(fabs(report(ls, "c", 10, 0, 0) - 110) < 1e-9);
    assert_true(fabs(report(ls, "b", 0, 0 + 1, 0) - 100) < 1e-9); /* 6 of 100: stays */
    sl_limits_free(ls);
}

static void test_rate_stays_between_min_and_max(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ADAPTIVE("token_bucket", 100, ""));
    double r = 0;
    for (int i = 0; i < 200; i++) r = report(ls, "a", 100, 0, i);
    assert_true(r == 500);
    for (int i = 0; i < 200; i++) r = report(ls, "a", 0, 100, 200 + i);
    assert_true(r == 10);
    sl_limits_free(ls);
}

/* A downstream that fails the share of calls above its capacity; returns the final rate
 * after `steps` reports of 100 outcomes, with the range of the last 50 in lo/hi. */
static double drive(sl_limits_t *ls, double rate, double capacity, int steps, double t0_s,
                    double *lo, double *hi)
{
    *lo = 1e9;
    *hi = 0;
    for (int step = 0; step < steps; step++) {
        double fail_share = rate > capacity ? (rate - capacity) / rate : 0;
        int64_t errors = (int64_t)llround(100 * fail_share);
        rate = report(ls, "a", 100 - errors, errors, t0_s + step);
        if (step >= steps - 50) {
            *lo = fmin(*lo, rate);
            *hi = fmax(*hi, rate);
        }
    }
    return rate;
}

static void test_rate_converges_to_the_downstream_capacity(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ADAPTIVE("gcra", 400, ", \"burst\": 10"));
    events_t ev = {0};
    sl_limits_set_adapt_cb(ls, on_adapt, &ev);
    /* Down from 400 to a capacity of 120, then up when the capacity grows to 300. It
     * settles where 2% <= error rate <= 10%: C/0.98 .. C/0.9, one step either side. */
    double lo, hi, rate = drive(ls, 400, 120, 150, 0, &lo, &hi);
    if (lo < 120 * 0.9 || hi > 120 / 0.9 * 1.1) fail_msg("rate in [%g, %g], capacity 120", lo, hi);
    assert_int_equal(ev.up, 0);
    int downs = ev.down;
    rate = drive(ls, rate, 300, 150, 150, &lo, &hi);
    if (lo < 300 * 0.9 || hi > 300 / 0.9 * 1.1) fail_msg("rate in [%g, %g], capacity 300", lo, hi);
    assert_true(ev.up > 0);
    assert_int_equal(ev.n, ev.up + ev.down);
    assert_true(ev.down >= downs);
    /* The checks follow the rate. */
    sl_limit_result_t r = harness_check(ls, "x", "a", 0, 1000);
    assert_true(fabs(r.checked[0].rate - rate) < 1e-9);
    sl_limits_free(ls);
}

static void test_a_lower_rate_slows_the_refill_from_now_on(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ADAPTIVE("token_bucket", 100, ", \"burst\": 100"));
    assert_true(harness_check(ls, "x", "a", 100, 0).allowed);
    /* Until now the refill was at 100/s: 50 tokens by 0.5 s. */
    assert_true(fabs(report(ls, "a", 0, 10, 0.5) - 90) < 1e-9);
    sl_limit_result_t r = harness_check(ls, "x", "a", 0, 0.5);
    assert_int_equal(r.remaining, 50);
    /* From 0.5 s on at 90/s: 50 more take 0.5556 s. */
    r = harness_check(ls, "x", "a", 100, 0.5);
    assert_false(r.allowed);
    assert_int_equal(r.retry_after_us, 555556);
    /* A key away from its starting rate is not forgotten, even when at rest. */
    assert_int_equal(sl_limits_sweep(ls, AT(1000)), 0);
    sl_limits_free(ls);
}

static void test_report_errors_name_the_field(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(ADAPTIVE("fixed_window", 100, ""));
    sl_limit_request_t req = harness_req("a", 0);
    assert_int_equal(sl_limits_report(ls, "x", &req, 0, 0, AT(0), NULL), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "successes + errors: 0, not in 1..1000000000");
    assert_int_equal(sl_limits_report(ls, "x", &req, -1, 0, AT(0), NULL), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "successes: -1 out of range (0..1000000000)");
    assert_int_equal(sl_limits_report(ls, "y", &req, 1, 0, AT(0), NULL), SL_ENOTFOUND);
    /* A fixed window counts whole units: floor(110.0) after one increase. */
    assert_int_equal(sl_limits_report(ls, "x", &req, 1, 0, AT(0), NULL), SL_OK);
    sl_limit_result_t r = harness_check(ls, "x", "a", 0, 0);
    assert_int_equal(r.limit, 110);
    sl_limits_free(ls);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_one_outcome_per_report_steps_as_the_seed),
    cmocka_unit_test(test_rate_stays_between_min_and_max),
    cmocka_unit_test(test_rate_converges_to_the_downstream_capacity),
    cmocka_unit_test(test_a_lower_rate_slows_the_refill_from_now_on),
    cmocka_unit_test(test_report_errors_name_the_field))
