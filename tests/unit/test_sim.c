/* test_sim.c - the simulator: determinism, token accounting, bounds, no-429 control, plot. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "sim.h"
#include "sim_harness.h"
#include "test_main.h"

/* Runs every strategy; returns the table, JSON and CSV as one heap string. */
static char *run_all(const sl_sim_scenario_t *sc, uint64_t seed, sl_sim_result_t *res)
{
    size_t n = sl_sim_strategy_count();
    char err[512];
    for (size_t i = 0; i < n; i++) {
        if (sl_sim_run(sc, sl_sim_strategy_name(i), seed, NULL, &res[i], err, sizeof err) != 0)
            fail_msg("%s", err);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    sl_sim_report_table(f, sc, seed, res, n);
    sl_sim_report_json(f, sc, seed, res, n);
    sl_sim_report_csv(f, res, n);
    fclose(f);
    return buf;
}

static void free_all(sl_sim_result_t *res)
{
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) sl_sim_result_free(&res[i]);
}

static void test_same_seed_gives_byte_identical_reports(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("seed-fleet.yaml", &sc);
    sl_sim_result_t a[16], b[16], c[16];
    char *x = run_all(&sc, 7, a), *y = run_all(&sc, 7, b), *z = run_all(&sc, 8, c);
    assert_string_equal(x, y);
    assert_string_not_equal(x, z);
    free(x);
    free(y);
    free(z);
    free_all(a);
    free_all(b);
    free_all(c);
    sl_sim_scenario_free(&sc);
}

static void test_billed_tokens_equal_the_sum_of_call_usages(void **state)
{
    (void)state;
    const char *files[] = {"seed-fleet.yaml", "outside-traffic.yaml"};
    for (size_t f = 0; f < 2; f++) {
        sl_sim_scenario_t sc;
        load(files[f], &sc);
        sl_sim_result_t r[16];
        free(run_all(&sc, 3, r));
        for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
            assert_true(r[i].tokens_billed > 0);
            assert_int_equal(r[i].tokens_billed, r[i].tokens_usage_sum);
        }
        free_all(r);
        sl_sim_scenario_free(&sc);
    }
}

static void test_makespan_is_never_below_the_lower_bound(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("seed-fleet.yaml", &sc);
    double lb = sl_sim_lower_bound_s(&sc);
    assert_true(lb > 0);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double pb = sl_sim_path_bound_s(&sc, seed);
        /* On this fleet the task chains bind, not the tokens. */
        assert_true(pb > lb);
        sl_sim_result_t r[16];
        free(run_all(&sc, seed, r));
        for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
            assert_true(r[i].makespan_s >= lb);
            assert_true(r[i].makespan_s >= pb);
            assert_true(r[i].tasks_done <= r[i].tasks_total);
            assert_true(r[i].p50_task_s <= r[i].p95_task_s);
        }
        free_all(r);
    }
    sl_sim_scenario_free(&sc);
}

static const char ample[] =
    "name: ample\n"
    "duration_s: 3600\n"
    "provider: {input_tpm: 100000000, output_tpm: 100000000, rpm: 1000000}\n"
    "agents:\n"
    "  - {name: planner, role: planner, turns: 3, prefix_tokens: 30000, turn_tokens: 5000,\n"
    "     output_tokens: 1000, max_tokens: 8192}\n"
    "  - {name: w, count: 30, turns: 4, prefix_tokens: 20000, turn_tokens: 20000,\n"
    "     output_tokens: 800, max_tokens: 8192, repeat_failure: 0.2, after: [planner]}\n"
    "  - {name: r, role: reviewer, turns: 2, prefix_tokens: 9000, turn_tokens: 1000,\n"
    "     output_tokens: 500, max_tokens: 4096, after: [w]}\n";

static void test_limits_far_above_demand_give_no_429s(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    if (sl_sim_scenario_parse(ample, strlen(ample), &sc, err, sizeof err) != 0) fail_msg("%s", err);
    sl_sim_result_t r[16];
    free(run_all(&sc, 1, r));
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
        assert_int_equal(r[i].http_429, 0);
        assert_true(r[i].wave_period_s < 0);
        assert_int_equal(r[i].replans, 0);
        assert_int_equal(r[i].tasks_done, 32);
    }
    free_all(r);
    sl_sim_scenario_free(&sc);
}

static void test_scenario_errors_name_the_field_and_value(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    const char *bad1 = "agents:\n  - {name: a, turns: -3}\n";
    assert_int_equal(sl_sim_scenario_parse(bad1, strlen(bad1), &sc, err, sizeof err), -1);
    assert_non_null(strstr(err, "agents[0].turns"));
    assert_non_null(strstr(err, "-3"));
    const char *bad2 = "provider: {input_tmp: 5}\nagents: [{name: a}]\n";
    assert_int_equal(sl_sim_scenario_parse(bad2, strlen(bad2), &sc, err, sizeof err), -1);
    assert_non_null(strstr(err, "input_tmp"));
    const char *bad3 = "agents: [{name: a, after: [b]}, {name: b}]\n";
    assert_int_equal(sl_sim_scenario_parse(bad3, strlen(bad3), &sc, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"b\""));
}

typedef struct refusal {
    const char *yaml, *want;
} refusal_t;

/* Each scenario is refused with a message that says `want`. */
static void assert_refused(const refusal_t *bad, size_t n)
{
    sl_sim_scenario_t sc;
    char err[256];
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(sl_sim_scenario_parse(bad[i].yaml, strlen(bad[i].yaml), &sc, err, sizeof err),
                         -1);
        if (!strstr(err, bad[i].want)) fail_msg("\"%s\" does not say \"%s\"", err, bad[i].want);
    }
}

static void test_team_weight_errors_name_the_field_and_value(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    const refusal_t bad[] = {
        {"teams: 2\nteam_weights: [1, 0]\nagents: [{name: a}]\n", "team_weights[1]: \"0\""},
        {"teams: 2\nteam_weights: [1, 2, 3]\nagents: [{name: a}]\n", "3 weights for 2 teams"},
        {"teams: 2\nteam_weights: 3\nagents: [{name: a}]\n", "team_weights: expected a list"},
    };
    assert_refused(bad, sizeof bad / sizeof bad[0]);
    const char *ok = "teams: 3\nteam_weights: [2]\nagents: [{name: a}]\n";
    assert_int_equal(sl_sim_scenario_parse(ok, strlen(ok), &sc, err, sizeof err), 0);
    assert_true(sc.team_weight[0] == 2 && sc.team_weight[1] == 1 && sc.team_weight[2] == 1);
    sl_sim_scenario_free(&sc);
}

/* A key given twice is refused naming it: last-wins would hide a typo'd copy (and a second
 * `agents` list leaked the first). */
static void test_a_key_given_twice_names_the_key(void **state)
{
    (void)state;
    const refusal_t bad[] = {
        {"agents: [{name: a}]\nagents: [{name: b}]\n", "agents: given twice"},
        {"teams: 2\nteam_weights: [2]\nteam_weights: [3]\nagents: [{name: a}]\n",
         "team_weights: given twice"},
        {"provider: {rpm: 5, rpm: 6}\nagents: [{name: a}]\n", "provider.rpm: given twice"},
        {"agents: [{name: a, count: 2, count: 3}]\n", "agents[0].count: given twice"},
    };
    assert_refused(bad, sizeof bad / sizeof bad[0]);
}

/* Two identical teams that always have agents waiting, weighted 1:3. */
static const char two_teams[] = "name: two-teams\nseed: 3\nduration_s: 600\nteams: 2\n"
                                "team_weights: [1, 3]\nharness_timeout_s: 0\n"
                                "provider: {input_tpm: 60000, output_tpm: 6000000, rpm: 100000}\n"
                                "agents:\n  - {name: w, count: 8, turns: 200, prefix_tokens: 0,"
                                " turn_tokens: 2000, output_tokens: 100, max_tokens: 200,"
                                " test_s: 1}\n";

static double team1_share(const sl_sim_scenario_t *sc, const char *strategy)
{
    sl_sim_result_t r;
    char err[256];
    if (sl_sim_run(sc, strategy, 3, NULL, &r, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(r.n_teams, 2);
    assert_true(r.all_backlogged_s > 500);
    double share = r.teams[1].share;
    print_message("%s: team t1 served %.3f of the tokens while both were backlogged\n", strategy,
                  share);
    assert_true(fabs(r.teams[0].share + share - 1) < 1e-9);
    assert_true(fabs(r.teams[1].weight_share - 0.75) < 1e-9);
    sl_sim_result_free(&r);
    return share;
}

static void test_sluice_serves_backlogged_teams_by_their_weights(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    if (sl_sim_scenario_parse(two_teams, strlen(two_teams), &sc, err, sizeof err) != 0)
        fail_msg("%s", err);
    double weighted = team1_share(&sc, "sluice");
    assert_true(weighted > 0.75 * 0.95 && weighted < 0.75 * 1.05);
    /* Without teams in the engine (every weight 1) the two equal teams split evenly. */
    double equal = team1_share(&sc, "sluice-equal");
    assert_true(equal > 0.45 && equal < 0.55);
    sl_sim_scenario_free(&sc);
}

static void test_same_seed_gives_byte_identical_team_reports(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("scale-200.yaml", &sc);
    assert_int_equal(sc.teams, 10);
    assert_non_null(sc.team_weight);
    sl_sim_result_t a[8], b[8];
    char *x = run_all(&sc, 1, a), *y = run_all(&sc, 1, b);
    assert_string_equal(x, y);
    assert_non_null(strstr(x, "\"teams\":[{\"team\":\"t0\",\"weight\":3.000"));
    assert_non_null(strstr(x, "\"worst_team_p95_s\""));
    assert_non_null(strstr(x, "teams: share of tokens served while all 10 teams"));
    free(x);
    free(y);
    free_all(a);
    free_all(b);
    sl_sim_scenario_free(&sc);
}

static void test_the_plot_is_produced_and_not_empty(void **state)
{
    (void)state;
    /* gnuplot comes from scripts/deps.sh (gnuplot-nox): without it this test fails. */
    sl_sim_scenario_t sc;
    load("seed-fleet.yaml", &sc);
    sl_sim_result_t r[16];
    free(run_all(&sc, 1, r));
    char dir[] = "/tmp/sluice-sim-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/timeseries.csv", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    sl_sim_report_csv(f, r, sl_sim_strategy_count());
    fclose(f);
    if (sl_sim_plot(dir, r, sl_sim_strategy_count(), err, sizeof err) != 0) fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/429s.png", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 1000);
    FILE *png = fopen(path, "rb");
    unsigned char magic[4] = {0};
    assert_int_equal(fread(magic, 1, 4, png), 4);
    fclose(png);
    assert_memory_equal(magic, "\x89PNG", 4);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free_all(r);
    sl_sim_scenario_free(&sc);
}

static void test_seed_fleet_backoff_has_429s_and_sluice_queues_instead(void **state)
{
    (void)state;
    /* Not a claim about which strategy wins: a guard that the scenario still
     * exercises the limits, so the other tests are not vacuous. */
    sl_sim_scenario_t sc;
    load("seed-fleet.yaml", &sc);
    sl_sim_result_t r;
    char err[256];
    assert_int_equal(sl_sim_run(&sc, "backoff", 1, NULL, &r, err, sizeof err), 0);
    assert_true(r.http_429 > 0);
    sl_sim_result_free(&r);
    sl_sim_scenario_free(&sc);
}

/* A chain: plan -> 3 workers x 2 tasks (and a shorter docs branch) -> review. Every
 * call's prefix (2000 tokens, cached after the first call of a task) and tail (100)
 * are prefilled at 1000 tokens/s after a ttft of 0.5 s; one output token streams at
 * 10/s; tests take exactly 10 s. */
static const char chain[] =
    "name: chain\n"
    "start_window_s: 0\n"
    "provider: {input_tpm: 100000000, output_tpm: 100000000, ttft_s: 0.5,\n"
    "           prefill_tokens_per_s: 1000, output_tokens_per_s: 10, latency_spread: 0.2}\n"
    "agents:\n"
    "  - {name: plan, role: planner, turns: 2, prefix_tokens: 2000, turn_tokens: 100,\n"
    "     output_tokens: 1, max_tokens: 1, read_s: 4, edit_s: 1, test_s: 10, test_spread: 0}\n"
    "  - {name: work, count: 3, tasks: 2, turns: 3, prefix_tokens: 2000, turn_tokens: 100,\n"
    "     output_tokens: 1, max_tokens: 1, read_s: 4, edit_s: 1, test_s: 10, test_spread: 0,\n"
    "     after: [plan]}\n"
    "  - {name: docs, turns: 5, prefix_tokens: 2000, turn_tokens: 100, output_tokens: 1,\n"
    "     max_tokens: 1, read_s: 4, edit_s: 1, test_s: 10, test_spread: 0, after: [plan]}\n"
    "  - {name: review, role: reviewer, turns: 1, prefix_tokens: 2000, turn_tokens: 100,\n"
    "     output_tokens: 1, max_tokens: 1, read_s: 4, edit_s: 1, test_s: 10, test_spread: 0,\n"
    "     after: [work]}\n";

/* By hand, with every latency at its shortest (x0.8): a task's first call takes
 * (0.5 + 2100/1000) x 0.8 + 0.1 x 0.8 = 2.16 s, a later one (0.5 + 0.1) x 0.8 + 0.08 =
 * 0.56 s; each call is followed by edit 1 s and tests 10 s, each task starts with read
 * 4 s. plan: 4 + 13.16 + 11.56 = 28.72; a worker task: 4 + 13.16 + 2 x 11.56 = 40.28,
 * two in a row 80.56 (docs: 63.4, off the path); review: 17.16. Path: 126.44 s.
 * Without spread the latencies are the mean ones: 29.4 + 82.2 + 17.7 = 129.3 s, and a
 * run with ample limits takes exactly that. */
static void test_path_bound_is_exact_on_a_hand_made_chain(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    if (sl_sim_scenario_parse(chain, strlen(chain), &sc, err, sizeof err) != 0) fail_msg("%s", err);
    assert_near(sl_sim_path_bound_s(&sc, 1), 126.44, 1e-9);
    assert_near(sl_sim_path_bound_s(&sc, 2), 126.44, 1e-9);
    sl_sim_result_t r[16];
    free(run_all(&sc, 1, r));
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
        assert_int_equal(r[i].tasks_done, 9);
        assert_true(r[i].makespan_s >= 126.44 - 1e-9);
    }
    free_all(r);
    sc.provider.latency_spread = 0;
    assert_near(sl_sim_path_bound_s(&sc, 1), 129.3, 1e-9);
    sl_sim_result_t naive;
    assert_int_equal(sl_sim_run(&sc, "naive", 1, NULL, &naive, err, sizeof err), 0);
    assert_near(naive.makespan_s, 129.3, 1e-9);
    sl_sim_result_free(&naive);
    sl_sim_scenario_free(&sc);
}

/* The JSON gives both bounds, their maximum, and each strategy's ratios to it. */
static void test_json_reports_the_bounds_and_ratios(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    if (sl_sim_scenario_parse(chain, strlen(chain), &sc, err, sizeof err) != 0) fail_msg("%s", err);
    sl_sim_result_t r;
    assert_int_equal(sl_sim_run(&sc, "naive", 1, NULL, &r, err, sizeof err), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sl_sim_report_json(f, &sc, 1, &r, 1);
    fclose(f);
    assert_non_null(strstr(buf, "\"path_bound_s\":126.440,"));
    assert_non_null(strstr(buf, "\"combined_bound_s\":126.440,"));
    char want[64];
    snprintf(want, sizeof want, "\"makespan_ratio\":%.4f,", r.makespan_s / 126.44);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, "\"p95_task_ratio\":%.4f,", r.p95_task_s / 126.44);
    assert_non_null(strstr(buf, want));
    free(buf);
    sl_sim_result_free(&r);
    sl_sim_scenario_free(&sc);
}

/* The input bucket starts full, so a minute of input TPM is admitted at once: on the
 * proxy fleet (9 calls of 80,010 tokens and 51 of 2,010: 822,600 uncached, no cache)
 * the token bound is (822,600 - 500,000) / (500,000 / 60) = 38.712 s, and no strategy
 * finishes before either bound. */
static void test_token_bound_counts_the_bucket_full_at_the_start(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("proxy-fleet.yaml", &sc);
    assert_near(sl_sim_lower_bound_s(&sc), 38.712, 1e-9);
    double pb = sl_sim_path_bound_s(&sc, 7);
    assert_true(pb > 0);
    sl_sim_result_t r[16];
    free(run_all(&sc, 7, r));
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
        assert_true(r[i].makespan_s >= 38.712);
        assert_true(r[i].makespan_s >= pb);
    }
    /* Here the tokens bind: the combined bound is the token bound. */
    assert_true(pb < 38.712);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sl_sim_report_json(f, &sc, 7, r, 1);
    fclose(f);
    assert_non_null(strstr(buf, "\"lower_bound_s\":38.712,"));
    assert_non_null(strstr(buf, "\"combined_bound_s\":38.712,"));
    free(buf);
    free_all(r);
    /* A fleet that fits in the first bucket has no token bound at all. */
    sc.provider.input_tpm = 1000000;
    assert_near(sl_sim_lower_bound_s(&sc), 0.0, 1e-12);
    sl_sim_scenario_free(&sc);
}

/* The SDKs' default (maxRetries 2, honouring retry-after): a turn breaks only when a
 * call met three 429s in a row, so on the seed fleet 429s outnumber broken turns
 * three to one or more, where "backoff" breaks a turn at every first 429. */
static void test_sdk_retry_breaks_a_turn_only_at_the_third_429(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("seed-fleet.yaml", &sc);
    sl_sim_result_t r;
    char err[256];
    assert_int_equal(sl_sim_run(&sc, "sdk-retry", 1, NULL, &r, err, sizeof err), 0);
    assert_true(r.http_429 > 0);
    assert_true(r.replans >= 1);
    assert_true(3 * r.replans <= r.http_429);
    assert_int_equal(r.tasks_done, r.tasks_total);
    sl_sim_result_free(&r);
    sl_sim_scenario_free(&sc);
}

/* Bursts every 6 bins of 5 s: period 30 s; the same count spread flat, or too few
 * events, report none. */
/* The highest margin in a run's events (0.85 when it never moved). */
static double highest_margin(const sl_sim_scenario_t *sc, const char *strategy)
{
    char *buf = NULL, err[512];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    sl_sim_result_t res;
    if (sl_sim_run(sc, strategy, 1, f, &res, err, sizeof err) != 0) fail_msg("%s", err);
    fclose(f);
    sl_sim_result_free(&res);
    double top = 0.85;
    for (const char *p = buf; (p = strstr(p, "\"event\":\"margin\"")) != NULL; p++) {
        const char *m = strstr(p, "\"margin\":");
        if (m && atof(m + 9) > top) top = atof(m + 9);
    }
    free(buf);
    return top;
}

static void test_scenario_margin_max_sets_how_far_the_sluice_margin_may_climb(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("outside-traffic.yaml", &sc);
    sc.provider.outside_share = 0;
    assert_true(highest_margin(&sc, "sluice") > 0.855); /* the default 0.97 */
    sc.margin_max = 0.85;
    assert_near(highest_margin(&sc, "sluice"), 0.85, 1e-9);
    sl_sim_scenario_free(&sc);
    const refusal_t bad[] = {{"margin_max: 1.5\nagents: [{name: a}]\n", "margin_max"}};
    assert_refused(bad, 1);
}

/* Whether some `"event":"granted"` line of `log` has timestamp `ts` (as printed, %.3f). */
static bool granted_at(const char *log, const char *ts)
{
    char needle[64];
    snprintf(needle, sizeof needle, "{\"ts\":%s,\"event\":\"granted\"", ts);
    return strstr(log, needle) != NULL;
}

/* The provider writes its rate-limit headers when its answer starts, with the call's
 * max_tokens still held; sluiced's proxy resyncs when they arrive. The simulator does the
 * same: every resync happens at the instant a lease was granted and its call sent, never
 * at a settle (where the snapshot would take back the refunds since). Outside traffic
 * makes the headers disagree with the pool, so resyncs happen. */
static void test_sluice_resyncs_when_the_answer_starts_not_at_the_settle(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("outside-traffic.yaml", &sc);
    char *log = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&log, &len);
    assert_non_null(f);
    sl_sim_result_t r;
    char err[256];
    assert_int_equal(sl_sim_run(&sc, "sluice", 1, f, &r, err, sizeof err), 0);
    fclose(f);
    int resyncs = 0;
    for (const char *p = strstr(log, "\"event\":\"resync\""); p;
         p = strstr(p + 1, "\"event\":\"resync\"")) {
        const char *line = p;
        while (line > log && line[-1] != '\n') line--;
        char ts[32];
        assert_int_equal(sscanf(line, "{\"ts\":%31[0-9.]", ts), 1);
        if (!granted_at(log, ts)) fail_msg("a resync at %s s, when no call started", ts);
        resyncs++;
    }
    assert_true(resyncs > 0);
    free(log);
    sl_sim_result_free(&r);
    sl_sim_scenario_free(&sc);
}

static void test_dominant_period_finds_the_burst_spacing(void **state)
{
    (void)state;
    double wave[60] = {0}, flat[60], sparse[60] = {0};
    for (size_t i = 0; i < 60; i += 6) wave[i] = 5, wave[i + 1] = 2;
    for (size_t i = 0; i < 60; i++) flat[i] = 2;
    sparse[3] = sparse[33] = 4;
    sl_sim_period_t p = sl_sim_dominant_period(wave, 60, 5.0);
    assert_true(p.period_s == 30.0);
    assert_true(p.peak >= 0.25 && p.peak <= 1.0);
    assert_true(p.min_lag_s == 10.0 && p.max_lag_s == 100.0 && p.events == 70);
    assert_true(sl_sim_dominant_period(flat, 60, 5.0).period_s < 0);
    assert_true(sl_sim_dominant_period(sparse, 60, 5.0).period_s < 0);
    assert_true(sl_sim_dominant_period(wave, 11, 5.0).period_s < 0);
}

/* A pool of two keys of unequal tiers (scenarios/two-keys.yaml): sluice sends each call
 * to the key that grants it soonest, so the fleet uses both and meets no 429 on either. */
static void test_a_pool_of_two_keys_uses_both_with_no_429(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    load("two-keys.yaml", &sc);
    assert_int_equal(sc.n_keys, 2);
    assert_int_equal(sc.keys[1].output_tpm, 16000);
    const char *strategies[] = {"sluice", "sluice-learned", "sluice-equal"};
    for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++) {
        sl_sim_result_t r;
        char err[256];
        if (sl_sim_run(&sc, strategies[i], 1, NULL, &r, err, sizeof err) != 0)
            fail_msg("%s", err);
        print_message("%s: big %lld, small %lld calls admitted; 429s %lld / %lld\n",
                      strategies[i], (long long)r.key_admitted[0], (long long)r.key_admitted[1],
                      (long long)r.key_429[0], (long long)r.key_429[1]);
        assert_int_equal(r.n_keys, 2);
        assert_true(r.key_admitted[0] > 0);
        assert_true(r.key_admitted[1] > 0);
        assert_int_equal(r.key_429[0] + r.key_429[1], 0);
        assert_int_equal(r.http_429, 0);
        assert_int_equal(r.tasks_done, r.tasks_total);
        sl_sim_result_free(&r);
    }
    sl_sim_scenario_free(&sc);
}

static void test_a_key_of_a_scenario_names_its_field_when_wrong(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"keys: []\n", "keys: expected a list of 1 to 8 keys"},
        {"keys:\n  - {name: a, output_tpm: -5}\n", "keys[0].output_tpm"},
        {"keys:\n  - {name: a, models: x}\n", "keys[0]: unknown key \"models\""},
        {"keys:\n  - {name: a}\n  - {name: a}\n", "keys[1].name: \"a\" is named twice"},
    };
    static const char base[] = "name: k\nprovider: {input_tpm: 1000, output_tpm: 1000, rpm: 10}\n"
                               "agents:\n  - {name: w, count: 1, turns: 1}\n";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512], err[256];
        snprintf(text, sizeof text, "%s%s", base, bad[i][0]);
        sl_sim_scenario_t sc;
        assert_int_equal(sl_sim_scenario_parse(text, strlen(text), &sc, err, sizeof err), -1);
        if (!strstr(err, bad[i][1])) fail_msg("%s: got \"%s\"", bad[i][0], err);
    }
}

SL_TEST_MAIN(
    cmocka_unit_test(test_same_seed_gives_byte_identical_reports),
    cmocka_unit_test(test_billed_tokens_equal_the_sum_of_call_usages),
    cmocka_unit_test(test_makespan_is_never_below_the_lower_bound),
    cmocka_unit_test(test_limits_far_above_demand_give_no_429s),
    cmocka_unit_test(test_scenario_errors_name_the_field_and_value),
    cmocka_unit_test(test_team_weight_errors_name_the_field_and_value),
    cmocka_unit_test(test_a_key_given_twice_names_the_key),
    cmocka_unit_test(test_sluice_serves_backlogged_teams_by_their_weights),
    cmocka_unit_test(test_same_seed_gives_byte_identical_team_reports),
    cmocka_unit_test(test_the_plot_is_produced_and_not_empty),
    cmocka_unit_test(test_seed_fleet_backoff_has_429s_and_sluice_queues_instead),
    cmocka_unit_test(test_sluice_resyncs_when_the_answer_starts_not_at_the_settle),
    cmocka_unit_test(test_dominant_period_finds_the_burst_spacing),
    cmocka_unit_test(test_scenario_margin_max_sets_how_far_the_sluice_margin_may_climb),
    cmocka_unit_test(test_path_bound_is_exact_on_a_hand_made_chain),
    cmocka_unit_test(test_sdk_retry_breaks_a_turn_only_at_the_third_429),
    cmocka_unit_test(test_token_bound_counts_the_bucket_full_at_the_start),
    cmocka_unit_test(test_json_reports_the_bounds_and_ratios),
    cmocka_unit_test(test_a_pool_of_two_keys_uses_both_with_no_429),
    cmocka_unit_test(test_a_key_of_a_scenario_names_its_field_when_wrong))
