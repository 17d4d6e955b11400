/* test_teams.c - hierarchical fair queueing: teams' weighted shares, idle teams lending, order inside a team. */
#include "engine_harness.h"

#include <stdlib.h>

#include "test_main.h"

#define MAX_AGENTS 256

/* Agents named "<team>.<n>", each keeping one request queued; tokens granted per team. */
typedef struct fleet {
    sl_engine_t *e;
    int n_agents;
    char name[MAX_AGENTS][32];
    int team_of[MAX_AGENTS]; /* 0 or 1 */
    bool waiting[MAX_AGENTS];
    bool active[2];   /* a team whose agents keep asking */
    bool counting;    /* tokens are counted from here on */
    int64_t tokens[2];
} fleet_t;

static int agent_index(const fleet_t *f, const char *name)
{
    for (int i = 0; i < f->n_agents; i++)
        if (strcmp(f->name[i], name) == 0) return i;
    return -1;
}

static void on_event(const sl_event_t *ev, void *ud)
{
    fleet_t *f = ud;
    if (ev->kind != SL_EV_GRANTED) return;
    int i = agent_index(f, ev->agent);
    if (i < 0) return;
    f->waiting[i] = false;
    if (f->counting) f->tokens[f->team_of[i]] += ev->input_tokens;
}

static void add_team(fleet_t *f, int team, const char *team_name, int count, bool in_team)
{
    for (int n = 0; n < count; n++) {
        int i = f->n_agents++;
        snprintf(f->name[i], sizeof f->name[i], "%s.%d", team_name, n);
        f->team_of[i] = team;
        if (in_team) assert_int_equal(sl_engine_set_agent_team(f->e, f->name[i], team_name), SL_OK);
    }
}

/* Every agent of an active team that holds no request asks for `in` tokens. */
static void keep_backlogged(fleet_t *f, int64_t in, double now)
{
    for (int i = 0; i < f->n_agents; i++) {
        if (f->waiting[i] || !f->active[f->team_of[i]]) continue;
        sl_request_t r = harness_req(f->name[i], in, 0);
        r.max_wait_s = 86400;
        sl_decision_t d;
        f->waiting[i] = true; /* before the call: a grant inside it clears it */
        assert_int_equal(sl_engine_request(f->e, &r, now, &d), SL_OK);
        assert_int_not_equal(d.status, SL_REJECTED);
        if (d.status == SL_GRANTED) {
            f->waiting[i] = false;
            if (f->counting) f->tokens[f->team_of[i]] += d.charged_input_tokens;
        }
    }
}

static fleet_t *fleet_new(void)
{
    fleet_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->e = harness_engine(600000, 0, 0);
    sl_engine_set_event_cb(f->e, on_event, f);
    f->active[0] = f->active[1] = true;
    return f;
}

/* Runs `steps` quarter-seconds with both teams' agents asking; returns the time. */
static double run(fleet_t *f, double now, int steps)
{
    for (int s = 0; s < steps; s++) {
        now += 0.25;
        assert_int_equal(sl_engine_advance(f->e, now), SL_OK);
        keep_backlogged(f, 2000, now);
        if (s % 50 == 0) harness_check(f->e);
    }
    return now;
}

static double share_ratio(const fleet_t *f)
{
    print_message("team 0 %lld tokens, team 1 %lld tokens, ratio 1:%.3f\n",
                  (long long)f->tokens[0], (long long)f->tokens[1],
                  (double)f->tokens[1] / (double)f->tokens[0]);
    return (double)f->tokens[1] / (double)f->tokens[0];
}

static double measure(fleet_t *f)
{
    double now = T0;
    keep_backlogged(f, 2000, now);
    now = run(f, now, 40); /* past the first burst from full buckets */
    f->counting = true;
    run(f, now, 1200);
    return share_ratio(f);
}

/* 150 agents and 50, each set in a team of its own or in none; the small side weighs
 * `small_weight` when it is a team. Returns the small side's tokens over the big's. */
static double big_and_small(bool big_in_team, bool small_in_team, double small_weight)
{
    fleet_t *f = fleet_new();
    add_team(f, 0, big_in_team ? "big" : "loose", 150, big_in_team);
    add_team(f, 1, "small", 50, small_in_team);
    if (big_in_team) assert_int_equal(sl_engine_set_team_weight(f->e, "big", 1), SL_OK);
    if (small_in_team)
        assert_int_equal(sl_engine_set_team_weight(f->e, "small", small_weight), SL_OK);
    double ratio = measure(f);
    sl_engine_free(f->e);
    free(f);
    return ratio;
}

static void test_teams_weighted_1_to_3_are_served_1_to_3_whatever_their_agent_counts(void **state)
{
    (void)state;
    double ratio = big_and_small(true, true, 3);
    assert_true(ratio > 3 * 0.95 && ratio < 3 * 1.05);
}

static void test_without_teams_per_agent_fair_queueing_gives_the_big_team_3_to_1(void **state)
{
    (void)state;
    double ratio = big_and_small(false, false, 1);
    assert_true(ratio > (1.0 / 3) * 0.95 && ratio < (1.0 / 3) * 1.05);
}

static void test_agents_outside_every_team_are_the_default_team(void **state)
{
    (void)state;
    double ratio = big_and_small(false, true, 3); /* the 150: team "default", weight 1 */
    assert_true(ratio > 3 * 0.95 && ratio < 3 * 1.05);
}

static void test_an_idle_teams_share_goes_to_the_others_without_credit(void **state)
{
    (void)state;
    fleet_t *f = fleet_new();
    add_team(f, 0, "a", 20, true);
    add_team(f, 1, "b", 20, true);
    assert_int_equal(sl_engine_set_team_weight(f->e, "b", 3), SL_OK);
    f->active[1] = false; /* b is idle: a takes the whole refill */
    double now = T0;
    keep_backlogged(f, 2000, now);
    now = run(f, now, 40);
    f->counting = true;
    now = run(f, now, 400); /* 100 s of refill at 600,000 x margin 0.85 per minute */
    print_message("a alone: %lld tokens in 100 s\n", (long long)f->tokens[0]);
    assert_int_equal(f->tokens[1], 0);
    assert_true(f->tokens[0] > 0.97 * 850000 && f->tokens[0] <= 850000 + 2000);
    /* b wakes after 100 s idle: it gets its 3/4 from now on, not the time it lent. */
    f->active[1] = true;
    f->tokens[0] = f->tokens[1] = 0;
    now = run(f, now, 40);
    double ratio = share_ratio(f);
    assert_true(ratio > 3 * 0.85 && ratio < 3 * 1.15);
    assert_true(f->tokens[0] > 0);
    sl_engine_free(f->e);
    free(f);
}

/* Inside a team the task graph's weights still order the agents. */
static void test_within_a_team_the_task_graph_order_holds(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(60000, 0, 0);
    const char *members[] = {"p", "w1", "w2", "o"};
    const char *teams[] = {"dev", "dev", "dev", "ops"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(sl_engine_set_agent_team(e, members[i], teams[i]), SL_OK);
    assert_int_equal(sl_engine_task_put(e, "plan", "planner", NULL, 0, SL_TASK_RUNNING), SL_OK);
    const char *deps[] = {"plan"};
    assert_int_equal(sl_engine_task_put(e, "feat1", "worker", deps, 1, SL_TASK_WAITING), SL_OK);
    assert_int_equal(sl_engine_task_put(e, "feat2", "worker", deps, 1, SL_TASK_WAITING), SL_OK);
    harness_grant(e, "filler", 51000, 0, T0); /* empties the bucket: everything queues */
    sl_decision_t d;
    uint64_t w1, w2, p, o;
    sl_request_t r = harness_req("w1", 1000, 0);
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    w1 = d.ticket;
    r = harness_req("w2", 1000, 0);
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    w2 = d.ticket;
    r = harness_req("o", 1000, 0);
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    o = d.ticket;
    r = harness_req("p", 1000, 0);
    r.role = "planner";
    r.task = "plan";
    d = harness_request_as(e, &r, T0, SL_QUEUED);
    p = d.ticket;
    /* The planner (weight 3 x (1 + 0.5 x 2 unblocked)) asked last but leads its team:
     * dev's first turn is the planner's, then ops', then dev's workers. */
    assert_int_equal(d.position, 1);
    harness_check(e);
    uint64_t order[4] = {p, o, w1, w2};
    double now = T0;
    for (int k = 0; k < 4; k++) {
        now += 1.2; /* 850 tokens a second: one request per step */
        assert_int_equal(sl_engine_advance(e, now), SL_OK);
        harness_check(e);
        for (int j = 0; j < 4; j++) {
            assert_int_equal(sl_engine_ticket(e, order[j], now, &d), SL_OK);
            assert_int_equal(d.status, j <= k ? SL_GRANTED : SL_QUEUED);
        }
    }
    sl_engine_free(e);
}

/* A team's backlog, however many agents it has, does not make another team wait behind
 * it: a team of one agent gets every other turn against a team of 100 (per-agent fair
 * queueing would give it one turn in 101). */
static void test_a_deep_team_backlog_cannot_starve_another_team(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(60000, 0, 0);
    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "flood.%d", i);
        assert_int_equal(sl_engine_set_agent_team(e, name, "flood"), SL_OK);
    }
    assert_int_equal(sl_engine_set_agent_team(e, "solo", "solo"), SL_OK);
    harness_grant(e, "filler", 51000, 0, T0);
    sl_decision_t d;
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < 100; i++) {
            snprintf(name, sizeof name, "flood.%d", i);
            sl_request_t r = harness_req(name, 1000, 0);
            r.max_wait_s = 86400;
            d = harness_request_as(e, &r, T0, SL_QUEUED);
        }
    }
    harness_check(e);
    uint64_t solo[10];
    for (int j = 1; j <= 10; j++) {
        sl_request_t r = harness_req("solo", 1000, 0);
        r.max_wait_s = 86400;
        d = harness_request_as(e, &r, T0, SL_QUEUED);
        /* Equal team weights: solo's j-th ties with flood's j-th, flood seen first. */
        assert_int_equal(d.position, 2 * j);
        solo[j - 1] = d.ticket;
    }
    /* Twenty grants of refill (850 tokens a second) serve all ten of solo's. */
    assert_int_equal(sl_engine_advance(e, T0 + 24), SL_OK);
    harness_check(e);
    for (int j = 0; j < 10; j++) {
        d = harness_ticket_as(e, solo[j], T0 + 24, SL_GRANTED);
    }
    sl_engine_free(e);
}

static void test_bad_team_weights_name_the_team_and_value_and_change_nothing(void **state)
{
    (void)state;
    sl_engine_t *e = harness_engine(60000, 0, 0);
    const double bad[] = {0, -1, NAN, INFINITY, 1e-4, 1e4};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sl_engine_set_team_weight(e, "dev", bad[i]), SL_EINVAL);
        assert_non_null(strstr(sl_engine_errmsg(e), "team \"dev\": weight"));
        assert_true(sl_engine_team_weight(e, "dev") == 1.0);
    }
    assert_int_equal(sl_engine_set_team_weight(e, "bad name!", 2), SL_EINVAL);
    assert_non_null(strstr(sl_engine_errmsg(e), "bad name!"));
    assert_int_equal(sl_engine_set_team_weight(e, "dev", 2.5), SL_OK);
    assert_true(sl_engine_team_weight(e, "dev") == 2.5);
    assert_true(sl_engine_team_weight(e, "never-set") == 1.0);
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_teams_weighted_1_to_3_are_served_1_to_3_whatever_their_agent_counts),
    cmocka_unit_test(test_without_teams_per_agent_fair_queueing_gives_the_big_team_3_to_1),
    cmocka_unit_test(test_agents_outside_every_team_are_the_default_team),
    cmocka_unit_test(test_an_idle_teams_share_goes_to_the_others_without_credit),
    cmocka_unit_test(test_within_a_team_the_task_graph_order_holds),
    cmocka_unit_test(test_a_deep_team_backlog_cannot_starve_another_team),
    cmocka_unit_test(test_bad_team_weights_name_the_team_and_value_and_change_nothing))
