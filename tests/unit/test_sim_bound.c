/* test_sim_bound.c - the simulator's tight and chain bounds (issue 24 item 7), checked by
 * hand on tiny fleets and against every strategy on every shipped scenario; scaling. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sim.h"
#include "sim_harness.h"
#include "test_main.h"

/* Two agents, two calls each, every draw fixed: both start at 0; a call lasts ttft 1 s +
 * 1 output token at 1 token/s = 2 s, then edit 2 s and test 10 s. The ideal run: calls
 * at 0 and 14, tasks done at 28 (the critical path). Its totals: uncached input 2 x
 * (2000 + 1000 written, then 1000) = 8,000; output 4; calls 4. Least finish: from the
 * last call's admission, its first token 1 s + edit 2 + test 10 = 13 s (the output's 1 s of
 * streaming left out: a continued answer's last call streams only its rest). Bounds: input
 * (8000 - 6000) / 100 per s + 13 = 33 s; output (4 < 60: 0) + 13 = 13 s; rpm (4 - 2) /
 * (2/60 per s) + 13 = 73 s; so the tight bound is 73 s, where the old ones said max(20 s
 * tokens, 28 s path) = 28 s. */
static const char tiny[] =
    "name: tiny\n"
    "start_window_s: 0\n"
    "provider: {input_tpm: 6000, output_tpm: 60, rpm: 2, ttft_s: 1, output_tokens_per_s: 1,\n"
    "           latency_spread: 0}\n"
    "agents:\n"
    "  - {name: w, count: 2, turns: 2, prefix_tokens: 2000, turn_tokens: 1000,\n"
    "     output_tokens: 1, max_tokens: 1, read_s: 0, edit_s: 2, test_s: 10,\n"
    "     test_spread: 0}\n";

static void test_tight_bound_by_hand_on_a_tiny_fleet(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    parse_or_fail(tiny, &sc);
    char err[256];
    sl_sim_bounds_t b;
    assert_int_equal(sl_sim_bounds(&sc, 1, &b), 0);
    assert_int_equal(b.ideal_uncached_input_tokens, 8000);
    assert_int_equal(b.ideal_output_tokens, 4);
    assert_int_equal(b.ideal_requests, 4);
    assert_near(b.path_s, 28, 1e-9);
    assert_near(b.least_finish_s, 13, 1e-9);
    assert_near(b.input_s, 33, 1e-9);
    assert_near(b.output_s, 13, 1e-9);
    assert_near(b.rpm_s, 73, 1e-9);
    assert_true(b.tokens_s < 0); /* tokens TPM unlimited */
    assert_near(b.token_s, 20, 1e-9);
    assert_near(b.combined_s, 28, 1e-9);
    assert_near(b.tight_s, 73, 1e-9);
    /* No strategy that finishes does so before 73 s, and the best end 1 s after (the one
     * token of streaming the bound leaves out): the third call at 30 s, the fourth at 60 s,
     * then 14 s more (sdk-retry and rpm-counter, which wait for the request bucket; at 2
     * RPM the others break turns). */
    double best = INFINITY;
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
        sl_sim_result_t r;
        if (sl_sim_run(&sc, sl_sim_strategy_name(i), 1, NULL, &r, err, sizeof err) != 0)
            fail_msg("%s", err);
        if (r.tasks_done < r.tasks_total) {
            sl_sim_result_free(&r);
            continue;
        }
        if (r.makespan_s < 73 - 1e-9)
            fail_msg("%s: makespan %.3f s below the tight bound 73 s", r.strategy, r.makespan_s);
        if (r.makespan_s < best) best = r.makespan_s;
        sl_sim_result_free(&r);
    }
    assert_near(best, 74, 1e-6);
    sl_sim_scenario_free(&sc);
}

/* The chain bound (src/sim/chain.c) where the tight bound is loose: two planners' first
 * calls write a 10,000-token prefix each (11,000 uncached), a reviewer after both sends
 * 100; input TPM 14,000 (233.3 a second, the bucket starts full). Every call lasts ttft 1
 * s + 1 s of streaming, then edit 2 s and test 10 s: the planners end at 14 s, the reviewer
 * at 28 s. Tight bound: input (22,100 - 14,000) / 233.3 + 13 = 47.71 s. But the planners'
 * calls have 13 s of their own task after them (streaming left out) and 13 s of the
 * reviewer's, so both are admitted by the end - 26 s: 26 + (22,000 - 14,000) / 233.3 =
 * 60.29 s. The best schedule admits the second planner at 34.29 s, the reviewer at 48.29 s
 * and ends at 62.29 s (the two seconds of streaming the bound leaves out); sdk-retry,
 * waiting whole seconds of retry-after, ends at 63 s. */
static const char chain[] =
    "name: chain\n"
    "start_window_s: 0\n"
    "provider: {input_tpm: 14000, output_tpm: 60, rpm: 0, ttft_s: 1, output_tokens_per_s: 1,\n"
    "           latency_spread: 0}\n"
    "agents:\n"
    "  - {name: p, count: 2, turns: 1, prefix_tokens: 10000, turn_tokens: 1000,\n"
    "     output_tokens: 1, max_tokens: 1, read_s: 0, edit_s: 2, test_s: 10, test_spread: 0}\n"
    "  - {name: q, count: 1, turns: 1, prefix_tokens: 0, turn_tokens: 100, output_tokens: 1,\n"
    "     max_tokens: 1, read_s: 0, edit_s: 2, test_s: 10, test_spread: 0, after: [p]}\n";

static void test_chain_bound_by_hand_above_the_tight_bound(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    parse_or_fail(chain, &sc);
    char err[256];
    sl_sim_bounds_t b;
    assert_int_equal(sl_sim_bounds(&sc, 1, &b), 0);
    assert_int_equal(b.ideal_uncached_input_tokens, 22100);
    assert_near(b.path_s, 28, 1e-9);
    assert_near(b.input_s, 8100.0 / (14000.0 / 60) + 13, 1e-9);
    assert_near(b.tight_s, b.input_s, 1e-9);
    assert_near(b.chain_s, 26 + 8000.0 / (14000.0 / 60), 1e-9);
    double best = INFINITY;
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
        sl_sim_result_t r;
        if (sl_sim_run(&sc, sl_sim_strategy_name(i), 1, NULL, &r, err, sizeof err) != 0)
            fail_msg("%s", err);
        if (r.tasks_done == r.tasks_total) {
            if (r.makespan_s < b.chain_s - 1e-9)
                fail_msg("%s: makespan %.3f s below the chain bound %.3f s", r.strategy,
                         r.makespan_s, b.chain_s);
            if (r.makespan_s < best) best = r.makespan_s;
        }
        sl_sim_result_free(&r);
    }
    assert_near(best, 63, 1e-6);
    sl_sim_scenario_free(&sc);
}

/* Runs every strategy of `sc` under `seed` and fails when a finished run beats the tight
 * bound or the chain bound; returns the number of finished runs. */
static int check_no_strategy_beats(const sl_sim_scenario_t *sc, uint64_t seed)
{
    sl_sim_bounds_t b;
    assert_int_equal(sl_sim_bounds(sc, seed, &b), 0);
    assert_true(b.tight_s >= b.combined_s - 1e-9 || b.tight_s >= b.path_s);
    /* The ideal run's input includes the repeat-failure turns: above the formula. */
    if (b.input_s >= 0) assert_true(b.input_s - b.least_finish_s >= b.token_s - 1e-9);
    if (b.input_s >= 0) assert_true(b.chain_s >= b.tight_s - 1e-9);
    int finished = 0;
    char err[256];
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
        sl_sim_result_t r;
        if (sl_sim_run(sc, sl_sim_strategy_name(i), seed, NULL, &r, err, sizeof err) != 0)
            fail_msg("%s", err);
        /* A run cut at the duration has no makespan of its own to compare. */
        if (r.tasks_done == r.tasks_total) {
            finished++;
            if (r.makespan_s < b.tight_s - 1e-9)
                fail_msg("%s seed %llu, %s: makespan %.3f s below the tight bound %.3f s",
                         sc->name, (unsigned long long)seed, r.strategy, r.makespan_s,
                         b.tight_s);
            if (r.makespan_s < b.chain_s - 1e-9)
                fail_msg("%s seed %llu, %s: makespan %.3f s below the chain bound %.3f s",
                         sc->name, (unsigned long long)seed, r.strategy, r.makespan_s,
                         b.chain_s);
        }
        sl_sim_result_free(&r);
    }
    return finished;
}

static void test_no_strategy_beats_the_tight_bound_on_any_shipped_scenario(void **state)
{
    (void)state;
    static const char *const names[] = {"seed-fleet.yaml", "scale-200.yaml",
                                        "outside-traffic.yaml", "proxy-fleet.yaml"};
    int finished = 0, runs = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        sl_sim_scenario_t sc;
        load(names[k], &sc);
        for (uint64_t seed = 1; seed <= 5; seed++) {
            finished += check_no_strategy_beats(&sc, seed);
            runs += (int)sl_sim_strategy_count();
        }
        sl_sim_scenario_free(&sc);
    }
    /* Where the quota binds: scale-200 at a tenth of its limits, seed-fleet x10. */
    sl_sim_scenario_t sc;
    char err[256];
    load("scale-200.yaml", &sc);
    assert_int_equal(sl_sim_scenario_scale(&sc, 0.1, 1, 0, err, sizeof err), 0);
    for (uint64_t seed = 1; seed <= 5; seed++, runs += (int)sl_sim_strategy_count())
        finished += check_no_strategy_beats(&sc, seed);
    sl_sim_scenario_free(&sc);
    load("seed-fleet.yaml", &sc);
    assert_int_equal(sl_sim_scenario_scale(&sc, 1, 10, 0, err, sizeof err), 0);
    for (uint64_t seed = 1; seed <= 5; seed++, runs += (int)sl_sim_strategy_count())
        finished += check_no_strategy_beats(&sc, seed);
    sl_sim_scenario_free(&sc);
    /* Nearly every run finishes, so the check is not vacuous. */
    assert_true(finished * 10 >= runs * 9);
}

/* One agent's 40 calls in a row, outputs of 2,500-7,500 tokens under max_tokens 8,192, no
 * limit that binds and no latency spread: the critical path is the whole run. From its
 * 21st call `sluice-learned` sends max_tokens lowered to the group's learned p95 (~7,250),
 * so some answers stop at the cap; the proxy continues them (docs/proxy.md), so the agent
 * still receives, and the provider still streams and bills, the whole answer. A run that
 * dropped the tail finished before the path bound (seed 2: 3,418.1 s against 3,424.6 s,
 * 391 output tokens fewer than the ideal run). */
static const char long_answers[] =
    "name: long-answers\n"
    "duration_s: 20000\n"
    "provider: {input_tpm: 1000000, output_tpm: 1000000, rpm: 1000, ttft_s: 0.5,\n"
    "           output_tokens_per_s: 60, latency_spread: 0}\n"
    "agents:\n"
    "  - {name: writer, turns: 40, prefix_tokens: 2000, turn_tokens: 1000,\n"
    "     output_tokens: 5000, max_tokens: 8192, read_s: 1, edit_s: 1, test_s: 5,\n"
    "     test_spread: 0}\n";

static void test_an_answer_cut_at_the_learned_cap_is_continued_not_dropped(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    parse_or_fail(long_answers, &sc);
    char err[256];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        sl_sim_bounds_t b;
        assert_int_equal(sl_sim_bounds(&sc, seed, &b), 0);
        sl_sim_result_t r;
        if (sl_sim_run(&sc, "sluice-learned", seed, NULL, &r, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(r.tasks_done, r.tasks_total);
        /* Every answer whole: the ideal run's output, and at least its calls. */
        assert_int_equal(r.output_tokens, b.ideal_output_tokens);
        assert_true(r.requests >= b.ideal_requests);
        sl_sim_result_free(&r);
        check_no_strategy_beats(&sc, seed);
    }
    sl_sim_scenario_free(&sc);
}

/* The tokens bucket (OpenAI's combined limit) by hand, with a reviewer after two workers.
 * The ideal run: each worker calls at 0 (2,000 prefix written + 1,000) and at 14 (1,000),
 * done at 28; the reviewer calls at 28 (500), done at 42 (the path). Totals: uncached input
 * 8,500, output 5, calls 5; least finish 1 s first token + 2 s edit + 10 s test = 13 s.
 * Bounds: input (8,500 - 6,000) / 100 + 13 = 38 s; output and rpm (below one bucket) 13 s;
 * tokens (8,505 - 4,000) / (4,000 / 60) + 13 = 80.575 s, the tight bound. */
static const char tokens_fleet[] =
    "name: tokens-fleet\n"
    "start_window_s: 0\n"
    "provider: {input_tpm: 6000, output_tpm: 600, rpm: 60, tokens_tpm: 4000, ttft_s: 1,\n"
    "           output_tokens_per_s: 1, latency_spread: 0}\n"
    "agents:\n"
    "  - {name: w, count: 2, turns: 2, prefix_tokens: 2000, turn_tokens: 1000,\n"
    "     output_tokens: 1, max_tokens: 1, read_s: 0, edit_s: 2, test_s: 10, test_spread: 0}\n"
    "  - {name: r, turns: 1, prefix_tokens: 0, turn_tokens: 500, output_tokens: 1,\n"
    "     max_tokens: 1, read_s: 0, edit_s: 2, test_s: 10, test_spread: 0, after: [w]}\n";

static void test_tokens_bound_by_hand_with_a_reviewer(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    parse_or_fail(tokens_fleet, &sc);
    sl_sim_bounds_t b;
    assert_int_equal(sl_sim_bounds(&sc, 1, &b), 0);
    assert_int_equal(b.ideal_uncached_input_tokens, 8500);
    assert_int_equal(b.ideal_output_tokens, 5);
    assert_int_equal(b.ideal_requests, 5);
    assert_near(b.path_s, 42, 1e-9);
    assert_near(b.least_finish_s, 13, 1e-9);
    assert_near(b.input_s, 38, 1e-9);
    assert_near(b.output_s, 13, 1e-9);
    assert_near(b.rpm_s, 13, 1e-9);
    assert_near(b.tokens_s, 4505.0 / (4000.0 / 60) + 13, 1e-9);
    assert_near(b.tight_s, b.tokens_s, 1e-9);
    for (uint64_t seed = 1; seed <= 3; seed++) assert_true(check_no_strategy_beats(&sc, seed) > 0);
    sl_sim_scenario_free(&sc);
}

static void test_scaling_multiplies_limits_and_fleet_and_stretches_the_run(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    load("scale-200.yaml", &sc);
    assert_int_equal(sl_sim_scenario_scale(&sc, 0.05, 2, 0, err, sizeof err), 0);
    assert_int_equal(sc.provider.input_tpm, 100000);
    assert_int_equal(sc.provider.output_tpm, 20000);
    assert_int_equal(sc.provider.rpm, 200);
    assert_int_equal(sc.provider.tokens_tpm, 0); /* unlimited stays unlimited */
    assert_int_equal(sc.teams, 20);
    assert_near(sc.team_weight[10], 3, 0); /* the second copy weighs as the first */
    assert_near(sc.team_weight[12], 1, 0);
    assert_near(sc.duration_s, 7200 * 40, 1e-6);
    assert_near(sc.limits_scale, 0.05, 1e-12);
    assert_int_equal(sc.demand_scale, 2);
    assert_int_equal(sl_sim_scenario_scale(&sc, 1, 1, 1234, err, sizeof err), 0);
    assert_near(sc.duration_s, 1234, 0);
    /* Bad values name the option and the value, and change nothing. */
    assert_int_equal(sl_sim_scenario_scale(&sc, 0, 1, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "--limits-scale: 0 "));
    assert_int_equal(sl_sim_scenario_scale(&sc, 1, 0, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "--demand-scale: 0 "));
    assert_int_equal(sl_sim_scenario_scale(&sc, 1, 1, -5, err, sizeof err), -1);
    assert_non_null(strstr(err, "--duration: -5 "));
    assert_int_equal(sc.teams, 20);
    assert_int_equal(sc.provider.input_tpm, 100000);
    sl_sim_scenario_free(&sc);
}

/* The cache clock (docs/design.md, "The cache clock starts with the call"): at 1/20 of
 * scale-200's limits, plain sluice met 3.8 429s a run (seeds 1-5) with the engine counting
 * a cache's life from the settle, 1.4 counting from the grant, and none once a queued
 * request whose cache lapsed before its grant is charged the prefix. */
static void test_sluice_meets_no_429_at_a_twentieth_of_scale_200(void **state)
{
    (void)state;
    sl_sim_scenario_t sc;
    char err[256];
    load("scale-200.yaml", &sc);
    assert_int_equal(sl_sim_scenario_scale(&sc, 0.05, 1, 0, err, sizeof err), 0);
    for (uint64_t seed = 1; seed <= 5; seed++) {
        sl_sim_result_t r;
        if (sl_sim_run(&sc, "sluice", seed, NULL, &r, err, sizeof err) != 0) fail_msg("%s", err);
        assert_int_equal(r.tasks_done, r.tasks_total);
        if (r.http_429 != 0) fail_msg("seed %llu: %lld 429s", (unsigned long long)seed,
                                      (long long)r.http_429);
        sl_sim_result_free(&r);
    }
    sl_sim_scenario_free(&sc);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_tight_bound_by_hand_on_a_tiny_fleet),
    cmocka_unit_test(test_chain_bound_by_hand_above_the_tight_bound),
    cmocka_unit_test(test_no_strategy_beats_the_tight_bound_on_any_shipped_scenario),
    cmocka_unit_test(test_an_answer_cut_at_the_learned_cap_is_continued_not_dropped),
    cmocka_unit_test(test_tokens_bound_by_hand_with_a_reviewer),
    cmocka_unit_test(test_scaling_multiplies_limits_and_fleet_and_stretches_the_run),
    cmocka_unit_test(test_sluice_meets_no_429_at_a_twentieth_of_scale_200))
