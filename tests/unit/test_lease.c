/* test_lease.c - leases: expiry without refund, caching, bump, capacity, cancel, extend,
 * idempotency, tickets (claim, idle expiry, cancel), and settle outcomes. */
#include "engine_harness.h"
#include "test_main.h"

static sl_engine_t *engine_with_defaults(int64_t input_tpm)
{
    sl_pool_config_t cfg = harness_pool(input_tpm, input_tpm / 5, 1000);
    sl_engine_t *e = harness_engine_config(&cfg);
    return e;
}

static void test_expired_lease_is_not_refunded(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(60000, 0, 0); /* refill 850/s */
    uint64_t l = harness_grant(e, "crashy", 51000, 0, T0);
    assert_int_equal(sl_engine_advance(e, T0 + 10), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 8500) < 1e-6);
    assert_int_equal(sl_engine_advance(e, T0 + 121), SL_OK); /* ttl 120 s */
    sl_pool_info_t info;
    sl_engine_pool_info(e, "default", &info);
    assert_int_equal(info.leases_in_flight, 0);
    /* Only refill came back, nothing from the reaped lease. */
    assert_true(fabs(info.level[SL_BUCKET_INPUT] - 51000) < 1e-6);
    sl_settle_t s = harness_settle(10, 0);
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 122, NULL), SL_EEXPIRED);
    harness_end(e);
}

static void test_reap_does_not_refund_even_when_the_bucket_has_room(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(600000, 0, 0);
    harness_grant(e, "crashy", 1000, 0, T0);
    double before = harness_level(e, SL_BUCKET_INPUT);
    sl_settle_t s = harness_settle(0, 0);
    (void)s;
    /* Both at full capacity at the end, but the reap itself adds nothing: check at the
     * exact expiry instant against refill alone. */
    assert_int_equal(sl_engine_advance(e, T0 + 120), SL_OK);
    double refill = 510000.0 / 60 * 120;
    double expect = before + refill > 510000 ? 510000 : before + refill;
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - expect) < 1e-6);
    sl_engine_free(e);
}

static void test_cold_cache_charges_the_cached_prefix_and_warm_does_not(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_request_t r = harness_req("refactor", 2000, 100);
    r.cached_tokens = 78000;
    sl_decision_t d = harness_request_as(e, &r, T0, SL_GRANTED);
    assert_int_equal(d.charged_input_tokens, 80000); /* cold: first call writes the cache */
    assert_true(d.cache_penalty);
    sl_settle_t s = harness_settle(2000, 100);
    s.cache_creation_input_tokens = 78000;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 5, NULL), SL_OK);
    /* Warm within the TTL: the prefix is a cache read, free against input TPM. */
    assert_int_equal(sl_engine_request(e, &r, T0 + 200, &d), SL_OK);
    assert_int_equal(d.charged_input_tokens, 2000);
    assert_false(d.cache_penalty);
    s = harness_settle(2000, 100);
    s.cache_read_input_tokens = 78000;
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 210, &res), SL_OK);
    assert_int_equal(res.adjust_input_tokens, 0);
    /* Cold again after cache_ttl (300 s) without a settle. */
    assert_int_equal(sl_engine_request(e, &r, T0 + 510, &d), SL_OK);
    assert_int_equal(d.charged_input_tokens, 80000);
    harness_end(e);
}

static void test_cache_reads_count_when_the_pool_says_so(void **state)
{
    (void)state;
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = 1000000;
    cfg.cache_reads_count = true;
    sl_engine_t *e = harness_engine_config(&cfg);
    sl_request_t r = harness_req("a", 2000, 0);
    r.cached_tokens = 10000;
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    sl_settle_t s = harness_settle(2000, 0);
    s.cache_read_input_tokens = 10000;
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0, &res), SL_OK);
    assert_int_equal(res.adjust_input_tokens, 0);
    assert_int_equal(sl_engine_request(e, &r, T0 + 1, &d), SL_OK);
    assert_int_equal(d.charged_input_tokens, 12000);
    assert_false(d.cache_penalty);
    sl_engine_free(e);
}

static void test_warm_cache_about_to_lapse_gets_the_bump(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(120000, 0, 0); /* capacity 102,000, 1,700/s */
    /* The agent's cache of 50k tokens was written at T0. */
    sl_request_t r = harness_req("big", 1000, 0);
    r.cached_tokens = 50000;
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    sl_settle_t s = harness_settle(1000, 0);
    s.cache_creation_input_tokens = 50000;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0, NULL), SL_OK);
    /* Drain the bucket at T0 + 290 so the next request waits ~20 s: past the TTL. */
    assert_int_equal(sl_engine_advance(e, T0 + 290), SL_OK);
    uint64_t l = harness_grant(e, "other", 102000, 0, T0 + 290);
    s = harness_settle(130000, 0); /* 28k of debt: the next grant is ~17 s away */
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 290, NULL), SL_OK);
    sl_request_t other = harness_req("other2", 30000, 0);
    d = harness_request_as(e, &other, T0 + 290, SL_QUEUED);
    assert_true(fabs(d.weight - 1.0) < 1e-12);
    d = harness_request_as(e, &r, T0 + 290, SL_QUEUED);
    assert_true(fabs(d.weight - 1.5) < 1e-12);
    /* The bump put it ahead of the earlier, larger request. */
    assert_int_equal(d.position, 1);
    /* A cold cache, or one that stays warm past the ETA, gets no bump. */
    sl_request_t small = harness_req("fresh", 1000, 0);
    small.cached_tokens = 50000;
    assert_int_equal(sl_engine_request(e, &small, T0 + 290, &d), SL_OK);
    assert_true(fabs(d.weight - 1.0) < 1e-12);
    harness_end(e);
}

/* Queues `r` at `now` behind a drained bucket (an ETA of about 17 s) and returns its weight. */
static double weight_behind_a_drained_bucket(sl_engine_t *e, const sl_request_t *r, double now,
                                             const char *drainer)
{
    uint64_t l = harness_grant(e, drainer, 102000, 0, now);
    sl_settle_t s = harness_settle(130000, 0); /* 28k of debt: the next grant is ~17 s away */
    assert_int_equal(sl_engine_settle(e, l, &s, now, NULL), SL_OK);
    sl_decision_t d = harness_request_as(e, r, now, SL_QUEUED);
    assert_int_equal(sl_engine_ticket_cancel(e, d.ticket, now), SL_OK);
    return d.weight;
}

static void test_a_1h_cache_gets_the_bump_before_its_hour_ends_not_at_5_minutes(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(120000, 0, 0); /* capacity 102,000, 1,700/s */
    sl_request_t r = harness_req("big", 1000, 0);
    r.cached_tokens = 50000;
    r.cache_ttl_s = 3600; /* cache_control ttl "1h" */
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    sl_settle_t s = harness_settle(1000, 0);
    s.cache_creation_input_tokens = 50000;
    s.cache_creation_1h_input_tokens = 50000;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0, NULL), SL_OK);
    /* At 290 s a 5-minute cache would lapse within the ETA; this one lives an hour. */
    assert_true(fabs(weight_behind_a_drained_bucket(e, &r, T0 + 290, "d1") - 1.0) < 1e-12);
    /* 10 s before the hour ends it is about to lapse: bumped. */
    assert_true(fabs(weight_behind_a_drained_bucket(e, &r, T0 + 3590, "d2") - 1.5) < 1e-12);
    harness_end(e);
}

static void test_bad_cache_lifetimes_and_1h_writes_are_refused_unchanged(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(120000, 0, 0);
    sl_request_t r = harness_req("a", 1000, 0);
    sl_decision_t d;
    r.cache_ttl_s = -1;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "cache_ttl_s -1"));
    r.cache_ttl_s = NAN;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_EINVAL);
    r.cache_ttl_s = SL_CACHE_TTL_MAX_S + 1;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_EINVAL);
    r.cache_ttl_s = 3600;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    sl_settle_t s = harness_settle(1000, 0);
    s.cache_creation_input_tokens = 10;
    s.cache_creation_1h_input_tokens = 11;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0, NULL), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "cache_creation_1h_input_tokens 11"));
    s.cache_creation_1h_input_tokens = 10;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0, NULL), SL_OK); /* still live */
    harness_end(e);
}

static void test_a_need_that_can_never_fit_is_exceeds_capacity(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 8000, 100);
    harness_snapshot_t before = harness_snapshot(e);
    sl_request_t r = harness_req("huge", 100001, 10);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_ECAPACITY);
    assert_non_null(strstr(sl_engine_errmsg(e), "input_tokens 100001"));
    /* The cold-cache prefix counts. */
    r = harness_req("huge", 60000, 10);
    r.cached_tokens = 40001;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_ECAPACITY);
    assert_string_equal(before.text, harness_snapshot(e).text);
    /* Exactly at the limit fits (from the full bucket: oversize.scn). */
    harness_grant(e, "ok", 100000, 6800, T0);
    sl_engine_free(e);
}

/* The provider holds max_tokens from the start of a call (Anthropic's OTPM estimate,
 * OpenAI's TPM): one above a bucket's limit can never be accepted upstream, so it is
 * refused here, naming the dimension, the figure and the limit, and nothing changes. */
static void test_max_tokens_above_the_output_capacity_is_exceeds_capacity(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 60000, 100); /* output capacity 51000 */
    harness_snapshot_t before = harness_snapshot(e);
    sl_request_t r = harness_req("big", 1000, 128000);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_ECAPACITY);
    assert_non_null(strstr(sl_engine_errmsg(e), "output_tokens 128000"));
    assert_non_null(strstr(sl_engine_errmsg(e), "its limit is 60000"));
    assert_string_equal(before.text, harness_snapshot(e).text);
    /* At the capacity it is granted, and a longer answer is charged as debt. */
    r = harness_req("big", 1000, 51000);
    d = harness_request_as(e, &r, T0, SL_GRANTED);
    assert_int_equal(d.charged_output_tokens, 51000);
    sl_settle_t s = harness_settle(1000, 53000);
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 1, &res), SL_OK);
    assert_int_equal(res.adjust_output_tokens, -2000);
    assert_true(harness_level(e, SL_BUCKET_OUTPUT) < 0);
    harness_end(e);
    /* A combined bucket: input + max_tokens above its limit. */
    sl_pool_config_t cfg = harness_config();
    cfg.tokens_tpm = 100000; /* capacity 85000 */
    e = harness_engine_config(&cfg);
    r = harness_req("big", 5000, 95001);
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_ECAPACITY);
    assert_non_null(strstr(sl_engine_errmsg(e), "tokens 100001"));
    r = harness_req("big", 5000, 80000);
    d = harness_request_as(e, &r, T0, SL_GRANTED);
    harness_end(e);
}

static void test_a_need_above_todays_margin_is_rejected_until_it_recovers(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 0, 0);
    harness_grant_429(e, "a", 10, 0, T0); /* margin 0.80 */
    sl_request_t r = harness_req("b", 82000, 0);
    sl_decision_t d = harness_request_as(e, &r, T0 + 1, SL_REJECTED);
    /* It needs 0.82: two recovery steps of 180 s from T0. */
    assert_true(d.retry_at >= T0 + 360 - 1e-6);
    assert_true(d.retry_at < T0 + 360 + 60);
    harness_end(e);
}

static void test_cancel_returns_the_whole_reservation(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 10);
    double in0 = harness_level(e, SL_BUCKET_INPUT), rq0 = harness_level(e, SL_BUCKET_REQUESTS);
    uint64_t l = harness_grant(e, "a", 5000, 1000, T0);
    assert_int_equal(sl_engine_cancel(e, l, T0), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - in0) < 1e-6);
    assert_true(fabs(harness_level(e, SL_BUCKET_REQUESTS) - rq0) < 1e-6);
    assert_int_equal(sl_engine_cancel(e, l, T0), SL_EALREADY);
    sl_settle_t s = harness_settle(1, 1);
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_EALREADY);
    harness_end(e);
}

static void test_settle_twice_is_already_settled_and_changes_nothing(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 10);
    uint64_t l = harness_grant(e, "a", 5000, 1000, T0);
    sl_settle_t s = harness_settle(4000, 500);
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(e, l, &s, T0, &res), SL_OK);
    assert_int_equal(res.adjust_input_tokens, 1000);
    assert_int_equal(res.adjust_output_tokens, 500);
    assert_true(fabs(res.estimate_error - 0.25) < 1e-12);
    harness_snapshot_t before = harness_snapshot(e);
    assert_int_equal(sl_engine_settle(e, l, &s, T0, &res), SL_EALREADY);
    assert_string_equal(before.text, harness_snapshot(e).text);
    sl_engine_free(e);
}

static void test_extend_moves_expiry_and_is_capped(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 10);
    uint64_t l = harness_grant(e, "a", 5000, 1000, T0);
    double exp;
    assert_int_equal(sl_engine_extend(e, l, 300, T0 + 100, &exp), SL_OK);
    assert_true(fabs(exp - (T0 + 400)) < 1e-9);
    assert_int_equal(sl_engine_extend(e, l, 5000, T0 + 200, &exp), SL_OK);
    assert_true(fabs(exp - (T0 + 800)) < 1e-9); /* max_lease_ttl 600 */
    assert_int_equal(sl_engine_advance(e, T0 + 799), SL_OK);
    sl_settle_t s = harness_settle(5000, 1000);
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 799, NULL), SL_OK);
    assert_int_equal(sl_engine_extend(e, l, 10, T0 + 800, &exp), SL_EALREADY);
    assert_int_equal(sl_engine_extend(e, 999999, 10, T0 + 800, &exp), SL_ENOTFOUND);
    assert_int_equal(sl_engine_extend(e, l, -1, T0 + 800, &exp), SL_EINVAL);
    sl_engine_free(e);
}

static void test_same_request_id_returns_the_first_answer_and_charges_once(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 20000, 100);
    sl_request_t r = harness_req("a", 5000, 1000);
    r.request_id = "turn-7";
    sl_decision_t d1, d2;
    assert_int_equal(sl_engine_request(e, &r, T0, &d1), SL_OK);
    double level = harness_level(e, SL_BUCKET_INPUT);
    d2 = harness_request_as(e, &r, T0, SL_GRANTED);
    assert_int_equal(d2.lease, d1.lease);
    assert_true(d2.replayed);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - level) < 1e-9);
    /* Another agent with the same id is a different request. */
    r.agent = "b";
    assert_int_equal(sl_engine_request(e, &r, T0, &d2), SL_OK);
    assert_true(d2.lease != d1.lease);
    harness_end(e);
}

/* A pool of 60,000 input a minute (capacity 51,000, 850/s) that "a" has emptied, and
 * "b" asking for 8,500 at T0: queued, granted 10 s later; its answer in *d. */
static sl_engine_t *b_queued_behind_a(sl_decision_t *d)
{
    sl_engine_t *e = engine_with_defaults(60000);
    harness_grant(e, "a", 51000, 0, T0);
    sl_request_t r = harness_req("b", 8500, 0);
    assert_int_equal(sl_engine_request(e, &r, T0, d), SL_OK);
    return e;
}

static void test_a_queued_grant_nobody_fetches_is_refunded(void **state)
{
    (void)state;
    sl_decision_t d;
    sl_engine_t *e = b_queued_behind_a(&d);
    assert_int_equal(d.status, SL_QUEUED);
    assert_int_equal(sl_engine_advance(e, T0 + 10.001), SL_OK); /* granted, unclaimed */
    sl_pool_info_t info;
    sl_engine_pool_info(e, "default", &info);
    assert_int_equal(info.leases_in_flight, 2);
    double level = info.level[SL_BUCKET_INPUT];
    assert_int_equal(sl_engine_advance(e, T0 + 10.001 + 30), SL_OK); /* claim_timeout 30 s */
    sl_engine_pool_info(e, "default", &info);
    assert_int_equal(info.leases_in_flight, 1);
    assert_true(fabs(info.level[SL_BUCKET_INPUT] - (level + 8500 + 850 * 30)) < 1e-3);
    assert_int_equal(sl_engine_ticket(e, d.ticket, T0 + 41, &d), SL_EALREADY);
    harness_end(e);
}

static void test_polling_a_granted_ticket_claims_the_lease(void **state)
{
    (void)state;
    sl_decision_t d;
    sl_engine_t *e = b_queued_behind_a(&d);
    uint64_t ticket = d.ticket;
    d = harness_ticket_as(e, ticket, T0 + 5, SL_QUEUED);
    assert_true(fabs(d.eta_s - 5) < 1e-6);
    assert_int_equal(sl_engine_advance(e, T0 + 10.001), SL_OK); /* granted, not fetched */
    d = harness_ticket_as(e, ticket, T0 + 20, SL_GRANTED);
    assert_true(fabs(d.waited_s - 10) < 1e-3);
    assert_true(fabs(d.expires_at - (T0 + 20 + 120)) < 1e-6);
    assert_int_equal(sl_engine_advance(e, T0 + 100), SL_OK);
    sl_settle_t s = harness_settle(8500, 0);
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 100, NULL), SL_OK);
    harness_end(e);
}

static void test_an_idle_ticket_expires_and_a_held_one_does_not(void **state)
{
    (void)state;
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = 60000;
    cfg.max_queue_wait_s = 1000;
    sl_engine_t *e = harness_engine_config(&cfg);
    uint64_t l = harness_grant(e, "a", 51000, 0, T0);
    sl_settle_t s = harness_settle(300000, 0); /* deep debt: nothing is granted for minutes */
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_OK);
    sl_request_t r = harness_req("b", 51000, 0);
    sl_decision_t idle, held;
    assert_int_equal(sl_engine_request(e, &r, T0, &idle), SL_OK);
    r.agent = "c";
    assert_int_equal(sl_engine_request(e, &r, T0, &held), SL_OK);
    assert_int_equal(sl_engine_ticket_hold(e, held.ticket, true, T0), SL_OK);
    assert_int_equal(sl_engine_advance(e, T0 + 121), SL_OK);
    sl_decision_t d;
    assert_int_equal(sl_engine_ticket(e, idle.ticket, T0 + 121, &d), SL_EALREADY);
    d = harness_ticket_as(e, held.ticket, T0 + 121, SL_QUEUED);
    assert_int_equal(d.position, 1);
    harness_end(e);
}

static void test_cancelling_a_granted_ticket_refunds_the_lease(void **state)
{
    (void)state;
    sl_decision_t d;
    sl_engine_t *e = b_queued_behind_a(&d);
    assert_int_equal(sl_engine_advance(e, T0 + 10.5), SL_OK);
    double level = harness_level(e, SL_BUCKET_INPUT);
    assert_int_equal(sl_engine_ticket_cancel(e, d.ticket, T0 + 10.5), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - (level + 8500)) < 1e-6);
    assert_int_equal(sl_engine_ticket_cancel(e, d.ticket, T0 + 10.5), SL_EALREADY);
    assert_int_equal(sl_engine_ticket_cancel(e, 424242, T0 + 10.5), SL_ENOTFOUND);
    harness_end(e);
}

static void test_margin_cut_rejects_queued_requests_that_no_longer_fit(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 0, 0);
    uint64_t l = harness_grant(e, "a", 84000, 0, T0);
    sl_request_t r = harness_req("b", 84000, 0);
    sl_decision_t d = harness_request_as(e, &r, T0, SL_QUEUED);
    sl_settle_t s = harness_settle(84000, 0);
    s.got_429 = true;
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 1, NULL), SL_OK);
    assert_int_equal(sl_engine_ticket(e, d.ticket, T0 + 1, &d), SL_EALREADY);
    assert_non_null(strstr(sl_engine_errmsg(e), "rejected"));
    harness_end(e);
}

typedef struct est_alerts {
    int raised, cleared;
} est_alerts_t;

static void on_estimate_alert(const sl_event_t *ev, void *ud)
{
    est_alerts_t *a = ud;
    if (ev->kind != SL_EV_ALERT || strcmp(ev->alert, "estimate_error") != 0) return;
    if (ev->active)
        a->raised++;
    else
        a->cleared++;
}

static void test_estimate_error_above_20_percent_over_20_leases_alerts(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 100000);
    est_alerts_t a = {0, 0};
    sl_engine_set_event_cb(e, on_estimate_alert, &a);
    double t = T0;
    /* 19 leases off by a half: no alert until the window of 20 is full. */
    for (int i = 0; i < 20; i++) {
        uint64_t l = harness_grant(e, "sloppy", 1000, 10, t);
        sl_settle_t s = harness_settle(2000, 10);
        assert_int_equal(sl_engine_settle(e, l, &s, t += 1, NULL), SL_OK);
        assert_int_equal(a.raised, i == 19 ? 1 : 0);
    }
    sl_agent_info_t info;
    assert_int_equal(sl_engine_agent_info(e, "sloppy", &info), SL_OK);
    assert_true(info.alert_estimate_error);
    assert_true(fabs(info.estimate_error - 0.5) < 1e-9);
    /* Good estimates bring the mean back under 0.20: the alert clears. */
    for (int i = 0; i < 20 && a.cleared == 0; i++) {
        uint64_t l = harness_grant(e, "sloppy", 1000, 10, t);
        sl_settle_t s = harness_settle(1000, 10);
        assert_int_equal(sl_engine_settle(e, l, &s, t += 1, NULL), SL_OK);
    }
    assert_int_equal(a.cleared, 1);
    assert_int_equal(sl_engine_agent_info(e, "sloppy", &info), SL_OK);
    assert_false(info.alert_estimate_error);
    assert_true(info.estimate_error <= 0.20);
    sl_engine_free(e);
}

static void test_a_request_with_a_longer_max_wait_is_queued_and_names_what_binds(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 1200, 10000); /* output capacity 1020 */
    harness_grant(e, "a", 10, 1000, T0);
    sl_request_t r = harness_req("b", 10, 1000);
    r.max_wait_s = 30; /* shorter than the ETA (about 57 s): rejected */
    sl_decision_t d = harness_request_as(e, &r, T0, SL_REJECTED);
    assert_string_equal(d.limited_by, "output_tokens");
    r.max_wait_s = 540; /* the proxy's hold */
    d = harness_request_as(e, &r, T0, SL_QUEUED);
    assert_string_equal(d.limited_by, "output_tokens");
    assert_true(d.eta_s > 50 && d.eta_s < 60);
    r.max_wait_s = -1;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "max_wait"));
    harness_end(e);
}

static sl_decision_t request_prefix(sl_engine_t *e, const char *model, const char *hash, double now)
{
    sl_request_t r = harness_req("cc", 10, 100);
    r.cached_tokens = 5000;
    r.model = model;
    r.cache_prefix_hash = hash;
    sl_decision_t d = harness_request_as(e, &r, now, SL_GRANTED);
    return d;
}

static void test_the_cache_is_one_per_model_and_prefix(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000000, 10000000, 100000);
    double t = T0;
    sl_decision_t d = request_prefix(e, "sonnet", "p1", t);
    assert_true(d.cache_penalty);
    sl_settle_t s = harness_settle(10, 100);
    s.cache_creation_input_tokens = 5000;
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, t += 1, &res), SL_OK);
    /* A correctly predicted cache write is no estimate error. */
    assert_true(res.estimate_error < 1e-9);
    d = request_prefix(e, "sonnet", "p1", t);
    assert_false(d.cache_penalty);
    s.cache_creation_input_tokens = 0;
    s.cache_read_input_tokens = 5000;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, t += 1, &res), SL_OK);
    assert_true(res.estimate_error < 1e-9);
    assert_true(request_prefix(e, "haiku", "p1", t).cache_penalty);  /* another model */
    assert_true(request_prefix(e, "sonnet", "p2", t).cache_penalty); /* another prefix */
    /* Charged cold but served from the cache: a cache-state miss, not an estimator one. */
    d = request_prefix(e, "sonnet", "p3", t);
    assert_int_equal(sl_engine_settle(e, d.lease, &s, t += 1, &res), SL_OK);
    assert_true(res.estimate_error < 1e-9);
    sl_request_t r = harness_req("cc", 10, 100);
    r.cache_prefix_hash = "";
    assert_int_equal(sl_engine_request(e, &r, t, &d), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "cache_prefix_hash"));
    harness_end(e);
}

static void test_cold_prefix_caches_are_swept_but_never_one_in_use(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000000, 100000000, 10000000);
    double t = T0;
    sl_request_t r = harness_req("cc", 10, 100);
    r.cached_tokens = 5000;
    r.model = "m";
    r.cache_prefix_hash = "held";
    r.ttl_s = 600;
    sl_decision_t held; /* in flight from 250 s on: its cache must survive every sweep */
    char hash[32];
    for (int i = 0; i < 5000; i++) {
        /* Granted 250 s before its settle, so it is still warm then: a cache's life counts
         * from its call's start. The first caches go cold at 300 s, so it is in flight
         * through every sweep. */
        if (i == 2500) assert_int_equal(sl_engine_request(e, &r, t, &held), SL_OK);
        snprintf(hash, sizeof hash, "p%d", i);
        sl_decision_t d = request_prefix(e, "m", hash, t);
        sl_settle_t s = harness_settle(10, 100);
        assert_int_equal(sl_engine_settle(e, d.lease, &s, t, NULL), SL_OK);
        t += 0.1; /* each goes cold 300 s later and may then be swept (the first 1,000) */
    }
    harness_check(e);
    sl_settle_t s = harness_settle(10, 100);
    s.cache_creation_input_tokens = 5000;
    assert_int_equal(sl_engine_settle(e, held.lease, &s, t, NULL), SL_OK);
    assert_false(request_prefix(e, "m", "held", t).cache_penalty);
    assert_false(request_prefix(e, "m", "p4999", t).cache_penalty); /* still warm */
    assert_true(request_prefix(e, "m", "p0", t).cache_penalty);     /* cold (swept or not) */
    harness_end(e);
}

static void test_concurrency_bound_requests_queue_with_an_eta_from_lease_durations(void **state)
{
    (void)state;
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = 10000000;
    cfg.concurrency = 2;
    cfg.claim_timeout_s = 1e6;
    cfg.lease_duration_prior_s = 0; /* no prior (concurrency_prior.scn has the default's) */
    sl_engine_t *e = harness_engine_config(&cfg);
    double t = T0;
    /* Before any settle, with no prior, only the earliest expiry is known: 120 s, rejected. */
    uint64_t a = harness_grant(e, "a", 10, 0, t), b = harness_grant(e, "b", 10, 0, t);
    sl_request_t r = harness_req("c", 10, 0);
    sl_decision_t d = harness_request_as(e, &r, t, SL_REJECTED);
    assert_string_equal(d.limited_by, "concurrency");
    sl_settle_t s = harness_settle(10, 0);
    assert_int_equal(sl_engine_settle(e, a, &s, t += 10, NULL), SL_OK); /* lasted 10 s */
    assert_int_equal(sl_engine_settle(e, b, &s, t, NULL), SL_OK);       /* lasted 10 s */
    a = harness_grant(e, "a", 10, 0, t);
    b = harness_grant(e, "b", 10, 0, t);
    /* Two more wait for one release each: 1 x 10 / 2 and 2 x 10 / 2 seconds. */
    sl_decision_t q1, q2;
    r = harness_req("c", 10, 0);
    assert_int_equal(sl_engine_request(e, &r, t, &q1), SL_OK);
    r = harness_req("d", 10, 0);
    assert_int_equal(sl_engine_request(e, &r, t, &q2), SL_OK);
    assert_int_equal(q1.status, SL_QUEUED);
    assert_int_equal(q2.status, SL_QUEUED);
    assert_string_equal(q1.limited_by, "concurrency");
    assert_true(fabs(q1.eta_s - 5) < 1e-9);
    assert_true(fabs(q2.eta_s - 10) < 1e-9);
    harness_check(e);
    /* Each release grants the next. */
    assert_int_equal(sl_engine_settle(e, a, &s, t += 4, NULL), SL_OK);
    d = harness_ticket_as(e, q1.ticket, t, SL_GRANTED);
    d = harness_ticket_as(e, q2.ticket, t, SL_QUEUED);
    assert_int_equal(sl_engine_settle(e, b, &s, t += 4, NULL), SL_OK);
    d = harness_ticket_as(e, q2.ticket, t, SL_GRANTED);
    harness_end(e);
}

static void test_agent_info_shows_the_current_weight_after_repeats(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(10000000, 1000000, 10000);
    double t = T0;
    for (int i = 0; i < 4; i++) {
        uint64_t l = harness_grant(e, "looper", 10, 10, t);
        sl_settle_t s = harness_settle(10, 10);
        s.failure_signature = "test_foo:abc123";
        assert_int_equal(sl_engine_settle(e, l, &s, t += 1, NULL), SL_OK);
    }
    sl_agent_info_t info;
    assert_int_equal(sl_engine_agent_info(e, "looper", &info), SL_OK);
    assert_int_equal(info.repeats, 3);
    assert_true(fabs(info.weight - 0.125) < 1e-12); /* its last request had 0.25 */
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_expired_lease_is_not_refunded),
    cmocka_unit_test(test_estimate_error_above_20_percent_over_20_leases_alerts),
    cmocka_unit_test(test_reap_does_not_refund_even_when_the_bucket_has_room),
    cmocka_unit_test(test_cold_cache_charges_the_cached_prefix_and_warm_does_not),
    cmocka_unit_test(test_cache_reads_count_when_the_pool_says_so),
    cmocka_unit_test(test_warm_cache_about_to_lapse_gets_the_bump),
    cmocka_unit_test(test_a_need_that_can_never_fit_is_exceeds_capacity),
    cmocka_unit_test(test_max_tokens_above_the_output_capacity_is_exceeds_capacity),
    cmocka_unit_test(test_a_need_above_todays_margin_is_rejected_until_it_recovers),
    cmocka_unit_test(test_cancel_returns_the_whole_reservation),
    cmocka_unit_test(test_settle_twice_is_already_settled_and_changes_nothing),
    cmocka_unit_test(test_extend_moves_expiry_and_is_capped),
    cmocka_unit_test(test_same_request_id_returns_the_first_answer_and_charges_once),
    cmocka_unit_test(test_a_queued_grant_nobody_fetches_is_refunded),
    cmocka_unit_test(test_polling_a_granted_ticket_claims_the_lease),
    cmocka_unit_test(test_an_idle_ticket_expires_and_a_held_one_does_not),
    cmocka_unit_test(test_cancelling_a_granted_ticket_refunds_the_lease),
    cmocka_unit_test(test_margin_cut_rejects_queued_requests_that_no_longer_fit),
    cmocka_unit_test(test_a_request_with_a_longer_max_wait_is_queued_and_names_what_binds),
    cmocka_unit_test(test_the_cache_is_one_per_model_and_prefix),
    cmocka_unit_test(test_a_1h_cache_gets_the_bump_before_its_hour_ends_not_at_5_minutes),
    cmocka_unit_test(test_bad_cache_lifetimes_and_1h_writes_are_refused_unchanged),
    cmocka_unit_test(test_agent_info_shows_the_current_weight_after_repeats),
    cmocka_unit_test(test_concurrency_bound_requests_queue_with_an_eta_from_lease_durations),
    cmocka_unit_test(test_cold_prefix_caches_are_swept_but_never_one_in_use))
