/* report.c - the simulator's outputs: table, JSON, CSV time series and the gnuplot
 * picture. Every number is printed with a fixed format so that the same run gives
 * the same bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "sim.h"

static int64_t total_agents(const sl_sim_scenario_t *sc)
{
    int64_t n = 0;
    for (int g = 0; g < sc->n_groups; g++) n += sc->groups[g].count;
    return n * sc->teams;
}

/* x / bound, or -1 (printed as "-" or null) when the bound is not positive. */
static double ratio_to(double x, double bound)
{
    return bound > 0 ? x / bound : -1;
}

/* A bound in seconds, or "-" when it does not apply (an unlimited bucket). */
static const char *secs(char *buf, size_t cap, double v)
{
    if (v < 0) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.1f s", v);
    return buf;
}

static void print_ratio(char *buf, size_t cap, double x, double bound)
{
    if (bound > 0) snprintf(buf, cap, "%.2f", x / bound);
    else snprintf(buf, cap, "-");
}

/* A pool of several keys: the calls each key's provider admitted and refused 429. */
static void keys_table(FILE *out, const sl_sim_scenario_t *sc, const sl_sim_result_t *r, size_t n)
{
    if (sc->n_keys == 0) return;
    fprintf(out, "\nkeys (admitted / 429s):\n");
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%-13s", r[i].strategy);
        for (int k = 0; k < r[i].n_keys; k++)
            fprintf(out, "  %s %lld / %lld", sc->keys[k].name, (long long)r[i].key_admitted[k],
                    (long long)r[i].key_429[k]);
        fputc('\n', out);
    }
}

static void keys_json(FILE *out, const sl_sim_scenario_t *sc, const sl_sim_result_t *s)
{
    if (sc->n_keys == 0) return;
    fputs(",\"keys\":[", out);
    for (int k = 0; k < s->n_keys; k++)
        fprintf(out, "%s{\"name\":\"%s\",\"admitted\":%lld,\"http_429\":%lld}", k ? "," : "",
                sc->keys[k].name, (long long)s->key_admitted[k], (long long)s->key_429[k]);
    fputc(']', out);
}

void sl_sim_report_table(FILE *out, const sl_sim_scenario_t *sc, uint64_t seed,
                         const sl_sim_result_t *r, size_t n)
{
    sl_sim_bounds_t b;
    sl_sim_bounds(sc, seed, &b);
    fprintf(out, "scenario %s  seed %llu  agents %lld  tasks %lld\n", sc->name,
            (unsigned long long)seed, (long long)total_agents(sc),
            (long long)(n ? r[0].tasks_total : 0));
    if (sc->limits_scale != 1 || sc->demand_scale != 1)
        fprintf(out, "scaled: limits x%g  demand x%d  duration %.0f s\n", sc->limits_scale,
                sc->demand_scale, sc->duration_s);
    fprintf(out, "lower bounds: tokens %.1f s  critical path %.1f s  combined %.1f s\n",
            b.token_s, b.path_s, b.combined_s);
    char in[32], o[32], rpm[32], tok[32];
    fprintf(out,
            "tight bound %.1f s: the largest of the critical path and, with the least "
            "finish %.1f s,\n  input %s  output %s  rpm %s  tokens %s\n\n",
            b.tight_s, b.least_finish_s, secs(in, sizeof in, b.input_s),
            secs(o, sizeof o, b.output_s), secs(rpm, sizeof rpm, b.rpm_s),
            secs(tok, sizeof tok, b.tokens_s));
    if (b.chain_s >= 0) {
        fprintf(out, "chain bound %.1f s: the input of the calls with theta of work after them,\n"
                     "  admitted by the end - theta (docs/sim.md); makespan over it:",
                b.chain_s);
        for (size_t i = 0; i < n; i++)
            fprintf(out, " %s %.2f", r[i].strategy, r[i].makespan_s / b.chain_s);
        fputs("\n\n", out);
    }
    fprintf(out,
            "%-13s %6s %7s %11s %9s %9s %10s %6s %6s %9s %11s %8s %8s %7s %7s %8s %9s\n",
            "strategy", "429s", "429 %", "tokens/task", "p50 task", "p95 task", "crit wait",
            "ITPM", "OTPM", "makespan", "done", "replans", "waves", "mk/bnd", "p95/bnd",
            "mk/tight", "rewr/task");
    for (size_t i = 0; i < n; i++) {
        const sl_sim_result_t *s = &r[i];
        char done[32], waves[16];
        snprintf(done, sizeof done, "%lld/%lld", (long long)s->tasks_done, (long long)s->tasks_total);
        if (s->wave_period_s > 0) snprintf(waves, sizeof waves, "%.0f s", s->wave_period_s);
        else snprintf(waves, sizeof waves, "-");
        char mk[16], p95[16], tight[16];
        print_ratio(mk, sizeof mk, s->makespan_s, b.combined_s);
        print_ratio(p95, sizeof p95, s->p95_task_s, b.combined_s);
        print_ratio(tight, sizeof tight, s->makespan_s, b.tight_s);
        fprintf(out,
                "%-13s %6lld %6.2f%% %11.0f %8.0fs %8.0fs %9.0fs %5.0f%% %5.0f%% %8.0fs %11s "
                "%8lld %8s %7s %7s %8s %9.2f\n",
                s->strategy, (long long)s->http_429, 100.0 * s->rate_429, s->tokens_per_task,
                s->p50_task_s, s->p95_task_s, s->critical_path_wait_s,
                100.0 * s->input_tpm_utilization, 100.0 * s->output_tpm_utilization,
                s->makespan_s, done, (long long)s->replans, waves, mk, p95, tight,
                s->prefix_rewrites_per_task);
    }
    fprintf(out, "\n429 %%: 429s per request sent. tokens/task: every token billed (input, cache\n"
                 "writes and reads, output) per finished task. crit wait: seconds blocked tasks\n"
                 "spent waiting on an upstream task's model call. ITPM, OTPM: uncached input and\n"
                 "output billed over the TPM x makespan. waves: dominant period of 429s per 5 s.\n"
                 "bounds: tokens = the ideal run's uncached input / input TPM; critical path =\n"
                 "the longest task chain with every call served at once at its shortest\n"
                 "latency; combined = the larger. mk/bnd, p95/bnd: makespan and p95 task time\n"
                 "over it. tight: each bucket's bound from the ideal run's totals (repeat\n"
                 "failures included) plus the least time from a task's last call to its end;\n"
                 "mk/tight: makespan over it. rewr/task: cache writes of a prefix already\n"
                 "written, per task. A run that is not done/all was cut at the duration: its\n"
                 "makespan and ratios are lower bounds of its own.\n");
    sl_sim_report_teams_table(out, sc, r, n);
    keys_table(out, sc, r, n);
}

static void json_number(FILE *out, double v, const char *fmt)
{
    if (v < 0) fputs("null", out);
    else fprintf(out, fmt, v);
}

void sl_sim_report_json(FILE *out, const sl_sim_scenario_t *sc, uint64_t seed,
                        const sl_sim_result_t *r, size_t n)
{
    sl_sim_bounds_t b;
    sl_sim_bounds(sc, seed, &b);
    fprintf(out, "{\"scenario\":\"%s\",\"seed\":%llu,\"lower_bound_s\":%.3f,\"path_bound_s\":",
            sc->name, (unsigned long long)seed, b.token_s);
    json_number(out, b.path_s, "%.3f");
    fprintf(out, ",\"combined_bound_s\":%.3f,\"tight_bound_s\":", b.combined_s);
    json_number(out, b.tight_s, "%.3f");
    const struct {
        const char *key;
        double v;
    } parts[] = {{"least_finish_s", b.least_finish_s}, {"input_bound_s", b.input_s},
                 {"output_bound_s", b.output_s},       {"rpm_bound_s", b.rpm_s},
                 {"tokens_bound_s", b.tokens_s},       {"chain_bound_s", b.chain_s}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        fprintf(out, ",\"%s\":", parts[i].key);
        json_number(out, parts[i].v, "%.3f");
    }
    fprintf(out, ",\"limits_scale\":%g,\"demand_scale\":%d,\"duration_s\":%.3f,\"strategies\":[",
            sc->limits_scale, sc->demand_scale, sc->duration_s);
    for (size_t i = 0; i < n; i++) {
        const sl_sim_result_t *s = &r[i];
        fprintf(out,
                "%s{\"name\":\"%s\",\"http_429\":%lld,\"rate_429\":%.6f,\"tokens_per_task\":%.1f,"
                "\"p50_task_s\":%.3f,\"p95_task_s\":%.3f,\"critical_path_wait_s\":%.3f,"
                "\"input_tpm_utilization\":%.6f,\"makespan_s\":%.3f,\"tasks_done\":%lld,"
                "\"wave_period_s\":",
                i ? "," : "", s->strategy, (long long)s->http_429, s->rate_429,
                s->tokens_per_task, s->p50_task_s, s->p95_task_s, s->critical_path_wait_s,
                s->input_tpm_utilization, s->makespan_s, (long long)s->tasks_done);
        json_number(out, s->wave_period_s, "%.1f");
        fprintf(out, ",\"requests\":%lld,\"tokens_billed\":%lld,\"replans\":%lld",
                (long long)s->requests, (long long)s->tokens_billed, (long long)s->replans);
        fputs(",\"makespan_ratio\":", out);
        json_number(out, ratio_to(s->makespan_s, b.combined_s), "%.4f");
        fputs(",\"p95_task_ratio\":", out);
        json_number(out, ratio_to(s->p95_task_s, b.combined_s), "%.4f");
        fputs(",\"makespan_tight_ratio\":", out);
        json_number(out, ratio_to(s->makespan_s, b.tight_s), "%.4f");
        fputs(",\"makespan_chain_ratio\":", out);
        json_number(out, ratio_to(s->makespan_s, b.chain_s), "%.4f");
        fprintf(out,
                ",\"tasks_total\":%lld,\"output_tpm_utilization\":%.6f,"
                "\"uncached_input_tokens\":%lld,\"output_tokens\":%lld,\"prefix_rewrites\":%lld,"
                "\"prefix_rewrites_per_task\":%.4f",
                (long long)s->tasks_total, s->output_tpm_utilization,
                (long long)s->uncached_input_tokens, (long long)s->output_tokens,
                (long long)s->prefix_rewrites, s->prefix_rewrites_per_task);
        sl_sim_report_teams_json(out, s);
        keys_json(out, sc, s);
        fputc('}', out);
    }
    fputs("]}\n", out);
}

void sl_sim_report_csv(FILE *out, const sl_sim_result_t *r, size_t n)
{
    fputs("strategy,t_s,requests,http_429,uncached_input_tokens,output_tokens,tasks_done,"
          "waiting\n",
          out);
    for (size_t i = 0; i < n; i++) {
        for (size_t b = 0; b < r[i].n_bins; b++) {
            const sl_sim_bin_t *x = &r[i].bins[b];
            fprintf(out, "%s,%.0f,%lld,%lld,%lld,%lld,%lld,%lld\n", r[i].strategy,
                    (double)b * SL_SIM_BIN_S, (long long)x->requests, (long long)x->http_429,
                    (long long)x->uncached_input_tokens, (long long)x->output_tokens,
                    (long long)x->tasks_done, (long long)x->waiting);
        }
    }
}

int sl_sim_plot(const char *dir, const sl_sim_result_t *r, size_t n, char *err, size_t errlen)
{
    char script[4096], png[4096], csv[4096];
    snprintf(script, sizeof script, "%s/429s.gnuplot", dir);
    snprintf(png, sizeof png, "%s/429s.png", dir);
    snprintf(csv, sizeof csv, "%s/timeseries.csv", dir);
    if (strchr(dir, '\'') || strchr(dir, '"')) {
        snprintf(err, errlen, "--out: \"%s\": quotes are not allowed in the directory name", dir);
        return -1;
    }
    FILE *f = fopen(script, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", script, strerror(errno));
        return -1;
    }
    double xmax = 0;
    int64_t ymax = 1;
    for (size_t i = 0; i < n; i++) {
        if ((double)r[i].n_bins * SL_SIM_BIN_S > xmax) xmax = (double)r[i].n_bins * SL_SIM_BIN_S;
        for (size_t b = 0; b < r[i].n_bins; b++)
            if (r[i].bins[b].http_429 > ymax) ymax = r[i].bins[b].http_429;
    }
    /* One panel per strategy, stacked, on shared axes: a rate-limit dashboard. */
    fprintf(f,
            "set terminal pngcairo size 1000,%d font 'sans,9'\n"
            "set output '%s'\n"
            "set datafile separator ','\n"
            "set multiplot layout %zu,1 title '429s per 5 s'\n"
            "set xrange [0:%.0f]\nset yrange [0:%lld]\n"
            "set style fill solid 1.0 noborder\nset boxwidth %.1f absolute\n"
            "set lmargin 10\nset rmargin 3\nset ytics nomirror\nset grid ytics\n",
            120 + 140 * (int)(n ? n : 1), png, n ? n : 1, xmax > 0 ? xmax : 60,
            (long long)(ymax + 1), SL_SIM_BIN_S);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "set title '%s' offset 0,-0.8\n", r[i].strategy);
        fprintf(f, "%s", i + 1 == n ? "set xlabel 'simulated time (s)'\n" : "unset xlabel\n");
        fprintf(f,
                "plot '%s' using ($2+%.1f):(strcol(1) eq '%s' ? $4 : 1/0) every ::1 "
                "with boxes lc rgb '#c0392b' notitle\n",
                csv, SL_SIM_BIN_S / 2, r[i].strategy);
    }
    fputs("unset multiplot\n", f);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: write failed", script);
        return -1;
    }
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", script);
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(err, errlen, "cannot run gnuplot: %s", strerror(errno));
        return -1;
    }
    char line[512], first[512] = "";
    while (fgets(line, sizeof line, p))
        if (!first[0]) snprintf(first, sizeof first, "%s", line);
    int st = pclose(p);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        size_t l = strlen(first);
        if (l && first[l - 1] == '\n') first[l - 1] = '\0';
        snprintf(err, errlen, "gnuplot failed (is gnuplot installed? Debian: gnuplot-nox)%s%s",
                 first[0] ? ": " : "", first);
        return -1;
    }
    return 0;
}
