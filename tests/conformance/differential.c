/* differential.c - random operations, seeded, run on the engine and on sluice.lua in a real redis-server; every answer compared.
 *
 * Usage: differential_runner [--states] --redis HOST:PORT [--seed N] [--seeds K] [--ops N]
 *                            [--dump DIR]
 *
 * The conformance scenarios check the rules someone thought of; this checks the ones
 * nobody did. Each seed starts both backends from the same setup (the property test's:
 * two pools, caps on agents and teams, weighted teams, a planner task), then draws
 * operations from the property test's mix — requests with every option (roles, tasks,
 * priorities, caches, request ids, holds, capped output and its floor, bad sizes), settles (429s with
 * and without retry_after, spend caps, failures, provider headers), cancels, extends,
 * ticket polls, holds and cancels, resyncs, task graph writes, pool reconfigurations,
 * agent forgets, state and agent reads, and time that jumps small and large — and runs
 * each as a scenario line (drive.c) on both: the engine with `now`, the library with the
 * same time pinned. Every answer is compared field by field (the pool and agent reads
 * compare the state; --states compares both pools' state after every operation too, to
 * find the operation where a difference starts); the engine's invariants are checked
 * after every step.
 *
 * On the first difference it prints the seed, the operation's number and line, both
 * answers, and writes every line of the run to DIR/differential-SEED.scn (default: the
 * current directory): `conformance_runner --redis HOST:PORT FILE` replays it, ids
 * written as @symbol so that both backends resolve them. Exit status 0 when every
 * answer matched.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drive.h"
#include "seeded.h"

#define RECENT 64 /* ids an operation picks among: the most recent leases and tickets */

typedef struct gen {
    uint64_t rng;
    double t_s;
    int leases[RECENT], tickets[RECENT]; /* symbols, a ring each */
    int n_leases, n_tickets;
    char **log; /* every line run, for the dump */
    long n_log, cap_log;
    bool states; /* --states: compare both pools' state after every operation */
    bool asked[8]; /* per agent of AGENTS: it made a request */
} gen_t;

static void remember(int *ring, int *n, int symbol)
{
    if (symbol <= 0) return;
    for (int i = 0; i < *n && i < RECENT; i++)
        if (ring[i] == symbol) return;
    ring[*n % RECENT] = symbol;
    (*n)++;
}

/* A recent lease or ticket, sometimes one nobody was given. */
static void add_id(gen_t *g, line_t *l, const int *ring, int n)
{
    if (n == 0 || one_in(&g->rng, 16)) {
        add(l, " @%ld", rnd_range(&g->rng, 1, 1000000));
        return;
    }
    int k = n < RECENT ? n : RECENT;
    add(l, " @%d", ring[rnd(&g->rng) % (uint64_t)k]);
}

static const char *const AGENTS[] = {"planner-1", "rev-1", "w1", "w2", "w3", "w4", "w5", "w6"};
/* An agent is one record in the engine and one per pool on Redis (docs/design.md,
 * "Forgetting"): its repeats, estimate errors and totals compare while it keeps to one
 * pool, so each agent here does (1: "second"). Teams and caps span both pools. */
static const int AGENT_POOL[] = {0, 1, 1, 0, 1, 0, 1, 0};
static const char *const ROLES[] = {"planner", "reviewer", "worker", "worker",
                                    "worker",  "worker",   "worker", "worker"};
static const char *const PRIOS[] = {"high", "normal", "normal", "low"};
static const char *const SIGS[] = {"test_a:1", "test_a:1", "test_b:2"};

/* The property test's world, as scenario lines (test_engine_properties.c, run_seed). */
static const char *const SETUP[] = {
    "0 caps w1 max_share=0.3 max_rpm=40 max_concurrent=3 budget_usd_per_hour=50",
    "0 caps workers team=1 max_rpm=60 budget_usd_per_day=100",
    "0 caps w4 max_concurrent=1",
    "0 caps pairs team=1 max_concurrent=2",
    "0 team workers 2.5",
    "0 team ops 0.5",
    "0 member w2 workers",
    "0 member w3 workers",
    "0 member w5 pairs",
    "0 member w6 pairs",
    "0 member w4 ops",
    "0 pool default input_tpm=100000 output_tpm=30000 rpm=100 claim_timeout_s=20 "
    "ticket_idle_s=40",
    "0 pool second input_tpm=100000 output_tpm=30000 rpm=100 claim_timeout_s=20 "
    "ticket_idle_s=40 tokens_tpm=150000 concurrency=6 price_input_per_mtok=3 "
    "price_output_per_mtok=15 cache_reads_count=1 working_set=1",
    "0 task plan role=planner state=running",
};

static void gen_request(gen_t *g, line_t *l)
{
    int a = (int)(rnd(&g->rng) % 8);
    add(l, " request agent=%s", AGENTS[a]);
    if (!one_in(&g->rng, 10)) add(l, " role=%s", one_in(&g->rng, 12) ? ROLES[rnd(&g->rng) % 8] : ROLES[a]);
    if (!one_in(&g->rng, 5)) add(l, " priority=%s", one_in(&g->rng, 50) ? "urgent" : PRIOS[rnd(&g->rng) % 4]);
    long in = one_in(&g->rng, 10) ? rnd_range(&g->rng, 40000, 80000) : rnd_range(&g->rng, 0, 8000);
    if (one_in(&g->rng, 100)) in = -1; /* refused, changing nothing */
    add(l, " in=%ld out=%ld", in, rnd_range(&g->rng, 0, 4000));
    if (one_in(&g->rng, 3)) add(l, " cached=%ld", rnd_range(&g->rng, 0, 30000));
    if (one_in(&g->rng, 4)) add(l, " task=plan");
    else if (one_in(&g->rng, 6)) add(l, " task=t%d", (int)(rnd(&g->rng) % 8));
    add(l, " unblocks=%ld", rnd_range(&g->rng, 0, 3));
    if (one_in(&g->rng, 8)) add(l, " cache_key=shared-prefix");
    else if (one_in(&g->rng, 3)) {
        /* One in eight names an agent's own cache by its name (one namespace of caches),
         * drawn from the same number so the seeds' streams stay what they were. */
        int k = (int)(rnd(&g->rng) % 64);
        if (k < 8) add(l, " cache_key=%s", AGENTS[k]);
        else add(l, " cache_key=task%d", k);
    }
    if (one_in(&g->rng, 5)) add(l, " ttl=%.3f", rnd01(&g->rng) * 1000);
    if (one_in(&g->rng, 4)) add(l, " rid=r%d", (int)(rnd(&g->rng) % 50));
    if (AGENT_POOL[a]) add(l, " pool=second");
    if (one_in(&g->rng, 2)) add(l, " model=%s", one_in(&g->rng, 2) ? "claude-x" : "gpt-y");
    if (one_in(&g->rng, 6)) add(l, " prefix=p%d", (int)(rnd(&g->rng) % 4));
    if (one_in(&g->rng, 3)) add(l, " max_wait=%.3f", rnd01(&g->rng) * 600);
    if (one_in(&g->rng, 10)) add(l, " capped=1%s", one_in(&g->rng, 2) ? " floor=16" : "");
}

static void gen_settle(gen_t *g, line_t *l)
{
    add(l, " settle");
    add_id(g, l, g->leases, g->n_leases);
    add(l, " in=%ld out=%ld", rnd_range(&g->rng, 0, 60000), rnd_range(&g->rng, 0, 4000));
    if (one_in(&g->rng, 4)) add(l, " cc=%ld", rnd_range(&g->rng, 0, 20000));
    if (one_in(&g->rng, 4)) add(l, " cr=%ld", rnd_range(&g->rng, 0, 20000));
    if (one_in(&g->rng, 25)) {
        add(l, " got_429=1");
        if (one_in(&g->rng, 2)) add(l, " retry_after=%.3f", rnd01(&g->rng) * 10);
        if (one_in(&g->rng, 5)) add(l, " spend_cap=1");
        if (one_in(&g->rng, 4)) add(l, " agent_retry_after=%.3f", rnd01(&g->rng) * 30);
    }
    if (one_in(&g->rng, 20)) add(l, " failed=1");
    if (one_in(&g->rng, 3)) add(l, " sig=%s", SIGS[rnd(&g->rng) % 3]);
    if (one_in(&g->rng, 10))
        add(l, " h.anthropic-ratelimit-input-tokens-remaining=%ld"
               " h.anthropic-ratelimit-output-tokens-limit=%s",
            rnd_range(&g->rng, 0, 100000), one_in(&g->rng, 2) ? "40000" : "50000");
}

static void gen_pool(gen_t *g, line_t *l)
{
    bool second = one_in(&g->rng, 3);
    add(l, " pool %s input_tpm=%ld output_tpm=%ld rpm=%ld claim_timeout_s=20 ticket_idle_s=40",
        second ? "second" : "default", rnd_range(&g->rng, 90000, 200000), rnd_range(&g->rng, 20000, 40000),
        rnd_range(&g->rng, 50, 200));
    if (one_in(&g->rng, 2)) add(l, " concurrency=%ld", rnd_range(&g->rng, 3, 10));
    if (one_in(&g->rng, 2)) add(l, " working_set=1");
    if (one_in(&g->rng, 4)) add(l, " backfill=0");
    if (second)
        add(l, " tokens_tpm=150000 price_input_per_mtok=3 price_output_per_mtok=15"
               " cache_reads_count=1");
}

/* The next operation's line (without its time). */
static void gen_op(gen_t *g, line_t *l)
{
    int k = (int)(rnd(&g->rng) % 100);
    if (k < 36) {
        gen_request(g, l);
    } else if (k < 54) {
        gen_settle(g, l);
    } else if (k < 62) {
        add(l, " advance");
    } else if (k < 67) {
        add(l, " ticket");
        add_id(g, l, g->tickets, g->n_tickets);
    } else if (k < 69) {
        add(l, " hold");
        add_id(g, l, g->tickets, g->n_tickets);
        add(l, " %d", (int)(rnd(&g->rng) % 2));
    } else if (k < 71) {
        add(l, " tcancel");
        add_id(g, l, g->tickets, g->n_tickets);
    } else if (k < 74) {
        add(l, " cancel");
        add_id(g, l, g->leases, g->n_leases);
    } else if (k < 77) {
        add(l, " extend");
        add_id(g, l, g->leases, g->n_leases);
        add(l, " ttl=%.3f", rnd01(&g->rng) * 900 + (one_in(&g->rng, 20) ? -5 : 1));
    } else if (k < 83) {
        add(l, " state %s", one_in(&g->rng, 2) ? "default" : "second");
    } else if (k < 86) {
        /* A configured team member has a record in the engine before its first request,
         * none on Redis until then (agent_forget_configured.scn): read those that asked. */
        int a = (int)(rnd(&g->rng) % 8);
        add(l, g->asked[a] ? " agent %s" : " state %s", g->asked[a] ? AGENTS[a] : "default");
    } else if (k < 89) {
        add(l, " resync %s h.x-ratelimit-remaining-requests=%ld", one_in(&g->rng, 2) ? "default" : "second",
            rnd_range(&g->rng, 0, 200));
    } else if (k < 93) {
        static const char *const STATES[] = {"waiting", "running", "done"};
        add(l, " task t%d role=%s deps=plan state=%s", (int)(rnd(&g->rng) % 8),
            one_in(&g->rng, 3) ? "reviewer" : "worker", STATES[rnd(&g->rng) % 3]);
    } else if (k < 94) {
        add(l, " taskdel t%d", (int)(rnd(&g->rng) % 8));
    } else if (k < 96) {
        gen_pool(g, l);
    } else {
        add(l, " forget_agent %s", AGENTS[rnd(&g->rng) % 8]);
    }
}

/* Time moves with every operation: mostly a little, sometimes past every deadline. */
static void gen_time(gen_t *g)
{
    int kind = (int)(rnd(&g->rng) % 40);
    if (kind == 0) g->t_s += rnd01(&g->rng) * 300;
    else if (kind < 20) g->t_s += rnd01(&g->rng) * 2;
    g->t_s = round(g->t_s * 1000) / 1000; /* written with 3 decimals: the same double on both */
}

static void log_line(gen_t *g, const char *s)
{
    if (g->n_log == g->cap_log) {
        long cap = g->cap_log ? g->cap_log * 2 : 1024;
        char **log = realloc(g->log, (size_t)cap * sizeof *log);
        if (!log) return;
        g->log = log;
        g->cap_log = cap;
    }
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (!copy) return;
    memcpy(copy, s, n);
    g->log[g->n_log++] = copy;
}

static void dump(const gen_t *g, const char *dir, uint64_t seed)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/differential-%llu.scn", dir, (unsigned long long)seed);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return;
    }
    fprintf(f, "# differential_runner --seed %llu: every line up to the first difference\n"
               "wakeups\n",
            (unsigned long long)seed);
    for (long i = 0; i < g->n_log; i++) fprintf(f, "%s\n", g->log[i]);
    fclose(f);
    fprintf(stderr, "the run up to the difference: %s (conformance_runner --redis ... replays it)\n",
            path);
}

static void print_result(const char *who, const result_t *r)
{
    fprintf(stderr, "  %s:", who);
    scn_print_fields(stderr, r);
    fprintf(stderr, "\n");
}

/* Runs one line on both; false (after the report) when they differ or the engine's
 * invariants break. */
static bool run_line(scenario_t *sc, engine_run_t *er, redis_run_t *rr, gen_t *g, const char *text,
                     long no, uint64_t seed)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", text);
    log_line(g, text);
    op_t op;
    if (scenario_line(sc, buf, (int)no, &op) != 1) {
        fprintf(stderr, "seed %llu op %ld: bad line %s\n", (unsigned long long)seed, no, text);
        return false;
    }
    static result_t re, rd;
    memset(&re, 0, sizeof re);
    memset(&rd, 0, sizeof rd);
    int woke_engine = engine_wake(er, SCN_T0 + op.t_s);
    int woke_redis = woke_engine < 0 ? 0 : redis_wake(rr, SCN_T0 + op.t_s);
    if (woke_engine < 0 || woke_redis < 0) {
        fprintf(stderr, "seed %llu op %ld: more than %d wake-ups of %s before it: one that "
                        "changes nothing keeps coming back (at %.6f)\n  %s\n",
                (unsigned long long)seed, no, SCN_MAX_WAKEUPS,
                woke_engine < 0 ? "the engine" : "redis",
                (woke_engine < 0 ? sl_engine_next_wakeup(er->e) : SCN_T0) - SCN_T0, text);
        return false;
    }
    engine_op(er, sc, &op, &re);
    redis_op(rr, sc, &op, &rd);
    char why[256];
    bool same = results_equal(&re, &rd, why, sizeof why);
    if (!same) {
        fprintf(stderr, "seed %llu op %ld: engine and redis differ (%s)\n  %s\n",
                (unsigned long long)seed, no, why, text);
        print_result("engine", &re);
        print_result("redis ", &rd);
        return false;
    }
    if (sl_engine_check(er->e) != SL_OK) {
        fprintf(stderr, "seed %llu op %ld: engine invariant broken: %s\n  %s\n",
                (unsigned long long)seed, no, sl_engine_errmsg(er->e), text);
        return false;
    }
    if (g->states && strcmp(op.tok[0], "state") != 0) {
        /* after every operation, both pools' state (an answer may agree while the state
         * already differs) */
        char state[64];
        for (int p = 0; p < 2; p++) {
            snprintf(state, sizeof state, "%.3f state %s", op.t_s, p ? "second" : "default");
            if (!run_line(sc, er, rr, g, state, no, seed)) return false;
        }
    }
    const field_t *f;
    for (int a = 0; strcmp(op.tok[0], "request") == 0 && re.rc == SL_OK && a < 8; a++)
        if (arg(&op, "agent") && strcmp(arg(&op, "agent"), AGENTS[a]) == 0) g->asked[a] = true;
    if ((f = get_field(&re, "lease")) && f->num > 0) remember(g->leases, &g->n_leases, (int)f->num);
    if ((f = get_field(&re, "ticket")) && f->num > 0 && strcmp(op.tok[0], "request") == 0 &&
        (f = get_field(&re, "status")) && strcmp(f->str, "queued") == 0)
        remember(g->tickets, &g->n_tickets, (int)get_field(&re, "ticket")->num);
    return true;
}

static void gen_free(gen_t *g)
{
    for (long i = 0; i < g->n_log; i++) free(g->log[i]);
    free(g->log);
}

/* One seed: the setup, then `ops` random operations. Returns 0 when all matched. */
static int run_seed(void *ud, uint64_t seed, const seeded_args_t *a)
{
    redis_run_t *rr = ud;
    long ops = a->ops;
    static scenario_t sc;
    scenario_init(&sc, "differential");
    sc.ecfg.tombstone_ttl_s = 60; /* as the property test: small maps */
    engine_run_t er = {.e = sl_engine_new(&sc.ecfg)};
    gen_t g = {.rng = seed * 2654435761ULL + 1, .states = a->states};
    int failed = redis_reset(rr) != 0;
    for (size_t i = 0; !failed && i < sizeof SETUP / sizeof SETUP[0]; i++)
        failed = !run_line(&sc, &er, rr, &g, SETUP[i], (long)i - (long)(sizeof SETUP / sizeof SETUP[0]), seed);
    for (long i = 0; !failed && i < ops; i++) {
        line_t l = {.n = 0};
        gen_time(&g);
        add(&l, "%.3f", g.t_s);
        gen_op(&g, &l);
        failed = !run_line(&sc, &er, rr, &g, l.s, i, seed);
    }
    if (failed) dump(&g, a->dir, seed);
    else printf("seed %llu: %ld operations, engine and redis agree\n", (unsigned long long)seed, ops);
    gen_free(&g);
    sl_engine_free(er.e);
    ids_free(&er.ids);
    return failed;
}

int main(int argc, char **argv)
{
    seeded_args_t a;
    if (seeded_args(argc, argv, "differential_runner", true, &a) != 0) return 2;
    redis_run_t rr = {.host = a.redis};
    int rc = seeded_run(&a, run_seed, &rr);
    redis_close(&rr);
    return rc;
}
