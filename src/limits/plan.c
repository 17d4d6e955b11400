/* plan.c - resolving a check for a decider that keeps the state elsewhere (the Redis port): levels, parameters, tree and config ids.
 *
 * The tree id is a hash of the smallest name among the roots (limits without parents) of
 * the limits connected to this one by `parents` (either direction), so every key one
 * check touches carries the same id (on Redis: one hash tag, one Cluster slot), and
 * distinct trees spread. Roots, not all names: a reload that adds a limit under existing
 * ones (a new leaf of a global budget) leaves the tree's id, hence its keys and their
 * state, as they were, as memory keeps unchanged limits' state. It is computed once per
 * limit: a linked set does not change. */
#include "limits_internal.h"
#include "limits_plan.h"

#include <stdio.h>
#include <string.h>

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h ? h : 1;
}

#define FNV0 14695981039346656037ULL

static bool linked(const sl__limit_t *a, const sl__limit_t *b)
{
    for (size_t p = 0; p < a->cfg.n_parents; p++)
        if (strcmp(a->parent_names[p], b->name) == 0) return true;
    return false;
}

/* The smallest root name of l's tree: a flood over parent links both ways. */
static uint64_t tree_of(const sl_limits_t *ls, sl__limit_t *l)
{
    size_t n = sl_limits_count(ls);
    sl__limit_t *stack[1024];
    bool seen[1024] = {false};
    if (n > 1024) return fnv(FNV0, "*", 1); /* too many to flood: one tree for all */
    size_t top = 0;
    const char *least = NULL; /* an acyclic tree has a root */
    for (size_t i = 0; i < n; i++)
        if (sl__limits_at(ls, i) == l) seen[i] = true;
    stack[top++] = l;
    while (top > 0) {
        sl__limit_t *at = stack[--top];
        if (at->cfg.n_parents == 0 && (!least || strcmp(at->name, least) < 0)) least = at->name;
        for (size_t i = 0; i < n; i++) {
            sl__limit_t *o = sl__limits_at(ls, i);
            if (seen[i] || !(linked(at, o) || linked(o, at))) continue;
            seen[i] = true;
            stack[top++] = o;
        }
    }
    if (!least) least = l->name;
    return fnv(FNV0, least, strlen(least));
}

static uint64_t config_of(const sl__limit_t *l)
{
    char buf[512];
    const sl_limit_adaptive_t *a = &l->cfg.adaptive;
    int n = snprintf(buf, sizeof buf, "%d %.17g %lld %lld %lld %d %d %.17g %.17g %.17g %.17g %.17g %.17g %lld",
                     (int)l->cfg.algorithm, l->cfg.rate, (long long)l->period_us,
                     (long long)l->burst_units, (long long)l->ttl_us, (int)l->cfg.per, a->enabled,
                     a->min_rate, a->max_rate, a->decrease, a->increase, a->high_error,
                     a->low_error, (long long)a->window);
    return fnv(fnv(FNV0, l->name, strlen(l->name) + 1), buf, (size_t)n);
}

int sl_limits_plan(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                   sl_limit_plan_for_t what, int64_t successes, int64_t errors,
                   sl_limit_plan_t *plan)
{
    bool one = what != SL_LIMIT_PLAN_CHECK;
    sl__limit_t *lim[SL_LIMITS_MAX_LEVELS];
    const char *keys[SL_LIMITS_MAX_LEVELS];
    int64_t units[SL_LIMITS_MAX_LEVELS];
    size_t n = 0;
    int rc = sl__limits_levels(ls, name, req, one, lim, keys, units, &n);
    if (rc) return rc;
    if (what == SL_LIMIT_PLAN_RELEASE) rc = sl__limits_release_ok(ls, lim[0]);
    if (what == SL_LIMIT_PLAN_REPORT) rc = sl__limits_report_ok(ls, lim[0], successes, errors);
    if (rc) return rc;
    memset(plan, 0, sizeof *plan);
    plan->n = n;
    plan->hits = req->hits;
    plan->adaptive = lim[0]->cfg.adaptive;
    for (size_t i = 0; i < n; i++) {
        sl__limit_t *l = lim[i];
        if (!l->tree_hash) l->tree_hash = tree_of(ls, l);
        if (!l->config_hash) l->config_hash = config_of(l);
        sl_limit_plan_level_t *p = &plan->lv[i];
        snprintf(p->limit_name, sizeof p->limit_name, "%s", l->name);
        snprintf(p->key, sizeof p->key, "%s", keys[i]);
        p->algorithm = l->cfg.algorithm;
        p->rate = l->cfg.rate;
        p->period_us = l->period_us;
        p->burst_units = l->burst_units;
        p->ttl_us = l->ttl_us;
        p->units = units[i];
        p->adaptive = l->cfg.adaptive.enabled;
        p->config_id = l->config_hash;
    }
    plan->tree_id = lim[0]->tree_hash;
    return SL_OK;
}

void sl_limits_plan_names(const sl_limit_plan_t *plan, sl_limit_result_t *out)
{
    for (size_t i = 0; i < plan->n && i < SL_LIMITS_MAX_LEVELS; i++) {
        out->checked[i].limit_name = plan->lv[i].limit_name;
        out->checked[i].key = plan->lv[i].key;
        out->checked[i].cost = plan->lv[i].units;
    }
}
