/* admit.c - the working set: calls of tasks under way go before the first call of a new task.
 *
 * Why: when the quota binds, fair queueing shares it among every agent that asks, so
 * with 140 agents each waits its turn for minutes, and a turn that waits longer than
 * the provider's cache life (300 s) pays its whole prompt prefix again. Measured on the
 * simulated fleet at a tenth of its limits: a fifth of the input capacity went to such
 * re-writes. Admitting fewer tasks at a time and serving them promptly keeps their
 * caches warm; the work behind them is the same, only its order changes. This is the
 * working-set idea of virtual memory (Denning, "The working set model for program
 * behavior", CACM 1968): a program is admitted only when its working set fits, because
 * admitting more makes everyone thrash.
 *
 * Which call starts a task. A task's context is its prompt prefix, so the cache
 * identity (cache_key, model, prefix hash: lease.c) tells it: a request whose identity
 * was never settled by a call the provider answered is the *first call* of a task (its
 * prefix is written now whatever we do); one whose identity was settled *continues* a
 * task. Clients already send it: the simulator and the proxy name a cache per task
 * (`x-sluice-task`), the lease API's `cache_key`.
 *
 * The rule (pool key `working_set`, default off). A first call is granted only when no
 * request is queued (every continuation is served) and it fits now; otherwise it waits
 * *parked*, out of the queue, so it never blocks a continuation. "Admit a task only
 * while the running tasks' token rate fits the refill" is measured here rather than
 * modelled: while continuations queue, the running tasks already ask for more than the
 * buckets refill, and admitting another would slow them all.
 *
 * In what order. Once the caches stay warm the quota buys the same tokens whatever the
 * order, and the makespan is set by the tail: the chains still running, unloaded, when
 * the buckets stop binding. So parked first calls are admitted by the remaining chain of
 * their task (its depth in the task graph, graph.c: Hu's highest level first), with an
 * age term so a leaf that has waited long outranks a newer deep task: the key is
 * arrival - SL__ADMIT_LEVEL_CACHE_LIVES x cache_ttl_s x depth (900 s a level by default,
 * about one task's run), lowest first, ties by arrival; each granted when the queue is
 * empty and it fits. Fair-queue tags (role, `unblocks`, priority, repeats) and team
 * weights order the calls of admitted tasks, not the admissions (ordering admissions by
 * team tags, measured, let the heavy teams' tasks in first and finished the fleet 11%
 * later on scale-200 at a tenth; by depth, 3% sooner there and 5% on the seed fleet at
 * 20 times its demand: docs/design.md "Working set"). A
 * parked call waits for no ETA limit (it is answered QUEUED, limited_by `working_set`,
 * and is never rejected for the wait: its client checkpoints). So that no task waits for
 * ever behind a fleet that never pauses, the oldest parked first call that has waited
 * SL__ADMIT_MAX_WAIT_CACHE_LIVES cache lives joins the queue at its tag, at most one per
 * cache life. Sparingly, because an old first call goes first once queued:
 * letting every old one in at once rebuilds the crowd the working set exists to avoid
 * (measured on the seed fleet at 20 times its demand, makespan over the bound: 2.06
 * with all at once, 1.82 with the next as soon as the one before was served). Nobody
 * starves without it in a finite fleet (the running tasks end, the queue empties; among
 * the parked, a new one's key is at least its arrival - 64 levels, which passes any old
 * one's key in time); it is the guard against a task that never ends.
 *
 * A first call is judged at its arrival, but a call parked as one continues a task once
 * another call of its cache identity (a shared cache_key, or one sent while the first
 * was in flight) is settled: it joins the queue at its tag then, as a continuation
 * arriving would (sl__admit_settled); left parked it waited behind every new task while
 * the prefix the provider just cached expired.
 *
 * A reload that turns `working_set` off queues every parked first call at its tag
 * (sl__admit_release_all): they are fair-queued from then on, not held out for up to ten
 * cache lives by a rule the pool no longer has.
 *
 * A first call admitted while its own agent's (or team's) max_concurrent is full is
 * parked on that holder, as the drain does with a capped queue head (caps.c), and goes
 * to the queue at its release: left at the top of the admission order it held every
 * other first call out while nothing was queued and they fit.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

bool sl__admit_is_first_call(const sl__pool_t *p, const sl__cache_t *cache)
{
    return p->cfg.working_set && !(cache && isfinite(cache->used_at));
}

bool sl__admit_open(const sl__pool_t *p)
{
    return p->queued == 0 && p->ws_n == 0;
}

static double max_wait_s(const sl__pool_t *p)
{
    return SL__ADMIT_MAX_WAIT_CACHE_LIVES * p->cfg.cache_ttl_s;
}

double sl__admit_key(const sl__pool_t *p, double enqueued_at, int64_t depth)
{
    return enqueued_at - SL__ADMIT_LEVEL_CACHE_LIVES * p->cfg.cache_ttl_s * (double)depth;
}

void sl__admit_park(sl__pool_t *p, sl__ticket_t *t)
{
    sl__treap_insert(&t->team->ws_root, t);
    t->admit.tie = t->seq;
    sl__heap_push(&p->ws_heap, &t->admit);
    t->ws_parked = true;
    t->park_next = NULL;
    t->park_prev = p->ws_tail;
    if (p->ws_tail)
        p->ws_tail->park_next = t;
    else
        p->ws_head = t;
    p->ws_tail = t;
    p->ws_n++;
}

void sl__admit_unpark(sl__pool_t *p, sl__ticket_t *t)
{
    sl__treap_remove(&t->team->ws_root, t);
    sl__heap_remove(&p->ws_heap, &t->admit);
    if (t->park_prev)
        t->park_prev->park_next = t->park_next;
    else
        p->ws_head = t->park_next;
    if (t->park_next)
        t->park_next->park_prev = t->park_prev;
    else
        p->ws_tail = t->park_prev;
    t->park_prev = t->park_next = NULL;
    t->ws_parked = false;
    p->ws_n--;
}

double sl__admit_next_at(const sl__pool_t *p)
{
    if (!p->ws_head) return INFINITY;
    double at = p->ws_head->enqueued_at + max_wait_s(p);
    double again_at = p->ws_promoted_at + p->cfg.cache_ttl_s; /* one per cache life */
    return at > again_at ? at : again_at;
}

void sl__admit_promote(sl__pool_t *p, double now)
{
    if (sl__admit_next_at(p) > now) return;
    sl__ticket_t *t = p->ws_head;
    sl__admit_unpark(p, t);
    sl__queue_insert(p, t);
    p->ws_promoted_at = now;
}

/* With every team queue empty, a team's next first call would be its head at the outer
 * tag max(V, its last outer tag) + cost / weight, as a request arriving now. */
static double admit_outer(const sl__pool_t *p, const sl__ticket_t *t)
{
    const sl__pteam_t *pt = t->team;
    double base = p->vtime > pt->last_outer ? p->vtime : pt->last_outer;
    return base + t->cost / pt->team->weight;
}

sl__ticket_t *sl__admit_next(const sl__pool_t *p)
{
    sl__hnode_t *n = sl__heap_top(&p->ws_heap);
    return n ? sl__container_of(n, sl__ticket_t, admit) : NULL;
}

void sl__admit_grant(sl_engine_t *e, sl__pool_t *p, double now)
{
    for (sl__ticket_t *t = sl__admit_next(p); t && p->queued == 0; t = sl__admit_next(p)) {
        if (!sl__fits(p, &t->need, now)) return;
        if (e->holders.len) sl__caps_resolve(e, t->pa->agent, t->pa->agent->name, &t->caps);
        sl__capstate_t *st = sl__caps_at_concurrency(p, &t->caps);
        if (st) { /* admitted, it waits for its holder's release, as a capped head does */
            sl__admit_unpark(p, t);
            sl__caps_park(p, st, t, false);
            continue;
        }
        sl__tags_t tags = {t->team, t->finish, admit_outer(p, t)};
        sl__admit_unpark(p, t);
        if (sl__grant_ticket(e, p, t, &tags, now) != SL_OK) {
            sl__admit_park(p, t); /* out of memory: it waits for the next drain */
            return;
        }
    }
}

double sl__admit_eta(const sl__pool_t *p, const sl__need_t *need, bool parked, double now,
                     int64_t *ahead)
{
    double sums[SL_BUCKET_COUNT] = {0};
    if (!parked) sl__need_as_sums(need, sums); /* a parked one is in its team's sums */
    for (size_t i = 0; i < p->n_teams; i++)
        for (int b = 0; p->teams[i]->root && b < SL_BUCKET_COUNT; b++)
            sums[b] += p->teams[i]->root->sum[b];
    for (size_t i = 0; i < p->n_teams; i++)
        for (int b = 0; p->teams[i]->ws_root && b < SL_BUCKET_COUNT; b++)
            sums[b] += p->teams[i]->ws_root->sum[b];
    *ahead = p->queued + p->ws_n - (parked ? 1 : 0);
    return sl__eta_for(p, sums, *ahead, now, NULL);
}

void sl__admit_free(sl__pool_t *p)
{
    sl__heap_free(&p->ws_heap); /* before the tickets it points to are freed */
    for (sl__ticket_t *t = p->ws_head, *next; t; t = next) {
        next = t->park_next;
        free(t);
    }
    for (size_t i = 0; i < p->n_teams; i++)
        p->teams[i]->ws_root = NULL;
    p->ws_head = p->ws_tail = NULL;
    p->ws_n = 0;
}

void sl__admit_settled(sl__pool_t *p, const sl__cache_t *cache)
{
    if (p->ws_n == 0 || cache->refs < 2) return; /* only its lease points to it */
    for (sl__ticket_t *t = p->ws_head, *next; t; t = next) {
        next = t->park_next;
        if (t->cache != cache) continue;
        sl__admit_unpark(p, t);
        sl__queue_insert(p, t);
    }
}

void sl__admit_release_all(sl__pool_t *p)
{
    while (p->ws_head) {
        sl__ticket_t *t = p->ws_head;
        sl__admit_unpark(p, t);
        sl__queue_insert(p, t);
    }
}
