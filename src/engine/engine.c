/* engine.c - the engine object: lifetime, time, events, errors, tombstones, invariants. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sl_engine_config_init(sl_engine_config_t *cfg)
{
    cfg->tombstone_ttl_s = 600;
    cfg->idempotency_ttl_s = 600;
    cfg->weight_floor = 0.1;
}

/* The API's names of the buckets and the task states, indexed by the enum. */
static const char *const bucket_names[SL_BUCKET_COUNT] = {
    [SL_BUCKET_INPUT] = "input_tokens",
    [SL_BUCKET_OUTPUT] = "output_tokens",
    [SL_BUCKET_REQUESTS] = "requests",
    [SL_BUCKET_TOKENS] = "tokens",
};
static const char *const task_state_names[] = {
    [SL_TASK_WAITING] = "waiting",
    [SL_TASK_RUNNING] = "running",
    [SL_TASK_DONE] = "done",
};

const char *sl_bucket_name(sl_bucket_t b)
{
    return (unsigned)b < SL_BUCKET_COUNT ? bucket_names[b] : "unknown";
}

const char *sl_task_state_name(sl_task_state_t s)
{
    return (unsigned)s < sizeof task_state_names / sizeof *task_state_names ? task_state_names[s]
                                                                            : "unknown";
}

sl_engine_t *sl_engine_new(const sl_engine_config_t *cfg)
{
    sl_engine_t *e = calloc(1, sizeof *e + SL__ERRMSG_LEN);
    if (!e) return NULL;
    e->errmsg = (char *)(e + 1);
    if (cfg) {
        e->cfg = *cfg;
    } else {
        sl_engine_config_init(&e->cfg);
    }
    if (!(isfinite(e->cfg.weight_floor) && e->cfg.weight_floor > 0)) e->cfg.weight_floor = 0.1;
    e->now = -INFINITY;
    e->next_id = 1;
    e->rng = 0x9e3779b97f4a7c15ULL;
    sl_engine_set_role(e, "planner", 3);
    sl_engine_set_role(e, "reviewer", 2);
    sl_engine_set_role(e, "worker", 1);
    sl_engine_set_priority(e, "high", 4);
    sl_engine_set_priority(e, "normal", 1);
    sl_engine_set_priority(e, "low", 0.25);
    e->errmsg[0] = '\0';
    return e;
}

void sl_engine_free(sl_engine_t *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->n_pools; i++)
        sl__pool_free(e->pools[i]);
    free(e->pools);
    sl__strmap_free(&e->pool_map);
    for (size_t i = 0; i < e->agents.cap; i++)
        if (e->agents.slots[i].hash) sl__agent_free(e->agents.slots[i].val);
    sl__strmap_free(&e->agents);
    sl__u64map_free(&e->leases);
    for (sl__lease_t *l = e->spare_leases, *next; l; l = next) {
        next = l->next_spare;
        free(l);
    }
    sl__u64map_free(&e->tickets);
    sl__u64map_free(&e->ended_old);
    free(e->tombs);
    free(e->ended);
    for (sl__idem_t *d = e->idem_head, *next; d; d = next) {
        next = d->next;
        free(d->key);
        free(d);
    }
    sl__strmap_free(&e->idem);
    for (size_t i = 0; i < e->tasks.cap; i++) {
        if (!e->tasks.slots[i].hash) continue;
        sl__task_t *t = e->tasks.slots[i].val;
        for (size_t j = 0; j < t->n_deps; j++)
            free(t->deps[j]);
        free(t->deps);
        free(t->id);
        free(t);
    }
    sl__strmap_free(&e->tasks);
    sl__strmap_free_owned(&e->holders, offsetof(sl__holder_t, key));
    sl__strmap_free_owned(&e->teams, offsetof(sl__team_t, name));
    free(e);
}

void sl_engine_set_event_cb(sl_engine_t *e, sl_event_cb cb, void *userdata)
{
    e->cb = cb;
    e->cb_ud = userdata;
}

const char *sl_engine_errmsg(const sl_engine_t *e)
{
    return e->errmsg;
}

int sl__fail(const sl_engine_t *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->errmsg, SL__ERRMSG_LEN, fmt, ap);
    va_end(ap);
    return code;
}

void sl__event_init(sl_event_t *ev, sl_event_kind_t kind, double now_s, const sl__pool_t *p)
{
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->now_s = now_s;
    ev->pool = p ? p->name : NULL;
}

void sl__emit(sl_engine_t *e, sl_event_t *ev)
{
    if (e->cb) e->cb(ev, e->cb_ud);
}

uint32_t sl__rand32(sl_engine_t *e)
{
    /* xorshift64*: deterministic, so queues are reproducible run to run. */
    e->rng ^= e->rng >> 12;
    e->rng ^= e->rng << 25;
    e->rng ^= e->rng >> 27;
    return (uint32_t)((e->rng * 0x2545f4914f6cdd1dULL) >> 32);
}

bool sl__valid_name(const char *s, size_t max_len)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == ':' || c == '-';
        if (!ok || n >= max_len) return false;
    }
    return n > 0;
}

sl__pool_t *sl__pool_find(const sl_engine_t *e, const char *name)
{
    return sl__strmap_get(&e->pool_map, name);
}

/* Tombstones: an ended ticket stays in the ticket map as a tagged state (and an ended
 * lease from below the id base in `ended_old`) for tombstone_ttl_s, in a ring buffer
 * ordered by end time, then is forgotten. */
static int tomb_push(sl_engine_t *e, sl__u64map_t *map, uint64_t id, uint64_t value, bool lease)
{
    if (e->tomb_len == e->tomb_cap) {
        size_t cap = e->tomb_cap ? e->tomb_cap * 2 : 64;
        sl__tomb_t *tombs = malloc(cap * sizeof *tombs);
        if (!tombs) {
            /* Cannot remember it: forget it, so it reads as unknown, never as live. */
            sl__u64map_del(map, id);
            return -1;
        }
        for (size_t i = 0; i < e->tomb_len; i++)
            tombs[i] = e->tombs[(e->tomb_head + i) % e->tomb_cap];
        free(e->tombs);
        e->tombs = tombs;
        e->tomb_cap = cap;
        e->tomb_head = 0;
    }
    if (sl__u64map_put(map, id, value) != 0) return -1;
    sl__tomb_t *t = &e->tombs[(e->tomb_head + e->tomb_len) % e->tomb_cap];
    t->id = id;
    t->at = e->now;
    t->lease = lease;
    e->tomb_len++;
    return 0;
}

int sl__tomb_add(sl_engine_t *e, uint64_t ticket, uint64_t value)
{
    return tomb_push(e, &e->tickets, ticket, value, false); /* replaces the live entry */
}

/* Ids are issued in order, so the states of ended leases live in a ring indexed by
 * id: issuing an id clears the slot it reuses. The ring doubles up to SL__ENDED_MAX as
 * ids are issued above the id base. Leases below the base (restored from an earlier
 * run) are remembered in `ended_old` instead, with a tombstone. */
uint64_t sl__new_id(sl_engine_t *e)
{
    uint64_t id = e->next_id++;
    uint64_t issued = id - e->id_base; /* 1 for the first id above the base */
    if (issued >= e->ended_cap && e->ended_cap < SL__ENDED_MAX) {
        size_t cap = e->ended_cap ? e->ended_cap * 2 : SL__ENDED_MIN;
        uint8_t *ring = calloc(cap, 1);
        if (ring) {
            uint64_t from = issued > e->ended_cap ? id - e->ended_cap : e->id_base + 1;
            for (uint64_t j = from; j < id && e->ended; j++)
                ring[j & (cap - 1)] = e->ended[j & (e->ended_cap - 1)];
            free(e->ended);
            e->ended = ring;
            e->ended_cap = cap;
        }
    }
    if (e->ended_cap) e->ended[id & (e->ended_cap - 1)] = 0;
    return id;
}

static bool in_ring(const sl_engine_t *e, uint64_t id)
{
    return e->ended_cap && id > e->id_base && id < e->next_id && e->next_id - id <= e->ended_cap;
}

void sl__lease_forget(sl_engine_t *e, uint64_t lease, int end_state)
{
    sl__u64map_del(&e->leases, lease);
    if (in_ring(e, lease))
        e->ended[lease & (e->ended_cap - 1)] = (uint8_t)end_state;
    else if (lease <= e->id_base)
        tomb_push(e, &e->ended_old, lease, (uint64_t)end_state, true);
}

int sl__lease_ended_state(const sl_engine_t *e, uint64_t lease)
{
    if (in_ring(e, lease)) return e->ended[lease & (e->ended_cap - 1)];
    uint64_t v;
    return lease <= e->id_base && sl__u64map_get(&e->ended_old, lease, &v) ? (int)v : 0;
}

static void purge_old(sl_engine_t *e, double now)
{
    while (e->tomb_len) {
        sl__tomb_t *t = &e->tombs[e->tomb_head];
        if (t->at + e->cfg.tombstone_ttl_s > now) break;
        sl__u64map_del(t->lease ? &e->ended_old : &e->tickets, t->id);
        e->tomb_head = (e->tomb_head + 1) % e->tomb_cap;
        e->tomb_len--;
    }
    while (e->idem_head && e->idem_head->at + e->cfg.idempotency_ttl_s <= now) {
        sl__idem_t *d = e->idem_head;
        e->idem_head = d->next;
        if (!e->idem_head) e->idem_tail = NULL;
        sl__strmap_del(&e->idem, d->key);
        free(d->key);
        free(d);
    }
}

int sl_engine_advance(sl_engine_t *e, double now_s)
{
    if (!isfinite(now_s)) return sl__fail(e, SL_ETIME, "now %g is not a finite time", now_s);
    if (now_s < e->now)
        return sl__fail(e, SL_ETIME, "now %.6f is before the engine's time %.6f", now_s, e->now);
    e->now = now_s;
    for (size_t i = 0; i < e->n_pools; i++)
        sl__pool_advance(e, e->pools[i], now_s);
    purge_old(e, now_s);
    return SL_OK;
}

double sl_engine_next_wakeup(const sl_engine_t *e)
{
    double at = INFINITY;
    for (size_t i = 0; i < e->n_pools; i++) {
        double t = sl__pool_next_wakeup(e->pools[i]);
        if (t < at) at = t;
        t = sl__keys_next_wakeup(e, e->pools[i]);
        if (t < at) at = t;
    }
    return at;
}

typedef struct check_ctx {
    sl_engine_t *e;
    sl__pool_t *p;
    int64_t count;
    bool bad;
} check_ctx_t;

static void check_ticket(sl__ticket_t *t, void *ud)
{
    check_ctx_t *c = ud;
    c->count++;
    uint64_t v;
    if (!sl__u64map_get(&c->e->tickets, t->id, &v) || v != (uint64_t)(uintptr_t)t) {
        if (!c->bad)
            sl__fail(c->e, SL_EINVAL, "pool %s: queued ticket %llu is not in the ticket map",
                     c->p->name, (unsigned long long)t->id);
        c->bad = true;
    }
    if (t->pool != c->p || t->weight < c->e->cfg.weight_floor - 1e-12) {
        if (!c->bad)
            sl__fail(c->e, SL_EINVAL, "pool %s: ticket %llu has a wrong pool or weight %g",
                     c->p->name, (unsigned long long)t->id, t->weight);
        c->bad = true;
    }
}

static int check_pool(sl_engine_t *e, sl__pool_t *p)
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        double cap = sl__capacity(p, (sl_bucket_t)b);
        if (!(p->level[b] <= cap + SL__LEVEL_EPS) || !isfinite(p->level[b]))
            return sl__fail(e, SL_EINVAL, "pool %s: %s level %.6f above capacity %.6f", p->name,
                            sl_bucket_name((sl_bucket_t)b), p->level[b], cap);
    }
    if (p->margin_bp < p->floor_bp || p->margin_bp > p->max_bp)
        return sl__fail(e, SL_EINVAL, "pool %s: margin %d bp outside [%d, %d]", p->name,
                        p->margin_bp, p->floor_bp, p->max_bp);
    char msg[256];
    if (sl__queue_check(p, msg, sizeof msg) != 0)
        return sl__fail(e, SL_EINVAL, "pool %s: %s", p->name, msg);
    check_ctx_t c = {.e = e, .p = p};
    sl__queue_foreach(p, check_ticket, &c);
    if (c.bad) return SL_EINVAL;
    const sl__ticket_t *head = sl__queue_head(p);
    if (head && sl__fits(p, &head->need, e->now))
        return sl__fail(e, SL_EINVAL, "pool %s: the queue head %llu fits but was not granted",
                        p->name, (unsigned long long)head->id);
    if ((int64_t)p->lease_heap.len != p->in_flight)
        return sl__fail(e, SL_EINVAL, "pool %s: %lld leases in flight but %zu in the heap", p->name,
                        (long long)p->in_flight, p->lease_heap.len);
    for (size_t i = 0; i < p->capstates.cap; i++)
        if (p->capstates.slots[i].hash)
            ((sl__capstate_t *)p->capstates.slots[i].val)->check_count = 0;
    double reserved[SL_BUCKET_COUNT] = {0};
    for (size_t i = 0; i < p->lease_heap.len; i++) {
        const sl__lease_t *l = sl__container_of(p->lease_heap.items[i], sl__lease_t, expiry);
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            reserved[b] += (double)l->need.n[b];
        for (int k = 0; k < 2; k++)
            if (l->caps.st[k]) l->caps.st[k]->check_count++;
        uint64_t v;
        if (!sl__u64map_get(&e->leases, l->id, &v) || v != (uint64_t)(uintptr_t)l)
            return sl__fail(e, SL_EINVAL, "pool %s: lease %llu is not in the lease map", p->name,
                            (unsigned long long)l->id);
    }
    int64_t parked = 0;
    for (size_t i = 0; i < p->capstates.cap; i++) {
        if (!p->capstates.slots[i].hash) continue;
        const sl__capstate_t *st = p->capstates.slots[i].val;
        int64_t n = 0;
        for (const sl__ticket_t *t = st->park_head; t; t = t->park_next, n++) {
            uint64_t v;
            if (t->parked_on != st || t->woken_by || (t->park_next && t->park_next->park_prev != t) ||
                !sl__u64map_get(&e->tickets, t->id, &v) || v != (uint64_t)(uintptr_t)t)
                return sl__fail(e, SL_EINVAL, "pool %s: ticket %llu parked on %s is inconsistent",
                                p->name, (unsigned long long)t->id, st->key);
        }
        if (n != st->n_parked || st->n_woken < 0)
            return sl__fail(e, SL_EINVAL, "pool %s: %s counts %lld parked (%lld woken), %lld listed",
                            p->name, st->key, (long long)st->n_parked, (long long)st->n_woken,
                            (long long)n);
        parked += n;
        if (st->check_count != st->in_flight)
            return sl__fail(e, SL_EINVAL, "pool %s: caps of %s count %lld leases, %lld live",
                            p->name, st->key, (long long)st->in_flight, (long long)st->check_count);
    }
    int64_t ws = 0;
    for (const sl__ticket_t *t = p->ws_head; t; t = t->park_next, ws++) {
        uint64_t v;
        if (!t->ws_parked || t->parked_on || (t->park_next && t->park_next->park_prev != t) ||
            !sl__u64map_get(&e->tickets, t->id, &v) || v != (uint64_t)(uintptr_t)t)
            return sl__fail(e, SL_EINVAL, "pool %s: first call %llu parked by the working set is "
                            "inconsistent", p->name, (unsigned long long)t->id);
    }
    if (ws != p->ws_n || (int64_t)p->ws_heap.len != ws)
        return sl__fail(e, SL_EINVAL, "pool %s: %lld first calls parked, %lld listed, %lld by key",
                        p->name, (long long)p->ws_n, (long long)ws, (long long)p->ws_heap.len);
    if (parked != p->n_parked)
        return sl__fail(e, SL_EINVAL, "pool %s: %lld tickets parked, %lld on the holders' lists",
                        p->name, (long long)p->n_parked, (long long)parked);
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (fabs(reserved[b] - p->reserved[b]) > 1e-9 * (1 + fabs(reserved[b])))
            return sl__fail(e, SL_EINVAL, "pool %s: reserved %s %.0f but leases hold %.0f", p->name,
                            sl_bucket_name((sl_bucket_t)b), p->reserved[b], reserved[b]);
    return SL_OK;
}

int sl_engine_check(sl_engine_t *e)
{
    int64_t live_leases = 0, live_tickets = 0, queued = 0;
    for (size_t i = 0; i < e->n_pools; i++) {
        int rc = check_pool(e, e->pools[i]);
        if (rc) return rc;
        live_leases += e->pools[i]->in_flight;
        queued += sl__queue_depth(e->pools[i]) + e->pools[i]->n_parked + e->pools[i]->ws_n;
    }
    for (size_t i = 0; i < e->tickets.cap; i++)
        if (e->tickets.keys[i] && !(e->tickets.vals[i] & 1)) live_tickets++;
    if (live_tickets != queued)
        return sl__fail(e, SL_EINVAL, "%lld live tickets but %lld queued", (long long)live_tickets,
                        (long long)queued);
    int64_t mapped = (int64_t)e->leases.len;
    if (mapped != live_leases)
        return sl__fail(e, SL_EINVAL, "%lld live leases in the map but %lld in flight",
                        (long long)mapped, (long long)live_leases);
    int64_t agent_leases = 0, agent_queued = 0;
    for (size_t i = 0; i < e->agents.cap; i++) {
        if (!e->agents.slots[i].hash) continue;
        const sl__agent_t *a = e->agents.slots[i].val;
        if (a->leases < 0 || a->queued < 0)
            return sl__fail(e, SL_EINVAL, "agent %s: negative counts", a->name);
        agent_leases += a->leases;
        agent_queued += a->queued;
    }
    if (agent_leases != live_leases || agent_queued != queued)
        return sl__fail(e, SL_EINVAL,
                        "agent counts (%lld leases, %lld queued) disagree with "
                        "pools (%lld, %lld)",
                        (long long)agent_leases, (long long)agent_queued, (long long)live_leases,
                        (long long)queued);
    return SL_OK;
}
