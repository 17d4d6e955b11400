/* conn.c - the redis backend's command connection: deadlines, connecting, recovery, the tick.
 *
 * Design, in the order things happen (fail-open is failopen.c's, events events.c's):
 *  - Connecting: AUTH/SELECT, `INFO cluster` (a Cluster is cluster.c's: the slot map and
 *    a connection per master, and the same steps on every master), then
 *    `sluice_version`; a missing library is loaded, a
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
 *  - A tick (tick_s) sends the heartbeat (which counts replicas), reconnects when
 *    down, and advances every pool; a second timer follows the earliest wake-up the
 *    library reported, so queue heads are granted on time.
 */
#include "redis_internal.h"

/* ---- commands ---- */

static void go_down(rb_t *rb);

static void arm_deadline(rb_t *rb)
{
    if (!rb->head) {
        evtimer_del(rb->deadline_ev);
        return;
    }
    const rcall_t *due = rb->cl ? sl__rcl_first_due(rb) : rb->head;
    struct timeval tv = sl__rb_tv_of(due->deadline - sl__rb_now(&rb->base) + 0.001);
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

/* A call the library refused (an error code: not found, already settled, ...) may still
 * have moved its pool (its advance granted tickets, ended leases: sluice.lua's
 * CALL.refused): its events go out as any call's, whichever callback reads the code. */
static void queue_refusal_events(rb_t *rb, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 5 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "ok") == 0 ||
        r->element[3]->type != REDIS_REPLY_ARRAY || r->element[3]->elements == 0)
        return;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc != SL_OK && rc != SL__RPROTO) sl__rb_queue_reply_events(rb, &rep);
}

void sl__rb_on_call_reply(redisAsyncContext *ac, void *r, void *priv)
{
    rcall_t *c = priv;
    rb_t *rb = c->rb;
    redisReply *reply = r;
    (void)ac;
    if (rb->cl && !rb->freeing && reply && reply->type == REDIS_REPLY_ERROR &&
        sl__rcl_redirect(rb, c, reply)) {
        arm_deadline(rb);
        return;
    }
    unlink_call(rb, c);
    /* Redis answers in order: the next command starts only now, and its timeout measures
     * it, not the backlog of the pipeline ahead of it (a burst is not an outage). In a
     * Cluster, "next" is the next on the same master. */
    rcall_t *next = rb->cl ? sl__rcl_next_on_node(rb, c->node) : rb->head;
    if (next && !rb->freeing) {
        double starts = sl__rb_now(&rb->base) + rb->opt.timeout_s;
        if (next->deadline < starts) next->deadline = starts;
    }
    if (!rb->freeing) arm_deadline(rb);
    if (!rb->freeing && is_state_lost(r)) recover_lost_state(rb);
    if (!rb->freeing) queue_refusal_events(rb, r);
    c->fn(rb, c, rb->freeing ? NULL : r);
    sl__rcl_call_done(c);
    free(c);
}

/* Sends `cmd` (freed here) and calls fn(reply) later, or fn(NULL) at once when the
 * connection is not usable (`internal` commands only need it open). */
void sl__rb_send_cmd(rb_t *rb, sl__rcmd_t *cmd, rcall_fn fn, void *ctx, int idx, bool internal)
{
    if (sl__rcl_is_broadcast(rb, cmd)) {
        sl__rcl_broadcast(rb, cmd, fn, ctx, idx, internal);
        return;
    }
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
    c->deadline = sl__rb_now(&rb->base) + rb->opt.timeout_s;
    c->prev = rb->tail;
    if (rb->tail) rb->tail->next = c;
    else rb->head = c;
    rb->tail = c;
    if (!c->prev) arm_deadline(rb);
    int rc;
    if (rb->cl) {
        rc = sl__rcl_submit(rb, c, cmd);
    } else {
        rc = redisAsyncCommandArgv(rb->ac, sl__rb_on_call_reply, c, cmd->argc,
                                   (const char **)cmd->argv, cmd->len);
        sl__rcmd_free(cmd);
    }
    if (rc != REDIS_OK) {
        unlink_call(rb, c);
        fn(rb, c, NULL);
        sl__rcl_call_done(c);
        free(c);
    }
}

void sl__rb_on_deadline(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    /* The answer may be waiting unread (this loop was busy, not Redis): read it first. */
    const rcall_t *due = rb->cl && rb->head ? sl__rcl_first_due(rb) : rb->head;
    if (due && due->deadline <= sl__rb_now(&rb->base) && rb->ac && rb->connected) {
        if (rb->cl) sl__rcl_read_all(rb);
        else redisAsyncHandleRead(rb->ac);
        due = rb->cl && rb->head ? sl__rcl_first_due(rb) : rb->head;
    }
    if (due && due->deadline <= sl__rb_now(&rb->base)) {
        sl__backend_log(SL_BACKEND_LOG_WARN, "redis did not answer within %.3f s", rb->opt.timeout_s);
        go_down(rb);
    } else {
        arm_deadline(rb);
    }
}

/* ---- connection ---- */

static void send_configure_all(rb_t *rb);

/* Redis stops deciding: the next local decision starts the local share cold. */
static void note_outage(rb_t *rb)
{
    if (rb->up) rb->outage_start = true;
}

bool sl__rb_take_outage_start(rb_t *rb)
{
    bool was = rb->outage_start;
    rb->outage_start = false;
    return was;
}

void sl__rb_on_disconnect(const redisAsyncContext *ac, int status)
{
    rb_t *rb = ac->data;
    (void)status;
    if (!rb) return;
    if (ac == rb->ac) {
        note_outage(rb);
        rb->ac = NULL;
        rb->connected = false;
        rb->up = false;
        if (!rb->freeing) sl__rb_set_alert(rb, true);
        if (!rb->freeing) sl__rcl_drop(rb); /* a Cluster starts over from the seed */
    } else if (ac == rb->sub) {
        rb->sub = NULL;
    } else if (sl__rcl_lost(rb, ac) && !rb->freeing) {
        /* A master went away: down as when the single node does (cluster.c). */
        sl__backend_log(SL_BACKEND_LOG_WARN, "redis cluster: a master closed its connection");
        note_outage(rb);
        rb->up = false;
        sl__rb_set_alert(rb, true);
        sl__rb_drop_connections(rb);
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

void sl__rb_drop_connections(rb_t *rb)
{
    note_outage(rb);
    sl__rcl_drop(rb);
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
    sl__rb_drop_connections(rb);
    rb->up = false;
    sl__rb_set_alert(rb, true);
    if (rb->opt.fail == SL_REDIS_FAIL_OPEN) sl__rb_local_configure(rb, sl__rb_take_outage_start(rb));
}

static void on_internal_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)rb;
    (void)c;
    (void)r;
}

/* A step of connecting failed: drop the connection so the next tick starts over. */
void sl__rb_connect_failed(rb_t *rb, const char *what, const char *why)
{
    sl__backend_log(SL_BACKEND_LOG_WARN, "redis %s:%d: %s: %s", rb->opt.host, rb->opt.port, what, why);
    sl__rb_drop_connections(rb);
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
    ev.now_s = sl__rb_now(&rb->base);
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
    sl__rb_queue_event(rb, &ev);
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
        sl__rcmd_u64(&cmd, SL_FA(ticket), *id);
        sl__rcmd_num(&cmd, SL_FA(peek), 1);
        sl__rb_add_history(&cmd, &rb->pools[idx]);
        sl__rb_send_cmd(rb, &cmd, on_peeked, id, idx, true);
    }
}

/* ---- recovery: the registry, configuring every pool, the library ---- */

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
    sl__rb_send_cmd(rb, &cmd, on_replica_no, NULL, 0, true);
}

static void finish_connect_step(rb_t *rb)
{
    if (--rb->connect_pending > 0) return;
    /* Recovery: forget in-doubt requests, replay what was accepted while down. */
    for (size_t i = 0; i < rb->n_doubts;) {
        const char *pool = rb->doubts[i].pool;
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_forget", pool, NAN, rb->opt.replica_id);
        sl__rb_add_history(&cmd, sl__rb_pool_by_name(rb, pool));
        int n = 0;
        size_t j = i;
        char name[16];
        for (; j < rb->n_doubts && n < 80 && strcmp(rb->doubts[j].pool, pool) == 0; j++) {
            snprintf(name, sizeof name, "%s%d", SL_FA(k), ++n);
            sl__rcmd_str(&cmd, name, rb->doubts[j].key);
        }
        sl__rcmd_num(&cmd, SL_FA(kn), n);
        sl__rb_send_cmd(rb, &cmd, on_internal_reply, NULL, 0, true);
        i = j;
    }
    for (size_t i = 0; i < rb->n_doubts; i++) {
        free(rb->doubts[i].pool);
        free(rb->doubts[i].key);
    }
    rb->n_doubts = 0;
    for (size_t i = 0; i < rb->n_deferred; i++)
        sl__rb_send_cmd(rb, &rb->deferred[i].cmd, on_internal_reply, NULL, 0, true);
    rb->n_deferred = 0;
    rb->up = true;
    sl__rb_send_charges(rb);
    send_replica_no(rb);
    peek_queued(rb);
    sl__rb_set_alert(rb, false);
    sl__rb_subscribe(rb);
}

static void on_configured(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    sl__rreply_t rep;
    if (sl__rreply_parse(r, &rep) != SL_OK) {
        if (r) sl__rb_connect_failed(rb, "configuring a pool failed", rep.msg);
        return;
    }
    sl__rb_queue_reply_events(rb, &rep);
    sl__rb_note_wake(rb, sl__rreply_get(&rep, SL_FR(name)), &rep);
    finish_connect_step(rb);
}

/* How a configure may have to create the pool: cold or full, its id counter above every
 * one this replica saw, and whether this replica knew an earlier epoch (a loss). */
void sl__rb_add_configure_history(rb_t *rb, sl__rcmd_t *cmd, const rpool_t *p)
{
    sl__rcmd_str(cmd, SL_FA(cold_start), rb->opt.cold_start_full ? "full" : "empty");
    if (rb->opt.fail == SL_REDIS_FAIL_OPEN) {
        /* Fail-open shares may spend while no replica reaches the pool: a gap longer
         * than two ticks and a timeout holds its refill for the heartbeat window
         * (sluice.lua, CALL.hold_gap). */
        sl__rcmd_num(cmd, SL_FA(outage_gap_s), 2 * rb->opt.tick_s + rb->opt.timeout_s);
        sl__rcmd_num(cmd, SL_FA(outage_hold_s), 5 * rb->opt.tick_s);
    }
    if (rb->max_next_n > 0) sl__rcmd_num(cmd, SL_FA(seed_n), rb->max_next_n);
    if (p->epoch > 0) sl__rcmd_num(cmd, SL_FA(lost), 1);
    sl__rb_add_history(cmd, p);
}

/* "FCALL sluice_register 1 <registry> name [number known]". */
void sl__rb_register_cmd(sl__rcmd_t *cmd, const rpool_t *p)
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
        if (r) sl__rb_connect_failed(rb, "registering a pool failed", r->type == REDIS_REPLY_ERROR ? r->str : "?");
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
    sl__rb_add_teams(rb, &cmd);
    sl__rb_add_configure_history(rb, &cmd, &rb->pools[i]);
    sl__rb_send_cmd(rb, &cmd, on_configured, NULL, i, true);
}

/* Registers and configures every pool, then recovers (finish_connect_step). */
static void send_configure_all(rb_t *rb)
{
    rb->connect_pending = 1 + rb->n_pools;
    for (int i = 0; i < rb->n_pools; i++) {
        sl__rcmd_t cmd;
        sl__rb_register_cmd(&cmd, &rb->pools[i]);
        sl__rb_send_cmd(rb, &cmd, on_registered, NULL, i, true);
    }
    finish_connect_step(rb);
}

/* A pool this replica knew is gone from Redis (FLUSHALL, or a restart the connection
 * survived): not up until every pool is registered and configured again, which
 * creates them cold (the library's epochs). */
static void recover_lost_state(rb_t *rb)
{
    if (!rb->up) return;
    sl__backend_log(SL_BACKEND_LOG_WARN, "redis %s:%d lost sluice's state: configuring again",
            rb->opt.host, rb->opt.port);
    note_outage(rb);
    rb->up = false;
    send_configure_all(rb);
}

static void send_version_check(rb_t *rb);

static void on_library_loaded(rb_t *rb, rcall_t *c, redisReply *r)
{
    /* Another replica may have loaded it a moment ago: the version check passes next time. */
    if (r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "already exists")) r = NULL, c = NULL;
    if (c && (!r || r->type == REDIS_REPLY_ERROR)) {
        if (r) sl__rb_connect_failed(rb, "FUNCTION LOAD failed", r->str);
        return;
    }
    /* In a Cluster "already exists" may come from a master holding another version: the
     * check runs again on every master before anything is configured. */
    if (rb->cl) send_version_check(rb);
    else send_configure_all(rb);
}

static void load_library(rb_t *rb, bool replace)
{
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FUNCTION");
    sl__rcmd_raw(&cmd, "LOAD");
    if (replace) sl__rcmd_raw(&cmd, "REPLACE");
    sl__rcmd_raw(&cmd, sl__redis_lua_source);
    sl__rb_send_cmd(rb, &cmd, on_library_loaded, NULL, 0, true);
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
    sl__rb_connect_failed(rb, "version mismatch", why);
}

/* What the seed is: a Cluster node (cluster_enabled:1) is routed by slot (cluster.c); a
 * single node goes on as it always has. */
static void on_info(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    if (!r) return;
    if (r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_enabled:1")) {
        sl__rcl_start(rb);
        return;
    }
    sl__rcl_free(rb);
    sl__rb_connect_steps(rb);
}

void sl__rb_connect_redis(rb_t *rb)
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
    redisAsyncSetDisconnectCallback(ac, sl__rb_on_disconnect);
    rb->ac = ac;
    rb->connected = true; /* commands queue until the socket connects */
    sl__rcmd_t cmd = {0};
    if (rb->opt.password[0]) {
        sl__rcmd_raw(&cmd, "AUTH");
        sl__rcmd_raw(&cmd, rb->opt.password);
        sl__rb_send_cmd(rb, &cmd, on_internal_reply, NULL, 0, true);
    }
    if (rb->opt.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", rb->opt.db);
        sl__rcmd_raw(&cmd, "SELECT");
        sl__rcmd_raw(&cmd, db);
        sl__rb_send_cmd(rb, &cmd, on_internal_reply, NULL, 0, true);
    }
    sl__rcmd_raw(&cmd, "INFO");
    sl__rcmd_raw(&cmd, "cluster");
    sl__rb_send_cmd(rb, &cmd, on_info, NULL, 0, true);
}

static void send_version_check(rb_t *rb)
{
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_version");
    sl__rcmd_raw(&cmd, "0");
    sl__rb_send_cmd(rb, &cmd, on_version, NULL, 0, true);
}

void sl__rb_connect_steps(rb_t *rb)
{
    send_version_check(rb);
    sl__rb_limits_connect(rb);
}

/* ---- the tick: heartbeat, reconnect, advance ---- */

static void on_advanced(rb_t *rb, rcall_t *c, redisReply *r)
{
    sl__rreply_t rep;
    if (sl__rreply_parse(r, &rep) != SL_OK) return;
    sl__rb_queue_reply_events(rb, &rep);
    if (c->idx < rb->n_pools) {
        rb->pools[c->idx].wake_s = rep.wake_s;
        sl__rb_note_state(rb, &rb->pools[c->idx], &rep);
        sl__rb_arm_wake(rb);
    }
}

static void advance_pool(rb_t *rb, int i)
{
    sl__rcmd_t cmd;
    sl__rcmd_begin(&cmd, "sluice_advance", rb->pools[i].name, NAN, rb->opt.replica_id);
    sl__rb_add_history(&cmd, &rb->pools[i]);
    rb->pools[i].wake_s = INFINITY; /* until the answer says otherwise */
    sl__rb_send_cmd(rb, &cmd, on_advanced, NULL, i, false);
}

static void on_heartbeat(rb_t *rb, rcall_t *c, redisReply *r)
{
    double sent_local = *(double *)c->ctx;
    free(c->ctx);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return;
    if (r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer > 0)
        rb->replicas = (int)r->element[0]->integer;
    if (r->element[1]->type == REDIS_REPLY_STRING) {
        double local = (sent_local + sl__rb_now(&rb->base)) / 2;
        rb->offset_s = strtod(r->element[1]->str, NULL) - local;
    }
}

void sl__rb_on_tick(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    sl__rb_local_advance(rb);
    double redis_now = sl__rb_now(&rb->base) + rb->offset_s;
    for (int i = 0; i < rb->n_pools; i++) sl__rb_update_lost_alert(rb, &rb->pools[i], redis_now);
    if (!rb->ac) {
        sl__rb_connect_redis(rb);
        return;
    }
    if (!rb->up) return;
    double *sent = malloc(sizeof *sent);
    if (sent) {
        *sent = sl__rb_now(&rb->base);
        sl__rcmd_t cmd = {0};
        char window[32];
        snprintf(window, sizeof window, "%g", rb->opt.tick_s * 5);
        sl__rcmd_raw(&cmd, "FCALL");
        sl__rcmd_raw(&cmd, "sluice_heartbeat");
        sl__rcmd_raw(&cmd, "1");
        sl__rcmd_raw(&cmd, "sluice:{registry}:replicas");
        sl__rcmd_raw(&cmd, rb->opt.replica_id);
        sl__rcmd_raw(&cmd, window);
        sl__rb_send_cmd(rb, &cmd, on_heartbeat, sent, 0, false);
    }
    for (int i = 0; i < rb->n_pools; i++) advance_pool(rb, i);
    sl__rb_send_charges(rb);
    sl__rb_subscribe(rb);
}

void sl__rb_on_wake(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    double redis_now = sl__rb_now(&rb->base) + rb->offset_s;
    for (int i = 0; i < rb->n_pools; i++)
        if (rb->pools[i].wake_s <= redis_now + 0.002) advance_pool(rb, i);
    sl__rb_arm_wake(rb);
}
