/* dashboard_feature.c - the live dashboard registers with the core (features.def): its page and
 * files (GET /, /dashboard/<file>), GET /v1/history and the hour it keeps (events, a tick),
 * the session cookie as a way in to the read endpoints the page uses, and its state freed
 * at exit. */
#include "dashboard.h"

#include <stdlib.h>

static void r_history(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m;
    sl__handle_history(c, q);
}

static const sl_route_t routes[] = {
    {2, {"v1", "history"}, "GET", SL_ROUTE_TOKEN, false, r_history, NULL},
};

static void on_event(sl_server_t *srv, const sl_bus_event_t *ev)
{
    if (ev->kind == SL_BUS_ENGINE) sl__history_on_event(srv, ev->engine);
}

static void tick(sl_server_t *srv, unsigned quarter)
{
    if (quarter % 4 == 0) sl__history_tick(srv); /* 1 s */
}

static void free_all(sl_server_t *srv)
{
    sl__dashboard_free(srv);
    sl__history_free(srv);
    free(srv->slot[SL_FEATURE_ID_dashboard]);
    srv->slot[SL_FEATURE_ID_dashboard] = NULL;
}

const sl_feature_t sl_feature_dashboard = {
    .name = "dashboard",
    .routes = routes,
    .n_routes = sizeof(routes) / sizeof(routes[0]),
    .claim = sl__dashboard_route,
    .authenticate = sl__dashboard_authenticate,
    .on_event = on_event,
    .tick = tick,
    .free = free_all,
};
