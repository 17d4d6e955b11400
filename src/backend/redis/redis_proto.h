/* redis_proto.h - FCALL argument vectors for sluice.lua and decoding of its replies.
 *
 * Shared by the asynchronous backend (the other files of this directory) and the
 * conformance runner, so both speak to the Functions library the same way. A command
 * is built into an sl__rcmd_t (owned copies of every argument) and sent with the argv
 * form of hiredis; a reply is decoded into an sl__rreply_t whose strings point into the
 * hiredis reply, valid as long as that reply is.
 *
 * Ids: lease and ticket ids are pool_no * 2^40 + n (see sluice.lua); pool numbers
 * 1..4095 come from the registry, and each replica has a number of 4096..8191 for the
 * ids its local fail-open engine decides.
 */
#ifndef SL_REDIS_PROTO_H
#define SL_REDIS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis.h>

#include <sluice/engine.h>

/* The Functions library version this build speaks (sluice.lua's VERSION). */
#define SL__REDIS_LIB_VERSION "26"

#define SL__RID_SHIFT 40
#define SL__RPOOL_MAX 4095       /* registry numbers 1..4095 */
#define SL__RPOOL_LOCAL_MIN 4096 /* 4096..8191: a replica's fail-open local decisions, */
#define SL__RPOOL_LOCAL_HASHED 6144 /* 4096..6143 given by the registry, 6144.. hashed */
#define SL__RPOOL_LOCAL_MAX 8191
#define SL__RCMD_MAX_ARGS 200

/* Every name of fcall.def as a C identifier: SL_FA(name) is an argument's name,
 * SL_FR(name) a reply field's (a series' prefix for the numbered ones). A name fcall.def
 * does not list does not compile; sluice.lua is built with the same list (fcall_lua.cmake)
 * and refuses any other. */
#define SL_FCALL_ARG(n) extern const char sl__fa_##n[];
#define SL_FCALL_ARG_SERIES(n) extern const char sl__fa_##n[];
#define SL_FCALL_REPLY(n) extern const char sl__fr_##n[];
#define SL_FCALL_REPLY_SERIES(n) extern const char sl__fr_##n[];
#define SL_FCALL_CONFIG(n, src) extern const char sl__fa_##n[];
#define SL_FCALL_CONFIG_LATER(n, src, dflt) extern const char sl__fa_##n[];
#include "fcall.def"
#include "fcall_end.h"
#define SL_FA(name) sl__fa_##name
#define SL_FR(name) sl__fr_##name

/* An FCALL being built. */
typedef struct sl__rcmd {
    int argc;
    char *argv[SL__RCMD_MAX_ARGS];
    size_t len[SL__RCMD_MAX_ARGS];
} sl__rcmd_t;

/* Starts "FCALL fn 1 sluice:{graph}:tasks": a call of the task graph's library functions,
 * whose one key is the graph's hash (the arguments follow). */
void sl__rcmd_graph(sl__rcmd_t *c, const char *fn);
/* Starts "FCALL fn 1 sluice:{pool}:pool now origin". `now_s` NAN means Redis TIME;
 * `origin` NULL or "" means the library publishes no events. */
void sl__rcmd_begin(sl__rcmd_t *c, const char *fn, const char *pool, double now_s,
                    const char *origin);
/* The same with a second key (NULL: none), "FCALL fn 2 sluice:{pool}:pool KEY ...". */
void sl__rcmd_begin2(sl__rcmd_t *c, const char *fn, const char *pool, const char *key2,
                     double now_s, const char *origin);
/* Appends a name/value pair; a NULL value appends nothing. */
void sl__rcmd_str(sl__rcmd_t *c, const char *name, const char *value);
void sl__rcmd_num(sl__rcmd_t *c, const char *name, double v);
void sl__rcmd_u64(sl__rcmd_t *c, const char *name, uint64_t v);
/* Appends a raw argument (for the registry and graph functions). */
void sl__rcmd_raw(sl__rcmd_t *c, const char *arg);
/* Frees the copies; `c` may be begun again. */
void sl__rcmd_free(sl__rcmd_t *c);

/* Builds the configure call of pool `name`: `cfg`, the engine-wide settings `ecfg`
 * (NULL = defaults), the roles and priorities ("name=value,..." in `roles`/`prios`). */
/* Writes one holder's caps as configure's `caps` list wants them,
 * "a:NAME=share/rpm/concurrent/usd_hour/usd_day" ("t:" for a team), into out (len
 * bytes, always terminated); returns the length it needed, as snprintf. */
int sl__rcaps_format(char *out, size_t len, bool team, const char *holder, const sl_caps_t *caps);

void sl__rcmd_configure(sl__rcmd_t *c, const char *name, const sl_pool_config_t *cfg,
                        const sl_engine_config_t *ecfg, const char *roles, const char *prios,
                        int pool_no, double now_s, const char *origin);

/* The task graph's key: one hash for every pool, in its own Cluster slot. */
#define SL__RGRAPH_KEY "sluice:{graph}:tasks"

/* The task graph's answer about a request's task (`sluice_task_role`): its registered
 * role, its waiting dependants and its remaining chain (graph.c); "", -1, -1 when the
 * graph does not know it. */
typedef struct sl__rgraph {
    int64_t unblocks, depth;
    char role[72];
} sl__rgraph_t;
#define SL__RGRAPH_NONE ((sl__rgraph_t){-1, -1, ""})
/* Reads a `sluice_task_role` reply (NULL, -1 or an error: SL__RGRAPH_NONE). */
sl__rgraph_t sl__rgraph_parse(const redisReply *r);

/* Builds a request. The library resolves the role, unblocks and chain of a task the
 * graph knows itself: with `graph_key` the graph's key is the call's second key (one
 * node: one round trip); on a Cluster, where the graph lives in another slot, the caller
 * looked it up first (sluice_task_role) and passes `graph` (SL__RGRAPH_NONE: unknown). */
void sl__rcmd_request(sl__rcmd_t *c, const sl_request_t *req, bool graph_key, sl__rgraph_t graph,
                      double now_s,
                      const char *origin);

/* Builds a settle of `lease` in `pool`, classifying and validating the provider
 * headers here (the engine's rules). Returns SL_OK, or SL_EINVAL with `err` filled
 * and nothing built. */
int sl__rcmd_settle(sl__rcmd_t *c, const char *pool, uint64_t lease, const sl_settle_t *s,
                    double now_s, const char *origin, char *err, size_t errlen);

/* Builds a resync of `pool` from headers of lease `lease`'s call (0: none), sent
 * `sent_after_s` seconds after its grant (negative: not known; sl_engine_resync_lease_sent);
 * same validation as sl__rcmd_settle. */
int sl__rcmd_resync(sl__rcmd_t *c, const char *pool, uint64_t lease, double sent_after_s,
                    const char *const *names, const char *const *values, size_t count,
                    double now_s, const char *origin, char *err, size_t errlen);

/* A decoded library reply. */
typedef struct sl__rreply {
    int rc;                  /* SL_OK or SL_E*; SL__RPROTO for a malformed reply */
    const char *msg;         /* error sentence */
    const redisReply *fields; /* name/value array */
    const redisReply *events; /* array of name/value arrays */
    double wake_s;           /* the pool's next wake-up; INFINITY when none */
    /* The pool's history (sluice.lua, "epochs"), 0 when the reply names no pool: */
    double epoch;            /* the first id counter of the pool's current epoch */
    double next_n;           /* the next id counter it will issue */
    double lost_until_s;     /* the alert backend_state_lost is up until (Redis time) */
    bool state_lost;         /* "state_lost": a pool the caller knew is gone (rc SL__RPROTO) */
} sl__rreply_t;

#define SL__RPROTO (-100) /* the reply is not what sluice.lua sends */

/* Decodes `r` (NULL: connection lost -> SL__RPROTO). Returns out->rc. */
int sl__rreply_parse(const redisReply *r, sl__rreply_t *out);
const char *sl__rreply_get(const sl__rreply_t *rep, const char *name);
double sl__rreply_num(const sl__rreply_t *rep, const char *name, double dflt);
/* Fills a decision from a request / ticket reply. */
/* The library's limited_by as one of the engine's static names (the decision outlives
 * the reply), or NULL. */
const char *sl__rreply_limited_by(const char *v);
void sl__rreply_decision(const sl__rreply_t *rep, sl_decision_t *out);
/* Fills pool info; strings point into the reply. */
void sl__rreply_pool_info(const sl__rreply_t *rep, sl_pool_info_t *out);
/* Fills event `i` of the reply; false when it cannot be decoded. */
bool sl__rreply_event(const sl__rreply_t *rep, size_t i, sl_event_t *out);

/* Decodes one published event ("name\x1fvalue\x1f..."), splitting `msg` in place. */
bool sl__wire_event(char *msg, sl_event_t *out);

/* The SL_E* code of an error name of sl_strerror() ("forbidden": SL_BACKEND_EFORBIDDEN),
 * or SL__RPROTO. */
int sl__rcode(const char *name);

/* The pool number of an id, and an id from a number and a counter. */
static inline int sl__rid_pool(uint64_t id)
{
    return (int)(id >> SL__RID_SHIFT);
}

#endif /* SL_REDIS_PROTO_H */
