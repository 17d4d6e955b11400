/* test_admit.c - the working set: a running task's calls go before new tasks' first calls, which wait parked. */
#include "engine_harness.h"
#include "test_main.h"

static sl_engine_t *engine(bool working_set)
{
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = 60000; /* 51000 at margin 0.85, 850 a second */
    cfg.claim_timeout_s = 1e6;
    cfg.ticket_idle_s = 1e6;
    cfg.working_set = working_set;
    sl_engine_t *e = harness_engine_config(&cfg);
    return e;
}

static sl_decision_t call(sl_engine_t *e, const char *agent, const char *task_cache, int64_t in,
                          double now)
{
    sl_request_t r = harness_req(agent, in, 0);
    r.cache_key = task_cache;
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, now, &d), SL_OK);
    return d;
}

/* One task runs (its first call settled), then 40 new tasks ask for their first calls
 * at once, and the running task asks for its next call: how long does it wait? */
static double next_call_wait_s(bool working_set, int *parked)
{
    sl_engine_t *e = engine(working_set);
    double now = T0;
    sl_decision_t d = call(e, "runner", "runner.task1", 1000, now);
    assert_int_equal(d.status, SL_GRANTED);
    sl_settle_t s = harness_settle(1000, 0);
    assert_int_equal(sl_engine_settle(e, d.lease, &s, now += 1, NULL), SL_OK);
    d = call(e, "filler", "filler.task1", 50000, now); /* empties the bucket */
    assert_int_equal(d.status, SL_GRANTED);
    *parked = 0;
    for (int i = 0; i < 40; i++) {
        char agent[16], cache[24];
        snprintf(agent, sizeof agent, "new%d", i);
        snprintf(cache, sizeof cache, "%s.task1", agent);
        sl_request_t r = harness_req(agent, 1000, 0);
        r.cache_key = cache;
        r.max_wait_s = 86400;
        d = harness_request_as(e, &r, now, SL_QUEUED); /* parked or queued, never rejected */
        *parked += d.limited_by && strcmp(d.limited_by, "working_set") == 0;
    }
    now += 1;
    sl_request_t r = harness_req("runner", 1000, 0);
    r.cache_key = "runner.task1";
    r.max_wait_s = 86400;
    assert_int_equal(sl_engine_request(e, &r, now, &d), SL_OK);
    double asked = now;
    uint64_t ticket = d.status == SL_QUEUED ? d.ticket : 0;
    for (int i = 0; ticket && i < 10000; i++) {
        now += 0.5;
        assert_int_equal(sl_engine_ticket(e, ticket, now, &d), SL_OK);
        harness_check(e);
        if (d.status == SL_GRANTED) break;
    }
    assert_int_equal(d.status, SL_GRANTED);
    harness_end(e);
    return now - asked;
}

static void test_a_running_tasks_next_call_goes_before_new_tasks_first_calls(void **state)
{
    (void)state;
    int parked_with = 0, parked_without = 0;
    double with_s = next_call_wait_s(true, &parked_with);
    double without_s = next_call_wait_s(false, &parked_without);
    print_message("next call of the running task waited %.1f s with the working set, %.1f s "
                  "without\n", with_s, without_s);
    assert_int_equal(parked_with, 40);
    assert_int_equal(parked_without, 0);
    /* With it: at once, or after a second of refill. Without it: behind the 40 first
     * calls of lower tags, about 40 x 1000 / 850 s. */
    assert_true(with_s < 5);
    assert_true(without_s > 40);
}

static void test_parked_first_calls_go_in_tag_order_once_nothing_is_queued(void **state)
{
    (void)state;
    sl_engine_t *e = engine(true);
    double now = T0;
    sl_decision_t d = call(e, "filler", "filler.t", 51000, now);
    assert_int_equal(d.status, SL_GRANTED);
    /* Nothing queued, but the bucket is empty: parked, not queued. */
    sl_decision_t a = call(e, "a", "a.t", 850, now);
    sl_decision_t b = call(e, "b", "b.t", 850, now);
    assert_int_equal(a.status, SL_QUEUED);
    assert_string_equal(a.limited_by, "working_set");
    assert_int_equal(b.status, SL_QUEUED);
    sl_pool_info_t info;
    assert_int_equal(sl_engine_pool_info(e, "default", &info), SL_OK);
    assert_int_equal(info.queue_depth, 2);
    /* One second of refill admits the first, the next second the second. */
    assert_int_equal(sl_engine_advance(e, now + 1.001), SL_OK);
    d = harness_ticket_as(e, a.ticket, now + 1.001, SL_GRANTED);
    d = harness_ticket_as(e, b.ticket, now + 1.001, SL_QUEUED);
    d = harness_ticket_as(e, b.ticket, now + 2.002, SL_GRANTED);
    harness_end(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_a_running_tasks_next_call_goes_before_new_tasks_first_calls),
    cmocka_unit_test(test_parked_first_calls_go_in_tag_order_once_nothing_is_queued))
