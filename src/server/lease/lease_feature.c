/* lease_feature.c - the lease API registers with the core (features.def): its routes, and the
 * engine events that answer the long-polls waiting on a ticket. */
#include "lease.h"

#include <event2/buffer.h>

static void r_lease_post(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_lease_post(c);
}
static void r_lease_cancel(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)q;
    sl__handle_lease_action(c, seg[2], NULL, m);
}
static void r_lease_action(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)q;
    sl__handle_lease_action(c, seg[2], seg[3], m);
}
static void r_ticket(sl_call_t *c, char **seg, int m, const char *q)
{
    sl__handle_ticket(c, seg[2], m, q);
}

static const sl_route_t routes[] = {
    {2, {"v1", "leases"}, "POST", SL_ROUTE_TOKEN, false, r_lease_post, NULL},
    {3, {"v1", "leases", "*"}, "DELETE", SL_ROUTE_TOKEN, false, r_lease_cancel, NULL},
    {4, {"v1", "leases", "*", "settle"}, "POST", SL_ROUTE_TOKEN, false, r_lease_action, NULL},
    {4, {"v1", "leases", "*", "extend"}, "POST", SL_ROUTE_TOKEN, false, r_lease_action, NULL},
    {3, {"v1", "tickets", "*"}, "GET, DELETE", SL_ROUTE_TOKEN, false, r_ticket, NULL},
};

static void on_event(sl_server_t *srv, const sl_bus_event_t *ev)
{
    if (ev->kind == SL_BUS_ENGINE) sl__waiters_on_event(srv, ev->engine);
}

/* Long-polls are answered 503 at once: a waiting ticket has nothing under way. */
static void answer_waiters(sl_server_t *srv, bool drain)
{
    (void)drain;
    sl__waiters_shutdown(srv);
}

static void metrics(sl_call_t *call, const sl_pool_info_t *pools, size_t n_pools,
                    struct evbuffer *out)
{
    (void)pools, (void)n_pools;
    evbuffer_add_printf(out,
                        "# HELP sluice_long_poll_waiters HTTP requests held open waiting for a "
                        "grant.\n# TYPE sluice_long_poll_waiters gauge\n"
                        "sluice_long_poll_waiters %zu\n",
                        sl__waiters_count(call->srv));
}

const sl_feature_t sl_feature_lease = {
    .name = "lease",
    .routes = routes,
    .n_routes = sizeof(routes) / sizeof(routes[0]),
    .on_event = on_event,
    .metrics = metrics,
    .shutdown = answer_waiters,
    .free = sl__waiters_free,
};
