/* sluice sim: runs a fleet scenario under one or all strategies and reports them. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "sim.h"

static void sim_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice sim --scenario FILE [--strategy NAME|all] [--seed N] [--out DIR]\n"
            "                  [--json] [--limits-scale F] [--demand-scale N] [--duration S]\n\n"
            "Simulates the fleet of FILE (YAML, see docs/sim.md) on a virtual clock against\n"
            "the provider model, once per strategy, and prints one row per strategy: 429s,\n"
            "429 rate, tokens per finished task, p50/p95 task time, critical-path wait,\n"
            "input- and output-TPM utilisation, makespan, waves of 429s, the makespan and p95\n"
            "over the lower bound (the larger of the token and critical-path bounds), the\n"
            "makespan over the tight bound (per bucket, the ideal run's totals plus the least\n"
            "finish; docs/sim.md) and the prefixes written again per task.\n\n"
            "  --strategy NAME  naive, sdk-retry, backoff, semaphore, rpm-counter,\n"
            "                   sluice-equal, sluice, sluice-learned\n"
            "                   or all (default)\n"
            "  --seed N         PRNG seed (default: the scenario's); same seed, same bytes\n"
            "  --out DIR        also write DIR/timeseries.csv, DIR/events-STRATEGY.jsonl and\n"
            "                   DIR/429s.png (needs gnuplot)\n"
            "  --json           print the report as JSON instead of the table\n"
            "  --limits-scale F every provider limit (input, output, tokens TPM, RPM) x F\n"
            "  --demand-scale N the fleet repeated N times, as teams of the scenario's fleet\n"
            "  --duration S     stop the run at S simulated seconds (default: the scenario's,\n"
            "                   x N / F when that is above 1)\n\n"
            "exit codes: 0 ok, 1 invalid scenario or failed run, 2 usage error\n");
}

/* A finite number (the ranges are checked by sl_sim_scenario_scale, naming the option). */
static int parse_number(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int bad_value(const char *option, const char *value)
{
    fprintf(stderr, "sluice sim: %s: \"%s\" is not a valid value (--limits-scale: 0.0001-10000, "
                    "--demand-scale: an integer 1-1000, --duration: seconds >= 1)\n", option, value);
    return SL_EXIT_USAGE;
}

static int parse_seed(const char *s, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-') return -1;
    *out = v;
    return 0;
}

int sl_cli_sim(int argc, char **argv)
{
    const char *scenario = NULL, *strategy = "all", *out_dir = NULL;
    bool json = false, have_seed = false;
    uint64_t seed = 0;
    double limits_scale = 1, demand_scale = 1, duration_s = 0;
    const sl_cli_text_option_t texts[] = {
        {"--scenario", &scenario}, {"--strategy", &strategy}, {"--out", &out_dir}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sim_usage(stdout);
            return SL_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (sl_cli_text_option(texts, sizeof texts / sizeof *texts, argc, argv, &i)) {
            continue;
        } else if (!strcmp(a, "--limits-scale") && has_val) {
            if (parse_number(argv[++i], &limits_scale) != 0) return bad_value(a, argv[i]);
        } else if (!strcmp(a, "--demand-scale") && has_val) {
            if (parse_number(argv[++i], &demand_scale) != 0 || demand_scale != floor(demand_scale) ||
                demand_scale < 1 || demand_scale > 1000)
                return bad_value(a, argv[i]);
        } else if (!strcmp(a, "--duration") && has_val) {
            /* 0 would mean "the default" to sl_sim_scenario_scale: refuse it here. */
            if (parse_number(argv[++i], &duration_s) != 0 || duration_s < 1)
                return bad_value(a, argv[i]);
        } else if (!strcmp(a, "--seed") && has_val) {
            if (parse_seed(argv[++i], &seed) != 0) {
                fprintf(stderr, "sluice sim: --seed: \"%s\" is not a non-negative integer\n", argv[i]);
                return SL_EXIT_USAGE;
            }
            have_seed = true;
        } else {
            fprintf(stderr, "sluice sim: unknown option or missing value \"%s\"\n", a);
            sim_usage(stderr);
            return SL_EXIT_USAGE;
        }
    }
    if (!scenario) {
        fprintf(stderr, "sluice sim: --scenario FILE is required\n");
        sim_usage(stderr);
        return SL_EXIT_USAGE;
    }
    size_t n = sl_sim_strategy_count();
    const char *names[16];
    size_t n_run = 0;
    if (!strcmp(strategy, "all")) {
        for (size_t i = 0; i < n; i++) names[n_run++] = sl_sim_strategy_name(i);
    } else {
        for (size_t i = 0; i < n; i++)
            if (!strcmp(strategy, sl_sim_strategy_name(i))) names[n_run++] = strategy;
        if (!n_run) {
            fprintf(stderr, "sluice sim: --strategy: unknown strategy \"%s\" (known:", strategy);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %s", sl_sim_strategy_name(i));
            fprintf(stderr, ", all)\n");
            return SL_EXIT_USAGE;
        }
    }
    char err[512];
    sl_sim_scenario_t sc;
    if (sl_sim_scenario_load(scenario, &sc, err, sizeof err) != 0) {
        fprintf(stderr, "sluice sim: %s\n", err);
        return SL_EXIT_FAILURE;
    }
    if (sl_sim_scenario_scale(&sc, limits_scale, (int)demand_scale, duration_s, err,
                              sizeof err) != 0) {
        fprintf(stderr, "sluice sim: %s\n", err);
        sl_sim_scenario_free(&sc);
        return SL_EXIT_USAGE;
    }
    if (!have_seed) seed = sc.seed;
    if (out_dir && mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "sluice sim: --out: cannot create \"%s\": %s\n", out_dir, strerror(errno));
        sl_sim_scenario_free(&sc);
        return SL_EXIT_FAILURE;
    }
    sl_sim_result_t res[16];
    size_t done = 0;
    int rc = SL_EXIT_OK;
    for (size_t i = 0; i < n_run; i++) {
        FILE *events = NULL;
        if (out_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/events-%s.jsonl", out_dir, names[i]);
            events = fopen(path, "w");
            if (!events) {
                fprintf(stderr, "sluice sim: %s: %s\n", path, strerror(errno));
                rc = SL_EXIT_FAILURE;
                break;
            }
        }
        int r = sl_sim_run(&sc, names[i], seed, events, &res[done], err, sizeof err);
        if (events) fclose(events);
        if (r != 0) {
            fprintf(stderr, "sluice sim: %s\n", err);
            rc = SL_EXIT_FAILURE;
            break;
        }
        done++;
    }
    if (rc == SL_EXIT_OK) {
        if (json) sl_sim_report_json(stdout, &sc, seed, res, done);
        else sl_sim_report_table(stdout, &sc, seed, res, done);
    }
    if (rc == SL_EXIT_OK && out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/timeseries.csv", out_dir);
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "sluice sim: %s: %s\n", path, strerror(errno));
            rc = SL_EXIT_FAILURE;
        } else {
            sl_sim_report_csv(f, res, done);
            if (fclose(f) != 0) rc = SL_EXIT_FAILURE;
            if (rc == SL_EXIT_OK && sl_sim_plot(out_dir, res, done, err, sizeof err) != 0) {
                fprintf(stderr, "sluice sim: %s\n", err);
                rc = SL_EXIT_FAILURE;
            }
        }
    }
    for (size_t i = 0; i < done; i++) sl_sim_result_free(&res[i]);
    sl_sim_scenario_free(&sc);
    return rc;
}
