/* drive.h - one scenario operation run on the engine or on sluice.lua, answered in the backend-neutral record.
 *
 * The scenario runner (runner.c, tests/conformance/NAME.scn) and the differential runner
 * (differential.c, random operations) drive the two implementations of the engine's rules
 * through these functions, so both compare the same fields the same way. Time is the
 * caller's: an operation runs at SCN_T0 + its `t_s`, on the engine as `now` and on the
 * Redis library as the pinned time argument.
 */
#ifndef SL_CONFORMANCE_DRIVE_H
#define SL_CONFORMANCE_DRIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis.h>

#include <sluice/engine.h>

#include "scenario.h"

#define SCN_T0 1796000000.0
#define SCN_MAX_VARS 256
#define SCN_MAX_OPS 16384 /* a differential run's dump replays whole */
#define SCN_MAX_POOLS 64
#define SCN_MAX_WAKEUPS 10000 /* in one step: more is a wake-up that makes no progress */

/* Each backend maps its ids to symbols 1, 2, ... in order of first sight, so two backends
 * that issue different ids still answer the same symbols. An operation names an id as
 * `$var` (bound by an expectation), `@N` (symbol N) or a literal number. */
typedef struct ids {
    uint64_t *id; /* symbol s is id[s - 1] */
    int n, cap;
    int *slot;    /* open addressing on the id: a symbol, 0 empty */
    size_t n_slots;
    char var[SCN_MAX_VARS][32];
    uint64_t var_id[SCN_MAX_VARS];
    int n_vars;
} ids_t;

/* The symbol of `id` (0 for id 0), given on first sight; -1 out of memory. */
int ids_symbol(ids_t *m, uint64_t id);
bool ids_var_get(const ids_t *m, const char *name, uint64_t *id);
void ids_var_set(ids_t *m, const char *name, uint64_t id);
/* Forgets every symbol and variable (the memory is kept for reuse until ids_free). */
void ids_reset(ids_t *m);
void ids_free(ids_t *m);

/* What a scenario configures for every pool: the Redis library keeps roles, priorities,
 * teams and caps per pool and receives them with each pool's configuration. */
typedef struct scenario {
    const char *path;
    sl_engine_config_t ecfg;
    op_t ops[SCN_MAX_OPS];
    int n;
    char roles[512], prios[512];
    char teams[512], members[4096]; /* "team=weight,..." and "agent=team,..." */
    char caps[4096];                /* configure's `caps` list (sl__rcaps_format) */
    char *lines[SCN_MAX_OPS];       /* the split copies the ops point into */
    int n_lines;
    bool engine_only; /* "engine_only": what the Redis library does not port */
    bool one_server;  /* "one_server": what sluice.lua does over several pools' slots on one
                         Redis server only (engine only against a Cluster) */
    bool wakeups;     /* "wakeups": every wake-up is delivered at its time (engine_wake) */
} scenario_t;

/* Starts an empty scenario: default engine settings, roles and priorities. */
void scenario_init(scenario_t *sc, const char *path);
/* Reads one line into `op` (`line` is split in place and must outlive `op`): a
 * directive (`engine_only`, `engine k=v`) is applied to `sc`, an operation is parsed
 * and its per-pool settings (role, priority, team, member, caps) noted. Returns 1 for
 * an operation, 0 for a blank or directive line, -1 for a line naming no operation. */
int scenario_line(scenario_t *sc, char *line, int lineno, op_t *op);
/* Reads file `path` into sc->ops; -1 (after a message) when it cannot. */
int scenario_load(const char *path, scenario_t *sc);
void scenario_free(scenario_t *sc);

/* The engine side: one engine and its ids. */
typedef struct engine_run {
    sl_engine_t *e;
    ids_t ids;
} engine_run_t;

/* Runs `op` on the engine, answering into `r` (zeroed by the caller). */
void engine_op(engine_run_t *er, const scenario_t *sc, const op_t *op, result_t *r);
/* Delivers every wake-up due by `now_s` at its own time, as the daemon's timer does
 * (sl_engine_next_wakeup, then sl_engine_advance to it). Returns how many, or -1 when
 * SCN_MAX_WAKEUPS did not reach `now_s` (a wake-up that changes nothing comes back). */
int engine_wake(engine_run_t *er, double now_s);

/* The Redis side: a synchronous hiredis connection to the library. */
typedef struct redis_run {
    redisContext *c;
    ids_t ids;
    char pools[SCN_MAX_POOLS][130];
    int pool_no[SCN_MAX_POOLS];
    int n_pools;
    double wake_s[SCN_MAX_POOLS]; /* each pool's next wake-up, as its last reply said */
    char *host; /* HOST:PORT[,HOST:PORT...] (every master of a Cluster) */
} redis_run_t;

/* Empties every node, loads the library and forgets the ids; -1 (after a message) when
 * Redis cannot be reached or refuses the library. */
int redis_reset(redis_run_t *rr);
/* Runs `op` on the library at its pinned time, answering into `r` (zeroed by the caller). */
void redis_op(redis_run_t *rr, const scenario_t *sc, const op_t *op, result_t *r);
/* Delivers every pool's wake-up due by `now_s` at its own time (sluice_advance of that
 * pool), as the backend's timer does with the wake-up each reply names. Returns as
 * engine_wake. */
int redis_wake(redis_run_t *rr, double now_s);
void redis_close(redis_run_t *rr);

#endif
