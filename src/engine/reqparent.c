/* reqparent.c - a request bucket shared by a pool and its long-context pool.
 *
 * A pool with `request_parent`, named PARENT:NAME (sluiced's "<pool>:long_context"), has
 * no request bucket of its own: the provider counts its calls against PARENT's requests
 * per minute (docs/design.md "Long context"). The bucket stays PARENT's, so PARENT's
 * margin, resync, snapshot and state file act on it once, as on any of its buckets; the
 * child only reads it and takes from it:
 *
 *   fits:   the child's buckets, and PARENT's request level at now >= the need's requests
 *   ETA:    the later of the child's own and (its requests ahead + 1 - PARENT's level at
 *           now) / PARENT's request refill: the child's queue wakes at PARENT's refill
 *   grant:  PARENT refilled to now, its request level lowered by the need's requests
 *   refund: (cancel, unclaimed) the same given back, up to PARENT's capacity
 *
 * PARENT's level "at now" is its refill projected, without changing PARENT: a check that
 * refuses leaves both pools as they were. A parent that is not configured (yet), or has no
 * request limit, limits nothing. The Redis port reads PARENT's record from the child's
 * call, on one Redis server (sluice.lua, section "the parent's request bucket"). */
#include "internal.h"

#include <string.h>

/* Whether `child`'s name is `parent`'s followed by ':' and a name without one. */
static bool is_parent_of(const sl__pool_t *parent, const sl__pool_t *child)
{
    const char *colon = strrchr(child->name, ':');
    size_t n = strlen(parent->name);
    return colon && (size_t)(colon - child->name) == n && !strncmp(child->name, parent->name, n);
}

void sl__req_parent_link(sl_engine_t *e, sl__pool_t *p)
{
    p->req_parent = NULL;
    for (size_t i = 0; i < e->n_pools; i++) {
        sl__pool_t *q = e->pools[i];
        if (q == p) continue;
        if (p->cfg.request_parent && is_parent_of(q, p)) p->req_parent = q;
        if (q->cfg.request_parent && is_parent_of(p, q)) q->req_parent = p;
    }
}

const sl__pool_t *sl__req_parent(const sl__pool_t *p)
{
    const sl__pool_t *q = p->req_parent;
    return q && sl__limited(q, SL_BUCKET_REQUESTS) ? q : NULL;
}

double sl__req_parent_level(const sl__pool_t *q, double now)
{
    double level = q->level[SL_BUCKET_REQUESTS];
    double dt_s = now - q->last_refill;
    if (dt_s <= 0) return level;
    double cap = sl__capacity(q, SL_BUCKET_REQUESTS);
    level += cap / 60.0 * dt_s; /* sl__refill's formula, so a check and the grant agree */
    return level > cap ? cap : level;
}

void sl__req_parent_charge(sl__pool_t *p, int64_t requests, double now)
{
    sl__pool_t *q = p->req_parent;
    if (!q || !sl__limited(q, SL_BUCKET_REQUESTS) || requests == 0) return;
    sl__refill(q, now);
    if (requests > 0)
        q->level[SL_BUCKET_REQUESTS] -= (double)requests;
    else
        sl__adjust(q, SL_BUCKET_REQUESTS, -requests);
}
