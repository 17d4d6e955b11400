/* lease.c - the lease protocol: request (grant, queue, reject), tickets, settle, cancel, extend.
 *
 * Agents reserve a specific amount of capacity before a call and report what they
 * used after it. A request is checked completely before anything changes, so a
 * refused request leaves the engine exactly as it was. Grants take the whole need
 * from every bucket; settle refunds or charges the difference at once (debt shows
 * immediately); an expired lease is reaped without refund; a cancelled one returns
 * everything, because the call was never made. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPARE_LEASES_MAX 1024 /* ended leases kept for reuse, per engine */

static const char *const REASON_QUEUE_WAIT = "queue_wait_exceeds_max";
static const char *const REASON_AGENT_RETRY_AFTER = "agent_retry_after";

void sl__fill_grant(const sl__lease_t *l, sl_decision_t *out)
{
    memset(out, 0, sizeof *out);
    out->status = SL_GRANTED;
    out->lease = l->id;
    out->ticket = l->ticket;
    out->expires_at = l->expiry.at;
    out->ttl_s = l->ttl_s;
    out->weight = l->weight;
    out->charged_input_tokens = l->need.n[SL_BUCKET_INPUT];
    out->charged_output_tokens = l->need.n[SL_BUCKET_OUTPUT];
    out->charged_requests = l->need.n[SL_BUCKET_REQUESTS];
    out->cache_penalty = l->need.penalty;
    out->waited_s = l->waited_s;
}

int sl__grant(sl_engine_t *e, sl__pool_t *p, sl__pagent_t *pa, sl__cache_t *cache,
              const sl__need_t *need, const sl__capref_t *caps, double weight,
              const sl__tags_t *tags, double ttl_s, uint64_t ticket, double waited_s, double now,
              sl__lease_t **out)
{
    sl__capref_t capref = *caps;
    if (sl__heap_reserve(&p->lease_heap) != 0 || sl__u64map_reserve(&e->leases, 1) != 0 ||
        sl__caps_reserve(p, &capref) != SL_OK)
        return SL_ENOMEM;
    sl__lease_t *l = e->spare_leases;
    if (l) {
        e->spare_leases = l->next_spare;
        e->n_spare_leases--;
        memset(l, 0, sizeof *l);
    } else if (!(l = calloc(1, sizeof *l))) {
        return SL_ENOMEM;
    }
    l->id = sl__new_id(e);
    l->ticket = ticket;
    l->pool = p;
    l->pa = pa;
    l->cache = cache;
    cache->refs++;
    l->need = *need;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) { /* all the provider holds (fit_capacity) */
        l->need.n[b] += l->need.over[b];
        l->need.over[b] = 0;
    }
    need = &l->need;
    l->caps = capref;
    sl__caps_take(p, &l->caps, need, now);
    l->weight = weight;
    l->granted_at = now;
    l->waited_s = waited_s;
    l->ttl_s = ttl_s;
    /* A grant from the queue must be fetched by its client before the TTL starts. */
    l->claimed = ticket == 0;
    l->expiry.idx = SL__HEAP_NONE;
    l->expiry.tie = 0;
    l->expiry.at = now + (l->claimed ? ttl_s : p->cfg.claim_timeout_s);
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (sl__limited(p, (sl_bucket_t)b)) p->level[b] -= (double)need->n[b];
        p->reserved[b] += (double)need->n[b];
        l->reserve_at_grant[b] = (double)p->limit[b] - sl__capacity(p, (sl_bucket_t)b);
        l->room_at_grant[b] = p->level[b] + l->reserve_at_grant[b];
    }
    l->room_known = true;
    sl__grants_record(p, l, need->n, now);
    sl__req_parent_charge(p, need->n[SL_BUCKET_REQUESTS], now);
    p->in_flight++;
    p->granted_total++;
    sl__queue_served(p, tags->team, tags->finish, tags->outer);
    if (tags->finish > pa->last_finish) pa->last_finish = tags->finish;
    pa->agent->leases++;
    sl__heap_push(&p->lease_heap, &l->expiry);
    sl__u64map_put(&e->leases, l->id, (uint64_t)(uintptr_t)l);

    if (e->cb) {
        sl_event_t ev;
        sl__event_init(&ev, SL_EV_GRANTED, now, p);
        ev.agent = pa->agent->name;
        ev.lease = l->id;
        ev.ticket = ticket;
        ev.input_tokens = need->n[SL_BUCKET_INPUT];
        ev.output_tokens = need->n[SL_BUCKET_OUTPUT];
        ev.weight = weight;
        ev.waited_s = waited_s;
        sl__emit(e, &ev);
    }
    if (out) *out = l;
    return SL_OK;
}

int sl__grant_ticket(sl_engine_t *e, sl__pool_t *p, sl__ticket_t *t, const sl__tags_t *tags,
                     double now)
{
    sl__lease_t *l = NULL;
    int rc = sl__grant(e, p, t->pa, t->cache, &t->need, &t->caps, t->weight, tags, t->ttl_s, t->id,
                       now - t->enqueued_at, now, &l);
    if (rc != SL_OK) return rc;
    sl__lease_set_calib(l, t->calib, t->outs, t->est_prompt_tokens);
    sl__ticket_end(e, t, SL__END_GRANTED, l->id, now);
    return SL_OK;
}

void sl__lease_set_calib(sl__lease_t *l, sl__calib_t *c, sl__calib_t *outs,
                         int64_t est_prompt_tokens)
{
    l->calib = c;
    l->outs = outs;
    l->est_prompt_tokens = est_prompt_tokens;
}

void sl__lease_end(sl_engine_t *e, sl__lease_t *l, int end_state, bool refund, double now)
{
    sl__pool_t *p = l->pool;
    if (end_state != SL__END_SETTLED) {
        sl_event_t ev;
        sl__event_init(&ev,
                       end_state == SL__END_REAPED ? SL_EV_REAPED
                       : l->claimed                ? SL_EV_CANCELLED
                                                   : SL_EV_UNCLAIMED,
                       now, p);
        ev.agent = l->pa->agent->name;
        ev.lease = l->id;
        ev.ticket = l->ticket;
        ev.input_tokens = l->need.n[SL_BUCKET_INPUT];
        ev.output_tokens = l->need.n[SL_BUCKET_OUTPUT];
        sl__emit(e, &ev);
    }
    sl__heap_remove(&p->lease_heap, &l->expiry);
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (refund) sl__adjust(p, (sl_bucket_t)b, l->need.n[b]);
        p->reserved[b] -= (double)l->need.n[b];
    }
    if (refund) sl__req_parent_charge(p, -l->need.n[SL_BUCKET_REQUESTS], now);
    if (refund) sl__caps_give(p, &l->caps, l->need.n, l->caps.cost_usd, now);
    sl__caps_end(&l->caps);
    for (int i = 0; i < 2; i++) /* a slot freed: its holder's parked tickets may go on */
        if (l->caps.st[i] && l->caps.st[i]->park_head) sl__caps_wake(p, l->caps.st[i]);
    l->cache->refs--;
    p->in_flight--;
    l->pa->agent->leases--;
    sl__lease_forget(e, l->id, end_state);
    if (e->n_spare_leases < SPARE_LEASES_MAX) {
        l->next_spare = e->spare_leases;
        e->spare_leases = l;
        e->n_spare_leases++;
    } else {
        free(l);
    }
}

void sl__ticket_end(sl_engine_t *e, sl__ticket_t *t, int end_state, uint64_t lease, double now)
{
    if (end_state == SL__END_CANCELLED || end_state == SL__END_EXPIRED) {
        sl_event_t ev;
        sl__event_init(
            &ev, end_state == SL__END_CANCELLED ? SL_EV_TICKET_CANCELLED : SL_EV_TICKET_EXPIRED,
            now, t->pool);
        ev.agent = t->pa->agent->name;
        ev.ticket = t->id;
        ev.waited_s = now - t->enqueued_at;
        sl__emit(e, &ev);
    }
    sl__heap_remove(&t->pool->ticket_heap, &t->idle);
    if (t->woken_by) { /* the slot it was woken for is free again unless it took it */
        t->woken_by->n_woken--;
        sl__caps_wake(t->pool, t->woken_by);
    }
    t->cache->refs--;
    t->pa->agent->queued--;
    sl__tomb_add(e, t->id, (lease << 4) | ((uint64_t)end_state << 1) | 1);
    free(t);
}

/* ---- request ---- */

static int check_tokens(sl_engine_t *e, const char *field, int64_t v)
{
    if (v < 0 || v > SL_TOKENS_MAX)
        return sl__fail(e, SL_EINVAL, "%s %lld must be an integer between 0 and 2^53", field,
                        (long long)v);
    return SL_OK;
}

static bool printable(const char *s, size_t max_len)
{
    size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || s[n] == 0x7f || n >= max_len) return false;
    return n > 0;
}

static void list_classes(const sl__class_t *c, size_t n, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0, off = 0; i < n && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", c[i].name);
}

static int validate_request(sl_engine_t *e, const sl_request_t *r, const sl__class_t **role,
                            const sl__class_t **prio)
{
    int rc;
    if (!r->agent) return sl__fail(e, SL_EINVAL, "agent is required");
    if (!sl__valid_name(r->agent, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "agent \"%.140s\" must be 1-128 of [A-Za-z0-9._:-]",
                        r->agent);
    if ((rc = check_tokens(e, "input_tokens", r->input_tokens)) ||
        (rc = check_tokens(e, "cached_tokens", r->cached_tokens)) ||
        (rc = check_tokens(e, "output_tokens", r->output_tokens)) ||
        (rc = check_tokens(e, "unblocks", r->unblocks)))
        return rc;
    if (!(r->cache_ttl_s >= 0 && r->cache_ttl_s <= SL_CACHE_TTL_MAX_S))
        return sl__fail(e, SL_EINVAL, "cache_ttl_s %g must be in [0, %g] seconds",
                        r->cache_ttl_s, SL_CACHE_TTL_MAX_S);
    char known[SL__MAX_CLASSES * SL__CLASS_MAX];
    /* A task in the graph decides the role (docs/design.md, "Reports and claims"): a
     * worker cannot get a planner's weight by naming a planner's task, and asking for
     * another role than the task's is a contradiction, not a choice. */
    const sl__task_t *task = r->task ? sl__strmap_get(&e->tasks, r->task) : NULL;
    const char *role_name = task ? task->role : r->role ? r->role : "worker";
    if (task && r->role && strcmp(r->role, task->role) != 0)
        return sl__fail(e, SL_EINVAL, "role: '%.64s' is not the role '%s' task '%s' is registered with",
                        r->role, task->role, task->id);
    bool allowed = !r->roles_allowed;
    for (size_t i = 0; !allowed && i < r->n_roles_allowed; i++)
        allowed = r->roles_allowed[i] && strcmp(r->roles_allowed[i], role_name) == 0;
    if (!allowed)
        return sl__fail(e, SL_EFORBIDDEN, "role: this token may not use role '%.64s'%s%s%s",
                        role_name, task ? " (the role of task '" : "", task ? task->id : "",
                        task ? "')" : "");
    *role = sl__role_find(e, role_name);
    *prio = sl__prio_find(e, r->priority ? r->priority : "normal");
    if (!*role) {
        list_classes(e->roles, e->n_roles, known, sizeof known);
        return sl__fail(e, SL_EINVAL, "role \"%.64s\" is not configured (known: %s)",
                        role_name, known);
    }
    if (!*prio) {
        list_classes(e->prios, e->n_prios, known, sizeof known);
        return sl__fail(e, SL_EINVAL, "priority \"%.64s\" is not configured (known: %s)",
                        r->priority ? r->priority : "normal", known);
    }
    if (r->task && !sl__valid_name(r->task, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "task \"%.140s\" must be 1-128 of [A-Za-z0-9._:-]", r->task);
    if (r->cache_key && !printable(r->cache_key, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "cache_key \"%.140s\" must be 1-128 printable bytes",
                        r->cache_key);
    if (r->cache_prefix_hash && !printable(r->cache_prefix_hash, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "cache_prefix_hash \"%.140s\" must be 1-128 printable bytes",
                        r->cache_prefix_hash);
    if (r->model && !printable(r->model, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "model \"%.140s\" must be 1-128 printable bytes", r->model);
    if (r->request_id && !printable(r->request_id, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "request_id \"%.140s\" must be 1-128 printable bytes",
                        r->request_id);
    if (!isfinite(r->ttl_s) || r->ttl_s < 0)
        return sl__fail(e, SL_EINVAL, "ttl %g must be a finite number of seconds > 0", r->ttl_s);
    if (!isfinite(r->max_wait_s) || r->max_wait_s < 0 || r->max_wait_s > 86400)
        return sl__fail(e, SL_EINVAL, "max_wait %g must be a number of seconds in [0, 86400]",
                        r->max_wait_s);
    return SL_OK;
}

/* Totals are informative: they saturate rather than overflow. */
static int64_t sat_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* tokens x ratio, rounded up (an estimate errs on the side of the bucket), at most 2^53. */
static int64_t corrected(int64_t tokens, double ratio)
{
    if (ratio == 1.0) return tokens;
    double v = ceil((double)tokens * ratio - 1e-9);
    return v > (double)SL_TOKENS_MAX ? SL_TOKENS_MAX : (int64_t)v;
}

/* A capped reservation of `want` output tokens for a request needing `need`: at least the
 * request's output_floor_tokens (what the caller can send as max_tokens), never more than
 * `need` on that account. */
static int64_t at_least_floor(const sl_request_t *req, int64_t want, int64_t need)
{
    int64_t floor = req->output_floor_tokens < need ? req->output_floor_tokens : need;
    return want > floor ? want : floor;
}

void sl__cache_touch(const sl__pool_t *p, sl__cache_t *c, double start_s, double ttl_s)
{
    double shift = ttl_s > 0 ? ttl_s - p->cfg.cache_ttl_s : 0;
    if (start_s + shift > c->used_at) c->used_at = start_s + shift;
}

static bool cache_warm(const sl__pool_t *p, const sl__cache_t *c, double now)
{
    return c && now - c->used_at < p->cfg.cache_ttl_s;
}

bool sl__ticket_cache_lapsed(sl__pool_t *p, sl__ticket_t *t, double now)
{
    /* Reads that count already charge the prefix, warm or cold. */
    if (t->need.penalty || t->need.cached_tokens <= 0 || p->cfg.cache_reads_count ||
        cache_warm(p, t->cache, now))
        return false;
    sl__need_t cold = t->need;
    cold.n[SL_BUCKET_INPUT] += cold.cached_tokens;
    cold.n[SL_BUCKET_TOKENS] += cold.cached_tokens;
    cold.penalty = true;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (sl__limited(p, (sl_bucket_t)b) &&
            (double)cold.n[b] > sl__capacity(p, (sl_bucket_t)b))
            return false;
    /* Out and back in with the same key; a team left empty by the removal gets its start
     * tag back, so its turn among the teams does not move. */
    double base = t->team->base;
    sl__queue_remove(p, t);
    t->need = cold;
    sl__queue_insert(p, t);
    t->team->base = base;
    return true;
}

/* The provider holds a call's whole max_tokens from its start (Anthropic estimates
 * output TPM from max_tokens and corrects it at the end; OpenAI counts max_tokens in
 * its TPM), so a need above a bucket's limit is a call the provider can never accept
 * either: refused here, naming the dimension, the figure and the limit, before anything
 * changes. A need above the capacity at the starting margin but within the limit is one
 * the provider accepts from a full bucket (sluice's bucket is full only when the
 * provider's, refilled faster from the same charges, is too): it waits for the
 * starting capacity (need.n clamped to it) and the rest (need.over) is charged at the
 * grant as debt, so the pool still counts all the provider holds. */
static int fit_capacity(sl_engine_t *e, const sl__pool_t *p, sl__need_t *need)
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        /* (a starting capacity below one unit, rpm 1, holds no whole need to wait for) */
        if (need->n[b] > p->limit[b] ||
            (need->n[b] > 0 && floor((double)p->limit[b] * p->cfg.margin_start) < 1))
            return sl__fail(e, SL_ECAPACITY,
                            "%s %lld%s can never fit pool \"%s\": its limit is %lld",
                            sl_bucket_name((sl_bucket_t)b), (long long)need->n[b],
                            need->penalty && (b == SL_BUCKET_INPUT || b == SL_BUCKET_TOKENS)
                                ? " (including the cold-cache prefix)"
                                : "",
                            p->name, (long long)p->limit[b]);
    }
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        int64_t start_cap = (int64_t)floor((double)p->limit[b] * p->cfg.margin_start);
        if (sl__limited(p, (sl_bucket_t)b) && need->n[b] > start_cap) {
            need->over[b] = need->n[b] - start_cap;
            need->n[b] = start_cap;
        }
    }
    return SL_OK;
}

static void reject(sl__pool_t *p, double weight, double retry_after_s, double now,
                   sl_decision_t *out, const char *reason, const char *limited_by)
{
    memset(out, 0, sizeof *out);
    out->limited_by = limited_by;
    out->status = SL_REJECTED;
    out->weight = weight;
    out->retry_after_s = retry_after_s;
    out->retry_at = now + retry_after_s;
    out->reason = reason ? reason : REASON_QUEUE_WAIT;
    p->rejected_total++;
}

/* The ETA of a request of `need` behind `ahead` requests whose needs sum to `sums`
 * (counted at what they keep: sl__queue_eta_sums); `sums` then holds their needs plus
 * `need`, whole. */
static double queue_eta(const sl__pool_t *p, const sl__need_t *need, double sums[SL_BUCKET_COUNT],
                        int64_t ahead, double now, const char **limited_by)
{
    double kept[SL_BUCKET_COUNT];
    sl__queue_eta_sums(p, sums, need->n, kept);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        sums[b] += (double)need->n[b];
    return sl__eta_for(p, kept, ahead, now, limited_by);
}

typedef struct decide_args {
    sl__pool_t *p;
    sl__capref_t caps;
    sl__pagent_t *pa;
    sl__cache_t *cache;
    sl__calib_t *calib;
    sl__calib_t *outs; /* the (model, group) output percentile */
    int64_t est_prompt_tokens;
    sl__need_t need;
    sl__pteam_t *team; /* its agent's team queue in the pool */
    double weight;
    double ttl_s;
    double max_wait_s; /* the longest ETA that is queued */
    bool key_pinned;   /* the request named this key alone (keyqueue.c) */
    sl__capstate_t *park_on; /* held back only by this holder's max_concurrent */
    double cap_wait_s;       /* then: when it frees a slot */
    const char *cap_reason;
    bool first_call;         /* a task's first call under the working set (admit.c) */
    int64_t depth;           /* then: its task's remaining chain (graph.c), 1 without one */
} decide_args_t;

/* Grants the request at once past the blocked queue head when backfill.c admits it;
 * false (nothing changed) when it does not, or when out of memory. */
static bool backfill_now(sl_engine_t *e, decide_args_t *a, double cost, double finish, double now,
                         sl_decision_t *out)
{
    sl__pool_t *p = a->p;
    sl__ticket_t *head = sl__queue_head(p);
    if (!head) return false;
    if (!sl__backfill_admits(e, p, head, &a->need, &a->caps, a->team, cost, now))
        return false;
    sl__tags_t tags = sl__backfill_tags(p, a->team, cost);
    sl__lease_t *l;
    if (sl__grant(e, p, a->pa, a->cache, &a->need, &a->caps, a->weight, &tags, a->ttl_s, 0, 0, now,
                  &l) != SL_OK)
        return false;
    if (finish > a->pa->last_finish) a->pa->last_finish = finish;
    sl__lease_set_calib(l, a->calib, a->outs, a->est_prompt_tokens);
    sl__fill_grant(l, out);
    return true;
}

static int decide(sl_engine_t *e, decide_args_t *a, double now, sl_decision_t *out)
{
    sl__pool_t *p = a->p;
    /* Fits the starting capacity (checked before) but not today's: the margin is down. */
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (sl__limited(p, (sl_bucket_t)b) &&
            (double)a->need.n[b] > sl__capacity(p, (sl_bucket_t)b)) {
            reject(p, a->weight, sl__margin_wait_for(p, &a->need, now), now, out, NULL,
                   sl_bucket_name((sl_bucket_t)b));
            return SL_OK;
        }
    }
    double cost = sl__cost(p, &a->need);
    sl__pteam_t *pt = a->team;
    /* An agent moved to another team keeps its last tag: it waits behind its new team
     * until that team's clock passes it, never ahead of it. */
    double start = pt->vtime > a->pa->last_finish ? pt->vtime : a->pa->last_finish;
    int64_t ahead = 0;
    double finish = 0, outer = 0, eta_s = 0;
    const char *limited_by = NULL;
    double sums[SL_BUCKET_COUNT];
    for (int pass = 0; pass < 2; pass++) {
        finish = start + cost / a->weight;
        outer = sl__queue_place(p, pt, finish, p->seq + 1, cost, &ahead, sums);
        /* Granted at once when it fits and would be the queue's head (and no holder's
         * max_concurrent holds it back). */
        if (!a->park_on && ahead == 0 && sl__fits(p, &a->need, now) &&
            (!a->first_call || sl__admit_open(p))) {
            sl__lease_t *l;
            sl__tags_t tags = {pt, finish, outer};
            int rc = sl__grant(e, p, a->pa, a->cache, &a->need, &a->caps, a->weight, &tags,
                               a->ttl_s, 0, 0, now, &l);
            if (rc) return sl__fail(e, rc, "out of memory granting a lease");
            sl__lease_set_calib(l, a->calib, a->outs, a->est_prompt_tokens);
            sl__fill_grant(l, out);
            /* Going ahead of its team's head moved that team's outer tags: another
             * team's head that fits may lead now. */
            if (pt->root && p->n_teams > 1) sl__pool_drain(e, p, now);
            return SL_OK;
        }
        /* Or granted past a blocked head that it does not delay (backfill.c), when it
         * would stand among the tickets the drain looks at. */
        if (p->cfg.backfill && !a->park_on && !a->first_call && ahead < SL__BACKFILL_WINDOW &&
            backfill_now(e, a, cost, finish, now, out))
            return SL_OK;
        eta_s = queue_eta(p, &a->need, sums, ahead, now, &limited_by);
        if (p->cfg.backfill && !a->park_on && !a->first_call && ahead > 0 &&
            ahead < SL__BACKFILL_WINDOW) { /* or sooner, past the head (backfill.c) */
            const char *why = NULL;
            double bf_s = sl__backfill_eta(e, p, &a->need, sums, &a->caps, pt, cost, now, &why);
            if (bf_s < eta_s) eta_s = bf_s, limited_by = why;
        }
        if (a->park_on && a->cap_wait_s >= eta_s) {
            eta_s = a->cap_wait_s;
            limited_by = a->cap_reason;
        }
        /* A large warm cache about to lapse costs the bucket more than serving it now. */
        const sl__cache_t *c = a->cache;
        int64_t cache_tokens = c ? c->tokens : 0;
        if (a->need.cached_tokens > cache_tokens) cache_tokens = a->need.cached_tokens;
        bool bump = pass == 0 && cache_warm(p, c, now) &&
                    cache_tokens >= p->cfg.cache_bump_min_tokens &&
                    c->used_at + p->cfg.cache_ttl_s < now + eta_s;
        if (!bump) break;
        a->weight *= p->cfg.cache_bump;
    }
    /* A first call held back by the working set waits parked, behind everyone, for no
     * ETA limit: its client checkpoints, and the wait is the point (admit.c). */
    bool ws_park = a->first_call && !a->park_on;
    if (!ws_park && !a->park_on) { /* any key of its pool may grant it (keyqueue.c) */
        sl__keys_ask_t ask = {a->pa, a->cache, &a->need, a->key_pinned,
                              a->caps.h[0] || a->caps.h[1], sums, ahead};
        eta_s = sl__keys_eta(e, p, &ask, eta_s, now, &limited_by);
    }
    if (ws_park) {
        eta_s = sl__admit_eta(p, &a->need, false, now, &ahead);
        limited_by = "working_set";
    } else if (eta_s > a->max_wait_s) {
        reject(p, a->weight, eta_s, now, out, a->park_on ? a->cap_reason : NULL, limited_by);
        return SL_OK;
    }
    if (sl__heap_reserve(&p->ticket_heap) != 0 || sl__u64map_reserve(&e->tickets, 1) != 0 ||
        (ws_park && sl__heap_reserve(&p->ws_heap) != 0))
        return sl__fail(e, SL_ENOMEM, "out of memory queueing a request");
    sl__ticket_t *t = calloc(1, sizeof *t);
    if (!t) return sl__fail(e, SL_ENOMEM, "out of memory queueing a request");
    t->id = sl__new_id(e);
    t->pool = p;
    t->pa = a->pa;
    t->cache = a->cache;
    t->cache->refs++;
    t->calib = a->calib;
    t->outs = a->outs;
    t->caps = a->caps;
    t->est_prompt_tokens = a->est_prompt_tokens;
    t->need = a->need;
    t->weight = a->weight;
    t->team = pt;
    t->cost = cost;
    t->finish = finish;
    t->seq = ++p->seq;
    t->enqueued_at = now;
    t->ttl_s = a->ttl_s;
    t->key_pinned = a->key_pinned;
    t->prio = sl__rand32(e);
    t->idle.idx = SL__HEAP_NONE;
    t->idle.tie = 0;
    t->idle.at = now + p->cfg.ticket_idle_s;
    if (a->park_on)
        sl__caps_park(p, a->park_on, t, false);
    else if (ws_park) {
        t->admit.idx = SL__HEAP_NONE;
        t->admit.at = sl__admit_key(p, now, a->depth);
        sl__admit_park(p, t);
    }
    else
        sl__queue_insert(p, t);
    sl__heap_push(&p->ticket_heap, &t->idle);
    sl__u64map_put(&e->tickets, t->id, (uint64_t)(uintptr_t)t);
    a->pa->last_finish = finish;
    a->pa->agent->queued++;
    p->queued_total++;

    memset(out, 0, sizeof *out);
    out->status = SL_QUEUED;
    out->ticket = t->id;
    out->eta_s = eta_s;
    out->position = ahead + 1;
    out->weight = a->weight;
    out->limited_by = limited_by;
    sl_event_t ev;
    sl__event_init(&ev, SL_EV_QUEUED, now, p);
    ev.agent = a->pa->agent->name;
    ev.ticket = t->id;
    ev.input_tokens = a->need.n[SL_BUCKET_INPUT];
    ev.output_tokens = a->need.n[SL_BUCKET_OUTPUT];
    ev.weight = a->weight;
    ev.eta_s = eta_s;
    sl__emit(e, &ev);
    /* Landing ahead of its team's head moved that team's later outer tags (see above). */
    if (p->n_teams > 1) sl__pool_drain(e, p, now);
    return SL_OK;
}

static int ticket_state(sl_engine_t *e, uint64_t id, double now, sl_decision_t *out);

static int replay(sl_engine_t *e, const sl__idem_t *d, double now, sl_decision_t *out)
{
    uint64_t v;
    if (d->first.status == SL_GRANTED && sl__u64map_get(&e->leases, d->first.lease, &v) &&
        !(v & 1)) {
        sl__fill_grant((const sl__lease_t *)(uintptr_t)v, out);
    } else if (d->first.status == SL_QUEUED &&
               ticket_state(e, d->first.ticket, now, out) == SL_OK) {
        /* the ticket's current state: still queued, or granted since */
    } else {
        *out = d->first;
    }
    out->replayed = true;
    return SL_OK;
}

/* A request id is one POST's: its retries go to the same pool, and a request to another
 * pool is another request (the Redis port keeps each pool's ids in that pool's slot). */
static char *idem_key(const char *agent, const char *pool, const char *request_id)
{
    size_t na = strlen(agent), np = strlen(pool), nr = strlen(request_id);
    char *k = malloc(na + np + nr + 3);
    if (!k) return NULL;
    memcpy(k, agent, na);
    k[na] = '\x1f';
    memcpy(k + na + 1, pool, np);
    k[na + 1 + np] = '\x1f';
    memcpy(k + na + np + 2, request_id, nr + 1);
    return k;
}

static void remember(sl_engine_t *e, char *key, const sl_decision_t *first, double now)
{
    sl__idem_t *d = calloc(1, sizeof *d);
    if (!d || sl__strmap_put(&e->idem, key, d) != 0) {
        free(d);
        free(key);
        return; /* out of memory: the answer stands, only its replay is lost */
    }
    d->key = key;
    d->at = now;
    d->first = *first;
    if (e->idem_tail)
        e->idem_tail->next = d;
    else
        e->idem_head = d;
    e->idem_tail = d;
}

int sl_engine_request(sl_engine_t *e, const sl_request_t *req, double now_s, sl_decision_t *out)
{
    if (!req || !out) return sl__fail(e, SL_EINVAL, "request missing");
    const sl__class_t *role_c = NULL, *prio_c = NULL;
    int rc = validate_request(e, req, &role_c, &prio_c);
    if (rc) return rc;
    const char *pool_name = req->pool ? req->pool : "default";
    sl__pool_t *p = sl__pool_find(e, pool_name);
    if (!p) return sl__fail(e, SL_ENOTFOUND, "pool \"%.140s\" not found", pool_name);
    if (!isfinite(now_s) || now_s < e->now)
        return sl__fail(e, SL_ETIME, "now %.6f is before the engine's time %.6f", now_s, e->now);

    char *key = NULL;
    if (req->request_id) {
        key = idem_key(req->agent, pool_name, req->request_id);
        if (!key) return sl__fail(e, SL_ENOMEM, "out of memory");
        sl__idem_t *d = sl__strmap_get(&e->idem, key);
        if (d && d->at + e->cfg.idempotency_ttl_s > now_s) {
            free(key);
            sl_engine_advance(e, now_s);
            return replay(e, d, now_s, out);
        }
    }

    /* The need, with the cached prefix charged when the cache is cold. */
    sl__agent_t *a = sl__agent_get(e, req->agent, false);
    sl__pagent_t *pa = a ? sl__pagent_get(p, a, false) : NULL;
    const char *cache_key = req->cache_key ? req->cache_key : req->agent;
    /* The provider caches a prefix per model: (cache_key, model, prefix hash) is one
     * cache, so a call of another model or another prefix finds it cold. */
    char identity[3 * SL__NAME_MAX + 8];
    if (req->model || req->cache_prefix_hash) {
        snprintf(identity, sizeof identity, "%s\x1f%s\x1f%s", cache_key,
                 req->model ? req->model : "",
                 req->cache_prefix_hash ? req->cache_prefix_hash : "");
        cache_key = identity;
    }
    sl__cache_t *cache = sl__cache_get(p, cache_key, false);
    decide_args_t args = {.p = p};
    bool warm = cache_warm(p, cache, now_s);
    /* Estimates counted for a model are corrected by what settles taught us. */
    sl__calib_t *calib = req->model ? sl__calib_get(p, req->model, false) : NULL;
    double ratio = sl__calib_ratio(calib);
    int64_t input = corrected(req->input_tokens, ratio);
    int64_t cached = corrected(req->cached_tokens, ratio);
    args.est_prompt_tokens = req->input_tokens + req->cached_tokens;
    args.need.cached_tokens = cached;
    args.need.prompt_tokens = input + cached;
    args.need.penalty = !warm && cached > 0;
    args.need.cache_ttl_s = req->cache_ttl_s;
    args.first_call = sl__admit_is_first_call(p, cache);
    int64_t in = input;
    if (!warm || p->cfg.cache_reads_count) in += cached;
    int64_t out_tokens = req->output_tokens;
    /* Learned per model and agent group (the role): calibrate.c says why. */
    sl__calib_t *outs = req->model ? sl__calib_outputs(p, req->model, role_c->name, false) : NULL;
    if (req->output_capped && p->cfg.output_reserve_learned && outs && outs->out_p95 > 0 &&
        outs->out_p95 < out_tokens)
        out_tokens = at_least_floor(req, outs->out_p95, out_tokens);
    args.need.n[SL_BUCKET_INPUT] = in;
    args.need.n[SL_BUCKET_OUTPUT] = out_tokens;
    args.need.n[SL_BUCKET_REQUESTS] = 1;
    args.need.n[SL_BUCKET_TOKENS] = in + out_tokens;
    rc = fit_capacity(e, p, &args.need);
    const char *cap_reason = NULL;
    double cap_wait_s = 0;
    if (rc == SL_OK) {
        sl__caps_resolve(e, a, req->agent, &args.caps);
        /* A share cap is the operator's limit, not the provider's: a call capped to its
         * reservation reserves what fits the cap (and is sent that as max_tokens); the
         * settle charges the rest to the cap as debt. An uncapped call is held to its
         * max_tokens like any other need. */
        int64_t fit = sl__caps_output_fit(p, &args.caps, args.need.n[SL_BUCKET_INPUT]);
        if (fit >= 0) fit = at_least_floor(req, fit, args.need.n[SL_BUCKET_OUTPUT]);
        if (req->output_capped && fit >= 0 && args.need.n[SL_BUCKET_OUTPUT] > fit) {
            args.need.n[SL_BUCKET_OUTPUT] = fit;
            args.need.n[SL_BUCKET_TOKENS] = args.need.n[SL_BUCKET_INPUT] + fit;
        }
        rc = sl__caps_check(e, p, &args.caps, &args.need, now_s, &cap_reason, &cap_wait_s,
                            &args.park_on);
        if (rc == 1)
            rc = SL_OK;
        else
            cap_reason = NULL;
    }
    if (rc) {
        free(key);
        return rc;
    }

    /* From here on the request is valid: time advances and records are created. */
    sl_engine_advance(e, now_s);
    if (args.caps.h[0] || args.caps.h[1]) {
        /* The caps decide on the state after the advance, whose drain may have granted
         * the holder's waiting tickets (the check above refused what can never pass). */
        cap_reason = NULL;
        cap_wait_s = 0;
        args.park_on = NULL;
        if (sl__caps_check(e, p, &args.caps, &args.need, now_s, &cap_reason, &cap_wait_s,
                           &args.park_on) != 1)
            cap_reason = NULL;
    }
    if (!a) a = sl__agent_get(e, req->agent, true);
    if (a && !pa) pa = sl__pagent_get(p, a, true);
    args.pa = pa;
    if (!cache) sl__cache_sweep(p, now_s);
    args.cache = cache ? cache : sl__cache_get(p, cache_key, true);
    if (req->model) args.calib = calib ? calib : sl__calib_get(p, req->model, true);
    if (req->model) args.outs = outs ? outs : sl__calib_outputs(p, req->model, role_c->name, true);
    args.team = a ? sl__pteam_get(e, p, a->team ? a->team : SL__DEFAULT_TEAM, true) : NULL;
    if (!args.pa || !args.cache || (req->model && (!args.calib || !args.outs)) || !args.team) {
        free(key);
        return sl__fail(e, SL_ENOMEM, "out of memory adding agent \"%s\"", req->agent);
    }
    const char *role = role_c->name;
    int64_t unblocks = req->unblocks;
    args.depth = 1;
    if (req->task && sl__strmap_get(&e->tasks, req->task)) {
        unblocks = sl_engine_task_unblocks(e, req->task);
        if (req->max_unblocks_set && unblocks > req->max_unblocks) unblocks = req->max_unblocks;
        args.depth = sl_engine_task_depth(e, req->task);
    }
    double w = role_c->value * (1 + 0.5 * (double)unblocks) * prio_c->value;
    if (a->repeats > 0) w *= pow(0.5, (double)a->repeats);
    args.weight = w > e->cfg.weight_floor ? w : e->cfg.weight_floor;
    double ttl_s = req->ttl_s > 0 ? req->ttl_s : p->cfg.lease_ttl_s;
    args.ttl_s = ttl_s > p->cfg.max_lease_ttl_s ? p->cfg.max_lease_ttl_s : ttl_s;

    args.max_wait_s = req->max_wait_s > 0 ? req->max_wait_s : p->cfg.max_queue_wait_s;
    args.key_pinned = req->key_pinned;
    if (pa->blocked_until > now_s) {
        /* Its own 429 report asked for a longer wait than the pool takes on its word. */
        reject(p, args.weight, pa->blocked_until - now_s, now_s, out, REASON_AGENT_RETRY_AFTER,
               "retry_after");
    } else if (args.park_on) {
        /* Held back only by its own max_concurrent: queued for its holder's release. */
        args.cap_wait_s = cap_wait_s;
        args.cap_reason = cap_reason;
        rc = decide(e, &args, now_s, out);
    } else if (cap_reason)
        reject(p, args.weight, cap_wait_s, now_s, out, cap_reason, cap_reason);
    else
        rc = decide(e, &args, now_s, out);
    if (rc) {
        free(key);
        return rc;
    }
    if (a->role_class != role_c) { /* class slots never move: same slot, same name */
        snprintf(a->role, sizeof a->role, "%s", role);
        a->role_class = role_c;
    }
    a->weight = out->weight;
    a->weight_base = role_c->value * (1 + 0.5 * (double)unblocks) * prio_c->value;
    if (out->status == SL_REJECTED) {
        sl_event_t ev;
        sl__event_init(&ev, SL_EV_REJECTED, now_s, p);
        ev.agent = a->name;
        ev.input_tokens = args.need.n[SL_BUCKET_INPUT];
        ev.output_tokens = args.need.n[SL_BUCKET_OUTPUT];
        ev.weight = out->weight;
        ev.retry_at = out->retry_at;
        ev.reason = out->reason;
        sl__emit(e, &ev);
    }
    if (key) remember(e, key, out, now_s);
    return SL_OK;
}

/* ---- tickets ---- */

static int ticket_state(sl_engine_t *e, uint64_t id, double now, sl_decision_t *out)
{
    uint64_t v;
    if (!sl__u64map_get(&e->tickets, id, &v))
        return sl__fail(e, SL_ENOTFOUND, "ticket %llu not found", (unsigned long long)id);
    if (!(v & 1)) {
        sl__ticket_t *t = (sl__ticket_t *)(uintptr_t)v;
        sl__pool_t *p = t->pool;
        if (!t->held) sl__heap_update(&p->ticket_heap, &t->idle, now + p->cfg.ticket_idle_s);
        int64_t ahead;
        memset(out, 0, sizeof *out);
        out->status = SL_QUEUED;
        out->ticket = t->id;
        double sums[SL_BUCKET_COUNT];
        if (t->ws_parked) {
            out->eta_s = sl__admit_eta(p, &t->need, true, now, &ahead);
            out->limited_by = "working_set";
        } else {
            sl__queue_place(p, t->team, t->finish, t->seq, t->cost, &ahead, sums);
            out->eta_s = queue_eta(p, &t->need, sums, ahead, now, &out->limited_by);
            if (!t->parked_on && p->cfg.backfill && ahead > 0 && ahead < SL__BACKFILL_WINDOW) {
                const char *why = NULL;
                if (e->holders.len) sl__caps_resolve(e, t->pa->agent, t->pa->agent->name, &t->caps);
                double bf_s = sl__backfill_eta(e, p, &t->need, sums, &t->caps, t->team, t->cost,
                                               now, &why);
                if (bf_s < out->eta_s) out->eta_s = bf_s, out->limited_by = why;
            }
            if (!t->parked_on) {
                sl__keys_ask_t ask = {t->pa, t->cache, &t->need, t->key_pinned,
                                      t->caps.h[0] || t->caps.h[1], sums, ahead};
                out->eta_s = sl__keys_eta(e, p, &ask, out->eta_s, now, &out->limited_by);
            }
        }
        if (t->parked_on) {
            const char *why;
            double cap_s = sl__caps_release_eta(p, t->parked_on, sl__caps_parked_ahead(t), now, &why);
            if (cap_s >= out->eta_s) out->eta_s = cap_s, out->limited_by = why;
        }
        out->position = ahead + 1;
        out->weight = t->weight;
        return SL_OK;
    }
    int state = (int)((v >> 1) & 7);
    uint64_t lease = v >> 4;
    if (state == SL__END_GRANTED) {
        uint64_t lv;
        if (sl__u64map_get(&e->leases, lease, &lv) && !(lv & 1)) {
            sl__lease_t *l = (sl__lease_t *)(uintptr_t)lv;
            if (!l->claimed) {
                l->claimed = true;
                sl__heap_update(&l->pool->lease_heap, &l->expiry, now + l->ttl_s);
            }
            sl__fill_grant(l, out);
            return SL_OK;
        }
        return sl__fail(e, SL_EALREADY, "ticket %llu was granted lease %llu, which has ended",
                        (unsigned long long)id, (unsigned long long)lease);
    }
    return sl__fail(e, SL_EALREADY, "ticket %llu was %s", (unsigned long long)id,
                    state == SL__END_CANCELLED ? "cancelled"
                    : state == SL__END_EXPIRED ? "expired (nobody waited on it)"
                                               : "rejected (it no longer fits the pool)");
}

int sl_engine_ticket(sl_engine_t *e, uint64_t ticket, double now_s, sl_decision_t *out)
{
    int rc = sl_engine_advance(e, now_s);
    if (rc) return rc;
    return ticket_state(e, ticket, now_s, out);
}

int sl_engine_ticket_hold(sl_engine_t *e, uint64_t ticket, bool held, double now_s)
{
    /* Time first, as every call given `now` does: the ticket may have been granted or have
     * expired by now, and an old tombstone is gone (else the answer would depend on
     * whether another call advanced the engine meanwhile). */
    int rc = sl_engine_advance(e, now_s);
    if (rc) return rc;
    uint64_t v;
    if (!sl__u64map_get(&e->tickets, ticket, &v))
        return sl__fail(e, SL_ENOTFOUND, "ticket %llu not found", (unsigned long long)ticket);
    if (v & 1)
        return sl__fail(e, SL_EALREADY, "ticket %llu is no longer queued",
                        (unsigned long long)ticket);
    sl__ticket_t *t = (sl__ticket_t *)(uintptr_t)v;
    sl__pool_t *p = t->pool;
    if (held == t->held) return SL_OK;
    if (!held && sl__heap_reserve(&p->ticket_heap) != 0)
        return sl__fail(e, SL_ENOMEM, "out of memory");
    t->held = held;
    if (held) {
        sl__heap_remove(&p->ticket_heap, &t->idle);
    } else {
        t->idle.at = now_s + p->cfg.ticket_idle_s;
        sl__heap_push(&p->ticket_heap, &t->idle);
    }
    return SL_OK;
}

int sl_engine_ticket_cancel(sl_engine_t *e, uint64_t ticket, double now_s)
{
    uint64_t v;
    int rc = sl_engine_advance(e, now_s);
    if (rc) return rc;
    if (!sl__u64map_get(&e->tickets, ticket, &v))
        return sl__fail(e, SL_ENOTFOUND, "ticket %llu not found", (unsigned long long)ticket);
    if (!(v & 1)) {
        sl__ticket_t *t = (sl__ticket_t *)(uintptr_t)v;
        sl__pool_t *p = t->pool;
        sl__ticket_detach(p, t);
        sl__ticket_end(e, t, SL__END_CANCELLED, 0, now_s);
        sl__pool_drain(e, p, now_s); /* the head may have changed */
        return SL_OK;
    }
    if (((v >> 1) & 7) == SL__END_GRANTED) {
        uint64_t lv;
        if (sl__u64map_get(&e->leases, v >> 4, &lv) && !(lv & 1)) {
            /* A grant whose client is gone is refunded, never leaked. */
            sl__lease_t *l = (sl__lease_t *)(uintptr_t)lv;
            sl__pool_t *p = l->pool;
            l->claimed = true;
            sl__lease_end(e, l, SL__END_CANCELLED, true, now_s);
            sl__pool_drain(e, p, now_s);
            return SL_OK;
        }
    }
    return sl__fail(e, SL_EALREADY, "ticket %llu is no longer queued", (unsigned long long)ticket);
}

/* ---- settle, cancel, extend ---- */

/* Finds a live lease, or fails naming why not. */
static int live_lease(sl_engine_t *e, uint64_t id, sl__lease_t **out)
{
    uint64_t v;
    *out = NULL;
    if (!sl__u64map_get(&e->leases, id, &v)) {
        int state = sl__lease_ended_state(e, id);
        if (state == 0)
            return sl__fail(e, SL_ENOTFOUND, "lease %llu not found", (unsigned long long)id);
        if (state == SL__END_REAPED)
            return sl__fail(e, SL_EEXPIRED, "lease %llu expired and was reaped (no refund)",
                            (unsigned long long)id);
        return sl__fail(e, SL_EALREADY, "lease %llu was already %s", (unsigned long long)id,
                        state == SL__END_SETTLED ? "settled" : "cancelled");
    }
    *out = (sl__lease_t *)(uintptr_t)v;
    return SL_OK;
}

static int validate_settle(sl_engine_t *e, const sl_settle_t *s)
{
    int rc;
    if ((rc = check_tokens(e, "input_tokens", s->input_tokens)) ||
        (rc = check_tokens(e, "output_tokens", s->output_tokens)) ||
        (rc = check_tokens(e, "cache_creation_input_tokens", s->cache_creation_input_tokens)) ||
        (rc = check_tokens(e, "cache_read_input_tokens", s->cache_read_input_tokens)) ||
        (rc = check_tokens(e, "cache_creation_1h_input_tokens",
                           s->cache_creation_1h_input_tokens)))
        return rc;
    if (s->cache_creation_1h_input_tokens > s->cache_creation_input_tokens)
        return sl__fail(e, SL_EINVAL,
                        "cache_creation_1h_input_tokens %lld must be at most "
                        "cache_creation_input_tokens %lld",
                        (long long)s->cache_creation_1h_input_tokens,
                        (long long)s->cache_creation_input_tokens);
    if (isnan(s->retry_after_s) || isinf(s->retry_after_s) || s->retry_after_s > 86400)
        return sl__fail(e, SL_EINVAL, "retry_after %g must be a number of seconds up to 86400",
                        s->retry_after_s);
    if (isnan(s->agent_retry_after_s) || isinf(s->agent_retry_after_s) ||
        s->agent_retry_after_s > 86400)
        return sl__fail(e, SL_EINVAL,
                        "agent_retry_after %g must be a number of seconds up to 86400",
                        s->agent_retry_after_s);
    if (s->failure_signature && strlen(s->failure_signature) > SL__SIG_MAX)
        return sl__fail(e, SL_EINVAL, "failure_signature is longer than %d bytes", SL__SIG_MAX);
    if (s->header_count && (!s->header_names || !s->header_values))
        return sl__fail(e, SL_EINVAL, "headers: names or values missing");
    for (size_t i = 0; i < s->header_count; i++)
        if (!s->header_names[i] || !s->header_values[i])
            return sl__fail(e, SL_EINVAL, "headers: entry %zu is missing", i);
    return SL_OK;
}

int sl_engine_resync_lease(sl_engine_t *e, uint64_t lease, const char *const *names,
                           const char *const *values, size_t count, double now_s, int *changed)
{
    return sl_engine_resync_lease_sent(e, lease, -1, names, values, count, now_s, changed);
}

int sl_engine_resync_lease_sent(sl_engine_t *e, uint64_t lease, double sent_after_s,
                                const char *const *names, const char *const *values, size_t count,
                                double now_s, int *changed)
{
    if (!isfinite(sent_after_s))
        return sl__fail(e, SL_EINVAL, "sent_after_s %g must be a finite number of seconds",
                        sent_after_s);
    sl__lease_t *l;
    int rc = live_lease(e, lease, &l);
    return rc ? rc
              : sl__resync_pool(e, l->pool, lease, sent_after_s, names, values, count, now_s,
                                changed);
}

int sl_engine_settle(sl_engine_t *e, uint64_t lease, const sl_settle_t *s, double now_s,
                     sl_settle_result_t *out)
{
    if (!s) return sl__fail(e, SL_EINVAL, "settle body missing");
    int rc = validate_settle(e, s);
    if (rc) return rc;
    if (!isfinite(now_s) || now_s < e->now)
        return sl__fail(e, SL_ETIME, "now %.6f is before the engine's time %.6f", now_s, e->now);
    sl_engine_advance(e, now_s);
    sl__lease_t *l;
    if ((rc = live_lease(e, lease, &l))) return rc;
    sl__pool_t *p = l->pool;
    /* Malformed provider headers refuse the settle before anything changes. */
    if (s->header_count && (rc = sl__resync(e, p, s->header_names, s->header_values,
                                            s->header_count, lease, -1, s->got_429, now_s, false,
                                            NULL)))
        return rc;
    sl__agent_t *a = l->pa->agent;
    if (sl__agent_record_signature(a, s->failure_signature) != 0)
        return sl__fail(e, SL_ENOMEM, "out of memory");

    /* The provider wrote these headers while it still held this call's reservation
     * (Anthropic counts output from max_tokens until the call ends), and so does our
     * level until the refund below: compare them now, or the refund would be undone. A
     * 429's do not count this call (the provider refused it): they apply after its refund
     * and the cut, below, against the level then (docs/design.md "Margin"). */
    if (s->header_count && !s->got_429)
        sl__resync(e, p, s->header_names, s->header_values, s->header_count, lease, -1, false,
                   now_s, true, NULL);

    int64_t actual_in = s->input_tokens + s->cache_creation_input_tokens;
    if (p->cfg.cache_reads_count) actual_in += s->cache_read_input_tokens;
    int64_t actual_out = s->output_tokens;
    int64_t adj_in = l->need.n[SL_BUCKET_INPUT] - actual_in;
    int64_t adj_out = l->need.n[SL_BUCKET_OUTPUT] - actual_out;
    sl__adjust(p, SL_BUCKET_INPUT, adj_in);
    sl__adjust(p, SL_BUCKET_OUTPUT, adj_out);
    sl__adjust(p, SL_BUCKET_TOKENS, adj_in + adj_out);
    if (l->caps.h[0] || l->caps.h[1]) {
        int64_t cap_delta[SL_BUCKET_COUNT] = {adj_in, adj_out, 0, adj_in + adj_out};
        sl__caps_give(p, &l->caps, cap_delta,
                      l->caps.cost_usd -
                          sl__caps_billed_cost_usd(p, actual_in, s->cache_creation_input_tokens,
                                                   s->cache_creation_1h_input_tokens, actual_out),
                      now_s);
    }

    /* Only calls the provider answered teach: a refused or broken call's zero or
     * partial usage says nothing about the estimate or the cache. */
    bool counted = !s->failed && !s->got_429;
    /* Like with like: the prompt the provider billed (uncached, written and read)
     * against the prompt estimated for it, whether the cache turned out warm or cold, so
     * a correctly predicted cache write, or a read sluice charged as a write, is no
     * estimator error. */
    int64_t billed_prompt = sat_add(sat_add(s->input_tokens, s->cache_creation_input_tokens),
                                    s->cache_read_input_tokens);
    double err = fabs((double)billed_prompt - (double)l->need.prompt_tokens) /
                 (double)(billed_prompt > 1 ? billed_prompt : 1);
    if (counted) {
        sl__agent_record_error(e, p, a, p->cfg.estimate_error_window, p->cfg.estimate_error_alert,
                               err);
        sl__calib_record(l->calib, l->est_prompt_tokens,
                         s->input_tokens + s->cache_creation_input_tokens +
                             s->cache_read_input_tokens);
        int64_t cache_tokens = s->cache_read_input_tokens + s->cache_creation_input_tokens;
        /* The provider counts a cache's life from the start of the call that used it, not
         * from its end. The call started at its grant or after, so counting from the grant
         * never believes a cache warm past what the provider keeps; the later end of life
         * wins when calls settle out of order or a 5-minute call reads a 1-hour entry. */
        bool first_settle = !isfinite(l->cache->used_at);
        sl__cache_touch(p, l->cache, l->granted_at, l->need.cache_ttl_s);
        if (first_settle) sl__admit_settled(p, l->cache);
        l->cache->tokens =
            cache_tokens > l->need.cached_tokens ? cache_tokens : l->need.cached_tokens;
        sl__calib_record_output(l->outs, s->output_tokens, l->need.n[SL_BUCKET_OUTPUT]);
        int64_t charged[SL_BUCKET_COUNT] = {actual_in, actual_out, 1, actual_in + actual_out};
        sl__record_refund(p, l->need.n, charged);
        sl__spend_cap_alert(e, p, false, now_s); /* a call went through: no longer capped */
    }
    a->tokens_in = sat_add(a->tokens_in, actual_in);
    a->tokens_out = sat_add(a->tokens_out, actual_out);

    sl_event_t ev;
    if (e->cb) {
        sl__event_init(&ev, SL_EV_SETTLED, now_s, p);
        ev.agent = a->name;
        ev.lease = l->id;
        ev.input_tokens = actual_in;
        ev.output_tokens = actual_out;
        ev.adjust_input_tokens = adj_in;
        ev.adjust_output_tokens = adj_out;
        ev.estimate_error = err;
        ev.not_counted = !counted;
        ev.weight = l->weight;
        sl__emit(e, &ev);
    }
    /* How long a slot stays taken: from the grant (or its claim) to the settle. */
    sl__record_lease_duration(p, now_s - l->granted_at);
    sl__lease_end(e, l, SL__END_SETTLED, false, now_s);

    if (s->got_429) {
        a->got_429++;
        p->upstream_429_total++;
        bool spend_cap = s->spend_cap && s->retry_after_s < 0;
        sl__event_init(&ev, SL_EV_UPSTREAM_429, now_s, p);
        ev.agent = a->name;
        ev.lease = lease;
        ev.reason = spend_cap ? "spend_cap" : "rate";
        ev.retry_at = s->retry_after_s >= 0 ? now_s + s->retry_after_s : now_s;
        ev.margin = sl__margin(p);
        sl__emit(e, &ev);
        if (spend_cap) {
            /* A budget stop, not a rate limit: the margin is not the problem. */
            p->spend_cap_at = now_s;
            sl__spend_cap_alert(e, p, true, now_s);
        } else {
            sl__margin_cut(e, p, lease, now_s);
            if (s->retry_after_s >= 0 && now_s + s->retry_after_s > p->blocked_until)
                p->blocked_until = now_s + s->retry_after_s;
            sl__pagent_t *pa = sl__pagent_get(p, a, false);
            if (pa && s->agent_retry_after_s > 0 &&
                now_s + s->agent_retry_after_s > pa->blocked_until)
                pa->blocked_until = now_s + s->agent_retry_after_s;
        }
        /* The lease has ended: its headers are compared with the level now, which holds
         * neither its need nor the room it was granted from, and earn no step. */
        if (s->header_count)
            sl__resync(e, p, s->header_names, s->header_values, s->header_count, lease, -1,
                       true, now_s, true, NULL);
    }
    sl__pool_drain(e, p, now_s);
    if (out) {
        out->adjust_input_tokens = adj_in;
        out->adjust_output_tokens = adj_out;
        out->estimate_error = err;
        out->not_counted = !counted;
    }
    return SL_OK;
}

int sl_engine_cancel(sl_engine_t *e, uint64_t lease, double now_s)
{
    int rc = sl_engine_advance(e, now_s);
    if (rc) return rc;
    sl__lease_t *l;
    if ((rc = live_lease(e, lease, &l))) return rc;
    sl__pool_t *p = l->pool;
    l->claimed = true;
    sl__lease_end(e, l, SL__END_CANCELLED, true, now_s);
    sl__pool_drain(e, p, now_s);
    return SL_OK;
}

int sl_engine_extend(sl_engine_t *e, uint64_t lease, double ttl_s, double now_s, double *expires_at)
{
    if (!isfinite(ttl_s) || ttl_s <= 0)
        return sl__fail(e, SL_EINVAL, "ttl %g must be a finite number of seconds > 0", ttl_s);
    int rc = sl_engine_advance(e, now_s);
    if (rc) return rc;
    sl__lease_t *l;
    if ((rc = live_lease(e, lease, &l))) return rc;
    if (ttl_s > l->pool->cfg.max_lease_ttl_s) ttl_s = l->pool->cfg.max_lease_ttl_s;
    l->claimed = true;
    l->ttl_s = ttl_s;
    sl__heap_update(&l->pool->lease_heap, &l->expiry, now_s + ttl_s);
    if (expires_at) *expires_at = l->expiry.at;
    return SL_OK;
}
