/* pool.c - pools: configuration, advancing time (refill, reap, expire), draining the queue.
 *
 * A pool is one provider key and model class. Everything that happens to a pool on
 * its own, because time passed, happens in sl__pool_advance(): margin steps, refill,
 * expired leases reaped without refund (a crashed agent may well have spent the
 * tokens), unclaimed grants refunded, idle tickets expired, and the queue drained
 * from its head while the head fits, then past it what does not delay it (backfill.c). */
#include "internal.h"
#include "../common/grow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sl_pool_config_init(sl_pool_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->margin_start = 0.85;
    cfg->margin_floor = 0.60;
    cfg->margin_step_down = 0.05;
    cfg->margin_step_up = 0.01;
    cfg->margin_max = 0.97;
    cfg->recover_every_s = 180;
    cfg->margin_floor_alert_s = 600;
    cfg->lease_ttl_s = 120;
    cfg->max_lease_ttl_s = 600;
    cfg->max_queue_wait_s = 60;
    cfg->cache_ttl_s = 300;
    cfg->cache_reads_count = false;
    cfg->cache_bump_min_tokens = 10000;
    cfg->cache_bump = 1.5;
    cfg->estimate_error_alert = 0.20;
    cfg->estimate_error_window = 20;
    cfg->claim_timeout_s = 30;
    cfg->ticket_idle_s = 120;
    cfg->spend_cap_reset_s = 3600;
    cfg->lease_duration_prior_s = 30;
    cfg->backfill = true;
    cfg->send_window_s = 5;
}

static int check_limit(sl_engine_t *e, const char *pool, const char *field, int64_t v)
{
    if (v < 0 || v > SL_TOKENS_MAX)
        return sl__fail(e, SL_EINVAL, "pool \"%s\": %s %lld must be between 0 and 2^53", pool,
                        field, (long long)v);
    return SL_OK;
}

static int check_time(sl_engine_t *e, const char *pool, const char *field, double v, bool zero_ok)
{
    if (!isfinite(v) || v < 0 || (!zero_ok && v == 0) || v > 1e9)
        return sl__fail(e, SL_EINVAL, "pool \"%s\": %s %g must be a finite number of seconds %s",
                        pool, field, v, zero_ok ? ">= 0" : "> 0");
    return SL_OK;
}

static int validate(sl_engine_t *e, const char *name, const sl_pool_config_t *c)
{
    int rc;
    if ((rc = check_limit(e, name, "input_tpm", c->input_tpm)) ||
        (rc = check_limit(e, name, "output_tpm", c->output_tpm)) ||
        (rc = check_limit(e, name, "rpm", c->rpm)) ||
        (rc = check_limit(e, name, "tokens_tpm", c->tokens_tpm)) ||
        (rc = check_limit(e, name, "concurrency", c->concurrency)) ||
        (rc = check_limit(e, name, "cache_bump_min_tokens", c->cache_bump_min_tokens)) ||
        (rc = check_limit(e, name, "key_group", c->key_group)))
        return rc;
    if (c->request_parent && (c->rpm != 0 || !strchr(name, ':')))
        return sl__fail(e, SL_EINVAL,
                        "pool \"%s\": request_parent takes the requests of the pool named before "
                        "its last ':' and needs such a name and rpm 0 (rpm %lld)",
                        name, (long long)c->rpm);
    if (!(c->margin_floor > 0 && c->margin_floor <= c->margin_start && c->margin_start <= 1))
        return sl__fail(e, SL_EINVAL,
                        "pool \"%s\": margin_floor %g and margin_start %g must satisfy "
                        "0 < margin_floor <= margin_start <= 1",
                        name, c->margin_floor, c->margin_start);
    if (!(c->margin_max >= 0 && c->margin_max <= 1))
        return sl__fail(e, SL_EINVAL, "pool \"%s\": margin_max %g must be in [0, 1]", name,
                        c->margin_max);
    if (!(c->margin_step_down > 0 && c->margin_step_down <= 1))
        return sl__fail(e, SL_EINVAL, "pool \"%s\": margin_step_down %g must be in (0, 1]", name,
                        c->margin_step_down);
    if (!(c->margin_step_up >= 0.0001 && c->margin_step_up <= 1))
        return sl__fail(e, SL_EINVAL, "pool \"%s\": margin_step_up %g must be in [0.0001, 1]", name,
                        c->margin_step_up);
    if ((rc = check_time(e, name, "recover_every_s", c->recover_every_s, false)) ||
        (rc = check_time(e, name, "margin_floor_alert_s", c->margin_floor_alert_s, false)) ||
        (rc = check_time(e, name, "lease_ttl_s", c->lease_ttl_s, false)) ||
        (rc = check_time(e, name, "max_lease_ttl_s", c->max_lease_ttl_s, false)) ||
        (rc = check_time(e, name, "max_queue_wait_s", c->max_queue_wait_s, true)) ||
        (rc = check_time(e, name, "cache_ttl_s", c->cache_ttl_s, true)) ||
        (rc = check_time(e, name, "claim_timeout_s", c->claim_timeout_s, false)) ||
        (rc = check_time(e, name, "spend_cap_reset_s", c->spend_cap_reset_s, true)) ||
        (rc = check_time(e, name, "lease_duration_prior_s", c->lease_duration_prior_s, true)) ||
        (rc = check_time(e, name, "ticket_idle_s", c->ticket_idle_s, false)))
        return rc;
    if (!(c->send_window_s >= 0 && c->send_window_s <= SL__SEND_WINDOW_MAX_S))
        return sl__fail(e, SL_EINVAL, "pool \"%s\": send_window_s %g must be in [0, %d] seconds",
                        name, c->send_window_s, SL__SEND_WINDOW_MAX_S);
    if (c->max_lease_ttl_s < c->lease_ttl_s)
        return sl__fail(e, SL_EINVAL, "pool \"%s\": max_lease_ttl_s %g is below lease_ttl_s %g",
                        name, c->max_lease_ttl_s, c->lease_ttl_s);
    if (!isfinite(c->cache_bump) || c->cache_bump < 1 || c->cache_bump > 100)
        return sl__fail(e, SL_EINVAL, "pool \"%s\": cache_bump %g must be in [1, 100]", name,
                        c->cache_bump);
    if (!isfinite(c->estimate_error_alert) || c->estimate_error_alert < 0)
        return sl__fail(e, SL_EINVAL, "pool \"%s\": estimate_error_alert %g must be >= 0", name,
                        c->estimate_error_alert);
    if (!(c->price_input_per_mtok >= 0 && c->price_input_per_mtok < 1e9) ||
        !(c->price_output_per_mtok >= 0 && c->price_output_per_mtok < 1e9))
        return sl__fail(e, SL_EINVAL,
                        "pool \"%s\": prices (%g, %g per million tokens) must be "
                        "finite and >= 0",
                        name, c->price_input_per_mtok, c->price_output_per_mtok);
    if (c->estimate_error_window < 1 || c->estimate_error_window > SL__ERR_WINDOW_MAX)
        return sl__fail(e, SL_EINVAL, "pool \"%s\": estimate_error_window %d must be 1-%d", name,
                        c->estimate_error_window, SL__ERR_WINDOW_MAX);
    return SL_OK;
}

static void set_limits(sl__pool_t *p)
{
    p->limit[SL_BUCKET_INPUT] = p->cfg.input_tpm;
    p->limit[SL_BUCKET_OUTPUT] = p->cfg.output_tpm;
    p->limit[SL_BUCKET_REQUESTS] = p->cfg.rpm;
    p->limit[SL_BUCKET_TOKENS] = p->cfg.tokens_tpm;
    p->start_bp = sl__to_bp(p->cfg.margin_start);
    p->floor_bp = sl__to_bp(p->cfg.margin_floor);
    p->up_bp = sl__to_bp(p->cfg.margin_step_up);
    p->down_bp = sl__to_bp(p->cfg.margin_step_down);
    int max_bp = sl__to_bp(p->cfg.margin_max);
    p->max_bp = max_bp > p->start_bp ? max_bp : p->start_bp;
}

int sl_engine_configure_pool(sl_engine_t *e, const char *name, const sl_pool_config_t *cfg,
                             double now_s)
{
    if (!name || !sl__valid_name(name, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "pool name \"%s\" must be 1-%d of [A-Za-z0-9._:-]",
                        name ? name : "(null)", SL__NAME_MAX);
    if (!cfg) return sl__fail(e, SL_EINVAL, "pool \"%s\": configuration missing", name);
    int rc = validate(e, name, cfg);
    if (rc) return rc;
    if (!isfinite(now_s) || now_s < e->now)
        return sl__fail(e, SL_ETIME, "now %.6f is before the engine's time %.6f", now_s, e->now);
    sl__pool_t *p = sl__pool_find(e, name);
    if (p) {
        rc = sl_engine_advance(e, now_s);
        if (rc) return rc;
        p->cfg = *cfg;
        set_limits(p);
        if (p->margin_bp > p->max_bp) p->margin_bp = p->max_bp;
        if (p->margin_bp < p->floor_bp) p->margin_bp = p->floor_bp;
        if (p->margin_bp > p->floor_bp) p->floor_since = -1;
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            if (!sl__limited(p, (sl_bucket_t)b)) p->level[b] = 0;
        sl__clamp_levels(p);
        sl__req_parent_link(e, p);
        sl__pool_reject_unfit(e, p, now_s);
        if (!p->cfg.working_set) sl__admit_release_all(p);
        sl__pool_drain(e, p, now_s);
        return SL_OK;
    }
    sl__pool_t **pools = realloc(e->pools, (e->n_pools + 1) * sizeof *pools);
    if (!pools) return sl__fail(e, SL_ENOMEM, "out of memory adding pool \"%s\"", name);
    e->pools = pools;
    if (sl__strmap_reserve(&e->pool_map, 1) != 0)
        return sl__fail(e, SL_ENOMEM, "out of memory adding pool \"%s\"", name);
    p = calloc(1, sizeof *p);
    if (p) p->name = malloc(strlen(name) + 1);
    if (!p || !p->name) {
        free(p);
        return sl__fail(e, SL_ENOMEM, "out of memory adding pool \"%s\"", name);
    }
    memcpy(p->name, name, strlen(name) + 1);
    e->now = now_s;
    p->index = (int)e->n_pools;
    p->cfg = *cfg;
    set_limits(p);
    p->margin_bp = (int)lround(cfg->margin_start * 10000);
    p->clean_since = now_s;
    p->floor_since = -1;
    p->blocked_until = -INFINITY;
    p->ws_promoted_at = -INFINITY;
    p->grants.open_from = p->grants.open_at = -INFINITY;
    p->last_refill = now_s;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        p->level[b] = sl__limited(p, (sl_bucket_t)b) ? sl__capacity(p, (sl_bucket_t)b) : 0;
    e->pools[e->n_pools++] = p;
    sl__strmap_put(&e->pool_map, p->name, p);
    sl__req_parent_link(e, p);
    return SL_OK;
}

static void free_ticket_rec(sl__ticket_t *t)
{
    if (!t) return;
    free_ticket_rec(t->left);
    free_ticket_rec(t->right);
    free(t);
}

void sl__pool_free(sl__pool_t *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->lease_heap.len; i++)
        free(sl__container_of(p->lease_heap.items[i], sl__lease_t, expiry));
    p->lease_heap.len = 0; /* the leases are gone: sl__heap_free must not touch them */
    sl__heap_free(&p->lease_heap);
    sl__heap_free(&p->ticket_heap);
    for (size_t i = 0; i < p->n_teams; i++)
        free_ticket_rec(p->teams[i]->root);
    sl__admit_free(p);
    for (size_t i = 0; i < p->capstates.cap; i++) {
        if (!p->capstates.slots[i].hash) continue;
        sl__capstate_t *st = p->capstates.slots[i].val;
        for (sl__ticket_t *t = st->park_head, *next; t; t = next) {
            next = t->park_next;
            free(t);
        }
    }
    for (size_t i = 0; i < p->pagents.cap; i++)
        if (p->pagents.slots[i].hash) free(p->pagents.slots[i].val);
    sl__strmap_free(&p->pagents);
    sl__strmap_free_owned(&p->caches, offsetof(sl__cache_t, key));
    sl__strmap_free_owned(&p->calibs, offsetof(sl__calib_t, model));
    sl__strmap_free_owned(&p->capstates, offsetof(sl__capstate_t, key));
    sl__teams_free_pool(p);
    free(p->name);
    free(p);
}

void sl__pool_drain(sl_engine_t *e, sl__pool_t *p, double now)
{
    if (p->ws_head) sl__admit_promote(p, now);
    for (sl__ticket_t *t = sl__queue_head(p); t; t = sl__queue_head(p)) {
        sl__ticket_cache_lapsed(p, t, now); /* it stays the head */
        if (!sl__fits(p, &t->need, now)) {
            if (p->cfg.backfill) sl__backfill(e, p, t, now); /* what may pass it harmlessly */
            break;
        }
        sl__tags_t tags = {t->team, t->finish, sl__queue_head_outer(t)};
        sl__queue_remove(p, t);
        /* The caps as they are now (a reload may have changed them since it queued). */
        if (e->holders.len) sl__caps_resolve(e, t->pa->agent, t->pa->agent->name, &t->caps);
        sl__capstate_t *st = sl__caps_at_concurrency(p, &t->caps);
        if (st) { /* its holder has no free slot: it waits for the holder's release */
            sl__capstate_t *woken_by = t->woken_by;
            t->woken_by = NULL;
            sl__caps_park(p, st, t, true);
            if (woken_by) { /* the slot it was woken for (another holder's) is free again */
                woken_by->n_woken--;
                sl__caps_wake(p, woken_by);
            }
            continue;
        }
        if (sl__grant_ticket(e, p, t, &tags, now) != SL_OK) {
            /* Out of memory: put it back and try again on the next advance. */
            sl__queue_insert(p, t);
            break;
        }
    }
    if (p->ws_n && p->queued == 0) sl__admit_grant(e, p, now);
    sl__keys_drain(e, p, now);
}

void sl__spend_cap_alert(sl_engine_t *e, sl__pool_t *p, bool active, double now)
{
    if (p->alert_spend_cap == active) return;
    p->alert_spend_cap = active;
    sl_event_t ev;
    sl__event_init(&ev, SL_EV_ALERT, now, p);
    ev.alert = "spend_cap";
    ev.active = active;
    sl__emit(e, &ev);
}

/* When the configured reset clears the spend_cap alert; +INFINITY when it never does. */
static double spend_cap_reset_at(const sl__pool_t *p)
{
    if (!p->alert_spend_cap || p->cfg.spend_cap_reset_s <= 0) return INFINITY;
    return p->spend_cap_at + p->cfg.spend_cap_reset_s;
}

void sl__pool_advance(sl_engine_t *e, sl__pool_t *p, double now)
{
    double reset_at = spend_cap_reset_at(p);
    if (reset_at <= now) sl__spend_cap_alert(e, p, false, reset_at);
    sl__margin_advance(e, p, now);
    sl__refill(p, now);
    for (sl__hnode_t *n = sl__heap_top(&p->lease_heap); n && n->at <= now;
         n = sl__heap_top(&p->lease_heap)) {
        sl__lease_t *l = sl__container_of(n, sl__lease_t, expiry);
        /* A grant its client never learned of was never used: refund it. */
        sl__lease_end(e, l, l->claimed ? SL__END_REAPED : SL__END_CANCELLED, !l->claimed, now);
    }
    for (sl__hnode_t *n = sl__heap_top(&p->ticket_heap); n && n->at <= now;
         n = sl__heap_top(&p->ticket_heap)) {
        sl__ticket_t *t = sl__container_of(n, sl__ticket_t, idle);
        sl__ticket_detach(p, t);
        sl__ticket_end(e, t, SL__END_EXPIRED, 0, now);
    }
    sl__pool_drain(e, p, now);
}

double sl__pool_next_wakeup(const sl__pool_t *p)
{
    double at = sl__margin_next_step_at(p);
    double reset_at = spend_cap_reset_at(p);
    if (reset_at < at) at = reset_at;
    const sl__hnode_t *n = sl__heap_top(&p->lease_heap);
    if (n && n->at < at) at = n->at;
    n = sl__heap_top(&p->ticket_heap);
    if (n && n->at < at) at = n->at;
    double admit_at = sl__admit_next_at(p);
    if (admit_at < at) at = admit_at;
    const sl__ticket_t *head = sl__queue_head(p);
    /* The next first call, even when its holder's max_concurrent holds it: once it fits,
     * the drain parks it on that holder and admits the first calls after it
     * (sl__admit_grant), so the pool has something to do then. Without this wake-up they
     * waited for whatever call advanced the pool next (ws_capped_head_wakeup.scn). */
    if (!head && p->ws_n) head = sl__admit_next(p);
    /* At the pool's concurrency nothing goes before a release, which drains (and an
     * expiry is a wake-up above): the head's expected release time would come back every
     * time it passed without one, every microsecond when leases take no time. */
    if (p->cfg.concurrency > 0 && p->in_flight >= p->cfg.concurrency) head = NULL;
    if (head) {
        /* A microsecond late, so rounding never leaves the head a hair short. */
        double need[SL_BUCKET_COUNT];
        sl__need_as_sums(&head->need, need);
        double eta_s = sl__eta_for(p, need, 0, p->last_refill, NULL);
        double eta_at = p->last_refill + eta_s + 1e-6;
        if (eta_at < at) at = eta_at;
        /* A queued head that waits may be passed by what the refill makes room for. */
        if (eta_s > 0 && head->team && sl__queue_head(p) == head) {
            double backfill_at = sl__backfill_next_at(p, head);
            if (backfill_at < at) at = backfill_at;
        }
    }
    return at;
}

typedef struct unfit_ctx {
    sl__pool_t *p;
    sl__ticket_t **list;
    size_t n, cap;
} unfit_ctx_t;

static void collect_unfit(sl__ticket_t *t, void *ud)
{
    unfit_ctx_t *c = ud;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(c->p, (sl_bucket_t)b)) continue;
        if ((double)t->need.n[b] > sl__capacity(c->p, (sl_bucket_t)b)) {
            sl__ticket_t **list = sl_grow(c->list, c->n, &c->cap, sizeof *list, 16);
            if (!list) return; /* out of memory: it stays queued until the next cut */
            c->list = list;
            c->list[c->n++] = t;
            return;
        }
    }
}

void sl__pool_reject_unfit(sl_engine_t *e, sl__pool_t *p, double now)
{
    unfit_ctx_t c = {.p = p};
    sl__queue_foreach(p, collect_unfit, &c);
    for (size_t i = 0; p->n_parked && i < p->capstates.cap; i++) { /* and the parked ones */
        if (!p->capstates.slots[i].hash) continue;
        const sl__capstate_t *st = p->capstates.slots[i].val;
        for (sl__ticket_t *t = st->park_head; t; t = t->park_next)
            collect_unfit(t, &c);
    }
    for (sl__ticket_t *t = p->ws_head; t; t = t->park_next) /* and the working set's */
        collect_unfit(t, &c);
    for (size_t i = 0; i < c.n; i++) {
        sl__ticket_t *t = c.list[i];
        sl__ticket_detach(p, t);
        sl_event_t ev;
        sl__event_init(&ev, SL_EV_TICKET_REJECTED, now, p);
        ev.agent = t->pa->agent->name;
        ev.ticket = t->id;
        ev.retry_at = now + sl__margin_wait_for(p, &t->need, now);
        ev.reason = "queue_wait_exceeds_max";
        sl__emit(e, &ev);
        sl__ticket_end(e, t, SL__END_REJECTED, 0, now);
    }
    free(c.list);
}

int sl_engine_pool_info(const sl_engine_t *e, const char *name, sl_pool_info_t *out)
{
    const sl__pool_t *p = name ? sl__pool_find(e, name) : NULL;
    if (!p) return sl__fail(e, SL_ENOTFOUND, "pool \"%.140s\" not found", name ? name : "(null)");
    memset(out, 0, sizeof *out);
    out->name = p->name;
    out->config = p->cfg;
    out->margin = sl__margin(p);
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        out->limit[b] = p->limit[b];
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        out->level[b] = p->level[b];
        out->capacity[b] = sl__capacity(p, (sl_bucket_t)b);
        out->refill_per_s[b] = out->capacity[b] / 60.0;
    }
    out->queue_depth = sl__queue_depth(p) + p->n_parked + p->ws_n;
    const sl__ticket_t *head = sl__queue_head(p);
    out->head_eta_s = -1;
    if (head) {
        double need[SL_BUCKET_COUNT];
        sl__need_as_sums(&head->need, need);
        out->head_eta_s = sl__eta_for(p, need, 0, p->last_refill, NULL);
    }
    out->leases_in_flight = p->in_flight;
    out->alert_margin_at_floor = p->alert_floor;
    out->alert_spend_cap = p->alert_spend_cap;
    out->blocked_until = p->blocked_until;
    out->cold_until = p->cold_until;
    out->granted_total = p->granted_total;
    out->queued_total = p->queued_total;
    out->rejected_total = p->rejected_total;
    out->upstream_429_total = p->upstream_429_total;
    for (size_t i = 0; i < p->calibs.cap && out->n_calibration < SL_POOL_INFO_MODELS; i++) {
        if (!p->calibs.slots[i].hash) continue;
        const sl__calib_t *c = p->calibs.slots[i].val;
        if (sl__calib_is_outputs(c)) continue; /* a group's outputs, no model's ratio */
        sl_calibration_info_t *ci = &out->calibration[out->n_calibration++];
        ci->model = c->model;
        ci->ratio = c->ratio;
        ci->samples = c->total;
    }
    return SL_OK;
}

void sl_engine_pool_foreach(const sl_engine_t *e, void (*fn)(const sl_pool_info_t *p, void *ud),
                            void *ud)
{
    for (size_t i = 0; i < e->n_pools; i++) {
        sl_pool_info_t info;
        if (sl_engine_pool_info(e, e->pools[i]->name, &info) == SL_OK) fn(&info, ud);
    }
}
