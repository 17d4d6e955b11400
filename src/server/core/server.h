/* server.h - sluiced's internals shared between its files (sl__ names are not a public API). */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <jansson.h>
#include <sluice/tokenizer.h>

#include "backend.h"
#include "config.h"
#include "fleet.h"
#include "pacing.h" /* provider_limits/: published limits and the ramp */
#include "httpd.h"
#include "idmap.h"
#include "log.h"
#include "redis.h"

struct evbuffer;

typedef struct sl_server sl_server_t;
typedef struct sl_call sl_call_t;
typedef struct sl_metrics sl_metrics_t;
typedef struct sl_proxy sl_proxy_t;
typedef struct sl_limits_api sl_limits_api_t;
typedef struct sl_dashboard sl_dashboard_t;
typedef struct sl_history sl_history_t;
typedef struct sl_agents sl_agents_t;
typedef struct sl_access sl_access_t;
typedef struct sl_access_log sl_access_log_t;
typedef struct sl_usage_state sl_usage_state_t;

/* What a call is doing while it has not been answered. */
typedef enum sl_call_mode {
    SL_CALL_PLAIN = 0, /* answered as soon as the backend answers */
    SL_CALL_WAITING,   /* a long-poll on a queued ticket */
    SL_CALL_STREAM,    /* a Server-Sent Events subscriber */
} sl_call_mode_t;

/* One HTTP request, from arrival to answer. Owned by the server; freed when answered
 * (or when its client is gone). Fields borrowed from `body` live as long as the call. */
struct sl_call {
    sl_server_t *srv;
    sl_hreq_t *req;           /* NULL once answered, or once the client is gone */
    sl_http_method_t method;  /* HEAD is served as GET */
    json_t *body;                 /* parsed request body, or NULL */
    const sl_token_rule_t *token; /* the agent token presented, or NULL */
    bool admin;                   /* the admin token was presented (or auth is off) */
    sl_call_mode_t mode;
    char pool[129];                /* for GRANT bodies */
    uint64_t ticket;               /* SL_CALL_WAITING: the ticket waited on */
    uint64_t lease;                /* lease actions: the lease acted on (for messages) */
    double wait_s;                 /* how long the answer may be held (0 = answer at once) */
    double started_s;              /* when the wait began */
    struct event *wait_timer;      /* the end of `wait` */
    void (*gone)(sl_call_t *call); /* called once when the client went away */
    void *owner;                   /* the proxy's state for a proxied call */
    sl_call_t *prev, *next;        /* in srv->streams (SL_CALL_STREAM) */
    /* SL_CALL_STREAM: whose events it sees, copied from the token when it subscribed (a
     * reload may free the token): every event (admin, auth off), or pool-wide events and
     * those of agent `stream_agent` (or of agents starting with it, `stream_prefix`). */
    bool stream_all;
    bool stream_prefix;
    char stream_agent[129];
    uint64_t stream_principal; /* sl__call_principal() when it subscribed */
    /* Settles: rate-limit headers left out because the caller may not resync (the answer
     * says so; the settle itself is applied). */
    size_t headers_ignored;
    sl_access_t *access; /* the access log's record of it (access.c), or NULL */
};

/* Who owns a lease or a ticket and in which pool, learnt from engine events (the engine
 * API has no lookup): for owner checks and for bounding a settle by its pool. */
typedef struct sl_owner {
    char agent[129];
    char pool[129];
    bool ended;        /* tickets: no longer queued */
    bool rejected;     /* tickets: rejected after queueing (margin cut) */
    double retry_at;   /* when rejected */
    double ended_at_s; /* forgotten a while after this */
    char model[129];   /* the model the lease request named, "" when none (for usage) */
} sl_owner_t;

struct sl_server {
    struct event_base *base;
    sl_httpd_t *http;
    sl_backend_t *backend;
    sl_config_t config;
    const char *config_path; /* NULL: built-in defaults */
    bool listen_from_flag;   /* --listen given: the file's `listen` is not used */
    sl_metrics_t *metrics;
    FILE *event_log;
    bool event_log_dirty;
    struct event *housekeeping; /* flushes the event log, forgets old owners, pings streams */
    sl_idmap_t waiters;         /* ticket -> sl_call_t waiting on it */
    sl_idmap_t lease_owner;     /* lease -> sl_owner_t */
    sl_idmap_t ticket_owner;    /* ticket -> sl_owner_t */
    sl_namemap_t report_holds;  /* "pool \x1f token" -> double: when that token's reports
                                   last began holding that pool (report_bounds.c) */
    sl_call_t *streams;         /* SSE subscribers */
    size_t n_streams;
    uint64_t streams_dropped; /* subscribers let go for not reading (events.c) */
    size_t n_waiters;
    bool shutting_down;
    struct event *sig_hup, *sig_term, *sig_int, *exit_timer;
    double shutdown_started_s; /* monotonic, when SIGTERM/SIGINT arrived */
    sl_proxy_t *proxy; /* the provider proxy (proxy.c) */
    sl_limits_api_t *limits; /* action limits (limits_api.c) */
    sl_dashboard_t *dashboard; /* the dashboard's login session (dashboard.c), NULL until one */
    sl_history_t *history;     /* the last hour the dashboard draws (history.c), NULL until one */
    sl_fleet_t *fleet;         /* the four numbers (fleet.c), NULL until the first event */
    sl_anomaly_t *anomaly;     /* per-agent rates and flags (anomaly.c), NULL until one */
    sl_suspend_t *suspend;     /* suspended agents as the backend holds them (suspend.c) */
    sl_watch_t *watch;         /* seed 001's metrics (watch_metrics.c), NULL until one */
    sl_agents_t *agents;       /* the agent names known (agent_registry.c), NULL until one */
    sl_access_log_t *access;   /* the access log and proxied-request counts (access.c) */
    sl_usage_state_t *usage;   /* tokens, cost and latency (usage/), NULL until one */
    struct sl_pacing *pacing;  /* published limits and the slow start (provider_limits/) */
    struct sl_token_store *minted; /* minted agent tokens (tokens_store.c) */
};

/* http.c */
int sl__server_start(sl_server_t *srv, char *err, size_t errlen);
void sl__server_stop(sl_server_t *srv);
/* teardown.c: frees the backend and every feature's state the server holds (not its
 * event base, listeners or config); after sl__server_stop, and once. */
void sl__server_free_state(sl_server_t *srv);
size_t sl__outer_body_limit(const sl_config_t *c);
/* The transport's per-connection limits from `c->server`, max_connections lowered to what
 * the descriptor limit allows. */
sl_httpd_limits_t sl__listener_limits(const sl_config_t *c);
void sl__server_shutdown(sl_server_t *srv);
/* True when the Content-Type value `v` is application/json, any case, with or without
 * parameters (charset). */
bool sl__is_json_media_type(const char *v);

/* reply.c */
/* A call for `req`, watching for the client to leave; NULL after answering 503 (out of
 * memory). */
sl_call_t *sl__call_new(sl_server_t *srv, sl_hreq_t *req);
void sl__call_free(sl_call_t *call);
/* Answers `body` (stolen) as JSON and frees the call. */
void sl__reply_json(sl_call_t *call, int status, json_t *body);
/* Answers ready-made JSON text (the hot paths format it directly) and frees the call. */
void sl__reply_text(sl_call_t *call, int status, const char *json, size_t len);
void sl__reply_error(sl_call_t *call, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Who an error is written for: the lease API's own JSON, or a provider's dialect (the
 * proxy wraps the status in the provider's error shape). */
typedef enum sl_error_dialect {
    SL_DIALECT_LEASE_API = 0,
    SL_DIALECT_PROVIDER,
} sl_error_dialect_t;
/* The HTTP status of result code `rc` in `dialect`, from the one table (errors.def);
 * `*type` (when not NULL) is set to the lease API's error type. Unknown codes: 500
 * "internal". */
int sl__error_status(int rc, sl_error_dialect_t dialect, const char **type);
/* Answers `rc` as errors.def says, with `errmsg` (else sl_strerror(rc)) as the message. */
void sl__reply_engine_error(sl_call_t *call, int rc, const char *errmsg);
void sl__reply_rejected(sl_call_t *call, const char *reason, double retry_after_s, double retry_at);
/* As sl__reply_rejected, naming what binds (`limited_by`, omitted when NULL). */
void sl__reply_rejected_by(sl_call_t *call, const char *reason, const char *limited_by,
                           double retry_after_s, double retry_at);
/* `gone` runs once if the client closes its connection before the call is answered
 * (call->req is NULL by then). */
void sl__call_watch_close(sl_call_t *call, void (*gone)(sl_call_t *call));
/* Frees a call whose client is gone, closing its connection without an answer. */
void sl__call_drop(sl_call_t *call);

/* auth.c */
/* Compares two tokens in time that depends on their lengths only: the one comparison of a
 * presented secret (lease API, proxy, dashboard). */
bool sl__token_equal(const char *a, const char *b);
/* Sets call->admin (the admin token) or call->token (an agent token) from `token`;
 * false when it is neither. */
bool sl__token_identify(sl_call_t *call, const char *token);
/* Sets call->admin or call->token from the bearer token (admin when auth is off).
 * Returns 0 when the call may go on; otherwise it has been answered 401. */
int sl__authenticate(sl_call_t *call);
/* Whether /metrics (open to anyone) may name agents in its per-agent series: with auth
 * off, always; with auth on, only for a scrape carrying the admin token. Never answers. */
bool sl__metrics_names_agents(sl_call_t *call);
bool sl__token_may_act_as(const sl_call_t *call, const char *agent);
/* Who is asking, as a number: one per agent token (a hash of it, never 0), 0 for the
 * admin token and with auth off. What one principal may create is bounded per principal. */
uint64_t sl__call_principal(const sl_call_t *call);
/* The principal of calls made with agent token `t` (sl__call_principal's number). */
uint64_t sl__token_principal(const sl_token_rule_t *t);
bool sl__token_may_use(const sl_call_t *call, const char *role, const char *pool);

/* tokens_api.c: agent tokens at fleet scale (tokens.h, tokens_store.h) */
/* The agent token whose SHA-256 is that of `secret` (the configuration's, then the
 * minted ones), or NULL. O(1). */
sl_token_rule_t *sl__tokens_find(sl_server_t *srv, const char *secret);
/* Configures the backend with c's settings plus the caps of c's and the minted tokens
 * (each capped token's `agent`). -1 when out of memory (cb not called). */
struct sl_token_store;
int sl__tokens_configure(sl_server_t *srv, const sl_config_t *c,
                         const struct sl_token_store *minted, sl_backend_done_cb cb, void *ud);
/* Opens the minted store (at start, after the configuration). -1 with `err`. */
int sl__tokens_start(sl_server_t *srv, char *err, size_t errlen);
/* Reload: whether every minted token resolves against `next` (-1 with `err`; changes
 * nothing); then, once `next` is in force, the minted tokens take its tiers. */
int sl__tokens_reload_check(sl_server_t *srv, const sl_config_t *next, char *err, size_t errlen);
/* Before a reload frees the running configuration: its tokens are kept some minutes more
 * (a call holds a pointer to its token while it reads its body or waits in the queue). */
void sl__tokens_retire(sl_server_t *srv);
void sl__tokens_reloaded(sl_server_t *srv);
void sl__tokens_free(sl_server_t *srv);
/* Reloads the configuration when the tokens_file changed since it was read (housekeeping,
 * every 2 s); a refused version is logged once and not retried until it changes again. */
void sl__tokens_watch(sl_server_t *srv);
/* GET, POST /v1/admin/tokens and DELETE /v1/admin/tokens/ID (the admin token only). */
void sl__handle_tokens(sl_call_t *call, char **seg, int method, const char *query);

/* leases.c */
void sl__handle_lease_post(sl_call_t *call);
/* POST /v1/estimate (estimate.c): a provider request body counted as the proxy counts it. */
void sl__handle_estimate(sl_call_t *call);
void sl__handle_lease_action(sl_call_t *call, const char *id, const char *action, int method);
void sl__handle_ticket(sl_call_t *call, const char *id, int method, const char *query);
void sl__waiters_on_event(sl_server_t *srv, const sl_event_t *ev);
void sl__waiters_shutdown(sl_server_t *srv);
json_t *sl__grant_json(const sl_decision_t *d, const char *pool);
int sl__parse_id(const char *s, char prefix, uint64_t *out);

/* admit.c: the one admission path of a lease, for the lease API and the proxy alike. */
/* Why a lease was not admitted. The lease API answers it as its JSON error (429s in its
 * rejected shape); the proxy in the provider's error shape. */
typedef struct sl_refusal {
    int status;           /* 400, 403 or 429 */
    const char *type;     /* static: invalid_request, forbidden, too_many_agents, suspended */
    char message[400];    /* names the claim as the caller spelt it, and its value */
    double retry_after_s; /* 429: when asking again may succeed; else -1 */
} sl_refusal_t;
/* True when the call's token may ask for `priority` (its `priorities` list; without
 * one, priorities whose factor is at most 1). Admin and auth off: any. */
bool sl__token_may_use_priority(const sl_call_t *call, const char *priority);
/* The largest `unblocks` the call may claim: its token's max_unblocks, or the
 * configuration's max_unblocks without an agent token (admin, auth off). */
int64_t sl__max_unblocks(const sl_call_t *call);
/* The token's bounds on the claims in `r` that need nothing read first: the agent acted
 * as (r->agent, required), the pool (when r->pool is neither NULL nor ""), r->unblocks
 * and r->priority. Changes nothing. Returns 0, or -1 with `ref` filled (400 or 403),
 * the claim named as `dialect`'s caller spells it. */
int sl__admit_claims(const sl_call_t *call, sl_error_dialect_t dialect, const sl_request_t *r,
                     sl_refusal_t *ref);
/* Admits `r` for sl_backend_request: sl__admit_claims, then the role — `task_role`, when
 * the caller knows r->task's registered role (NULL: the backend's request resolves a
 * task's role itself, the token's roles going with it as roles_allowed), replaces
 * r->role (a different r->role is 400) — which the token must be allowed (403), the
 * graph's count of dependants capped at the token's max_unblocks, and the agent itself: a
 * new name past the agents bounds or a suspended agent is 429. On 0, r->role may point at
 * `task_role`, which must outlive the request, and r->roles_allowed at the token's roles;
 * the agent is noted as active (the only change). On -1, `ref` says why and nothing was
 * asked. */
int sl__admit(sl_call_t *call, sl_error_dialect_t dialect, sl_request_t *r,
              const char *task_role, sl_refusal_t *ref);

/* report_bounds.c: what a settle report may do (the file's top says the rules). Checks
 * and bounds `s` (its header_count entries of `names`/`values`, rewritten in place;
 * clamped values are written to `scratch`, one slot per header) for a lease of `pool`
 * (NULL: not known here). Rate-limit headers the caller may not resync from are left
 * out and counted in `*ignored`. Returns 0, or -1 with `status` 400 and `msg` naming
 * the field, the value and the bound. */
int sl__bound_settle(const sl_call_t *call, const char *pool, sl_settle_t *s,
                     const char **names, const char **values, char (*scratch)[24],
                     size_t *ignored, int *status, char *msg, size_t n);
/* Bounds the `*-limit` headers among `count` rate-limit headers reported for `pool`
 * (NULL: not known here) by the one rule every source shares (design.md, "Reports and
 * claims"): the configured limit is a ceiling unless the pool says `limits_from:
 * provider`; `from_provider` is true for the proxy's own upstream answers, false for an
 * agent's report. Rewrites `names`/`values` in place (a bounded value is written to
 * `scratch`, one slot per header; a header that cannot be bounded is dropped) and
 * returns how many are kept. Other headers are kept as they are. */
size_t sl__bound_limit_headers(const sl_server_t *srv, const char *pool, bool from_provider,
                               const char **names, const char **values, size_t count,
                               char (*scratch)[24]);

/* state.c */
void sl__handle_pools(sl_call_t *call, const char *pool);
/* GET /v1/agents[?limit=N&cursor=NAME] (agent_list.c): a page of agents by name. */
void sl__handle_agents(sl_call_t *call, const char *query);
/* One agent as GET /v1/agents writes it, its anomaly flag included (NULL: out of memory). */
json_t *sl__agent_json(sl_server_t *srv, const sl_agent_info_t *a);
void sl__handle_tasks(sl_call_t *call, const char *task, int method);
void sl__handle_readyz(sl_call_t *call);
void sl__handle_metrics(sl_call_t *call);

/* access.c: the access log and the proxied requests by endpoint and status. */
/* (Re)opens the access log at `path` ("stderr", a file appended to, or NULL: none); the
 * counts are kept. Returns 0, or -1 with `err` naming the key and the path (the log
 * stays where it was). */
int sl__access_log_open(sl_server_t *srv, const char *path, char *err, size_t errlen);
/* Gives `call` a record when the access log is on or `proxied`; its line is written and
 * (proxied) counted when the request finishes. */
void sl__access_begin(sl_call_t *call, bool proxied);
/* What the call is about, for its access log line (NULL, "" and 0 leave a field alone). */
void sl__access_note(sl_call_t *call, const char *agent, const char *pool, uint64_t lease);
/* The proxy's endpoint (a static label such as "/anthropic/v1/messages") it is counted as. */
void sl__access_route(sl_call_t *call, const char *route);
/* The call is being freed: its record no longer points at it. */
void sl__access_call_gone(sl_call_t *call);
void sl__access_metrics_render(const sl_server_t *srv, struct evbuffer *out);
void sl__access_log_free(sl_server_t *srv);

/* usage/: tokens, cost and latency for chargeback (docs/observe.md "Chargeback"). */
/* A call of `agent` in `pool` naming `model` (NULL: unknown) was settled with `s`'s
 * tokens: counted per agent, team and model, priced, and added to the day's rollup. */
void sl__usage_record(sl_server_t *srv, const char *agent, const char *pool, const char *model,
                      const sl_settle_t *s);
/* A proxied call of `pool` took `upstream_s` from sending to its last byte; a stream's
 * first output event came after `first_token_s` (< 0: not a stream, or none came). */
void sl__usage_latency(sl_server_t *srv, const char *pool, double upstream_s, double first_token_s);
/* The team `agent` is counted in: its caps.teams membership, else "default". */
const char *sl__usage_team(const sl_server_t *srv, const char *agent);
/* Appends the token, cost and latency series; agents by name only with `name_agents`. */
void sl__usage_metrics_render(sl_server_t *srv, struct evbuffer *out, bool name_agents);
/* GET /v1/usage?by=team|agent|model&since=... (admin). */
void sl__handle_usage(sl_call_t *call, const char *query);
void sl__usage_free(sl_server_t *srv);

/* log.c: the backends' messages (sl_backend_set_log) as sluiced's log lines. */
void sl__log_backend(sl_backend_log_level_t level, const char *msg);

/* reload.c */
void sl__handle_reload(sl_call_t *call);
/* Rereads srv->config_path; on -1 (err says why) the running configuration is unchanged. */
int sl__server_reload(sl_server_t *srv, char *err, size_t errlen);

/* histogram.c: a Prometheus histogram of at most SL_HIST_MAX_BOUNDS bounds. */
#define SL_HIST_MAX_BOUNDS 15
typedef struct sl_hist {
    uint64_t counts[SL_HIST_MAX_BOUNDS + 1]; /* per bound, not cumulative; [n] is +Inf */
    double sum;
    uint64_t count;
} sl_hist_t;
/* Counts `v` in the first of the `n` ascending `bounds` it does not exceed (or +Inf). */
void sl__hist_observe(sl_hist_t *h, const double *bounds, size_t n, double v);
/* Writes `metric_bucket{key="name",le="…"}` for each bound and +Inf (cumulative), then
 * `metric_sum` and `metric_count` with the same label; `name` is escaped. */
void sl__hist_write(struct evbuffer *out, const char *metric, const char *key, const char *name,
                    const sl_hist_t *h, const double *bounds, size_t n);

/* metrics.c */
sl_metrics_t *sl__metrics_new(void);
void sl__metrics_free(sl_metrics_t *m);
void sl__metrics_on_event(sl_metrics_t *m, const sl_event_t *ev);
/* Appends the Prometheus text for `pools` and the event counters to `out`. */
void sl__metrics_render(const sl_metrics_t *m, const sl_pool_info_t *pools, size_t n_pools,
                        size_t n_waiters, struct evbuffer *out);

/* jsonfmt.c: the hot answers (grant, settle) written without printf. */
typedef struct sl_jbuf {
    char buf[768];
    size_t len;
    bool overflow; /* something did not fit: the caller falls back to jansson */
} sl_jbuf_t;
void sl__jb_lit(sl_jbuf_t *b, const char *s);
/* `n` bytes of `s` as they are. */
void sl__jb_mem(sl_jbuf_t *b, const char *s, size_t n);
void sl__jb_u64(sl_jbuf_t *b, uint64_t v);
void sl__jb_i64(sl_jbuf_t *b, int64_t v);
/* Integral values as integers, others as %.15g; NaN and infinities as 0. */
void sl__jb_num(sl_jbuf_t *b, double v);
/* A time or duration in seconds, to the microsecond (at least as exact as %.15g for
 * Unix times), trailing zeros dropped. */
void sl__jb_seconds(sl_jbuf_t *b, double v);
/* `key` written as it is (JSON text such as `,"ttl":`), then the value as above. */
void sl__jb_key_i64(sl_jbuf_t *b, const char *key, int64_t v);
void sl__jb_key_num(sl_jbuf_t *b, const char *key, double v);
void sl__jb_key_seconds(sl_jbuf_t *b, const char *key, double v);

/* agent_registry.c: agent names bounded per token and in all, forgotten when idle */
/* When `agent` is new and agents.max_per_token (for `principal`, sl__call_principal) or
 * agents.max_total is reached: writes what binds, naming the key and its value, into
 * `why`, the wait into *retry_after_s, and returns true (nothing is noted). Else notes the
 * agent as active now and returns false. */
bool sl__agents_refused(sl_server_t *srv, const char *agent, uint64_t principal, char *why,
                        size_t whylen, double *retry_after_s);
/* Notes the agent an event names as active (known from then on, made known by no token). */
void sl__agents_on_event(sl_server_t *srv, const sl_event_t *ev);
/* Offers the backend the agents idle agents.forget_idle_s (at most 4096 a call); those it
 * forgets leave the registry and the anomaly watch. Once a second. */
void sl__agents_sweep(sl_server_t *srv);
void sl__agents_metrics_render(const sl_server_t *srv, struct evbuffer *out);
void sl__agents_free(sl_server_t *srv);

/* events.c */
void sl__events_on_backend_event(const sl_event_t *ev, void *ud);
int sl__events_open_log(sl_server_t *srv, char *err, size_t errlen);
void sl__events_flush(sl_server_t *srv);
void sl__events_subscribe(sl_call_t *call);
void sl__events_close_streams(sl_server_t *srv);
void sl__events_ping_streams(sl_server_t *srv);
/* Appends the event streams' gauge and the count of subscribers let go to `out`. */
void sl__events_metrics_render(const sl_server_t *srv, struct evbuffer *out);
void sl__owners_forget_old(sl_server_t *srv);
/* The owner record of `id` in `map` (lease_owner or ticket_owner), a blank one made when
 * there is none yet (an answer can come before its event); NULL when out of memory. */
sl_owner_t *sl__owner_obtain(sl_idmap_t *map, uint64_t id);
/* Writes `j` (stolen; NULL is ignored) to the event log and to every /v1/events subscriber
 * as an event named `event` (events that do not come from the backend, e.g. limit_adapted). */
void sl__events_publish(sl_server_t *srv, const char *event, json_t *j);
/* As sl__events_publish, for an event about `agent` (NULL: pool-wide): only subscribers
 * that see that agent's events get it. */
void sl__events_publish_about(sl_server_t *srv, const char *event, const char *agent, json_t *j);

/* limits_api.c: the /v1/limits routes over the action-limits library (docs/limits.md). */
/* (Re)builds the limit set from srv->config.limits. A limit whose configuration is the
 * same as the running one keeps its per-key state; a new or changed one starts fresh; a
 * removed one is gone (checks held on it are answered 404 when they re-check). Returns 0,
 * or -1 with `err` (out of memory; the running set stays). */
int sl__limits_apply(sl_server_t *srv, char *err, size_t errlen);
/* Forgets every action-limit key at rest (it would answer as a fresh key): housekeeping. */
void sl__limits_sweep(sl_server_t *srv);
/* Answers every check still held (503) and stops their timers. */
void sl__limits_shutdown(sl_server_t *srv);
void sl__limits_free(sl_server_t *srv);
/* GET /v1/limits (name NULL), GET /v1/limits/NAME, POST /v1/limits/NAME/{check,release,report}. */
void sl__handle_limits(sl_call_t *call, const char *name, const char *action, const char *query);
/* Appends the limits' Prometheus lines to `out`. */
void sl__limits_metrics_render(const sl_server_t *srv, struct evbuffer *out);

/* json_in.c: request validation; each returns 0, or -1 with `msg` naming field and value. */
int sl__json_check_fields(const json_t *obj, const char *const *allowed, char *msg, size_t n);
int sl__json_get_int(const json_t *obj, const char *field, bool required, int64_t *out, char *msg,
                     size_t n);
int sl__json_get_number(const json_t *obj, const char *field, bool required, double min,
                        bool min_exclusive, double *out, char *msg, size_t n);
int sl__json_get_string(const json_t *obj, const char *field, bool required, size_t max_len,
                        bool name_chars, const char **out, char *msg, size_t n);
int sl__json_get_bool(const json_t *obj, const char *field, bool *out, char *msg, size_t n);
bool sl__name_ok(const char *s, size_t max_len);
/* Replaces every byte of `s` that is not part of a valid UTF-8 sequence with '?', so
 * text that echoes a client's bytes can always be sent as a JSON string. */
void sl__utf8_scrub(char *s);
/* True when `s` is valid UTF-8 (RFC 3629), as every JSON string sluiced reads is. */
bool sl__utf8_valid(const char *s);

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

/* state.c: one pool as GET /v1/pools writes it (NULL when out of memory). */
json_t *sl__pool_json(sl_backend_t *backend, const sl_pool_info_t *p);
/* events.c: one engine event as the event log and /v1/events write it. */
json_t *sl__event_json(const sl_event_t *ev);

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

/* proxy.c: the provider proxy (/anthropic/..., /openai/...). */
/* Sets up the proxy on srv->base: the upstream client, the tokenizer (unless
 * `proxy.estimator: bytes`) and its view of backend events (it wraps the event callback,
 * passing every event on to sl__events_on_backend_event). Returns 0, or -1 with `err` set
 * (a missing or invalid vocabulary names its path). */
int sl__proxy_init(sl_server_t *srv, char *err, size_t errlen);
/* Loads the tokenizer vocabulary if configuration `c` estimates with it and none is
 * loaded yet (a reload from `estimator: bytes`). Returns 0, or -1 with `err` naming the
 * path; nothing changes then. */
int sl__proxy_estimator_ready(sl_server_t *srv, const sl_config_t *c, char *err, size_t errlen);
/* sluice_proxy_estimator_info: the estimator in use and the vocabulary's path. */
void sl__proxy_metrics_render(const sl_server_t *srv, struct evbuffer *out);
/* Answers every proxied call still waiting or streaming (503 / an SSE error event),
 * settling what each used. With `drain`, calls the provider is already answering are
 * left to finish (sl__proxy_in_flight counts them); the rest are answered. */
void sl__proxy_shutdown(sl_server_t *srv, bool drain);
size_t sl__proxy_in_flight(const sl_server_t *srv);
/* Frees the proxy (after shutdown). NULL srv->proxy is allowed. */
void sl__proxy_free(sl_server_t *srv);
/* Handles `call` when its path is a proxy endpoint (segment 0 "anthropic" or "openai")
 * and returns true; false leaves the call alone. The body has not been read and auth
 * has not been checked: the proxy does both in the provider's own error shapes. */
bool sl__proxy_route(sl_call_t *call, int n, char **seg, const char *query);
/* The largest body the transport must let through for the proxy. */
size_t sl__proxy_body_limit(const sl_config_t *c);
/* The proxy's tokenizer, loaded on first use; NULL when no vocabulary can be loaded (said
 * once on stderr). */
sl_tokenizer_t *sl__proxy_tokenizer(sl_server_t *srv);

/* proxy_usage.c: what a provider's answer says it used (pure functions, no I/O). */
typedef struct sl_usage {
    int64_t input_tokens; /* uncached input (OpenAI: prompt_tokens - cached_tokens) */
    int64_t output_tokens;
    int64_t cache_creation_input_tokens;
    int64_t cache_read_input_tokens;
    bool have_input;  /* the input side was reported */
    bool have_output; /* the final output count was reported */
    int64_t output_seen_tokens; /* streams: a rough count of the output seen so far */
} sl_usage_t;
/* Reads `usage` from a whole JSON response body of `api`; unknown shapes leave `u` alone. */
void sl__usage_from_body(sl_upstream_api_t api, const char *body, size_t len, sl_usage_t *u);
/* Reads one SSE event (its bytes up to, not including, the blank line) of `api` into
 * `u`. Returns false when the event must not reach the client: the OpenAI usage-only
 * chunk when `drop_usage_chunk` (sluice asked for it, the client did not). */
bool sl__usage_from_event(sl_upstream_api_t api, const char *ev, size_t len,
                          bool drop_usage_chunk, sl_usage_t *u);
/* The top-level member `key` of the JSON object whose text is `s`: a pointer to its
 * value's first byte (not validated), or NULL. */
const char *sl__usage_member_at(const char *s, size_t n, const char *key);
/* That member parsed (the caller decrefs), or NULL when absent or not JSON. */
json_t *sl__usage_member(const char *s, size_t n, const char *key);
/* The value of an SSE event's first line starting with `field` ("event:", "data:"),
 * blanks and a trailing CR cut; NULL when there is none. */
const char *sl__sse_field(const char *ev, size_t len, const char *field, size_t *vlen);

/* proxy_responses.c: the OpenAI Responses API's usage (pure functions, no I/O). */
/* Reads a whole Response body's `usage` into `u`; input is settled net of cached_tokens,
 * which are cache reads; output includes reasoning tokens. */
void sl__responses_usage_from_body(const char *body, size_t len, sl_usage_t *u);
/* Reads one SSE event of a Responses stream into `u` (the usage of response.completed,
 * .incomplete or .failed; every *.delta counts toward output_seen_tokens). Every event
 * goes on to the client. */
void sl__responses_usage_from_event(const char *ev, size_t len, sl_usage_t *u);
/* The data of a Responses stream's `error` event for an error body (OpenAI's shape
 * `{"error":{...}}`, or any text): `{"type":"error","code","message","param","error"}` —
 * the documented event's fields, and `error`, from which the SDKs raise an APIError.
 * The caller frees; NULL when out of memory. */
char *sl__responses_error_event(const char *body, size_t len);
struct evbuffer;
/* Moves a Responses stream's bytes from `in` to `out`: events that carry no usage as
 * their bytes arrive (once their `event:` line is in; `*through` is true while one is
 * part-way, starting false), the usage-carrying last event once whole, read into `u`.
 * Bytes that cannot be placed yet stay in `in`. */
void sl__responses_take_events(struct evbuffer *in, struct evbuffer *out, bool *through,
                               sl_usage_t *u);

/* proxy_routes.c: what a proxied path is. */
typedef enum sl_proxy_kind {
    SL_PROXY_NONE = 0,     /* not an endpoint the proxy serves: refused naming the path */
    SL_PROXY_CALL,         /* Messages or Chat Completions: leased and settled */
    SL_PROXY_RESPONSES,    /* OpenAI Responses: leased and settled */
    SL_PROXY_COUNT_TOKENS, /* passed through without a lease */
    SL_PROXY_MODELS,       /* GET, passed through without a lease */
    SL_PROXY_HELLO,        /* Anthropic's /api/hello connectivity check: answered here */
    SL_PROXY_EMBEDDINGS,   /* OpenAI embeddings: leased on input, settled (proxy_embeddings.c) */
    SL_PROXY_MODERATIONS,  /* OpenAI moderations: a lease of one request, no tokens */
} sl_proxy_kind_t;
/* Resolves the request's path as it came (path[0, len): raw bytes, no query, nothing
 * decoded) against the documented spellings of `api`'s endpoints ("/anthropic/..." or
 * "/openai/...", with or without "/v1"); writes the provider's path into `upstream`.
 * Anything else, dot segments, empty segments and encoded slashes included, is
 * SL_PROXY_NONE (proxy_routes.c). */
sl_proxy_kind_t sl__proxy_resolve(sl_upstream_api_t api, const char *path, size_t len,
                                  char *upstream, size_t upstream_size);
/* A model or object id: one raw path segment decoded into `id` (room for 257 bytes);
 * false for an empty or overlong id, a byte outside [A-Za-z0-9._:@-] once decoded, or a
 * dot segment (proxy_routes.c). */
bool sl__proxy_id_decode(const char *raw, size_t len, char *id);

/* True when a 429 body of `api` is a spend/budget cap rather than a rate limit
 * (Anthropic: "spend limit" wording and no retry-after; OpenAI: insufficient_quota). */
bool sl__usage_is_spend_cap(sl_upstream_api_t api, const char *body, size_t len,
                            bool have_retry_after);

/* proxy_output.c: the output a proxied call asks the provider to hold (pure functions). */
#define SL_PROXY_MAX_CHOICES 128 /* OpenAI's bound on `n` */
typedef struct sl_proxy_output {
    const char *field;         /* the body's per-choice limit: max_tokens,
                                  max_completion_tokens or max_output_tokens (static) */
    int64_t per_choice_tokens; /* its value; 0 when the call names none */
    int64_t choices;           /* OpenAI Chat Completions' `n`; 1 otherwise */
    bool cappable;             /* the limit may be lowered (not under Anthropic's
                                  extended thinking, whose budget must stay below it) */
} sl_proxy_output_t;
/* Reads the output limit of a call of `api` (`responses`: the Responses API) from its
 * body. Returns 0, or -1 with `err` naming the field (an `n` that is not an integer
 * 1..SL_PROXY_MAX_CHOICES). */
int sl__proxy_output_read(sl_upstream_api_t api, bool responses, const json_t *body,
                          sl_proxy_output_t *out, char *err, size_t errlen);
/* What the provider will hold for the call's output: the per-choice limit (4096 when
 * none is named) times the choices. */
int64_t sl__proxy_output_tokens(const sl_proxy_output_t *o);
/* Lowers the body's per-choice limit to floor(reserved_tokens / choices) (at least 1)
 * when that is below the call's own. Returns 1 when the body changed, 0 when not, -1
 * when out of memory. */
int sl__proxy_output_cap(json_t *body, const sl_proxy_output_t *o, int64_t reserved_tokens);

/* proxy_continue.c: one client answer from several capped Anthropic Messages calls
 * (proxy.continue_capped). Pure functions on JSON; the proxy does leases and I/O. */
typedef struct sl_cont sl_cont_t;
/* A continuation state for a call whose body is `client_body` (copied) and whose own
 * max_tokens is `client_max_tokens`; NULL when out of memory. */
sl_cont_t *sl__cont_new(const json_t *client_body, int64_t client_max_tokens);
void sl__cont_free(sl_cont_t *c);
/* The next part is sent with max_tokens `cap_tokens`. */
void sl__cont_round(sl_cont_t *c, int64_t cap_tokens);
/* A streamed part: one SSE event (its bytes up to the blank line) in, what the client
 * gets appended to `out` (events renumbered, joined, held back or dropped). */
void sl__cont_event(sl_cont_t *c, const char *ev, size_t len, struct evbuffer *out);
/* After a streamed part: it was cut at its cap and the answer goes on. */
bool sl__cont_wants_more(const sl_cont_t *c);
/* A whole (non-stream) part's body: 1 when the answer goes on, 0 when it is complete
 * (sl__cont_answer), -1 when it is not a message this understands (pass it on). */
int sl__cont_absorb(sl_cont_t *c, const char *body, size_t len);
/* The joined answer as JSON text (the caller frees), or NULL when out of memory. */
char *sl__cont_answer(sl_cont_t *c);
/* The next part's body as JSON text (the caller frees; NULL when out of memory), and in
 * *max_tokens_left what the client's limit leaves. */
char *sl__cont_next_body(sl_cont_t *c, int64_t *max_tokens_left);

/* proxy_prefix.c: the SHA-256 (64 hex digits and a NUL in `out`) of the prompt prefix
 * a call of `api` expects from the provider's cache: Anthropic's blocks up to the last
 * cache_control, OpenAI's tools and messages before the newest. Returns 1 when there
 * is such a prefix, 0 when there is none (`out` untouched), -1 when out of memory. */
int sl__prefix_hash(sl_upstream_api_t api, const json_t *body, char out[65]);

#endif /* SL_SERVER_H */
