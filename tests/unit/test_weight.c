/* test_weight.c - weights: role, unblocks, repeats, priority, floor, and the task graph. */
#include "engine_harness.h"
#include "test_main.h"

static double weight_of(sl_engine_t *e, sl_request_t *r, double now, uint64_t *lease)
{
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, r, now, &d), SL_OK);
    if (lease) *lease = d.status == SL_GRANTED ? d.lease : 0;
    return d.weight;
}

static void settle_with_signature(sl_engine_t *e, uint64_t lease, const char *sig, double now)
{
    sl_settle_t s = harness_settle(100, 10);
    s.failure_signature = sig;
    assert_int_equal(sl_engine_settle(e, lease, &s, now, NULL), SL_OK);
}

static void test_each_repeated_identical_failure_halves_the_weight(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_request_t r = harness_req("fixer", 100, 10);
    uint64_t l;
    double t = T0;
    assert_true(fabs(weight_of(e, &r, t, &l) - 1.0) < 1e-12);
    settle_with_signature(e, l, "test_x:diff_1", t); /* first failure: no repeat yet */
    assert_true(fabs(weight_of(e, &r, t += 1, &l) - 1.0) < 1e-12);
    settle_with_signature(e, l, "test_x:diff_1", t); /* repeat 1 */
    assert_true(fabs(weight_of(e, &r, t += 1, &l) - 0.5) < 1e-12);
    settle_with_signature(e, l, "test_x:diff_1", t); /* repeat 2 */
    assert_true(fabs(weight_of(e, &r, t += 1, &l) - 0.25) < 1e-12);
    settle_with_signature(e, l, "test_y:diff_2", t); /* progress: reset */
    assert_true(fabs(weight_of(e, &r, t += 1, &l) - 1.0) < 1e-12);
    settle_with_signature(e, l, NULL, t);
    sl_agent_info_t a;
    assert_int_equal(sl_engine_agent_info(e, "fixer", &a), SL_OK);
    assert_int_equal(a.repeats, 0);
    harness_end(e);
}

static void test_weight_is_role_times_unblocks_times_priority(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    sl_request_t r = harness_req("plan", 100, 10);
    r.role = "planner";
    r.unblocks = 2;
    r.priority = "high";
    assert_true(fabs(weight_of(e, &r, T0, NULL) - 3 * 2 * 4) < 1e-12);
    r = harness_req("rev", 100, 10);
    r.role = "reviewer";
    r.priority = "low";
    assert_true(fabs(weight_of(e, &r, T0, NULL) - 2 * 0.25) < 1e-12);
    sl_engine_free(e);
}

static void test_weight_has_a_floor_of_01(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    assert_int_equal(sl_engine_set_role(e, "idle", 0.01), SL_OK);
    sl_request_t r = harness_req("x", 100, 10);
    r.role = "idle";
    r.priority = "low";
    assert_true(fabs(weight_of(e, &r, T0, NULL) - 0.1) < 1e-12);
    sl_engine_free(e);
}

static void test_task_graph_unblocks_counts_waiting_dependents(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000000, 100000, 1000);
    const char *deps[] = {"plan"};
    assert_int_equal(sl_engine_task_put(e, "plan", "planner", NULL, 0, SL_TASK_RUNNING), SL_OK);
    char id[16];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "w%d", i);
        assert_int_equal(
            sl_engine_task_put(e, id, "worker", deps, 1, i == 5 ? SL_TASK_DONE : SL_TASK_WAITING),
            SL_OK);
    }
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 5);
    sl_request_t r = harness_req("planner-1", 100, 10);
    r.role = "planner";
    r.task = "plan";
    r.unblocks = 100; /* ignored: the task is in the graph */
    assert_true(fabs(weight_of(e, &r, T0, NULL) - 3 * (1 + 0.5 * 5)) < 1e-12);
    /* A task not in the graph uses the request's own field. */
    r.task = "elsewhere";
    r.unblocks = 2;
    assert_true(fabs(weight_of(e, &r, T0, NULL) - 3 * 2) < 1e-12);
    assert_int_equal(sl_engine_task_delete(e, "w0"), SL_OK);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 4);
    assert_int_equal(sl_engine_task_delete(e, "w0"), SL_ENOTFOUND);
    const char *self[] = {"loop"};
    assert_int_equal(sl_engine_task_put(e, "loop", NULL, self, 1, SL_TASK_WAITING), SL_EINVAL);
    assert_int_equal(sl_engine_task_put(e, "t", "wizard", NULL, 0, SL_TASK_WAITING), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "wizard"));
    sl_engine_free(e);
}

static void test_role_and_priority_weights_must_be_finite_and_positive(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(1000, 1000, 10);
    assert_int_equal(sl_engine_set_role(e, "x", NAN), SL_EINVAL);
    assert_int_equal(sl_engine_set_role(e, "x", 0), SL_EINVAL);
    assert_int_equal(sl_engine_set_role(e, "x", -1), SL_EINVAL);
    assert_int_equal(sl_engine_set_role(e, "x", INFINITY), SL_EINVAL);
    assert_int_equal(sl_engine_set_priority(e, "p", NAN), SL_EINVAL);
    assert_int_equal(sl_engine_set_priority(e, "p", 0), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "\"p\""));
    sl_request_t r = harness_req("a", 1, 1);
    r.role = "x";
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_EINVAL);
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_each_repeated_identical_failure_halves_the_weight),
    cmocka_unit_test(test_weight_is_role_times_unblocks_times_priority),
    cmocka_unit_test(test_weight_has_a_floor_of_01),
    cmocka_unit_test(test_task_graph_unblocks_counts_waiting_dependents),
    cmocka_unit_test(test_role_and_priority_weights_must_be_finite_and_positive))
