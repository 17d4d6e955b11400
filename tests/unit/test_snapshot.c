/* test_snapshot.c - restarts: the id base, cold starts (empty buckets, headers that may
 * raise once in the window) and the export and restore of pools, leases and
 * calibrations into a fresh engine. */
#include "engine_harness.h"
#include "test_main.h"

/* An engine like harness_engine() whose pool is cold-started at T0. */
static sl_engine_t *cold_engine(int64_t input_tpm)
{
    sl_engine_t *e = harness_engine(input_tpm, 0, 0);
    assert_int_equal(sl_engine_pool_cold_start(e, "default", 60, T0), SL_OK);
    harness_check(e);
    return e;
}

static void test_id_base_moves_new_ids_above_it(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(600000, 0, 0);
    uint64_t first = harness_grant(e, "a", 10, 0, T0);
    assert_int_equal(first, 1);
    uint64_t base = (uint64_t)1796000000000 * 1000;
    assert_int_equal(sl_engine_set_id_base(e, base), SL_OK);
    assert_int_equal(sl_engine_next_id(e), base + 1);
    uint64_t l = harness_grant(e, "a", 10, 0, T0);
    assert_int_equal(l, base + 1);
    /* The ring of ended states works above the base: a second settle is 409, not 404. */
    sl_settle_t s = harness_settle(10, 0);
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 1, NULL), SL_OK);
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 1, NULL), SL_EALREADY);
    /* The lease issued below the base still settles, and is then remembered. */
    assert_int_equal(sl_engine_settle(e, first, &s, T0 + 1, NULL), SL_OK);
    assert_int_equal(sl_engine_settle(e, first, &s, T0 + 1, NULL), SL_EALREADY);
    /* An id between them was never issued. */
    assert_int_equal(sl_engine_settle(e, base, &s, T0 + 1, NULL), SL_ENOTFOUND);
    harness_end(e);
}

static void test_id_base_below_the_next_id_is_refused(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(600000, 0, 0);
    assert_int_equal(sl_engine_set_id_base(e, 1000), SL_OK);
    harness_grant(e, "a", 10, 0, T0);
    harness_grant(e, "a", 10, 0, T0);
    assert_int_equal(sl_engine_set_id_base(e, 1000), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "1000"));
    assert_int_equal(sl_engine_next_id(e), 1003);
    assert_int_equal(sl_engine_set_id_base(e, SL_ID_BASE_MAX + 1), SL_EINVAL);
    assert_int_equal(sl_engine_set_id_base(e, 1002), SL_OK); /* exactly the next: allowed */
    assert_int_equal(sl_engine_next_id(e), 1003);
    sl_engine_free(e);
}

static void test_many_ids_above_a_large_base_keep_the_ring_small_and_right(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(0, 0, 0); /* unlimited: every request is granted */
    assert_int_equal(sl_engine_set_id_base(e, SL_ID_BASE_MAX - ((uint64_t)1 << 30)), SL_OK);
    sl_settle_t s = harness_settle(1, 0);
    static uint64_t ids[200000];
    for (size_t i = 0; i < 200000; i++) {
        ids[i] = harness_grant(e, "a", 1, 0, T0);
        assert_int_equal(sl_engine_settle(e, ids[i], &s, T0, NULL), SL_OK);
    }
    for (size_t i = 0; i < 200000; i += 997)
        assert_int_equal(sl_engine_settle(e, ids[i], &s, T0, NULL), SL_EALREADY);
    harness_end(e);
}

static void test_cold_start_empties_the_buckets_and_they_refill(void **state)
{
    (void)state;
    sl_engine_t *e = cold_engine(600000); /* capacity 510,000, 8,500 per second */
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT)) < 1e-6);
    sl_request_t r = harness_req("a", 500000, 0);
    harness_request_as(e, &r, T0, SL_QUEUED); /* ETA 500,000 / 8,500 = 58.8 s */
    assert_int_equal(sl_engine_advance(e, T0 + 30), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 255000) < 1e-3);
    sl_pool_info_t info;
    assert_int_equal(sl_engine_pool_info(e, "default", &info), SL_OK);
    assert_true(fabs(info.cold_until - (T0 + 60)) < 1e-9);
    harness_end(e);
}

/* Found by fuzz_state_file: a restored level of -inf (an infinite debt that never
 * refills) broke the engine's invariants; now it is refused, and nothing changes. */
static void test_a_restored_level_that_is_not_finite_is_refused(void **state)
{
    (void)state;
    sl_engine_t *e = cold_engine(600000);
    sl_pool_state_t st, before;
    assert_int_equal(sl_engine_pool_state(e, "default", &before), SL_OK);
    st = before;
    for (int sign = -1; sign <= 1; sign += 2) {
        st.level[SL_BUCKET_INPUT] = sign * INFINITY;
        assert_int_equal(sl_engine_pool_restore(e, "default", &st, T0), SL_EINVAL);
        assert_non_null(strstr(sl_engine_errmsg(e), "not finite"));
        assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - before.level[SL_BUCKET_INPUT]) <
                    1e-9);
        harness_check(e);
    }
    sl_engine_free(e);
}

static const char *const IN_REMAINING[] = {"anthropic-ratelimit-input-tokens-remaining"};

static void resync_input(sl_engine_t *e, const char *remaining, double now)
{
    const char *v[] = {remaining};
    assert_int_equal(sl_engine_resync(e, "default", IN_REMAINING, v, 1, now, NULL), SL_OK);
    harness_check(e);
}

static void test_cold_start_first_headers_raise_the_level_once(void **state)
{
    (void)state;
    sl_engine_t *e = cold_engine(600000); /* reserve: 600,000 - 510,000 = 90,000 */
    assert_int_equal(sl_engine_advance(e, T0 + 1), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 8500) < 1e-6);
    /* The provider vouches for 400,000 (rounded to the thousand): 400,000 - 500 - 90,000. */
    resync_input(e, "400000", T0 + 1);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 309500) < 1e-6);
    /* The next headers of the window only lower. */
    resync_input(e, "600000", T0 + 2);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - (309500 + 8500)) < 1e-6);
    resync_input(e, "100000", T0 + 2);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 10500) < 1e-6);
    sl_engine_free(e);
}

static void test_cold_start_raise_never_exceeds_capacity(void **state)
{
    (void)state;
    sl_engine_t *e = cold_engine(600000);
    resync_input(e, "600000", T0 + 1);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 509500) < 1e-6);
    sl_engine_free(e);
}

static void test_headers_after_the_cold_window_only_lower(void **state)
{
    (void)state;
    sl_engine_t *e = cold_engine(600000);
    assert_int_equal(sl_engine_advance(e, T0 + 61), SL_OK);
    double level = harness_level(e, SL_BUCKET_INPUT); /* refilled: 510,000 capped */
    assert_true(level > 500000);
    harness_grant(e, "a", 400000, 0, T0 + 61);
    resync_input(e, "600000", T0 + 61);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - (level - 400000)) < 1e-6);
    sl_engine_free(e);
}

static void test_a_warm_pool_is_never_raised_by_headers(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(600000, 0, 0);
    harness_grant(e, "a", 400000, 0, T0);
    resync_input(e, "600000", T0);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 110000) < 1e-6);
    sl_engine_free(e);
}

static void test_limit_adopted_in_the_cold_window_does_not_fill_the_bucket(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(600000, 0, 0);
    assert_int_equal(sl_engine_pool_cold_start(e, "default", 60, T0), SL_OK);
    const char *n[] = {"anthropic-ratelimit-output-tokens-limit"};
    const char *v[] = {"100000"};
    assert_int_equal(sl_engine_resync(e, "default", n, v, 1, T0, NULL), SL_OK);
    assert_true(fabs(harness_level(e, SL_BUCKET_OUTPUT)) < 1e-6);
    harness_end(e);
}

typedef struct lease_list {
    sl_lease_state_t l[8];
    char agent[8][32];
    size_t n;
} lease_list_t;

static void collect_lease(const sl_lease_state_t *l, void *ud)
{
    lease_list_t *list = ud;
    assert_true(list->n < 8);
    list->l[list->n] = *l;
    snprintf(list->agent[list->n], sizeof list->agent[0], "%s", l->agent);
    list->l[list->n].agent = list->agent[list->n];
    list->l[list->n].cache_key = NULL; /* the agents' own caches in this test */
    list->l[list->n].model = NULL;
    list->n++;
}

/* Exports engine `a` at `at` and restores it into a fresh engine at `now`, as a daemon
 * that was down in between would. */
static sl_engine_t *restart(sl_engine_t *a, double at, double now)
{
    assert_int_equal(sl_engine_advance(a, at), SL_OK);
    sl_pool_state_t ps;
    assert_int_equal(sl_engine_pool_state(a, "default", &ps), SL_OK);
    lease_list_t list = {.n = 0};
    sl_engine_lease_foreach(a, collect_lease, &list);
    uint64_t high = sl_engine_next_id(a);

    sl_engine_t *b = harness_engine(600000, 0, 0);
    assert_int_equal(sl_engine_set_id_base(b, high + 1000), SL_OK);
    assert_int_equal(sl_engine_pool_restore(b, "default", &ps, now), SL_OK);
    for (size_t i = 0; i < list.n; i++) {
        list.l[i].pool = "default";
        assert_int_equal(sl_engine_lease_restore(b, &list.l[i], now), SL_OK);
    }
    harness_check(b);
    return b;
}

static void test_restored_pool_keeps_its_level_and_refills_for_the_downtime(void **state)
{
    (void)state;
    sl_engine_t *a = harness_engine(600000, 0, 0);
    harness_grant(a, "a", 500000, 0, T0);
    sl_engine_t *b = restart(a, T0 + 0.5, T0 + 2);
    /* 510,000 - 500,000 + 2 s x 8,500: what the provider's own bucket holds too. */
    assert_true(fabs(harness_level(b, SL_BUCKET_INPUT) - 27000) < 1e-6);
    sl_request_t r = harness_req("b", 500000, 0);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(b, &r, T0 + 2, &d), SL_OK);
    assert_int_not_equal(d.status, SL_GRANTED);
    sl_engine_free(a);
    sl_engine_free(b);
}

static void test_restored_lease_settles_with_its_refund(void **state)
{
    (void)state;
    sl_engine_t *a = harness_engine(600000, 0, 0);
    uint64_t l = harness_grant(a, "a", 100000, 0, T0);
    sl_engine_t *b = restart(a, T0, T0 + 1);
    double before = harness_level(b, SL_BUCKET_INPUT);
    sl_settle_t s = harness_settle(40000, 0);
    sl_settle_result_t res;
    assert_int_equal(sl_engine_settle(b, l, &s, T0 + 1, &res), SL_OK);
    assert_int_equal(res.adjust_input_tokens, 60000);
    assert_true(fabs(harness_level(b, SL_BUCKET_INPUT) - (before + 60000)) < 1e-6);
    /* A second settle of the restored lease: already settled, not found never. */
    assert_int_equal(sl_engine_settle(b, l, &s, T0 + 1, NULL), SL_EALREADY);
    /* The new run's ids are above every old one. */
    uint64_t fresh = harness_grant(b, "c", 10, 0, T0 + 1);
    assert_true(fresh > l);
    harness_check(b);
    sl_engine_free(a);
    sl_engine_free(b);
}

static void test_restored_lease_is_reaped_without_refund(void **state)
{
    (void)state;
    sl_engine_t *a = harness_engine(600000, 0, 0);
    uint64_t l = harness_grant(a, "a", 100000, 0, T0); /* ttl 120 s */
    sl_engine_t *b = restart(a, T0, T0 + 1);
    assert_int_equal(sl_engine_advance(b, T0 + 121), SL_OK);
    sl_pool_info_t info;
    assert_int_equal(sl_engine_pool_info(b, "default", &info), SL_OK);
    assert_int_equal(info.leases_in_flight, 0);
    sl_settle_t s = harness_settle(1, 0);
    assert_int_equal(sl_engine_settle(b, l, &s, T0 + 122, NULL), SL_EEXPIRED);
    harness_check(b);
    sl_engine_free(a);
    sl_engine_free(b);
}

static void test_lease_expired_while_down_is_reaped_at_once(void **state)
{
    (void)state;
    sl_engine_t *a = harness_engine(600000, 0, 0);
    sl_request_t r = harness_req("a", 100000, 0);
    r.ttl_s = 5;
    sl_decision_t d;
    assert_int_equal(sl_engine_request(a, &r, T0, &d), SL_OK);
    sl_engine_t *b = restart(a, T0, T0 + 1);
    assert_int_equal(sl_engine_advance(b, T0 + 10), SL_OK);
    sl_settle_t s = harness_settle(1, 0);
    assert_int_equal(sl_engine_settle(b, d.lease, &s, T0 + 10, NULL), SL_EEXPIRED);
    sl_engine_free(a);
    sl_engine_free(b);
}

/* A restored lease holds its cache as a granted one does: the sweep of cold caches, which
 * a fresh engine's cold caches invite, never frees the cache of a lease in flight, so its
 * settle warms the cache its agent's next call reads (and writes no freed memory). */
static void test_a_restored_lease_keeps_its_cache_through_a_sweep(void **state)
{
    (void)state;
    sl_engine_t *a = harness_engine(600000, 0, 0);
    sl_request_t r = harness_req("a", 100, 0);
    r.cached_tokens = 10000;
    sl_decision_t d = harness_request_as(a, &r, T0, SL_GRANTED);
    sl_engine_t *b = restart(a, T0, T0 + 1);
    /* 1,100 cold, unreferenced identities: the 1,024th sweeps every cold one. */
    char hash[32];
    for (int i = 0; i < 1100; i++) {
        sl_request_t x = harness_req("x", 10, 0);
        snprintf(hash, sizeof hash, "p%d", i);
        x.cache_prefix_hash = hash;
        sl_decision_t g = harness_request_as(b, &x, T0 + 2, SL_GRANTED);
        assert_int_equal(sl_engine_cancel(b, g.lease, T0 + 2), SL_OK);
    }
    sl_settle_t s = harness_settle(100, 0);
    s.cache_creation_input_tokens = 10000;
    assert_int_equal(sl_engine_settle(b, d.lease, &s, T0 + 3, NULL), SL_OK);
    sl_decision_t warm = harness_request_as(b, &r, T0 + 4, SL_GRANTED);
    assert_false(warm.cache_penalty);
    assert_int_equal(warm.charged_input_tokens, 100);
    harness_check(b);
    sl_engine_free(a);
    sl_engine_free(b);
}

static void test_restore_refuses_bad_leases_and_changes_nothing(void **state)
{
    (void)state;
    sl_engine_t *b = harness_engine(600000, 0, 0);
    assert_int_equal(sl_engine_set_id_base(b, 100), SL_OK);
    sl_lease_state_t l;
    memset(&l, 0, sizeof l);
    l.id = 7;
    l.pool = "default";
    l.agent = "a";
    l.need[SL_BUCKET_INPUT] = 10;
    l.need[SL_BUCKET_REQUESTS] = 1;
    l.weight = 1;
    l.ttl_s = 120;
    l.granted_at = T0;
    l.expires_at = T0 + 120;
    l.claimed = true;
    harness_snapshot_t before = harness_snapshot(b);
    l.pool = "nope";
    assert_int_equal(sl_engine_lease_restore(b, &l, T0), SL_ENOTFOUND);
    l.pool = "default";
    l.id = 101; /* at or above the next id: a later grant would issue it again */
    assert_int_equal(sl_engine_lease_restore(b, &l, T0), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(b), "101"));
    l.id = 7;
    l.need[SL_BUCKET_INPUT] = -1;
    assert_int_equal(sl_engine_lease_restore(b, &l, T0), SL_EINVAL);
    l.need[SL_BUCKET_INPUT] = 10;
    l.weight = NAN;
    assert_int_equal(sl_engine_lease_restore(b, &l, T0), SL_EINVAL);
    l.weight = 1;
    assert_string_equal(harness_snapshot(b).text, before.text);
    assert_int_equal(sl_engine_lease_restore(b, &l, T0), SL_OK);
    assert_int_equal(sl_engine_lease_restore(b, &l, T0), SL_EEXIST);
    harness_end(b);
}

static void test_pool_restore_clamps_margin_and_levels(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(600000, 0, 0);
    sl_pool_state_t st;
    assert_int_equal(sl_engine_pool_state(e, "default", &st), SL_OK);
    st.margin = 0.10; /* below the floor 0.60 */
    st.level[SL_BUCKET_INPUT] = 1e12;
    assert_int_equal(sl_engine_pool_restore(e, "default", &st, T0), SL_OK);
    assert_true(fabs(harness_margin(e) - 0.60) < 1e-9);
    assert_true(fabs(harness_level(e, SL_BUCKET_INPUT) - 360000) < 1e-6);
    st.level[SL_BUCKET_INPUT] = NAN;
    assert_int_equal(sl_engine_pool_restore(e, "default", &st, T0), SL_EINVAL);
    assert_int_equal(sl_engine_pool_restore(e, "nope", &st, T0), SL_ENOTFOUND);
    harness_end(e);
}

static void test_margin_and_its_clock_survive(void **state)
{
    (void)state;
    sl_engine_t *a = harness_engine(600000, 0, 0);
    harness_grant_429(a, "a", 10, 0, T0);
    assert_true(fabs(harness_margin(a) - 0.80) < 1e-9);
    sl_engine_t *b = restart(a, T0 + 100, T0 + 150);
    assert_true(fabs(harness_margin(b) - 0.80) < 1e-9);
    /* The recovery clock started at the 429 (T0), not at the restart. */
    assert_int_equal(sl_engine_advance(b, T0 + 180), SL_OK);
    assert_true(fabs(harness_margin(b) - 0.81) < 1e-9);
    sl_engine_free(a);
    sl_engine_free(b);
}

static void test_calibration_survives(void **state)
{
    (void)state;
    sl_engine_t *a = harness_engine(600000, 0, 0);
    sl_settle_t s = harness_settle(1200, 0);
    for (int i = 0; i < 7; i++) {
        sl_request_t r = harness_req("a", 1000, 0);
        r.model = "claude-x";
        sl_decision_t d;
        assert_int_equal(sl_engine_request(a, &r, T0, &d), SL_OK);
        assert_int_equal(sl_engine_settle(a, d.lease, &s, T0, NULL), SL_OK);
    }
    sl_calibration_state_t c;
    assert_int_equal(sl_engine_calibration_state(a, "default", "claude-x", &c), SL_OK);
    assert_int_equal(c.n, 7);
    sl_engine_t *b = harness_engine(600000, 0, 0);
    assert_int_equal(sl_engine_calibration_restore(b, "default", &c), SL_OK);
    sl_request_t r = harness_req("a", 1000, 0);
    r.model = "claude-x";
    sl_decision_t d;
    assert_int_equal(sl_engine_request(b, &r, T0, &d), SL_OK);
    assert_int_equal(d.charged_input_tokens, 1200);
    c.sample[0] = 9;
    assert_int_equal(sl_engine_calibration_restore(b, "default", &c), SL_EINVAL);
    c.sample[0] = 1.2;
    c.n = 65;
    assert_int_equal(sl_engine_calibration_restore(b, "default", &c), SL_EINVAL);
    sl_engine_free(a);
    sl_engine_free(b);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_id_base_moves_new_ids_above_it),
    cmocka_unit_test(test_id_base_below_the_next_id_is_refused),
    cmocka_unit_test(test_many_ids_above_a_large_base_keep_the_ring_small_and_right),
    cmocka_unit_test(test_cold_start_empties_the_buckets_and_they_refill),
    cmocka_unit_test(test_a_restored_level_that_is_not_finite_is_refused),
    cmocka_unit_test(test_cold_start_first_headers_raise_the_level_once),
    cmocka_unit_test(test_cold_start_raise_never_exceeds_capacity),
    cmocka_unit_test(test_headers_after_the_cold_window_only_lower),
    cmocka_unit_test(test_a_warm_pool_is_never_raised_by_headers),
    cmocka_unit_test(test_limit_adopted_in_the_cold_window_does_not_fill_the_bucket),
    cmocka_unit_test(test_restored_pool_keeps_its_level_and_refills_for_the_downtime),
    cmocka_unit_test(test_restored_lease_settles_with_its_refund),
    cmocka_unit_test(test_restored_lease_is_reaped_without_refund),
    cmocka_unit_test(test_lease_expired_while_down_is_reaped_at_once),
    cmocka_unit_test(test_a_restored_lease_keeps_its_cache_through_a_sweep),
    cmocka_unit_test(test_restore_refuses_bad_leases_and_changes_nothing),
    cmocka_unit_test(test_pool_restore_clamps_margin_and_levels),
    cmocka_unit_test(test_margin_and_its_clock_survive),
    cmocka_unit_test(test_calibration_survives))
