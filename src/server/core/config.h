/* config.h - sluiced's configuration: the YAML file, its defaults and its validation. */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <sluice/engine.h>

#include "backend.h"
#include "feature.h"
#include "tokens.h"

/* One agent token: who may present it and what it may use (its tier's bounds and its
 * own, resolved: config_tokens.c). */
typedef struct sl_token_rule {
    char *token;        /* the secret (auth.tokens), or NULL for a hashed token */
    sl_token_meta_t meta; /* its SHA-256, id, tier, own bounds, caps (tokens.h) */
    char *agent;        /* the one agent name it stands for, or NULL */
    char *agent_prefix; /* or every agent name starting with this, or NULL */
    char **roles;       /* roles it may ask for; n_roles 0 = any */
    size_t n_roles;
    char **pools; /* pools it may use; n_pools 0 = any */
    size_t n_pools;
    char **priorities;    /* priorities it may ask for; n_priorities 0 = every priority whose
                             factor is at most 1 (normal, low: no boost without saying so) */
    size_t n_priorities;
    int64_t max_unblocks; /* the largest `unblocks` it may claim: 8 */
    bool resync;          /* its settle `headers` may resync pools: false */
} sl_token_rule_t;

/* A pool's slow start (docs/design.md "Slow start"): `pools.NAME.ramp*` keys. */
typedef enum sl_ramp_mode {
    SL_RAMP_AUTO = 0, /* off until the pool meets an acceleration 429, then on (default) */
    SL_RAMP_ON,       /* every cold start and every idle period ramps */
    SL_RAMP_OFF,
} sl_ramp_mode_t;

typedef struct sl_pool_ramp {
    sl_ramp_mode_t mode;
    int64_t floor_tpm; /* 10000: input tokens per minute a ramp starts from */
    double factor;     /* 2: growth per minute (1 < f <= 100) */
    double idle_s;     /* 60: nothing in flight or queued this long re-arms the ramp */
} sl_pool_ramp_t;

/* What one settle report may do to a pool, enforced by sluiced before any backend sees
 * the report (so memory and Redis alike). The `pools.<name>.*` keys of the same names. */
typedef struct sl_pool_bounds {
    int64_t max_settle_tokens; /* a settle count above this is refused; 0 = derived:
                                  max_resync_factor x the pool's largest token limit,
                                  or 10,000,000 when no token limit is set */
    double max_retry_after_s;  /* 300: a reported retry_after is capped to this */
    double max_report_pool_block_s; /* 60: a reported retry_after holds the whole pool at
                                       most this; the rest (up to max_retry_after_s) holds
                                       only the reporting agent. The proxy's own upstream
                                       answers are not reports and are not bounded so */
    double max_resync_factor;  /* 2: an adopted limit stays within [configured / f,
                                  configured x f] (values outside are clamped) */
    bool limits_from_provider; /* `limits_from`: false ("config", the default): the
                                  configured limit is a ceiling no header raises; true
                                  ("provider"): headers may raise it too */
    sl_pool_ramp_t ramp;       /* the slow start (provider_limits/ramp.c) */
} sl_pool_bounds_t;

/* Which wire format a pool's provider speaks (the proxy endpoints it serves). */
typedef enum sl_upstream_api {
    SL_UPSTREAM_NONE = 0, /* the pool is not proxied (lease API only) */
    SL_UPSTREAM_ANTHROPIC,  /* /anthropic/v1/messages */
    SL_UPSTREAM_OPENAI,     /* /openai/v1/chat/completions */
} sl_upstream_api_t;

/* How the proxy reaches a pool's provider. The key is read from the environment or a
 * file when the configuration loads; it is never written anywhere. */
typedef struct sl_pool_upstream {
    sl_upstream_api_t api;
    char *url;          /* upstream_url without a trailing '/', e.g. "https://api.anthropic.com" */
    char *api_key;      /* the provider key (secret) */
    char *api_key_env;  /* the variable it came from, or NULL */
    char *api_key_file; /* or the file, or NULL */
    char *ca_file;      /* PEM bundle that verifies the provider; NULL = system CAs */
    char **models;      /* glob patterns (fnmatch) of the models the proxy routes here */
    size_t n_models;    /* 0: the pool takes no part in routing by model */
    bool batch;         /* false: the batch endpoints (batches, files) use this pool */
    int64_t max_batch_requests; /* 100000: requests of batch pools' batches in the
                                   provider's processing queue */
    /* `long_context:` (long_context.c): a call whose prompt is above threshold_tokens
     * leases from the pool "<pool>:long_context", which this pool's parse adds with
     * these limits (docs/design.md "Long context"). threshold_tokens 0: none. */
    int64_t long_context_threshold_tokens;
    int64_t long_context_input_tpm;  /* 0: not limited */
    int64_t long_context_output_tpm; /* 0: not limited */
    bool long_context_of;            /* this pool is another pool's long-context pool */
    /* A pool with `keys:` becomes one pool per key, named "POOL:KEY" (design.md, "A pool
     * of several keys"); each such pool's upstream names its group and key. */
    char *key_group;    /* POOL, or NULL for a pool of one key */
    char *key_name;     /* KEY */
    char **headers;     /* "Name: value" lines this key adds (workspace, project), or NULL */
    size_t n_headers;
} sl_pool_upstream_t;

/* The listener's bounds on every connection, and the names it answers to (the `server:`
 * section; docs/server.md has the reasons for the defaults). */
typedef struct sl_listener_config {
    size_t max_connections;           /* 4096; never more than the descriptor limit allows */
    size_t max_pending_output_bytes;  /* 65536: answers a client has not read, before its
                                         connection's next requests wait unread */
    double write_timeout_s;           /* 30: a backlog the client does not take: closed */
    double idle_timeout_s;            /* 60: a keep-alive connection with nothing to do */
    double head_timeout_s;            /* 10: a request head must arrive in this, absolute */
    double body_min_rate_bytes_per_s; /* 1024: a body slower than this (after a grace of
                                         head_timeout_s) is dropped */
    char **allowed_hosts;             /* with auth off, Host names served besides the
                                         loopback ones ("name" or "name:port"), lower case */
    size_t n_allowed_hosts;
} sl_listener_config_t;

/* Event streams (the `events:` section, docs/server.md): how many /v1/events subscribers
 * sluiced keeps, and what one may leave unread before it is let go. */
typedef struct sl_events_config {
    int64_t max_streams;           /* 64: open streams in all */
    int64_t max_streams_per_token; /* 4: open streams of one agent token */
    int64_t stream_buffer_bytes;   /* 262144: events a subscriber has not read, then closed */
} sl_events_config_t;

/* Agent names (the `agents:` section, docs/server.md and design.md "Agents are forgotten"). */
typedef struct sl_agents_config {
    double forget_idle_s;  /* 3600: an agent holding nothing this long is forgotten */
    int64_t max_per_token; /* 10000: agents one agent token may have known at once */
    int64_t max_total;     /* 100000: agents known at once, every token together */
} sl_agents_config_t;

typedef struct sl_config {
    char *listen_host;       /* "127.0.0.1" */
    int listen_port;         /* 8750 */
    char *backend;           /* "memory", or the redis:// URL */
    bool redis;              /* backend is a redis:// URL, parsed into redis_opt */
    sl_redis_options_t redis_opt; /* the URL's options, `backend_fail` applied */
    int backend_fail;        /* the `backend_fail` key: -1 unset, else an sl_redis_fail_t */
    size_t body_limit_bytes; /* 65536 */
    double max_wait_s;       /* longest a long-poll is held: 300 */
    double max_hold_s;       /* the largest `max_wait` a lease request may ask for (the
                                longest ETA it is queued for rather than rejected): 540 */
    char *event_log;         /* JSON-lines event log path, or NULL */
    int log_format;          /* sl_log_format_t (log.h): SL_LOG_TEXT */
    char *access_log;        /* "stderr", a file path, or NULL: no access log */
    char *state_file;        /* memory backend: where its state survives restarts, or NULL */
    double state_fsync_interval_s; /* 1: a power failure loses at most this much; 0: every write */
    sl_cold_start_t cold_start;    /* SL_COLD_START_EMPTY: unknown pools start empty */
    sl_engine_config_t engine;
    sl_backend_settings_t settings; /* pools, roles, priorities */
    int *pool_lines;                /* line of each pool in the file (0 = built in) */
    char *admin_token;              /* NULL = no admin token */
    sl_token_rule_t *tokens; /* auth.tokens, then the tokens_file's */
    size_t n_tokens;
    sl_token_config_t token_cfg; /* tiers, tokens_file, the minted store's place (tokens.h) */
    sl_pool_upstream_t *upstreams; /* one per pool, in settings.pools' order */
    sl_pool_bounds_t *bounds;      /* one per pool, in settings.pools' order */
    int64_t max_unblocks;          /* 1000: the largest `unblocks` of a call without an agent
                                      token (admin, auth off); tokens have their own */
    sl_listener_config_t server;
    int64_t metrics_top_agents; /* 20: per-agent series in /metrics (the rest: `other`); the
                                   fleet's section sets it (`fleet.metrics_top_agents`) */
    sl_events_config_t events;
    sl_agents_config_t agents;
    /* Each feature's own section (its sl_config_section_t's `defaults` allocates it, `clear`
     * frees it), by SL_FEATURE_ID_NAME; the core knows none of their shapes. */
    void *feature[SL_FEATURE_COUNT];
} sl_config_t;

/* Fills `c` with the defaults: listen 127.0.0.1:8750, memory backend, one pool
 * "default" without limits, the engine's roles and priorities, no auth. Returns 0, or
 * -1 when out of memory. */
int sl_config_defaults(sl_config_t *c);

/* Loads `path` into `c` (over the defaults). Returns 0, or -1 with `err` holding
 * "FILE:LINE: key: what is wrong"; `c` is then cleared. Values are checked against the
 * engine's rules too, so a file that loads is one the engine accepts. */
int sl_config_load(const char *path, sl_config_t *c, char *err, size_t errlen);

/* Splits "HOST:PORT" ("[::1]:8750" for IPv6) into c->listen_host and c->listen_port.
 * Returns 0, or -1 with a message in `err`. */
int sl_config_set_listen(sl_config_t *c, const char *addr, char *err, size_t errlen);

/* The upstream of pool `name`, or NULL when the pool is unknown. */
const sl_pool_upstream_t *sl_config_pool_upstream(const sl_config_t *c, const char *name);

#define SL_CONFIG_KEYS_MAX 64 /* keys of one pool */

/* The pools of key group `group` (a pool with `keys:`), in the file's order: writes up to
 * `max` indices into settings.pools and returns how many it has (0: not a group). */
size_t sl_config_key_members(const sl_config_t *c, const char *group, size_t *idx, size_t max);

/* The bounds of pool `name`, or NULL when the pool is unknown. */
const sl_pool_bounds_t *sl_config_pool_bounds(const sl_config_t *c, const char *name);

/* The configuration of pool `name`, or NULL when the pool is unknown. */
const sl_pool_config_t *sl_config_pool(const sl_config_t *c, const char *name);

/* The largest settle count pool `name` accepts (max_settle_tokens, or its derived
 * default). `name` NULL or unknown: the largest over every pool. */
int64_t sl_config_settle_ceiling(const sl_config_t *c, const char *name);

/* The factor of priority `name` (the configured one, else the engine's built-in high
 * 4, normal 1, low 0.25), or -1 when no such priority exists. */
double sl_config_priority_factor(const sl_config_t *c, const char *name);

/* True when some pool is proxied to a provider speaking `api`. */
bool sl_config_proxies(const sl_config_t *c, sl_upstream_api_t api);

/* True when auth is on: an admin token or any agent token is configured. */
bool sl_config_auth_enabled(const sl_config_t *c);

struct yaml_document_s;
struct yaml_node_s;

/* config_table.c: every section is read through its field table (nginx's slots). */
typedef enum sl_field_type {
    SL_FIELD_INT,    /* int64_t within [min, max] */
    SL_FIELD_NUMBER, /* double within [min, max] */
    SL_FIELD_BOOL,   /* bool: true (yes, on) or false (no, off); with `choices`, the
                        names of false and of true (estimator: tokenizer or bytes) */
    SL_FIELD_SIZE,   /* size_t within [min, max] */
    SL_FIELD_INT32,  /* int within [min, max] (max below 2^31) */
    SL_FIELD_STRING, /* char *, a copy (the old one freed) */
    SL_FIELD_OPTIONAL, /* char *, a copy, or NULL for "" (a path left unset: event_log) */
    SL_FIELD_CHOICE, /* int: the index of the value in `choices` (NULL-terminated) */
    SL_FIELD_CUSTOM, /* `read` reads it (a list, a nested section, a checked string) */
} sl_field_type_t;

/* What a table reader hands a custom row: the document, the file, the configuration being
 * loaded, the row's full key ("server.allowed_hosts", "caps.teams.core.weight"), the
 * caller's argument, and where the error goes. */
typedef struct sl_config_ctx {
    struct yaml_document_s *doc;
    const char *path;
    struct sl_config *c; /* NULL for a section read on its own (a feature's: fleet:, proxy:) */
    const char *key;
    const void *arg;
    char *err;
    size_t errlen;
} sl_config_ctx_t;

/* One key of a section: its name, type, offset in the section's struct and bounds; a
 * CHOICE row's names, a CUSTOM row's reader (`field` is the struct's address plus the
 * offset; 0, or -1 with x->err filled, by sl__config_fail for one shape). */
typedef struct sl_config_field {
    const char *key;
    sl_field_type_t type;
    size_t offset;
    double min, max;
    const char *const *choices;
    int (*read)(sl_config_ctx_t *x, struct yaml_node_s *v, void *field);
} sl_config_field_t;
/* The rows of section struct `T` whose key names a member of the same name: a bounded
 * number (double), integer (int64_t) or size (size_t), a flag (bool) or a string (char *,
 * a copy). Every table writes such rows with these; a row that is more names its reader. */
#define SL_ROW(T, key, ftype, min, max) {#key, ftype, offsetof(T, key), min, max, NULL, NULL}
#define SL_ROW_NUMBER(T, key, min, max) SL_ROW(T, key, SL_FIELD_NUMBER, min, max)
#define SL_ROW_INT(T, key, min, max) SL_ROW(T, key, SL_FIELD_INT, min, max)
#define SL_ROW_SIZE(T, key, min, max) SL_ROW(T, key, SL_FIELD_SIZE, min, max)
#define SL_ROW_FLAG(T, key) SL_ROW(T, key, SL_FIELD_BOOL, 0, 0)
#define SL_ROW_STRING(T, key) SL_ROW(T, key, SL_FIELD_STRING, 0, 0)
/* A section: its name ("" at the top level, where keys stand alone), its struct's size,
 * its keys, and what reads a key no row names (`other`: 1 when it took the key, 0 when
 * it does not know it either, -1 with x->err; NULL: an unknown key is an error). An
 * unknown key is named as SECTION.KEY, or with `unknown_at_section` (a list entry, a
 * nested value: `pools.p.keys[0]`, `pools.p.long_context`) as SECTION; the message is
 * the same: "unknown key 'KEY' (known: ...)". */
typedef struct sl_config_table {
    const char *section;
    size_t size;
    const sl_config_field_t *fields;
    size_t n_fields;
    int (*other)(sl_config_ctx_t *x, const char *key, struct yaml_node_s *k,
                 struct yaml_node_s *v, void *out);
    bool unknown_at_section;
} sl_config_table_t;
/* The table of section `name` whose struct is `type`, keys in the array `fields`. */
#define SL_CONFIG_TABLE(name, type, fields)                                                        \
    {name, sizeof(type), fields, sizeof(fields) / sizeof(fields[0]), NULL, false}
/* A feature's configuration (its sl_feature_t.config), defined in its config_*.c beside its
 * field tables. `key`: the top-level key of its section. `defaults`: when a configuration
 * starts, allocates the section's struct into c->feature[SL_FEATURE_ID_NAME] with its
 * defaults (0, or -1 when out of memory). `parse`: the section's mapping (0, or -1 with
 * `err` as "FILE:LINE: key.field: ..."). `clear`: frees what they kept (sl_config_clear).
 * `table`: the section's field table (what test_config_keys checks is documented).
 * `check`: once the whole file is read, the section against the rest (a pool it names
 * exists): 0, or -1 with `err` as "FILE: key: ...". `pool_table`: keys of every pool's
 * mapping that are the feature's (`pools.NAME.ramp`), offsets into the pool's
 * sl_pool_bounds_t, read when the pools' own table does not name the key; `pool_defaults`
 * sets them before a pool is read. Every field may be NULL. */
typedef struct sl_config_section {
    const char *key;
    int (*defaults)(struct sl_config *c);
    int (*parse)(struct yaml_document_s *doc, struct yaml_node_s *section, const char *path,
                 struct sl_config *c, char *err, size_t errlen);
    void (*clear)(struct sl_config *c);
    const sl_config_table_t *table;
    int (*check)(const struct sl_config *c, const char *path, char *err, size_t errlen);
    const sl_config_table_t *pool_table;
    void (*pool_defaults)(sl_pool_bounds_t *b);
} sl_config_section_t;
/* Reads mapping `section` of `doc` into the struct at `out` as table `t` says. Returns 0,
 * or -1 with `err` holding "FILE:LINE: SECTION.KEY: ..."; `out` may then hold the keys
 * before the bad one (sl_config_load clears the whole configuration on an error). An
 * unknown key's message lists the table's keys. */
int sl__config_read_table(struct yaml_document_s *doc, struct yaml_node_s *section,
                          const sl_config_table_t *t, const char *path, void *out, char *err,
                          size_t errlen);
/* The same within a load: `x` gives the document, file, configuration and argument; the
 * section's name for error messages is `section` when not NULL (a holder's caps:
 * "caps.agents.NAME"), else t->section. */
int sl__config_read_fields(const sl_config_ctx_t *x, struct yaml_node_s *map,
                           const sl_config_table_t *t, const char *section, void *out);
/* Reads node `v` of key `key` into `out` through the row of `t` naming it: 1 when one
 * does, 0 when no row names `key`, -1 with x->err (x->key: the key's full name). */
int sl__config_read_row(const sl_config_ctx_t *x, const sl_config_table_t *t, const char *key,
                        struct yaml_node_s *v, void *out);
/* Writes "FILE:LINE: KEY: MESSAGE" (KEY: x->key, the line: node `at`'s) into x->err and
 * returns -1: the one shape of every configuration error. */
int sl__config_fail(const sl_config_ctx_t *x, const struct yaml_node_s *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sl__config_vfail(const sl_config_ctx_t *x, const struct yaml_node_s *at, const char *fmt,
                     va_list ap) __attribute__((format(printf, 3, 0)));
/* A string list (a YAML sequence of scalars) into a new array at *out, *n_out entries
 * (added to *out's). 0, or -1 via sl__config_fail. */
int sl__config_string_list(const sl_config_ctx_t *x, struct yaml_node_s *seq, char ***out,
                           size_t *n_out);
/* A CUSTOM row's reader of a URL (`field`: a char *): http:// or https://, no space or
 * control character, trailing '/' cut. */
int sl__config_read_url(sl_config_ctx_t *x, struct yaml_node_s *v, void *field);
/* Reads a secret (a provider's key, an admin key) from the environment variable `env` or,
 * when env is NULL, from the file `file` (its trailing newline cut) into a new string at
 * *out. `env_key`/`file_key` name the keys that gave them, for the message. Returns 0, or
 * -1 with `what` saying what is wrong (never the secret). */
int sl__config_secret(const char *env, const char *file, const char *env_key,
                      const char *file_key, char **out, char *what, size_t whatlen);
/* True when `k` may be sent as a header value: one line of 1-4096 printable characters
 * without spaces. */
bool sl__config_secret_ok(const char *k);
/* config_pools.c: the `pools:` section, read through sl__pool_table (a pool's keys), whose
 * `keys:` entries read through sl__pool_key_table (the rows they share with a pool) and
 * whose `long_context:` through sl__long_context_table (long_context.c). */
int sl__config_parse_pools(const sl_config_ctx_t *x, struct yaml_node_s *map);
extern const sl_config_table_t sl__pool_table, sl__pool_key_table, sl__long_context_table;
/* Frees what a pool's upstream holds (its key wiped first) and zeroes it. */
void sl__config_upstream_clear(sl_pool_upstream_t *up);
/* A pool's report bounds before its keys are read: the defaults and each feature's. */
void sl__config_bounds_defaults(sl_pool_bounds_t *b);
/* The tables of the core's sections (config_sections.c, config_guard.c, config_tokens.c);
 * a feature's are in its sl_config_section_t (table, pool_table). */
extern const sl_config_table_t sl__events_table, sl__agents_table;
extern const sl_config_table_t sl__root_table, sl__server_table, sl__engine_table,
    sl__agent_caps_table, sl__team_caps_table, sl__auth_table;
/* Reads number `s` into `field` (an int64_t when `integer`, else a double) when it is
 * within [min, max]; otherwise returns -1 with `what` saying "'s' must be ... between". */
int sl__config_number(const char *s, double min, double max, bool integer, void *field,
                      char *what, size_t whatlen);
/* config_guard.c: the `events:` and `agents:` sections' defaults (their tables above). */
void sl__config_guard_defaults(sl_events_config_t *ev, sl_agents_config_t *ag);

/* Opens and parses YAML file `path` into `doc` (the caller deletes it). Returns 0, or -1
 * with `err` saying "FILE: cannot open: ..." or "FILE:LINE: YAML syntax: ...". */
int sl__config_yaml_load(const char *path, struct yaml_document_s *doc, char *err, size_t errlen);

/* Frees everything inside `c` and zeroes it. */
void sl_config_clear(sl_config_t *c);

#endif /* SL_CONFIG_H */
