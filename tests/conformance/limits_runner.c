/* limits_runner.c - runs the action-limit conformance scenarios (tests/conformance/limits/NAME.scn) and checks every expectation.
 *
 * Usage: limits_conformance_runner [-v] [--redis HOST:PORT[,HOST:PORT...]] FILE.scn...
 * (several nodes: the masters of a Redis Cluster, redirections followed)
 * The format (docs/limits.md, "Conformance scenarios"): `limit NAME field=value...`
 * lines configure the set (all of them, in order, before the first operation), and
 * `T OP NAME args... -> field=value...` lines run an operation at T seconds after a
 * fixed epoch and check fields of its answer. Each backend answers through the same
 * neutral record of named fields: with --redis every file also runs on limits.lua in
 * that Redis (FLUSHALL and FUNCTION LOAD REPLACE first; the time pinned to the
 * scenario's through the library's test-only time argument, as the lease runner does).
 * A file with the line `only memory` (max_keys, sweeps: the memory engine's own bound)
 * runs on the library alone. Exit status 0 when every expectation held. The operations
 * are limits_drive.c's, shared with the differential runner.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "limits/limits_json.h"
#include "limits_drive.h"

#define MAX_OPS 4096

/* ---- scenario files ---- */

typedef struct scenario {
    const char *path;
    json_t *limits; /* name -> object, in file order */
    op_t ops[MAX_OPS];
    int n;
    char *lines[MAX_OPS];
    int n_lines;
    bool memory_only; /* `only memory` */
} scenario_t;

static int load(const char *path, scenario_t *sc)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    memset(sc, 0, sizeof *sc);
    sc->path = path;
    sc->limits = json_object();
    char line[4096];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *copy = strdup(line), *tok[SCN_MAX_TOKENS * 2];
        int n = scn_split(copy, tok, SCN_MAX_TOKENS * 2);
        if (n == 2 && strcmp(tok[0], "only") == 0 && strcmp(tok[1], "memory") == 0) {
            sc->memory_only = true;
            free(copy);
            continue;
        }
        if (n == 0 || strcmp(tok[0], "limit") == 0) {
            if (n) rc = limits_config_line(sc->limits, sc->path, tok, n, lineno);
            free(copy);
            continue;
        }
        if (sc->n == MAX_OPS) {
            free(copy);
            break;
        }
        sc->lines[sc->n_lines++] = copy;
        op_t *op = &sc->ops[sc->n++];
        if (scn_op_parse(op, tok, n, lineno) < 0) {
            fprintf(stderr, "%s:%d: no operation\n", path, lineno);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

static void free_scenario(scenario_t *sc)
{
    for (int i = 0; i < sc->n_lines; i++) free(sc->lines[i]);
    json_decref(sc->limits);
}

/* ---- expectations ---- */


static bool check_expect(const char *exp, const result_t *r, char *why, size_t n)
{
    const char *eq = strchr(exp, '=');
    if (!eq) {
        snprintf(why, n, "bad expectation %s", exp);
        return false;
    }
    char name[80];
    snprintf(name, sizeof name, "%.*s", (int)(eq - exp), exp);
    const char *want = eq + 1;
    if (strcmp(name, "error") == 0) {
        if (strcmp(sl_strerror(r->rc), want) == 0) return true;
        snprintf(why, n, "error: want %s, got %s", want, sl_strerror(r->rc));
        return false;
    }
    const field_t *f = get_field(r, name);
    if (!f) {
        snprintf(why, n, "%s: missing (%s)", name, sl_strerror(r->rc));
        return false;
    }
    return scn_value_matches(f, name, want, 1e-9, 0, why, n);
}

static void print_result(FILE *out, const result_t *r)
{
    fprintf(out, " rc=%s", sl_strerror(r->rc));
    scn_print_fields(out, r);
}

static bool use_redis;

typedef void (*op_fn)(sl_limits_t *ls, const op_t *op, result_t *r);

/* Runs every operation of `sc` on a fresh set with `fn`; returns the failures. */
static int run_backend(scenario_t *sc, op_fn fn, const char *backend, bool verbose)
{
    int failures = 0;
    sl_limits_t *ls = sl_limits_new();
    bool configured = ls && sl_limits_add_all_json(ls, sc->limits) == SL_OK;
    if (!configured) {
        fprintf(stderr, "%s: configuration refused: %s\n", sc->path, ls ? sl_limits_errmsg(ls) : "no memory");
        failures++;
    }
    for (int i = 0; configured && i < sc->n; i++) {
        static result_t r;
        memset(&r, 0, sizeof r);
        fn(ls, &sc->ops[i], &r);
        char why[256];
        for (int j = 0; j < sc->ops[i].nexpect; j++) {
            if (check_expect(sc->ops[i].expect[j], &r, why, sizeof why)) continue;
            fprintf(stderr, "%s:%d: %s: %s\n  got:", sc->path, sc->ops[i].line, backend, why);
            print_result(stderr, &r);
            fprintf(stderr, "\n");
            failures++;
        }
        if (verbose) {
            printf("%s:%d: %s", sc->path, sc->ops[i].line, backend);
            print_result(stdout, &r);
            printf("\n");
        }
    }
    sl_limits_free(ls);
    return failures;
}

static int run_file(const char *path, bool verbose)
{
    static scenario_t sc;
    if (load(path, &sc) != 0) {
        free_scenario(&sc);
        return 1;
    }
    int failures = run_backend(&sc, limits_lib_op, "library", verbose);
    const char *ran = "library";
    if (use_redis && !sc.memory_only) {
        failures += limits_redis_reset() ? 1 : run_backend(&sc, limits_redis_op, "redis", verbose);
        ran = "library and redis";
    } else if (use_redis) {
        ran = "library; memory only";
    }
    printf("%s %s (%d operations, %s)\n", failures ? "FAIL" : "ok  ", path, sc.n, ran);
    free_scenario(&sc);
    return failures;
}

int main(int argc, char **argv)
{
    bool verbose = false;
    int failures = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            verbose = true;
            continue;
        }
        if (strcmp(argv[i], "--redis") == 0 && i + 1 < argc) {
            use_redis = true;
            if (limits_redis_open(argv[++i]) != 0) return 2;
            continue;
        }
        files++;
        failures += run_file(argv[i], verbose);
    }
    if (!files) {
        fprintf(stderr, "usage: limits_conformance_runner [-v] [--redis HOST:PORT[,HOST:PORT...]] FILE.scn...\n");
        return 2;
    }
    return failures ? 1 : 0;
}
