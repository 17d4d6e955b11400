/* proxy_feature.c - the provider proxy registers with the core (features.def): the paths it
 * answers by itself (/anthropic/..., /openai/...), their body limit, the engine events that
 * wake its queued calls, and its start, drain and stop. */
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

/* A proxy path keeps the proxy's limit when a pool is proxied there; a proxy path nobody
 * proxies has the lease API's. */
static size_t body_limit(const sl_config_t *c, const char *p, size_t n)
{
    sl_upstream_api_t api = n == 9 && !strncmp(p, "anthropic", 9) ? SL_UPSTREAM_ANTHROPIC
                            : n == 6 && !strncmp(p, "openai", 6)  ? SL_UPSTREAM_OPENAI
                                                                  : SL_UPSTREAM_NONE;
    if (api != SL_UPSTREAM_NONE && sl_config_proxies(c, api)) return sl__proxy_body_limit(c);
    return 0;
}

const sl_feature_t sl_feature_proxy = {
    .name = "proxy",
    .start = start,
    .claim = claim,
    .body_limit = body_limit,
    .max_body = sl__proxy_body_limit,
    .on_event = sl__proxy_on_event,
    .shutdown = sl__proxy_shutdown,
    .in_flight = sl__proxy_in_flight,
    .stop = sl__proxy_free,
};
