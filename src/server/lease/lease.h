/* lease.h - the lease API's files (leases.c, lease_feature.c): internal to the lease feature. */
#ifndef SL_LEASE_H
#define SL_LEASE_H

#include "server.h"

/* What the lease API keeps, in its slot of the server (features.def). */
typedef struct sl_lease_api {
    sl_idmap_t waiters; /* ticket -> sl_call_t long-polling on it */
    size_t n_waiters;
} sl_lease_api_t;

/* leases.c: POST /v1/leases, /v1/leases/{id}[/settle|/extend], /v1/tickets/{id}. */
void sl__handle_lease_post(sl_call_t *call);
void sl__handle_lease_action(sl_call_t *call, const char *id, const char *action, int method);
void sl__handle_ticket(sl_call_t *call, const char *id, int method, const char *query);
void sl__waiters_on_event(sl_server_t *srv, const sl_event_t *ev);
void sl__waiters_shutdown(sl_server_t *srv);
/* How many long-polls wait now. */
size_t sl__waiters_count(const sl_server_t *srv);
/* Frees the waiters' map (after shutdown: it holds no call). */
void sl__waiters_free(sl_server_t *srv);
json_t *sl__grant_json(const sl_decision_t *d, const char *pool);
int sl__parse_id(const char *s, char prefix, uint64_t *out);

#endif /* SL_LEASE_H */
