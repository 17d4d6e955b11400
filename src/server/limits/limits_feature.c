/* limits_feature.c - the action limits register with the core (features.def): the /v1/limits
 * routes, the `limits:` section, the limit set built at start and on reload (with the
 * tiers' scaled copies, limits_tiers.c), its metrics,
 * the idle-key sweep and the checks held at shutdown. */
#include "limits_api.h"

#include <stdio.h>

static void r_limits(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)m;
    sl__handle_limits(c, seg[2], seg[2] ? seg[3] : NULL, q);
}

static const sl_route_t routes[] = {
    {2, {"v1", "limits"}, "GET", SL_ROUTE_TOKEN, false, r_limits, NULL},
    {3, {"v1", "limits", "*"}, "GET", SL_ROUTE_TOKEN, false, r_limits, NULL},
    {4, {"v1", "limits", "*", "check"}, "POST", SL_ROUTE_TOKEN, false, r_limits, NULL},
    {4, {"v1", "limits", "*", "release"}, "POST", SL_ROUTE_TOKEN, false, r_limits, NULL},
    {4, {"v1", "limits", "*", "report"}, "POST", SL_ROUTE_TOKEN, false, r_limits, NULL},
};

/* A tier's limit_multiplier may take a scaled limit out of the library's range: such a
 * configuration is refused as a whole, naming the tier (the running one stays). */
static int reload_check(sl_server_t *srv, const sl_config_t *next, char *err, size_t errlen)
{
    (void)srv;
    json_t *all = NULL, *copies = NULL;
    int rc = sl__limits_with_tiers(SL_LIMITS_CONF(next), &next->token_cfg, &all, &copies, err, errlen);
    json_decref(all);
    json_decref(copies);
    return rc;
}

/* Memory only can fail: the running limits stay. */
static int reload(sl_server_t *srv, char *err, size_t errlen)
{
    char why[400];
    if (sl__limits_apply(srv, why, sizeof(why)) == 0) return 0;
    snprintf(err, errlen, "keeping the running limits: %s", why);
    return -1;
}

static void metrics(sl_call_t *call, const sl_pool_info_t *pools, size_t n_pools,
                    struct evbuffer *out)
{
    (void)pools, (void)n_pools;
    sl__limits_metrics_render(call->srv, out);
}

static void tick(sl_server_t *srv, unsigned quarter)
{
    if (quarter % 40 == 0) sl__limits_sweep(srv); /* 10 s */
}

static void answer_held(sl_server_t *srv, bool drain)
{
    (void)drain; /* a held check has nothing under way: it is answered now */
    sl__limits_shutdown(srv);
}

const sl_feature_t sl_feature_limits = {
    .name = "limits",
    .config = &sl__limits_config,
    .start = sl__limits_apply,
    .routes = routes,
    .n_routes = sizeof(routes) / sizeof(routes[0]),
    .metrics = metrics,
    .tick = tick,
    .reload_check = reload_check,
    .reload = reload,
    .shutdown = answer_held,
    .stop = sl__limits_free,
};
