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

static result_t res_engine[SCN_MAX_OPS], res_redis[SCN_MAX_OPS];

static int run_file(const char *path, redis_run_t *rr, bool verbose)
{
    static scenario_t sc;
    if (scenario_load(path, &sc) != 0) return 1;
    int failures = 0;
    engine_run_t er = {.e = sl_engine_new(&sc.ecfg)};
    for (int i = 0; i < sc.n; i++) {
        memset(&res_engine[i], 0, sizeof res_engine[i]);
        if (sc.wakeups) engine_wake(&er, SCN_T0 + sc.ops[i].t_s);
        engine_op(&er, &sc, &sc.ops[i], &res_engine[i]);
        int rc = sl_engine_check(er.e);
        if (rc) {
            fprintf(stderr, "%s:%d: engine invariant broken: %s\n", path, sc.ops[i].line,
                    sl_engine_errmsg(er.e));
            failures++;
        }
        char why[256];
        for (int j = 0; j < sc.ops[i].nexpect; j++) {
            if (!check_expect(sc.ops[i].expect[j], &res_engine[i], &er.ids, why, sizeof why)) {
                fprintf(stderr, "%s:%d: engine: %s\n  got:", path, sc.ops[i].line, why);
                scn_print_fields(stderr, &res_engine[i]);
                fprintf(stderr, "\n");
                failures++;
            }
        }
        if (verbose) {
            printf("%s:%d engine:", path, sc.ops[i].line);
            scn_print_fields(stdout, &res_engine[i]);
            printf("\n");
        }
    }
    sl_engine_free(er.e);
    ids_free(&er.ids);
    if (rr && sc.engine_only) {
        printf("%s: engine only\n", path);
        rr = NULL;
    }
    if (rr) {
        if (redis_reset(rr) != 0) {
            scenario_free(&sc);
            return failures + 1;
        }
        for (int i = 0; i < sc.n; i++) {
            memset(&res_redis[i], 0, sizeof res_redis[i]);
            if (sc.wakeups) redis_wake(rr, SCN_T0 + sc.ops[i].t_s);
            redis_op(rr, &sc, &sc.ops[i], &res_redis[i]);
            char why[256];
            for (int j = 0; j < sc.ops[i].nexpect; j++) {
                if (!check_expect(sc.ops[i].expect[j], &res_redis[i], &rr->ids, why, sizeof why)) {
                    fprintf(stderr, "%s:%d: redis: %s\n  got:", path, sc.ops[i].line, why);
                    scn_print_fields(stderr, &res_redis[i]);
                    fprintf(stderr, "\n");
                    failures++;
                }
            }
            if (!results_equal(&res_engine[i], &res_redis[i], why, sizeof why)) {
                fprintf(stderr, "%s:%d: engine and redis differ (%s)\n  engine:", path,
                        sc.ops[i].line, why);
                scn_print_fields(stderr, &res_engine[i]);
                fprintf(stderr, "\n  redis: ");
                scn_print_fields(stderr, &res_redis[i]);
                fprintf(stderr, "\n");
                failures++;
            }
            if (verbose) {
                printf("%s:%d redis: ", path, sc.ops[i].line);
                scn_print_fields(stdout, &res_redis[i]);
                printf("\n");
            }
        }
    }
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
