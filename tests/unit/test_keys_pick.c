/* test_keys_pick.c - a pool of several keys: sl_keys_pick() sends a request to the key that grants it soonest, equal ETAs to the emptiest. */
#include "engine_harness.h"
#include "test_main.h"

/* Two keys' pools of unequal tiers (output 6,000 and 3,000 a minute; input unlimited). */
static sl_engine_t *two_keys(void)
{
    sl_engine_t *e = sl_engine_new(NULL);
    assert_non_null(e);
    sl_pool_config_t cfg = harness_config();
    cfg.output_tpm = 6000;
    cfg.rpm = 1000;
    assert_int_equal(sl_engine_configure_pool(e, "p:big", &cfg, T0), SL_OK);
    cfg.output_tpm = 3000;
    assert_int_equal(sl_engine_configure_pool(e, "p:small", &cfg, T0), SL_OK);
    return e;
}

static sl_request_t need_output(const char *agent, int64_t output_tokens)
{
    sl_request_t r = {.agent = agent, .input_tokens = 10, .output_tokens = output_tokens};
    return r;
}

/* The key sl_keys_pick() chooses for `r` now: 0 big, 1 small. */
static int pick(sl_engine_t *e, const sl_request_t *r, double now)
{
    sl_pool_info_t big, small;
    assert_int_equal(sl_engine_advance(e, now), SL_OK);
    assert_int_equal(sl_engine_pool_info(e, "p:big", &big), SL_OK);
    assert_int_equal(sl_engine_pool_info(e, "p:small", &small), SL_OK);
    const sl_pool_info_t *keys[2] = {&big, &small};
    return sl_keys_pick(keys, 2, r, now);
}

static void grant(sl_engine_t *e, const char *pool, const char *agent, int64_t out, double now)
{
    sl_request_t r = need_output(agent, out);
    r.pool = pool;
    harness_request_as(e, &r, now, SL_GRANTED);
}

static void test_equal_etas_go_to_the_emptiest_key(void **state)
{
    (void)state;
    sl_engine_t *e = two_keys();
    sl_request_t r = need_output("a", 500);
    /* Both full: a tie on room too, the first key. */
    assert_int_equal(pick(e, &r, T0), 0);
    /* big at 2,100 of 5,100 (41%), small full: both grant at once, small is emptier. */
    grant(e, "p:big", "x", 3000, T0);
    assert_int_equal(pick(e, &r, T0), 1);
    sl_engine_free(e);
}

static void test_a_request_goes_to_the_key_that_grants_it_soonest(void **state)
{
    (void)state;
    sl_engine_t *e = two_keys();
    /* big nearly empty (100 left, 85 a second back); small has 550 left (42.5 a second). */
    grant(e, "p:big", "x", 5000, T0);
    grant(e, "p:small", "y", 2000, T0);
    sl_request_t r = need_output("a", 600);
    /* a need of 600: big 500 / 85 = 5.9 s, small 50 / 42.5 = 1.2 s: small, the smaller key. */
    assert_int_equal(pick(e, &r, T0), 1);
    /* a need of 2,000: big 1,900 / 85 = 22 s, small 1,450 / 42.5 = 34 s: big. */
    r.output_tokens = 2000;
    assert_int_equal(pick(e, &r, T0), 0);
    sl_engine_free(e);
}

static void test_a_key_too_small_for_the_need_is_never_picked(void **state)
{
    (void)state;
    sl_engine_t *e = two_keys();
    grant(e, "p:big", "x", 5000, T0); /* big must wait; small is full but holds 2,550 */
    sl_request_t r = need_output("a", 4000);
    assert_int_equal(pick(e, &r, T0), 0);
    r.output_tokens = 6001; /* above both limits: no key */
    assert_int_equal(pick(e, &r, T0), -1);
    sl_engine_free(e);
}

static void test_tickets_queued_on_a_key_count_in_its_eta(void **state)
{
    (void)state;
    sl_engine_t *e = two_keys();
    grant(e, "p:big", "x", 5000, T0);
    grant(e, "p:small", "y", 2500, T0);
    sl_request_t r = need_output("a", 1000);
    /* big: 900 / 85 = 10.6 s; small: 950 / 42.5 = 22 s: big. */
    assert_int_equal(pick(e, &r, T0), 0);
    /* Three calls of 1,000 queued on big: behind them big is no longer the sooner. */
    for (int i = 0; i < 3; i++) {
        sl_request_t q = need_output(i == 0 ? "q0" : i == 1 ? "q1" : "q2", 1000);
        q.pool = "p:big";
        harness_request_as(e, &q, T0, SL_QUEUED);
    }
    assert_int_equal(pick(e, &r, T0), 1);
    sl_engine_free(e);
}

static void test_a_provider_hold_counts_in_the_eta(void **state)
{
    (void)state;
    sl_pool_info_t big, small;
    sl_engine_t *e = two_keys();
    sl_request_t r = need_output("a", 100);
    assert_int_equal(sl_engine_pool_info(e, "p:big", &big), SL_OK);
    assert_int_equal(sl_engine_pool_info(e, "p:small", &small), SL_OK);
    big.blocked_until = T0 + 30; /* a retry-after on big's key */
    const sl_pool_info_t *keys[2] = {&big, &small}, *none[2] = {NULL, NULL};
    assert_int_equal(sl_keys_pick(keys, 2, &r, T0), 1);
    assert_int_equal(sl_keys_pick(none, 2, &r, T0), -1);
    sl_engine_free(e);
}

/* A key whose margin climbed holds more than its starting capacity; the engine grants a
 * need above limit x margin_start (and within the limit) once the bucket holds the
 * starting capacity (lease.c fit_capacity), and refuses one above the limit for good: such
 * a need never goes to that key (the simulator's --demand-scale 4 run of two-keys.yaml
 * met the refusal). */
static void test_a_need_above_the_starting_capacity_skips_a_climbed_key(void **state)
{
    (void)state;
    sl_pool_info_t big, small;
    sl_engine_t *e = two_keys();
    sl_request_t r = need_output("a", 2700); /* small: start capacity 2,550, climbed 2,910 */
    assert_int_equal(sl_engine_pool_info(e, "p:big", &big), SL_OK);
    assert_int_equal(sl_engine_pool_info(e, "p:small", &small), SL_OK);
    small.capacity[SL_BUCKET_OUTPUT] = small.level[SL_BUCKET_OUTPUT] = 2910;
    big.level[SL_BUCKET_OUTPUT] = 0; /* big must wait 2,700 / 85 = 32 s */
    const sl_pool_info_t *keys[2] = {&big, &small};
    assert_int_equal(sl_keys_pick(keys, 2, &r, T0), 1); /* small holds its start capacity */
    r.output_tokens = 3001; /* above small's limit (3,000) */
    assert_int_equal(sl_keys_pick(keys, 2, &r, T0), 0);
    sl_engine_free(e);
}

/* A key's reject for its wait or for its agent's own hold there is that key's: the next
 * key is asked (sluiced, the simulator). A cap's, a replay's, a grant or a ticket are the
 * answer. */
static void test_a_reject_for_the_wait_or_an_agents_hold_asks_the_next_key(void **state)
{
    (void)state;
    sl_decision_t d = {.status = SL_REJECTED, .reason = "queue_wait_exceeds_max"};
    assert_true(sl_keys_ask_next(&d));
    d.reason = "agent_retry_after";
    assert_true(sl_keys_ask_next(&d));
    d.replayed = true;
    assert_false(sl_keys_ask_next(&d));
    d.replayed = false;
    d.reason = "agent_cap";
    assert_false(sl_keys_ask_next(&d));
    d.status = SL_QUEUED;
    d.reason = NULL;
    assert_false(sl_keys_ask_next(&d));
    /* The next key asked is the estimate's next: the pick without the keys asked. */
    sl_pool_info_t big, small;
    sl_engine_t *e = two_keys();
    sl_request_t r = need_output("a", 100);
    assert_int_equal(sl_engine_pool_info(e, "p:big", &big), SL_OK);
    assert_int_equal(sl_engine_pool_info(e, "p:small", &small), SL_OK);
    const sl_pool_info_t *keys[2] = {&big, &small};
    assert_int_equal(sl_keys_pick(keys, 2, &r, T0), 0);
    keys[0] = NULL;
    assert_int_equal(sl_keys_pick(keys, 2, &r, T0), 1);
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_equal_etas_go_to_the_emptiest_key),
    cmocka_unit_test(test_a_request_goes_to_the_key_that_grants_it_soonest),
    cmocka_unit_test(test_a_key_too_small_for_the_need_is_never_picked),
    cmocka_unit_test(test_tickets_queued_on_a_key_count_in_its_eta),
    cmocka_unit_test(test_a_provider_hold_counts_in_the_eta),
    cmocka_unit_test(test_a_need_above_the_starting_capacity_skips_a_climbed_key),
    cmocka_unit_test(test_a_reject_for_the_wait_or_an_agents_hold_asks_the_next_key))
