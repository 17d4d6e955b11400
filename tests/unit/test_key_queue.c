/* test_key_queue.c - one queue over the keys of a pool of several keys: a ticket queued on one key is granted by whichever key of its group can hold it first (src/engine/keyqueue.c). */
#include "engine_harness.h"

/* Two keys "p:a" and "p:b" of one concurrency each; `group` their key_group (0: two
 * unrelated pools, the behaviour before one queue). */
static sl_engine_t *two_keys(int64_t group)
{
    sl_engine_t *e = sl_engine_new(NULL);
    assert_non_null(e);
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.output_tpm = 60000;
    cfg.concurrency = 1;
    cfg.key_group = group;
    assert_int_equal(sl_engine_configure_pool(e, "p:a", &cfg, T0), SL_OK);
    assert_int_equal(sl_engine_configure_pool(e, "p:b", &cfg, T0), SL_OK);
    return e;
}

static sl_decision_t ask(sl_engine_t *e, const char *pool, const char *agent, double now)
{
    sl_request_t r = harness_req(agent, 100, 1000);
    r.pool = pool;
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, now, &d), SL_OK);
    harness_check(e);
    return d;
}

static const char *pool_of(sl_engine_t *e, uint64_t lease)
{
    static sl_lease_state_t st;
    assert_int_equal(sl_engine_lease_state(e, lease, &st), SL_OK);
    return st.pool;
}

/* Key a full, its ticket queued; key b frees first: b grants the ticket, and the lease is
 * b's (its settle refunds b). Without a group the ticket waits for a. */
static void test_a_ticket_queued_on_a_is_granted_on_b_when_b_frees_first(void **state)
{
    (void)state;
    for (int64_t group = 0; group <= 1; group++) {
        sl_engine_t *e = two_keys(group);
        sl_decision_t la = ask(e, "p:a", "x", T0), lb = ask(e, "p:b", "y", T0);
        assert_int_equal(la.status, SL_GRANTED);
        assert_int_equal(lb.status, SL_GRANTED);
        sl_decision_t q = ask(e, "p:a", "z", T0 + 1);
        assert_int_equal(q.status, SL_QUEUED);
        sl_settle_t s = harness_settle(100, 10);
        assert_int_equal(sl_engine_settle(e, lb.lease, &s, T0 + 2, NULL), SL_OK);
        harness_check(e);
        sl_decision_t d;
        assert_int_equal(sl_engine_ticket(e, q.ticket, T0 + 2, &d), SL_OK);
        if (group == 0) {
            assert_int_equal(d.status, SL_QUEUED);
            sl_engine_free(e);
            continue;
        }
        assert_int_equal(d.status, SL_GRANTED);
        assert_int_equal(d.ticket, q.ticket);
        assert_string_equal(pool_of(e, d.lease), "p:b");
        assert_true(fabs(d.waited_s - 1) < 1e-9);
        sl_pool_info_t a, b;
        assert_int_equal(sl_engine_pool_info(e, "p:a", &a), SL_OK);
        assert_int_equal(sl_engine_pool_info(e, "p:b", &b), SL_OK);
        assert_int_equal(a.queue_depth, 0);
        assert_int_equal(a.leases_in_flight, 1);
        assert_int_equal(b.leases_in_flight, 1);
        /* Settling it lands on b: b's concurrency frees, a's lease is untouched. */
        assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 3, NULL), SL_OK);
        assert_int_equal(sl_engine_pool_info(e, "p:b", &b), SL_OK);
        assert_int_equal(sl_engine_pool_info(e, "p:a", &a), SL_OK);
        assert_int_equal(b.leases_in_flight, 0);
        assert_int_equal(a.leases_in_flight, 1);
        harness_end(e);
    }
}

/* A key with a queue of its own serves it first: it takes no sibling's ticket then. */
static void test_a_key_serves_its_own_queue_first(void **state)
{
    (void)state;
    sl_engine_t *e = two_keys(1);
    sl_decision_t la = ask(e, "p:a", "x", T0), lb = ask(e, "p:b", "y", T0);
    sl_decision_t qa = ask(e, "p:a", "z", T0 + 1), qb = ask(e, "p:b", "w", T0 + 2);
    assert_int_equal(qa.status, SL_QUEUED);
    assert_int_equal(qb.status, SL_QUEUED);
    sl_settle_t s = harness_settle(100, 10);
    assert_int_equal(sl_engine_settle(e, lb.lease, &s, T0 + 3, NULL), SL_OK);
    sl_decision_t d = harness_ticket_as(e, qb.ticket, T0 + 3, SL_GRANTED);
    assert_string_equal(pool_of(e, d.lease), "p:b");
    d = harness_ticket_as(e, qa.ticket, T0 + 3, SL_QUEUED);
    (void)la;
    harness_end(e);
}

/* Key b frees by refill rather than by a settle: the engine's next wake-up is when the
 * ticket fits b, and the advance then grants it on b. */
static void test_a_refill_of_the_other_key_wakes_the_ticket(void **state)
{
    (void)state;
    sl_engine_t *e = sl_engine_new(NULL);
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.output_tpm = 1000; /* capacity 850 */
    cfg.key_group = 7;
    assert_int_equal(sl_engine_configure_pool(e, "p:a", &cfg, T0), SL_OK);
    cfg.output_tpm = 10000;
    assert_int_equal(sl_engine_configure_pool(e, "p:b", &cfg, T0), SL_OK);
    sl_request_t r = harness_req("x", 0, 800);
    r.pool = "p:a";
    sl_decision_t d = harness_request_as(e, &r, T0, SL_GRANTED);
    r.pool = "p:b";
    r.output_tokens = 8000;
    d = harness_request_as(e, &r, T0, SL_GRANTED);
    /* Refilling at capacity / 60 s: a (50 left of 850) has room for 800 in 53 s, b (500
     * left of 8,500) in 300 / 141.7 = 2.12 s. */
    r.pool = "p:a";
    r.agent = "z";
    r.output_tokens = 800;
    d = harness_request_as(e, &r, T0, SL_QUEUED);
    double at = sl_engine_next_wakeup(e);
    assert_true(at > T0 + 2.1 && at < T0 + 2.2);
    sl_decision_t g = harness_ticket_as(e, d.ticket, at, SL_GRANTED);
    assert_string_equal(pool_of(e, g.lease), "p:b");
    harness_end(e);
}

/* A ticket warm on key a costs its cached prefix on key b (cold there): the wake-up for b
 * to take it is when b fits that, not its need on a (a wake-up that take() refuses would
 * come back every microsecond). */
static void test_the_wakeup_for_another_key_counts_the_cold_prefix(void **state)
{
    (void)state;
    sl_engine_t *e = sl_engine_new(NULL);
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 60000; /* capacity 51,000, 850 a second */
    cfg.key_group = 3;
    cfg.concurrency = 1;
    assert_int_equal(sl_engine_configure_pool(e, "p:a", &cfg, T0), SL_OK);
    cfg.concurrency = 0;
    assert_int_equal(sl_engine_configure_pool(e, "p:b", &cfg, T0), SL_OK);
    /* z's prefix of 8,000 is written on a: warm there from T0. */
    sl_request_t r = harness_req("z", 2000, 0);
    r.cached_tokens = 8000;
    r.pool = "p:a";
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    assert_int_equal(d.status, SL_GRANTED);
    sl_settle_t s = harness_settle(2000, 0);
    s.cache_creation_input_tokens = 8000;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 1, NULL), SL_OK);
    /* At T0 + 100: a holds x's lease (its concurrency), b is empty. */
    sl_request_t x = harness_req("x", 100, 0), y = harness_req("y", 51000, 0);
    x.pool = "p:a";
    y.pool = "p:b";
    assert_int_equal(sl_engine_request(e, &x, T0 + 100, &d), SL_OK);
    assert_int_equal(d.status, SL_GRANTED);
    assert_int_equal(sl_engine_request(e, &y, T0 + 100, &d), SL_OK);
    assert_int_equal(d.status, SL_GRANTED);
    /* Warm on a, z needs 2,000 there (b would fit that in 2.35 s); cold on b it needs
     * 10,000: 11.76 s. */
    assert_int_equal(sl_engine_request(e, &r, T0 + 100, &d), SL_OK);
    assert_int_equal(d.status, SL_QUEUED);
    double at = sl_engine_next_wakeup(e);
    assert_true(at > T0 + 100 + 11.76 && at < T0 + 100 + 11.77);
    assert_int_equal(sl_engine_advance(e, at), SL_OK);
    sl_decision_t g;
    assert_int_equal(sl_engine_ticket(e, d.ticket, at, &g), SL_OK);
    assert_int_equal(g.status, SL_GRANTED);
    assert_string_equal(pool_of(e, g.lease), "p:b");
    assert_true(g.cache_penalty);
    harness_end(e);
}

/* A request that named its key alone (an operator's POOL:KEY) waits for that key. */
static void test_a_pinned_ticket_waits_for_its_own_key(void **state)
{
    (void)state;
    sl_engine_t *e = two_keys(1);
    sl_decision_t la = ask(e, "p:a", "x", T0), lb = ask(e, "p:b", "y", T0);
    sl_request_t r = harness_req("z", 100, 1000);
    r.pool = "p:a";
    r.key_pinned = true;
    sl_decision_t q = harness_request_as(e, &r, T0 + 1, SL_QUEUED);
    sl_settle_t s = harness_settle(100, 10);
    assert_int_equal(sl_engine_settle(e, lb.lease, &s, T0 + 2, NULL), SL_OK);
    sl_decision_t d = harness_ticket_as(e, q.ticket, T0 + 2, SL_QUEUED);
    assert_int_equal(sl_engine_settle(e, la.lease, &s, T0 + 3, NULL), SL_OK);
    d = harness_ticket_as(e, q.ticket, T0 + 3, SL_GRANTED);
    assert_string_equal(pool_of(e, d.lease), "p:a");
    harness_end(e);
}

/* The lease a key took from a sibling's queue is that key's in the state a restart keeps:
 * restored into a new engine, it is still b's, and its settle frees b. */
static void test_a_restart_keeps_the_key_that_granted_the_ticket(void **state)
{
    (void)state;
    sl_engine_t *e = two_keys(1);
    sl_decision_t la = ask(e, "p:a", "x", T0), lb = ask(e, "p:b", "y", T0);
    sl_decision_t q = ask(e, "p:a", "z", T0 + 1);
    sl_settle_t s = harness_settle(100, 10);
    assert_int_equal(sl_engine_settle(e, lb.lease, &s, T0 + 2, NULL), SL_OK);
    sl_decision_t d = harness_ticket_as(e, q.ticket, T0 + 2, SL_GRANTED);

    sl_engine_t *r = two_keys(1);
    assert_int_equal(sl_engine_set_id_base(r, sl_engine_next_id(e)), SL_OK);
    const char *pools[2] = {"p:a", "p:b"};
    for (int i = 0; i < 2; i++) {
        sl_pool_state_t ps;
        assert_int_equal(sl_engine_pool_state(e, pools[i], &ps), SL_OK);
        assert_int_equal(sl_engine_pool_restore(r, pools[i], &ps, T0 + 3), SL_OK);
    }
    uint64_t ids[2] = {la.lease, d.lease};
    for (int i = 0; i < 2; i++) {
        sl_lease_state_t ls;
        assert_int_equal(sl_engine_lease_state(e, ids[i], &ls), SL_OK);
        assert_int_equal(sl_engine_lease_restore(r, &ls, T0 + 3), SL_OK);
    }
    assert_string_equal(pool_of(r, d.lease), "p:b");
    assert_string_equal(pool_of(r, la.lease), "p:a");
    assert_int_equal(sl_engine_settle(r, d.lease, &s, T0 + 4, NULL), SL_OK);
    sl_pool_info_t b;
    assert_int_equal(sl_engine_pool_info(r, "p:b", &b), SL_OK);
    assert_int_equal(b.leases_in_flight, 0);
    harness_end(r);
    sl_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_ticket_queued_on_a_is_granted_on_b_when_b_frees_first),
        cmocka_unit_test(test_a_key_serves_its_own_queue_first),
        cmocka_unit_test(test_a_refill_of_the_other_key_wakes_the_ticket),
        cmocka_unit_test(test_a_restart_keeps_the_key_that_granted_the_ticket),
        cmocka_unit_test(test_a_pinned_ticket_waits_for_its_own_key),
        cmocka_unit_test(test_the_wakeup_for_another_key_counts_the_cold_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
