/* fleet.h - watching the fleet: the four numbers (fleet.c), anomaly detection and
 * suspension (anomaly.c, suspend.c), seed 001's metrics (watch_metrics.c), the agent
 * registry and list (agent_registry.c, agent_list.c) and their helper (slidewin.c),
 * registered with the core by fleet_feature.c. Internal to src/server/fleet/. */
#ifndef SL_FLEET_H
#define SL_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <sluice/engine.h>

#include "namemap.h"

struct evbuffer;
struct sl_server;
struct sl_call;

/* ---- slidewin.c: a sliding-window counter in SL_WINDOW_SLOTS slots ----------------- */
/* A window of W seconds is SL_WINDOW_SLOTS slots of W / SL_WINDOW_SLOTS seconds aligned
 * on multiples of that width; a sum covers the current slot and the ones before it, so
 * between W - W/12 and W seconds of the past. */
#define SL_WINDOW_SLOTS 12
typedef struct sl_window {
    uint32_t counts[SL_WINDOW_SLOTS];
    int64_t slot; /* the newest slot written (its number since the epoch) */
} sl_window_t;
/* Adds `n` at `now_s` to a window of `window_s` seconds. */
void sl__window_add(sl_window_t *w, double window_s, double now_s, uint32_t n);
/* The sum over the window as of `now_s`. */
uint64_t sl__window_sum(const sl_window_t *w, double window_s, double now_s);
/* The slots' counts as of `now_s`, oldest first (the current slot last). */
void sl__window_slots(const sl_window_t *w, double window_s, double now_s,
                      uint32_t out[SL_WINDOW_SLOTS]);
/* Empties the window. */
void sl__window_clear(sl_window_t *w);

/* ---- fleet_feature.c: the fleet's state on the server ----------------------------- */
typedef struct sl_fleet sl_fleet_t;
typedef struct sl_anomaly sl_anomaly_t;
typedef struct sl_suspend sl_suspend_t;
typedef struct sl_watch sl_watch_t;
typedef struct sl_agents sl_agents_t;
/* What the fleet keeps, in its one slot of the server (features.def): each part NULL until
 * its file first needs it. */
typedef struct sl_fleet_house {
    sl_fleet_t *fleet;     /* the four numbers (fleet.c) */
    sl_anomaly_t *anomaly; /* per-agent rates and flags (anomaly.c) */
    sl_suspend_t *suspend; /* suspended agents as the backend holds them (suspend.c) */
    sl_watch_t *watch;     /* seed 001's metrics (watch_metrics.c) */
    sl_agents_t *agents;   /* the agent names known (agent_registry.c) */
} sl_fleet_house_t;
/* The house on `srv`, for reading: never NULL (before it is made, a house whose parts are
 * all NULL, which must not be written to). */
const sl_fleet_house_t *sl__fleet_house(const struct sl_server *srv);
/* The house, made on first call; NULL when out of memory. */
sl_fleet_house_t *sl__fleet_house_make(struct sl_server *srv);
/* Defines a file's two accessors of its part `part` (a `T *` member of sl_fleet_house_t):
 * `part##_state(srv)`, the part for reading, NULL until made; and `part##_of(srv)`, the part
 * made zeroed on first call, NULL when out of memory. The file includes <stdlib.h>. */
#define SL_FLEET_PART(T, part)                                                                     \
    static inline T *part##_state(const struct sl_server *srv)                                     \
    {                                                                                              \
        return sl__fleet_house(srv)->part;                                                         \
    }                                                                                              \
    static inline T *part##_of(struct sl_server *srv)                                              \
    {                                                                                              \
        sl_fleet_house_t *h = sl__fleet_house_make(srv);                                           \
        if (h && !h->part) h->part = calloc(1, sizeof(T));                                         \
        return h ? h->part : NULL;                                                                 \
    }

/* ---- fleet.c: the four numbers (docs/api.md "GET /v1/fleet") ----------------------- */
/* Feeds an engine event (settles, 429s, tickets ending, grants from the queue). */
void sl__fleet_on_event(struct sl_server *srv, const sl_event_t *ev);
/* A lease request that named `task` (NULL: none) was decided as `d`. */
void sl__fleet_on_decision(struct sl_server *srv, const char *task, const sl_decision_t *d);
/* Task `id` was written: put with `state` and `deps` (put true), or deleted. */
void sl__fleet_on_task_write(struct sl_server *srv, const char *id, bool put, sl_task_state_t state,
                             const char *const *deps, size_t n_deps);
/* Brings the task mirror in line with the backend's graph (housekeeping, every 10 s):
 * tasks written through another replica, or there before this process. */
void sl__fleet_sync(struct sl_server *srv);
/* GET /v1/fleet. */
void sl__handle_fleet(struct sl_call *call);
/* Appends the four numbers' Prometheus lines. */
void sl__fleet_metrics_render(struct sl_server *srv, struct evbuffer *out);
void sl__fleet_free(struct sl_server *srv);

/* ---- anomaly.c: per-agent rates, the `anomaly` alert, suspension ------------------- */
/* When `agent` is suspended: answers `call` 429 `suspended` and returns true, changing
 * nothing but the refusal counter. Else notes the agent's role (NULL: keep the one
 * known, "worker" for a new agent) and who asks for it (the call's principal: agents of
 * one other principal count once in its baseline) and returns false. */
bool sl__anomaly_refuse(struct sl_call *call, const char *agent, const char *role);
/* As sl__anomaly_refuse without answering (the proxy answers in the provider's shape). */
bool sl__anomaly_suspended(struct sl_server *srv, const char *agent, const char *role,
                           uint64_t principal);
/* Counts lease requests (granted at once, queued, rejected) and rejections. */
void sl__anomaly_on_event(struct sl_server *srv, const sl_event_t *ev);
/* Counts an action-limit check of `agent`, a violation when not `allowed`. */
void sl__anomaly_on_limit_check(struct sl_server *srv, const char *agent, bool allowed);
/* Evaluates every agent against its role's baseline (housekeeping, once a second):
 * raises and clears `anomaly`, suspends when configured. */
void sl__anomaly_tick(struct sl_server *srv);
/* Empties the agent's windows and clears its flag (a release, on any replica). */
void sl__anomaly_forget(struct sl_server *srv, const char *agent);
/* True while the agent is flagged here. */
bool sl__anomaly_flagged(const struct sl_server *srv, const char *agent);
/* Forgets what the watch holds of `agent` (counts, totals, role, principal) unless it is
 * flagged: the agent was forgotten (agent_registry.c). */
void sl__anomaly_drop(struct sl_server *srv, const char *agent);
/* The role this replica knows the agent by ("" when it has not seen it). */
const char *sl__anomaly_role(const struct sl_server *srv, const char *agent);
/* Adds "anomaly" (null or {metric, z, count}), "suspended" and "suspension" to an
 * agent's JSON. */
void sl__anomaly_annotate(struct sl_server *srv, const char *agent, json_t *obj);
/* The flagged and suspended agents `call` may see, for GET /v1/fleet. */
json_t *sl__anomaly_json(struct sl_call *call);
/* True while some agent is flagged (the `anomaly` alert). */
bool sl__anomaly_active(const struct sl_server *srv);
/* Appends the per-agent series (top N plus `other`) and the suspension gauges. */
/* `name_agents`: false puts every agent into `agent="other"` (and gives no z series): with
 * auth on, the open /metrics names agents only to a scrape with the admin token. */
void sl__anomaly_metrics_render(struct sl_server *srv, struct evbuffer *out, bool name_agents);
void sl__anomaly_free(struct sl_server *srv);

/* ---- suspend.c: suspended agents, durable and fleet-wide (the backend's records) ---- */
/* Suspends `agent` for an anomaly at once (refused from now on) and writes the record
 * to the backend, retried by later syncs until it lands. Nothing when suspended already. */
void sl__suspend_by_anomaly(struct sl_server *srv, const char *agent, const char *role,
                            const char *metric, double z, uint64_t count, double at_s);
/* True (and counted as a refusal) when `agent` is suspended. */
bool sl__suspend_refuses(struct sl_server *srv, const char *agent);
/* True when `agent` is suspended (nothing counted). */
bool sl__suspend_active(const struct sl_server *srv, const char *agent);
/* Reads the backend's suspensions and follows them: suspends what another replica
 * suspended, releases (and forgets the windows of) what another released. Housekeeping
 * calls it every 0.25 s; at most one read is in flight. */
void sl__suspend_sync(struct sl_server *srv);
/* POST /v1/agents/{agent}/suspend and /release (admin only). */
void sl__handle_agent_suspend(struct sl_call *call, const char *agent);
void sl__handle_agent_release(struct sl_call *call, const char *agent);
/* Adds "suspended" (bool) and "suspension" (null or the record) to an agent's JSON. */
void sl__suspend_annotate(struct sl_server *srv, const char *agent, json_t *obj);
/* The record of a suspended agent as JSON, or JSON null. */
json_t *sl__suspend_record_json(const struct sl_server *srv, const char *agent);
/* Appends to `arr` the suspended agents that are not flagged here, for GET /v1/fleet. */
void sl__suspend_list_unflagged(struct sl_call *call, json_t *arr);
/* Appends to `arr` the suspended agents `call` may see for which `listed(agent, ud)` is
 * false (this replica's engine does not know them: not seen since its start, or
 * forgotten), as GET /v1/agents shows them: zero counts, state "idle", the suspension. */
void sl__suspend_add_unlisted(struct sl_call *call, json_t *arr,
                              bool (*listed)(const char *agent, void *ud), void *ud);
/* The suspension gauge and counters. */
void sl__suspend_metrics_render(struct sl_server *srv, struct evbuffer *out);
void sl__suspend_free(struct sl_server *srv);

/* ---- watch_metrics.c: seed 001's metrics -------------------------------------------- */
/* Counts lease answers, refusals' retry_after, margin moves and 429s per pool. */
void sl__watch_on_event(struct sl_server *srv, const sl_event_t *ev);
/* An action-limit check of `limit` was answered: `delayed` when it was held first;
 * `retry_after_s` on a denial (< 0: never). */
void sl__watch_on_limit_check(struct sl_server *srv, const char *limit, bool allowed, bool delayed,
                              double retry_after_s);
/* Samples every pool's bucket levels (housekeeping, once a second). */
void sl__watch_tick(struct sl_server *srv);
/* Appends seed 001's Prometheus lines; `pools` is the scrape's snapshot. */
void sl__watch_metrics_render(struct sl_server *srv, const sl_pool_info_t *pools, size_t n_pools,
                              struct evbuffer *out);
void sl__watch_free(struct sl_server *srv);

/* ---- config_fleet.c: the `fleet:` section ---------------------------------------- */
struct sl_fleet_config;
struct yaml_document_s;
struct yaml_node_s;
/* The section's defaults, and reading it from mapping `section` (errors as
 * `FILE:LINE: fleet.KEY: ...`). */
void sl__config_fleet_defaults(struct sl_fleet_config *f);
extern const struct sl_config_table sl__fleet_table;
int sl__config_parse_fleet(struct yaml_document_s *doc, struct yaml_node_s *section,
                           const char *path, struct sl_fleet_config *f, char *err, size_t errlen);

/* ---- agent_registry.c, agent_list.c ----------------------------------------------- */
/* GET /v1/agents[?limit=N&cursor=NAME] (agent_list.c): a page of agents by name. */
void sl__handle_agents(struct sl_call *call, const char *query);
/* agent_registry.c: agent names bounded per token and in all, forgotten when idle */
/* When `agent` is new and agents.max_per_token (for `principal`, sl__call_principal) or
 * agents.max_total is reached: writes what binds, naming the key and its value, into
 * `why`, the wait into *retry_after_s, and returns true (nothing is noted). Else notes the
 * agent as active now and returns false. */
bool sl__agents_refused(struct sl_server *srv, const char *agent, uint64_t principal, char *why,
                        size_t whylen, double *retry_after_s);
/* Notes the agent an event names as active (known from then on, made known by no token). */
void sl__agents_on_event(struct sl_server *srv, const sl_event_t *ev);
/* Offers the backend the agents idle agents.forget_idle_s (at most 4096 a call); those it
 * forgets leave the registry and the anomaly watch. Once a second. */
void sl__agents_sweep(struct sl_server *srv);
void sl__agents_metrics_render(const struct sl_server *srv, struct evbuffer *out);
void sl__agents_free(struct sl_server *srv);

#endif /* SL_FLEET_H */
