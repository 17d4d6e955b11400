/* backfill.c - EASY backfilling: granting queued calls past a blocked head without delaying it.
 *
 * Why: the queue drains from its head, and a head that does not fit blocks everyone
 * behind it (queue.c), so large requests are never starved. But while the head waits
 * for one bucket, the others keep refilling and a call behind it that needs little of
 * the bucket the head waits for idles for nothing. EASY backfilling (Lifka, "The ANL/IBM
 * SP scheduling system", JSSPP 1995; analysed in Mu'alem and Feitelson, "Utilization,
 * predictability, workloads, and user runtime estimates in scheduling the IBM SP2 with
 * backfilling", IEEE TPDS 2001) keeps the head's guarantee and fills the holes: the head
 * gets a reservation at its *shadow time* (when it will fit), and a job behind it may
 * start now if it does not delay that reservation.
 *
 * What "does not delay" means for token buckets. A node in a cluster comes back when its
 * job ends; a token taken from a bucket does not (the settle gives back only what the
 * call did not use, and nobody knows that in advance). So a backfilled call may take
 * only the head's *extra* capacity, and EASY's other case ("it ends before the shadow
 * time") has no token analogue. Extra is measured now, not at the shadow time:
 *
 *     need_b(candidate) <= max(0, level_b - need_b(head))   for every limited bucket b
 *
 * a bucket that holds the head's need keeps it, and a bucket the head still waits for
 * is not touched; a concurrency limit keeps a free slot for the head. The head's ETA
 * from refill (its shadow time: sl__eta_for) is then exactly what it was, and more:
 * levels only rise until the head is served (refill, refunds), so with any refunds
 * arriving, the head is granted no later than it would have been without the backfill
 * (test_backfill.c checks it on random pools, queues and settles). Measuring the room
 * at the shadow time instead (level + refill until then - the head's need) would lend
 * the head's future refill, and a refund that let the head go earlier would then find
 * it short. The price is small: at most the head's own need per bucket.
 *
 * Which candidates, in what order. The first SL__BACKFILL_WINDOW tickets of the queue
 * order (the head included), first come first considered, each granted when it fits
 * now and within the room the earlier ones left: bounded work per drain whatever the
 * queue's depth. A candidate whose holder's max_concurrent is full stays queued (it
 * parks when it reaches the head), and one that shares a max_concurrent holder with
 * the head is skipped (its slot could be the head's). With several teams, a candidate
 * of the head's own team is granted only if the head stays the head once its team
 * has paid for the candidate (below); another team's candidate only raises that team's
 * tags.
 *
 * Tags. A backfilled ticket leaves the order without moving anyone's clock but its
 * team's: the team pays its cost at the outer level (the team's base, and so the outer
 * tags of its queued tickets, rise by cost / team weight; its grant's outer tag is that
 * new base), and its agent's last finish tag was set when it queued. The team's inner V
 * stays the tag of its latest grant in order, so a request arriving next is placed as
 * if the backfill had not happened (never behind tickets that were not served).
 *
 * The ETA of a queued call in the window is the sooner of its place in the queue and the
 * moment its buckets hold its need plus the head's (sl__backfill_eta): told the head's
 * longer wait, a call backfilling would grant in seconds was rejected past the wait limit
 * and its agent slept until then.
 *
 * A candidate whose prompt cache lapsed while it waited is charged its prefix first
 * (sl__ticket_cache_lapsed, as the drain does for the head): the provider bills the
 * prefix again whichever way the call passes, and a backfill on the tail alone would
 * send more than it reserved.
 */
#include "internal.h"

#include <math.h>

/* Whether a holder of `a` with max_concurrent is also one of `b`. */
static bool share_concurrency_holder(const sl__capref_t *a, const sl__capref_t *b)
{
    for (int i = 0; i < 2; i++) {
        const sl__holder_t *h = a->h[i];
        if (!h || h->caps.max_concurrent <= 0) continue;
        if (h == b->h[0] || h == b->h[1]) return true;
    }
    return false;
}

/* Whether head still leads once team pt has paid `cost` more at the outer level. */
static bool head_keeps_lead(const sl__pool_t *p, const sl__ticket_t *head, const sl__pteam_t *pt,
                            double cost)
{
    if (p->n_teams == 1 || pt != head->team) return true;
    double outer = sl__queue_head_outer(head) + cost / pt->team->weight;
    for (size_t i = 0; i < p->n_teams; i++) {
        const sl__pteam_t *o = p->teams[i];
        const sl__ticket_t *h = o == pt ? NULL : sl__queue_team_head(o);
        if (!h) continue;
        double other = sl__queue_head_outer(h);
        if (other < outer || (other == outer && o->order < pt->order)) return false;
    }
    return true;
}

bool sl__backfill_admits(sl_engine_t *e, const sl__pool_t *p, sl__ticket_t *head,
                         const sl__need_t *need, const sl__capref_t *caps, const sl__pteam_t *pt,
                         double cost, double now)
{
    if (!sl__fits(p, need, now)) return false;
    if (p->cfg.concurrency > 0 && p->cfg.concurrency - p->in_flight < 2) return false;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b) || need->n[b] == 0) continue;
        if ((double)need->n[b] > p->level[b] - (double)head->need.n[b]) return false;
    }
    const sl__pool_t *q = sl__req_parent(p); /* the parent's request bucket, likewise */
    int64_t req = need->n[SL_BUCKET_REQUESTS];
    if (q && req != 0 &&
        (double)req > sl__req_parent_level(q, now) - (double)head->need.n[SL_BUCKET_REQUESTS])
        return false;
    if (e->holders.len) {
        sl__caps_resolve(e, head->pa->agent, head->pa->agent->name, &head->caps);
        if (share_concurrency_holder(caps, &head->caps)) return false;
    }
    return head_keeps_lead(p, head, pt, cost);
}

sl__tags_t sl__backfill_tags(const sl__pool_t *p, sl__pteam_t *pt, double cost)
{
    double base = pt->root ? pt->base : p->vtime > pt->last_outer ? p->vtime : pt->last_outer;
    sl__tags_t tags = {pt, pt->vtime, base + cost / pt->team->weight};
    return tags;
}

void sl__backfill(sl_engine_t *e, sl__pool_t *p, sl__ticket_t *head, double now)
{
    if (p->blocked_until > now) return; /* a provider retry-after holds every grant */
    if (p->cfg.concurrency > 0 && p->cfg.concurrency - p->in_flight < 2) return; /* no slot */
    sl__ticket_t *window[SL__BACKFILL_WINDOW];
    size_t n = sl__queue_window(p, window, SL__BACKFILL_WINDOW);
    for (size_t i = 1; i < n; i++) { /* window[0] is the head */
        sl__ticket_t *t = window[i];
        if (e->holders.len) sl__caps_resolve(e, t->pa->agent, t->pa->agent->name, &t->caps);
        if (sl__caps_at_concurrency(p, &t->caps)) continue;
        /* As at the head: a cache that lapsed while it waited is billed again. */
        sl__ticket_cache_lapsed(p, t, now);
        if (!sl__backfill_admits(e, p, head, &t->need, &t->caps, t->team, t->cost, now)) continue;
        sl__tags_t tags = sl__backfill_tags(p, t->team, t->cost); /* the base before it leaves */
        sl__queue_remove(p, t);
        if (sl__grant_ticket(e, p, t, &tags, now) != SL_OK) {
            sl__queue_insert(p, t); /* out of memory: it waits for the next drain */
            return;
        }
    }
}

double sl__backfill_next_at(const sl__pool_t *p, const sl__ticket_t *head)
{
    if (!p->cfg.backfill) return INFINITY;
    if (p->cfg.concurrency > 0 && p->cfg.concurrency - p->in_flight < 2) return INFINITY;
    sl__ticket_t *window[SL__BACKFILL_WINDOW];
    size_t n = sl__queue_window(p, window, SL__BACKFILL_WINDOW);
    double at = INFINITY;
    for (size_t i = 1; i < n; i++) {
        const sl__ticket_t *t = window[i];
        double sums[SL_BUCKET_COUNT];
        bool never = false;
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            /* A bucket it does not use is no condition (the head's need there is not). */
            sums[b] = t->need.n[b] == 0 ? -INFINITY : (double)(t->need.n[b] + head->need.n[b]);
            if (sl__limited(p, (sl_bucket_t)b) && sums[b] > sl__capacity(p, (sl_bucket_t)b))
                never = true;
        }
        if (never) continue;
        double eta_s = sl__eta_for(p, sums, 0, p->last_refill, NULL);
        /* Nothing to wait for: the last drain judged it and something else held it back. */
        if (!(eta_s > 0)) continue;
        if (p->last_refill + eta_s + 1e-6 < at) at = p->last_refill + eta_s + 1e-6;
    }
    return at;
}

double sl__backfill_eta(sl_engine_t *e, const sl__pool_t *p, const sl__need_t *need,
                        const double upto[SL_BUCKET_COUNT], const sl__capref_t *caps,
                        const sl__pteam_t *pt, double cost, double now, const char **limited_by)
{
    sl__ticket_t *head = sl__queue_head(p);
    if (!head || !p->cfg.backfill) return INFINITY;
    if (p->cfg.concurrency > 0 && p->cfg.concurrency - p->in_flight < 2) return INFINITY;
    double sums[SL_BUCKET_COUNT], head_need[SL_BUCKET_COUNT];
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        sums[b] = need->n[b] == 0 ? -INFINITY : upto[b];
        if (sl__limited(p, (sl_bucket_t)b) && sums[b] > sl__capacity(p, (sl_bucket_t)b))
            return INFINITY;
    }
    if (e->holders.len) {
        sl__caps_resolve(e, head->pa->agent, head->pa->agent->name, &head->caps);
        if (share_concurrency_holder(caps, &head->caps)) return INFINITY;
    }
    if (!head_keeps_lead(p, head, pt, cost)) return INFINITY;
    const char *why = NULL;
    double eta_s = sl__eta_for(p, sums, 0, now, &why);
    if (!(eta_s > 0)) return INFINITY; /* it would pass now: something else holds it */
    sl__need_as_sums(&head->need, head_need);
    if (!(eta_s < sl__eta_for(p, head_need, 0, now, NULL))) return INFINITY; /* head first */
    *limited_by = why;
    return eta_s;
}
