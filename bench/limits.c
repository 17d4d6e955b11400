/* limits.c - benchmark: action-limit checks per second per algorithm, alone and as a three-level hierarchy, and bytes per key.
 *
 * Prints what it measures; never gates a test. Run pinned to one core:
 *   taskset -c 0 build/bench/bench_limits
 * Each run: 1,000 agents take turns (one check every µs of the injected clock, so each
 * agent asks 1,000 times a second against a rate of 500 per second: about half
 * are denied), for N checks. "hierarchy" is the algorithm per
 * agent under a per-team fixed window under a global sliding_window_approx. */
#include "limits/limits.h"
#include "limits/limits_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"

#define AGENTS 1000
#define CHECKS 2000000L

static sl_limits_t *set_of(const char *json)
{
    json_t *j = json_loads(json, 0, NULL);
    sl_limits_t *ls = sl_limits_new();
    if (!j || !ls || sl_limits_add_all_json(ls, j) != SL_OK) {
        fprintf(stderr, "bench: config refused: %s\n", ls ? sl_limits_errmsg(ls) : "?");
        exit(1);
    }
    json_decref(j);
    return ls;
}

static void run(const char *label, const char *json, const char *name)
{
    size_t heap0 = heap_bytes();
    sl_limits_t *ls = set_of(json);
    static char agents[AGENTS][16];
    static char teams[AGENTS][16];
    for (int i = 0; i < AGENTS; i++) {
        snprintf(agents[i], sizeof agents[i], "agent-%d", i);
        snprintf(teams[i], sizeof teams[i], "team-%d", i % 10);
    }
    int64_t now = 1800000000LL * 1000000;
    long allowed = 0;
    sl_limit_result_t r;
    double t0 = wall_s();
    for (long i = 0; i < CHECKS; i++) {
        int a = (int)(i % AGENTS);
        sl_limit_request_t req = {.agent = agents[a], .team = teams[a], .hits = 1};
        if (sl_limits_check(ls, name, &req, now++, &r) != SL_OK) {
            fprintf(stderr, "bench: %s\n", sl_limits_errmsg(ls));
            exit(1);
        }
        allowed += r.allowed;
        /* concurrency: release what was taken, as a caller would */
        if (r.allowed && strcmp(label, "concurrency") == 0) sl_limits_release(ls, name, &req, now);
    }
    double dt = wall_s() - t0;
    size_t heap1 = heap_bytes();
    printf("%-34s %10.0f checks/s  %6.1f%% allowed  %6.0f bytes/key\n", label, CHECKS / dt,
           100.0 * allowed / CHECKS, (double)(heap1 - heap0) / AGENTS);
    sl_limits_free(ls);
}

int main(void)
{
    static const char *const ALG[] = {"token_bucket", "leaky_bucket", "fixed_window",
                                      "sliding_window", "sliding_window_approx", "gcra",
                                      "concurrency"};
    char json[1024];
    printf("%d checks, %d agents, one core\n", (int)CHECKS, AGENTS);
    for (size_t i = 0; i < sizeof ALG / sizeof ALG[0]; i++) {
        bool conc = strcmp(ALG[i], "concurrency") == 0;
        bool burst = strstr(ALG[i], "bucket") || strcmp(ALG[i], "gcra") == 0;
        snprintf(json, sizeof json,
                 "{\"x\": {\"algorithm\": \"%s\", \"rate\": %d%s%s}}", ALG[i],
                 conc ? 4 : 500, conc ? "" : ", \"period_s\": 1", burst ? ", \"burst\": 100" : "");
        run(ALG[i], json, "x");
    }
    for (size_t i = 0; i < sizeof ALG / sizeof ALG[0]; i++) {
        if (strcmp(ALG[i], "concurrency") == 0) continue;
        bool burst = strstr(ALG[i], "bucket") || strcmp(ALG[i], "gcra") == 0;
        snprintf(json, sizeof json,
                 "{\"x\": {\"algorithm\": \"%s\", \"rate\": 500, \"period_s\": 1%s, \"parents\": [\"team\"]},"
                 " \"team\": {\"algorithm\": \"fixed_window\", \"rate\": 100000, \"period_s\": 1,"
                 " \"per\": \"team\", \"parents\": [\"all\"]},"
                 " \"all\": {\"algorithm\": \"sliding_window_approx\", \"rate\": 1000000, \"period_s\": 1,"
                 " \"per\": \"global\"}}",
                 ALG[i], burst ? ", \"burst\": 100" : "");
        char label[64];
        snprintf(label, sizeof label, "hierarchy/%s", ALG[i]);
        run(label, json, "x");
    }
    return 0;
}
