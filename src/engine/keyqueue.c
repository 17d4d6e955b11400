/* keyqueue.c - one queue over the keys of a pool of several keys (docs/design.md, "A pool
 * of several keys", "One queue over the keys").
 *
 * Each key of a pool with `keys:` is an engine pool of its own; the pools of one pool's
 * keys share a nonzero `key_group` (sl_pool_config_t). A request is queued on the key
 * sl_keys_pick() chose for it, by the estimate at request time. When another key of the
 * group frees first, that key grants the waiting ticket itself: a key whose own queue is
 * empty after its drain takes the heads of its siblings' queues (the longest waiting
 * first) while they fit it and do not fit their own key. The ticket ends as granted with
 * a lease of the key that took it, so its client's poll answers that lease, and settle,
 * resync and the state file land on that key (the lease's pool). A key with a queue of
 * its own serves that first: taking a sibling's ticket then would pass its own head. A
 * ticket whose request named its key alone (key_pinned, an operator's POOL:KEY) is left
 * to that key.
 *
 * The ticket's need is carried over, except that a prompt cache warm on its own key is
 * cold on the other (a provider's cache is per workspace): the prefix is then charged as
 * uncached input, as for any cold call. */
#include "internal.h"

#include <math.h>

/* The need `n` of a request queued on key `own` as key p charges it: its own, with the
 * cached prefix charged when p's cache for it (c; NULL: none yet) is cold. */
static sl__need_t need_on(const sl__pool_t *p, const sl__pool_t *own, sl__need_t n,
                          const sl__cache_t *c, double now)
{
    bool warm = c && now - c->used_at < p->cfg.cache_ttl_s; /* lease.c's cache_warm */
    if (!n.penalty && n.cached_tokens > 0 && !warm && !p->cfg.cache_reads_count &&
        !own->cfg.cache_reads_count) {
        n.n[SL_BUCKET_INPUT] += n.cached_tokens;
        n.n[SL_BUCKET_TOKENS] += n.cached_tokens;
        n.penalty = true;
    }
    return n;
}

/* p's entry for the cache `own_c` of a request queued on another key (NULL: none yet). */
static sl__cache_t *cache_on(sl__pool_t *p, const sl__cache_t *own_c)
{
    return sl__cache_get(p, own_c->key, false);
}

/* The sibling ticket p should take next: the longest-waiting head, among p's siblings'
 * queues, that does not fit its own key now. NULL when none. */
static sl__ticket_t *next_sibling_head(const sl_engine_t *e, const sl__pool_t *p, double now)
{
    sl__ticket_t *best = NULL;
    for (size_t i = 0; i < e->n_pools; i++) {
        const sl__pool_t *q = e->pools[i];
        if (q == p || q->cfg.key_group != p->cfg.key_group || q->queued == 0) continue;
        sl__ticket_t *t = sl__queue_head(q);
        /* Its own key serves it when it fits; a pinned one waits for its own key (and
         * the tickets behind it with it: only heads are taken). */
        if (!t || t->key_pinned || sl__fits(q, &t->need, now)) continue;
        if (!best || t->enqueued_at < best->enqueued_at ||
            (t->enqueued_at == best->enqueued_at && t->id < best->id))
            best = t;
    }
    return best;
}

/* Grants ticket t (queued on a sibling) on p when it fits p now; false when it does not
 * (or out of memory), with nothing changed. */
static bool take(sl_engine_t *e, sl__pool_t *p, sl__ticket_t *t, double now)
{
    sl__agent_t *a = t->pa->agent;
    sl__pagent_t *pa = sl__pagent_get(p, a, true);
    if (!pa) return false;
    sl__cache_t *c = cache_on(p, t->cache);
    sl__need_t need = need_on(p, t->pool, t->need, c, now);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (sl__limited(p, (sl_bucket_t)b) && (double)need.n[b] > sl__capacity(p, (sl_bucket_t)b))
            return false;
    if (!sl__fits(p, &need, now) || pa->blocked_until > now) return false;
    sl__capref_t caps = t->caps;
    if (e->holders.len) sl__caps_resolve(e, a, a->name, &caps);
    const char *reason = NULL;
    double wait_s = 0;
    if (sl__caps_check(e, p, &caps, &need, now, &reason, &wait_s, NULL) != SL_OK) return false;
    if (!c && !(c = sl__cache_get(p, t->cache->key, true))) return false;
    sl__calib_t *calib = t->calib ? sl__calib_get(p, t->calib->model, true) : NULL;
    /* Its (model, group) output entry, by the same key in p (sl__calib_outputs). */
    sl__calib_t *outs = t->outs ? sl__calib_get(p, t->outs->model, true) : NULL;
    sl__pteam_t *pt = sl__pteam_get(e, p, a->team ? a->team : SL__DEFAULT_TEAM, true);
    if ((t->calib && !calib) || (t->outs && !outs) || !pt) return false;
    /* Its tags in p as an arrival now: it was served by p's clock, not ahead of it. */
    double cost = sl__cost(p, &need);
    double start = pt->vtime > pa->last_finish ? pt->vtime : pa->last_finish;
    double finish = start + cost / t->weight, sums[SL_BUCKET_COUNT];
    int64_t ahead = 0;
    double outer = sl__queue_place(p, pt, finish, p->seq + 1, cost, &ahead, sums);
    sl__tags_t tags = {pt, finish, outer};
    sl__lease_t *l = NULL;
    if (sl__grant(e, p, pa, c, &need, &caps, t->weight, &tags, t->ttl_s, t->id,
                  now - t->enqueued_at, now, &l) != SL_OK)
        return false;
    sl__lease_set_calib(l, calib, outs, t->est_prompt_tokens);
    sl__queue_remove(t->pool, t);
    sl__ticket_end(e, t, SL__END_GRANTED, l->id, now);
    return true;
}

void sl__keys_drain(sl_engine_t *e, sl__pool_t *p, double now)
{
    if (p->cfg.key_group == 0) return;
    while (p->queued == 0 && p->ws_n == 0) {
        sl__ticket_t *t = next_sibling_head(e, p, now);
        if (!t || !take(e, p, t, now)) return;
    }
}

double sl__keys_next_wakeup(const sl_engine_t *e, sl__pool_t *p)
{
    if (p->cfg.key_group == 0 || p->queued || p->ws_n) return INFINITY;
    if (p->cfg.concurrency > 0 && p->in_flight >= p->cfg.concurrency) return INFINITY;
    const sl__ticket_t *t = next_sibling_head(e, p, p->last_refill);
    /* Its need as take() charges it here (a prefix warm on its own key is cold here), and
     * not before its agent's own retry-after here: a wake-up that take() then refuses
     * would come back every microsecond. So would one for a head its caps may hold back:
     * such a head is taken at p's next advance (as sluice.lua's KQ.push_at). */
    if (!t || t->caps.h[0] || t->caps.h[1]) return INFINITY;
    sl__pagent_t *pa = sl__pagent_get(p, t->pa->agent, false);
    sl__need_t n = need_on(p, t->pool, t->need, cache_on(p, t->cache), p->last_refill);
    double need[SL_BUCKET_COUNT];
    sl__need_as_sums(&n, need);
    /* A microsecond late, so rounding never leaves the ticket a hair short. */
    double at = p->last_refill + sl__eta_for(p, need, 0, p->last_refill, NULL) + 1e-6;
    return pa && pa->blocked_until > at ? pa->blocked_until : at;
}

/* When key q, its queue empty, would fit the tickets ahead of the request on p and the
 * request itself (q takes them as p's heads); INFINITY when q can never hold it. The
 * tickets ahead are counted at their needs on p: a prefix warm on p costs more on q. */
static double sibling_eta(sl__pool_t *q, const sl__pool_t *p, const sl__keys_ask_t *ask,
                          double now, const char **why)
{
    sl__pagent_t *pa = sl__pagent_get(q, ask->pa->agent, false);
    sl__need_t need = need_on(q, p, *ask->need, cache_on(q, ask->cache), now);
    double sums[SL_BUCKET_COUNT];
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        double cap = sl__capacity(q, (sl_bucket_t)b);
        if (sl__limited(q, (sl_bucket_t)b) && ((double)need.n[b] > cap ||
                                                (double)need.n[b] > (double)q->limit[b] * q->cfg.margin_start))
            return INFINITY;
        sums[b] = ask->sums[b] - (double)ask->need->n[b] + (double)need.n[b];
    }
    double eta_s = sl__eta_for(q, sums, ask->ahead, now, why);
    if (pa && pa->blocked_until - now > eta_s) { /* its agent's own retry-after on q */
        eta_s = pa->blocked_until - now;
        *why = "retry_after";
    }
    return eta_s;
}

double sl__keys_eta(sl_engine_t *e, sl__pool_t *p, const sl__keys_ask_t *ask, double own_s,
                    double now, const char **limited_by)
{
    /* A pinned ticket ahead is taken by no other key, and blocks those behind it; a key
     * with a queue of its own serves that first, and an empty one may take its heads
     * before p's; caps are checked per key: none of those is estimated here. */
    if (p->cfg.key_group == 0 || ask->pinned || ask->capped || p->queued_pinned > 0)
        return own_s;
    for (size_t i = 0; i < e->n_pools; i++) {
        const sl__pool_t *q = e->pools[i];
        if (q != p && q->cfg.key_group == p->cfg.key_group && (q->queued || q->ws_n))
            return own_s;
    }
    double best_s = own_s;
    for (size_t i = 0; i < e->n_pools; i++) {
        sl__pool_t *q = e->pools[i];
        if (q == p || q->cfg.key_group != p->cfg.key_group) continue;
        const char *why = NULL;
        double eta_s = sibling_eta(q, p, ask, now, &why);
        if (eta_s < best_s) {
            best_s = eta_s;
            if (limited_by) *limited_by = why;
        }
    }
    return best_s;
}
