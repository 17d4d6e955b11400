/* agent.c - per-agent records: repeats of the same failure, estimate error, totals.
 *
 * Agents are created on their first request and hold nothing while idle: nothing is
 * ever pre-allocated to an agent, so an idle agent's share is lent to everyone. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

char *sl__dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

sl__agent_t *sl__agent_get(sl_engine_t *e, const char *name, bool create)
{
    sl__agent_t *a = sl__strmap_get(&e->agents, name);
    if (a || !create) return a;
    a = sl__strmap_make(&e->agents, name, sizeof *a, offsetof(sl__agent_t, name));
    if (!a) return NULL;
    memcpy(a->role, "worker", sizeof "worker");
    a->weight = 1.0;
    a->weight_base = 1.0;
    return a;
}

sl__pagent_t *sl__pagent_get(sl__pool_t *p, sl__agent_t *a, bool create)
{
    sl__pagent_t *pa = sl__strmap_get(&p->pagents, a->name);
    if (pa || !create) return pa;
    if (sl__strmap_reserve(&p->pagents, 1) != 0) return NULL;
    pa = calloc(1, sizeof *pa);
    if (!pa) return NULL;
    pa->agent = a;
    pa->last_finish = 0;
    sl__strmap_put(&p->pagents, a->name, pa);
    return pa;
}

/* One namespace: "whose prompt cache this call reads" (docs/api.md) names the same record
 * whether the name is an agent's default or another agent's cache_key, so a write through
 * either is read through both. The record lives in the pool's map, not in an agent's
 * record: it needs no agent to exist, the sweep bounds the map, and forgetting an agent
 * forgets the cold cache of its name (forget.c). */
sl__cache_t *sl__cache_get(sl__pool_t *p, const char *identity, bool create)
{
    sl__cache_t *c = sl__strmap_get(&p->caches, identity);
    if (c || !create) return c;
    c = sl__strmap_make(&p->caches, identity, sizeof *c, offsetof(sl__cache_t, key));
    if (c) c->used_at = -INFINITY;
    return c;
}

static void cache_drop(sl__pool_t *p, sl__cache_t *c)
{
    sl__strmap_del(&p->caches, c->key);
    free(c->key);
    free(c);
}

void sl__cache_forget(sl__pool_t *p, const char *identity)
{
    sl__cache_t *c = sl__cache_get(p, identity, false);
    if (!c) return;
    if (c->refs == 0) {
        cache_drop(p, c);
        return;
    }
    c->used_at = -INFINITY;
    c->tokens = 0;
}

#define CACHES_SWEEP_MIN 1024

void sl__cache_sweep(sl__pool_t *p, double now)
{
    if (p->caches.len < p->caches_sweep_at || p->caches.len < CACHES_SWEEP_MIN) return;
    size_t n = 0;
    sl__cache_t **cold = malloc(p->caches.len * sizeof *cold);
    if (cold) {
        for (size_t i = 0; i < p->caches.cap; i++) {
            sl__cache_t *c = p->caches.slots[i].hash ? p->caches.slots[i].val : NULL;
            if (c && c->refs == 0 && !(now - c->used_at < p->cfg.cache_ttl_s))
                cold[n++] = c;
        }
        for (size_t i = 0; i < n; i++)
            cache_drop(p, cold[i]);
        free(cold);
    }
    /* Out of memory sweeps nothing now; the doubling still bounds how often we try. */
    p->caches_sweep_at = 2 * p->caches.len;
}

double sl__agent_mean_error(const sl__agent_t *a)
{
    if (a->err_n == 0) return 0;
    double sum = 0;
    for (int i = 0; i < a->err_n; i++)
        sum += a->err[i];
    return sum / a->err_n;
}

double sl__agent_record_error(sl_engine_t *e, sl__pool_t *p, sl__agent_t *a, int window,
                              double limit, double err)
{
    if (window < 1) window = 1;
    if (window > SL__ERR_WINDOW_MAX) window = SL__ERR_WINDOW_MAX;
    if (a->err_n > window) { /* the window shrank on reload */
        a->err_n = window;
        a->err_pos = 0;
        a->err_sum = 0;
        for (int i = 0; i < a->err_n; i++) a->err_sum += a->err[i];
    }
    if (a->err_n == window) a->err_sum -= a->err[a->err_pos]; /* the one it replaces */
    a->err[a->err_pos] = err;
    a->err_sum += err;
    a->err_pos = (a->err_pos + 1) % window;
    if (a->err_n < window) a->err_n++;
    if (a->err_pos == 0) { /* once per window, drop the rounding the running sum gathered */
        a->err_sum = 0;
        for (int i = 0; i < a->err_n; i++) a->err_sum += a->err[i];
    }
    double mean = a->err_sum / a->err_n;
    /* The alert needs a full window: one bad estimate is noise, twenty are a trend. */
    bool active = a->err_n >= window && mean > limit;
    if (active != a->alert_estimate_error) {
        a->alert_estimate_error = active;
        sl_event_t ev;
        sl__event_init(&ev, SL_EV_ALERT, e->now, p);
        ev.agent = a->name;
        ev.alert = "estimate_error";
        ev.active = active;
        ev.estimate_error = mean;
        sl__emit(e, &ev);
    }
    return mean;
}

int sl__agent_record_signature(sl__agent_t *a, const char *sig)
{
    if (sig && sig[0] && a->last_sig && strcmp(sig, a->last_sig) == 0) {
        a->repeats++;
        return 0;
    }
    char *copy = NULL;
    if (sig && sig[0]) {
        copy = sl__dup_str(sig);
        if (!copy) return -1;
    }
    free(a->last_sig);
    a->last_sig = copy;
    a->repeats = 0;
    return 0;
}

void sl__agent_free(sl__agent_t *a)
{
    if (!a) return;
    free(a->last_sig);
    free(a->team);
    free(a->name);
    free(a);
}

/* The weight the agent's next request of the same kind would get: its last request's
 * base with the repeats as they are now (a settle may have changed them since). */
static void fill_info(const sl__agent_t *a, double weight_floor, sl_agent_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->name = a->name;
    out->role = a->role;
    out->team = a->team;
    double w = a->weight_base * pow(0.5, (double)a->repeats);
    out->weight = w > weight_floor ? w : weight_floor;
    out->repeats = a->repeats;
    out->estimate_error = sl__agent_mean_error(a);
    out->alert_estimate_error = a->alert_estimate_error;
    out->leases = a->leases;
    out->queued = a->queued;
    out->tokens_in = a->tokens_in;
    out->tokens_out = a->tokens_out;
    out->got_429 = a->got_429;
    out->state = a->leases > 0 ? "running" : a->queued > 0 ? "queued" : "idle";
}

int sl_engine_agent_info(const sl_engine_t *e, const char *agent, sl_agent_info_t *out)
{
    const sl__agent_t *a = agent ? sl__strmap_get(&e->agents, agent) : NULL;
    if (!a)
        return sl__fail(e, SL_ENOTFOUND, "agent \"%.140s\" not found", agent ? agent : "(null)");
    fill_info(a, e->cfg.weight_floor, out);
    return SL_OK;
}

void sl_engine_agent_foreach(const sl_engine_t *e, void (*fn)(const sl_agent_info_t *a, void *ud),
                             void *ud)
{
    for (size_t i = 0; i < e->agents.cap; i++) {
        if (!e->agents.slots[i].hash) continue;
        sl_agent_info_t info;
        fill_info(e->agents.slots[i].val, e->cfg.weight_floor, &info);
        fn(&info, ud);
    }
}
