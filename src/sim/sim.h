/* sim.h - sluice sim: a deterministic discrete-event simulator of an agent fleet.
 *
 * A scenario (YAML, docs/sim.md) describes groups of agents that run the real
 * coding-agent loop (read files -> model call -> apply edit -> run tests -> model
 * call ...), a task graph between the groups, and the provider's limits. One run
 * plays the scenario under one strategy against the provider model of
 * src/provider/ on a virtual clock; the sluice strategies drive the real engine
 * (libsluice). Every random draw comes from PRNGs seeded by the run's seed, so the
 * same scenario, strategy and seed give byte-identical results.
 */
#ifndef SLUICE_SIM_H
#define SLUICE_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "provider.h"

#define SL_SIM_NAME_MAX 48
#define SL_SIM_AFTER_MAX 8

/* One group of identical agents (per team). */
typedef struct sl_sim_group {
    char name[SL_SIM_NAME_MAX];   /* unique; agents are named NAME.N (TEAM.NAME.N) */
    char role[16];                /* planner, reviewer or worker (engine roles) */
    int count;                    /* agents in the group, per team */
    int tasks;                    /* tasks each agent does, one after another */
    int turns;                    /* model calls per task (one per loop) */
    int64_t prefix_tokens;        /* cached prefix per call: system prompt, plan, files */
    int64_t turn_tokens;          /* uncached tail per call: new tool output */
    int64_t output_tokens;        /* mean output per call (spread x0.5..x1.5) */
    int64_t max_tokens;           /* max_tokens of each call */
    double read_s;                /* reading files before the first call */
    double edit_s;                /* applying an edit after a call */
    double test_s;                /* running the tests after an edit */
    double test_spread;           /* relative spread of test_s (uniform +-) */
    double repeat_failure;        /* chance a test run starts a loop of identical failures */
    char after[SL_SIM_AFTER_MAX][SL_SIM_NAME_MAX]; /* groups whose tasks come first */
    int n_after;
} sl_sim_group_t;

/* A pool of several keys (design.md, "A pool of several keys"): each key is a provider
 * of its own with these limits and the `provider:` section's other settings. */
#define SL_SIM_KEYS_MAX 8
typedef struct sl_sim_key {
    char name[32];
    int64_t input_tpm, output_tpm, rpm, tokens_tpm; /* -1 while parsing: the provider's */
} sl_sim_key_t;

typedef struct sl_sim_scenario {
    char name[64];
    uint64_t seed;                /* used when the command line gives none */
    double duration_s;            /* the run stops here even with tasks left */
    double start_window_s;        /* agents of the push start within this window */
    double harness_timeout_s;     /* without a checkpoint, a wait longer than this
                                     breaks the turn (0 = never) */
    double replan_min, replan_max; /* a broken turn costs U[min,max] x the failed call */
    double loop_continue;         /* chance a loop of identical failures goes on */
    double estimate_noise;        /* the agents' local count is off by up to +-this */
    double margin_max;            /* the sluice strategies' pool margin_max (0.97; the
                                     margin_start 0.85 or below: no climb) */
    int teams;                    /* the groups are repeated per team */
    double *team_weight;          /* [teams]: team k's weight (team_weights; NULL = all 1) */
    int n_team_weights;           /* weights the list gave (the rest are 1) */
    sl_provider_config_t provider;
    sl_sim_key_t keys[SL_SIM_KEYS_MAX]; /* `keys:`; the provider's limits are then unused */
    int n_keys;                   /* 0: one key with the provider's limits */
    sl_sim_group_t *groups;
    int n_groups;
    double limits_scale;          /* what sl_sim_scenario_scale() applied (1: as written) */
    int demand_scale;             /* fleet copies (1: as written) */
} sl_sim_scenario_t;

/* Parses a scenario from YAML text. Returns 0, or -1 with a message naming the
 * field and the value in `err`. Free with sl_sim_scenario_free(). */
int sl_sim_scenario_parse(const char *text, size_t len, sl_sim_scenario_t *out, char *err,
                          size_t errlen);

/* Reads and parses `path`. Returns 0 or -1 with a message in `err`. */
int sl_sim_scenario_load(const char *path, sl_sim_scenario_t *out, char *err, size_t errlen);

void sl_sim_scenario_free(sl_sim_scenario_t *sc);

/* Scales a parsed scenario in place (scale.c): every provider limit (input, output,
 * tokens TPM, RPM; and the outside user's request rate) x `limits_scale` (rounded, at
 * least 1; unlimited stays unlimited), the fleet repeated `demand_scale` times as teams
 * (team k weighs what team k mod teams weighed), and the duration set to `duration_s`,
 * or when that is 0 to the scenario's x max(1, demand_scale / limits_scale). Returns 0,
 * or -1 with a message naming the option and the value (limits_scale in [1e-4, 1e4],
 * demand_scale in [1, 1000], duration_s 0 or in [1, 1e9]); `sc` is unchanged then. */
int sl_sim_scenario_scale(sl_sim_scenario_t *sc, double limits_scale, int demand_scale,
                          double duration_s, char *err, size_t errlen);

/* The makespan no strategy can beat on tokens alone: the total uncached input tokens
 * of the ideal run (each task's prefix written once, every tail once, no failures)
 * less the input bucket's capacity (it starts full, so one input TPM is admitted at
 * once), divided by the refill rate (input TPM / 60 per second); 0 when that is not
 * positive or input TPM is not limited. */
double sl_sim_lower_bound_s(const sl_sim_scenario_t *sc);

/* The makespan no strategy can beat on the task graph alone: the longest
 * dependency chain with every model call served the moment it is wanted. Exactly:
 * the makespan of the ideal run (bound.c) - the scenario's fleet with `seed`, so the
 * same start offsets, test times, output sizes and loops of identical failures that
 * every strategy meets, on a provider without limits or outside traffic whose every
 * latency is the shortest it draws (ttft, prefill and streaming x (1 -
 * latency_spread)). Not cut at duration_s. Returns -1 when out of memory. */
double sl_sim_path_bound_s(const sl_sim_scenario_t *sc, uint64_t seed);

/* Every lower bound of one scenario and seed (bound.c, docs/sim.md "The lower bounds").
 * The bucket bounds come from the ideal run (the path bound's): its totals are the least
 * any run of the same fleet and seed bills (every call it makes, repeat-failure turns
 * included, caches no colder), and the last call a bucket admits cannot come before
 * (total - the bucket's size) / its refill, nor can the run end sooner than the least
 * time any task takes from its last call's admission to its end. */
typedef struct sl_sim_bounds {
    double token_s;        /* sl_sim_lower_bound_s(): the formula, without repeat failures */
    double path_s;         /* sl_sim_path_bound_s(); -1 when out of memory */
    double combined_s;     /* max(token_s, path_s): the `mk/bnd` denominator */
    double least_finish_s; /* least time from a task's last call's admission to its end */
    double input_s;        /* (ideal uncached input - input TPM) / (input TPM / 60) +
                              least_finish_s; -1 when input TPM is unlimited */
    double output_s;       /* the same with the output billed and output TPM */
    double rpm_s;          /* the same with the calls and RPM */
    double tokens_s;       /* the same with input + output and tokens TPM */
    double tight_s;        /* the largest of path_s and the four above */
    int64_t ideal_uncached_input_tokens, ideal_output_tokens, ideal_requests;
    double chain_s;        /* the chain bound (chain.c, docs/sim.md "The chain bound"): the
                              larger of tight_s and the chain term (the input the calls with
                              at least theta of work after them bill is admitted by makespan
                              - theta, for the worst theta); -1 when input TPM is unlimited.
                              Reported beside tight_s, which keeps its definition */
} sl_sim_bounds_t;

/* Fills `out` with every bound of `sc` under `seed` (one ideal run). Returns 0, or -1
 * when out of memory (every field is then -1). */
int sl_sim_bounds(const sl_sim_scenario_t *sc, uint64_t seed, sl_sim_bounds_t *out);

/* Number of strategies and their names, in report order. */
size_t sl_sim_strategy_count(void);
const char *sl_sim_strategy_name(size_t i);

#define SL_SIM_BIN_S 5.0

/* The dominant period of a binned series, from sl_sim_dominant_period(). */
typedef struct sl_sim_period {
    double period_s;   /* lag of the autocorrelation peak, in seconds; < 0 = no period */
    double peak;       /* the autocorrelation there (0 when nothing was searched) */
    double bin_s;      /* the bin width the series was counted in */
    double min_lag_s, max_lag_s; /* the lags searched: 2 bins to a third of the series */
    double events;     /* the series' total */
} sl_sim_period_t;

/* The lag (2 bins to n/3 bins) where the autocorrelation of counts[0..n) peaks,
 * reported when the peak is at least 0.25, the series has at least 12 bins and 10
 * events in all; otherwise period_s < 0. Pure: no allocation, no state. */
sl_sim_period_t sl_sim_dominant_period(const double *counts, size_t n, double bin_s);

/* One 5-second bin of a run's time series. */
typedef struct sl_sim_bin {
    int64_t requests;             /* calls sent to the provider */
    int64_t http_429;
    int64_t uncached_input_tokens; /* input + cache creation billed */
    int64_t output_tokens;
    int64_t tasks_done;           /* tasks finished in this bin */
    int64_t waiting;              /* agents waiting to send a call at the bin's end */
} sl_sim_bin_t;

/* One team of a run (teams.c): its share of what was served while every team was
 * backlogged (had an agent waiting to send a call), against its weight. */
typedef struct sl_sim_team_stat {
    double weight;
    int64_t tokens_backlogged;    /* uncached input + output of the calls it sent while
                                     every team was backlogged */
    double share;                 /* its fraction of those tokens over all teams */
    double weight_share;          /* its weight over the sum of the weights */
    double p95_task_s;            /* of its finished tasks */
    int64_t tasks_done;
} sl_sim_team_stat_t;

typedef struct sl_sim_result {
    char strategy[24];
    int64_t requests;
    int64_t http_429;
    double rate_429;              /* 429s / requests */
    int64_t tokens_billed;        /* provider: input + cache creation + cache read + output */
    int64_t tokens_usage_sum;     /* the same summed from the calls' usage */
    int64_t uncached_input_tokens;
    int64_t output_tokens;        /* output billed */
    int64_t prefix_rewrites;      /* cache writes of a task's prefix written before in the
                                     run (lapsed while waiting, or a rebuilt context) */
    double prefix_rewrites_per_task; /* over every task of the fleet */
    int64_t replans;              /* broken turns (re-read, re-test, re-plan) */
    double tokens_per_task;
    double p50_task_s, p95_task_s;
    double critical_path_wait_s;
    double input_tpm_utilization;
    double output_tpm_utilization; /* output billed / (output TPM x makespan); 0 = unlimited */
    double makespan_s;
    int64_t tasks_done, tasks_total;
    double wave_period_s;         /* dominant period of the 429 series; < 0 = none */
    sl_sim_bin_t *bins;           /* owned; free with sl_sim_result_free() */
    size_t n_bins;
    sl_sim_team_stat_t *teams;    /* [n_teams] when the scenario has 2 or more teams; owned */
    int n_teams;
    double all_backlogged_s;      /* time every team was backlogged at once */
    int n_keys;                   /* the scenario's keys (1 when it names none) */
    int64_t key_admitted[SL_SIM_KEYS_MAX]; /* calls each key's provider admitted */
    int64_t key_429[SL_SIM_KEYS_MAX];      /* and answered 429 */
} sl_sim_result_t;

/* Runs scenario `sc` under `strategy` with `seed`. `events` (may be NULL) receives
 * the JSON-lines event log. Returns 0, or -1 with a message in `err` (unknown
 * strategy, a call that can never fit the pool, out of memory). */
int sl_sim_run(const sl_sim_scenario_t *sc, const char *strategy, uint64_t seed, FILE *events,
               sl_sim_result_t *out, char *err, size_t errlen);

void sl_sim_result_free(sl_sim_result_t *r);

/* The report table (fixed-width text). */
void sl_sim_report_table(FILE *out, const sl_sim_scenario_t *sc, uint64_t seed,
                         const sl_sim_result_t *r, size_t n);

/* The JSON report: {"scenario","seed","lower_bound_s","strategies":[...]} and a newline. */
void sl_sim_report_json(FILE *out, const sl_sim_scenario_t *sc, uint64_t seed,
                        const sl_sim_result_t *r, size_t n);

/* The teams' table (teams.c): per strategy, each team's share of the tokens served
 * while every team was backlogged against its weight's share, and the worst team's p95
 * task time against the other teams'. Prints nothing for a scenario of one team. */
void sl_sim_report_teams_table(FILE *out, const sl_sim_scenario_t *sc, const sl_sim_result_t *r,
                               size_t n);

/* The same as JSON fields of one strategy's object: `,"all_backlogged_s":...,"teams":[...],
 * "worst_team_p95_s":...,"other_teams_p95_s":...`; nothing for one team. */
void sl_sim_report_teams_json(FILE *out, const sl_sim_result_t *s);

/* Writes the time series of every run as CSV (one row per strategy and bin). */
void sl_sim_report_csv(FILE *out, const sl_sim_result_t *r, size_t n);

/* Draws DIR/429s.png with gnuplot from DIR/timeseries.csv (written by the caller)
 * through a script DIR/429s.gnuplot: 429s per 5 s, one panel per strategy.
 * Returns 0, or -1 with a message (gnuplot missing or failing). */
int sl_sim_plot(const char *dir, const sl_sim_result_t *r, size_t n, char *err, size_t errlen);

#endif
