/* anomaly.c - per-agent request and violation rates, the `anomaly` alert, suspension and release.
 *
 * Seed 001 asks for rate-limit violations to be early warnings. Every agent has two
 * sliding-window counts (fleet.anomaly_window_s, slidewin.c): requests (lease requests
 * answered granted, queued or rejected, and action-limit checks) and violations (lease
 * rejections, queued tickets rejected, action-limit denials). Once a second each agent is
 * compared with its *baseline*: the other agents of its own role that were active in the
 * window (a request in it), where the agents of each principal (agent token) other than
 * its own count as one sample, that principal's median:
 *
 *     z = (x - median of the baseline) / max(1.4826 x MAD of the baseline, sqrt(median), 1)
 *
 * Why per principal: one prefix token can create agents without end, and they would be
 * the baseline of everyone else (six puppets with one request each made an honest agent
 * with 25 calls z = 24 and got it suspended: issue 25). Its agents count as many as one
 * agent in another principal's baseline; within a principal they all count (a token that
 * may act as an agent could already flag it by making its calls). Why median and MAD: a
 * mean and deviation are moved without bound by a few chosen values; a median is moved
 * one rank per sample, and the agent left out moves the median only. The MAD is taken
 * with the agent in (one sample moves it one rank at most). The floor sqrt(median) is the
 * spread of Poisson counts, so a fleet of identical agents (MAD 0) does not flag an agent
 * that made one more request. An agent is flagged when z > fleet.anomaly_z, its own count
 * is at least fleet.anomaly_min_count and it and its baseline are at least
 * fleet.anomaly_min_agents samples; the metric with the larger z is the one named. The
 * cost: one sort per principal with a candidate (an agent at anomaly_min_count), of its
 * agents and one median per other principal.
 *
 * Why per role: a planner legitimately bursts (it fans a task out into many calls at
 * once) and the weights already say planners are different (base weight 3 to a worker's
 * 1). Compared with the workers, every planning phase would look like a runaway;
 * compared with the other planners it does not, and a planner that loops still stands
 * out among planners. A role with fewer than anomaly_min_agents active agents is never
 * judged: there is no baseline to be far from.
 *
 * With fleet.suspend_anomalous a flagged agent is suspended (suspend.c: the record is
 * the backend's, so it survives a restart and holds on every replica): its lease
 * requests and action-limit checks are refused 429 `suspended` before they reach the
 * backend (a refusal changes nothing else) until an admin releases it, which also
 * empties its windows on every replica so the burst that flagged it does not flag it
 * again at once. Detection itself is per replica: each judges the traffic it serves.
 */
#include "fleet.h"
#include "server.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define MAX_TRACKED_AGENTS 100000

typedef struct agent_watch {
    const char *name; /* the map's key */
    char role[65];
    uint64_t principal; /* who asked last for it: sl__call_principal() (0: admin, auth off) */
    sl_window_t requests, violations;
    uint64_t requests_total, violations_total;
    bool flagged;
    const char *metric; /* "requests" or "violations" while flagged */
    double z;
    uint64_t count; /* the flagged metric's count in the window */
} agent_watch_t;

typedef struct sample sample_t;

struct sl_anomaly {
    sl_namemap_t agents; /* name -> agent_watch_t */
    sample_t *scratch;   /* the evaluation's two arrays of samples, kept between ticks */
    size_t scratch_cap;  /* samples per array */
    size_t n_flagged;
    double swept_at_s; /* the last forget_idle() */
};

/* This file's part of the fleet's state (fleet.h, sl_fleet_house_t). */
SL_FLEET_PART(sl_anomaly_t, anomaly)

static double now_s(const sl_server_t *srv);

typedef struct idle_ctx {
    const char **names;
    size_t n;
    double win, now;
} idle_ctx_t;

static void note_idle(const char *key, void *val, void *ud)
{
    idle_ctx_t *c = ud;
    agent_watch_t *w = val;
    if (!w->flagged && !sl__window_sum(&w->requests, c->win, c->now) &&
        !sl__window_sum(&w->violations, c->win, c->now))
        c->names[c->n++] = key;
}

/* At MAX_TRACKED_AGENTS, forgets the agents with nothing in the window and not flagged,
 * at most once a second: names seen once must not keep every later agent from being
 * judged. Their totals leave the per-agent series with them; a suspension is not
 * theirs to lose (suspend.c keeps it). */
static void forget_idle(sl_server_t *srv, sl_anomaly_t *a)
{
    double now = now_s(srv);
    if (a->swept_at_s > 0 && now - a->swept_at_s < 1) return;
    a->swept_at_s = now;
    idle_ctx_t c = {calloc(a->agents.count, sizeof(char *)), 0,
                    srv->config.fleet.anomaly_window_s, now};
    if (!c.names) return;
    sl__namemap_foreach(&a->agents, note_idle, &c);
    for (size_t i = 0; i < c.n; i++)
        free(sl__namemap_del(&a->agents, c.names[i])); /* frees the key: c.names[i] */
    free(c.names);
}

/* The agent's record, made when new (NULL when out of memory or too many agents). */
static agent_watch_t *watch_of(sl_server_t *srv, const char *agent)
{
    sl_anomaly_t *a = anomaly_of(srv);
    if (!a || !agent || !*agent) return NULL;
    agent_watch_t *w = sl__namemap_get(&a->agents, agent);
    if (!w && a->agents.count >= MAX_TRACKED_AGENTS) forget_idle(srv, a);
    const char *made = NULL;
    if (!w) w = sl__namemap_obtain(&a->agents, agent, sizeof(*w), MAX_TRACKED_AGENTS, &made);
    if (made) { /* new */
        w->name = made;
        snprintf(w->role, sizeof(w->role), "worker");
    }
    return w;
}

static double now_s(const sl_server_t *srv)
{
    return sl_backend_now(srv->backend);
}

/* A role the engine knows (built in, or configured): an unknown one is refused 400 by
 * the engine, and must not give its agent a baseline of its own. */
static bool role_known(const sl_server_t *srv, const char *role)
{
    if (!strcmp(role, "planner") || !strcmp(role, "reviewer") || !strcmp(role, "worker"))
        return true;
    for (size_t i = 0; i < srv->config.settings.n_roles; i++)
        if (!strcmp(srv->config.settings.roles[i].name, role)) return true;
    return false;
}

bool sl__anomaly_suspended(sl_server_t *srv, const char *agent, const char *role,
                           uint64_t principal)
{
    if (sl__suspend_refuses(srv, agent)) return true;
    agent_watch_t *w =
        anomaly_state(srv) ? sl__namemap_get(&anomaly_state(srv)->agents, agent) : NULL;
    if (!w) w = watch_of(srv, agent);
    if (!w) return false;
    w->principal = principal;
    if (role && role_known(srv, role)) snprintf(w->role, sizeof(w->role), "%s", role);
    return false;
}

bool sl__anomaly_refuse(sl_call_t *call, const char *agent, const char *role)
{
    sl_server_t *srv = call->srv;
    if (!sl__anomaly_suspended(srv, agent, role, sl__call_principal(call))) return false;
    double wait_s = srv->config.fleet.anomaly_window_s;
    sl__reply_rejected(call, "suspended", wait_s, now_s(srv) + wait_s);
    return true;
}

static void count(sl_server_t *srv, const char *agent, double t, bool request, bool violation)
{
    agent_watch_t *w = watch_of(srv, agent);
    if (!w) return;
    double win = srv->config.fleet.anomaly_window_s;
    if (request) {
        sl__window_add(&w->requests, win, t, 1);
        w->requests_total++;
    }
    if (violation) {
        sl__window_add(&w->violations, win, t, 1);
        w->violations_total++;
    }
}

void sl__anomaly_on_event(sl_server_t *srv, const sl_event_t *ev)
{
    if (!ev->agent) return;
    switch (ev->kind) {
    case SL_EV_GRANTED:
        if (!ev->ticket) count(srv, ev->agent, ev->now_s, true, false); /* granted at once */
        break;
    case SL_EV_QUEUED:
        count(srv, ev->agent, ev->now_s, true, false);
        break;
    case SL_EV_REJECTED:
        count(srv, ev->agent, ev->now_s, true, true);
        break;
    case SL_EV_TICKET_REJECTED:
        count(srv, ev->agent, ev->now_s, false, true);
        break;
    default:
        break;
    }
}

void sl__anomaly_on_limit_check(sl_server_t *srv, const char *agent, bool allowed)
{
    count(srv, agent, now_s(srv), true, !allowed);
}

/* ---- evaluation ------------------------------------------------------------------- */

#define MAX_ROLES 256 /* distinct roles judged apart; the rest with the last one */

struct sample {
    agent_watch_t *w;
    double x[2];   /* requests, violations in the window */
    unsigned role; /* index into collect_t.roles */
};

typedef struct collect {
    sample_t *s;
    size_t n;
    double win, now;
    const char *roles[MAX_ROLES]; /* the distinct roles seen, borrowed from the agents */
    size_t per_role[MAX_ROLES];
    unsigned n_roles;
} collect_t;

static unsigned role_slot(collect_t *c, const char *role)
{
    for (unsigned i = 0; i < c->n_roles; i++)
        if (!strcmp(c->roles[i], role)) return i;
    if (c->n_roles == MAX_ROLES) return MAX_ROLES - 1;
    c->roles[c->n_roles] = role;
    return c->n_roles++;
}

/* Agents with nothing in the window are left out (nothing to judge) unless flagged (to be
 * cleared): at 100,000 agents the evaluation is a pass over the map and one counting
 * sort by role, no comparison sort. */
static void collect_one(const char *key, void *val, void *ud)
{
    collect_t *c = ud;
    agent_watch_t *w = val;
    (void)key;
    double req = (double)sl__window_sum(&w->requests, c->win, c->now);
    double viol = (double)sl__window_sum(&w->violations, c->win, c->now);
    if (req <= 0 && viol <= 0 && !w->flagged) return;
    sample_t *s = &c->s[c->n++];
    *s = (sample_t){w, {req, viol}, role_slot(c, w->role)};
    c->per_role[s->role]++;
}

static void publish(sl_server_t *srv, agent_watch_t *w, bool active, double t)
{
    json_t *j = json_pack("{s:f,s:s,s:s,s:b,s:s,s:s}", "ts", t, "event", "alert", "alert",
                          "anomaly", "active", active, "agent", w->name, "role", w->role);
    if (j && active) {
        json_object_set_new(j, "metric", json_string(w->metric));
        json_object_set_new(j, "z", json_real(w->z));
        json_object_set_new(j, "count", json_integer((json_int_t)w->count));
        json_object_set_new(j, "suspended", json_boolean(sl__suspend_active(srv, w->name)));
    }
    sl__events_publish_about(srv, "alert", w->name, j);
    sl_event_t ev = {
        .kind = SL_EV_ALERT, .now_s = t, .agent = w->name, .alert = "anomaly", .active = active};
    sl__metrics_on_event(srv->metrics, &ev);
}

static void set_flag(sl_server_t *srv, agent_watch_t *w, int metric, double z, double x, double t)
{
    sl_anomaly_t *a = anomaly_state(srv);
    bool was = w->flagged;
    if (metric < 0) {
        if (!was) return;
        w->flagged = false;
        a->n_flagged--;
        publish(srv, w, false, t);
        return;
    }
    w->metric = metric == 0 ? "requests" : "violations";
    w->z = z;
    w->count = (uint64_t)x;
    if (was) return;
    w->flagged = true;
    a->n_flagged++;
    if (srv->config.fleet.suspend_anomalous)
        sl__suspend_by_anomaly(srv, w->name, w->role, w->metric, w->z, w->count, t);
    publish(srv, w, true, t);
}

static int by_principal(const void *a, const void *b)
{
    uint64_t x = ((const sample_t *)a)->w->principal, y = ((const sample_t *)b)->w->principal;
    return x < y ? -1 : x > y;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of sorted v[0..n), n > 0. */
static double median_sorted(const double *v, size_t n)
{
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median of sorted v[0..n) without one element equal to `x` (n > 1): the k-th of the
 * rest is v[k] below x's rank and v[k + 1] from it on. */
static double median_without(const double *v, size_t n, double x)
{
    size_t r = 0;
    while (r < n && v[r] < x)
        r++;
    size_t m = n - 1;
#define REST(k) ((k) < r ? v[k] : v[(k) + 1])
    return m % 2 ? REST(m / 2) : (REST(m / 2 - 1) + REST(m / 2)) / 2;
#undef REST
}

/* A principal's agents s[from, to) of one role, its samples' medians med[m]. */
typedef struct group {
    size_t from, to;
    double med[2];
    bool candidate; /* one of its agents reaches anomaly_min_count */
} group_t;

/* Judges group g's agents on metric m against their baseline: the group's other agents
 * plus one sample per other group (its median). Writes each agent's z into z[i - g->from]
 * (-INFINITY when the baseline is smaller than anomaly_min_agents - 1). `v` and `dev` have
 * room for (g->to - g->from) + n_groups values. */
static void judge_group(const sl_fleet_config_t *f, const sample_t *s, const group_t *groups,
                        size_t n_groups, const group_t *g, int m, double *v, double *dev,
                        double *z)
{
    size_t n = 0;
    for (size_t i = g->from; i < g->to; i++)
        v[n++] = s[i].x[m];
    for (size_t h = 0; h < n_groups; h++)
        if (&groups[h] != g) v[n++] = groups[h].med[m];
    bool judged = n >= (size_t)f->anomaly_min_agents;
    qsort(v, n, sizeof(double), by_double);
    /* The spread: the baseline's median absolute deviation, the agent in (one agent moves
     * it by one rank at most), as a standard deviation (x 1.4826 for normal data). */
    double mid = median_sorted(v, n);
    for (size_t i = 0; i < n; i++)
        dev[i] = fabs(v[i] - mid);
    qsort(dev, n, sizeof(double), by_double);
    double mad = 1.4826 * median_sorted(dev, n);
    for (size_t i = g->from; i < g->to; i++) {
        if (!judged) {
            z[i - g->from] = -INFINITY;
            continue;
        }
        double x = s[i].x[m], loc = median_without(v, n, x);
        z[i - g->from] = (x - loc) / fmax(fmax(mad, sqrt(loc)), 1);
    }
}

/* Judges the agents s[0..n) of one role: each against the others of its role, where the
 * agents of one principal (token) other than its own count as one (docs/observe.md). */
static void judge_role(sl_server_t *srv, sample_t *s, size_t n, double t)
{
    const sl_fleet_config_t *f = &srv->config.fleet;
    size_t active = 0;
    for (size_t i = 0; i < n; i++) { /* the active ones first, the rest only to clear */
        if (s[i].x[0] <= 0) continue;
        sample_t tmp = s[active];
        s[active++] = s[i];
        s[i] = tmp;
    }
    for (size_t i = active; i < n; i++)
        set_flag(srv, s[i].w, -1, 0, 0, t);
    if (!active) return;
    qsort(s, active, sizeof(*s), by_principal);
    size_t n_groups = 0;
    for (size_t i = 0; i < active; i++)
        n_groups += i == 0 || s[i].w->principal != s[i - 1].w->principal;
    group_t *groups = calloc(n_groups, sizeof(*groups));
    double *v = malloc((active + n_groups) * sizeof(double));
    double *dev = malloc((active + n_groups) * sizeof(double));
    double *z[2] = {malloc(active * sizeof(double)), malloc(active * sizeof(double))};
    if (!groups || !v || !dev || !z[0] || !z[1]) goto done; /* out of memory: judge next tick */
    for (size_t i = 0, k = 0; i < active; k++) {
        group_t *g = &groups[k];
        g->from = i;
        while (i < active && s[i].w->principal == s[g->from].w->principal) {
            if (s[i].x[0] >= (double)f->anomaly_min_count ||
                s[i].x[1] >= (double)f->anomaly_min_count)
                g->candidate = true;
            i++;
        }
        g->to = i;
        for (int m = 0; m < 2; m++) {
            size_t c = 0;
            for (size_t j = g->from; j < g->to; j++)
                v[c++] = s[j].x[m];
            qsort(v, c, sizeof(double), by_double);
            g->med[m] = median_sorted(v, c);
        }
    }
    for (size_t k = 0; k < n_groups; k++) {
        const group_t *g = &groups[k];
        for (int m = 0; g->candidate && m < 2; m++)
            judge_group(f, s, groups, n_groups, g, m, v, dev, z[m] + g->from);
        for (size_t i = g->from; i < g->to; i++) {
            int best = -1;
            double best_z = 0;
            for (int m = 0; g->candidate && m < 2; m++) {
                if (s[i].x[m] >= (double)f->anomaly_min_count && z[m][i] > f->anomaly_z &&
                    z[m][i] > best_z) {
                    best = m;
                    best_z = z[m][i];
                }
            }
            set_flag(srv, s[i].w, best, best_z, best >= 0 ? s[i].x[best] : 0, t);
        }
    }
done:
    free(groups);
    free(v);
    free(dev);
    free(z[0]);
    free(z[1]);
}

void sl__anomaly_tick(sl_server_t *srv)
{
    sl_anomaly_t *a = anomaly_state(srv);
    if (!a || !a->agents.count) return;
    if (a->scratch_cap < a->agents.count) {
        size_t cap = a->agents.count * 2;
        sample_t *grown = realloc(a->scratch, 2 * cap * sizeof(sample_t));
        if (!grown) return;
        a->scratch = grown;
        a->scratch_cap = cap;
    }
    collect_t *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->s = a->scratch;
    sample_t *by_role = a->scratch + a->scratch_cap;
    c->win = srv->config.fleet.anomaly_window_s;
    c->now = now_s(srv);
    sl__namemap_foreach(&a->agents, collect_one, c);
    size_t start[MAX_ROLES], at = 0;
    for (unsigned r = 0; r < c->n_roles; r++) {
        start[r] = at;
        at += c->per_role[r];
    }
    size_t next[MAX_ROLES];
    memcpy(next, start, sizeof(size_t) * c->n_roles);
    for (size_t i = 0; i < c->n; i++)
        by_role[next[c->s[i].role]++] = c->s[i];
    for (unsigned r = 0; r < c->n_roles; r++)
        judge_role(srv, by_role + start[r], c->per_role[r], c->now);
    free(c);
}

/* ---- release, views --------------------------------------------------------------- */

void sl__anomaly_forget(sl_server_t *srv, const char *agent)
{
    agent_watch_t *w =
        anomaly_state(srv) ? sl__namemap_get(&anomaly_state(srv)->agents, agent) : NULL;
    if (!w) return;
    sl__window_clear(&w->requests);
    sl__window_clear(&w->violations);
    set_flag(srv, w, -1, 0, 0, now_s(srv));
}

void sl__anomaly_drop(sl_server_t *srv, const char *agent)
{
    agent_watch_t *w =
        anomaly_state(srv) ? sl__namemap_get(&anomaly_state(srv)->agents, agent) : NULL;
    if (w && !w->flagged) free(sl__namemap_del(&anomaly_state(srv)->agents, agent));
}

bool sl__anomaly_flagged(const sl_server_t *srv, const char *agent)
{
    const agent_watch_t *w =
        anomaly_state(srv) ? sl__namemap_get(&anomaly_state(srv)->agents, agent) : NULL;
    return w && w->flagged;
}

const char *sl__anomaly_role(const sl_server_t *srv, const char *agent)
{
    const agent_watch_t *w =
        anomaly_state(srv) ? sl__namemap_get(&anomaly_state(srv)->agents, agent) : NULL;
    return w ? w->role : "";
}

static json_t *flag_json(const agent_watch_t *w)
{
    if (!w || !w->flagged) return json_null();
    return json_pack("{s:s,s:f,s:I}", "metric", w->metric, "z", w->z, "count",
                     (json_int_t)w->count);
}

void sl__anomaly_annotate(sl_server_t *srv, const char *agent, json_t *obj)
{
    agent_watch_t *w =
        anomaly_state(srv) ? sl__namemap_get(&anomaly_state(srv)->agents, agent) : NULL;
    json_object_set_new(obj, "anomaly", flag_json(w));
    sl__suspend_annotate(srv, agent, obj);
}

typedef struct list_ctx {
    sl_call_t *call;
    json_t *arr;
} list_ctx_t;

static void list_one(const char *key, void *val, void *ud)
{
    list_ctx_t *c = ud;
    agent_watch_t *w = val;
    if (!w->flagged) return;
    if (!c->call->admin && !sl__token_may_act_as(c->call, key)) return;
    sl_server_t *srv = c->call->srv;
    json_array_append_new(c->arr, json_pack("{s:s,s:s,s:o,s:b,s:o}", "agent", key, "role",
                                            w->role, "anomaly", flag_json(w), "suspended",
                                            sl__suspend_active(srv, key), "suspension",
                                            sl__suspend_record_json(srv, key)));
}

json_t *sl__anomaly_json(sl_call_t *call)
{
    list_ctx_t c = {call, json_array()};
    if (anomaly_state(call->srv))
        sl__namemap_foreach(&anomaly_state(call->srv)->agents, list_one, &c);
    sl__suspend_list_unflagged(call, c.arr); /* suspended by any replica, flagged by none here */
    return c.arr;
}

bool sl__anomaly_active(const sl_server_t *srv)
{
    return anomaly_state(srv) && anomaly_state(srv)->n_flagged > 0;
}

/* ---- metrics ---------------------------------------------------------------------- */

typedef struct series_ctx {
    sl_agent_value_t *v;
    size_t n;
    int which; /* 0 requests, 1 violations, 2 z of the flagged */
} series_ctx_t;

static void series_one(const char *key, void *val, void *ud)
{
    series_ctx_t *c = ud;
    const agent_watch_t *w = val;
    double v = c->which == 0   ? (double)w->requests_total
               : c->which == 1 ? (double)w->violations_total
                               : (w->flagged ? w->z : 0);
    c->v[c->n++] = (sl_agent_value_t){key, v};
}

void sl__anomaly_metrics_render(sl_server_t *srv, struct evbuffer *out, bool name_agents)
{
    sl_anomaly_t *a = anomaly_state(srv);
    size_t top = name_agents ? (size_t)srv->config.fleet.metrics_top_agents : 0;
    static const char *const names[3] = {"sluice_agent_requests_total",
                                         "sluice_agent_violations_total", "sluice_agent_anomaly_z"};
    static const char *const help[3] = {
        "Lease requests and action-limit checks per agent (the top N agents, the rest as other).",
        "Lease rejections and action-limit denials per agent (top N, the rest as other).",
        "z-score of a flagged agent's metric against its role (top N flagged agents)."};
    static const char *const type[3] = {"counter", "counter", "gauge"};
    size_t n = a ? a->agents.count : 0;
    sl_agent_value_t *v = n ? calloc(n, sizeof(*v)) : NULL;
    for (int k = 0; k < 3; k++) {
        evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", names[k], help[k], names[k],
                            type[k]);
        if (!v) continue;
        series_ctx_t c = {v, 0, k};
        sl__namemap_foreach(&a->agents, series_one, &c);
        /* z of flagged agents: a sum of z-scores means nothing, so no `other` */
        if (name_agents || k < 2) sl__agent_series(out, names[k], "", v, c.n, top, k < 2);
    }
    free(v);
    evbuffer_add_printf(out,
                        "# HELP sluice_agents_flagged Agents flagged anomalous now.\n"
                        "# TYPE sluice_agents_flagged gauge\nsluice_agents_flagged %zu\n",
                        a ? a->n_flagged : 0);
    sl__suspend_metrics_render(srv, out);
}

void sl__anomaly_free(sl_server_t *srv)
{
    if (!anomaly_state(srv)) return;
    sl__namemap_free_all(&anomaly_state(srv)->agents);
    free(anomaly_state(srv)->scratch);
    free(anomaly_state(srv));
    sl__fleet_house_make(srv)->anomaly = NULL; /* the house exists: it held this part */
}
