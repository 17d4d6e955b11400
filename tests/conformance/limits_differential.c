/* limits_differential.c - random action-limit operations, seeded, run on the C library and on limits.lua in a real redis-server; every answer compared.
 *
 * Usage: limits_differential_runner --redis HOST:PORT [--seed N] [--seeds K] [--ops N]
 *                                   [--dump DIR]
 *
 * Each seed configures one set of limits on both sides — every algorithm (token bucket,
 * GCRA, leaky bucket, fixed, sliding and approximate sliding windows, concurrency), keyed
 * globally, per agent, per team and per key, with action costs, a three-level hierarchy
 * and an adaptive rate, their rates and periods drawn from the seed — then draws checks,
 * peeks, probes, whens, releases, reports and key reads with random agents, teams, keys,
 * actions and hit counts (zero, several, more than a limit holds), time moving by
 * microseconds to minutes. Each runs on the library with `now` and on limits.lua with
 * the same time pinned (limits_drive.c), and the answers are compared field by field.
 *
 * On the first difference it prints the seed, the operation's number and line and both
 * answers, and writes the run to DIR/limits-differential-SEED.scn (default: the current
 * directory), which `limits_conformance_runner --redis HOST:PORT FILE` replays. Exit
 * status 0 when every answer matched.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "limits/limits_json.h"
#include "limits_drive.h"
#include "seeded.h"

typedef struct gen {
    uint64_t rng;
    double t_s;
    FILE *log; /* every line run, for the dump */
} gen_t;

/* The set, as `limit` lines: every algorithm and keying, drawn from the seed. */
static void gen_limits(gen_t *g, char lines[][256], int *n)
{
    static const long PERIODS[] = {1, 10, 60, 3600};
    *n = 0;
#define LIMIT(...) snprintf(lines[(*n)++], 256, __VA_ARGS__)
    LIMIT("limit all algorithm=sliding_window rate=%ld period_s=%ld per=global",
          rnd_range(&g->rng, 20, 200), PERIODS[rnd(&g->rng) % 4]);
    LIMIT("limit team algorithm=fixed_window rate=%ld period_s=%ld per=team parents=all",
          rnd_range(&g->rng, 5, 60), PERIODS[rnd(&g->rng) % 4]);
    LIMIT("limit tool algorithm=token_bucket rate=%ld period_s=%ld burst=%ld per=agent "
          "costs=read:1,write:3 parents=team",
          rnd_range(&g->rng, 1, 10), PERIODS[rnd(&g->rng) % 3], rnd_range(&g->rng, 1, 8));
    LIMIT("limit g algorithm=gcra rate=%ld period_s=%ld burst=%ld per=key", rnd_range(&g->rng, 1, 20),
          PERIODS[rnd(&g->rng) % 3], rnd_range(&g->rng, 1, 6));
    LIMIT("limit q algorithm=leaky_bucket rate=%ld period_s=%ld burst=%ld per=agent",
          rnd_range(&g->rng, 1, 20), PERIODS[rnd(&g->rng) % 3], rnd_range(&g->rng, 1, 5));
    LIMIT("limit approx algorithm=sliding_window_approx rate=%ld period_s=%ld per=agent",
          rnd_range(&g->rng, 2, 30), PERIODS[rnd(&g->rng) % 3]);
    LIMIT("limit fw algorithm=fixed_window rate=%ld period_s=%ld per=key costs=big:%ld",
          rnd_range(&g->rng, 2, 30), PERIODS[rnd(&g->rng) % 4], rnd_range(&g->rng, 2, 50));
    LIMIT("limit c algorithm=concurrency rate=%ld ttl_s=%ld per=agent", rnd_range(&g->rng, 1, 4),
          rnd_range(&g->rng, 1, 30));
    LIMIT("limit api algorithm=gcra rate=%ld period_s=1 burst=%ld per=agent "
          "adaptive.min_rate=5 adaptive.max_rate=400 adaptive.decrease=0.5 "
          "adaptive.increase=1.25 adaptive.high_error=0.2 adaptive.low_error=0.05 "
          "adaptive.window=%ld",
          rnd_range(&g->rng, 10, 100), rnd_range(&g->rng, 1, 10), rnd_range(&g->rng, 5, 40));
#undef LIMIT
}

static const char *const LIMITS[] = {"all", "team", "tool", "g", "q", "approx", "fw", "c", "api"};

static void add_who(gen_t *g, line_t *l)
{
    add(l, " agent=a%d", (int)(rnd(&g->rng) % 4));
    if (!one_in(&g->rng, 4)) add(l, " team=t%d", (int)(rnd(&g->rng) % 2));
    if (!one_in(&g->rng, 3)) add(l, " key=k%d", (int)(rnd(&g->rng) % 3));
    if (one_in(&g->rng, 2)) add(l, " action=%s", one_in(&g->rng, 3) ? "write" : one_in(&g->rng, 4) ? "big" : "read");
}

static void gen_op(gen_t *g, line_t *l)
{
    int k = (int)(rnd(&g->rng) % 100);
    const char *name = LIMITS[rnd(&g->rng) % 9];
    if (k < 50) {
        add(l, " check %s", name);
        add_who(g, l);
        if (!one_in(&g->rng, 3)) add(l, " hits=%ld", one_in(&g->rng, 10) ? rnd_range(&g->rng, 0, 60) : rnd_range(&g->rng, 0, 3));
    } else if (k < 58) {
        add(l, " peek %s", name);
        add_who(g, l);
    } else if (k < 66) {
        add(l, " probe %s", name);
        add_who(g, l);
        if (one_in(&g->rng, 2)) add(l, " hits=%ld", rnd_range(&g->rng, 1, 5));
    } else if (k < 72) {
        add(l, " when %s", name);
        add_who(g, l);
    } else if (k < 82) {
        add(l, " release %s", one_in(&g->rng, 4) ? name : "c");
        add_who(g, l);
    } else if (k < 90) {
        add(l, " report %s successes=%ld errors=%ld", one_in(&g->rng, 4) ? name : "api",
            rnd_range(&g->rng, 0, 50), rnd_range(&g->rng, 0, 10));
        add_who(g, l);
    } else {
        add(l, " info %s", name);
        add_who(g, l);
    }
}

static void gen_time(gen_t *g)
{
    int kind = (int)(rnd(&g->rng) % 50);
    if (kind == 0) g->t_s += (double)rnd_range(&g->rng, 60, 4000);
    else if (kind < 10) g->t_s += (double)rnd_range(&g->rng, 0, 5000000) / 1e6;
    else if (kind < 35) g->t_s += (double)rnd_range(&g->rng, 0, 200000) / 1e6;
}

static void print_result(const char *who, const result_t *r)
{
    fprintf(stderr, "  %s: rc=%s", who, sl_strerror(r->rc));
    scn_print_fields(stderr, r);
    fprintf(stderr, "\n");
}

/* One seed: the set, then `ops` random operations. Returns 0 when all matched. */
static int run_seed(void *ud, uint64_t seed, const seeded_args_t *a)
{
    (void)ud;
    long ops = a->ops;
    gen_t g = {.rng = seed * 2654435761ULL + 7};
    char path[1024];
    snprintf(path, sizeof path, "%s/limits-differential-%llu.scn", a->dir, (unsigned long long)seed);
    g.log = tmpfile();
    static char limit_lines[16][256];
    int n_limits;
    gen_limits(&g, limit_lines, &n_limits);
    json_t *limits = json_object();
    int failed = limits_redis_reset() != 0;
    for (int i = 0; !failed && i < n_limits; i++) {
        char buf[sizeof limit_lines[0]], *tok[SCN_MAX_TOKENS];
        memcpy(buf, limit_lines[i], sizeof buf);
        if (g.log) fprintf(g.log, "%s\n", limit_lines[i]);
        failed = limits_config_line(limits, "differential", tok, scn_split(buf, tok, SCN_MAX_TOKENS),
                                    i + 1) != 0;
    }
    sl_limits_t *ls = sl_limits_new();
    if (!failed && (!ls || sl_limits_add_all_json(ls, limits) != SL_OK)) {
        fprintf(stderr, "seed %llu: the set was refused: %s\n", (unsigned long long)seed,
                ls ? sl_limits_errmsg(ls) : "out of memory");
        failed = 1;
    }
    static result_t rl, rr;
    long allowed = 0, denied = 0, errors = 0; /* what was compared, so a run says it tested */
    for (long i = 0; !failed && i < ops; i++) {
        line_t l = {.n = 0};
        gen_time(&g);
        add(&l, "%.6f", g.t_s);
        gen_op(&g, &l);
        if (g.log) fprintf(g.log, "%s\n", l.s);
        char buf[sizeof l.s], *tok[SCN_MAX_TOKENS];
        snprintf(buf, sizeof buf, "%s", l.s);
        op_t op;
        memset(&op, 0, sizeof op);
        scn_op_parse(&op, tok, scn_split(buf, tok, SCN_MAX_TOKENS), (int)i);
        memset(&rl, 0, sizeof rl);
        memset(&rr, 0, sizeof rr);
        limits_lib_op(ls, &op, &rl);
        limits_redis_op(ls, &op, &rr);
        const field_t *f = get_field(&rl, "allowed");
        if (rl.rc) errors++;
        else if (f) f->num ? allowed++ : denied++;
        char why[256];
        if (!results_equal(&rl, &rr, why, sizeof why)) {
            fprintf(stderr, "seed %llu op %ld: the library and redis differ (%s)\n  %s\n",
                    (unsigned long long)seed, i, why, l.s);
            print_result("library", &rl);
            print_result("redis  ", &rr);
            failed = 1;
        }
    }
    if (failed && g.log) {
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "# limits_differential_runner --seed %llu: every line up to the first difference\n",
                    (unsigned long long)seed);
            rewind(g.log);
            char buf[600];
            while (fgets(buf, sizeof buf, g.log)) fputs(buf, f);
            fclose(f);
            fprintf(stderr, "the run up to the difference: %s\n", path);
        }
    } else if (!failed) {
        printf("seed %llu: %ld operations (%ld checks allowed, %ld denied, %ld errors), the "
               "library and redis agree\n",
               (unsigned long long)seed, ops, allowed, denied, errors);
    }
    if (g.log) fclose(g.log);
    sl_limits_free(ls);
    json_decref(limits);
    return failed;
}

int main(int argc, char **argv)
{
    seeded_args_t a;
    if (seeded_args(argc, argv, "limits_differential_runner", false, &a) != 0) return 2;
    if (limits_redis_open(a.redis) != 0) return 2;
    int rc = seeded_run(&a, run_seed, NULL);
    limits_redis_close();
    return rc;
}
