/* agent_registry.c - the agent names sluiced knows: bounded per token and in all, forgotten when idle.
 *
 * An agent exists from its first request; one prefix token leasing under 200,000 fresh
 * names grew sluiced by 1.8 KB a name without end, and /v1/agents with it (issue 25).
 * Every name a lease request or a proxied call brings is noted here with the principal
 * (sl__call_principal) that made it known and the time it was last active (a request,
 * or any event naming it). Two bounds hold at once:
 *
 * - agents.max_per_token: names one agent token has made known and not yet forgotten;
 * - agents.max_total: names known, every token together (the admin token and auth off
 *   answer to this one only; so do names learnt from events: a restored lease, another
 *   replica's agents on Redis).
 *
 * A request for a new name past either is refused 429 `too_many_agents` naming the bound,
 * before anything is asked of the backend (a refusal changes nothing). Once a second the
 * names idle for agents.forget_idle_s (neither flagged nor suspended) are offered to the
 * backend's agent_forget, which keeps an agent that still holds anything (forget.c); a
 * forgotten one leaves this registry and the anomaly watch, and counts against no bound.
 * At most FORGET_BATCH are offered per second, so a sweep after a flood of names spreads
 * over seconds instead of stalling the loop.
 */
#include "fleet.h"
#include "server.h"
#include "../../common/grow.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define FORGET_BATCH 4096 /* names offered to the backend per sweep */

typedef struct known {
    uint64_t principal; /* the token that made it known; 0: admin, auth off or an event */
    double last_s;      /* its last request or event */
    double retry_at_s;  /* kept by the backend at the last try: not offered again before */
    bool forgetting;    /* an agent_forget is in flight */
} known_t;

typedef struct tally {
    uint64_t principal;
    int64_t n;
} tally_t;

struct sl_agents {
    sl_namemap_t names; /* name -> known_t */
    tally_t *tallies;   /* names per principal (principal 0 is not counted here) */
    size_t n_tallies, cap_tallies;
    uint64_t forgotten_total, refused_total;
};

/* This file's part of the fleet's state (fleet.h, sl_fleet_house_t). */
SL_FLEET_PART(sl_agents_t, agents)

static double now_s(const sl_server_t *srv)
{
    return sl_backend_now(srv->backend);
}

/* The tally of `principal`, made when `make` (NULL when out of memory or absent). */
static tally_t *tally_of(sl_agents_t *r, uint64_t principal, bool make)
{
    for (size_t i = 0; i < r->n_tallies; i++)
        if (r->tallies[i].principal == principal) return &r->tallies[i];
    if (!make) return NULL;
    tally_t *grown = sl_grow(r->tallies, r->n_tallies, &r->cap_tallies, sizeof *grown, 8);
    if (!grown) return NULL;
    r->tallies = grown;
    r->tallies[r->n_tallies] = (tally_t){principal, 0};
    return &r->tallies[r->n_tallies++];
}

/* Notes `agent` as active now, made known by `principal` when new. */
static known_t *note(sl_server_t *srv, sl_agents_t *r, const char *agent, uint64_t principal)
{
    known_t *k = sl__namemap_get(&r->names, agent);
    if (!k) {
        tally_t *t = principal ? tally_of(r, principal, true) : NULL;
        if (principal && !t) return NULL;
        k = sl__namemap_obtain(&r->names, agent, sizeof(*k), SIZE_MAX, NULL);
        if (!k) return NULL;
        k->principal = principal;
        if (t) t->n++;
    }
    k->last_s = now_s(srv);
    return k;
}

bool sl__agents_refused(sl_server_t *srv, const char *agent, uint64_t principal, char *why,
                        size_t whylen, double *retry_after_s)
{
    sl_agents_t *r = agents_of(srv);
    if (!r || !agent || !*agent) return false; /* out of memory: not a reason to refuse */
    if (sl__namemap_get(&r->names, agent)) {
        note(srv, r, agent, principal);
        return false;
    }
    const sl_agents_config_t *cfg = &srv->config.agents;
    const tally_t *t = principal ? tally_of(r, principal, false) : NULL;
    if (t && t->n >= cfg->max_per_token) {
        snprintf(why, whylen,
                 "agents.max_per_token is %lld and this token has %lld agents known: a new "
                 "agent name is refused until some are forgotten (idle agents.forget_idle_s, "
                 "%g s)",
                 (long long)cfg->max_per_token, (long long)t->n, cfg->forget_idle_s);
    } else if ((int64_t)r->names.count >= cfg->max_total) {
        snprintf(why, whylen,
                 "agents.max_total is %lld and %lld agents are known: a new agent name is "
                 "refused until some are forgotten (idle agents.forget_idle_s, %g s)",
                 (long long)cfg->max_total, (long long)r->names.count, cfg->forget_idle_s);
    } else {
        note(srv, r, agent, principal);
        return false;
    }
    r->refused_total++;
    *retry_after_s = cfg->forget_idle_s;
    return true;
}

void sl__agents_on_event(sl_server_t *srv, const sl_event_t *ev)
{
    sl_agents_t *r = ev->agent && *ev->agent ? agents_of(srv) : NULL;
    if (r) note(srv, r, ev->agent, 0);
}

/* ---- forgetting --------------------------------------------------------------------- */

typedef struct forget_call {
    sl_server_t *srv;
    char *agent;
    double asked_s;
} forget_call_t;

static void drop(sl_server_t *srv, sl_agents_t *r, const char *agent)
{
    known_t *k = sl__namemap_del(&r->names, agent);
    if (!k) return;
    tally_t *t = k->principal ? tally_of(r, k->principal, false) : NULL;
    if (t) t->n--;
    free(k);
    r->forgotten_total++;
    sl__anomaly_drop(srv, agent);
}

static void on_forgot(int rc, double value, const char *errmsg, void *ud)
{
    forget_call_t *f = ud;
    sl_agents_t *r = agents_state(f->srv);
    known_t *k = r ? sl__namemap_get(&r->names, f->agent) : NULL;
    (void)errmsg;
    if (k) {
        k->forgetting = false;
        if (rc != SL_OK || value == 0) /* kept, or not asked: try again later */
            k->retry_at_s = now_s(f->srv) + f->srv->config.agents.forget_idle_s;
        else if (k->last_s <= f->asked_s) /* forgotten (or never known), and idle since */
            drop(f->srv, r, f->agent);
    }
    free(f->agent);
    free(f);
}

typedef struct sweep_ctx {
    const sl_server_t *srv;
    double now, idle_s;
    const char **due;
    size_t n;
} sweep_ctx_t;

static void note_due(const char *key, void *val, void *ud)
{
    sweep_ctx_t *c = ud;
    known_t *k = val;
    if (c->n == FORGET_BATCH || k->forgetting || c->now - k->last_s < c->idle_s ||
        c->now < k->retry_at_s)
        return;
    /* A flagged or suspended agent is watched: its record is not idle's to lose. */
    if (sl__anomaly_flagged(c->srv, key) || sl__suspend_active(c->srv, key)) return;
    c->due[c->n++] = key;
}

void sl__agents_sweep(sl_server_t *srv)
{
    sl_agents_t *r = agents_state(srv);
    if (!r || !r->names.count) return;
    const char *due[FORGET_BATCH];
    sweep_ctx_t c = {srv, now_s(srv), srv->config.agents.forget_idle_s, due, 0};
    sl__namemap_foreach(&r->names, note_due, &c);
    for (size_t i = 0; i < c.n; i++) {
        forget_call_t *f = calloc(1, sizeof(*f));
        char *name = f ? strdup(due[i]) : NULL;
        if (!name) {
            free(f);
            return;
        }
        *f = (forget_call_t){srv, name, c.now};
        known_t *k = sl__namemap_get(&r->names, name);
        k->forgetting = true;
        sl_backend_agent_forget(srv->backend, name, on_forgot, f); /* may answer at once */
    }
}

void sl__agents_metrics_render(const sl_server_t *srv, struct evbuffer *out)
{
    const sl_agents_t *r = agents_state(srv);
    evbuffer_add_printf(
        out,
        "# HELP sluice_agents_known Agent names sluiced knows now (bounded by agents.max_total).\n"
        "# TYPE sluice_agents_known gauge\nsluice_agents_known %zu\n"
        "# HELP sluice_agents_forgotten_total Agents forgotten after agents.forget_idle_s idle.\n"
        "# TYPE sluice_agents_forgotten_total counter\nsluice_agents_forgotten_total %llu\n"
        "# HELP sluice_agents_refused_total New agent names refused 429 too_many_agents.\n"
        "# TYPE sluice_agents_refused_total counter\nsluice_agents_refused_total %llu\n",
        r ? r->names.count : 0, (unsigned long long)(r ? r->forgotten_total : 0),
        (unsigned long long)(r ? r->refused_total : 0));
}

void sl__agents_free(sl_server_t *srv)
{
    if (!agents_state(srv)) return;
    sl__namemap_free_all(&agents_state(srv)->names);
    free(agents_state(srv)->tallies);
    free(agents_state(srv));
    sl__fleet_house_make(srv)->agents = NULL; /* the house exists: it held this part */
}
