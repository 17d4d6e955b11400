/* test_caps.c - caps per agent and per team: share, rpm, concurrency, budget. */
#include "engine_harness.h"
#include "test_main.h"

static sl_decision_t ask(sl_engine_t *e, const char *agent, int64_t in, int64_t out, double now)
{
    sl_request_t r = harness_req(agent, in, out);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, now, &d), SL_OK);
    harness_check(e);
    return d;
}

static void test_agent_rpm_cap_rejects_with_the_time_it_allows(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_caps_t caps = {.max_rpm = 2};
    assert_int_equal(sl_engine_set_caps(e, "chatty", false, &caps), SL_OK);
    assert_int_equal(ask(e, "chatty", 10, 10, T0).status, SL_GRANTED);
    assert_int_equal(ask(e, "chatty", 10, 10, T0).status, SL_GRANTED);
    sl_decision_t d = ask(e, "chatty", 10, 10, T0);
    assert_int_equal(d.status, SL_REJECTED);
    assert_string_equal(d.reason, "agent_cap");
    assert_true(fabs(d.retry_after_s - 30) < 1e-6); /* 2 per minute: one every 30 s */
    assert_int_equal(ask(e, "quiet", 10, 10, T0).status, SL_GRANTED); /* others unaffected */
    assert_int_equal(ask(e, "chatty", 10, 10, T0 + 30).status, SL_GRANTED);
    sl_engine_free(e);
}

static void test_share_cap_is_refunded_by_settle(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 100000, 1000);
    sl_caps_t caps = {.max_share = 0.1}; /* 10,000 input tokens per minute */
    assert_int_equal(sl_engine_set_caps(e, "*", false, &caps), SL_OK);
    sl_decision_t d = ask(e, "a", 6000, 10, T0);
    assert_int_equal(d.status, SL_GRANTED);
    sl_decision_t r = ask(e, "a", 6000, 10, T0);
    assert_int_equal(r.status, SL_REJECTED);
    assert_string_equal(r.reason, "agent_cap");
    assert_true(fabs(r.retry_after_s - 12) < 1e-6); /* 2,000 short at 10,000/60 per s */
    sl_settle_t s = harness_settle(1000, 10);       /* used far less: 5,000 back */
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0, NULL), SL_OK);
    assert_int_equal(ask(e, "a", 6000, 10, T0).status, SL_GRANTED);
    /* A need above the cap can never pass. */
    sl_request_t big = harness_req("a", 10001, 10);
    assert_int_equal(sl_engine_request(e, &big, T0, &d), SL_ECAPACITY);
    assert_non_null(strstr(sl_engine_errmsg(e), "agent_cap"));
    /* An agent's own caps replace "*". */
    sl_caps_t own = {.max_share = 0.5};
    assert_int_equal(sl_engine_set_caps(e, "b", false, &own), SL_OK);
    assert_int_equal(ask(e, "b", 20000, 10, T0).status, SL_GRANTED);
    sl_engine_free(e);
}

static void test_default_caps_give_every_agent_its_own_buckets(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_caps_t caps = {.max_rpm = 1};
    assert_int_equal(sl_engine_set_caps(e, "*", false, &caps), SL_OK);
    assert_int_equal(ask(e, "a", 10, 10, T0).status, SL_GRANTED);
    assert_int_equal(ask(e, "b", 10, 10, T0).status, SL_GRANTED); /* not a shared bucket */
    assert_int_equal(ask(e, "a", 10, 10, T0).status, SL_REJECTED);
    /* Raising "*" applies to agents already seen; own caps override; removing them
     * falls back to "*". */
    caps.max_rpm = 3;
    assert_int_equal(sl_engine_set_caps(e, "*", false, &caps), SL_OK);
    assert_int_equal(ask(e, "a", 10, 10, T0 + 21).status, SL_GRANTED);
    sl_caps_t own = {.max_rpm = 1000};
    assert_int_equal(sl_engine_set_caps(e, "b", false, &own), SL_OK);
    for (int i = 0; i < 10; i++)
        assert_int_equal(ask(e, "b", 10, 10, T0 + 21).status, SL_GRANTED);
    assert_int_equal(sl_engine_set_caps(e, "b", false, NULL), SL_OK);
    /* Back on "*" (3 per minute): its bucket is clamped to 3, then empties. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ask(e, "b", 10, 10, T0 + 21).status, SL_GRANTED);
    assert_int_equal(ask(e, "b", 10, 10, T0 + 21).status, SL_REJECTED);
    sl_engine_free(e);
}

static void test_concurrency_cap_queues_and_grants_on_release(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_caps_t caps = {.max_concurrent = 1};
    assert_int_equal(sl_engine_set_caps(e, "solo", false, &caps), SL_OK);
    sl_decision_t d = ask(e, "solo", 10, 10, T0);
    assert_int_equal(d.status, SL_GRANTED);
    /* Blocked only by its own max_concurrent: queued, not rejected; before any settle
     * the ETA is the pool's prior lease duration (30 s) over the one slot, within the
     * holder's earliest expiry (120 s TTL, 1 s later). */
    sl_request_t r = harness_req("solo", 10, 10);
    r.max_wait_s = 300;
    sl_decision_t q;
    assert_int_equal(sl_engine_request(e, &r, T0 + 1, &q), SL_OK);
    harness_check(e);
    assert_int_equal(q.status, SL_QUEUED);
    assert_string_equal(q.limited_by, "agent_cap");
    assert_true(fabs(q.eta_s - 30) < 1e-6);
    assert_int_equal(ask(e, "other", 10, 10, T0 + 1).status, SL_GRANTED); /* others pass */
    sl_pool_info_t info;
    assert_int_equal(sl_engine_pool_info(e, "default", &info), SL_OK);
    assert_int_equal(info.queue_depth, 1);
    sl_settle_t s = harness_settle(10, 10);
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 5, NULL), SL_OK);
    harness_check(e);
    sl_decision_t g = harness_ticket_as(e, q.ticket, T0 + 5, SL_GRANTED);
    assert_true(fabs(g.waited_s - 4) < 1e-6);
    /* The next one waits for that lease: k x D / max = 1 x 5 s (one settle of 5 s). */
    sl_decision_t q2 = ask(e, "solo", 10, 10, T0 + 6);
    assert_int_equal(q2.status, SL_QUEUED);
    assert_true(fabs(q2.eta_s - 5) < 1e-6);
    /* A third waits for two releases: 2 x 5 s. */
    sl_decision_t q3 = ask(e, "solo", 10, 10, T0 + 6);
    assert_int_equal(q3.status, SL_QUEUED);
    assert_true(fabs(q3.eta_s - 10) < 1e-6);
    assert_int_equal(sl_engine_cancel(e, g.lease, T0 + 7), SL_OK);
    harness_check(e);
    g = harness_ticket_as(e, q2.ticket, T0 + 7, SL_GRANTED);
    g = harness_ticket_as(e, q3.ticket, T0 + 7, SL_QUEUED); /* still one at a time */
    assert_int_equal(sl_engine_ticket_cancel(e, q3.ticket, T0 + 8), SL_OK);
    harness_end(e);
}

static void test_concurrency_cap_rejects_when_the_release_is_beyond_the_wait(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_caps_t caps = {.max_concurrent = 1};
    assert_int_equal(sl_engine_set_caps(e, "slow", false, &caps), SL_OK);
    sl_decision_t d = ask(e, "slow", 10, 10, T0);
    sl_settle_t s = harness_settle(10, 10);
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 100, NULL), SL_OK); /* D = 100 s */
    d = ask(e, "slow", 10, 10, T0 + 100);
    assert_int_equal(d.status, SL_GRANTED);
    sl_decision_t r = ask(e, "slow", 10, 10, T0 + 100);
    assert_int_equal(r.status, SL_REJECTED); /* 100 s > max_queue_wait_s 60 */
    assert_string_equal(r.reason, "agent_cap");
    assert_true(fabs(r.retry_after_s - 100) < 1e-6);
    sl_engine_free(e);
}

static void test_a_queued_ticket_never_passes_its_agents_concurrency_cap(void **state)
{
    (void)state;
    /* Queued for the pool (rpm), not for its cap of 2; a reload then lowers the cap to
     * one lease in flight, which it holds: when the ticket reaches the head it waits for
     * the agent's release instead of being granted past the cap. */
    sl_engine_t *e = harness_engine(1000000, 100000, 2);
    sl_caps_t caps = {.max_concurrent = 2};
    assert_int_equal(sl_engine_set_caps(e, "solo", false, &caps), SL_OK);
    sl_decision_t a = ask(e, "solo", 10, 10, T0);
    assert_int_equal(a.status, SL_GRANTED);
    sl_decision_t q = ask(e, "solo", 10, 10, T0); /* rpm 2 x 0.85: 1.7 requests */
    assert_int_equal(q.status, SL_QUEUED);
    assert_string_equal(q.limited_by, "requests");
    caps.max_concurrent = 1;
    assert_int_equal(sl_engine_set_caps(e, "solo", false, &caps), SL_OK);
    assert_int_equal(sl_engine_advance(e, T0 + 100), SL_OK); /* rpm refilled */
    harness_check(e);
    sl_decision_t g = harness_ticket_as(e, q.ticket, T0 + 100, SL_QUEUED);
    assert_string_equal(g.limited_by, "agent_cap");
    sl_settle_t s = harness_settle(10, 10);
    assert_int_equal(sl_engine_settle(e, a.lease, &s, T0 + 100, NULL), SL_OK);
    g = harness_ticket_as(e, q.ticket, T0 + 100, SL_GRANTED);
    harness_end(e);
}

static void test_a_cap_raised_wakes_parked_tickets_up_to_the_new_cap_only(void **state)
{
    (void)state;
    /* Two parked behind a cap of 1; the cap is raised to 2: one is granted at once, the
     * other stays parked (no release needed for the first, none exceeded for the second).
     * Then the cap is lifted while the agent's team still holds 2: the team cap holds. */
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_caps_t caps = {.max_concurrent = 1}, team = {.max_concurrent = 2};
    assert_int_equal(sl_engine_set_caps(e, "solo", false, &caps), SL_OK);
    assert_int_equal(sl_engine_set_caps(e, "crew", true, &team), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(e, "solo", "crew"), SL_OK);
    assert_int_equal(ask(e, "solo", 10, 10, T0).status, SL_GRANTED);
    sl_request_t r = harness_req("solo", 10, 10);
    r.max_wait_s = 300; /* the ETA before any settle is the lease's expiry */
    sl_decision_t q1, q2;
    assert_int_equal(sl_engine_request(e, &r, T0, &q1), SL_OK);
    assert_int_equal(sl_engine_request(e, &r, T0, &q2), SL_OK);
    assert_int_equal(q1.status, SL_QUEUED);
    assert_int_equal(q2.status, SL_QUEUED);
    caps.max_concurrent = 2;
    assert_int_equal(sl_engine_set_caps(e, "solo", false, &caps), SL_OK);
    sl_engine_wake_parked(e);
    harness_check(e);
    sl_decision_t g = harness_ticket_as(e, q1.ticket, T0 + 1, SL_GRANTED);
    g = harness_ticket_as(e, q2.ticket, T0 + 1, SL_QUEUED);
    assert_true(isfinite(g.eta_s) && g.eta_s >= 0);
    assert_int_equal(sl_engine_set_caps(e, "solo", false, NULL), SL_OK);
    sl_engine_wake_parked(e);
    harness_check(e);
    g = harness_ticket_as(e, q2.ticket, T0 + 2, SL_QUEUED); /* the team's 2 are in flight */
    assert_string_equal(g.limited_by, "team_cap");
    assert_true(isfinite(g.eta_s) && g.eta_s >= 0);
    sl_engine_free(e);
}

static void test_a_parked_ticket_that_no_longer_fits_is_rejected_at_a_margin_cut(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000, 100000, 1000); /* input capacity 8,500 */
    sl_caps_t caps = {.max_concurrent = 1};
    assert_int_equal(sl_engine_set_caps(e, "solo", false, &caps), SL_OK);
    sl_decision_t d = ask(e, "solo", 10, 10, T0);
    sl_decision_t o = ask(e, "other", 10, 10, T0);
    sl_request_t r = harness_req("solo", 8200, 10);
    r.max_wait_s = 300;
    sl_decision_t q = harness_request_as(e, &r, T0, SL_QUEUED); /* parked: only the cap holds it back */
    sl_settle_t s = harness_settle(10, 10);
    s.got_429 = true; /* the margin falls to 0.80: capacity 8,000 < 8,200 */
    assert_int_equal(sl_engine_settle(e, o.lease, &s, T0 + 1, NULL), SL_OK);
    harness_check(e);
    sl_decision_t g;
    assert_int_equal(sl_engine_ticket(e, q.ticket, T0 + 1, &g), SL_EALREADY);
    assert_non_null(strstr(sl_engine_errmsg(e), "rejected"));
    s = harness_settle(10, 10);
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 2, NULL), SL_OK);
    harness_end(e);
}

static void test_team_cap_is_shared_by_its_agents(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_caps_t caps = {.max_rpm = 3};
    assert_int_equal(sl_engine_set_caps(e, "lint", true, &caps), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(e, "l1", "lint"), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(e, "l2", "lint"), SL_OK);
    assert_int_equal(ask(e, "l1", 10, 10, T0).status, SL_GRANTED);
    assert_int_equal(ask(e, "l2", 10, 10, T0).status, SL_GRANTED);
    assert_int_equal(ask(e, "l1", 10, 10, T0).status, SL_GRANTED);
    sl_decision_t d = ask(e, "l2", 10, 10, T0);
    assert_int_equal(d.status, SL_REJECTED);
    assert_string_equal(d.reason, "team_cap");
    assert_int_equal(ask(e, "outsider", 10, 10, T0).status, SL_GRANTED);
    assert_int_equal(sl_engine_set_agent_team(e, "l2", NULL), SL_OK);
    assert_int_equal(ask(e, "l2", 10, 10, T0).status, SL_GRANTED);
    sl_engine_free(e);
}

/* An engine with one pool priced $3 per million input tokens and $15 per million output. */
static sl_engine_t *priced_engine(void)
{
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = 1000000;
    cfg.price_input_per_mtok = 3;
    cfg.price_output_per_mtok = 15;
    sl_engine_t *e = harness_engine_config(&cfg);
    return e;
}

static void test_budget_is_priced_and_refilled(void **state)
{
    (void)state;
    sl_engine_t *e = priced_engine();
    sl_caps_t caps = {.budget_usd_per_hour = 0.01};
    assert_int_equal(sl_engine_set_caps(e, "spender", false, &caps), SL_OK);
    sl_decision_t d = ask(e, "spender", 2000, 100, T0); /* $0.0075 */
    assert_int_equal(d.status, SL_GRANTED);
    sl_decision_t r = ask(e, "spender", 2000, 100, T0);
    assert_int_equal(r.status, SL_REJECTED);
    assert_string_equal(r.reason, "budget_exhausted");
    /* $0.005 short at $0.01 per hour: 1,800 s. */
    assert_true(fabs(r.retry_after_s - 1800) < 1e-3);
    sl_settle_t s = harness_settle(500, 0); /* really cost $0.0015: $0.006 back */
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0, NULL), SL_OK);
    assert_int_equal(ask(e, "spender", 2000, 100, T0).status, SL_GRANTED);
    sl_request_t huge = harness_req("spender", 900000, 0); /* $2.70 > the whole budget */
    assert_int_equal(sl_engine_request(e, &huge, T0, &d), SL_ECAPACITY);
    sl_engine_free(e);
}

static void test_a_budget_given_later_starts_full(void **state)
{
    (void)state;
    sl_engine_t *e = priced_engine();
    sl_caps_t caps = {.max_concurrent = 5};
    assert_int_equal(sl_engine_set_caps(e, "spender", false, &caps), SL_OK);
    for (int i = 0; i < 3; i++) /* $0.0075 each under no budget */
        assert_int_equal(ask(e, "spender", 2000, 100, T0).status, SL_GRANTED);
    caps.budget_usd_per_hour = 0.01;
    assert_int_equal(sl_engine_set_caps(e, "spender", false, &caps), SL_OK);
    /* The $0.0225 spent before is not owed: $0.0075 of a full $0.01. */
    assert_int_equal(ask(e, "spender", 2000, 100, T0).status, SL_GRANTED);
    assert_int_equal(ask(e, "spender", 2000, 100, T0).status, SL_REJECTED);
    sl_engine_free(e);
}

static void test_a_capped_call_above_a_share_cap_reserves_what_the_cap_holds(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_caps_t caps = {.max_share = 0.1}; /* 10,000 output tokens per minute */
    assert_int_equal(sl_engine_set_caps(e, "*", false, &caps), SL_OK);
    /* Sent as is, max_tokens 32,000 is what the provider holds: it never passes the cap. */
    sl_request_t r = harness_req("a", 100, 32000);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_ECAPACITY);
    assert_non_null(strstr(sl_engine_errmsg(e), "output_tokens 32000 can never pass"));
    /* Capped by the caller to its reservation (the proxy rewrites max_tokens). */
    r.output_capped = true;
    d = harness_request_as(e, &r, T0, SL_GRANTED);
    assert_int_equal(d.charged_output_tokens, 10000);
    sl_settle_t s = harness_settle(100, 12000); /* 2,000 more: debt on the cap and pool */
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 1, NULL), SL_OK);
    d = harness_request_as(e, &r, T0 + 2, SL_REJECTED); /* the cap is in debt: wait for it */
    assert_string_equal(d.reason, "agent_cap");
    harness_end(e);
}

static void test_bad_caps_are_refused(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000, 1000, 10);
    sl_caps_t caps = {.max_share = 1.5};
    assert_int_equal(sl_engine_set_caps(e, "a", false, &caps), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "max_share 1.5"));
    caps = (sl_caps_t){.max_rpm = -1};
    assert_int_equal(sl_engine_set_caps(e, "a", false, &caps), SL_EINVAL);
    caps = (sl_caps_t){.budget_usd_per_day = NAN};
    assert_int_equal(sl_engine_set_caps(e, "a", false, &caps), SL_EINVAL);
    caps = (sl_caps_t){.max_rpm = 1};
    assert_int_equal(sl_engine_set_caps(e, "bad name", false, &caps), SL_EINVAL);
    assert_int_equal(sl_engine_set_caps(e, "*", true, &caps), SL_EINVAL);
    assert_int_equal(sl_engine_set_agent_team(e, "a", "bad team"), SL_EINVAL);
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_agent_rpm_cap_rejects_with_the_time_it_allows),
    cmocka_unit_test(test_share_cap_is_refunded_by_settle),
    cmocka_unit_test(test_a_capped_call_above_a_share_cap_reserves_what_the_cap_holds),
    cmocka_unit_test(test_default_caps_give_every_agent_its_own_buckets),
    cmocka_unit_test(test_concurrency_cap_queues_and_grants_on_release),
    cmocka_unit_test(test_concurrency_cap_rejects_when_the_release_is_beyond_the_wait),
    cmocka_unit_test(test_a_queued_ticket_never_passes_its_agents_concurrency_cap),
    cmocka_unit_test(test_a_cap_raised_wakes_parked_tickets_up_to_the_new_cap_only),
    cmocka_unit_test(test_a_parked_ticket_that_no_longer_fits_is_rejected_at_a_margin_cut),
    cmocka_unit_test(test_team_cap_is_shared_by_its_agents),
    cmocka_unit_test(test_budget_is_priced_and_refilled),
    cmocka_unit_test(test_a_budget_given_later_starts_full),
    cmocka_unit_test(test_bad_caps_are_refused))
