/* usage_feature.c - chargeback registers with the core (features.def): GET /v1/usage, the
 * `prices:` section, the settles and upstream latencies it counts (from the bus), its
 * metrics and its teardown. */
#include "usage.h"

static void r_usage(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m;
    sl__handle_usage(c, q);
}

static const sl_route_t routes[] = {
    {2, {"v1", "usage"}, "GET", SL_ROUTE_TOKEN, false, r_usage, NULL},
};

/* A settle counts what the provider billed; a proxied answer's end, its latency. */
static void on_event(sl_server_t *srv, const sl_bus_event_t *ev)
{
    if (ev->kind == SL_BUS_USAGE)
        sl__usage_record(srv, ev->usage.agent, ev->usage.pool, ev->usage.model, ev->usage.s);
    else if (ev->kind == SL_BUS_UPSTREAM)
        sl__usage_latency(srv, ev->upstream.pool, ev->upstream.upstream_s,
                          ev->upstream.first_token_s);
}

static void metrics(sl_call_t *call, const sl_pool_info_t *pools, size_t n_pools,
                    struct evbuffer *out)
{
    (void)pools, (void)n_pools;
    sl__usage_metrics_render(call->srv, out, sl__metrics_names_agents(call));
}

const sl_feature_t sl_feature_usage = {
    .name = "usage",
    .config = &sl__prices_config,
    .routes = routes,
    .n_routes = sizeof(routes) / sizeof(routes[0]),
    .on_event = on_event,
    .metrics = metrics,
    .free = sl__usage_free,
};
