/* provider_limits_feature.c - published limits and the slow start register with the core
 * (features.def): the `provider_limits:` section, the limits in force written into the
 * backend's settings at start and on every reload, the background read after a reload,
 * the acceleration 429s the proxy meets (from the bus), the alert and ramp gauges, and
 * the teardown. Its refresh and the ramp's tick run on the core's tick (pacing.c): the
 * feature keeps no timer of its own. */
#include "pacing.h"
#include "server.h"


/* Published limits and ramps stay in force across a reload. */
static void settings_reload(sl_server_t *srv, sl_config_t *next)
{
    sl__pacing_prepare(srv, next);
}

/* Reads the published limits again, in the background (errors are logged there). */
static int reload(sl_server_t *srv, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    sl__pacing_reloaded(srv);
    return 0;
}

static void on_event(sl_server_t *srv, const sl_bus_event_t *ev)
{
    if (ev->kind == SL_BUS_ACCELERATION) sl__pacing_on_acceleration(srv, ev->acceleration.pool);
}

static void metrics(sl_call_t *call, const sl_pool_info_t *pools, size_t n_pools,
                    struct evbuffer *out)
{
    (void)pools, (void)n_pools;
    sl__pacing_metrics_render(call->srv, out);
}

const sl_feature_t sl_feature_provider_limits = {
    .name = "provider_limits",
    .config = &sl__provider_limits_config,
    .settings_start = sl__pacing_start,
    .settings_reload = settings_reload,
    .on_event = on_event,
    .metrics = metrics,
    .tick = sl__pacing_tick,
    .reload = reload,
    .free = sl__pacing_free,
};
