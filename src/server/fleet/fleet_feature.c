/* fleet_feature.c - the fleet registers with the core (features.def): GET /v1/fleet and
 * /v1/agents, an agent's suspend and release, the `fleet:` section, what it hears on the
 * bus, the admission check (the agents bounds, suspension), its metrics and its ticks. */
#include "fleet.h"
#include "server.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- the fleet's slot ------------------------------------------------------------------ */

static const sl_fleet_house_t empty_house;

const sl_fleet_house_t *sl__fleet_house(const sl_server_t *srv)
{
    const sl_fleet_house_t *h = srv->slot[SL_FEATURE_ID_fleet];
    return h ? h : &empty_house;
}

sl_fleet_house_t *sl__fleet_house_make(sl_server_t *srv)
{
    return sl__slot_make(srv, SL_FEATURE_ID_fleet, sizeof(sl_fleet_house_t));
}

/* ---- routes ---------------------------------------------------------------------------- */

static void r_agents(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m;
    sl__handle_agents(c, q);
}
static void r_agent_release(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)m, (void)q;
    sl__handle_agent_release(c, seg[2]);
}
static void r_agent_suspend(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)m, (void)q;
    sl__handle_agent_suspend(c, seg[2]);
}
static void r_fleet(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_fleet(c);
}

static const sl_route_t routes[] = {
    {2, {"v1", "agents"}, "GET", SL_ROUTE_TOKEN, false, r_agents, NULL},
    {4, {"v1", "agents", "*", "release"}, "POST", SL_ROUTE_TOKEN, true, r_agent_release, NULL},
    {4, {"v1", "agents", "*", "suspend"}, "POST", SL_ROUTE_TOKEN, true, r_agent_suspend, NULL},
    {2, {"v1", "fleet"}, "GET", SL_ROUTE_TOKEN, false, r_fleet, NULL},
};

/* ---- configuration --------------------------------------------------------------------- */

/* The windows' slots are cut to their length: a new length waits for a restart. */
static void reload_prepare(const sl_config_t *running, sl_config_t *next)
{
    const sl_fleet_config_t *was = SL_FLEET_CONF(running);
    sl_fleet_config_t *now = SL_FLEET_CONF(next);
    if (now->window_s != was->window_s || now->anomaly_window_s != was->anomaly_window_s)
        sl__log(SL_LOG_WARN,
                "reload: fleet.window_s and fleet.anomaly_window_s changes need "
                "a restart; keeping %g s and %g s",
                was->window_s, was->anomaly_window_s);
    now->window_s = was->window_s;
    now->anomaly_window_s = was->anomaly_window_s;
}

/* ---- life ------------------------------------------------------------------------------ */

/* The memory backend answers at once: a suspended agent is refused from the start. */
static int early_start(sl_server_t *srv, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    sl__suspend_sync(srv);
    return 0;
}

static void on_event(sl_server_t *srv, const sl_bus_event_t *ev)
{
    switch (ev->kind) {
    case SL_BUS_ENGINE:
        sl__agents_on_event(srv, ev->engine);
        sl__fleet_on_event(srv, ev->engine);
        sl__anomaly_on_event(srv, ev->engine);
        sl__watch_on_event(srv, ev->engine);
        break;
    case SL_BUS_DECISION:
        sl__fleet_on_decision(srv, ev->decision.task, ev->decision.d);
        break;
    case SL_BUS_LIMIT_CHECK:
        sl__anomaly_on_limit_check(srv, ev->limit_check.agent, ev->limit_check.allowed);
        sl__watch_on_limit_check(srv, ev->limit_check.limit, ev->limit_check.allowed,
                                 ev->limit_check.delayed, ev->limit_check.retry_after_s);
        break;
    case SL_BUS_LIMITS:
        sl__watch_on_limits(srv, ev->limits.names, ev->limits.n);
        break;
    case SL_BUS_TASK_WRITE:
        sl__fleet_on_task_write(srv, ev->task_write.id, ev->task_write.put, ev->task_write.state,
                                ev->task_write.deps, ev->task_write.n_deps);
        break;
    default: /* usage, upstream latency, acceleration 429s: not the fleet's */
        break;
    }
}

/* A lease: a new name past the agents bounds is 429 too_many_agents; a lease or an action
 * check of a suspended agent is 429 suspended (docs/api.md "Suspension"). */
static int admit_check(sl_call_t *call, sl_admit_kind_t kind, const char *agent, const char *role,
                       sl_refusal_t *ref)
{
    sl_server_t *srv = call->srv;
    uint64_t principal = sl__call_principal(call);
    char why[320];
    double retry_after_s = 0;
    if (kind == SL_ADMIT_LEASE &&
        sl__agents_refused(srv, agent, principal, why, sizeof(why), &retry_after_s)) {
        sl__refuse(ref, 429, "too_many_agents", "%s", why);
        ref->retry_after_s = retry_after_s;
        return -1;
    }
    if (sl__anomaly_suspended(srv, agent, role, principal)) {
        sl__refuse(ref, 429, "suspended",
                   "agent '%s' is suspended (anomaly, reason suspended) until an admin releases "
                   "it: POST /v1/agents/%s/release",
                   agent, agent);
        ref->retry_after_s = SL_FLEET_CONF(&srv->config)->anomaly_window_s;
        return -1;
    }
    return 0;
}

static void metrics(sl_call_t *call, const sl_pool_info_t *pools, size_t n_pools,
                    struct evbuffer *out)
{
    sl__fleet_metrics_render(call->srv, out);
    sl__agents_metrics_render(call->srv, out);
    sl__anomaly_metrics_render(call->srv, out, sl__metrics_names_agents(call));
    sl__watch_metrics_render(call->srv, pools, n_pools, out);
}

static void tick(sl_server_t *srv, unsigned quarter)
{
    sl__suspend_sync(srv);  /* 0.25 s: what other replicas suspended and released */
    if (quarter % 4 == 0) { /* 1 s */
        sl__agents_sweep(srv);
        sl__anomaly_tick(srv);
        sl__watch_tick(srv);
    }
    if (quarter % 40 == 4) /* 1 s after the start, then every 10 s */
        sl__fleet_sync(srv);
}

static void free_all(sl_server_t *srv)
{
    sl__fleet_free(srv);
    sl__agents_free(srv);
    sl__anomaly_free(srv);
    sl__suspend_free(srv);
    sl__watch_free(srv);
    free(srv->slot[SL_FEATURE_ID_fleet]);
    srv->slot[SL_FEATURE_ID_fleet] = NULL;
}

const sl_feature_t sl_feature_fleet = {
    .name = "fleet",
    .config = &sl__fleet_config,
    .early_start = early_start,
    .routes = routes,
    .n_routes = sizeof(routes) / sizeof(routes[0]),
    .on_event = on_event,
    .admit_check = admit_check,
    .annotate_agent = sl__anomaly_annotate,
    .metrics = metrics,
    .tick = tick,
    .reload_prepare = reload_prepare,
    .free = free_all,
};
