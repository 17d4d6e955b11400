/* limits_plan.h - a check resolved for another decider (the Redis Functions port): its levels, keys, units and parameters.
 *
 * The limit set knows the configuration; a plan carries what a decider that keeps the
 * state elsewhere needs for one call: per level the limit, the key, the units asked and
 * the algorithm's integer parameters, plus two stable ids: the limit tree's (every limit
 * connected to this one through `parents`, in either direction: the keys of one check
 * all belong to one tree) and each level's configuration's (a changed limit starts with
 * fresh state, as a reload does in memory). Strings are copied: a plan outlives a reload.
 */
#ifndef SLUICE_LIMITS_PLAN_H
#define SLUICE_LIMITS_PLAN_H

#include "limits.h"

typedef struct sl_limit_plan_level {
    char limit_name[SL_LIMITS_MAX_NAME + 1];
    char key[SL_LIMITS_MAX_NAME + 1];
    sl_limit_algorithm_t algorithm;
    double rate;       /* the configured rate (the starting one when adaptive) */
    int64_t period_us, burst_units, ttl_us;
    int64_t units;     /* hits x this level's cost; 0 in a one-level plan */
    bool adaptive;
    uint64_t config_id; /* changes when the limit's configuration does */
} sl_limit_plan_level_t;

typedef struct sl_limit_plan {
    uint64_t tree_id; /* the same for every limit of one tree */
    size_t n;         /* the limit first, then its ancestors, nearest first */
    sl_limit_plan_level_t lv[SL_LIMITS_MAX_LEVELS];
    sl_limit_adaptive_t adaptive; /* level 0's */
    int64_t hits;
} sl_limit_plan_t;

/* What a plan is for: which levels, and what is validated as the library would. */
typedef enum sl_limit_plan_for {
    SL_LIMIT_PLAN_CHECK = 0, /* every level, units = hits x cost (check, probe, peek) */
    SL_LIMIT_PLAN_INFO,      /* the limit alone at the request's key, units 0 */
    SL_LIMIT_PLAN_RELEASE,   /* ... and it must be a concurrency limit */
    SL_LIMIT_PLAN_REPORT,    /* ... and adaptive, with the counts in range */
} sl_limit_plan_for_t;

/* Resolves `name` for `req` as sl_limits_check (or release, report, key_info) would,
 * validating the same and refusing with the same errors; `successes`/`errors` are used
 * by SL_LIMIT_PLAN_REPORT only. Returns 0; SL_ENOTFOUND, SL_EINVAL (sl_limits_errmsg
 * names the field). Changes nothing in the set. */
int sl_limits_plan(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                   sl_limit_plan_for_t what, int64_t successes, int64_t errors,
                   sl_limit_plan_t *plan);

/* Fills the names and keys of `out`'s levels from the plan (pointers into `plan`). */
void sl_limits_plan_names(const sl_limit_plan_t *plan, sl_limit_result_t *out);

#endif /* SLUICE_LIMITS_PLAN_H */
