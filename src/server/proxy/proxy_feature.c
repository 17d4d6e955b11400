/* proxy_feature.c - the provider proxy registers with the core (features.def): the paths it
 * answers by itself (/anthropic/..., /openai/...), POST /v1/estimate, their body limits,
 * the engine events that wake its queued calls, the estimator's metric and reload check,
 * and its start, drain and stop. */
#include "proxy.h"

#include <string.h>

static int start(sl_server_t *srv, char *err, size_t errlen)
{
    return sl__proxy_init(srv, err, errlen);
}

/* The proxy authenticates and reads bodies itself, in the provider's error shapes. */
static bool claim(sl_call_t *call, int n, char **seg, const char *query)
{
    return n > 0 && sl__proxy_route(call, n, seg, query);
}

/* POST /v1/estimate reads a provider request body: it takes as much as the proxy would. */
static size_t estimate_body_limit(const sl_config_t *c)
{
    size_t proxy = sl__proxy_body_limit(c);
    return proxy > c->body_limit_bytes ? proxy : c->body_limit_bytes;
}

static void r_estimate(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_estimate(c);
}

static const sl_route_t routes[] = {
    {2, {"v1", "estimate"}, "POST", SL_ROUTE_TOKEN, false, r_estimate, estimate_body_limit},
};

/* A proxy path keeps the proxy's limit when a pool is proxied there (a proxy path nobody
 * proxies has the lease API's); /v1/estimate the larger of the two. */
static size_t body_limit(const sl_config_t *c, const char *p, size_t len)
{
    size_t n = 0;
    while (n < len && p[n] != '/')
        n++;
    sl_upstream_api_t api = n == 9 && !strncmp(p, "anthropic", 9) ? SL_UPSTREAM_ANTHROPIC
                            : n == 6 && !strncmp(p, "openai", 6)  ? SL_UPSTREAM_OPENAI
                                                                  : SL_UPSTREAM_NONE;
    if (api != SL_UPSTREAM_NONE && sl_config_proxies(c, api)) return sl__proxy_body_limit(c);
    if (len == 11 && !strncmp(p, "v1/estimate", 11)) return estimate_body_limit(c);
    return 0;
}

static void metrics(sl_call_t *call, const sl_pool_info_t *pools, size_t n_pools,
                    struct evbuffer *out)
{
    (void)pools, (void)n_pools;
    sl__proxy_metrics_render(call->srv, out);
}

/* A reload to `estimator: tokenizer` needs the vocabulary now: refused without it. */
static int reload_check(sl_server_t *srv, const sl_config_t *next, char *err, size_t errlen)
{
    return sl__proxy_estimator_ready(srv, next, err, errlen);
}

const sl_feature_t sl_feature_proxy = {
    .name = "proxy",
    .config = &sl__proxy_config,
    .start = start,
    .routes = routes,
    .n_routes = sizeof(routes) / sizeof(routes[0]),
    .claim = claim,
    .body_limit = body_limit,
    .max_body = sl__proxy_body_limit,
    .on_event = sl__proxy_on_event,
    .metrics = metrics,
    .reload_check = reload_check,
    .shutdown = sl__proxy_shutdown,
    .in_flight = sl__proxy_in_flight,
    .stop = sl__proxy_free,
};
