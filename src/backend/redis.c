/* redis.c - the `redis` backend: FCALLs of sluice.lua over hiredis async on libevent, with fail-open/closed.
 *
 * Design, in the order things happen:
 *  - Connecting: AUTH/SELECT, then `sluice_version`; a missing library is loaded, a
 *    different version refused (or replaced when told to). Then every configured
 *    pool is registered (its number routes ids: id = pool_no << 40 | n) and
 *    configured, settles accepted while down are replayed and requests whose answer
 *    was lost are forgotten (refunded) - only then is the backend *up*.
 *  - Every operation is one FCALL (a request naming a task first asks the graph for
 *    `unblocks`). Each command carries a deadline, counted from when Redis could start
 *    it (its sending, or the answer to the command before it, whichever is later: a
 *    backlog in the pipeline is not an outage); the oldest pending deadline is watched
 *    by one timer, and a command that misses it marks Redis down: the connection is
 *    dropped, which fails every pending command at once.
 *  - Down, `fail: open`: requests are decided by an in-process engine configured with
 *    1/replicas of each limit (replicas = the last heartbeat's count); its ids carry
 *    pool number SL__RPOOL_LOCAL so they are settled locally whatever happens later.
 *    Settles, cancels and extends of Redis leases are answered at once and kept for
 *    replay (a second settle is `already_settled`, so a replay never charges twice).
 *    Requests sent when the connection broke may have been decided by Redis: each
 *    carries a request_id (the client's, or an internal one), and on recovery those
 *    are forgotten, refunding whatever they created. `fail: closed` answers
 *    SL_REDIS_EUNAVAILABLE instead. Both raise the alert `backend_unavailable`.
 *  - A tick (tick_s) sends the heartbeat (which counts replicas), reconnects when
 *    down, and advances every pool; a second timer follows the earliest wake-up the
 *    library reported, so queue heads are granted on time.
 *  - Events come back in every reply and are delivered from a libevent callback,
 *    never from inside a hiredis callback. Events published by other replicas arrive
 *    on a subscriber connection; those about tickets are delivered, so the replica
 *    holding a waiting request answers it.
 */
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

#include "redis/redis_proto.h"

extern const char sl__redis_lua_source[];

#define MAX_POOLS 1024
#define MAX_DEFERRED 100000

typedef struct rb rb_t;
typedef struct rcall rcall_t;
typedef void (*rcall_fn)(rb_t *rb, rcall_t *c, redisReply *r);

/* One command in flight. */
struct rcall {
    rb_t *rb;
    rcall_fn fn;
    void *ctx;
    int idx;
    double deadline;
    rcall_t *prev, *next;
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
    bool freeing;
};

/* ---- time ---- */

static double rb_now(sl_backend_t *b)
{
    return sl_backend_clock_now(&((rb_t *)b)->clock);
}

static struct timeval tv_of(double s)
{
    if (s < 0) s = 0;
    if (s > 86400) s = 86400;
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - floor(s)) * 1e6)};
    return tv;
}

static char *dup_or_null(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- events ---- */

static void forget_queued(rb_t *rb, uint64_t ticket)
{
    for (size_t i = 0; i < rb->n_queued; i++)
        if (rb->queued[i].id == ticket) {
            rb->queued[i] = rb->queued[--rb->n_queued];
            return;
        }
}

static void remember_queued(rb_t *rb, uint64_t ticket, int pool)
{
    if (rb->n_queued == rb->cap_queued) {
        size_t cap = rb->cap_queued ? rb->cap_queued * 2 : 64;
        struct queued_ticket *q = realloc(rb->queued, cap * sizeof *q);
        if (!q) return; /* its waiter then waits out its time, as before */
        rb->queued = q;
        rb->cap_queued = cap;
    }
    rb->queued[rb->n_queued].id = ticket;
    rb->queued[rb->n_queued].pool = pool;
    rb->n_queued++;
}

static void queue_event(rb_t *rb, const sl_event_t *ev)
{
    if (ev->ticket && (ev->kind == SL_EV_GRANTED || ev->kind == SL_EV_TICKET_CANCELLED ||
                       ev->kind == SL_EV_TICKET_EXPIRED || ev->kind == SL_EV_TICKET_REJECTED))
        forget_queued(rb, ev->ticket);
    if (rb->n_events == rb->cap_events) {
        size_t cap = rb->cap_events ? rb->cap_events * 2 : 64;
        qevent_t *p = realloc(rb->events, cap * sizeof *p);
        if (!p) return; /* events are notifications; the state in Redis stays authoritative */
        rb->events = p;
        rb->cap_events = cap;
    }
    qevent_t *q = &rb->events[rb->n_events++];
    q->ev = *ev;
    q->ev.pool = q->pool = dup_or_null(ev->pool);
    q->ev.agent = q->agent = dup_or_null(ev->agent);
    q->ev.reason = q->reason = dup_or_null(ev->reason);
    q->ev.alert = q->alert = dup_or_null(ev->alert);
    event_active(rb->flush_ev, EV_TIMEOUT, 0);
}

static void on_flush(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    /* Handlers may start operations that queue further events: index, not pointer. */
    for (size_t i = 0; i < rb->n_events; i++) {
        sl_event_t ev = rb->events[i].ev;
        if (rb->base.event_cb) rb->base.event_cb(&ev, rb->base.event_ud);
    }
    for (size_t i = 0; i < rb->n_events; i++) {
        free(rb->events[i].pool);
        free(rb->events[i].agent);
        free(rb->events[i].reason);
        free(rb->events[i].alert);
    }
    rb->n_events = 0;
}

static rpool_t *pool_by_name(rb_t *rb, const char *name);

/* What the local engine spends is charged to Redis when it returns: grants less refunds. */
static void account_local(rb_t *rb, const sl_event_t *ev)
{
    rpool_t *p = ev->pool ? pool_by_name(rb, ev->pool) : NULL;
    if (!p) return;
    double in = 0, out = 0, req = 0;
    switch (ev->kind) {
    case SL_EV_GRANTED:
        in = (double)ev->input_tokens, out = (double)ev->output_tokens, req = 1;
        break;
    case SL_EV_SETTLED:
        in = -(double)ev->adjust_input_tokens, out = -(double)ev->adjust_output_tokens;
        break;
    case SL_EV_CANCELLED:
    case SL_EV_UNCLAIMED:
        in = -(double)ev->input_tokens, out = -(double)ev->output_tokens, req = -1;
        break;
    default:
        return;
    }
    p->spent[SL_BUCKET_INPUT] += in;
    p->spent[SL_BUCKET_OUTPUT] += out;
    p->spent[SL_BUCKET_REQUESTS] += req;
    p->spent[SL_BUCKET_TOKENS] += in + out;
}

static void on_local_event(const sl_event_t *ev, void *ud)
{
    account_local(ud, ev);
    queue_event(ud, ev);
}

static void note_margin(rb_t *rb, const sl_event_t *ev)
{
    rpool_t *p = ev->kind == SL_EV_MARGIN && ev->pool ? pool_by_name(rb, ev->pool) : NULL;
    if (p) p->margin = ev->margin;
}

static void queue_reply_events(rb_t *rb, const sl__rreply_t *rep)
{
    sl_event_t ev;
    for (size_t i = 0; rep->events && i < rep->events->elements; i++) {
        if (!sl__rreply_event(rep, i, &ev)) continue;
        note_margin(rb, &ev);
        queue_event(rb, &ev);
    }
}

static void set_alert(rb_t *rb, bool active)
{
    if (rb->alert_on == active) return;
    rb->alert_on = active;
    sl_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = SL_EV_ALERT;
    ev.now_s = rb_now(&rb->base);
    ev.alert = "backend_unavailable";
    ev.active = active;
    queue_event(rb, &ev);
    fprintf(stderr, "sluiced: redis %s:%d %s\n", rb->opt.host, rb->opt.port,
            active ? "unavailable" : "available again");
}

/* ---- pools ---- */

static rpool_t *pool_by_name(rb_t *rb, const char *name)
{
    for (int i = 0; i < rb->n_pools; i++)
        if (strcmp(rb->pools[i].name, name) == 0) return &rb->pools[i];
    return NULL;
}

static rpool_t *pool_by_id(rb_t *rb, uint64_t id)
{
    int no = sl__rid_pool(id);
    for (int i = 0; i < rb->n_pools; i++)
        if (rb->pools[i].no == no && no) return &rb->pools[i];
    return NULL;
}

static void arm_wake(rb_t *rb)
{
    double at = INFINITY;
    for (int i = 0; i < rb->n_pools; i++)
        if (rb->pools[i].wake_s < at) at = rb->pools[i].wake_s;
    if (!isfinite(at) || !rb->up) {
        evtimer_del(rb->wake);
        return;
    }
    struct timeval tv = tv_of(at - (rb_now(&rb->base) + rb->offset_s) + 0.001);
    evtimer_add(rb->wake, &tv);
}

/* The alert window during which the buckets refill from a cold start (sluice.lua's COLD_S). */
#define COLD_S 60.0

static void update_lost_alert(rb_t *rb, rpool_t *p, double redis_now)
{
    bool active = p->lost_until_s > redis_now;
    if (active == p->lost_alert) return;
    p->lost_alert = active;
    sl_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = SL_EV_ALERT;
    ev.now_s = rb_now(&rb->base);
    ev.pool = p->name;
    ev.alert = "backend_state_lost";
    ev.active = active;
    queue_event(rb, &ev);
}

/* Follows the pool's epoch: an epoch other than the one this replica knew means Redis
 * lost the pool's state (restarted empty, flushed, failed over to a copy that missed
 * writes). The library then starts cold and sets the alert window; a change this
 * replica sees first raises the alert here for as long. */
static void note_state(rb_t *rb, rpool_t *p, const sl__rreply_t *rep)
{
    if (!p || !(rep->epoch > 0)) return;
    double redis_now = rb_now(&rb->base) + rb->offset_s;
    if (rep->lost_until_s > p->lost_until_s) p->lost_until_s = rep->lost_until_s;
    if (p->epoch > 0 && rep->epoch != p->epoch) {
        fprintf(stderr,
                "sluiced: redis: pool %s lost its state (epoch %.0f, now %.0f): cold start, "
                "alert backend_state_lost\n",
                p->name, p->epoch, rep->epoch);
        if (p->lost_until_s < redis_now + COLD_S) p->lost_until_s = redis_now + COLD_S;
        /* Its queue went with it: every ticket queued here before now has ended. */
        int idx = (int)(p - rb->pools);
        for (size_t i = rb->n_queued; i-- > 0;) {
            if (rb->queued[i].pool != idx) continue;
            sl_event_t ev;
            memset(&ev, 0, sizeof ev);
            ev.kind = SL_EV_TICKET_EXPIRED;
            ev.now_s = rb_now(&rb->base);
            ev.pool = p->name;
            ev.ticket = rb->queued[i].id;
            queue_event(rb, &ev); /* and forgets it */
        }
    }
    p->epoch = rep->epoch;
    if (rep->next_n > p->next_n) p->next_n = rep->next_n;
    if (p->next_n > rb->max_next_n) rb->max_next_n = p->next_n;
    update_lost_alert(rb, p, redis_now);
}

/* What the pool's history looked like to this replica, for the library to compare:
 * `ep` (a pool gone from Redis is then `state_lost`, not unknown) and `hw`. */
static void add_history(sl__rcmd_t *cmd, const rpool_t *p)
{
    if (!p || !(p->epoch > 0)) return;
    sl__rcmd_num(cmd, "ep", p->epoch);
    sl__rcmd_num(cmd, "hw", p->next_n);
}

static void note_wake(rb_t *rb, const char *pool, const sl__rreply_t *rep)
{
    rpool_t *p = pool ? pool_by_name(rb, pool) : NULL;
    if (!p) return;
    p->wake_s = rep->wake_s;
    note_state(rb, p, rep);
    arm_wake(rb);
}

/* ---- commands ---- */

static void go_down(rb_t *rb);

static void arm_deadline(rb_t *rb)
{
    if (!rb->head) {
        evtimer_del(rb->deadline_ev);
        return;
    }
    struct timeval tv = tv_of(rb->head->deadline - rb_now(&rb->base) + 0.001);
    evtimer_add(rb->deadline_ev, &tv);
}

static void unlink_call(rb_t *rb, rcall_t *c)
{
    if (c->prev) c->prev->next = c->next;
    else rb->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else rb->tail = c->prev;
    c->prev = c->next = NULL;
}

static void recover_lost_state(rb_t *rb);

static bool is_state_lost(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "state_lost") == 0;
}

static void on_call_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rcall_t *c = priv;
    rb_t *rb = c->rb;
    (void)ac;
    unlink_call(rb, c);
    /* Redis answers in order: the next command starts only now, and its timeout measures
     * it, not the backlog of the pipeline ahead of it (a burst is not an outage). */
    if (rb->head && !rb->freeing) {
        double starts = rb_now(&rb->base) + rb->opt.timeout_s;
        if (rb->head->deadline < starts) rb->head->deadline = starts;
    }
    if (!rb->freeing) arm_deadline(rb);
    if (!rb->freeing && is_state_lost(r)) recover_lost_state(rb);
    c->fn(rb, c, rb->freeing ? NULL : r);
    free(c);
}

/* Sends `cmd` (freed here) and calls fn(reply) later, or fn(NULL) at once when the
 * connection is not usable (`internal` commands only need it open). */
static void send_cmd(rb_t *rb, sl__rcmd_t *cmd, rcall_fn fn, void *ctx, int idx, bool internal)
{
    rcall_t *c = calloc(1, sizeof *c);
    bool usable = rb->ac && rb->connected && (internal || rb->up);
    if (!c || !usable) {
        sl__rcmd_free(cmd);
        if (c) {
            c->rb = rb;
            c->ctx = ctx;
            c->idx = idx;
            fn(rb, c, NULL);
            free(c);
        }
        return;
    }
    c->rb = rb;
    c->fn = fn;
    c->ctx = ctx;
    c->idx = idx;
    c->deadline = rb_now(&rb->base) + rb->opt.timeout_s;
    c->prev = rb->tail;
    if (rb->tail) rb->tail->next = c;
    else rb->head = c;
    rb->tail = c;
    if (!c->prev) arm_deadline(rb);
    int rc = redisAsyncCommandArgv(rb->ac, on_call_reply, c, cmd->argc, (const char **)cmd->argv,
                                   cmd->len);
    sl__rcmd_free(cmd);
    if (rc != REDIS_OK) {
        unlink_call(rb, c);
        fn(rb, c, NULL);
        free(c);
    }
}

static void on_deadline(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    /* The answer may be waiting unread (this loop was busy, not Redis): read it first. */
    if (rb->head && rb->head->deadline <= rb_now(&rb->base) && rb->ac && rb->connected)
        redisAsyncHandleRead(rb->ac);
    if (rb->head && rb->head->deadline <= rb_now(&rb->base)) {
        fprintf(stderr, "sluiced: redis did not answer within %.3f s\n", rb->opt.timeout_s);
        go_down(rb);
    } else {
        arm_deadline(rb);
    }
}

/* ---- fail-open: the local engine ---- */

static int64_t share(int64_t limit, int replicas)
{
    if (limit <= 0) return limit;
    int64_t s = limit / replicas;
    return s > 0 ? s : 1;
}

/* The margin of the local share: the pool's configured start, or lower when Redis's
 * margin was seen lower (429s cut it). */
static double local_margin(const rb_t *rb, const char *pool, const sl_pool_config_t *cfg)
{
    for (int i = 0; i < rb->n_pools; i++)
        if (strcmp(rb->pools[i].name, pool) == 0 && rb->pools[i].margin > 0 &&
            rb->pools[i].margin < cfg->margin_start)
            return rb->pools[i].margin > cfg->margin_floor ? rb->pools[i].margin : cfg->margin_floor;
    return cfg->margin_start;
}

/* (Re)configures the local engine with 1/replicas of every limit. `cold`: every pool's
 * buckets are emptied too and refill from now - what the replicas spent just before
 * Redis went away is not known here, and a full share on top of it would overbook. */
static void local_configure(rb_t *rb, bool cold)
{
    if (!rb->have_settings) return;
    int n = rb->replicas > 0 ? rb->replicas : 1;
    if (!rb->local) {
        rb->local = sl_engine_new(&rb->ecfg);
        if (!rb->local) return;
        sl_engine_set_event_cb(rb->local, on_local_event, rb);
        cold = true;
    } else if (rb->local_replicas == n && !cold) {
        return;
    }
    const sl_backend_settings_t *s = &rb->settings;
    for (size_t i = 0; i < s->n_roles; i++)
        sl_engine_set_role(rb->local, s->roles[i].name, s->roles[i].value);
    for (size_t i = 0; i < s->n_priorities; i++)
        sl_engine_set_priority(rb->local, s->priorities[i].name, s->priorities[i].value);
    double now = rb_now(&rb->base);
    for (size_t i = 0; i < s->n_pools; i++) {
        sl_pool_config_t cfg = s->pools[i].config;
        cfg.margin_start = local_margin(rb, s->pools[i].name, &cfg);
        cfg.input_tpm = share(cfg.input_tpm, n);
        cfg.output_tpm = share(cfg.output_tpm, n);
        cfg.rpm = share(cfg.rpm, n);
        cfg.tokens_tpm = share(cfg.tokens_tpm, n);
        cfg.concurrency = share(cfg.concurrency, n);
        sl_engine_configure_pool(rb->local, s->pools[i].name, &cfg, now);
        /* No cold-start window: headers seen during an outage only lower the share. */
        if (cold) sl_engine_pool_cold_start(rb->local, s->pools[i].name, 0, now);
    }
    rb->local_replicas = n;
}

/* Local ids: (local_no << 40) | (local_base + engine id). local_no is this replica's own
 * (4096..6143 from the registry; 6144..8191 a hash of its id when Redis was away at its
 * start), so no two replicas issue one id; local_base is the milliseconds since
 * 2025 when the process started, so a restarted replica issues ids above its earlier
 * ones (unless it issued more than 1,000 local ids per second on average). */
static bool is_local(uint64_t id)
{
    return sl__rid_pool(id) >= SL__RPOOL_LOCAL_MIN;
}

static bool is_mine(const rb_t *rb, uint64_t id)
{
    return sl__rid_pool(id) == rb->local_no && rb->local;
}

static uint64_t local_id(const rb_t *rb, uint64_t engine_id)
{
    return engine_id ? ((uint64_t)rb->local_no << SL__RID_SHIFT) | (rb->local_base + engine_id) : 0;
}

static uint64_t engine_id(const rb_t *rb, uint64_t id)
{
    uint64_t n = id & (((uint64_t)1 << SL__RID_SHIFT) - 1);
    return n > rb->local_base ? n - rb->local_base : 0;
}

static void local_decision_ids(const rb_t *rb, sl_decision_t *d)
{
    d->lease = local_id(rb, d->lease);
    d->ticket = local_id(rb, d->ticket);
}

/* Local engine events carry engine ids; rewrite them to wire ids before delivery. */
static void fix_local_events(rb_t *rb, size_t from)
{
    for (size_t i = from; i < rb->n_events; i++) {
        rb->events[i].ev.lease = local_id(rb, rb->events[i].ev.lease);
        rb->events[i].ev.ticket = local_id(rb, rb->events[i].ev.ticket);
    }
}

static void local_advance(rb_t *rb)
{
    if (!rb->local) return;
    size_t from = rb->n_events;
    sl_engine_advance(rb->local, rb_now(&rb->base));
    fix_local_events(rb, from);
}

static const char *unavailable_msg(rb_t *rb)
{
    static char msg[320];
    snprintf(msg, sizeof msg, "backend_unavailable: Redis at %s:%d does not answer", rb->opt.host,
             rb->opt.port);
    return msg;
}

static void defer_cmd(rb_t *rb, sl__rcmd_t *cmd)
{
    if (rb->n_deferred == rb->cap_deferred) {
        size_t cap = rb->cap_deferred ? rb->cap_deferred * 2 : 64;
        deferred_t *p = cap <= MAX_DEFERRED ? realloc(rb->deferred, cap * sizeof *p) : NULL;
        if (!p) {
            sl__rcmd_free(cmd); /* the lease will be reaped without refund: conservative */
            return;
        }
        rb->deferred = p;
        rb->cap_deferred = cap;
    }
    rb->deferred[rb->n_deferred++].cmd = *cmd;
    cmd->argc = 0;
}

static void add_doubt(rb_t *rb, const char *pool, const char *agent, const char *rid)
{
    if (rb->n_doubts == rb->cap_doubts) {
        size_t cap = rb->cap_doubts ? rb->cap_doubts * 2 : 64;
        doubt_t *p = realloc(rb->doubts, cap * sizeof *p);
        if (!p) return;
        rb->doubts = p;
        rb->cap_doubts = cap;
    }
    size_t na = strlen(agent), nr = strlen(rid);
    char *key = malloc(na + nr + 2);
    if (!key) return;
    memcpy(key, agent, na);
    key[na] = '\x1f';
    memcpy(key + na + 1, rid, nr + 1);
    rb->doubts[rb->n_doubts].pool = dup_or_null(pool);
    rb->doubts[rb->n_doubts].key = key;
    rb->n_doubts++;
}

/* ---- connection ---- */

static void connect_redis(rb_t *rb);
static void send_configure_all(rb_t *rb);

/* Redis stops deciding: the next local decision starts the local share cold. */
static void note_outage(rb_t *rb)
{
    if (rb->up) rb->outage_start = true;
}

static bool take_outage_start(rb_t *rb)
{
    bool was = rb->outage_start;
    rb->outage_start = false;
    return was;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rb_t *rb = ac->data;
    (void)status;
    if (!rb) return;
    if (ac == rb->ac) {
        note_outage(rb);
        rb->ac = NULL;
        rb->connected = false;
        rb->up = false;
        if (!rb->freeing) set_alert(rb, true);
    } else if (ac == rb->sub) {
        rb->sub = NULL;
    }
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    rb_t *rb = ac->data;
    if (!rb || ac != rb->ac) return;
    if (status != REDIS_OK) {
        rb->ac = NULL; /* hiredis frees a context that failed to connect */
        rb->connected = false;
        return;
    }
    rb->connected = true;
}

static void drop_connections(rb_t *rb)
{
    note_outage(rb);
    if (rb->ac) {
        redisAsyncContext *ac = rb->ac;
        rb->up = false;
        redisAsyncFree(ac); /* fails every pending command (on_call_reply with NULL) */
        rb->ac = NULL;
        rb->connected = false;
    }
    if (rb->sub) {
        redisAsyncContext *sub = rb->sub;
        rb->sub = NULL;
        redisAsyncFree(sub);
    }
}

static void go_down(rb_t *rb)
{
    drop_connections(rb);
    rb->up = false;
    set_alert(rb, true);
    if (rb->opt.fail == SL_REDIS_FAIL_OPEN) local_configure(rb, take_outage_start(rb));
}

static void on_published(redisAsyncContext *ac, void *r, void *priv)
{
    rb_t *rb = priv;
    redisReply *rep = r;
    (void)ac;
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 || rb->freeing) return;
    if (rep->element[2]->type != REDIS_REPLY_STRING) return;
    char *msg = rep->element[2]->str;
    char *sep = strchr(msg, '\x1e');
    if (!sep) return;
    *sep = '\0';
    if (strcmp(msg, rb->opt.replica_id) == 0) return; /* ours came back in the reply */
    for (char *part = sep + 1; part;) {
        char *next = strchr(part, '\x1e');
        if (next) *next++ = '\0';
        sl_event_t ev;
        bool ok = sl__wire_event(part, &ev);
        if (ok) note_margin(rb, &ev);
        /* Only what a waiting request needs: the holder answers it. */
        if (ok &&
            ((ev.kind == SL_EV_GRANTED && ev.ticket) || ev.kind == SL_EV_TICKET_CANCELLED ||
             ev.kind == SL_EV_TICKET_EXPIRED || ev.kind == SL_EV_TICKET_REJECTED))
            queue_event(rb, &ev);
        part = next;
    }
}

static void subscribe(rb_t *rb)
{
    if (rb->sub) return;
    redisAsyncContext *sub = redisAsyncConnect(rb->opt.host, rb->opt.port);
    if (!sub || sub->err) {
        if (sub) redisAsyncFree(sub);
        return;
    }
    sub->data = rb;
    redisLibeventAttach(sub, rb->evbase);
    redisAsyncSetDisconnectCallback(sub, on_disconnect);
    if (rb->opt.password[0]) redisAsyncCommand(sub, NULL, NULL, "AUTH %s", rb->opt.password);
    redisAsyncCommand(sub, on_published, rb, "SUBSCRIBE sluice:events");
    rb->sub = sub;
}

static void on_internal_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)rb;
    (void)c;
    (void)r;
}

/* A step of connecting failed: drop the connection so the next tick starts over. */
static void connect_failed(rb_t *rb, const char *what, const char *why)
{
    fprintf(stderr, "sluiced: redis %s:%d: %s: %s\n", rb->opt.host, rb->opt.port, what, why);
    drop_connections(rb);
}

/* ---- tickets whose events may have been missed ---- */

/* The answer to a peek at a ticket queued here: a grant or an end that happened while
 * this replica was not subscribed (Redis away) is delivered now as its event. */
static void on_peeked(rb_t *rb, rcall_t *c, redisReply *r)
{
    uint64_t ticket = *(uint64_t *)c->ctx;
    free(c->ctx);
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO || c->idx >= rb->n_pools) return; /* still unknown: asked again */
    sl_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.now_s = rb_now(&rb->base);
    ev.pool = rb->pools[c->idx].name;
    ev.ticket = ticket;
    if (rc == SL_OK) {
        sl_decision_t d;
        sl__rreply_decision(&rep, &d);
        if (d.status == SL_QUEUED) return;
        ev.kind = d.status == SL_GRANTED ? SL_EV_GRANTED : SL_EV_TICKET_EXPIRED;
        ev.lease = d.lease;
    } else {
        ev.kind = rc == SL_EALREADY ? SL_EV_TICKET_CANCELLED : SL_EV_TICKET_EXPIRED;
    }
    queue_event(rb, &ev);
}

/* After reconnecting: published events of the outage were not received. */
static void peek_queued(rb_t *rb)
{
    for (size_t i = 0; i < rb->n_queued; i++) {
        int idx = rb->queued[i].pool;
        uint64_t *id = malloc(sizeof *id);
        if (!id || idx >= rb->n_pools) {
            free(id);
            continue;
        }
        *id = rb->queued[i].id;
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_ticket", rb->pools[idx].name, NAN, rb->opt.replica_id);
        sl__rcmd_u64(&cmd, "ticket", *id);
        sl__rcmd_num(&cmd, "peek", 1);
        add_history(&cmd, &rb->pools[idx]);
        send_cmd(rb, &cmd, on_peeked, id, idx, true);
    }
}

/* ---- fail-open spending charged to Redis ---- */

static void on_charged(rb_t *rb, rcall_t *c, redisReply *r)
{
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (c->idx >= rb->n_pools) return;
    rpool_t *p = &rb->pools[c->idx];
    p->charge_in_flight = false;
    if (rc == SL_OK) {
        memset(p->charge, 0, sizeof p->charge);
        p->charge_seq = 0;
        queue_reply_events(rb, &rep);
        note_state(rb, p, &rep);
    } else if (rc != SL__RPROTO) {
        /* A charge the library refuses is dropped, not retried forever. */
        fprintf(stderr, "sluiced: redis: charging pool %s for its fail-open grants failed: %s\n",
                p->name, rep.msg);
        memset(p->charge, 0, sizeof p->charge);
        p->charge_seq = 0;
    }
}

/* Sends what each pool's local share spent (or refunded) since the last charge. A
 * pending charge keeps its key until acknowledged: the library applies a key once. */
static void send_charges(rb_t *rb)
{
    for (int i = 0; i < rb->n_pools && rb->up; i++) {
        rpool_t *p = &rb->pools[i];
        if (p->charge_in_flight) continue;
        if (!p->charge_seq) {
            bool any = false;
            for (int b = 0; b < SL_BUCKET_COUNT; b++) any |= p->spent[b] != 0;
            if (!any) continue;
            memcpy(p->charge, p->spent, sizeof p->charge);
            memset(p->spent, 0, sizeof p->spent);
            p->charge_seq = ++rb->charge_seq;
        }
        char key[128];
        snprintf(key, sizeof key, "~charge:%.63s:%llu:%llu", rb->opt.replica_id,
                 (unsigned long long)rb->local_base, (unsigned long long)p->charge_seq);
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_charge", p->name, NAN, rb->opt.replica_id);
        sl__rcmd_str(&cmd, "key", key);
        static const char *const names[SL_BUCKET_COUNT] = {"c0", "c1", "c2", "c3"};
        for (int b = 0; b < SL_BUCKET_COUNT; b++) sl__rcmd_num(&cmd, names[b], p->charge[b]);
        add_history(&cmd, p);
        p->charge_in_flight = true;
        send_cmd(rb, &cmd, on_charged, NULL, i, true);
    }
}

/* The registry's number for this replica's local ids, taken only while none was issued. */
static void on_replica_no(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    if (!r || r->type != REDIS_REPLY_STRING || rb->local_issued) return;
    int no = atoi(r->str);
    if (no >= SL__RPOOL_LOCAL_MIN && no < SL__RPOOL_LOCAL_HASHED) {
        rb->local_no = no;
        rb->local_no_known = true;
    }
}

static void send_replica_no(rb_t *rb)
{
    if (rb->local_no_known || rb->local_issued) return;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_replica_no");
    sl__rcmd_raw(&cmd, "1");
    sl__rcmd_raw(&cmd, "sluice:{registry}:pools");
    sl__rcmd_raw(&cmd, rb->opt.replica_id);
    send_cmd(rb, &cmd, on_replica_no, NULL, 0, true);
}

static void finish_connect_step(rb_t *rb)
{
    if (--rb->connect_pending > 0) return;
    /* Recovery: forget in-doubt requests, replay what was accepted while down. */
    for (size_t i = 0; i < rb->n_doubts;) {
        const char *pool = rb->doubts[i].pool;
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_forget", pool, NAN, rb->opt.replica_id);
        add_history(&cmd, pool_by_name(rb, pool));
        int n = 0;
        size_t j = i;
        char name[16];
        for (; j < rb->n_doubts && n < 80 && strcmp(rb->doubts[j].pool, pool) == 0; j++) {
            snprintf(name, sizeof name, "k%d", ++n);
            sl__rcmd_str(&cmd, name, rb->doubts[j].key);
        }
        sl__rcmd_num(&cmd, "kn", n);
        send_cmd(rb, &cmd, on_internal_reply, NULL, 0, true);
        i = j;
    }
    for (size_t i = 0; i < rb->n_doubts; i++) {
        free(rb->doubts[i].pool);
        free(rb->doubts[i].key);
    }
    rb->n_doubts = 0;
    for (size_t i = 0; i < rb->n_deferred; i++)
        send_cmd(rb, &rb->deferred[i].cmd, on_internal_reply, NULL, 0, true);
    rb->n_deferred = 0;
    rb->up = true;
    send_charges(rb);
    send_replica_no(rb);
    peek_queued(rb);
    set_alert(rb, false);
    subscribe(rb);
}

static void on_configured(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    sl__rreply_t rep;
    if (sl__rreply_parse(r, &rep) != SL_OK) {
        if (r) connect_failed(rb, "configuring a pool failed", rep.msg);
        return;
    }
    queue_reply_events(rb, &rep);
    note_wake(rb, sl__rreply_get(&rep, "name"), &rep);
    finish_connect_step(rb);
}

/* How a configure may have to create the pool: cold or full, its id counter above every
 * one this replica saw, and whether this replica knew an earlier epoch (a loss). */
static void add_configure_history(rb_t *rb, sl__rcmd_t *cmd, const rpool_t *p)
{
    sl__rcmd_str(cmd, "cold_start", rb->opt.cold_start_full ? "full" : "empty");
    if (rb->max_next_n > 0) sl__rcmd_num(cmd, "seed_n", rb->max_next_n);
    if (p->epoch > 0) sl__rcmd_num(cmd, "lost", 1);
    add_history(cmd, p);
}

/* "FCALL sluice_register 1 <registry> name [number known]". */
static void register_cmd(sl__rcmd_t *cmd, const rpool_t *p)
{
    char no[16];
    memset(cmd, 0, sizeof *cmd);
    sl__rcmd_raw(cmd, "FCALL");
    sl__rcmd_raw(cmd, "sluice_register");
    sl__rcmd_raw(cmd, "1");
    sl__rcmd_raw(cmd, "sluice:{registry}:pools");
    sl__rcmd_raw(cmd, p->name);
    if (p->no > 0) {
        snprintf(no, sizeof no, "%d", p->no);
        sl__rcmd_raw(cmd, no);
    }
}

static void on_registered(rb_t *rb, rcall_t *c, redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r) connect_failed(rb, "registering a pool failed", r->type == REDIS_REPLY_ERROR ? r->str : "?");
        return;
    }
    int i = c->idx;
    if (i >= rb->n_pools) return;
    rb->pools[i].no = atoi(r->str);
    const sl_named_pool_t *np = NULL;
    for (size_t k = 0; k < rb->settings.n_pools; k++)
        if (strcmp(rb->settings.pools[k].name, rb->pools[i].name) == 0) np = &rb->settings.pools[k];
    if (!np) return;
    sl__rcmd_t cmd;
    sl__rcmd_configure(&cmd, np->name, &np->config, &rb->ecfg, rb->roles, rb->prios,
                       rb->pools[i].no, NAN, rb->opt.replica_id);
    add_configure_history(rb, &cmd, &rb->pools[i]);
    send_cmd(rb, &cmd, on_configured, NULL, i, true);
}

/* Registers and configures every pool, then recovers (finish_connect_step). */
static void send_configure_all(rb_t *rb)
{
    rb->connect_pending = 1 + rb->n_pools;
    for (int i = 0; i < rb->n_pools; i++) {
        sl__rcmd_t cmd;
        register_cmd(&cmd, &rb->pools[i]);
        send_cmd(rb, &cmd, on_registered, NULL, i, true);
    }
    finish_connect_step(rb);
}

/* A pool this replica knew is gone from Redis (FLUSHALL, or a restart the connection
 * survived): not up until every pool is registered and configured again, which
 * creates them cold (the library's epochs). */
static void recover_lost_state(rb_t *rb)
{
    if (!rb->up) return;
    fprintf(stderr, "sluiced: redis %s:%d lost sluice's state: configuring again\n",
            rb->opt.host, rb->opt.port);
    note_outage(rb);
    rb->up = false;
    send_configure_all(rb);
}

static void on_library_loaded(rb_t *rb, rcall_t *c, redisReply *r)
{
    /* Another replica may have loaded it a moment ago: the version check passes next time. */
    if (r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "already exists")) r = NULL, c = NULL;
    if (c && (!r || r->type == REDIS_REPLY_ERROR)) {
        if (r) connect_failed(rb, "FUNCTION LOAD failed", r->str);
        return;
    }
    send_configure_all(rb);
}

static void load_library(rb_t *rb, bool replace)
{
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FUNCTION");
    sl__rcmd_raw(&cmd, "LOAD");
    if (replace) sl__rcmd_raw(&cmd, "REPLACE");
    sl__rcmd_raw(&cmd, sl__redis_lua_source);
    send_cmd(rb, &cmd, on_library_loaded, NULL, 0, true);
}

static void on_version(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    if (!r) return;
    if (r->type == REDIS_REPLY_ERROR) {
        load_library(rb, false); /* not loaded yet (a fresh or flushed Redis) */
        return;
    }
    if (r->type == REDIS_REPLY_STRING && strcmp(r->str, SL__REDIS_LIB_VERSION) == 0) {
        send_configure_all(rb);
        return;
    }
    if (rb->opt.replace_library) {
        load_library(rb, true);
        return;
    }
    char why[160];
    snprintf(why, sizeof why, "the library is version %s, this sluiced needs %s (replace=1 replaces it)",
             r->type == REDIS_REPLY_STRING ? r->str : "?", SL__REDIS_LIB_VERSION);
    connect_failed(rb, "version mismatch", why);
}

static void connect_redis(rb_t *rb)
{
    if (rb->ac) return;
    redisAsyncContext *ac = redisAsyncConnect(rb->opt.host, rb->opt.port);
    if (!ac || ac->err) {
        if (ac) redisAsyncFree(ac);
        return;
    }
    ac->data = rb;
    redisLibeventAttach(ac, rb->evbase);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    rb->ac = ac;
    rb->connected = true; /* commands queue until the socket connects */
    sl__rcmd_t cmd = {0};
    if (rb->opt.password[0]) {
        sl__rcmd_raw(&cmd, "AUTH");
        sl__rcmd_raw(&cmd, rb->opt.password);
        send_cmd(rb, &cmd, on_internal_reply, NULL, 0, true);
    }
    if (rb->opt.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", rb->opt.db);
        sl__rcmd_raw(&cmd, "SELECT");
        sl__rcmd_raw(&cmd, db);
        send_cmd(rb, &cmd, on_internal_reply, NULL, 0, true);
    }
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_version");
    sl__rcmd_raw(&cmd, "0");
    send_cmd(rb, &cmd, on_version, NULL, 0, true);
}

/* ---- the tick: heartbeat, reconnect, advance ---- */

static void on_advanced(rb_t *rb, rcall_t *c, redisReply *r)
{
    sl__rreply_t rep;
    if (sl__rreply_parse(r, &rep) != SL_OK) return;
    queue_reply_events(rb, &rep);
    if (c->idx < rb->n_pools) {
        rb->pools[c->idx].wake_s = rep.wake_s;
        note_state(rb, &rb->pools[c->idx], &rep);
        arm_wake(rb);
    }
}

static void advance_pool(rb_t *rb, int i)
{
    sl__rcmd_t cmd;
    sl__rcmd_begin(&cmd, "sluice_advance", rb->pools[i].name, NAN, rb->opt.replica_id);
    add_history(&cmd, &rb->pools[i]);
    rb->pools[i].wake_s = INFINITY; /* until the answer says otherwise */
    send_cmd(rb, &cmd, on_advanced, NULL, i, false);
}

static void on_heartbeat(rb_t *rb, rcall_t *c, redisReply *r)
{
    double sent_local = *(double *)c->ctx;
    free(c->ctx);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return;
    if (r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer > 0)
        rb->replicas = (int)r->element[0]->integer;
    if (r->element[1]->type == REDIS_REPLY_STRING) {
        double local = (sent_local + rb_now(&rb->base)) / 2;
        rb->offset_s = strtod(r->element[1]->str, NULL) - local;
    }
}

static void on_tick(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    local_advance(rb);
    double redis_now = rb_now(&rb->base) + rb->offset_s;
    for (int i = 0; i < rb->n_pools; i++) update_lost_alert(rb, &rb->pools[i], redis_now);
    if (!rb->ac) {
        connect_redis(rb);
        return;
    }
    if (!rb->up) return;
    double *sent = malloc(sizeof *sent);
    if (sent) {
        *sent = rb_now(&rb->base);
        sl__rcmd_t cmd = {0};
        char window[32];
        snprintf(window, sizeof window, "%g", rb->opt.tick_s * 5);
        sl__rcmd_raw(&cmd, "FCALL");
        sl__rcmd_raw(&cmd, "sluice_heartbeat");
        sl__rcmd_raw(&cmd, "1");
        sl__rcmd_raw(&cmd, "sluice:{registry}:replicas");
        sl__rcmd_raw(&cmd, rb->opt.replica_id);
        sl__rcmd_raw(&cmd, window);
        send_cmd(rb, &cmd, on_heartbeat, sent, 0, false);
    }
    for (int i = 0; i < rb->n_pools; i++) advance_pool(rb, i);
    send_charges(rb);
    subscribe(rb);
}

static void on_wake(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    double redis_now = rb_now(&rb->base) + rb->offset_s;
    for (int i = 0; i < rb->n_pools; i++)
        if (rb->pools[i].wake_s <= redis_now + 0.002) advance_pool(rb, i);
    arm_wake(rb);
}

/* ---- operations ---- */

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

static void rop_free(rop_t *op)
{
    if (!op) return;
    for (size_t i = 0; i < sizeof op->strs / sizeof op->strs[0]; i++) free(op->strs[i]);
    free(op->pool);
    sl__rcmd_free(&op->cmd);
    free(op->items);
    free(op);
}

static rop_t *rop_new(void *ud)
{
    rop_t *op = calloc(1, sizeof *op);
    if (op) op->ud = ud;
    return op;
}

static void answer_decision_local(rb_t *rb, rop_t *op)
{
    local_configure(rb, take_outage_start(rb));
    sl_decision_t d;
    size_t from = rb->n_events;
    int rc = rb->local ? sl_engine_request(rb->local, &op->req, rb_now(&rb->base), &d) : SL_ENOMEM;
    rb->local_issued = true; /* (events carry the ids too, rewritten just below) */
    fix_local_events(rb, from);
    if (rc == SL_OK) local_decision_ids(rb, &d);
    op->cb.decision(rc, rc == SL_OK ? &d : NULL,
                    rc == SL_OK ? NULL : rb->local ? sl_engine_errmsg(rb->local) : "out of memory",
                    op->ud);
}

static void on_request_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO) {
        /* Redis may have decided before the connection broke: forget it on recovery. */
        if (r == NULL && op->req.request_id && !op->waiting)
            add_doubt(rb, op->pool, op->req.agent, op->req.request_id);
        if (rb->opt.fail == SL_REDIS_FAIL_OPEN) answer_decision_local(rb, op);
        else op->cb.decision(SL_REDIS_EUNAVAILABLE, NULL, unavailable_msg(rb), op->ud);
    } else if (rc != SL_OK) {
        op->cb.decision(rc, NULL, rep.msg, op->ud);
    } else {
        sl_decision_t d;
        sl__rreply_decision(&rep, &d);
        queue_reply_events(rb, &rep);
        note_wake(rb, op->pool, &rep);
        /* An internal request id is ours, not the client's: it never replays. */
        if (op->rid[0]) d.replayed = false;
        rpool_t *p = pool_by_name(rb, op->pool);
        if (d.status == SL_QUEUED && !d.replayed && p)
            remember_queued(rb, d.ticket, (int)(p - rb->pools));
        op->cb.decision(SL_OK, &d, NULL, op->ud);
    }
    rop_free(op);
}

static void send_request(rb_t *rb, rop_t *op, int64_t graph_unblocks)
{
    sl__rcmd_t cmd;
    sl__rcmd_request(&cmd, &op->req, graph_unblocks, NAN, rb->opt.replica_id);
    add_history(&cmd, pool_by_name(rb, op->pool));
    op->waiting = 0;
    send_cmd(rb, &cmd, on_request_reply, op, 0, false);
}

static void on_graph_unblocks(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    if (!r) {
        op->waiting = 1; /* nothing was decided: no doubt to record */
        on_request_reply(rb, c, NULL);
        return;
    }
    send_request(rb, op, r->type == REDIS_REPLY_INTEGER ? r->integer : -1);
}

static void rb_request(sl_backend_t *b, const sl_request_t *req, sl_backend_decision_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, "out of memory", ud);
        return;
    }
    op->cb.decision = cb;
    op->req = *req;
    const char *const src[] = {req->agent, req->pool,      req->role,       req->task,
                               req->priority, req->cache_key, req->request_id, req->model};
    for (size_t i = 0; i < 8; i++) op->strs[i] = dup_or_null(src[i]);
    op->req.agent = op->strs[0];
    op->req.pool = op->strs[1];
    op->req.role = op->strs[2];
    op->req.task = op->strs[3];
    op->req.priority = op->strs[4];
    op->req.cache_key = op->strs[5];
    op->req.request_id = op->strs[6];
    op->req.model = op->strs[7];
    op->strs[8] = dup_or_null(req->cache_prefix_hash); /* borrowed by the caller: copied */
    op->req.cache_prefix_hash = op->strs[8];
    op->pool = dup_or_null(req->pool ? req->pool : "default");
    if (!req->request_id && req->agent) {
        snprintf(op->rid, sizeof op->rid, "~%.63s.%llu", rb->opt.replica_id,
                 (unsigned long long)++rb->seq);
        op->req.request_id = op->rid;
    }
    if (!rb->up) {
        if (rb->opt.fail == SL_REDIS_FAIL_OPEN) {
            op->req.request_id = op->strs[6];
            answer_decision_local(rb, op);
        } else {
            cb(SL_REDIS_EUNAVAILABLE, NULL, unavailable_msg(rb), ud);
        }
        rop_free(op);
        return;
    }
    if (req->task) {
        sl__rcmd_t cmd = {0};
        sl__rcmd_raw(&cmd, "FCALL");
        sl__rcmd_raw(&cmd, "sluice_task_unblocks");
        sl__rcmd_raw(&cmd, "1");
        sl__rcmd_raw(&cmd, "sluice:{graph}:tasks");
        sl__rcmd_raw(&cmd, req->task);
        send_cmd(rb, &cmd, on_graph_unblocks, op, 0, false);
        return;
    }
    send_request(rb, op, -1);
}

static void on_ticket_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO) {
        op->cb.decision(SL_REDIS_EUNAVAILABLE, NULL, unavailable_msg(rb), op->ud);
    } else if (rc != SL_OK) {
        op->cb.decision(rc, NULL, rep.msg, op->ud);
    } else {
        sl_decision_t d;
        sl__rreply_decision(&rep, &d);
        queue_reply_events(rb, &rep);
        note_wake(rb, op->pool, &rep);
        op->cb.decision(SL_OK, &d, NULL, op->ud);
    }
    rop_free(op);
}

/* Names the caller (sl_backend_set_actor) so the library checks the owner it keeps. */
static void add_actor(rb_t *rb, sl__rcmd_t *cmd)
{
    sl__rcmd_str(cmd, "actor", rb->base.actor.agent);
    sl__rcmd_str(cmd, "actor_prefix", rb->base.actor.agent_prefix);
}

/* A local id of another replica (or of this one's earlier run): only it could settle it. */
static const char *foreign_msg(const char *what, uint64_t id)
{
    static char msg[160];
    snprintf(msg, sizeof msg,
             "%s %llu was decided by another replica while Redis was away; only that replica "
             "knows it", what, (unsigned long long)id);
    return msg;
}

static const char *not_found_msg(const char *what, uint64_t id)
{
    static char msg[96];
    snprintf(msg, sizeof msg, "%s %llu not found", what, (unsigned long long)id);
    return msg;
}

static void rb_ticket_poll(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    if (is_local(ticket) && !is_mine(rb, ticket)) {
        cb(SL_ENOTFOUND, NULL, foreign_msg("ticket", ticket), ud);
        return;
    }
    if (is_local(ticket)) {
        sl_decision_t d;
        size_t from = rb->n_events;
        int rc = rb->local ? sl_engine_ticket(rb->local, engine_id(rb, ticket), rb_now(b), &d)
                           : SL_ENOTFOUND;
        fix_local_events(rb, from);
        if (rc == SL_OK) local_decision_ids(rb, &d);
        cb(rc, rc == SL_OK ? &d : NULL,
           rc == SL_OK ? NULL : rb->local ? sl_engine_errmsg(rb->local) : not_found_msg("ticket", ticket),
           ud);
        return;
    }
    rpool_t *p = pool_by_id(rb, ticket);
    if (!p) {
        cb(SL_ENOTFOUND, NULL, not_found_msg("ticket", ticket), ud);
        return;
    }
    rop_t *op = rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, "out of memory", ud);
        return;
    }
    op->cb.decision = cb;
    op->pool = dup_or_null(p->name);
    sl__rcmd_t cmd;
    sl__rcmd_begin(&cmd, "sluice_ticket", p->name, NAN, rb->opt.replica_id);
    sl__rcmd_u64(&cmd, "ticket", ticket);
    add_actor(rb, &cmd);
    add_history(&cmd, p);
    send_cmd(rb, &cmd, on_ticket_reply, op, 0, false);
}

/* Done-style operations: ticket hold/cancel, lease cancel/extend, task writes. */
static void on_done_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO && op->cmd.argc && rb->opt.fail == SL_REDIS_FAIL_OPEN) {
        /* A cancel or extend of a Redis lease while down: accepted, replayed later. */
        defer_cmd(rb, &op->cmd);
        if (op->cb.done) op->cb.done(SL_OK, op->ttl_s > 0 ? rb_now(&rb->base) + op->ttl_s : 0, NULL, op->ud);
    } else if (rc == SL__RPROTO) {
        if (op->cb.done) op->cb.done(SL_REDIS_EUNAVAILABLE, 0, unavailable_msg(rb), op->ud);
    } else {
        if (rc == SL_OK) {
            queue_reply_events(rb, &rep);
            note_wake(rb, op->pool, &rep);
        }
        if (op->cb.done)
            op->cb.done(rc, rc == SL_OK ? sl__rreply_num(&rep, "expires_at", 0) : 0,
                        rc == SL_OK ? NULL : rep.msg, op->ud);
    }
    rop_free(op);
}

/* Runs `fn` of the library on the pool of `id` with id_name=id (and more args). */
static void id_op(rb_t *rb, const char *fn, const char *id_name, uint64_t id, int held,
                  double ttl_s, bool deferrable, sl_backend_done_cb cb, void *ud)
{
    rpool_t *p = pool_by_id(rb, id);
    if (!p) {
        if (cb) cb(SL_ENOTFOUND, 0, not_found_msg(id_name, id), ud);
        return;
    }
    rop_t *op = rop_new(ud);
    if (!op) {
        if (cb) cb(SL_ENOMEM, 0, "out of memory", ud);
        return;
    }
    op->cb.done = cb;
    op->pool = dup_or_null(p->name);
    op->ttl_s = ttl_s;
    sl__rcmd_t cmd;
    sl__rcmd_begin(&cmd, fn, p->name, NAN, rb->opt.replica_id);
    sl__rcmd_u64(&cmd, id_name, id);
    if (held >= 0) sl__rcmd_num(&cmd, "held", held);
    if (ttl_s > 0) sl__rcmd_num(&cmd, "ttl", ttl_s);
    add_actor(rb, &cmd);
    add_history(&cmd, p);
    if (deferrable) {
        /* keep a copy to replay if Redis turns out to be down */
        sl__rcmd_begin(&op->cmd, fn, p->name, NAN, rb->opt.replica_id);
        sl__rcmd_u64(&op->cmd, id_name, id);
        if (ttl_s > 0) sl__rcmd_num(&op->cmd, "ttl", ttl_s);
        add_actor(rb, &op->cmd);
    }
    send_cmd(rb, &cmd, on_done_reply, op, 0, false);
}

static void local_done(rb_t *rb, int rc, double value, sl_backend_done_cb cb, void *ud)
{
    if (cb) cb(rc, value, rc == SL_OK ? NULL : sl_engine_errmsg(rb->local), ud);
}

static void rb_ticket_hold(sl_backend_t *b, uint64_t ticket, bool held, sl_backend_done_cb cb,
                           void *ud)
{
    rb_t *rb = (rb_t *)b;
    if (is_local(ticket) && !is_mine(rb, ticket)) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign_msg("ticket", ticket), ud);
        return;
    }
    if (is_local(ticket)) {
        local_done(rb, sl_engine_ticket_hold(rb->local, engine_id(rb, ticket), held, rb_now(b)), 0, cb, ud);
        return;
    }
    id_op(rb, "sluice_ticket_hold", "ticket", ticket, held ? 1 : 0, 0, false, cb, ud);
}

static void rb_ticket_cancel(sl_backend_t *b, uint64_t ticket, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    if (is_local(ticket) && !is_mine(rb, ticket)) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign_msg("ticket", ticket), ud);
        return;
    }
    if (is_local(ticket)) {
        size_t from = rb->n_events;
        int rc = sl_engine_ticket_cancel(rb->local, engine_id(rb, ticket), rb_now(b));
        fix_local_events(rb, from);
        local_done(rb, rc, 0, cb, ud);
        return;
    }
    id_op(rb, "sluice_ticket_cancel", "ticket", ticket, -1, 0, false, cb, ud);
}

static void rb_cancel(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    if (is_local(lease) && !is_mine(rb, lease)) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign_msg("lease", lease), ud);
        return;
    }
    if (is_local(lease)) {
        size_t from = rb->n_events;
        int rc = sl_engine_cancel(rb->local, engine_id(rb, lease), rb_now(b));
        fix_local_events(rb, from);
        local_done(rb, rc, 0, cb, ud);
        return;
    }
    id_op(rb, "sluice_cancel", "lease", lease, -1, 0, true, cb, ud);
}

static void rb_extend(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb,
                      void *ud)
{
    rb_t *rb = (rb_t *)b;
    if (is_local(lease) && !is_mine(rb, lease)) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign_msg("lease", lease), ud);
        return;
    }
    if (is_local(lease)) {
        double at = 0;
        int rc = sl_engine_extend(rb->local, engine_id(rb, lease), ttl_s, rb_now(b), &at);
        local_done(rb, rc, at, cb, ud);
        return;
    }
    if (!(ttl_s > 0) || !isfinite(ttl_s)) {
        if (cb) cb(SL_EINVAL, 0, "ttl must be a finite number of seconds > 0", ud);
        return;
    }
    id_op(rb, "sluice_extend", "lease", lease, -1, ttl_s, true, cb, ud);
}

static void on_settle_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO && rb->opt.fail == SL_REDIS_FAIL_OPEN) {
        /* What the call used is a fact: keep it and apply it when Redis returns. */
        defer_cmd(rb, &op->cmd);
        sl_settle_result_t res = {0, 0, 0, false};
        op->cb.settle(SL_OK, &res, NULL, op->ud);
    } else if (rc == SL__RPROTO) {
        op->cb.settle(SL_REDIS_EUNAVAILABLE, NULL, unavailable_msg(rb), op->ud);
    } else if (rc != SL_OK) {
        op->cb.settle(rc, NULL, rep.msg, op->ud);
    } else {
        sl_settle_result_t res = {
            .adjust_input_tokens = (int64_t)sl__rreply_num(&rep, "adjust_input_tokens", 0),
            .adjust_output_tokens = (int64_t)sl__rreply_num(&rep, "adjust_output_tokens", 0),
            .estimate_error = sl__rreply_num(&rep, "estimate_error", 0),
        };
        queue_reply_events(rb, &rep);
        note_wake(rb, op->pool, &rep);
        op->cb.settle(SL_OK, &res, NULL, op->ud);
    }
    rop_free(op);
}

static void rb_settle(sl_backend_t *b, uint64_t lease, const sl_settle_t *s,
                      sl_backend_settle_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    char err[256];
    if (is_local(lease) && !is_mine(rb, lease)) {
        cb(SL_ENOTFOUND, NULL, foreign_msg("lease", lease), ud);
        return;
    }
    if (is_local(lease)) {
        sl_settle_result_t res;
        size_t from = rb->n_events;
        int rc = sl_engine_settle(rb->local, engine_id(rb, lease), s, rb_now(b), &res);
        fix_local_events(rb, from);
        cb(rc, rc == SL_OK ? &res : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(rb->local), ud);
        return;
    }
    rpool_t *p = pool_by_id(rb, lease);
    if (!p) {
        cb(SL_ENOTFOUND, NULL, not_found_msg("lease", lease), ud);
        return;
    }
    rop_t *op = rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, "out of memory", ud);
        return;
    }
    op->cb.settle = cb;
    op->pool = dup_or_null(p->name);
    sl__rcmd_t cmd;
    int rc = sl__rcmd_settle(&cmd, p->name, lease, s, NAN, rb->opt.replica_id, err, sizeof err);
    if (rc == SL_OK)
        rc = sl__rcmd_settle(&op->cmd, p->name, lease, s, NAN, rb->opt.replica_id, err, sizeof err);
    if (rc != SL_OK) {
        cb(rc, NULL, err, ud);
        rop_free(op);
        return;
    }
    add_actor(rb, &cmd);
    add_actor(rb, &op->cmd);
    add_history(&cmd, p);
    add_history(&op->cmd, p);
    send_cmd(rb, &cmd, on_settle_reply, op, 0, false);
}

/* ---- configure ---- */

static int copy_settings(rb_t *rb, const sl_backend_settings_t *s)
{
    sl_backend_settings_t c = {0};
    c.pools = calloc(s->n_pools ? s->n_pools : 1, sizeof *c.pools);
    c.roles = calloc(s->n_roles ? s->n_roles : 1, sizeof *c.roles);
    c.priorities = calloc(s->n_priorities ? s->n_priorities : 1, sizeof *c.priorities);
    if (!c.pools || !c.roles || !c.priorities) goto nomem;
    for (size_t i = 0; i < s->n_pools; i++, c.n_pools++) {
        c.pools[i].config = s->pools[i].config;
        if (!(c.pools[i].name = dup_or_null(s->pools[i].name))) goto nomem;
    }
    for (size_t i = 0; i < s->n_roles; i++, c.n_roles++) {
        c.roles[i].value = s->roles[i].value;
        if (!(c.roles[i].name = dup_or_null(s->roles[i].name))) goto nomem;
    }
    for (size_t i = 0; i < s->n_priorities; i++, c.n_priorities++) {
        c.priorities[i].value = s->priorities[i].value;
        if (!(c.priorities[i].name = dup_or_null(s->priorities[i].name))) goto nomem;
    }
    sl_backend_settings_clear(&rb->settings);
    rb->settings = c;
    rb->have_settings = true;
    return SL_OK;
nomem:
    sl_backend_settings_clear(&c);
    return SL_ENOMEM;
}

/* "name=value,..." of the engine's predefined classes overridden by the settings. */
static void class_list(char *out, size_t len, const char *const *names, const double *values,
                       size_t n_builtin, const sl_named_factor_t *extra, size_t n_extra)
{
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n_builtin; i++) {
        double v = values[i];
        for (size_t j = 0; j < n_extra; j++)
            if (strcmp(extra[j].name, names[i]) == 0) v = extra[j].value;
        off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%s=%.17g", off ? "," : "",
                                names[i], v);
    }
    for (size_t j = 0; j < n_extra; j++) {
        bool builtin = false;
        for (size_t i = 0; i < n_builtin; i++) builtin |= strcmp(extra[j].name, names[i]) == 0;
        if (!builtin)
            off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%s=%.17g",
                                    off ? "," : "", extra[j].name, extra[j].value);
    }
}

static void on_user_configured(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL_OK) {
        queue_reply_events(rb, &rep);
        note_wake(rb, sl__rreply_get(&rep, "name"), &rep);
    } else if (rc != SL__RPROTO && op->rc == SL_OK) {
        op->rc = rc;
        snprintf(op->errmsg, sizeof op->errmsg, "%s", rep.msg);
    }
    /* Redis down: the settings are kept and applied when it returns. */
    if (--op->waiting == 0) {
        if (op->cb.done) op->cb.done(op->rc, 0, op->rc ? op->errmsg : NULL, op->ud);
        rop_free(op);
    }
}

static void on_user_registered(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    int i = c->idx;
    if (r && r->type == REDIS_REPLY_STRING && i < rb->n_pools) {
        rb->pools[i].no = atoi(r->str);
        for (size_t k = 0; k < rb->settings.n_pools; k++) {
            const sl_named_pool_t *np = &rb->settings.pools[k];
            if (strcmp(np->name, rb->pools[i].name) != 0) continue;
            sl__rcmd_t cmd;
            sl__rcmd_configure(&cmd, np->name, &np->config, &rb->ecfg, rb->roles, rb->prios,
                               rb->pools[i].no, NAN, rb->opt.replica_id);
            add_configure_history(rb, &cmd, &rb->pools[i]);
            send_cmd(rb, &cmd, on_user_configured, op, i, false);
            return;
        }
    }
    on_user_configured(rb, c, NULL);
}

static void rb_configure(sl_backend_t *b, const sl_backend_settings_t *s, sl_backend_done_cb cb,
                         void *ud)
{
    rb_t *rb = (rb_t *)b;
    char err[512];
    long bad_pool;
    int rc = sl_backend_settings_validate(s, &bad_pool, err, sizeof err);
    if (rc == SL_OK && rb->n_pools + (int)s->n_pools > MAX_POOLS) {
        rc = SL_EINVAL;
        snprintf(err, sizeof err, "pools: at most %d", MAX_POOLS);
    }
    if (rc == SL_OK) rc = copy_settings(rb, s);
    if (rc != SL_OK) {
        if (cb) cb(rc, 0, rc == SL_ENOMEM ? "out of memory" : err, ud);
        return;
    }
    static const char *const role_names[] = {"planner", "reviewer", "worker"};
    static const double role_values[] = {3, 2, 1};
    static const char *const prio_names[] = {"high", "normal", "low"};
    static const double prio_values[] = {4, 1, 0.25};
    class_list(rb->roles, sizeof rb->roles, role_names, role_values, 3, s->roles, s->n_roles);
    class_list(rb->prios, sizeof rb->prios, prio_names, prio_values, 3, s->priorities,
               s->n_priorities);
    for (size_t i = 0; i < s->n_roles; i++)
        sl_engine_set_role(rb->check, s->roles[i].name, s->roles[i].value);
    for (size_t i = 0; i < s->n_pools; i++) {
        if (pool_by_name(rb, s->pools[i].name)) continue;
        rb->pools[rb->n_pools].name = dup_or_null(s->pools[i].name);
        rb->pools[rb->n_pools].wake_s = INFINITY;
        rb->n_pools++;
    }
    rb->local_replicas = 0; /* the local engine follows the new settings when next used */
    if (rb->local) local_configure(rb, false);
    if (!rb->up || s->n_pools == 0) {
        if (cb) cb(SL_OK, 0, NULL, ud);
        return;
    }
    rop_t *op = rop_new(ud);
    if (!op) {
        if (cb) cb(SL_ENOMEM, 0, "out of memory", ud);
        return;
    }
    op->cb.done = cb;
    op->waiting = (int)s->n_pools;
    for (size_t i = 0; i < s->n_pools; i++) {
        rpool_t *p = pool_by_name(rb, s->pools[i].name);
        sl__rcmd_t cmd;
        register_cmd(&cmd, p);
        send_cmd(rb, &cmd, on_user_registered, op, (int)(p - rb->pools), false);
    }
}

/* ---- task graph ---- */

static void rb_task_put(sl_backend_t *b, const char *id, const char *role,
                        const char *const *depends_on, size_t n_depends, sl_task_state_t state,
                        sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    /* The engine's rules, on a scratch engine that knows the configured roles. */
    int rc = sl_engine_task_put(rb->check, id, role, depends_on, n_depends, state);
    if (rc != SL_OK) {
        if (cb) cb(rc, 0, sl_engine_errmsg(rb->check), ud);
        return;
    }
    sl_engine_task_delete(rb->check, id);
    rop_t *op = rop_new(ud);
    if (!op) {
        if (cb) cb(SL_ENOMEM, 0, "out of memory", ud);
        return;
    }
    op->cb.done = cb;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_task_put");
    sl__rcmd_raw(&cmd, "1");
    sl__rcmd_raw(&cmd, "sluice:{graph}:tasks");
    sl__rcmd_raw(&cmd, id);
    sl__rcmd_raw(&cmd, role ? role : "worker");
    sl__rcmd_raw(&cmd, sl_task_state_name(state));
    for (size_t i = 0; i < n_depends && cmd.argc < SL__RCMD_MAX_ARGS - 1; i++)
        sl__rcmd_raw(&cmd, depends_on[i]);
    send_cmd(rb, &cmd, on_done_reply, op, 0, false);
}

static void on_task_deleted(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    if (!r) {
        if (op->cb.done) op->cb.done(SL_REDIS_EUNAVAILABLE, 0, unavailable_msg(rb), op->ud);
    } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        if (op->cb.done) op->cb.done(SL_OK, 0, NULL, op->ud);
    } else if (op->cb.done) {
        op->cb.done(SL_ENOTFOUND, 0, "task not found", op->ud);
    }
    rop_free(op);
}

static void rb_task_delete(sl_backend_t *b, const char *id, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = rop_new(ud);
    if (!op) {
        if (cb) cb(SL_ENOMEM, 0, "out of memory", ud);
        return;
    }
    op->cb.done = cb;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_task_delete");
    sl__rcmd_raw(&cmd, "1");
    sl__rcmd_raw(&cmd, "sluice:{graph}:tasks");
    sl__rcmd_raw(&cmd, id);
    send_cmd(rb, &cmd, on_task_deleted, op, 0, false);
}

static void on_tasks(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    (void)rb;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        op->cb.tasks(r ? SL__RPROTO : SL_REDIS_EUNAVAILABLE, NULL, 0, op->ud);
        rop_free(op);
        return;
    }
    size_t n = r->elements;
    sl_task_info_t *tasks = calloc(n ? n : 1, sizeof *tasks);
    char **bufs = calloc(n ? n : 1, sizeof *bufs);
    const char ***deps = calloc(n ? n : 1, sizeof *deps);
    size_t k = 0;
    for (size_t i = 0; tasks && bufs && deps && i < n; i++) {
        const redisReply *t = r->element[i];
        if (t->type != REDIS_REPLY_ARRAY || t->elements != 3) continue;
        char *buf = dup_or_null(t->element[1]->str);
        if (!buf) continue;
        bufs[k] = buf;
        size_t parts = 1;
        for (char *p = buf; *p; p++) parts += *p == '\x1f';
        deps[k] = calloc(parts, sizeof *deps[k]);
        char *field[3] = {buf, NULL, NULL};
        size_t nd = 0;
        char *p = buf;
        for (size_t f = 0; p; f++) {
            char *sep = strchr(p, '\x1f');
            if (sep) *sep = '\0';
            if (f < 2) field[f] = p;
            else if (*p && deps[k]) deps[k][nd++] = p;
            p = sep ? sep + 1 : NULL;
        }
        tasks[k].id = t->element[0]->str;
        tasks[k].role = field[0];
        tasks[k].state = field[1] && strcmp(field[1], "running") == 0 ? SL_TASK_RUNNING
                         : field[1] && strcmp(field[1], "done") == 0  ? SL_TASK_DONE
                                                                      : SL_TASK_WAITING;
        tasks[k].depends_on = deps[k];
        tasks[k].n_depends = nd;
        tasks[k].unblocks = t->element[2]->integer;
        k++;
    }
    op->cb.tasks(tasks ? SL_OK : SL_ENOMEM, tasks, k, op->ud);
    for (size_t i = 0; bufs && i < k; i++) {
        free(bufs[i]);
        free(deps[i]);
    }
    free(bufs);
    free(deps);
    free(tasks);
    rop_free(op);
}

static void rb_tasks(sl_backend_t *b, sl_backend_tasks_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, 0, ud);
        return;
    }
    op->cb.tasks = cb;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_tasks");
    sl__rcmd_raw(&cmd, "1");
    sl__rcmd_raw(&cmd, "sluice:{graph}:tasks");
    send_cmd(rb, &cmd, on_tasks, op, 0, false);
}

/* ---- pools and agents ---- */

static void collect_local_pool(const sl_pool_info_t *p, void *ud)
{
    rop_t *op = ud;
    if (op->n == op->cap) {
        size_t cap = op->cap ? op->cap * 2 : 8;
        void *items = realloc(op->items, cap * sizeof(sl_pool_info_t));
        if (!items) return;
        op->items = items;
        op->cap = cap;
    }
    ((sl_pool_info_t *)op->items)[op->n++] = *p;
}

static void on_pool_info(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL_OK && c->idx < rb->n_pools) {
        sl_pool_info_t *info = &((sl_pool_info_t *)op->items)[op->n++];
        sl__rreply_pool_info(&rep, info);
        info->name = rb->pools[c->idx].name; /* outlives the reply */
        queue_reply_events(rb, &rep);
        note_wake(rb, info->name, &rep);
    } else if (op->rc == SL_OK) {
        op->rc = rc == SL__RPROTO ? SL_REDIS_EUNAVAILABLE : rc;
        const char *msg = rc == SL__RPROTO ? unavailable_msg(rb) : rep.msg;
        size_t n = strlen(msg);
        if (n >= sizeof op->errmsg) n = sizeof op->errmsg - 1;
        memcpy(op->errmsg, msg, n);
        op->errmsg[n] = '\0';
    }
    if (--op->waiting > 0) return;
    if (op->rc != SL_OK && rb->opt.fail == SL_REDIS_FAIL_OPEN && rb->local && op->rc == SL_REDIS_EUNAVAILABLE) {
        op->n = 0; /* down: show the local share */
        local_advance(rb);
        if (op->pool) {
            sl_pool_info_t info;
            int lrc = sl_engine_pool_info(rb->local, op->pool, &info);
            op->cb.pools(lrc, lrc == SL_OK ? &info : NULL, lrc == SL_OK ? 1 : 0,
                         lrc == SL_OK ? NULL : "pool not found", op->ud);
        } else {
            sl_engine_pool_foreach(rb->local, collect_local_pool, op);
            op->cb.pools(SL_OK, op->items, op->n, NULL, op->ud);
        }
    } else {
        op->cb.pools(op->rc, op->rc == SL_OK ? op->items : NULL, op->rc == SL_OK ? op->n : 0,
                     op->rc == SL_OK ? NULL : op->errmsg, op->ud);
    }
    rop_free(op);
}

static void rb_pools(sl_backend_t *b, const char *pool, sl_backend_pools_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    if (pool && !pool_by_name(rb, pool)) {
        cb(SL_ENOTFOUND, NULL, 0, "pool not found", ud);
        return;
    }
    rop_t *op = rop_new(ud);
    if (op) op->items = calloc(rb->n_pools ? (size_t)rb->n_pools : 1, sizeof(sl_pool_info_t));
    if (!op || !op->items) {
        rop_free(op);
        cb(SL_ENOMEM, NULL, 0, "out of memory", ud);
        return;
    }
    op->cb.pools = cb;
    op->cap = (size_t)rb->n_pools;
    op->pool = dup_or_null(pool);
    op->waiting = pool ? 1 : rb->n_pools;
    if (op->waiting == 0) {
        cb(SL_OK, NULL, 0, NULL, ud);
        rop_free(op);
        return;
    }
    for (int i = 0; i < rb->n_pools; i++) {
        if (pool && strcmp(pool, rb->pools[i].name) != 0) continue;
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_pool", rb->pools[i].name, NAN, rb->opt.replica_id);
        add_history(&cmd, &rb->pools[i]);
        send_cmd(rb, &cmd, on_pool_info, op, i, false);
    }
}

/* Agents: the library keeps them per pool; one entry per name, summed over pools. */
typedef struct agent_acc {
    sl_agent_info_t info;
    char *name, *role, *state;
} agent_acc_t;

static void on_agents(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    for (size_t j = 0; rc == SL_OK && rep.fields && j + 1 < rep.fields->elements; j += 2) {
        char *buf = dup_or_null(rep.fields->element[j + 1]->str);
        char *part[12];
        int n = 0;
        for (char *p = buf; p && n < 12;) {
            part[n++] = p;
            char *sep = strchr(p, '\x1f');
            if (!sep) break;
            *sep = '\0';
            p = sep + 1;
        }
        if (n < 11) {
            free(buf);
            continue;
        }
        agent_acc_t *acc = NULL;
        for (size_t k = 0; k < op->n; k++)
            if (strcmp(((agent_acc_t *)op->items)[k].name, part[0]) == 0)
                acc = &((agent_acc_t *)op->items)[k];
        if (!acc) {
            if (op->n == op->cap) {
                size_t cap = op->cap ? op->cap * 2 : 16;
                void *items = realloc(op->items, cap * sizeof(agent_acc_t));
                if (!items) {
                    free(buf);
                    continue;
                }
                op->items = items;
                op->cap = cap;
            }
            acc = &((agent_acc_t *)op->items)[op->n++];
            memset(acc, 0, sizeof *acc);
            acc->name = dup_or_null(part[0]);
            acc->role = dup_or_null(part[1]);
            acc->info.weight = strtod(part[2], NULL);
            acc->info.repeats = (int64_t)strtod(part[3], NULL);
            acc->info.estimate_error = strtod(part[4], NULL);
        }
        acc->info.alert_estimate_error |= atoi(part[5]) != 0;
        acc->info.leases += (int64_t)strtod(part[6], NULL);
        acc->info.queued += (int64_t)strtod(part[7], NULL);
        acc->info.tokens_in += (int64_t)strtod(part[8], NULL);
        acc->info.tokens_out += (int64_t)strtod(part[9], NULL);
        acc->info.got_429 += (int64_t)strtod(part[10], NULL);
        free(buf);
    }
    if (rc != SL_OK && op->rc == SL_OK) op->rc = rc == SL__RPROTO ? SL_REDIS_EUNAVAILABLE : rc;
    (void)rb;
    if (--op->waiting > 0) return;
    agent_acc_t *acc = op->items;
    sl_agent_info_t *out = calloc(op->n ? op->n : 1, sizeof *out);
    for (size_t k = 0; out && k < op->n; k++) {
        out[k] = acc[k].info;
        out[k].name = acc[k].name;
        out[k].role = acc[k].role;
        out[k].state = out[k].leases > 0 ? "running" : out[k].queued > 0 ? "queued" : "idle";
    }
    op->cb.agents(!out ? SL_ENOMEM : op->rc, op->rc == SL_OK ? out : NULL,
                  op->rc == SL_OK && out ? op->n : 0, op->ud);
    for (size_t k = 0; k < op->n; k++) {
        free(acc[k].name);
        free(acc[k].role);
    }
    free(out);
    rop_free(op);
}

static void rb_agents(sl_backend_t *b, sl_backend_agents_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, 0, ud);
        return;
    }
    op->cb.agents = cb;
    op->waiting = rb->n_pools;
    if (!op->waiting) {
        cb(SL_OK, NULL, 0, ud);
        rop_free(op);
        return;
    }
    for (int i = 0; i < rb->n_pools; i++) {
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_agents", rb->pools[i].name, NAN, rb->opt.replica_id);
        add_history(&cmd, &rb->pools[i]);
        send_cmd(rb, &cmd, on_agents, op, i, false);
    }
}

/* ---- ping, lifetime ---- */

static void on_ping(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    bool ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, SL__REDIS_LIB_VERSION) == 0;
    if (op->cb.done) op->cb.done(ok ? SL_OK : SL_REDIS_EUNAVAILABLE, 0, ok ? NULL : unavailable_msg(rb), op->ud);
    rop_free(op);
}

static void rb_ping(sl_backend_t *b, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = rop_new(ud);
    if (!op) {
        if (cb) cb(SL_ENOMEM, 0, "out of memory", ud);
        return;
    }
    op->cb.done = cb;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_version");
    sl__rcmd_raw(&cmd, "0");
    send_cmd(rb, &cmd, on_ping, op, 0, false);
}

static void rb_free(sl_backend_t *b)
{
    rb_t *rb = (rb_t *)b;
    rb->freeing = true;
    drop_connections(rb);
    if (rb->tick) event_free(rb->tick);
    if (rb->wake) event_free(rb->wake);
    if (rb->deadline_ev) event_free(rb->deadline_ev);
    if (rb->flush_ev) event_free(rb->flush_ev);
    for (int i = 0; i < rb->n_pools; i++) free(rb->pools[i].name);
    for (size_t i = 0; i < rb->n_deferred; i++) sl__rcmd_free(&rb->deferred[i].cmd);
    free(rb->deferred);
    for (size_t i = 0; i < rb->n_doubts; i++) {
        free(rb->doubts[i].pool);
        free(rb->doubts[i].key);
    }
    free(rb->doubts);
    for (size_t i = 0; i < rb->n_events; i++) {
        free(rb->events[i].pool);
        free(rb->events[i].agent);
        free(rb->events[i].reason);
        free(rb->events[i].alert);
    }
    free(rb->events);
    free(rb->queued);
    sl_backend_settings_clear(&rb->settings);
    sl_engine_free(rb->local);
    sl_engine_free(rb->check);
    free(rb);
}

static const sl_backend_ops_t redis_ops = {
    .name = "redis",
    .free = rb_free,
    .now = rb_now,
    .configure = rb_configure,
    .request = rb_request,
    .ticket_poll = rb_ticket_poll,
    .ticket_hold = rb_ticket_hold,
    .ticket_cancel = rb_ticket_cancel,
    .settle = rb_settle,
    .cancel = rb_cancel,
    .extend = rb_extend,
    .task_put = rb_task_put,
    .task_delete = rb_task_delete,
    .tasks = rb_tasks,
    .pools = rb_pools,
    .agents = rb_agents,
    .ping = rb_ping,
};

bool sl_backend_redis_state_lost(sl_backend_t *b, const char *pool)
{
    if (!b || b->ops != &redis_ops || !pool) return false;
    rpool_t *p = pool_by_name((rb_t *)b, pool);
    return p && p->lost_alert;
}

bool sl_backend_redis_available(sl_backend_t *b)
{
    return b && b->ops == &redis_ops && ((rb_t *)b)->up;
}

int sl_backend_redis_replicas(sl_backend_t *b)
{
    return b && b->ops == &redis_ops && ((rb_t *)b)->replicas > 0 ? ((rb_t *)b)->replicas : 1;
}

void sl_redis_options_init(sl_redis_options_t *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->port = 6379;
    o->fail = SL_REDIS_FAIL_CLOSED;
    o->timeout_s = 0.5;
    o->tick_s = 1.0;
}

int sl_redis_options_parse_url(sl_redis_options_t *o, const char *url, char *err, size_t errlen)
{
    const char *p;
    if (strncmp(url, "redis://", 8) == 0) {
        p = url + 8;
    } else {
        snprintf(err, errlen, "backend \"%s\": expected redis://[:password@]host[:port][/db]%s",
                 url, strncmp(url, "rediss://", 9) == 0 ? " (TLS needs hiredis >= 1.0)" : "");
        return -1;
    }
    char buf[768];
    snprintf(buf, sizeof buf, "%s", p);
    char *query = strchr(buf, '?');
    if (query) *query++ = '\0';
    char *hostpart = buf;
    char *at = strrchr(buf, '@');
    if (at) {
        *at = '\0';
        char *pw = strchr(buf, ':') ? strchr(buf, ':') + 1 : buf;
        snprintf(o->password, sizeof o->password, "%.255s", pw);
        hostpart = at + 1;
    }
    char *slash = strchr(hostpart, '/');
    if (slash) {
        *slash = '\0';
        char *end;
        long db = strtol(slash + 1, &end, 10);
        if (slash[1] && (*end || db < 0 || db > 15)) {
            snprintf(err, errlen, "backend \"%s\": database \"%s\" must be 0-15", url, slash + 1);
            return -1;
        }
        o->db = (int)db;
    }
    char *colon = strrchr(hostpart, ':');
    if (colon) {
        *colon = '\0';
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port < 1 || port > 65535) {
            snprintf(err, errlen, "backend \"%s\": port \"%s\" must be 1-65535", url, colon + 1);
            return -1;
        }
        o->port = (int)port;
    }
    if (*hostpart) snprintf(o->host, sizeof o->host, "%.255s", hostpart);
    for (char *kv = query ? strtok(query, "&") : NULL; kv; kv = strtok(NULL, "&")) {
        if (strcmp(kv, "fail=open") == 0) o->fail = SL_REDIS_FAIL_OPEN;
        else if (strcmp(kv, "fail=closed") == 0) o->fail = SL_REDIS_FAIL_CLOSED;
        else if (strncmp(kv, "timeout_ms=", 11) == 0 && atof(kv + 11) > 0) o->timeout_s = atof(kv + 11) / 1000;
        else if (strncmp(kv, "tick_ms=", 8) == 0 && atof(kv + 8) > 0) o->tick_s = atof(kv + 8) / 1000;
        else if (strcmp(kv, "replace=1") == 0) o->replace_library = true;
        else if (strcmp(kv, "cold_start=empty") == 0) o->cold_start_full = false;
        else if (strcmp(kv, "cold_start=full") == 0) o->cold_start_full = true;
        else if (strncmp(kv, "replica=", 8) == 0) snprintf(o->replica_id, sizeof o->replica_id, "%s", kv + 8);
        else {
            snprintf(err, errlen, "backend \"%s\": unknown option \"%s\"", url, kv);
            return -1;
        }
    }
    return 0;
}

/* The startup check: is the library there, and of our version? */
static int check_library(const sl_redis_options_t *o, char *err, size_t errlen)
{
    struct timeval tv = tv_of(o->timeout_s * 4);
    redisContext *c = redisConnectWithTimeout(o->host, o->port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return 0; /* unreachable: start down */
    }
    redisSetTimeout(c, tv);
    int rc = 0;
    redisReply *r = o->password[0] ? redisCommand(c, "AUTH %s", o->password) : NULL;
    if (r && r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis %s:%d: AUTH failed: %s", o->host, o->port, r->str);
        rc = -1;
    }
    if (r) freeReplyObject(r);
    r = rc ? NULL : redisCommand(c, "FCALL sluice_version 0");
    if (r && r->type == REDIS_REPLY_STRING && strcmp(r->str, SL__REDIS_LIB_VERSION) != 0 &&
        !o->replace_library) {
        snprintf(err, errlen,
                 "redis %s:%d holds the sluice library version %s but this sluiced needs "
                 "version %s: upgrade every replica together, or start one with "
                 "backend: redis://...?replace=1 to replace it",
                 o->host, o->port, r->str, SL__REDIS_LIB_VERSION);
        rc = -1;
    } else if (r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "unknown command")) {
        snprintf(err, errlen, "redis %s:%d does not support Functions (Redis 7 or later needed)",
                 o->host, o->port);
        rc = -1;
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    return rc;
}

sl_backend_t *sl_backend_redis_new(struct event_base *base, const sl_redis_options_t *o,
                                   const sl_engine_config_t *cfg, char *err, size_t errlen)
{
    if (check_library(o, err, errlen) != 0) return NULL;
    rb_t *rb = calloc(1, sizeof *rb);
    if (!rb) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    rb->base.ops = &redis_ops;
    rb->evbase = base;
    rb->opt = *o;
    if (!(rb->opt.timeout_s > 0)) rb->opt.timeout_s = 0.5;
    if (!(rb->opt.tick_s > 0)) rb->opt.tick_s = 1.0;
    if (!rb->opt.replica_id[0]) {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(rb->opt.replica_id, sizeof rb->opt.replica_id, "%.40s-%ld", host, (long)getpid());
    }
    if (cfg) rb->ecfg = *cfg;
    else sl_engine_config_init(&rb->ecfg);
    sl_backend_clock_init(&rb->clock);
    rb->replicas = 1;
    uint32_t h = 2166136261u; /* FNV-1a of the replica id: the number until the registry's */
    for (const char *q = rb->opt.replica_id; *q; q++) h = (h ^ (unsigned char)*q) * 16777619u;
    rb->local_no = SL__RPOOL_LOCAL_HASHED + (int)(h % (SL__RPOOL_LOCAL_MAX - SL__RPOOL_LOCAL_HASHED + 1));
    double since_2025_ms = (rb->clock.start_real_s - 1735689600.0) * 1000.0;
    rb->local_base = since_2025_ms > 0 ? (uint64_t)since_2025_ms : 0;
    rb->check = sl_engine_new(NULL);
    rb->tick = event_new(base, -1, EV_PERSIST, on_tick, rb);
    rb->wake = evtimer_new(base, on_wake, rb);
    rb->deadline_ev = evtimer_new(base, on_deadline, rb);
    rb->flush_ev = event_new(base, -1, 0, on_flush, rb);
    if (!rb->check || !rb->tick || !rb->wake || !rb->deadline_ev || !rb->flush_ev) {
        rb_free(&rb->base);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct timeval tv = tv_of(rb->opt.tick_s);
    event_add(rb->tick, &tv);
    connect_redis(rb);
    return &rb->base;
}
