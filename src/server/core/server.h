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
#include "feature.h"
#include "httpd.h"
#include "idmap.h"
#include "log.h"
#include "namemap.h"
#include "redis.h"

struct evbuffer;

typedef struct sl_server sl_server_t;
typedef struct sl_call sl_call_t;
typedef struct sl_metrics sl_metrics_t;
typedef struct sl_access sl_access_t;
typedef struct sl_access_log sl_access_log_t;

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
    sl_idmap_t lease_owner;     /* lease -> sl_owner_t */
    sl_idmap_t ticket_owner;    /* ticket -> sl_owner_t */
    sl_namemap_t report_holds;  /* "pool \x1f token" -> double: when that token's reports
                                   last began holding that pool (report_bounds.c) */
    sl_call_t *streams;         /* SSE subscribers */
    size_t n_streams;
    uint64_t streams_dropped; /* subscribers let go for not reading (events.c) */
    bool shutting_down;
    struct event *sig_hup, *sig_term, *sig_int, *exit_timer;
    double shutdown_started_s; /* monotonic, when SIGTERM/SIGINT arrived */
    sl_access_log_t *access;   /* the access log and proxied-request counts (access.c) */
    struct sl_token_store *minted; /* minted agent tokens (tokens_store.c) */
    struct sl_keys_memo *keys_memo; /* request ids' keys (keys.c), NULL until one */
    /* Each feature's state, by its sl_feature_id_t: NULL until the feature sets it; the
     * feature's own files alone know what it points to (features.def). */
    void *slot[SL_FEATURE_COUNT];
};

/* features.c: a feature's slot holding a zeroed struct of `size` bytes, made on first
 * call (NULL when out of memory); the feature's `free` hook frees it. */
void *sl__slot_make(sl_server_t *srv, sl_feature_id_t id, size_t size);

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

/* agent_series.c: per-agent Prometheus series of bounded cardinality (the fleet's and
 * usage's per-agent metrics). */
typedef struct sl_agent_value {
    const char *agent;
    double value;
} sl_agent_value_t;
/* Writes `metric{agent="A"<labels>} v` for the `top_n` largest nonzero of the `n` values
 * (sorted in place, ties by name) and, with `other` and more agents with a nonzero value,
 * one `agent="other"` series with the sum of the rest: at most top_n + 1 series. `labels`
 * is "" or text starting with a comma (`,metric="requests"`). */
void sl__agent_series(struct evbuffer *out, const char *metric, const char *labels,
                      sl_agent_value_t *vals, size_t n, size_t top_n, bool other);
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

/* admit.c: the one admission path of a lease, for the lease API and the proxy alike. */
/* Why a lease was not admitted. The lease API answers it as its JSON error (429s in its
 * rejected shape); the proxy in the provider's error shape. */
typedef struct sl_refusal {
    int status;           /* 400, 403 or 429 */
    const char *type;     /* static: invalid_request, forbidden, too_many_agents, suspended */
    char message[400];    /* names the claim as the caller spelt it, and its value */
    double retry_after_s; /* 429: when asking again may succeed; else -1 */
} sl_refusal_t;
/* Fills `ref` (retry_after_s -1) and returns -1: for an admission check's refusal. */
int sl__refuse(sl_refusal_t *ref, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
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
 * graph's count of dependants capped at the token's max_unblocks, and the agent itself:
 * every feature's admit_check (sl__admit_agent; the fleet's: a new name past the agents
 * bounds or a suspended agent is 429). On 0, r->role may point at `task_role`, which must
 * outlive the request, and r->roles_allowed at the token's roles; the agent is noted as
 * active (the only change). On -1, `ref` says why and nothing was asked. */
int sl__admit(sl_call_t *call, sl_error_dialect_t dialect, sl_request_t *r,
              const char *task_role, sl_refusal_t *ref);

/* keys.c: a pool of several keys (design.md, "A pool of several keys").
 * sl__keys_request is sl_backend_request for an admitted request: when req->pool names a
 * key group, the key that should grant soonest (equal ETAs: the emptiest) is written as
 * "POOL:KEY" into `pool_out` (at least 129 bytes, living until `cb` has run) and asked;
 * otherwise the request goes to its pool as it is. `cb` may run before this returns. */
void sl__keys_request(sl_server_t *srv, const sl_request_t *req, char *pool_out,
                      size_t pool_out_size, sl_backend_decision_cb cb, void *ud);
/* A ticket queued on key pool `queued_on` was granted by key pool `granted_on` (one
 * queue over the keys): counted for /metrics (sluice_pool_key_taken_total) when they
 * differ and `granted_on` is a key's pool. */
void sl__keys_note_grant(sl_server_t *srv, const char *queued_on, const char *granted_on);
/* Frees what keys.c keeps (the request ids' keys, the counts). */
void sl__keys_free(sl_server_t *srv);
/* The key name of pool `pool` ("POOL:KEY" -> KEY), or NULL for a pool of one key. */
const char *sl__key_name(const sl_config_t *c, const char *pool);
/* Whether `name` is a pool of several keys (its keys are the pools "NAME:KEY"). */
bool sl__is_key_group(const sl_config_t *c, const char *name);
/* GET /v1/pools: adds "key" and "key_of" to the JSON of a key's pool; returns it. */
json_t *sl__keys_describe(const sl_config_t *c, json_t *pool_json);
/* /metrics: sluice_pool_key{pool, key_of, key} 1 per key (the keys' own series are
 * their pools', pool="POOL:KEY"; this joins them to their pool and key). */
void sl__keys_metrics_render(const sl_server_t *srv, struct evbuffer *out);
/* GET /v1/pools/GROUP: {"name": GROUP, "keys": [each key's pool JSON]} from `pools`. */
json_t *sl__keys_pool_json(sl_server_t *srv, const char *group, const sl_pool_info_t *pools,
                           size_t n);

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
/* One pool as GET /v1/pools writes it (NULL when out of memory). */
json_t *sl__pool_json(sl_backend_t *backend, const sl_pool_info_t *p);
/* One agent as GET /v1/agents writes it: the engine's fields, then each feature's
 * (annotate_agent: the fleet's anomaly flag and suspension). NULL when out of memory. */
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

/* log.c: the backends' messages (sl_backend_set_log) as sluiced's log lines. */
void sl__log_backend(sl_backend_log_level_t level, const char *msg);

/* reload.c */
void sl__handle_reload(sl_call_t *call);
/* Rereads srv->config_path; on -1 (err says why) the running configuration is unchanged. */
int sl__server_reload(sl_server_t *srv, char *err, size_t errlen);

/* histogram.c: Prometheus text helpers. */
/* Writes `s` escaped as a Prometheus label value (\, " and newline). */
void sl__prom_label(struct evbuffer *out, const char *s);
/* A Prometheus histogram of at most SL_HIST_MAX_BOUNDS bounds. */
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
                        struct evbuffer *out);

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

/* events.c */
void sl__events_on_backend_event(const sl_event_t *ev, void *ud);
/* One engine event as the event log and /v1/events write it (NULL when out of memory). */
json_t *sl__event_json(const sl_event_t *ev);
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

#endif /* SL_SERVER_H */
