/* dashboard.h - the dashboard feature (dashboard.c, dashboard_feature.c) and its embedded
 * files: the table embed.cmake generates at build time. */
#ifndef SL_DASHBOARD_H
#define SL_DASHBOARD_H

#include <stddef.h>

#include "server.h"

/* One file of src/server/dashboard/, as built into sluiced. */
typedef struct sl_dashboard_asset {
    const char *name;         /* "index.html", "app.js", ... */
    const char *content_type; /* from the extension */
    const unsigned char *data;
    size_t len;
    const char *etag; /* quoted, from the content's SHA-256 */
} sl_dashboard_asset_t;

extern const sl_dashboard_asset_t sl__dashboard_assets[];
extern const size_t sl__dashboard_n_assets;

typedef struct sl_dashboard sl_dashboard_t;

/* dashboard.c: the live dashboard (GET /, /dashboard/<file>), built into the binary. */
/* Handles `call` when its path is the dashboard's (`/` or segment 0 "dashboard") and
 * returns true; false leaves the call alone. Auth is checked here (the admin token, or
 * the session cookie `GET /?token=ADMIN` sets). */
bool sl__dashboard_route(sl_call_t *call, int n, char **seg, const char *query);
/* With auth on, true (and call->admin set) when `call` is a GET of a read endpoint the
 * page uses (pools, agents, events, limits, tasks, fleet), has no Authorization header
 * and carries the dashboard's session cookie; false changes nothing. */
bool sl__dashboard_authenticate(sl_call_t *call, int n, char **seg);
/* Forgets the login session (at exit). */
void sl__dashboard_free(sl_server_t *srv);

#endif /* SL_DASHBOARD_H */
