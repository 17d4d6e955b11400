/* redis_internal.h - the redis backend's state (rb_t) and the sl__rb_ functions its files share.
 *
 * The backend's files, by concern (redis.h is its interface to the server):
 *   options.c    defaults and the redis:// URL
 *   lifetime.c   creation with the startup library check, the operations table, teardown
 *   conn.c       the command connection: commands with deadlines, connecting, recovery, the tick
 *   subscribe.c  the subscriber connection: events other replicas publish
 *   events.c     the clock, the event queue, what is known of each pool
 *   failopen.c   Redis down: the local engine, replays, doubts, charges
 *   ops.c        request, tickets, settle, cancel, extend
 *   manage.c     configure, the task graph, pool and agent listings, ping
 *   redis_proto.c  FCALL argument vectors and reply decoding; sluice.lua the library itself
 *   limits_fcall.c the action limits' FCALLs (limits.lua) and loading that library
 *   suspend.c    suspended agents: one hash every replica reads
 *   batchq.c     the batch processing queues: the library's batch section (batch.lua)
 *   cluster.c    Redis Cluster: the slot map, a connection per master, routing, MOVED/ASK
 * Every function here is called from a file other than its own; each is defined in the
 * file its group names, and runs on the daemon's libevent thread.
 */
#ifndef SL_BACKEND_REDIS_INTERNAL_H
#define SL_BACKEND_REDIS_INTERNAL_H

#include "redis.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis.h>
#include <async.h>
#include <adapters/libevent.h>

#include "redis_proto.h"

extern const char sl__redis_lua_source[];

#define MAX_POOLS 1024
#define MAX_DEFERRED 100000

typedef struct rb rb_t;
typedef struct rcall rcall_t;
typedef struct sl__rcluster sl__rcluster_t;
typedef void (*rcall_fn)(rb_t *rb, rcall_t *c, redisReply *r);

/* One command in flight. */
struct rcall {
    rb_t *rb;
    rcall_fn fn;
    void *ctx;
    int idx;
    double deadline;
    rcall_t *prev, *next;
    /* Cluster mode only (cluster.c): the master it was sent to (-1: the seed connection),
     * the command kept for a resend after MOVED/ASK, and the redirects followed. */
    int node;
    sl__rcmd_t *cmd;
    int redirects;
};

typedef struct rpool {
    char *name;
    int no;          /* registry number; 0 until registered */
    double wake_s;   /* next wake-up, Redis time */
    /* The pool's history as last seen (sluice.lua, "epochs"); 0 until the first reply. */
    double epoch;        /* the epoch this replica knows */
    double next_n;       /* the highest id counter seen: a copy below it lost writes */
    double lost_until_s; /* backend_state_lost is raised until then (Redis time) */
    bool lost_alert;     /* ... and this replica has raised it */
    double margin;       /* Redis's margin as last seen in events; 0 unknown */
    /* Fail-open spending not yet charged to Redis (input, output, requests, tokens):
     * `spent` accumulates the local engine's grants less its refunds; `charge` is what
     * was taken from it for the charge `charge_seq`, resent under the same key until
     * Redis acknowledges it (so it is applied once). */
    double spent[SL_BUCKET_COUNT];
    double charge[SL_BUCKET_COUNT];
    uint64_t charge_seq;  /* 0: no charge pending */
    bool charge_in_flight;
} rpool_t;

/* A queued event with its strings copied. */
typedef struct qevent {
    sl_event_t ev;
    char *pool, *agent, *reason, *alert;
} qevent_t;

/* A command accepted while down, replayed on recovery. */
typedef struct deferred {
    sl__rcmd_t cmd;
} deferred_t;

typedef struct doubt {
    char *pool;
    char *key; /* agent \x1f request_id */
} doubt_t;

struct rb {
    sl_backend_t base;
    struct event_base *evbase;
    sl_redis_options_t opt;
    sl_engine_config_t ecfg;
    redisAsyncContext *ac, *sub;
    sl__rcluster_t *cl; /* a Redis Cluster (cluster.c): ac is then the seed's connection */
    bool connected; /* the command connection is open */
    bool up;        /* ... and the library is checked and every pool configured */
    bool alert_on;
    struct event *tick, *wake, *deadline_ev, *flush_ev;
    rcall_t *head, *tail; /* pending commands, oldest first */
    rpool_t pools[MAX_POOLS];
    int n_pools;
    sl_backend_settings_t settings;
    bool have_settings;
    char roles[2048], prios[2048];
    int replicas;
    double offset_s; /* Redis time - local time */
    double max_next_n; /* the highest id counter seen in any pool: seeds a lost pool's */
    int local_no;        /* this replica's pool number for local ids (4096..8191) */
    bool local_no_known; /* ... given by the registry (else a hash of the replica id) */
    bool local_issued;   /* a local id was issued: local_no is fixed from then on */
    uint64_t local_base; /* local ids count from here (ms since 2025 at start) */
    bool outage_start;   /* up until now: the local share starts cold when next used */
    /* Tickets this replica queued that have not ended as far as it saw: when Redis loses
     * a pool's state they end (TICKET_EXPIRED), so their waiters do not wait for a grant
     * that cannot come. */
    struct queued_ticket {
        uint64_t id;
        int pool;
    } *queued;
    size_t n_queued, cap_queued;
    uint64_t charge_seq;
    sl_engine_t *local;  /* fail-open decisions */
    int local_replicas;  /* the share the local engine was configured with */
    sl_engine_t *check;  /* validates task graph writes */
    deferred_t *deferred;
    size_t n_deferred, cap_deferred;
    doubt_t *doubts;
    size_t n_doubts, cap_doubts;
    qevent_t *events;
    size_t n_events, cap_events;
    uint64_t seq;
    sl_backend_clock_t clock;
    int connect_pending; /* configure steps left before up */
    bool suspended_seen; /* the suspensions hash's marker was read (suspend.c) */
    bool freeing;
};

/* The context of a user operation. */
typedef struct rop {
    union {
        sl_backend_decision_cb decision;
        sl_backend_settle_cb settle;
        sl_backend_done_cb done;
        sl_backend_pools_cb pools;
        sl_backend_agents_cb agents;
        sl_backend_tasks_cb tasks;
    } cb;
    void *ud;
    char *pool;
    sl_request_t req; /* request: owned copies, for a fail-open decision */
    char *strs[10];
    char rid[96];
    sl__rcmd_t cmd; /* settle/cancel/extend: kept to defer when Redis is down */
    double ttl_s;
    int waiting, rc;
    char errmsg[256];
    void *items; /* pools / agents collected */
    size_t n, cap;
} rop_t;

/* ---- events.c ---- */
double sl__rb_now(sl_backend_t *b);
struct timeval sl__rb_tv_of(double s);
/* A malloc'd copy of `s`, or NULL for NULL or when out of memory (strdup() that takes NULL). */
char *sl__rb_dup_or_null(const char *s);
void sl__rb_remember_queued(rb_t *rb, uint64_t ticket, int pool);
void sl__rb_queue_event(rb_t *rb, const sl_event_t *ev);
void sl__rb_on_flush(evutil_socket_t fd, short what, void *ud);
void sl__rb_on_local_event(const sl_event_t *ev, void *ud);
void sl__rb_note_margin(rb_t *rb, const sl_event_t *ev);
void sl__rb_queue_reply_events(rb_t *rb, const sl__rreply_t *rep);
void sl__rb_set_alert(rb_t *rb, bool active);
rpool_t *sl__rb_pool_by_name(rb_t *rb, const char *name);
rpool_t *sl__rb_pool_by_id(rb_t *rb, uint64_t id);
void sl__rb_arm_wake(rb_t *rb);
void sl__rb_update_lost_alert(rb_t *rb, rpool_t *p, double redis_now);
/* Follows the pool's epoch: an epoch other than the one this replica knew means Redis
 * lost the pool's state (restarted empty, flushed, failed over to a copy that missed
 * writes). The library then starts cold and sets the alert window; a change this
 * replica sees first raises the alert here for as long. */
void sl__rb_note_state(rb_t *rb, rpool_t *p, const sl__rreply_t *rep);
/* What the pool's history looked like to this replica, for the library to compare:
 * `ep` (a pool gone from Redis is then `state_lost`, not unknown) and `hw`. */
void sl__rb_add_history(sl__rcmd_t *cmd, const rpool_t *p);
void sl__rb_note_wake(rb_t *rb, const char *pool, const sl__rreply_t *rep);

/* ---- conn.c ---- */
/* Sends `cmd` (freed here) and calls fn(reply) later, or fn(NULL) at once when the
 * connection is not usable (`internal` commands only need it open). */
void sl__rb_send_cmd(rb_t *rb, sl__rcmd_t *cmd, rcall_fn fn, void *ctx, int idx, bool internal);
void sl__rb_on_deadline(evutil_socket_t fd, short what, void *ud);
bool sl__rb_take_outage_start(rb_t *rb);
void sl__rb_on_disconnect(const redisAsyncContext *ac, int status);
void sl__rb_drop_connections(rb_t *rb);
/* How a configure may have to create the pool: cold or full, its id counter above every
 * one this replica saw, and whether this replica knew an earlier epoch (a loss). */
void sl__rb_add_configure_history(rb_t *rb, sl__rcmd_t *cmd, const rpool_t *p);
/* "FCALL sluice_register 1 <registry> name [number known]". */
void sl__rb_register_cmd(sl__rcmd_t *cmd, const rpool_t *p);
void sl__rb_connect_redis(rb_t *rb);
/* The connection knows what it talks to (a single node, or a Cluster whose slot map is
 * read): checks the libraries (every master's in a Cluster), then configures. */
void sl__rb_connect_steps(rb_t *rb);
/* hiredis's callback of every command sent by sl__rb_send_cmd (cluster.c resends with it). */
void sl__rb_on_call_reply(redisAsyncContext *ac, void *r, void *priv);
/* A step of connecting failed: logs it and drops the connections (the next tick retries). */
void sl__rb_connect_failed(rb_t *rb, const char *what, const char *why);
void sl__rb_on_tick(evutil_socket_t fd, short what, void *ud);
void sl__rb_on_wake(evutil_socket_t fd, short what, void *ud);

/* ---- cluster.c: Redis Cluster mode (rb->cl non-NULL); a single node never calls these ---- */
/* The hash slot of a key (0..16383): CRC16-XMODEM of the key, or of its hash tag (the
 * bytes between the first '{' and the next '}', when non-empty), modulo 16384. */
unsigned sl__rcl_key_slot(const char *key, size_t len);
/* The seed answered INFO with cluster_enabled:1: refuses a db other than 0, reads the slot
 * map (CLUSTER SLOTS), connects to every master, then calls sl__rb_connect_steps(). */
void sl__rcl_start(rb_t *rb);
/* Leaves cluster mode (the seed is a single node now). */
void sl__rcl_free(rb_t *rb);
/* Whether sl__rb_send_cmd must hand `cmd` to sl__rcl_broadcast: a command of no key
 * (FCALL of 0 keys, FUNCTION) runs on every master. */
bool sl__rcl_is_broadcast(rb_t *rb, const sl__rcmd_t *cmd);
/* Sends `cmd` (freed here) to every master; fn gets one reply standing for all: NULL when
 * one failed, else an error when one answered an error, else the common string (or the
 * differing strings joined by '/', so a version check sees the masters disagree). */
void sl__rcl_broadcast(rb_t *rb, sl__rcmd_t *cmd, rcall_fn fn, void *ctx, int idx, bool internal);
/* Sends the pending call `c` by the slot of `cmd`'s first key (taking `cmd` over: kept in
 * c for a resend). Returns REDIS_OK, or REDIS_ERR when no master can take it. */
int sl__rcl_submit(rb_t *rb, rcall_t *c, sl__rcmd_t *cmd);
/* A MOVED or ASK answer to `c`: resent where it points (MOVED also rereads the slot map),
 * at most 5 times per command; true when resent (c stays pending), false to deliver `r`. */
bool sl__rcl_redirect(rb_t *rb, rcall_t *c, const redisReply *r);
/* The pending call due first (calls on different masters answer out of order). */
rcall_t *sl__rcl_first_due(rb_t *rb);
/* The oldest pending call on the master `node`: its timeout starts with the answer before it. */
rcall_t *sl__rcl_next_on_node(rb_t *rb, int node);
/* Reads whatever every master's connection already received. */
void sl__rcl_read_all(rb_t *rb);
/* A connection of the cluster closed: true when it was a master's (the backend goes down). */
bool sl__rcl_lost(rb_t *rb, const redisAsyncContext *ac);
/* Frees every master's connection (each fails its pending commands). */
void sl__rcl_drop(rb_t *rb);
/* Frees a finished call's kept command. */
void sl__rcl_call_done(rcall_t *c);

/* ---- limits_fcall.c ---- */
/* Loads limits.lua (FUNCTION LOAD REPLACE) when Redis lacks it or holds another version. */
void sl__rb_limits_connect(rb_t *rb);

/* ---- subscribe.c ---- */
void sl__rb_subscribe(rb_t *rb);

/* ---- failopen.c ---- */
int64_t sl__rb_share(int64_t limit, int replicas);
/* (Re)configures the local engine with 1/replicas of every limit. `cold`: every pool's
 * buckets are emptied too and refill from now - what the replicas spent just before
 * Redis went away is not known here, and a full share on top of it would overbook. */
void sl__rb_local_configure(rb_t *rb, bool cold);
/* The values of a fail-open lease's rate-limit headers as its share reads them: each
 * limit and remaining count scaled to 1/replicas, the rest as they are. Free with free();
 * NULL when out of memory. */
const char **sl__rb_share_headers(const rb_t *rb, const char *const *names,
                                  const char *const *values, size_t count);
/* Lifts, in the local engine (if any), the caps `next` no longer names and the team
 * weights and memberships of the settings it was configured with: called before a
 * configure replaces them, so a cap the new settings drop does not outlive them there. */
void sl__rb_local_lift(rb_t *rb, const sl_backend_settings_t *next);
/* Appends the teams' weights ("teams": "team=weight,..."), members ("members":
 * "agent=team,...") and caps ("caps": see sl__rcaps_format) of the current settings to a
 * sluice_configure call (manage.c). */
void sl__rb_add_teams(const rb_t *rb, sl__rcmd_t *cmd);
/* Local ids: (local_no << 40) | (local_base + engine id). local_no is this replica's own
 * (4096..6143 from the registry; 6144..8191 a hash of its id when Redis was away at its
 * start), so no two replicas issue one id; local_base is the milliseconds since
 * 2025 when the process started, so a restarted replica issues ids above its earlier
 * ones (unless it issued more than 1,000 local ids per second on average). */
bool sl__rb_is_local(uint64_t id);
bool sl__rb_is_mine(const rb_t *rb, uint64_t id);
uint64_t sl__rb_engine_id(const rb_t *rb, uint64_t id);
void sl__rb_local_decision_ids(const rb_t *rb, sl_decision_t *d);
/* Local engine events carry engine ids; rewrite them to wire ids before delivery. */
void sl__rb_fix_local_events(rb_t *rb, size_t from);
void sl__rb_local_advance(rb_t *rb);
const char *sl__rb_unavailable_msg(rb_t *rb);
void sl__rb_defer_cmd(rb_t *rb, sl__rcmd_t *cmd);
void sl__rb_add_doubt(rb_t *rb, const char *pool, const char *agent, const char *rid);
/* Sends what each pool's local share spent (or refunded) since the last charge. A
 * pending charge keeps its key until acknowledged: the library applies a key once. */
void sl__rb_send_charges(rb_t *rb);

/* ---- ops.c (entries of the operations table: backend.h states their contracts) ---- */
void sl__rb_rop_free(rop_t *op);
rop_t *sl__rb_rop_new(void *ud);
void sl__rb_request(sl_backend_t *b, const sl_request_t *req, sl_backend_decision_cb cb, void *ud);
void sl__rb_ticket_poll(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud);
/* Done-style operations: ticket hold/cancel, lease cancel/extend, task writes. */
void sl__rb_on_done_reply(rb_t *rb, rcall_t *c, redisReply *r);
void sl__rb_ticket_hold(sl_backend_t *b, uint64_t ticket, bool held, sl_backend_done_cb cb,
                        void *ud);
void sl__rb_ticket_cancel(sl_backend_t *b, uint64_t ticket, sl_backend_done_cb cb, void *ud);
void sl__rb_cancel(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud);
void sl__rb_extend(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb,
                   void *ud);
void sl__rb_settle(sl_backend_t *b, uint64_t lease, const sl_settle_t *s,
                   sl_backend_settle_cb cb, void *ud);
void sl__rb_resync(sl_backend_t *b, uint64_t lease, double sent_after_s,
                   const char *const *names, const char *const *values, size_t count,
                   sl_backend_done_cb cb, void *ud);

/* ---- manage.c (operations-table entries, as ops.c's) ---- */
void sl__rb_configure(sl_backend_t *b, const sl_backend_settings_t *s, sl_backend_done_cb cb,
                      void *ud);
void sl__rb_task_put(sl_backend_t *b, const char *id, const char *role,
                     const char *const *depends_on, size_t n_depends, sl_task_state_t state,
                     sl_backend_done_cb cb, void *ud);
void sl__rb_task_delete(sl_backend_t *b, const char *id, sl_backend_done_cb cb, void *ud);
void sl__rb_tasks(sl_backend_t *b, sl_backend_tasks_cb cb, void *ud);
void sl__rb_pools(sl_backend_t *b, const char *pool, sl_backend_pools_cb cb, void *ud);
void sl__rb_agents(sl_backend_t *b, sl_backend_agents_cb cb, void *ud);
void sl__rb_agent_forget(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud);
void sl__rb_ping(sl_backend_t *b, sl_backend_done_cb cb, void *ud);

/* ---- suspend.c (operations-table entries, as ops.c's) ---- */
void sl__rb_suspend(sl_backend_t *b, const sl_suspension_t *s, sl_backend_done_cb cb, void *ud);
void sl__rb_release(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud);
void sl__rb_suspensions(sl_backend_t *b, sl_backend_suspensions_cb cb, void *ud);

/* ---- batchq.c (an operations-table entry) ---- */
void sl__rb_batch_queue(sl_backend_t *b, const sl_batchq_call_t *q, sl_backend_batchq_cb cb,
                        void *ud);
#endif
