/* feature.h - what a feature of sluiced registers with the core: its routes, its share of
 * the event bus, metrics, ticks, reload and teardown (features.def lists the features).
 *
 * The core (core/) knows no feature by name. It walks the table `sl__features` in the
 * order of features.def for every step of a server's life, and a feature reaches the core
 * only through its `sl_feature_t` and the core's own header (server.h). Every hook may be
 * NULL: a feature fills in what it has. A feature never includes another feature's
 * header; what one feature tells another goes over the bus (sl__bus_publish), and what
 * the core must ask a feature (is this agent suspended?) is a hook here (admit_check).
 *
 * Adding a feature: a folder src/server/NAME/ with a file NAME_feature.c defining
 * `const sl_feature_t sl_feature_NAME`, one line SL_FEATURE(NAME, "summary") in
 * features.def, its sources in src/server/CMakeLists.txt and its row in
 * tests/architecture/check_layers.py (docs/architecture.md, "The server's house").
 */
#ifndef SL_FEATURE_H
#define SL_FEATURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/engine.h>

struct evbuffer;
struct sl_server;
struct sl_call;
struct sl_config;
struct sl_config_ctx;
struct sl_config_section;
struct sl_pool_bounds;
struct sl_refusal;
struct yaml_document_s;
struct yaml_node_s;
struct json_t;

/* One number per feature, in features.def's order: the index of its state slot
 * (sl_server_t.slot) and of its entry in sl__features. */
typedef enum sl_feature_id {
#define SL_FEATURE(name, summary) SL_FEATURE_ID_##name,
#include "features.def"
#undef SL_FEATURE
    SL_FEATURE_COUNT
} sl_feature_id_t;

/* Who may call a route. */
typedef enum sl_route_auth {
    SL_ROUTE_TOKEN = 0, /* a bearer token (admin or agent), else 401; the handler checks
                           what that token may do */
    SL_ROUTE_OPEN,      /* anyone (health, readiness, metrics) */
} sl_route_auth_t;

/* One endpoint of the /v1 API (or the health routes): the path as segments ("*" matches
 * any one segment), the methods allowed, and the handler. The router (core/http.c) finds
 * the first route whose segments match (the core's own, then each feature's in
 * features.def's order); then authenticates (auth), checks the Content-Type and reads
 * the body of a POST or PUT (required unless body_optional), answers 405 with `allow` when
 * the method is not listed, and calls `fn` with the path's segments (decoded), the method
 * (sl_http_method_t; HEAD as GET) and the query string (NULL when none). */
typedef struct sl_route {
    int n;              /* how many segments the path has (1-4) */
    const char *seg[4]; /* "*": any one segment */
    const char *allow;  /* the methods, as the Allow header lists them: "GET, DELETE" */
    sl_route_auth_t auth;
    bool body_optional; /* a POST may come without a body (admin actions) */
    void (*fn)(struct sl_call *call, char **seg, int method, const char *query);
    /* The body a POST or PUT may carry (NULL: the lease API's body_limit_bytes); the
     * feature's body_limit hook must say the same for the path, for the transport. */
    size_t (*body_limit)(const struct sl_config *c);
} sl_route_t;

/* ---- the event bus -------------------------------------------------------------------- */

/* What the core and the features publish (sl__bus_publish) and every feature's on_event
 * receives, in features.def's order, after the core's own subscribers. Pointers are
 * borrowed for the call only. */
typedef enum sl_bus_kind {
    SL_BUS_ENGINE,      /* an engine event from the backend (`engine`) */
    SL_BUS_DECISION,    /* a lease request was decided (lease API or proxy): `decision` */
    SL_BUS_LIMIT_CHECK, /* an action-limit check was answered: `limit_check` */
    SL_BUS_TASK_WRITE,  /* the backend took a task write (PUT or DELETE): `task_write` */
    SL_BUS_USAGE,       /* a call was settled with what it used (lease API, proxy): `usage` */
    SL_BUS_UPSTREAM,    /* a proxied call's answer ended (proxy): `upstream` */
    SL_BUS_ACCELERATION, /* the provider refused a proxied call with an acceleration-limit
                            429, not a full bucket (proxy): `acceleration` */
    SL_BUS_LIMITS,       /* the action limits were (re)built from the configuration, at start
                            and on reload (limits): `limits`, the configured names */
} sl_bus_kind_t;

typedef struct sl_bus_event {
    sl_bus_kind_t kind;
    union {
        const sl_event_t *engine;
        struct {
            const char *task; /* the task the request named, or NULL */
            const sl_decision_t *d;
        } decision;
        struct {
            const char *limit;
            const char *agent;
            bool allowed;
            bool delayed;         /* the check was held (on_limit: queue) before its answer */
            double retry_after_s; /* a denial's; < 0: never */
        } limit_check;
        struct {
            const char *id;
            bool put; /* false: deleted */
            sl_task_state_t state;
            const char *const *deps;
            size_t n_deps;
        } task_write;
        struct {
            const char *agent; /* the lease's agent and pool ("" when not known) */
            const char *pool;
            const char *model; /* the model the request named, NULL when none */
            const sl_settle_t *s; /* the tokens the provider billed */
        } usage;
        struct {
            const char *pool;
            double upstream_s;    /* from sending to the answer's last byte */
            double first_token_s; /* a stream's first output event after sending; < 0: none */
        } upstream;
        struct {
            const char *pool;
        } acceleration;
        struct {
            const char *const *names;
            size_t n;
        } limits;
    };
} sl_bus_event_t;

/* What admit_check is asked about. */
typedef enum sl_admit_kind {
    SL_ADMIT_LEASE,  /* a lease (lease API, proxy): sl__admit */
    SL_ADMIT_ACTION, /* an action-limit check: sl__admit_agent */
} sl_admit_kind_t;

/* ---- the table ------------------------------------------------------------------------ */

typedef struct sl_feature {
    const char *name; /* its folder's name */

    /* Configuration: its section of the YAML, its struct, its pool keys (config.h,
     * sl_config_section_t; NULL: none), defined in its config_*.c. The section's struct is
     * the feature's own, kept in c->feature[SL_FEATURE_ID_NAME]: the core's sl_config_t
     * knows none of their shapes. What another feature needs of a section comes over the
     * bus (the limits' names: SL_BUS_LIMITS) or is a core setting the section sets (the
     * fleet's metrics_top_agents). */
    const struct sl_config_section *config;

    /* The backend's settings: just before the backend first takes srv->config at start
     * (`settings_start`: 0, or -1 with `err`; sluiced does not start) and just before it
     * takes a reload's `next` (`settings_reload`), a feature may lower figures in them
     * (the provider's published limits). */
    int (*settings_start)(struct sl_server *srv, char *err, size_t errlen);
    void (*settings_reload)(struct sl_server *srv, struct sl_config *next);

    /* Start: once the backend took the configuration (`early_start`: before the event log
     * is opened), and just before the listener starts (`start`). Both return 0, or -1
     * with `err` (sluiced does not start). */
    int (*early_start)(struct sl_server *srv, char *err, size_t errlen);
    int (*start)(struct sl_server *srv, char *err, size_t errlen);

    /* Routes of the /v1 API, matched in order after every feature's `claim`. */
    const sl_route_t *routes;
    size_t n_routes;
    /* A part of the path space the feature answers by itself, before auth and before the
     * body is read (the proxy's provider paths, the dashboard's page): returns true when
     * it took the call. `n` segments `seg` (decoded), `query` NULL when none. */
    bool (*claim)(struct sl_call *call, int n, char **seg, const char *query);
    /* Another way in than a bearer token (the dashboard's session cookie): true (and
     * call->admin set) when it lets the call on; false changes nothing. */
    bool (*authenticate)(struct sl_call *call, int n, char **seg);
    /* The body limit of a request on the feature's paths (`path`: the path as it came,
     * without its leading slashes, `len` bytes), or 0 when the path is not its own; and
     * the largest it may ever need (the transport's outer bound). */
    size_t (*body_limit)(const struct sl_config *c, const char *path, size_t len);
    size_t (*max_body)(const struct sl_config *c);

    /* The bus: every event, in features.def's order. */
    void (*on_event)(struct sl_server *srv, const sl_bus_event_t *ev);
    /* Admission: asked for `agent` (role NULL: not known) before a lease or an action-limit
     * check; returns 0, or -1 with `ref` filled (status 429, the type, the message, the
     * retry_after_s). Notes what it keeps of the agent on 0. */
    int (*admit_check)(struct sl_call *call, sl_admit_kind_t kind, const char *agent,
                       const char *role, struct sl_refusal *ref);

    /* Adds the feature's fields to an agent's JSON `obj` (json_t: GET /v1/agents, the
     * dashboard's page; sl__agent_json). */
    void (*annotate_agent)(struct sl_server *srv, const char *agent, struct json_t *obj);
    /* GET /metrics: appends its Prometheus lines; `pools` is the scrape's snapshot. */
    void (*metrics)(struct sl_call *call, const sl_pool_info_t *pools, size_t n_pools,
                    struct evbuffer *out);
    /* Housekeeping, every 0.25 s; `quarter` counts the calls from 1 (every second:
     * quarter % 4 == 0). */
    void (*tick)(struct sl_server *srv, unsigned quarter);
    /* Reload: `reload_check` may refuse the new configuration `next` (-1 with `err`; the
     * reload then changes nothing) and must change nothing itself unless it returns 0;
     * `reload_prepare` before the new configuration `next` replaces `running`
     * keeps in `next` what only a restart may change (saying so on stderr); `reload`
     * after it did: 0, or -1 with `err` (logged as "sluiced: reload: ERR"; the reload
     * stands). */
    int (*reload_check)(struct sl_server *srv, const struct sl_config *next, char *err,
                        size_t errlen);
    void (*reload_prepare)(const struct sl_config *running, struct sl_config *next);
    int (*reload)(struct sl_server *srv, char *err, size_t errlen);

    /* SIGTERM: answers what waits on it; with `drain`, work already under way may go on,
     * counted by `in_flight` (sluiced waits for 0, at most a few seconds). */
    void (*shutdown)(struct sl_server *srv, bool drain);
    size_t (*in_flight)(const struct sl_server *srv);
    /* The listener is gone: ends every call still held and frees what serves calls. */
    void (*stop)(struct sl_server *srv);
    /* Teardown, after the backend is freed: frees the feature's state (slot included). */
    void (*free)(struct sl_server *srv);
} sl_feature_t;

/* The features, in features.def's order (features.c). */
extern const sl_feature_t *const sl__features[SL_FEATURE_COUNT];

/* ---- the core's walks over the table (features.c) ------------------------------------- */

/* The bus: `ev` to every feature's on_event, in order, before this returns. */
void sl__bus_publish(struct sl_server *srv, const sl_bus_event_t *ev);
/* Every feature's admit_check for `agent`: 0 when all let it on, else -1 with `ref` from
 * the first that refused (the ones after it are not asked). */
int sl__admit_agent(struct sl_call *call, sl_admit_kind_t kind, const char *agent, const char *role,
                    struct sl_refusal *ref);
/* Every feature's annotate_agent on `obj`. */
void sl__features_annotate_agent(struct sl_server *srv, const char *agent, struct json_t *obj);
void sl__features_metrics(struct sl_call *call, const sl_pool_info_t *pools, size_t n_pools,
                          struct evbuffer *out);
void sl__features_tick(struct sl_server *srv, unsigned quarter);
/* settings_start: 0, or -1 with `err` from the first that failed. */
int sl__features_settings_start(struct sl_server *srv, char *err, size_t errlen);
void sl__features_settings_reload(struct sl_server *srv, struct sl_config *next);
void sl__features_config_clear(struct sl_config *c);
/* early_start, then start: 0, or -1 with `err` from the first that failed. */
int sl__features_early_start(struct sl_server *srv, char *err, size_t errlen);
int sl__features_start(struct sl_server *srv, char *err, size_t errlen);
/* Every feature's reload_check: 0, or -1 with `err` from the first that refused. */
int sl__features_reload_check(struct sl_server *srv, const struct sl_config *next, char *err,
                              size_t errlen);
void sl__features_reload_prepare(const struct sl_config *running, struct sl_config *next);
/* Every feature's reload; failures are logged, the reload stands. */
void sl__features_reload(struct sl_server *srv);
void sl__features_shutdown(struct sl_server *srv, bool drain);
/* The work under way that a draining shutdown waits for, summed over the features. */
size_t sl__features_in_flight(const struct sl_server *srv);
void sl__features_stop(struct sl_server *srv);
void sl__features_free(struct sl_server *srv);
/* The largest body any path may carry: the lease API's body_limit_bytes or a feature's
 * max_body. */
size_t sl__features_max_body(const struct sl_config *c);
/* The body limit of the path path[0, len) (raw, leading slashes cut): the first feature's
 * body_limit that claims it, else the lease API's body_limit_bytes. */
size_t sl__features_body_limit(const struct sl_config *c, const char *path, size_t len);
/* Configuration: every feature's defaults (0, or -1 out of memory); the section `key` parsed by the feature that
 * owns it: 1 when one did, 0 when no feature owns `key`, -1 with `err` on a bad section. */
int sl__features_config_defaults(struct sl_config *c);
int sl__features_config_parse(const char *key, struct yaml_document_s *doc,
                              struct yaml_node_s *section, const char *path, struct sl_config *c,
                              char *err, size_t errlen);
/* Every feature's config_check: 0, or -1 with `err` from the first that refused. */
int sl__features_config_check(const struct sl_config *c, const char *path, char *err,
                              size_t errlen);
/* Every feature's pool_defaults on `b`. */
void sl__features_pool_defaults(struct sl_pool_bounds *b);
/* Pool key `key` (node `v`) read through the first feature pool_table naming it into `b`:
 * 1 when one did, 0 when none names it, -1 with x->err ("FILE:LINE: x->key: ..."). */
int sl__features_pool_key(const struct sl_config_ctx *x, const char *key, struct yaml_node_s *v,
                          struct sl_pool_bounds *b);
/* The first feature whose claim takes the call: true; false when none did. */
bool sl__features_claim(struct sl_call *call, int n, char **seg, const char *query);
/* The first feature whose authenticate lets the call on: true; false when none did. */
bool sl__features_authenticate(struct sl_call *call, int n, char **seg);

#endif /* SL_FEATURE_H */
