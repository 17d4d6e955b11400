/* test_graph.c - the task graph (src/engine/graph.c): unblocks, depth, replace, delete, refusals. */
#include "engine_harness.h"
#include "test_main.h"

static size_t n_seen;
static int64_t seen_unblocks_of_plan;
static size_t seen_deps_of_w1;

static void count_task(const sl_task_info_t *t, void *ud)
{
    (void)ud;
    n_seen++;
    if (strcmp(t->id, "plan") == 0) seen_unblocks_of_plan = t->unblocks;
    if (strcmp(t->id, "w1") == 0) seen_deps_of_w1 = t->n_depends;
}

static size_t task_count(const sl_engine_t *e)
{
    n_seen = 0;
    seen_unblocks_of_plan = -1;
    seen_deps_of_w1 = 0;
    sl_engine_task_foreach(e, count_task, NULL);
    return n_seen;
}

/* plan, and w1..w3 depending on it in the given states. */
static sl_engine_t *plan_with_three(sl_task_state_t s1, sl_task_state_t s2, sl_task_state_t s3)
{
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    const char *deps[] = {"plan"};
    assert_int_equal(sl_engine_task_put(e, "plan", "planner", NULL, 0, SL_TASK_RUNNING), SL_OK);
    assert_int_equal(sl_engine_task_put(e, "w1", NULL, deps, 1, s1), SL_OK);
    assert_int_equal(sl_engine_task_put(e, "w2", NULL, deps, 1, s2), SL_OK);
    assert_int_equal(sl_engine_task_put(e, "w3", NULL, deps, 1, s3), SL_OK);
    return e;
}

static void test_unblocks_counts_only_waiting_dependents(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_WAITING, SL_TASK_RUNNING);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 2);
    assert_int_equal(sl_engine_task_unblocks(e, "w1"), 0);
    sl_engine_free(e);

    e = plan_with_three(SL_TASK_DONE, SL_TASK_RUNNING, SL_TASK_DONE);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 0);
    sl_engine_free(e);
}

static void put(sl_engine_t *e, const char *id, const char *dep1, const char *dep2,
                sl_task_state_t st)
{
    const char *deps[] = {dep1, dep2};
    size_t n = dep2 ? 2 : dep1 ? 1 : 0;
    assert_int_equal(sl_engine_task_put(e, id, NULL, n ? deps : NULL, n, st), SL_OK);
}

static void test_depth_is_the_longest_remaining_chain_of_waiting_tasks(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    /* plan -> f1 -> review, plan -> f2; a lint chain l1 -> l2 -> l3 -> l4 of its own */
    put(e, "plan", NULL, NULL, SL_TASK_RUNNING);
    put(e, "f1", "plan", NULL, SL_TASK_WAITING);
    put(e, "f2", "plan", NULL, SL_TASK_WAITING);
    put(e, "review", "f1", "f2", SL_TASK_WAITING);
    put(e, "l1", NULL, NULL, SL_TASK_WAITING);
    put(e, "l2", "l1", NULL, SL_TASK_WAITING);
    put(e, "l3", "l2", NULL, SL_TASK_WAITING);
    put(e, "l4", "l3", NULL, SL_TASK_WAITING);
    assert_int_equal(sl_engine_task_depth(e, "plan"), 3);
    assert_int_equal(sl_engine_task_depth(e, "f2"), 2);
    assert_int_equal(sl_engine_task_depth(e, "review"), 1);
    assert_int_equal(sl_engine_task_depth(e, "l1"), 4);
    assert_int_equal(sl_engine_task_depth(e, "nobody"), -1);
    /* a dependant that is no longer waiting does not count; a write is seen at once */
    put(e, "f1", "plan", NULL, SL_TASK_RUNNING);
    put(e, "f2", "plan", NULL, SL_TASK_DONE);
    assert_int_equal(sl_engine_task_depth(e, "plan"), 1);
    assert_int_equal(sl_engine_task_depth(e, "f1"), 2);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 0);
    assert_int_equal(sl_engine_task_delete(e, "l2"), SL_OK);
    assert_int_equal(sl_engine_task_depth(e, "l1"), 1);
    sl_engine_free(e);
}

static void test_depth_of_a_cycle_is_capped(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    put(e, "a", "b", NULL, SL_TASK_WAITING);
    put(e, "b", "a", NULL, SL_TASK_WAITING);
    put(e, "c", NULL, NULL, SL_TASK_WAITING);
    put(e, "head", NULL, NULL, SL_TASK_RUNNING);
    put(e, "d", "head", NULL, SL_TASK_WAITING);
    assert_int_equal(sl_engine_task_depth(e, "a"), 64);
    assert_int_equal(sl_engine_task_depth(e, "b"), 64);
    assert_int_equal(sl_engine_task_depth(e, "c"), 1);
    assert_int_equal(sl_engine_task_depth(e, "head"), 2);
    sl_engine_free(e);
}

static void test_unknown_task_unblocks_nothing(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_WAITING, SL_TASK_WAITING);
    assert_int_equal(sl_engine_task_unblocks(e, "nobody-depends-on-me"), 0);
    sl_engine_free(e);
}

static void test_put_again_replaces_the_task(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_WAITING, SL_TASK_WAITING);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 3);
    /* w1 now depends on nothing: plan unblocks one task fewer, and there are still four. */
    assert_int_equal(sl_engine_task_put(e, "w1", NULL, NULL, 0, SL_TASK_WAITING), SL_OK);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 2);
    assert_int_equal(task_count(e), 4);
    assert_int_equal(seen_deps_of_w1, 0);
    /* A waiting task that becomes done stops counting. */
    const char *deps[] = {"plan"};
    assert_int_equal(sl_engine_task_put(e, "w2", NULL, deps, 1, SL_TASK_DONE), SL_OK);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 1);
    sl_engine_free(e);
}

static void test_foreach_reports_every_task_with_its_unblocks(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_RUNNING, SL_TASK_WAITING);
    assert_int_equal(task_count(e), 4);
    assert_int_equal(seen_unblocks_of_plan, 2);
    assert_int_equal(seen_deps_of_w1, 1);
    sl_engine_free(e);
}

static void test_task_depending_on_itself_is_refused_and_changes_nothing(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_WAITING, SL_TASK_WAITING);
    const char *deps[] = {"plan", "w1"};
    assert_int_equal(sl_engine_task_put(e, "w1", NULL, deps, 2, SL_TASK_WAITING), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "depends_on[1]"));
    assert_non_null(strstr(sl_engine_errmsg(e), "\"w1\" cannot depend on itself"));
    /* The old w1 (depending on plan) is still there. */
    assert_int_equal(task_count(e), 4);
    assert_int_equal(seen_deps_of_w1, 1);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 3);
    sl_engine_free(e);
}

static void test_bad_id_role_state_or_dependency_is_refused_naming_the_value(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(100000, 10000, 100);
    assert_int_equal(sl_engine_task_put(e, "bad id", NULL, NULL, 0, SL_TASK_WAITING), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "\"bad id\""));
    assert_int_equal(sl_engine_task_put(e, NULL, NULL, NULL, 0, SL_TASK_WAITING), SL_EINVAL);
    assert_int_equal(sl_engine_task_put(e, "t", "juggler", NULL, 0, SL_TASK_WAITING), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "\"juggler\""));
    assert_int_equal(sl_engine_task_put(e, "t", NULL, NULL, 0, (sl_task_state_t)7), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "state 7"));
    const char *bad_dep[] = {"ok", "not ok"};
    assert_int_equal(sl_engine_task_put(e, "t", NULL, bad_dep, 2, SL_TASK_WAITING), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "depends_on[1] \"not ok\""));
    assert_int_equal(sl_engine_task_put(e, "t", NULL, NULL, 1, SL_TASK_WAITING), SL_EINVAL);
    assert_int_equal(task_count(e), 0);
    sl_engine_free(e);
}

static void test_delete_removes_the_task_and_an_unknown_one_is_not_found(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_WAITING, SL_TASK_WAITING);
    assert_int_equal(sl_engine_task_delete(e, "w3"), SL_OK);
    assert_int_equal(sl_engine_task_unblocks(e, "plan"), 2);
    assert_int_equal(task_count(e), 3);
    assert_int_equal(sl_engine_task_delete(e, "w3"), SL_ENOTFOUND);
    assert_non_null(strstr(sl_engine_errmsg(e), "\"w3\""));
    assert_int_equal(task_count(e), 3);
    sl_engine_free(e);
}

/* design.md "Weight": w = role_base x (1 + 0.5 x unblocks) x ...; for a task in the
 * graph, unblocks and the role come from the graph, else from the request. */
static void test_request_weight_follows_the_graph_for_a_registered_task(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_WAITING, SL_TASK_RUNNING);
    sl_decision_t d;

    sl_request_t r = harness_req("a1", 100, 10);
    r.task = "plan";
    r.unblocks = 40; /* ignored: the graph says 2, and the role planner (3) */
    d = harness_request_as(e, &r, T0, SL_GRANTED);
    assert_true(fabs(d.weight - 3.0 * (1 + 0.5 * 2)) < 1e-9);

    sl_request_t u = harness_req("a2", 100, 10);
    u.task = "not-in-the-graph";
    u.unblocks = 4;
    assert_int_equal(sl_engine_request(e, &u, T0, &d), SL_OK);
    assert_true(fabs(d.weight - 1.0 * (1 + 0.5 * 4)) < 1e-9);
    harness_end(e);
}

/* The task's registered role is the request's: another role named is a contradiction
 * (SL_EINVAL), a role outside roles_allowed (the caller's token) is SL_EFORBIDDEN, and
 * either refusal changes nothing (docs/design.md, "Reports and claims"). */
static void test_a_task_gives_its_role_and_a_role_the_caller_may_not_take_is_forbidden(void **state)
{
    (void)state;
    sl_engine_t *e = plan_with_three(SL_TASK_WAITING, SL_TASK_WAITING, SL_TASK_RUNNING);
    sl_decision_t d;
    harness_snapshot_t before = harness_snapshot(e);
    sl_request_t r = harness_req("a1", 100, 10);
    r.task = "plan";
    r.role = "worker";
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "'worker' is not the role 'planner' task 'plan'"));
    const char *workers[] = {"worker"};
    r.role = NULL;
    r.roles_allowed = workers;
    r.n_roles_allowed = 1;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_EFORBIDDEN);
    assert_non_null(strstr(sl_engine_errmsg(e), "may not use role 'planner' (the role of task 'plan')"));
    assert_string_equal(before.text, harness_snapshot(e).text);
    const char *leads[] = {"worker", "planner"};
    r.roles_allowed = leads;
    r.n_roles_allowed = 2;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    sl_agent_info_t info;
    assert_int_equal(sl_engine_agent_info(e, "a1", &info), SL_OK);
    assert_string_equal(info.role, "planner");
    /* a task the graph does not know keeps the role asked, checked the same way */
    sl_request_t u = harness_req("a2", 100, 10);
    u.task = "not-in-the-graph";
    u.role = "planner";
    u.roles_allowed = workers;
    u.n_roles_allowed = 1;
    assert_int_equal(sl_engine_request(e, &u, T0, &d), SL_EFORBIDDEN);
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_unblocks_counts_only_waiting_dependents),
    cmocka_unit_test(test_unknown_task_unblocks_nothing),
    cmocka_unit_test(test_depth_is_the_longest_remaining_chain_of_waiting_tasks),
    cmocka_unit_test(test_depth_of_a_cycle_is_capped),
    cmocka_unit_test(test_put_again_replaces_the_task),
    cmocka_unit_test(test_foreach_reports_every_task_with_its_unblocks),
    cmocka_unit_test(test_task_depending_on_itself_is_refused_and_changes_nothing),
    cmocka_unit_test(test_bad_id_role_state_or_dependency_is_refused_naming_the_value),
    cmocka_unit_test(test_delete_removes_the_task_and_an_unknown_one_is_not_found),
    cmocka_unit_test(test_request_weight_follows_the_graph_for_a_registered_task),
    cmocka_unit_test(test_a_task_gives_its_role_and_a_role_the_caller_may_not_take_is_forbidden))
