/* backend.h - the asynchronous interface between sluiced's handlers and whatever decides.
 *
 * A backend owns the quota state (the engine in-process for `memory`, a Redis Functions
 * library for a later `redis`) and answers every operation through a completion
 * callback. The memory backend calls it before the operation returns; a networked
 * backend calls it later from the event loop. Handlers are written for both: they never
 * assume the callback has run when the call returns.
 *
 * Things that happen on their own (a queued ticket granted, a lease reaped, a margin
 * change, an alert) arrive through the event callback set with sl_backend_set_event_cb().
 * Events are delivered from the event loop, never from inside an engine call, so an
 * event handler may start further backend operations.
 *
 * Pointers passed to callbacks (decisions, messages, info arrays, events) are valid
 * only during the callback. Strings passed in are borrowed for the call.
 */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/engine.h>

struct event_base;

typedef struct sl_backend sl_backend_t;

/* A named number: a role's base weight or a priority's factor. */
typedef struct sl_named_factor {
    char *name;
    double value;
} sl_named_factor_t;

typedef struct sl_named_pool {
    char *name;
    sl_pool_config_t config;
} sl_named_pool_t;

/* Caps of an agent ("*" = every agent without its own) or of a team. */
typedef struct sl_named_caps {
    char *holder;
    bool team;
    sl_caps_t caps;
    double weight; /* a team's weight in the fair queue; 0 = not set (weighs 1) */
} sl_named_caps_t;

/* An agent's team. */
typedef struct sl_team_member {
    char *agent;
    char *team;
} sl_team_member_t;

/* What a backend is told to enforce: pools, roles, priorities, caps and teams (the
 * config file's reloadable part). */
typedef struct sl_backend_settings {
    sl_named_pool_t *pools;
    size_t n_pools;
    sl_named_factor_t *roles;
    size_t n_roles;
    sl_named_factor_t *priorities;
    size_t n_priorities;
    sl_named_caps_t *caps;
    size_t n_caps;
    sl_team_member_t *members;
    size_t n_members;
} sl_backend_settings_t;

/* Completion callbacks. `rc` is SL_OK or a negative SL_E* code; on error `errmsg`
 * names the field and value, and the other arguments are NULL/0. */
typedef void (*sl_backend_decision_cb)(int rc, const sl_decision_t *d, const char *errmsg,
                                       void *ud);
typedef void (*sl_backend_settle_cb)(int rc, const sl_settle_result_t *r, const char *errmsg,
                                     void *ud);
/* `value`: extend gives the new expires_at; other operations 0. */
typedef void (*sl_backend_done_cb)(int rc, double value, const char *errmsg, void *ud);
typedef void (*sl_backend_pools_cb)(int rc, const sl_pool_info_t *pools, size_t n,
                                    const char *errmsg, void *ud);
typedef void (*sl_backend_agents_cb)(int rc, const sl_agent_info_t *agents, size_t n, void *ud);
typedef void (*sl_backend_tasks_cb)(int rc, const sl_task_info_t *tasks, size_t n, void *ud);
typedef void (*sl_backend_event_cb)(const sl_event_t *ev, void *ud);

/* A suspended agent (docs/observe.md, "Suspension"): refused 429 `suspended` by every
 * replica until an admin releases it. The backend keeps these records where they
 * survive what its quota state survives: the memory backend in its state file, the
 * redis backend in Redis (one hash every replica reads). Strings are borrowed. */
typedef struct sl_suspension {
    const char *agent;
    const char *role;   /* the agent's role when suspended ("" unknown) */
    const char *reason; /* "anomaly" (fleet.suspend_anomalous) or "admin" */
    const char *metric; /* anomaly: "requests" or "violations"; "" for admin */
    double z;           /* anomaly: the z-score that flagged it; 0 for admin */
    int64_t count;      /* anomaly: the metric's count in the window; 0 for admin */
    double at_s;        /* when it was suspended (Unix seconds) */
} sl_suspension_t;
/* Every suspension the backend holds, in no particular order. */
typedef void (*sl_backend_suspensions_cb)(int rc, const sl_suspension_t *s, size_t n,
                                          const char *errmsg, void *ud);

/* The providers' batch processing queues (docs/proxy.md, "The processing queue"): per
 * batch pool, the requests of the batches created through the proxy and not yet seen
 * ended, each counted once under its id. The backend keeps them where replicas share
 * them and a restart finds them (the memory backend's state file, a Redis hash). Every
 * entry is forgotten `ttl_s` after it was counted, so what nobody sees end does not stay
 * counted forever and memory stays bounded. */
typedef enum sl_batchq_op {
    SL_BATCHQ_COUNT = 0, /* reads the queue */
    SL_BATCHQ_ADD,       /* counts `requests` under `id` (a create in flight) unless the queue
                            plus them is above `max_requests`, or the pool already holds
                            SL_BATCHQ_MAX_ENTRIES entries; an id counted already: nothing */
    SL_BATCHQ_BIND,      /* the create answered: `id` (its hold) is replaced by `new_id`
                            with `requests` and `ttl_s`, with no bound (the provider has
                            it); a hold already forgotten still counts `new_id` */
    SL_BATCHQ_RELEASE,   /* the batch ended (or the create failed): `id` leaves the queue;
                            an id not counted (released by another replica): nothing */
} sl_batchq_op_t;

/* At most this many entries per batch pool: an ADD beyond is refused as over the bound. */
#define SL_BATCHQ_MAX_ENTRIES 65536
/* Longest id (a provider's batch id, or a hold's) in bytes. */
#define SL_BATCHQ_ID_MAX 256

typedef struct sl_batchq_call {
    sl_batchq_op_t op;
    const char *pool;     /* the batch pool (a pool name) */
    const char *id;       /* ADD, BIND: the hold's id; RELEASE: the batch's or the hold's */
    const char *new_id;   /* BIND: the provider's batch id */
    int64_t requests;     /* ADD, BIND: >= 0 */
    int64_t max_requests; /* ADD: the bound (max_batch_requests) */
    double ttl_s;         /* ADD, BIND: > 0, forgotten this long after */
} sl_batchq_call_t;

/* `counted`: ADD counted the id (false: over the bound or already counted, nothing
 * changed); other operations true when they changed the queue. `queued_requests`: the
 * pool's queue after the operation. On error (SL_EINVAL naming the field, or
 * SL_EUNAVAILABLE) nothing changed and both are 0. */
typedef void (*sl_backend_batchq_cb)(int rc, bool counted, int64_t queued_requests,
                                     const char *errmsg, void *ud);

/* The operations a backend implements. Every one must call its callback exactly once. */
typedef struct sl_backend_ops {
    const char *name;
    void (*free)(sl_backend_t *b);
    double (*now)(sl_backend_t *b);
    void (*configure)(sl_backend_t *b, const sl_backend_settings_t *s, sl_backend_done_cb cb,
                      void *ud);
    void (*request)(sl_backend_t *b, const sl_request_t *req, sl_backend_decision_cb cb, void *ud);
    void (*ticket_poll)(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud);
    void (*ticket_hold)(sl_backend_t *b, uint64_t ticket, bool held, sl_backend_done_cb cb,
                        void *ud);
    void (*ticket_cancel)(sl_backend_t *b, uint64_t ticket, sl_backend_done_cb cb, void *ud);
    void (*settle)(sl_backend_t *b, uint64_t lease, const sl_settle_t *s, sl_backend_settle_cb cb,
                   void *ud);
    void (*cancel)(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud);
    void (*extend)(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb, void *ud);
    /* The provider's rate-limit headers for live lease `lease`'s call, the moment they
     * arrive: resyncs the lease's pool (sl_engine_resync) while the provider and the pool
     * both still hold the lease's reservation (design.md, "Resync from provider
     * headers"). `value` is 0. SL_ENOTFOUND when
     * the lease is unknown or ended, SL_EINVAL for a malformed header (nothing changed).
     * A snapshot is stale a moment later, so a backend that cannot apply it now answers
     * SL_EUNAVAILABLE and never replays it. Names and values are borrowed for the call.
     * `sent_after_s`: how long after the grant the call was sent, when the caller knows
     * (the proxy), else negative (sl_engine_resync_lease_sent). */
    void (*resync)(sl_backend_t *b, uint64_t lease, double sent_after_s,
                   const char *const *names, const char *const *values, size_t count,
                   sl_backend_done_cb cb, void *ud);
    void (*task_put)(sl_backend_t *b, const char *id, const char *role,
                     const char *const *depends_on, size_t n_depends, sl_task_state_t state,
                     sl_backend_done_cb cb, void *ud);
    void (*task_delete)(sl_backend_t *b, const char *id, sl_backend_done_cb cb, void *ud);
    void (*tasks)(sl_backend_t *b, sl_backend_tasks_cb cb, void *ud);
    /* `pool` NULL lists every pool; otherwise exactly that one (SL_ENOTFOUND if unknown). */
    void (*pools)(sl_backend_t *b, const char *pool, sl_backend_pools_cb cb, void *ud);
    void (*agents)(sl_backend_t *b, sl_backend_agents_cb cb, void *ud);
    /* Forgets `agent` when it holds nothing a new agent would not (sl_engine_agent_forget;
     * on Redis, pool by pool): SL_OK with `value` 1 forgotten, 0 kept (it holds something;
     * nothing changed), -1 not known. Other codes: the backend could not be asked. */
    void (*agent_forget)(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud);
    /* Answers SL_OK when the backend can take decisions (readiness). */
    void (*ping)(sl_backend_t *b, sl_backend_done_cb cb, void *ud);
    /* Suspensions. suspend: keeps `s` unless the agent is suspended already (the first
     * record stands); `value` 1 when it was new, 0 when one existed. release: removes the
     * agent's record; SL_ENOTFOUND when there was none. Both are durable when answered
     * SL_OK; a backend that cannot reach its store answers SL_EUNAVAILABLE and changes
     * nothing. suspensions: every record; SL_ENOTFOUND when the store lost its records
     * (Redis restarted empty or flushed): callers then suspend again what they hold. */
    void (*suspend)(sl_backend_t *b, const sl_suspension_t *s, sl_backend_done_cb cb, void *ud);
    void (*release)(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud);
    void (*suspensions)(sl_backend_t *b, sl_backend_suspensions_cb cb, void *ud);
    /* The batch processing queues (sl_batchq_call_t). Durable when answered SL_OK. */
    void (*batch_queue)(sl_backend_t *b, const sl_batchq_call_t *c, sl_backend_batchq_cb cb,
                        void *ud);
} sl_backend_ops_t;

/* Who calls a lease or ticket operation. A backend shared by several replicas checks it
 * against the owner it keeps (the replica that granted may not be the one asked) and
 * answers SL_BACKEND_EFORBIDDEN, changing nothing, when the caller may not act as the
 * owner. `agent` set: exactly that agent; `agent_prefix` set: agents with that prefix;
 * neither: anyone (an admin token, auth off, or the server's own calls). */
typedef struct sl_backend_actor {
    const char *agent;
    const char *agent_prefix;
} sl_backend_actor_t;

/* The lease or ticket belongs to an agent the caller may not act as (HTTP 403): the
 * engine's SL_EFORBIDDEN, which a request for a role the caller may not take answers. */
#define SL_BACKEND_EFORBIDDEN SL_EFORBIDDEN

/* The common head of every backend; implementations embed it first. */
struct sl_backend {
    const sl_backend_ops_t *ops;
    sl_backend_event_cb event_cb;
    void *event_ud;
    /* The caller of the operation being dispatched (see sl_backend_set_actor); read only
     * while an operation is being started, never kept. */
    sl_backend_actor_t actor;
};

/* The backends' clock: CLOCK_MONOTONIC offset onto the realtime clock read once at
 * start, so decisions see Unix seconds that never go backwards even when the wall
 * clock is set. */
typedef struct sl_backend_clock {
    double start_real_s;
    double start_mono_s;
    double last_now_s;
} sl_backend_clock_t;

/* Anchors `c` at the current wall time. */
void sl_backend_clock_init(sl_backend_clock_t *c);

/* Unix seconds now, never less than the previous answer. */
double sl_backend_clock_now(sl_backend_clock_t *c);

/* What a pool whose last minute is unknown starts with (a first start, no or a lost
 * state file, a pool added by a reload). */
typedef enum sl_cold_start {
    SL_COLD_START_EMPTY = 0, /* empty buckets that refill; for one refill period the first
                                provider headers may raise a level (never overbooks) */
    SL_COLD_START_FULL,      /* full buckets (what was spent before the start is ignored) */
} sl_cold_start_t;

/* The cold-start window: one refill period of a bucket. */
#define SL_COLD_START_WINDOW_S 60.0

/* How the memory backend keeps its state across restarts. */
typedef struct sl_memory_options {
    const char *state_file;     /* NULL: nothing survives a restart (borrowed for the call) */
    double fsync_interval_s;    /* 1: what a power failure may lose; 0: fsync every write */
    sl_cold_start_t cold_start; /* SL_COLD_START_EMPTY */
} sl_memory_options_t;

/* Fills `o` with the defaults above. */
void sl_memory_options_init(sl_memory_options_t *o);

/* Creates the memory backend: the engine in-process, driven by one timer on `base`
 * set to sl_engine_next_wakeup(). `cfg` may be NULL for the engine defaults. With a
 * state file, what it holds is read now and restored into the pools of the first
 * configure, which then writes a fresh snapshot (and fails if it cannot). Lease and
 * ticket ids start above the start time in milliseconds x 1000, and with a state file
 * also above every id the file's runs may have issued, so no id of an earlier run is
 * issued again. Returns NULL with `err` set (out of memory, a state file that cannot be
 * read). Free with sl_backend_free(). */
sl_backend_t *sl_backend_memory_open(struct event_base *base, const sl_engine_config_t *cfg,
                                     const sl_memory_options_t *opt, char *err, size_t errlen);

/* sl_backend_memory_open() without a state file and with full buckets at start (for
 * benchmarks and embedders that want no restart semantics). NULL when out of memory. */
sl_backend_t *sl_backend_memory_new(struct event_base *base, const sl_engine_config_t *cfg);

/* Frees a backend; NULL is allowed. No callbacks run afterwards. */
void sl_backend_free(sl_backend_t *b);

/* Sets the receiver of engine events (NULL to stop). */
void sl_backend_set_event_cb(sl_backend_t *b, sl_backend_event_cb cb, void *ud);

/* What the backends have to say (Redis down, a state file restored), one message a call,
 * without a newline. sluiced hands them to its logger (time, level, text or JSON); with no
 * callback set (NULL) they go to stderr as "sluiced: MESSAGE". Process-wide. */
typedef enum sl_backend_log_level {
    SL_BACKEND_LOG_INFO = 0,
    SL_BACKEND_LOG_WARN,
    SL_BACKEND_LOG_ERROR,
} sl_backend_log_level_t;
typedef void (*sl_backend_log_cb)(sl_backend_log_level_t level, const char *msg);
void sl_backend_set_log(sl_backend_log_cb cb);
/* Formats a message and passes it on as sl_backend_set_log says. */
void sl__backend_log(sl_backend_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Sets the caller of the operations dispatched next (NULL: anyone) until set again. The
 * strings are borrowed until then. A backend with one replica may ignore it (the server
 * checks owners it learnt from events). */
void sl_backend_set_actor(sl_backend_t *b, const sl_backend_actor_t *actor);

/* The backend's clock: Unix seconds that never go backwards. */
double sl_backend_now(sl_backend_t *b);

/* Checks `s` against the engine's rules on a scratch engine, touching no backend.
 * Returns SL_OK, or an error with a message in `err` and in `*bad_pool` the index of
 * the pool at fault (or -1 when a role or priority is). */
int sl_backend_settings_validate(const sl_backend_settings_t *s, long *bad_pool, char *err,
                                 size_t errlen);

/* Thin dispatchers to b->ops (see sl_backend_ops_t). */
void sl_backend_configure(sl_backend_t *b, const sl_backend_settings_t *s, sl_backend_done_cb cb,
                          void *ud);
void sl_backend_request(sl_backend_t *b, const sl_request_t *req, sl_backend_decision_cb cb,
                        void *ud);
void sl_backend_ticket_poll(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud);
void sl_backend_ticket_hold(sl_backend_t *b, uint64_t ticket, bool held, sl_backend_done_cb cb,
                            void *ud);
void sl_backend_ticket_cancel(sl_backend_t *b, uint64_t ticket, sl_backend_done_cb cb, void *ud);
void sl_backend_settle(sl_backend_t *b, uint64_t lease, const sl_settle_t *s,
                       sl_backend_settle_cb cb, void *ud);
void sl_backend_cancel(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud);
void sl_backend_extend(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb,
                       void *ud);
void sl_backend_resync(sl_backend_t *b, uint64_t lease, double sent_after_s,
                       const char *const *names, const char *const *values, size_t count,
                       sl_backend_done_cb cb, void *ud);
void sl_backend_task_put(sl_backend_t *b, const char *id, const char *role,
                         const char *const *depends_on, size_t n_depends, sl_task_state_t state,
                         sl_backend_done_cb cb, void *ud);
void sl_backend_task_delete(sl_backend_t *b, const char *id, sl_backend_done_cb cb, void *ud);
void sl_backend_tasks(sl_backend_t *b, sl_backend_tasks_cb cb, void *ud);
void sl_backend_pools(sl_backend_t *b, const char *pool, sl_backend_pools_cb cb, void *ud);
void sl_backend_agents(sl_backend_t *b, sl_backend_agents_cb cb, void *ud);
void sl_backend_agent_forget(sl_backend_t *b, const char *agent, sl_backend_done_cb cb,
                             void *ud);
void sl_backend_ping(sl_backend_t *b, sl_backend_done_cb cb, void *ud);
void sl_backend_suspend(sl_backend_t *b, const sl_suspension_t *s, sl_backend_done_cb cb,
                        void *ud);
void sl_backend_release(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud);
void sl_backend_suspensions(sl_backend_t *b, sl_backend_suspensions_cb cb, void *ud);
void sl_backend_batch_queue(sl_backend_t *b, const sl_batchq_call_t *c, sl_backend_batchq_cb cb,
                           void *ud);

/* Frees the strings and arrays inside `s` (not `s` itself). */
void sl_backend_settings_clear(sl_backend_settings_t *s);

/* fsyncs the directory holding file `path`, so that a rename into it survives a power
 * failure (the state file's snapshots, sluiced's minted-token store). 0, or -1 with errno. */
int sl_backend_sync_dir(const char *path);

/* Whether `s` (NULL: none) sets caps for `holder` (a team's when `team`): a reload lifts
 * only the caps its settings no longer name, so a holder named again keeps its state
 * (what its budgets have left). */
bool sl_backend_settings_names_caps(const sl_backend_settings_t *s, const char *holder, bool team);

/* ---------------------------------------------------------------- backend options
 * The `redis` backend's options, parsed from the `backend: redis://...` URL. They are
 * declared here, with the interface, so the daemon's configuration can hold them
 * without including one backend's header; sl_backend_redis_new() (redis.h) takes them.
 * Defined in redis/options.c. */

typedef enum sl_redis_fail {
    SL_REDIS_FAIL_CLOSED = 0, /* reject with backend_unavailable */
    SL_REDIS_FAIL_OPEN,       /* decide locally on a 1/replicas share, alert */
} sl_redis_fail_t;

typedef struct sl_redis_options {
    char host[256];
    int port;              /* 6379 */
    int db;                /* 0 */
    char password[256];    /* "" = no AUTH */
    sl_redis_fail_t fail;  /* closed */
    double timeout_s;      /* 0.5: a command unanswered this long marks Redis down */
    double tick_s;         /* 1.0: heartbeat, reconnect and advance period */
    bool replace_library;  /* load this build's library over another version */
    bool cold_start_full;  /* false: a pool created without known history starts with
                            * empty buckets that refill (?cold_start=empty, the default);
                            * true: full (?cold_start=full) */
    char replica_id[64];   /* "" = hostname-pid */
} sl_redis_options_t;

/* Fills the defaults above (host 127.0.0.1). */
void sl_redis_options_init(sl_redis_options_t *o);

/* Parses "redis://[:password@]host[:port][/db][?fail=open|closed&timeout_ms=N&replace=1&
 * cold_start=empty|full]"
 * into `o` (fields not named keep their values). Returns 0, or -1 with `err` set. */
int sl_redis_options_parse_url(sl_redis_options_t *o, const char *url, char *err, size_t errlen);

#endif /* SL_BACKEND_H */
