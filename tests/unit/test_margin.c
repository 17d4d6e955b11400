/* test_margin.c - the AIMD margin: cut on a 429 against a granted lease, floor, slow recovery. */
#include "engine_harness.h"
#include "test_main.h"

static void settle_429(sl_engine_t *e, double now, bool spend_cap, double retry_after_s)
{
    uint64_t l = harness_grant(e, "a", 10, 10, now);
    sl_settle_t s = harness_settle(10, 10);
    s.got_429 = true;
    s.spend_cap = spend_cap;
    s.retry_after_s = retry_after_s;
    assert_int_equal(sl_engine_settle(e, l, &s, now, NULL), SL_OK);
    harness_check(e);
}

static void test_margin_drops_from_085_to_080_on_a_429_against_a_granted_lease(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    assert_true(fabs(harness_margin(e) - 0.85) < 1e-12);
    settle_429(e, T0, false, -1);
    assert_true(fabs(harness_margin(e) - 0.80) < 1e-12);
    sl_pool_info_t info;
    sl_engine_pool_info(e, "default", &info);
    assert_true(fabs(info.capacity[SL_BUCKET_INPUT] - 80000.0) < 1e-6);
    assert_true(info.level[SL_BUCKET_INPUT] <= 80000.0 + 1e-6);
    sl_engine_free(e);
}

static void test_margin_never_goes_below_060(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    for (int i = 0; i < 10; i++)
        settle_429(e, T0 + i, false, -1);
    assert_true(fabs(harness_margin(e) - 0.60) < 1e-12);
    sl_engine_free(e);
}

static void test_margin_climbs_001_per_clean_recover_every(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    settle_429(e, T0, false, -1); /* 0.80 */
    assert_int_equal(sl_engine_advance(e, T0 + 179.9), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.80) < 1e-12);
    assert_int_equal(sl_engine_advance(e, T0 + 180), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.81) < 1e-12);
    assert_int_equal(sl_engine_advance(e, T0 + 180 * 3), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.83) < 1e-12);
    /* Never above the start value. */
    assert_int_equal(sl_engine_advance(e, T0 + 180 * 100), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.85) < 1e-12);
    harness_end(e);
}

static void test_a_429_restarts_the_recovery_clock(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    settle_429(e, T0, false, -1);       /* 0.80 */
    settle_429(e, T0 + 170, false, -1); /* 0.75, clock restarts */
    assert_int_equal(sl_engine_advance(e, T0 + 300), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.75) < 1e-12);
    assert_int_equal(sl_engine_advance(e, T0 + 350), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.76) < 1e-12);
    sl_engine_free(e);
}

typedef struct alerts {
    int floor_raised;
    int spend_cap_raised;
} alerts_t;

static void on_event(const sl_event_t *ev, void *ud)
{
    alerts_t *a = ud;
    if (ev->kind != SL_EV_ALERT || !ev->active) return;
    if (strcmp(ev->alert, "margin_at_floor") == 0) a->floor_raised++;
    if (strcmp(ev->alert, "spend_cap") == 0) a->spend_cap_raised++;
}

static void test_margin_at_floor_for_ten_minutes_raises_an_alert(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    alerts_t a = {0};
    sl_engine_set_event_cb(e, on_event, &a);
    /* Keep it at the floor: a 429 every 170 s, before any recovery step. */
    for (int i = 0; i < 5; i++)
        settle_429(e, T0 + i, false, -1);
    for (int k = 1; k <= 3; k++)
        settle_429(e, T0 + 4 + 170.0 * k, false, -1);
    assert_int_equal(a.floor_raised, 0);
    assert_int_equal(sl_engine_advance(e, T0 + 4 + 600), SL_OK);
    assert_int_equal(a.floor_raised, 1);
    sl_pool_info_t info;
    sl_engine_pool_info(e, "default", &info);
    assert_true(info.alert_margin_at_floor);
    sl_engine_free(e);
}

static void test_spend_cap_429_leaves_the_margin_alone_and_alerts(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    alerts_t a = {0};
    sl_engine_set_event_cb(e, on_event, &a);
    settle_429(e, T0, true, -1);
    assert_true(fabs(harness_margin(e) - 0.85) < 1e-12);
    assert_int_equal(a.spend_cap_raised, 1);
    /* With a retry-after it is a rate limit after all. */
    settle_429(e, T0 + 1, true, 5);
    assert_true(fabs(harness_margin(e) - 0.80) < 1e-12);
    sl_engine_free(e);
}

static void test_retry_after_holds_grants_until_it_passes(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    settle_429(e, T0, false, 10);
    sl_request_t r = harness_req("b", 10, 10);
    sl_decision_t d = harness_request_as(e, &r, T0 + 1, SL_QUEUED);
    assert_true(fabs(d.eta_s - 9.0) < 1e-6);
    assert_int_equal(sl_engine_advance(e, T0 + 10), SL_OK);
    d = harness_ticket_as(e, d.ticket, T0 + 10, SL_GRANTED);
    harness_end(e);
}

static void settle_lease_429(sl_engine_t *e, uint64_t lease, double now)
{
    sl_settle_t s = harness_settle(0, 0);
    s.got_429 = true;
    s.retry_after_s = -1;
    assert_int_equal(sl_engine_settle(e, lease, &s, now, NULL), SL_OK);
    harness_check(e);
}

static void test_a_wave_of_429s_on_leases_granted_before_the_cut_cuts_once(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    const char *agents[] = {"a1", "a2", "a3", "a4", "a5"};
    uint64_t wave[5];
    for (int i = 0; i < 5; i++)
        wave[i] = harness_grant(e, agents[i], 10, 10, T0);
    for (int i = 0; i < 5; i++)
        settle_lease_429(e, wave[i], T0 + 1);
    assert_true(fabs(harness_margin(e) - 0.80) < 1e-12);
    sl_pool_info_t info;
    sl_engine_pool_info(e, "default", &info);
    assert_int_equal(info.upstream_429_total, 5);
    /* Granted after the cut, at the new margin: a new event. */
    settle_lease_429(e, harness_grant(e, "a1", 10, 10, T0 + 2), T0 + 3);
    assert_true(fabs(harness_margin(e) - 0.75) < 1e-12);
    sl_engine_free(e);
}

/* The input `remaining` header `value` returned by the call of `lease` (0: a pool resync,
 * no lease). */
static void resync_remaining(sl_engine_t *e, uint64_t lease, const char *value, double now)
{
    const char *names[] = {"anthropic-ratelimit-input-tokens-remaining"};
    const char *values[] = {value};
    assert_int_equal(lease ? sl_engine_resync_lease(e, lease, names, values, 1, now, NULL)
                           : sl_engine_resync(e, "default", names, values, 1, now, NULL),
                     SL_OK);
    harness_check(e);
}

static void test_the_margin_climbs_above_its_start_only_while_headers_agree(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    /* Without headers nothing vouches for the room: no climb. */
    assert_int_equal(sl_engine_advance(e, T0 + 1000), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.85) < 1e-12);
    /* A header of no lease's call (a pool resync) earns nothing. */
    resync_remaining(e, 0, "100000", T0 + 1001);
    assert_true(fabs(harness_margin(e) - 0.85) < 1e-12);
    /* An agreeing header from each new lease's call: +0.01 each, up to margin_max 0.97. */
    for (int i = 0; i < 20; i++) {
        double t = T0 + 1010 + 10.0 * i;
        resync_remaining(e, harness_grant(e, "a", 10, 10, t), "100000", t);
    }
    assert_true(fabs(harness_margin(e) - 0.97) < 1e-12);
    /* One showing less room than the pool believes: back to the start at once. */
    resync_remaining(e, 0, "50000", T0 + 5000);
    assert_true(fabs(harness_margin(e) - 0.85) < 1e-12);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 35500.0) < 1e-6);
    sl_engine_free(e);
}

/* issue 24, the real fleet: above the start a step is earned by evidence, not by time.
 * The headers of the calls granted before a step describe the margin before it (ten
 * agents' calls answering together are one report, as their 429s are one congestion
 * event); the first call granted after it vouches for it, at once: the climb goes at the
 * fleet's round trip, not at a fixed 5 s a step (which took a 50 s fleet to 0.93). */
static void test_above_its_start_a_step_needs_a_lease_granted_since_the_last(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100); /* recover_every_s 180 */
    uint64_t wave[10];
    for (int i = 0; i < 10; i++) wave[i] = harness_grant(e, "a", 10, 10, T0);
    /* The wave's ten reports: the first steps, the other nine were decided before it. */
    for (int i = 0; i < 10; i++) resync_remaining(e, wave[i], "100000", T0 + 0.5);
    assert_true(fabs(harness_margin(e) - 0.86) < 1e-12);
    /* Each call granted after the last step vouches for one more, with no wait. */
    for (int i = 0; i < 11; i++) {
        uint64_t l = harness_grant(e, "a", 10, 10, T0 + 0.6 + 0.1 * i);
        resync_remaining(e, l, "100000", T0 + 0.65 + 0.1 * i);
        assert_true(fabs(harness_margin(e) - (0.87 + 0.01 * i)) < 1e-12);
    }
    /* At the ceiling, margin_max 0.97. */
    resync_remaining(e, harness_grant(e, "a", 10, 10, T0 + 2), "100000", T0 + 2);
    assert_true(fabs(harness_margin(e) - 0.97) < 1e-12);
    sl_engine_free(e);
    /* Below the start, recovering from a 429, a step still takes recover_every_s and a
     * header changes nothing. */
    e = harness_engine(100000, 10000, 100);
    sl_request_t r = harness_req("a", 1000, 0);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0 + 1, &d), SL_OK);
    sl_settle_t st = {.input_tokens = 1000, .got_429 = true};
    assert_int_equal(sl_engine_settle(e, d.lease, &st, T0 + 2, NULL), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.80) < 1e-12);
    resync_remaining(e, harness_grant(e, "b", 10, 10, T0 + 10), "100000", T0 + 10);
    assert_true(fabs(harness_margin(e) - 0.80) < 1e-12);
    assert_int_equal(sl_engine_advance(e, T0 + 2 + 179), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.80) < 1e-12);
    assert_int_equal(sl_engine_advance(e, T0 + 2 + 180), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.81) < 1e-12);
    sl_engine_free(e);
}

/* A header that shows the provider's room at least level + reserve vouches for the
 * reserve: a step above the start moves its share of the reserve into the level of that
 * bucket (level + reserve unchanged), not of a bucket no header spoke for. */
static void test_a_step_above_the_start_adds_its_room_to_the_levels_headers_vouched_for(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    /* Spend the input bucket down to 5,000 (of 85,000) and the output one to 5,000. */
    uint64_t l = harness_grant(e, "a", 80000, 3500, T0);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 5000.0) < 1e-6);
    /* A second later the provider, holding the same 80,000, refilled at its full rate:
     * 21,667 room, sent as 22,000, against ours 6,417 + the 15,000 reserve. */
    resync_remaining(e, l, "22000", T0 + 1);
    assert_true(fabs(harness_margin(e) - 0.86) < 1e-12);
    /* 1 s refill at 85,000 a minute, plus the step's 1,000 of the reserve. */
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - (5000.0 + 85000.0 / 60 + 1000.0)) <
                1e-6);
    /* No output header agreed: that level only refilled (1 s at 0.85, then 4 s at 0.86). */
    assert_int_equal(sl_engine_advance(e, T0 + 5), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_OUTPUT) - (5000.0 + 8500.0 / 60 + 8600.0 / 15)) <
                1e-6);
    sl_engine_free(e);
}

static void test_agent_retry_after_holds_only_the_reporting_agent(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    uint64_t l = harness_grant(e, "liar", 10, 10, T0);
    sl_settle_t s = harness_settle(0, 0);
    s.got_429 = true;
    s.retry_after_s = 60;
    s.agent_retry_after_s = 300;
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_OK);
    sl_request_t r = harness_req("other", 10, 10);
    sl_decision_t d = harness_request_as(e, &r, T0 + 61, SL_GRANTED);
    r = harness_req("liar", 10, 10);
    d = harness_request_as(e, &r, T0 + 61, SL_REJECTED);
    assert_string_equal(d.reason, "agent_retry_after");
    assert_true(fabs(d.retry_after_s - 239.0) < 1e-6);
    d = harness_request_as(e, &r, T0 + 300, SL_GRANTED);
    /* Out of range is refused, naming the field. */
    s.agent_retry_after_s = NAN;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 301, NULL), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "agent_retry_after"));
    harness_end(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_margin_drops_from_085_to_080_on_a_429_against_a_granted_lease),
    cmocka_unit_test(test_margin_never_goes_below_060),
    cmocka_unit_test(test_margin_climbs_001_per_clean_recover_every),
    cmocka_unit_test(test_a_429_restarts_the_recovery_clock),
    cmocka_unit_test(test_margin_at_floor_for_ten_minutes_raises_an_alert),
    cmocka_unit_test(test_spend_cap_429_leaves_the_margin_alone_and_alerts),
    cmocka_unit_test(test_retry_after_holds_grants_until_it_passes),
    cmocka_unit_test(test_a_wave_of_429s_on_leases_granted_before_the_cut_cuts_once),
    cmocka_unit_test(test_the_margin_climbs_above_its_start_only_while_headers_agree),
    cmocka_unit_test(test_above_its_start_a_step_needs_a_lease_granted_since_the_last),
    cmocka_unit_test(test_a_step_above_the_start_adds_its_room_to_the_levels_headers_vouched_for),
    cmocka_unit_test(test_agent_retry_after_holds_only_the_reporting_agent))
