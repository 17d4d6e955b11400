/* teardown.c - frees what a server holds, in the one order every owner of an
 * sl_server_t needs (sluiced's main and the fuzz target `api`).
 *
 * Why one function: each feature that keeps state on the server adds a line here, once;
 * when sluiced and the fuzz target each kept their own list, a new feature's map was freed
 * by one and leaked by the other (LeakSanitizer in CI). */
#include "server.h"

#include <stdlib.h>

static void free_owner(uint64_t key, void *val, void *ud)
{
    (void)key, (void)ud;
    free(val);
}

void sl__server_free_state(sl_server_t *srv)
{
    sl_backend_free(srv->backend);
    srv->backend = NULL;
    sl__metrics_free(srv->metrics);
    srv->metrics = NULL;
    sl__fleet_free(srv);
    sl__agents_free(srv); /* after the backend: its last callbacks may name agents */
    sl__anomaly_free(srv);
    sl__suspend_free(srv);
    sl__watch_free(srv);
    sl__history_free(srv);
    sl__pacing_free(srv);
    sl__tokens_free(srv);
    sl__idmap_foreach(&srv->lease_owner, free_owner, NULL);
    sl__idmap_foreach(&srv->ticket_owner, free_owner, NULL);
    sl__idmap_free(&srv->lease_owner);
    sl__idmap_free(&srv->ticket_owner);
    sl__idmap_free(&srv->waiters);
    sl__namemap_free_all(&srv->report_holds);
    sl__access_log_free(srv);
    sl__usage_free(srv);
}
