/* sluice overlay: sets 429 timestamps against turn timestamps and says which one the 429s follow. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "overlay.h"

static void overlay_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice overlay --events FILE [--429-event NAME] [--turn-event NAME]\n"
            "       sluice overlay --429s FILE --turns FILE [--retries FILE]\n"
            "                      [--time-column NAME] [--agent-column NAME]\n"
            "       common: [--window S] [--bin S] [--min-429s N] [--fleet] [--out FILE.png]\n\n"
            "Seed 000's one test: overlays the 429 timestamps on the agents' turn timestamps,\n"
            "prints the dominant period of each (autocorrelation of the binned series), the\n"
            "share of 429s within --window seconds after a turn start against the share within\n"
            "the same distance after a retry (a call made after its agent's 429, however long\n"
            "it backed off) or an earlier 429, what random times would get, and a verdict:\n"
            "the 429s line up with the work, with the retries, or no pattern.\n\n"
            "  --events FILE     sluiced's event log (event_log), a capture of GET /v1/events\n"
            "                    (curl -N ... > FILE, SSE text) or the simulator's\n"
            "                    events-STRATEGY.jsonl (sluice sim --out DIR); - = stdin\n"
            "  --429-event NAME  the event that is a 429 (default: http_429 if the log has\n"
            "                    any, else upstream_429)\n"
            "  --turn-event NAME the event that starts a turn (default: turn if the log has\n"
            "                    any, else granted leases that do not follow the agent's 429)\n"
            "  --429s FILE       timestamps of 429s, one a line or a CSV column\n"
            "  --turns FILE      timestamps of turn starts, the same way\n"
            "  --retries FILE    timestamps of retries (calls after a 429), the same way;\n"
            "                    an event log says them itself (grants after the agent's 429)\n"
            "  --time-column NAME  the CSV column of the timestamps, by header name (default:\n"
            "                    the first column); Unix seconds or ISO-8601\n"
            "  --agent-column NAME the CSV column of agent names: match per agent\n"
            "  --window S        \"right after\" means within S seconds (default 5)\n"
            "  --bin S           bin width of the period search (default 5)\n"
            "  --min-429s N      fewer 429s give no verdict (default 10)\n"
            "  --fleet           match fleet-wide even when every timestamp names its agent\n"
            "  --out FILE.png    draw both series on one time axis (gnuplot)\n\n"
            "exit codes: 0 ok (whatever the verdict), 1 an input file is unreadable or has a\n"
            "bad line (the message names the file, the line and the value) or gnuplot failed,\n"
            "2 usage error\n");
}

static int positive(const char *opt, const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v <= 0) {
        fprintf(stderr, "sluice overlay: %s: \"%s\" is not a positive number of seconds\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static void print_period(const char *what, double period_s, double peak)
{
    if (period_s > 0)
        printf("%-12s every %.0f s (autocorrelation %.2f)\n", what, period_s, peak);
    else if (peak > 0)
        printf("%-12s no dominant period (autocorrelation peak %.2f < 0.25)\n", what, peak);
    else
        printf("%-12s no dominant period (too few to search: 10 and 12 bins needed)\n", what);
}

static void print_verdict(const sl_overlay_result_t *r, const sl_overlay_options_t *o)
{
    char period[96] = "";
    if (r->period_429_s > 0 && r->period_turn_s > 0)
        snprintf(period, sizeof period, "; the 429s repeat every %.0f s, the turns every %.0f s",
                 r->period_429_s, r->period_turn_s);
    else if (r->period_429_s > 0)
        snprintf(period, sizeof period, "; the 429s repeat every %.0f s", r->period_429_s);
    double pt = 100 * r->share_turn, pe = 100 * r->share_429;
    double ct = 100 * r->chance_turn, ce = 100 * r->chance_429;
    switch (r->verdict) {
    case SL_OVERLAY_WORK:
        printf("verdict: the 429s line up with the work, not the retries: %.0f%% of them came "
               "within %g s after a turn start (%.0f%% by chance), %.0f%% after a retry or an "
               "earlier 429%s. "
               "No backoff setting fixes this; one owner of the quota does.\n",
               pt, o->window_s, ct, pe, period);
        break;
    case SL_OVERLAY_RETRIES:
        printf("verdict: the 429s line up with the retries, not the work: %.0f%% of them came "
               "within %g s after a retry (%zu) or an earlier 429 (%zu) (%.0f%% by chance), "
               "%.0f%% after a turn start%s. The retries hit the limit again: back off longer, "
               "with full jitter, and honour retry-after.\n",
               pe, o->window_s, r->after_retry, r->after_429, ce, pt, period);
        break;
    default:
        if (r->n_429 < (size_t)o->min_429s)
            printf("verdict: no pattern: %zu 429s, fewer than the %d a verdict needs.\n", r->n_429,
                   o->min_429s);
        else
            printf("verdict: no pattern: %.0f%% of the 429s came within %g s after a turn start "
                   "(%.0f%% by chance), %.0f%% after a retry or an earlier 429 (%.0f%% by "
                   "chance); neither "
                   "is half of them and 1.5 times chance%s.\n",
                   pt, o->window_s, ct, pe, ce, period);
    }
}

static void print_report(const char *source, const char *u429, const char *uturn,
                         const sl_overlay_result_t *r, const sl_overlay_options_t *o)
{
    printf("source: %s\n", source);
    if (u429) printf("429s: %s events; turns: %s events\n", u429, uturn);
    printf("429s %zu, turn starts %zu, span %.1f s, matched %s\n", r->n_429, r->n_turns,
           r->end_s - r->start_s,
           r->per_agent ? "per agent" : "fleet-wide (not every timestamp names an agent)");
    printf("period: bin %g s, lags %g-%g s searched\n", o->bin_s, r->min_lag_s, r->max_lag_s);
    print_period("  429s", r->period_429_s, r->peak_429);
    print_period("  turns", r->period_turn_s, r->peak_turn);
    printf("within %g s after a turn start   %5zu  %5.1f%%  (random times: %.1f%%)\n", o->window_s,
           r->after_turn, 100 * r->share_turn, 100 * r->chance_turn);
    printf("within %g s after a retry        %5zu  %5.1f%%  (%zu retries seen)\n", o->window_s,
           r->after_retry, r->n_429 ? 100.0 * (double)r->after_retry / (double)r->n_429 : 0.0,
           r->n_retries);
    printf("within %g s after an earlier 429 %5zu  %5.1f%%\n", o->window_s, r->after_429,
           r->n_429 ? 100.0 * (double)r->after_429 / (double)r->n_429 : 0.0);
    printf("  the retries' share             %5zu  %5.1f%%  (random times: %.1f%%)\n",
           r->after_retry + r->after_429, 100 * r->share_429, 100 * r->chance_429);
    printf("neither                          %5zu  %5.1f%%\n", r->neither,
           r->n_429 ? 100.0 * (double)r->neither / (double)r->n_429 : 0.0);
    print_verdict(r, o);
}

int sl_cli_overlay(int argc, char **argv)
{
    const char *events = NULL, *f429 = NULL, *fturns = NULL, *fretries = NULL, *tcol = NULL;
    const char *acol = NULL;
    const char *out = NULL;
    sl_overlay_log_options_t lopt = {0};
    sl_overlay_options_t opt;
    sl_overlay_options_init(&opt);
    const sl_cli_text_option_t texts[] = {
        {"--events", &events}, {"--429-event", &lopt.event_429},
        {"--turn-event", &lopt.event_turn}, {"--429s", &f429}, {"--turns", &fturns},
        {"--retries", &fretries}, {"--time-column", &tcol}, {"--agent-column", &acol},
        {"--out", &out},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        double v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            overlay_usage(stdout);
            return SL_EXIT_OK;
        } else if (!strcmp(a, "--fleet")) {
            opt.fleet = true;
        } else if (sl_cli_text_option(texts, sizeof texts / sizeof *texts, argc, argv, &i)) {
            continue;
        } else if ((!strcmp(a, "--window") || !strcmp(a, "--bin")) && has_val) {
            if (positive(a, argv[++i], &v) != 0) return SL_EXIT_USAGE;
            *(a[2] == 'w' ? &opt.window_s : &opt.bin_s) = v;
        } else if (!strcmp(a, "--min-429s") && has_val) {
            char *end = NULL;
            long n = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || n < 1 || n > 1000000) {
                fprintf(stderr, "sluice overlay: --min-429s: \"%s\" is not an integer 1-1000000\n",
                        argv[i]);
                return SL_EXIT_USAGE;
            }
            opt.min_429s = (int)n;
        } else {
            fprintf(stderr, "sluice overlay: unknown option or missing value \"%s\"\n", a);
            overlay_usage(stderr);
            return SL_EXIT_USAGE;
        }
    }
    if (events ? (f429 || fturns) : !(f429 && fturns)) {
        fprintf(stderr, "sluice overlay: give either --events FILE or both --429s FILE and "
                        "--turns FILE\n");
        overlay_usage(stderr);
        return SL_EXIT_USAGE;
    }
    if (events ? (tcol || acol || fretries) : (lopt.event_429 || lopt.event_turn)) {
        fprintf(stderr, "sluice overlay: %s\n",
                events ? "--time-column, --agent-column and --retries go with --429s/--turns"
                       : "--429-event and --turn-event go with --events");
        return SL_EXIT_USAGE;
    }
    char err[768], source[1024];
    sl_overlay_series_t errs = {0}, turns = {0}, retries = {0};
    const char *u429 = NULL, *uturn = NULL;
    int skipped = 0, rc = SL_EXIT_OK;
    if (events) {
        snprintf(source, sizeof source, "%s", events);
        if (sl_overlay_read_log(events, &lopt, &errs, &turns, &retries, &u429, &uturn, &skipped,
                                err, sizeof err) != 0)
            rc = SL_EXIT_FAILURE;
    } else {
        snprintf(source, sizeof source, "429s %s, turns %s%s%s", f429, fturns,
                 fretries ? ", retries " : "", fretries ? fretries : "");
        if (sl_overlay_read_csv(f429, tcol, acol, &errs, err, sizeof err) != 0 ||
            sl_overlay_read_csv(fturns, tcol, acol, &turns, err, sizeof err) != 0 ||
            (fretries && sl_overlay_read_csv(fretries, tcol, acol, &retries, err, sizeof err) != 0))
            rc = SL_EXIT_FAILURE;
    }
    sl_overlay_result_t res;
    if (rc == SL_EXIT_OK && sl_overlay_analyse(&errs, &turns, &retries, &opt, &res) != 0) {
        snprintf(err, sizeof err, "out of memory");
        rc = SL_EXIT_FAILURE;
    }
    if (rc == SL_EXIT_OK) {
        if (skipped)
            fprintf(stderr, "sluice overlay: %s: the last line was cut off mid-event; skipped\n",
                    events);
        print_report(source, u429, uturn, &res, &opt);
        if (out && sl_overlay_plot(out, &errs, &turns, &res, opt.bin_s, err, sizeof err) != 0)
            rc = SL_EXIT_FAILURE;
        else if (out)
            printf("plot: %s\n", out);
    }
    if (rc != SL_EXIT_OK) fprintf(stderr, "sluice overlay: %s\n", err);
    sl_overlay_series_free(&errs);
    sl_overlay_series_free(&turns);
    sl_overlay_series_free(&retries);
    return rc;
}
