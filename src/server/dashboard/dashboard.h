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
typedef struct sl_history sl_history_t;
/* What the dashboard keeps, in its one slot of the server (features.def): each part NULL
 * until first needed; dashboard_feature.c frees them. */
typedef struct sl_dashboard_parts {
    sl_dashboard_t *session; /* the login session (dashboard.c) */
    sl_history_t *history;   /* the last hour the page draws (history.c) */
} sl_dashboard_parts_t;

/* dashboard.c: the live dashboard (GET /, /dashboard/<file>), built into the binary. */
/* Handles `call` when its path is the dashboard's (`/` or segment 0 "dashboard") and
 * returns true; false leaves the call alone. Auth is checked here (the admin token, or
 * the session cookie `GET /?token=ADMIN` sets). */
bool sl__dashboard_route(sl_call_t *call, int n, char **seg, const char *query);
/* With auth on, true (and call->admin set) when `call` is a GET of a read endpoint the
 * page uses (pools, agents, events, limits, tasks, fleet), has no Authorization header
 * and carries the dashboard's session cookie; false changes nothing. */
bool sl__dashboard_authenticate(sl_call_t *call, int n, char **seg);
/* Forgets the login session (a new one is issued, or at exit). */
void sl__dashboard_free(sl_server_t *srv);

/* history.c: the last hour the dashboard draws (pool samples, 429/grant bins, events). */
/* Keeps `ev` (a copy) in the bins and the recent events. */
void sl__history_on_event(sl_server_t *srv, const sl_event_t *ev);
/* Once a second: samples every pool when a sample is due (every 5 s). */
void sl__history_tick(sl_server_t *srv);
/* The samples after `since` (server time, s), the bins of the last hour and the events
 * after sequence number `after` (the high-rate kinds only when `all`); NULL when out of
 * memory. */
json_t *sl__history_json(sl_server_t *srv, double since, uint64_t after, bool all);
/* GET /v1/history?since=&after=&fold= (docs/api.md). */
void sl__handle_history(sl_call_t *call, const char *query);
void sl__history_free(sl_server_t *srv);

#endif /* SL_DASHBOARD_H */
