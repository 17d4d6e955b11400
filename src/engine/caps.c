/* caps.c - caps per agent and per team on top of the pool: share, rpm, concurrency, budget.
 *
 * The pool decides who goes first; caps decide how much one agent (or one team) may
 * take at all, so a runaway agent cannot drain a pool others share. Each cap is a
 * bucket of its own, refilled continuously like the pool's: a share cap holds
 * limit x max_share tokens per minute, an rpm cap max_rpm requests per minute, a
 * budget max dollars per hour or per day (priced with the pool's per-million-token
 * prices). Caps are checked when a request arrives (a request they do not allow is
 * rejected with the time they will), taken when a lease is granted and adjusted by
 * settle, cancel and reap exactly as the pool's buckets are. */
#include "internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const REASON_AGENT = "agent_cap";
static const char *const REASON_TEAM = "team_cap";
static const char *const REASON_BUDGET = "budget_exhausted";

static bool caps_empty(const sl_caps_t *c)
{
    return c->max_share == 0 && c->max_rpm == 0 && c->max_concurrent == 0 &&
           c->budget_usd_per_hour == 0 && c->budget_usd_per_day == 0;
}

static sl__holder_t *holder_find(const sl_engine_t *e, char kind, const char *name)
{
    char key[SL__NAME_MAX + 3];
    snprintf(key, sizeof key, "%c:%s", kind, name);
    return sl__strmap_get(&e->holders, key);
}

/* A holder without a budget counts no spending, so a budget it is given later starts
 * full: what it spent under none is not owed to the new one. */
static bool has_budget(const sl_caps_t *c)
{
    return c->budget_usd_per_hour > 0 || c->budget_usd_per_day > 0;
}

static void holder_set(sl__holder_t *h, const sl_caps_t *c)
{
    if (!has_budget(&h->caps) && has_budget(c)) {
        h->budget_hour_usd = c->budget_usd_per_hour;
        h->budget_day_usd = c->budget_usd_per_day;
    }
    h->caps = *c;
    if (h->budget_hour_usd > c->budget_usd_per_hour) h->budget_hour_usd = c->budget_usd_per_hour;
    if (h->budget_day_usd > c->budget_usd_per_day) h->budget_day_usd = c->budget_usd_per_day;
}

static sl__holder_t *holder_new(sl_engine_t *e, char kind, const char *name, const sl_caps_t *c)
{
    if (sl__strmap_reserve(&e->holders, 1) != 0) return NULL;
    sl__holder_t *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->key = malloc(strlen(name) + 3);
    if (!h->key) {
        free(h);
        return NULL;
    }
    sprintf(h->key, "%c:%s", kind, name);
    h->name = h->key + 2;
    h->team = kind == 't';
    h->caps = *c;
    h->budget_hour_usd = c->budget_usd_per_hour;
    h->budget_day_usd = c->budget_usd_per_day;
    h->budget_last = e->now;
    sl__strmap_put(&e->holders, h->key, h);
    return h;
}

int sl_engine_set_caps(sl_engine_t *e, const char *holder, bool is_team, const sl_caps_t *caps)
{
    if (!holder || (strcmp(holder, "*") != 0 && !sl__valid_name(holder, SL__NAME_MAX)) ||
        (is_team && strcmp(holder, "*") == 0))
        return sl__fail(e, SL_EINVAL, "caps: %s \"%.140s\" must be 1-128 of [A-Za-z0-9._:-]%s",
                        is_team ? "team" : "agent", holder ? holder : "(null)",
                        is_team ? "" : " or \"*\"");
    sl_caps_t none = {0, 0, 0, 0, 0};
    const sl_caps_t *c = caps ? caps : &none;
    if (!(c->max_share >= 0 && c->max_share <= 1))
        return sl__fail(e, SL_EINVAL, "caps of \"%s\": max_share %g must be in [0, 1]", holder,
                        c->max_share);
    if (c->max_rpm < 0 || c->max_rpm > SL_TOKENS_MAX || c->max_concurrent < 0 ||
        c->max_concurrent > SL_TOKENS_MAX)
        return sl__fail(e, SL_EINVAL,
                        "caps of \"%s\": max_rpm %lld and max_concurrent %lld "
                        "must be between 0 and 2^53",
                        holder, (long long)c->max_rpm, (long long)c->max_concurrent);
    if (!(c->budget_usd_per_hour >= 0 && isfinite(c->budget_usd_per_hour)) ||
        !(c->budget_usd_per_day >= 0 && isfinite(c->budget_usd_per_day)))
        return sl__fail(e, SL_EINVAL,
                        "caps of \"%s\": budgets (%g per hour, %g per day) must "
                        "be finite and >= 0",
                        holder, c->budget_usd_per_hour, c->budget_usd_per_day);
    sl__holder_t *h = holder_find(e, is_team ? 't' : 'a', holder);
    if (!h) {
        if (caps_empty(c)) return SL_OK;
        h = holder_new(e, is_team ? 't' : 'a', holder, c);
        if (!h) return sl__fail(e, SL_ENOMEM, "out of memory setting caps of \"%s\"", holder);
    }
    bool star = !is_team && strcmp(holder, "*") == 0;
    if (star) {
        /* Every agent without caps of its own follows "*", each with its own buckets. */
        for (size_t i = 0; i < e->holders.cap; i++) {
            sl__holder_t *o = e->holders.slots[i].hash ? e->holders.slots[i].val : NULL;
            if (o && o->inherited) holder_set(o, c);
        }
        holder_set(h, c);
        return SL_OK;
    }
    const sl__holder_t *def = is_team ? NULL : holder_find(e, 'a', "*");
    h->inherited = !is_team && caps_empty(c) && def;
    holder_set(h, h->inherited ? &def->caps : c);
    return SL_OK;
}

int sl_engine_set_agent_team(sl_engine_t *e, const char *agent, const char *team)
{
    if (!agent || !sl__valid_name(agent, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "agent \"%.140s\" must be 1-128 of [A-Za-z0-9._:-]",
                        agent ? agent : "(null)");
    if (team && !sl__valid_name(team, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "team \"%.140s\" must be 1-128 of [A-Za-z0-9._:-]", team);
    char *copy = NULL;
    if (team) {
        copy = malloc(strlen(team) + 1);
        if (!copy) return sl__fail(e, SL_ENOMEM, "out of memory");
        memcpy(copy, team, strlen(team) + 1);
    }
    sl__agent_t *a = sl__agent_get(e, agent, true);
    if (!a) {
        free(copy);
        return sl__fail(e, SL_ENOMEM, "out of memory adding agent \"%s\"", agent);
    }
    free(a->team);
    a->team = copy;
    return SL_OK;
}

void sl__caps_resolve(sl_engine_t *e, const sl__agent_t *a, const char *agent_name,
                      sl__capref_t *out)
{
    memset(out, 0, sizeof *out);
    if (e->holders.len == 0) return;
    out->h[0] = holder_find(e, 'a', agent_name);
    if (!out->h[0]) {
        const sl__holder_t *def = holder_find(e, 'a', "*");
        if (def && !caps_empty(&def->caps)) {
            /* Out of memory leaves this one request uncapped, never refused. */
            out->h[0] = holder_new(e, 'a', agent_name, &def->caps);
            if (out->h[0]) out->h[0]->inherited = true;
        }
    }
    if (a && a->team) out->h[1] = holder_find(e, 't', a->team);
}

double sl__caps_cost_usd(const sl__pool_t *p, int64_t in_tokens, int64_t out_tokens)
{
    return (double)in_tokens * p->cfg.price_input_per_mtok / 1e6 +
           (double)out_tokens * p->cfg.price_output_per_mtok / 1e6;
}

double sl__caps_billed_cost_usd(const sl__pool_t *p, int64_t in_tokens, int64_t cc, int64_t cc_1h,
                                int64_t out_tokens)
{
    double premium = (double)(cc - cc_1h) * (SL__CACHE_WRITE_5M_PRICE - 1) +
                     (double)cc_1h * (SL__CACHE_WRITE_1H_PRICE - 1);
    return sl__caps_cost_usd(p, in_tokens, out_tokens) +
           premium * p->cfg.price_input_per_mtok / 1e6;
}

/* The capacity of a holder's cap on bucket b in pool p (0 = no cap). */
static double cap_capacity(const sl__pool_t *p, const sl_caps_t *c, int b)
{
    if (b == SL_BUCKET_REQUESTS) return (double)c->max_rpm;
    if (c->max_share > 0 && p->limit[b] > 0) return (double)p->limit[b] * c->max_share;
    return 0;
}

int64_t sl__caps_output_fit(const sl__pool_t *p, const sl__capref_t *c, int64_t in_tokens)
{
    int64_t fit = -1;
    for (int i = 0; i < 2; i++) {
        if (!c->h[i]) continue;
        double out_cap = cap_capacity(p, &c->h[i]->caps, SL_BUCKET_OUTPUT);
        double tok_cap = cap_capacity(p, &c->h[i]->caps, SL_BUCKET_TOKENS);
        if (out_cap > 0) {
            int64_t f = (int64_t)floor(out_cap + 1e-6);
            if (fit < 0 || f < fit) fit = f;
        }
        if (tok_cap > 0) {
            int64_t f = (int64_t)floor(tok_cap + 1e-6) - in_tokens;
            if (f < 0) f = 0; /* the input alone never passes: the check says so */
            if (fit < 0 || f < fit) fit = f;
        }
    }
    return fit;
}

static double level_now(const sl__pool_t *p, const sl__holder_t *h, const sl__capstate_t *st, int b,
                        double now)
{
    double cap = cap_capacity(p, &h->caps, b);
    if (!st) return cap; /* never used in this pool: full */
    double level = st->level[b] + cap / 60.0 * (now - st->last);
    return level > cap ? cap : level;
}

static void budget_now(const sl__holder_t *h, double now, double *hour, double *day)
{
    double dt = now - h->budget_last;
    if (dt < 0) dt = 0;
    *hour = h->budget_hour_usd + h->caps.budget_usd_per_hour / 3600.0 * dt;
    if (*hour > h->caps.budget_usd_per_hour) *hour = h->caps.budget_usd_per_hour;
    *day = h->budget_day_usd + h->caps.budget_usd_per_day / 86400.0 * dt;
    if (*day > h->caps.budget_usd_per_day) *day = h->caps.budget_usd_per_day;
}

double sl__caps_release_eta(const sl__pool_t *p, const sl__capstate_t *st, int64_t ahead,
                            double now, const char **reason)
{
    const sl__holder_t *h = st->holder;
    if (reason) *reason = h->team ? REASON_TEAM : REASON_AGENT;
    double earliest = now + p->cfg.lease_ttl_s;
    for (size_t k = 0; k < p->lease_heap.len; k++) {
        const sl__lease_t *l = sl__container_of(p->lease_heap.items[k], sl__lease_t, expiry);
        if ((l->caps.st[0] == st || l->caps.st[1] == st) && l->expiry.at < earliest)
            earliest = l->expiry.at;
    }
    int64_t max = h->caps.max_concurrent > 0 ? h->caps.max_concurrent : 1;
    if (st->in_flight < max) return 0; /* a slot is free: as soon as the queue lets it */
    /* A slot frees at a settle: expected from the pool's observed lease durations,
     * bounded by the holder's earliest expiry for the first release. */
    return sl__release_eta(p, st->in_flight - max + 1 + ahead, max, earliest, now);
}

int sl__caps_check(sl_engine_t *e, const sl__pool_t *p, const sl__capref_t *c,
                   const sl__need_t *need, double now, const char **reason, double *retry_after_s,
                   sl__capstate_t **park_on)
{
    double cost = sl__caps_cost_usd(p, need->n[SL_BUCKET_INPUT], need->n[SL_BUCKET_OUTPUT]);
    double wait_s = 0;
    const char *why = NULL;
    bool other = false; /* something besides max_concurrent holds it back */
    sl__capstate_t *conc = NULL;
    for (int i = 0; i < 2; i++) {
        const sl__holder_t *h = c->h[i];
        if (!h) continue;
        const sl__capstate_t *st = sl__strmap_get(&p->capstates, h->key);
        const char *cap_reason = h->team ? REASON_TEAM : REASON_AGENT;
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            double cap = cap_capacity(p, &h->caps, b);
            if (cap <= 0) continue;
            if ((double)need->n[b] > cap)
                return sl__fail(e, SL_ECAPACITY,
                                "%s %lld can never pass the %s of %s \"%s\": "
                                "%.0f per minute",
                                sl_bucket_name((sl_bucket_t)b), (long long)need->n[b], cap_reason,
                                h->team ? "team" : "agent", h->name, cap);
            double level = level_now(p, h, st, b, now);
            if (level < (double)need->n[b]) {
                double t = ((double)need->n[b] - level) / (cap / 60.0);
                other = true;
                if (t > wait_s) wait_s = t, why = cap_reason;
            }
        }
        if (h->caps.max_concurrent > 0 && st && st->in_flight >= h->caps.max_concurrent) {
            double t = sl__caps_release_eta(p, st, st->n_parked, now, NULL);
            if (!conc) conc = (sl__capstate_t *)st;
            if (t >= wait_s) wait_s = t, why = cap_reason;
        }
        if (cost > 0 && (h->caps.budget_usd_per_hour > 0 || h->caps.budget_usd_per_day > 0)) {
            double hour, day;
            budget_now(h, now, &hour, &day);
            if ((h->caps.budget_usd_per_hour > 0 && cost > h->caps.budget_usd_per_hour) ||
                (h->caps.budget_usd_per_day > 0 && cost > h->caps.budget_usd_per_day))
                return sl__fail(e, SL_ECAPACITY,
                                "a call costing $%.4f can never pass the "
                                "budget of %s \"%s\"",
                                cost, h->team ? "team" : "agent", h->name);
            if (h->caps.budget_usd_per_hour > 0 && hour < cost) other = true;
            if (h->caps.budget_usd_per_day > 0 && day < cost) other = true;
            if (h->caps.budget_usd_per_hour > 0 && hour < cost) {
                double t = (cost - hour) / (h->caps.budget_usd_per_hour / 3600.0);
                if (t >= wait_s) wait_s = t, why = REASON_BUDGET;
            }
            if (h->caps.budget_usd_per_day > 0 && day < cost) {
                double t = (cost - day) / (h->caps.budget_usd_per_day / 86400.0);
                if (t >= wait_s) wait_s = t, why = REASON_BUDGET;
            }
        }
    }
    if (!why) return 0;
    *reason = why;
    *retry_after_s = wait_s;
    if (park_on) *park_on = other ? NULL : conc;
    return 1;
}

sl__capstate_t *sl__caps_at_concurrency(const sl__pool_t *p, const sl__capref_t *c)
{
    for (int i = 0; i < 2; i++) {
        const sl__holder_t *h = c->h[i];
        if (!h || h->caps.max_concurrent <= 0) continue;
        sl__capstate_t *st = c->st[i] ? c->st[i] : sl__strmap_get(&p->capstates, h->key);
        if (st && st->in_flight >= h->caps.max_concurrent) return st;
    }
    return NULL;
}

/* ---- the park: tickets waiting for their holder's release ----
 *
 * A request held back only by max_concurrent is queued, like one held back by the
 * pool's concurrency, but not in the pool's queue: its head would wait for one agent's
 * release and block everyone behind it. It waits on its holder's list instead, in
 * arrival order, keeping the finish tag it was given; when a lease of the holder ends,
 * the oldest parked ticket goes back to the queue at that tag (so it keeps its fair
 * place) for each free slot. The drain checks the cap again before a grant, so a ticket
 * that finds its holder full at the head (a slot taken meanwhile, or a cap lowered by a
 * reload) is parked again, at the front. */

void sl__caps_park(sl__pool_t *p, sl__capstate_t *st, sl__ticket_t *t, bool front)
{
    t->parked_on = st;
    t->park_prev = front ? NULL : st->park_tail;
    t->park_next = front ? st->park_head : NULL;
    if (t->park_prev) t->park_prev->park_next = t;
    else st->park_head = t;
    if (t->park_next) t->park_next->park_prev = t;
    else st->park_tail = t;
    st->n_parked++;
    p->n_parked++;
}

void sl__caps_unpark(sl__pool_t *p, sl__ticket_t *t)
{
    sl__capstate_t *st = t->parked_on;
    if (t->park_prev) t->park_prev->park_next = t->park_next;
    else st->park_head = t->park_next;
    if (t->park_next) t->park_next->park_prev = t->park_prev;
    else st->park_tail = t->park_prev;
    t->park_prev = t->park_next = NULL;
    t->parked_on = NULL;
    st->n_parked--;
    p->n_parked--;
}

void sl__caps_wake(sl__pool_t *p, sl__capstate_t *st)
{
    while (st->park_head) {
        int64_t max = st->holder->caps.max_concurrent;
        if (max > 0 && st->in_flight + st->n_woken >= max) break;
        sl__ticket_t *t = st->park_head;
        sl__caps_unpark(p, t);
        t->woken_by = st;
        st->n_woken++;
        sl__queue_insert(p, t);
    }
}

void sl_engine_wake_parked(sl_engine_t *e)
{
    for (size_t i = 0; i < e->n_pools; i++) {
        sl__pool_t *p = e->pools[i];
        if (!p->n_parked) continue;
        for (size_t k = 0; k < p->capstates.cap; k++)
            if (p->capstates.slots[k].hash) sl__caps_wake(p, p->capstates.slots[k].val);
        sl__pool_drain(e, p, e->now);
    }
}

int64_t sl__caps_parked_ahead(const sl__ticket_t *t)
{
    int64_t n = 0;
    for (const sl__ticket_t *o = t->park_prev; o; o = o->park_prev)
        n++;
    return n;
}

void sl__ticket_detach(sl__pool_t *p, sl__ticket_t *t)
{
    if (t->parked_on)
        sl__caps_unpark(p, t);
    else if (t->ws_parked)
        sl__admit_unpark(p, t);
    else
        sl__queue_remove(p, t);
}

static sl__capstate_t *capstate_get(sl__pool_t *p, const sl__holder_t *h, double now)
{
    sl__capstate_t *st = sl__strmap_get(&p->capstates, h->key);
    if (st) return st;
    st = sl__strmap_make(&p->capstates, h->key, sizeof *st, offsetof(sl__capstate_t, key));
    if (!st) return NULL;
    st->holder = h;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        st->level[b] = cap_capacity(p, &h->caps, b);
    st->last = now;
    return st;
}

int sl__caps_reserve(sl__pool_t *p, sl__capref_t *c)
{
    for (int i = 0; i < 2; i++) {
        if (!c->h[i]) continue;
        c->st[i] = capstate_get(p, c->h[i], p->last_refill);
        if (!c->st[i]) return SL_ENOMEM;
    }
    return SL_OK;
}

static void refill_state(const sl__pool_t *p, const sl__holder_t *h, sl__capstate_t *st, double now)
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        st->level[b] = level_now(p, h, st, b, now);
    if (now > st->last) st->last = now;
}

static void refill_budget(sl__holder_t *h, double now)
{
    double hour, day;
    budget_now(h, now, &hour, &day);
    h->budget_hour_usd = hour;
    h->budget_day_usd = day;
    if (now > h->budget_last) h->budget_last = now;
}

void sl__caps_take(sl__pool_t *p, sl__capref_t *c, const sl__need_t *need, double now)
{
    if (!c->h[0] && !c->h[1]) return; /* no caps: nothing to take (the common case) */
    c->cost_usd = sl__caps_cost_usd(p, need->n[SL_BUCKET_INPUT], need->n[SL_BUCKET_OUTPUT]);
    for (int i = 0; i < 2; i++) {
        sl__holder_t *h = c->h[i];
        if (!h || !c->st[i]) continue;
        refill_state(p, h, c->st[i], now);
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            if (cap_capacity(p, &h->caps, b) > 0) c->st[i]->level[b] -= (double)need->n[b];
        c->st[i]->in_flight++;
        if (!has_budget(&h->caps)) continue;
        refill_budget(h, now);
        h->budget_hour_usd -= c->cost_usd;
        h->budget_day_usd -= c->cost_usd;
    }
}

void sl__caps_give(sl__pool_t *p, sl__capref_t *c, const int64_t delta[SL_BUCKET_COUNT],
                   double delta_usd, double now)
{
    for (int i = 0; i < 2; i++) {
        sl__holder_t *h = c->h[i];
        if (!h || !c->st[i]) continue;
        refill_state(p, h, c->st[i], now);
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            double cap = cap_capacity(p, &h->caps, b);
            if (cap <= 0) continue;
            double level = c->st[i]->level[b] + (double)delta[b];
            c->st[i]->level[b] = level > cap ? cap : level;
        }
        if (!has_budget(&h->caps)) continue;
        refill_budget(h, now);
        h->budget_hour_usd += delta_usd;
        if (h->budget_hour_usd > h->caps.budget_usd_per_hour)
            h->budget_hour_usd = h->caps.budget_usd_per_hour;
        h->budget_day_usd += delta_usd;
        if (h->budget_day_usd > h->caps.budget_usd_per_day)
            h->budget_day_usd = h->caps.budget_usd_per_day;
    }
}

void sl__caps_end(sl__capref_t *c)
{
    for (int i = 0; i < 2; i++)
        if (c->st[i]) c->st[i]->in_flight--;
}

bool sl__caps_agent_fresh(const sl_engine_t *e, const char *agent, double now)
{
    const sl__holder_t *h = holder_find(e, 'a', agent);
    if (!h) return true;
    if (!h->inherited) return false; /* caps of its own: the operator's */
    if (has_budget(&h->caps)) {
        double hour, day;
        budget_now(h, now, &hour, &day);
        if (hour < h->caps.budget_usd_per_hour || day < h->caps.budget_usd_per_day) return false;
    }
    for (size_t i = 0; i < e->n_pools; i++) {
        const sl__pool_t *p = e->pools[i];
        const sl__capstate_t *st = sl__strmap_get(&p->capstates, h->key);
        if (!st) continue;
        if (st->in_flight || st->n_parked || st->n_woken) return false;
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            if (level_now(p, h, st, b, now) < cap_capacity(p, &h->caps, b)) return false;
    }
    return true;
}

void sl__caps_agent_drop(sl_engine_t *e, const char *agent)
{
    sl__holder_t *h = holder_find(e, 'a', agent);
    if (!h) return;
    assert(h->inherited && "only a copy of \"*\" is the agent's to lose");
    for (size_t i = 0; i < e->n_pools; i++) {
        sl__capstate_t *st = sl__strmap_del(&e->pools[i]->capstates, h->key);
        if (!st) continue;
        free(st->key);
        free(st);
    }
    sl__strmap_del(&e->holders, h->key);
    free(h->key);
    free(h);
}
