/* snapshot.c - what a restart must not forget: the id base, cold starts, and the export
 * and restore of pools' levels and margins, leases in flight and calibrations.
 *
 * The engine does no I/O, so persistence is the caller's: it exports these records,
 * stores them, and restores them into a fresh engine whose pools are configured. The
 * design rule is "never overbook because of a restart": a restored pool has the levels
 * it had (refilled for the time it was down, as the provider's buckets were), a
 * restored lease still holds its reservation and is still reaped without refund, and
 * ids issued after a restart start above a base the caller chose above every earlier
 * id, so an old id can never name a new lease. When nothing can be restored the caller
 * cold-starts the pool: empty buckets that refill, which costs at most one refill
 * period of slower grants and can never overbook. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int sl_engine_set_id_base(sl_engine_t *e, uint64_t base)
{
    if (base > SL_ID_BASE_MAX)
        return sl__fail(e, SL_EINVAL, "id base %llu is above the largest, 2^59",
                        (unsigned long long)base);
    if (base + 1 < e->next_id)
        return sl__fail(e, SL_EINVAL, "id base %llu is below the next id %llu: ids would repeat",
                        (unsigned long long)base, (unsigned long long)e->next_id);
    /* The ring of ended states is indexed by id: ids issued before are forgotten there
     * (they are below the base now and end in `ended_old`). */
    if (e->ended_cap) memset(e->ended, 0, e->ended_cap);
    e->id_base = base;
    e->next_id = base + 1;
    return SL_OK;
}

uint64_t sl_engine_next_id(const sl_engine_t *e)
{
    return e->next_id;
}

static int check_now(sl_engine_t *e, double now_s)
{
    if (!isfinite(now_s) || now_s < e->now)
        return sl__fail(e, SL_ETIME, "now %.6f is before the engine's time %.6f", now_s, e->now);
    return SL_OK;
}

static sl__pool_t *find_pool(sl_engine_t *e, const char *pool, int *rc)
{
    sl__pool_t *p = pool ? sl__pool_find(e, pool) : NULL;
    *rc = p ? SL_OK
            : sl__fail(e, SL_ENOTFOUND, "pool \"%.140s\" not found", pool ? pool : "(null)");
    return p;
}

int sl_engine_pool_cold_start(sl_engine_t *e, const char *pool, double window_s, double now_s)
{
    int rc;
    sl__pool_t *p = find_pool(e, pool, &rc);
    if (!p) return rc;
    if (!(window_s >= 0 && window_s <= 1e9))
        return sl__fail(e, SL_EINVAL, "cold-start window %g must be 0 to 1e9 seconds", window_s);
    if ((rc = check_now(e, now_s))) return rc;
    sl_engine_advance(e, now_s);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (p->level[b] > 0) p->level[b] = 0;
    p->last_refill = now_s;
    p->cold_until = now_s + window_s;
    p->cold_raised = 0;
    return SL_OK;
}

int sl_engine_pool_state(const sl_engine_t *e, const char *pool, sl_pool_state_t *out)
{
    const sl__pool_t *p = pool ? sl__pool_find(e, pool) : NULL;
    if (!p) return SL_ENOTFOUND;
    memset(out, 0, sizeof *out);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        out->level[b] = p->level[b];
    out->at = p->last_refill;
    out->margin = sl__margin(p);
    out->clean_since = p->clean_since;
    out->floor_since = p->floor_since;
    out->blocked_until = p->blocked_until;
    out->cold_until = p->cold_until;
    out->cold_raised = p->cold_raised;
    out->lease_mean_s = p->lease_mean_s;
    out->lease_samples = p->lease_samples;
    return SL_OK;
}

static double at_most(double t, double now)
{
    return t > now ? now : t;
}

int sl_engine_pool_restore(sl_engine_t *e, const char *pool, const sl_pool_state_t *st,
                           double now_s)
{
    int rc;
    sl__pool_t *p = find_pool(e, pool, &rc);
    if (!p) return rc;
    if (!st) return sl__fail(e, SL_EINVAL, "pool \"%s\": state missing", p->name);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (!isfinite(st->level[b])) /* an infinite debt would never refill */
            return sl__fail(e, SL_EINVAL, "pool \"%s\": %s level %g is not finite", p->name,
                            sl_bucket_name((sl_bucket_t)b), st->level[b]);
    if (!isfinite(st->at) || !isfinite(st->margin) || !isfinite(st->clean_since) ||
        isnan(st->floor_since) || isnan(st->blocked_until) || isnan(st->cold_until))
        return sl__fail(e, SL_EINVAL, "pool \"%s\": a time or the margin %g is not finite",
                        p->name, st->margin);
    if ((rc = check_now(e, now_s))) return rc;
    sl_engine_advance(e, now_s);
    int bp = sl__to_bp(st->margin);
    p->margin_bp = bp > p->max_bp ? p->max_bp : bp < p->floor_bp ? p->floor_bp : bp;
    p->clean_since = at_most(st->clean_since, now_s);
    p->floor_since = p->margin_bp <= p->floor_bp
                         ? (st->floor_since >= 0 ? at_most(st->floor_since, now_s) : now_s)
                         : -1;
    p->blocked_until = st->blocked_until;
    p->cold_until = st->cold_until;
    p->cold_raised = st->cold_raised;
    if (st->lease_samples > 0 && st->lease_mean_s >= 0 && isfinite(st->lease_mean_s)) {
        p->lease_mean_s = st->lease_mean_s; /* D, for the concurrency ETA */
        p->lease_samples = st->lease_samples;
    }
    p->last_refill = at_most(st->at, now_s);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        p->level[b] = sl__limited(p, (sl_bucket_t)b) ? st->level[b] : 0;
    sl__clamp_levels(p);
    /* Refill, margin recovery, reaps and alerts for the time the daemon was down. */
    sl__pool_advance(e, p, now_s);
    return SL_OK;
}

static void fill_lease_state(const sl__lease_t *l, sl_lease_state_t *out)
{
    memset(out, 0, sizeof *out);
    out->id = l->id;
    out->ticket = l->ticket;
    out->pool = l->pool->name;
    out->agent = l->pa->agent->name;
    out->cache_key = l->cache ? l->cache->key : NULL;
    out->model = l->calib ? l->calib->model : NULL;
    out->outputs = l->outs ? l->outs->model : NULL;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        out->need[b] = l->need.n[b];
    out->cached_tokens = l->need.cached_tokens;
    out->cache_penalty = l->need.penalty;
    out->est_prompt_tokens = l->est_prompt_tokens;
    out->weight = l->weight;
    out->granted_at = l->granted_at;
    out->waited_s = l->waited_s;
    out->ttl_s = l->ttl_s;
    out->expires_at = l->expiry.at;
    out->claimed = l->claimed;
    out->cache_ttl_s = l->need.cache_ttl_s;
}

int sl_engine_lease_state(const sl_engine_t *e, uint64_t lease, sl_lease_state_t *out)
{
    uint64_t v;
    if (!sl__u64map_get(&e->leases, lease, &v) || (v & 1)) return SL_ENOTFOUND;
    fill_lease_state((const sl__lease_t *)(uintptr_t)v, out);
    return SL_OK;
}

void sl_engine_lease_foreach(const sl_engine_t *e, void (*fn)(const sl_lease_state_t *l, void *ud),
                             void *ud)
{
    for (size_t i = 0; i < e->n_pools; i++) {
        const sl__pool_t *p = e->pools[i];
        for (size_t j = 0; j < p->lease_heap.len; j++) {
            sl_lease_state_t st;
            fill_lease_state(sl__container_of(p->lease_heap.items[j], sl__lease_t, expiry), &st);
            fn(&st, ud);
        }
    }
}

static int validate_lease_state(sl_engine_t *e, const sl_lease_state_t *l)
{
    if (!l->agent || !sl__valid_name(l->agent, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "lease %llu: agent \"%.140s\" must be 1-128 of "
                                      "[A-Za-z0-9._:-]",
                        (unsigned long long)l->id, l->agent ? l->agent : "(null)");
    if (l->id == 0 || l->id >= e->next_id)
        return sl__fail(e, SL_EINVAL,
                        "lease %llu: the id must be between 1 and the next id %llu (set the id "
                        "base above it first)",
                        (unsigned long long)l->id, (unsigned long long)e->next_id);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (l->need[b] < 0 || l->need[b] > SL_TOKENS_MAX)
            return sl__fail(e, SL_EINVAL, "lease %llu: %s %lld must be between 0 and 2^53",
                            (unsigned long long)l->id, sl_bucket_name((sl_bucket_t)b),
                            (long long)l->need[b]);
    if (l->cached_tokens < 0 || l->cached_tokens > SL_TOKENS_MAX || l->est_prompt_tokens < 0 ||
        l->est_prompt_tokens > SL_TOKENS_MAX)
        return sl__fail(e, SL_EINVAL, "lease %llu: cached_tokens %lld or the estimate %lld is "
                                      "out of range",
                        (unsigned long long)l->id, (long long)l->cached_tokens,
                        (long long)l->est_prompt_tokens);
    if (!(isfinite(l->weight) && l->weight > 0) || !isfinite(l->granted_at) ||
        !isfinite(l->expires_at) || !(isfinite(l->ttl_s) && l->ttl_s > 0) ||
        !isfinite(l->waited_s))
        return sl__fail(e, SL_EINVAL, "lease %llu: weight %g, ttl %g or a time is not valid",
                        (unsigned long long)l->id, l->weight, l->ttl_s);
    if (!(l->cache_ttl_s >= 0 && l->cache_ttl_s <= SL_CACHE_TTL_MAX_S))
        return sl__fail(e, SL_EINVAL, "lease %llu: cache_ttl_s %g must be in [0, %g] seconds",
                        (unsigned long long)l->id, l->cache_ttl_s, SL_CACHE_TTL_MAX_S);
    if ((l->cache_key && !*l->cache_key) || (l->model && !*l->model))
        return sl__fail(e, SL_EINVAL, "lease %llu: an empty cache_key or model",
                        (unsigned long long)l->id);
    return SL_OK;
}

int sl_engine_lease_restore(sl_engine_t *e, const sl_lease_state_t *l, double now_s)
{
    if (!l) return sl__fail(e, SL_EINVAL, "lease state missing");
    int rc;
    sl__pool_t *p = find_pool(e, l->pool, &rc);
    if (!p) return rc;
    if ((rc = validate_lease_state(e, l)) || (rc = check_now(e, now_s))) return rc;
    uint64_t v;
    if (sl__u64map_get(&e->leases, l->id, &v))
        return sl__fail(e, SL_EEXIST, "lease %llu is already in flight", (unsigned long long)l->id);
    sl_engine_advance(e, now_s);
    sl__agent_t *a = sl__agent_get(e, l->agent, true);
    sl__pagent_t *pa = a ? sl__pagent_get(p, a, true) : NULL;
    /* A state without a cache_key (an older writer's default) names the agent's own. */
    sl__cache_t *cache = sl__cache_get(p, l->cache_key ? l->cache_key : l->agent, true);
    sl__calib_t *calib = l->model ? sl__calib_get(p, l->model, true) : NULL;
    /* The state keeps no role: the agent's last one stands for the lease's group. */
    sl__calib_t *outs =
        l->model && a ? sl__calib_outputs(p, l->model, a->role[0] ? a->role : NULL, true) : NULL;
    sl__lease_t *lease = calloc(1, sizeof *lease);
    sl__capref_t caps = {0};
    if (a) sl__caps_resolve(e, a, a->name, &caps);
    if (!cache || (l->model && (!calib || !outs)) || !lease ||
        sl__heap_reserve(&p->lease_heap) != 0 || sl__u64map_reserve(&e->leases, 1) != 0 ||
        sl__caps_reserve(p, &caps) != SL_OK) {
        free(lease);
        return sl__fail(e, SL_ENOMEM, "out of memory restoring lease %llu",
                        (unsigned long long)l->id);
    }
    lease->id = l->id;
    lease->ticket = l->ticket;
    lease->pool = p;
    lease->pa = pa;
    lease->cache = cache;
    cache->refs++; /* as sl__grant's: never swept under the lease, and its end gives it back */
    lease->calib = calib;
    lease->outs = outs;
    lease->est_prompt_tokens = l->est_prompt_tokens;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        lease->need.n[b] = l->need[b];
    lease->need.cached_tokens = l->cached_tokens;
    lease->need.penalty = l->cache_penalty;
    lease->need.cache_ttl_s = l->cache_ttl_s;
    lease->caps = caps;
    /* The caps' buckets were not saved: charging them again errs on the safe side. */
    sl__caps_take(p, &lease->caps, &lease->need, now_s);
    lease->weight = l->weight;
    lease->granted_at = l->granted_at;
    lease->waited_s = l->waited_s;
    lease->ttl_s = l->ttl_s;
    lease->claimed = l->claimed;
    lease->expiry.idx = SL__HEAP_NONE;
    lease->expiry.tie = 0;
    lease->expiry.at = l->expires_at;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        p->reserved[b] += (double)l->need[b];
    p->in_flight++;
    a->leases++;
    sl__heap_push(&p->lease_heap, &lease->expiry);
    sl__u64map_put(&e->leases, lease->id, (uint64_t)(uintptr_t)lease);
    return SL_OK;
}

static void fill_calib_state(const sl__calib_t *c, sl_calibration_state_t *out)
{
    memset(out, 0, sizeof *out);
    out->model = c->model;
    memcpy(out->sample, c->sample, sizeof out->sample);
    out->n = c->n;
    out->pos = c->pos;
    out->total = c->total;
    memcpy(out->out_sample, c->out_sample, sizeof out->out_sample);
    out->out_n = c->out_n;
    out->out_pos = c->out_pos;
}

int sl_engine_calibration_state(const sl_engine_t *e, const char *pool, const char *model,
                                sl_calibration_state_t *out)
{
    const sl__pool_t *p = pool ? sl__pool_find(e, pool) : NULL;
    const sl__calib_t *c = p && model ? sl__strmap_get(&p->calibs, model) : NULL;
    if (!c) return SL_ENOTFOUND;
    fill_calib_state(c, out);
    return SL_OK;
}

int sl_engine_calibration_state_foreach(const sl_engine_t *e, const char *pool,
                                        void (*fn)(const sl_calibration_state_t *c, void *ud),
                                        void *ud)
{
    const sl__pool_t *p = pool ? sl__pool_find(e, pool) : NULL;
    if (!p) return SL_ENOTFOUND;
    for (size_t i = 0; i < p->calibs.cap; i++) {
        if (!p->calibs.slots[i].hash) continue;
        sl_calibration_state_t st;
        fill_calib_state(p->calibs.slots[i].val, &st);
        fn(&st, ud);
    }
    return SL_OK;
}

int sl_engine_calibration_restore(sl_engine_t *e, const char *pool,
                                  const sl_calibration_state_t *c)
{
    int rc;
    sl__pool_t *p = find_pool(e, pool, &rc);
    if (!p) return rc;
    /* A model's name, or a (model, group) output entry's "model US role". */
    if (!c || !c->model || !*c->model || strlen(c->model) > SL__NAME_MAX + 1 + SL__CLASS_MAX)
        return sl__fail(e, SL_EINVAL, "pool \"%s\": calibration without a model", p->name);
    if (c->n < 0 || c->n > SL__CALIB_WINDOW || c->pos < 0 || c->pos >= SL__CALIB_WINDOW ||
        c->total < c->n)
        return sl__fail(e, SL_EINVAL, "calibration of \"%.140s\": n %d, pos %d or total %lld out "
                                      "of range",
                        c->model, c->n, c->pos, (long long)c->total);
    for (int i = 0; i < c->n; i++)
        if (!(c->sample[i] >= 0.2 && c->sample[i] <= 5))
            return sl__fail(e, SL_EINVAL, "calibration of \"%.140s\": sample %g outside [0.2, 5]",
                            c->model, c->sample[i]);
    if (c->out_n < 0 || c->out_n > SL__CALIB_WINDOW || c->out_pos < 0 ||
        c->out_pos >= SL__CALIB_WINDOW)
        return sl__fail(e, SL_EINVAL, "calibration of \"%.140s\": out_n %d or out_pos %d out of "
                                      "range",
                        c->model, c->out_n, c->out_pos);
    for (int i = 0; i < c->out_n; i++)
        if (c->out_sample[i] < 0 || c->out_sample[i] > SL_TOKENS_MAX)
            return sl__fail(e, SL_EINVAL, "calibration of \"%.140s\": output sample %lld out of "
                                          "range",
                            c->model, (long long)c->out_sample[i]);
    sl__calib_t *k = sl__calib_get(p, c->model, true);
    if (!k) return sl__fail(e, SL_ENOMEM, "out of memory restoring calibration");
    memcpy(k->sample, c->sample, sizeof k->sample);
    k->n = c->n;
    k->pos = c->pos;
    k->total = c->total;
    memcpy(k->out_sample, c->out_sample, sizeof k->out_sample);
    k->out_n = c->out_n;
    k->out_pos = c->out_pos;
    sl__calib_update_ratio(k);
    sl__calib_update_output(k);
    return SL_OK;
}
