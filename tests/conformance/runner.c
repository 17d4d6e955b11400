/* runner.c - runs the conformance scenarios (tests/conformance/NAME.scn) on the engine and on the Redis library, and compares.
 *
 * Usage: conformance_runner [--redis HOST:PORT[,HOST:PORT...]] [-v] FILE.scn...
 * Without --redis only the engine runs (the expectations are still checked). With
 * it, each scenario also runs against sluice.lua through hiredis (synchronous, the
 * time pinned to the scenario's), after FLUSHALL and FUNCTION LOAD REPLACE, and every
 * answer of the two is compared field by field: a difference is a bug. The format
 * is in docs/redis.md ("Conformance scenarios"). Exit status 0 when everything
 * matched. The operations themselves are drive.c's, shared with the differential runner.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drive.h"

/* Checks one expectation "name=value" ($var binds/compares an id symbol). */
static bool check_expect(const char *exp, const result_t *r, ids_t *ids, char *why, size_t n)
{
    char name[64];
    const char *eq = strchr(exp, '=');
    if (!eq) {
        snprintf(why, n, "bad expectation %s", exp);
        return false;
    }
    snprintf(name, sizeof name, "%.*s", (int)(eq - exp), exp);
    const char *want = eq + 1;
    if (strcmp(name, "error") == 0 || strcmp(name, "rc") == 0) {
        const char *got = r->rc ? sl_strerror(r->rc) : "ok";
        if (strcmp(got, want) == 0) return true;
        snprintf(why, n, "%s: want %s, got %s", name, want, got);
        return false;
    }
    const field_t *f = get_field(r, name);
    if (!f) {
        snprintf(why, n, "%s: missing (rc %s)", name, sl_strerror(r->rc));
        return false;
    }
    if (want[0] == '$') {
        uint64_t id;
        if (f->num <= 0) {
            snprintf(why, n, "%s: no id", name);
            return false;
        }
        uint64_t got = ids->id[(int)f->num - 1];
        if (!ids_var_get(ids, want + 1, &id)) {
            ids_var_set(ids, want + 1, got);
            return true;
        }
        if (id == got) return true;
        snprintf(why, n, "%s: want %s", name, want);
        return false;
    }
    return scn_value_matches(f, name, want, 0, 1e-9, why, n);
}

/* Checks op's expectations on `r`; returns how many failed (each reported). */
static int expectations(const char *path, const op_t *op, const result_t *r, ids_t *ids,
                        const char *who)
{
    int failures = 0;
    char why[256];
    for (int j = 0; j < op->nexpect; j++) {
        if (check_expect(op->expect[j], r, ids, why, sizeof why)) continue;
        fprintf(stderr, "%s:%d: %s: %s\n  got:", path, op->line, who, why);
        scn_print_fields(stderr, r);
        fprintf(stderr, "\n");
        failures++;
    }
    return failures;
}

static void print_verbose(const char *path, const op_t *op, const char *who, const result_t *r)
{
    printf("%s:%d %s:", path, op->line, who);
    scn_print_fields(stdout, r);
    printf("\n");
}

/* Runs one file: each operation on the engine, then (with `rr`) on the library, the two
 * answers compared at once, so a run of any length needs two answers of memory. */
static int run_file(const char *path, redis_run_t *rr, bool verbose)
{
    static scenario_t sc;
    static result_t re, rd;
    if (scenario_load(path, &sc) != 0) return 1;
    int failures = 0;
    if (rr && sc.engine_only) {
        printf("%s: engine only\n", path);
        rr = NULL;
    }
    if (rr && sc.one_server && strchr(rr->host, ',')) {
        printf("%s: engine only (one Redis server: a Cluster keeps each pool in its own slot)\n",
               path);
        rr = NULL;
    }
    if (rr && redis_reset(rr) != 0) {
        scenario_free(&sc);
        return 1;
    }
    engine_run_t er = {.e = sl_engine_new(&sc.ecfg)};
    for (int i = 0; i < sc.n; i++) {
        const op_t *op = &sc.ops[i];
        memset(&re, 0, sizeof re);
        if (sc.wakeups) engine_wake(&er, SCN_T0 + op->t_s);
        engine_op(&er, &sc, op, &re);
        if (sl_engine_check(er.e)) {
            fprintf(stderr, "%s:%d: engine invariant broken: %s\n", path, op->line,
                    sl_engine_errmsg(er.e));
            failures++;
        }
        failures += expectations(path, op, &re, &er.ids, "engine");
        if (verbose) print_verbose(path, op, "engine", &re);
        if (!rr) continue;
        memset(&rd, 0, sizeof rd);
        if (sc.wakeups) redis_wake(rr, SCN_T0 + op->t_s);
        redis_op(rr, &sc, op, &rd);
        failures += expectations(path, op, &rd, &rr->ids, "redis");
        char why[256];
        if (!results_equal(&re, &rd, why, sizeof why)) {
            fprintf(stderr, "%s:%d: engine and redis differ (%s)\n  engine:", path, op->line, why);
            scn_print_fields(stderr, &re);
            fprintf(stderr, "\n  redis: ");
            scn_print_fields(stderr, &rd);
            fprintf(stderr, "\n");
            failures++;
        }
        if (verbose) print_verbose(path, op, "redis", &rd);
    }
    sl_engine_free(er.e);
    ids_free(&er.ids);
    printf("%s %s (%d operations%s)\n", failures ? "FAIL" : "ok  ", path, sc.n,
           rr ? ", engine and redis" : ", engine only");
    scenario_free(&sc);
    return failures;
}

int main(int argc, char **argv)
{
    redis_run_t rr = {0};
    bool use_redis = false, verbose = false;
    int failures = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--redis") == 0 && i + 1 < argc) {
            rr.host = argv[++i]; /* HOST:PORT[,HOST:PORT...] (every node of a Cluster) */
            use_redis = true;
        } else if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
        }
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--redis") == 0) {
            i++;
            continue;
        }
        if (argv[i][0] == '-') continue;
        files++;
        failures += run_file(argv[i], use_redis ? &rr : NULL, verbose);
    }
    redis_close(&rr);
    if (!files) {
        fprintf(stderr, "usage: conformance_runner [--redis HOST:PORT] [-v] FILE.scn...\n");
        return 2;
    }
    return failures ? 1 : 0;
}
