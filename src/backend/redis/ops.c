/* ops.c - the redis backend's lease and ticket operations: request, tickets, settle, cancel. */
#include "redis_internal.h"

/* ---- operations ---- */

void sl__rb_rop_free(rop_t *op)
{
    if (!op) return;
    for (size_t i = 0; i < sizeof op->strs / sizeof op->strs[0]; i++) free(op->strs[i]);
    free(op->pool);
    sl__rcmd_free(&op->cmd);
    free(op->items);
    free(op);
}

rop_t *sl__rb_rop_new(void *ud)
{
    rop_t *op = calloc(1, sizeof *op);
    if (op) op->ud = ud;
    return op;
}

static void answer_decision_local(rb_t *rb, rop_t *op)
{
    sl__rb_local_configure(rb, sl__rb_take_outage_start(rb));
    sl_decision_t d;
    size_t from = rb->n_events;
    int rc = rb->local ? sl_engine_request(rb->local, &op->req, sl__rb_now(&rb->base), &d) : SL_ENOMEM;
    rb->local_issued = true; /* (events carry the ids too, rewritten just below) */
    sl__rb_fix_local_events(rb, from);
    if (rc == SL_OK) sl__rb_local_decision_ids(rb, &d);
    if (rc == SL_ECAPACITY && rb->local_replicas > 1) {
        /* Too big for this replica's 1/replicas share, not for the pool: "never fits"
         * (413) would be false, and a client would drop the call. It waits for Redis, as
         * a closed backend's request does (503, retried). */
        char msg[256];
        snprintf(msg, sizeof msg, "%s; the request needs more than this replica's share of "
                 "pool \"%s\" (1/%d) while it decides alone: retry when Redis is back",
                 sl__rb_unavailable_msg(rb), op->pool, rb->local_replicas);
        op->cb.decision(SL_REDIS_EUNAVAILABLE, NULL, msg, op->ud);
        return;
    }
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
            sl__rb_add_doubt(rb, op->pool, op->req.agent, op->req.request_id);
        if (rb->opt.fail == SL_REDIS_FAIL_OPEN) answer_decision_local(rb, op);
        else op->cb.decision(SL_REDIS_EUNAVAILABLE, NULL, sl__rb_unavailable_msg(rb), op->ud);
    } else if (rc != SL_OK) {
        op->cb.decision(rc, NULL, rep.msg, op->ud);
    } else {
        sl_decision_t d;
        sl__rreply_decision(&rep, &d);
        sl__rb_queue_reply_events(rb, &rep);
        sl__rb_note_wake(rb, op->pool, &rep);
        /* An internal request id is ours, not the client's: it never replays. */
        if (op->rid[0]) d.replayed = false;
        rpool_t *p = sl__rb_pool_by_name(rb, op->pool);
        if (d.status == SL_QUEUED && !d.replayed && p)
            sl__rb_remember_queued(rb, d.ticket, (int)(p - rb->pools));
        op->cb.decision(SL_OK, &d, NULL, op->ud);
    }
    sl__rb_rop_free(op);
}

/* On one node the library reads the task graph in the request's own call (one round trip);
 * on a Cluster the caller looked the task up first (`graph`). */
static void send_request(rb_t *rb, rop_t *op, sl__rgraph_t graph)
{
    sl__rcmd_t cmd;
    sl__rcmd_request(&cmd, &op->req, rb->cl == NULL, graph, NAN, rb->opt.replica_id);
    sl__rb_add_history(&cmd, sl__rb_pool_by_name(rb, op->pool));
    op->waiting = 0;
    sl__rb_send_cmd(rb, &cmd, on_request_reply, op, 0, false);
}

/* sluice_task_role's answer on a Cluster: {role, unblocks, chain}, or -1 (not in the graph). */
static void on_task_role(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    if (!r) {
        op->waiting = 1; /* nothing was decided: no doubt to record */
        on_request_reply(rb, c, NULL);
        return;
    }
    send_request(rb, op, sl__rgraph_parse(r)); /* the library caps unblocks (max_unblocks) */
}

/* Copies the request's roles_allowed into one allocation the op owns (op->items): the
 * fail-open engine may decide it after the caller's strings are gone. */
static bool copy_roles(rop_t *op, const sl_request_t *req)
{
    if (!req->roles_allowed) return true;
    size_t n = req->n_roles_allowed, bytes = n * sizeof(char *) + 1;
    for (size_t i = 0; i < n; i++) bytes += strlen(req->roles_allowed[i] ? req->roles_allowed[i] : "") + 1;
    char **list = malloc(bytes);
    if (!list) return false;
    char *at = (char *)(list + n);
    for (size_t i = 0; i < n; i++) {
        const char *role = req->roles_allowed[i] ? req->roles_allowed[i] : "";
        size_t len = strlen(role) + 1;
        memcpy(at, role, len);
        list[i] = at;
        at += len;
    }
    op->items = list;
    op->req.roles_allowed = (const char *const *)list;
    return true;
}

void sl__rb_request(sl_backend_t *b, const sl_request_t *req, sl_backend_decision_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = sl__rb_rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, "out of memory", ud);
        return;
    }
    op->cb.decision = cb;
    op->req = *req;
    const char *const src[] = {req->agent, req->pool,      req->role,       req->task,
                               req->priority, req->cache_key, req->request_id, req->model};
    for (size_t i = 0; i < 8; i++) op->strs[i] = sl__rb_dup_or_null(src[i]);
    op->req.agent = op->strs[0];
    op->req.pool = op->strs[1];
    op->req.role = op->strs[2];
    op->req.task = op->strs[3];
    op->req.priority = op->strs[4];
    op->req.cache_key = op->strs[5];
    op->req.request_id = op->strs[6];
    op->req.model = op->strs[7];
    op->strs[8] = sl__rb_dup_or_null(req->cache_prefix_hash); /* borrowed by the caller: copied */
    op->req.cache_prefix_hash = op->strs[8];
    op->pool = sl__rb_dup_or_null(req->pool ? req->pool : "default");
    if (!copy_roles(op, req)) {
        cb(SL_ENOMEM, NULL, "out of memory", ud);
        sl__rb_rop_free(op);
        return;
    }
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
            cb(SL_REDIS_EUNAVAILABLE, NULL, sl__rb_unavailable_msg(rb), ud);
        }
        sl__rb_rop_free(op);
        return;
    }
    if (req->task && rb->cl) { /* a Cluster: the graph is in another slot than the pool */
        sl__rcmd_t cmd;
        sl__rcmd_graph(&cmd, "sluice_task_role");
        sl__rcmd_raw(&cmd, req->task);
        sl__rb_send_cmd(rb, &cmd, on_task_role, op, 0, false);
        return;
    }
    send_request(rb, op, SL__RGRAPH_NONE);
}

static void on_ticket_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO) {
        op->cb.decision(SL_REDIS_EUNAVAILABLE, NULL, sl__rb_unavailable_msg(rb), op->ud);
    } else if (rc != SL_OK) {
        op->cb.decision(rc, NULL, rep.msg, op->ud);
    } else {
        sl_decision_t d;
        sl__rreply_decision(&rep, &d);
        sl__rb_queue_reply_events(rb, &rep);
        sl__rb_note_wake(rb, op->pool, &rep);
        op->cb.decision(SL_OK, &d, NULL, op->ud);
    }
    sl__rb_rop_free(op);
}

/* Names the caller (sl_backend_set_actor) so the library checks the owner it keeps. */
static void add_actor(rb_t *rb, sl__rcmd_t *cmd)
{
    sl__rcmd_str(cmd, SL_FA(actor), rb->base.actor.agent);
    sl__rcmd_str(cmd, SL_FA(actor_prefix), rb->base.actor.agent_prefix);
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

/* The opening every operation on an id shares: the message of its SL_ENOTFOUND when `id`
 * is a local id of another replica, NULL when it is this replica's to act on (locally when
 * sl__rb_is_local(id), else through Redis). */
static const char *foreign_id(const rb_t *rb, const char *what, uint64_t id)
{
    return sl__rb_is_local(id) && !sl__rb_is_mine(rb, id) ? foreign_msg(what, id) : NULL;
}

static const char *not_found_msg(const char *what, uint64_t id)
{
    static char msg[96];
    snprintf(msg, sizeof msg, "%s %llu not found", what, (unsigned long long)id);
    return msg;
}

/* The opening of an operation through Redis on the pool of `id` (a `what`): a new
 * operation holding a copy of the pool's name, with *p set; or NULL with *rc and *msg
 * to answer (SL_ENOTFOUND for an id of no known pool, SL_ENOMEM). */
static rop_t *pool_op_new(rb_t *rb, const char *what, uint64_t id, void *ud, rpool_t **p, int *rc,
                          const char **msg)
{
    *p = sl__rb_pool_by_id(rb, id);
    if (!*p) {
        *rc = SL_ENOTFOUND;
        *msg = not_found_msg(what, id);
        return NULL;
    }
    rop_t *op = sl__rb_rop_new(ud);
    if (!op) {
        *rc = SL_ENOMEM;
        *msg = "out of memory";
        return NULL;
    }
    op->pool = sl__rb_dup_or_null((*p)->name);
    return op;
}

void sl__rb_ticket_poll(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    const char *foreign = foreign_id(rb, "ticket", ticket);
    if (foreign) {
        cb(SL_ENOTFOUND, NULL, foreign, ud);
        return;
    }
    if (sl__rb_is_local(ticket)) {
        sl_decision_t d;
        size_t from = rb->n_events;
        int rc = rb->local ? sl_engine_ticket(rb->local, sl__rb_engine_id(rb, ticket), sl__rb_now(b), &d)
                           : SL_ENOTFOUND;
        sl__rb_fix_local_events(rb, from);
        if (rc == SL_OK) sl__rb_local_decision_ids(rb, &d);
        cb(rc, rc == SL_OK ? &d : NULL,
           rc == SL_OK ? NULL : rb->local ? sl_engine_errmsg(rb->local) : not_found_msg("ticket", ticket),
           ud);
        return;
    }
    rpool_t *p;
    int rc;
    const char *msg;
    rop_t *op = pool_op_new(rb, "ticket", ticket, ud, &p, &rc, &msg);
    if (!op) {
        cb(rc, NULL, msg, ud);
        return;
    }
    op->cb.decision = cb;
    sl__rcmd_t cmd;
    sl__rcmd_begin(&cmd, "sluice_ticket", p->name, NAN, rb->opt.replica_id);
    sl__rcmd_u64(&cmd, SL_FA(ticket), ticket);
    add_actor(rb, &cmd);
    sl__rb_add_history(&cmd, p);
    sl__rb_send_cmd(rb, &cmd, on_ticket_reply, op, 0, false);
}

/* Done-style operations: ticket hold/cancel, lease cancel/extend, task writes. */
void sl__rb_on_done_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO && op->cmd.argc && rb->opt.fail == SL_REDIS_FAIL_OPEN) {
        /* A cancel or extend of a Redis lease while down: accepted, replayed later. */
        sl__rb_defer_cmd(rb, &op->cmd);
        if (op->cb.done) op->cb.done(SL_OK, op->ttl_s > 0 ? sl__rb_now(&rb->base) + op->ttl_s : 0, NULL, op->ud);
    } else if (rc == SL__RPROTO) {
        if (op->cb.done) op->cb.done(SL_REDIS_EUNAVAILABLE, 0, sl__rb_unavailable_msg(rb), op->ud);
    } else {
        if (rc == SL_OK) {
            sl__rb_queue_reply_events(rb, &rep);
            sl__rb_note_wake(rb, op->pool, &rep);
        }
        if (op->cb.done)
            op->cb.done(rc, rc == SL_OK ? sl__rreply_num(&rep, SL_FR(expires_at), 0) : 0,
                        rc == SL_OK ? NULL : rep.msg, op->ud);
    }
    sl__rb_rop_free(op);
}

/* Runs `fn` of the library on the pool of `id` with id_name=id (and more args). */
static void id_op(rb_t *rb, const char *fn, const char *id_name, uint64_t id, int held,
                  double ttl_s, bool deferrable, sl_backend_done_cb cb, void *ud)
{
    rpool_t *p;
    int rc;
    const char *msg;
    rop_t *op = pool_op_new(rb, id_name, id, ud, &p, &rc, &msg);
    if (!op) {
        if (cb) cb(rc, 0, msg, ud);
        return;
    }
    op->cb.done = cb;
    op->ttl_s = ttl_s;
    sl__rcmd_t cmd;
    sl__rcmd_begin(&cmd, fn, p->name, NAN, rb->opt.replica_id);
    sl__rcmd_u64(&cmd, id_name, id);
    if (held >= 0) sl__rcmd_num(&cmd, SL_FA(held), held);
    if (ttl_s > 0) sl__rcmd_num(&cmd, SL_FA(ttl), ttl_s);
    add_actor(rb, &cmd);
    sl__rb_add_history(&cmd, p);
    if (deferrable) {
        /* keep a copy to replay if Redis turns out to be down */
        sl__rcmd_begin(&op->cmd, fn, p->name, NAN, rb->opt.replica_id);
        sl__rcmd_u64(&op->cmd, id_name, id);
        if (ttl_s > 0) sl__rcmd_num(&op->cmd, SL_FA(ttl), ttl_s);
        add_actor(rb, &op->cmd);
    }
    sl__rb_send_cmd(rb, &cmd, sl__rb_on_done_reply, op, 0, false);
}

static void local_done(rb_t *rb, int rc, double value, sl_backend_done_cb cb, void *ud)
{
    if (cb) cb(rc, value, rc == SL_OK ? NULL : sl_engine_errmsg(rb->local), ud);
}

void sl__rb_ticket_hold(sl_backend_t *b, uint64_t ticket, bool held, sl_backend_done_cb cb,
                        void *ud)
{
    rb_t *rb = (rb_t *)b;
    const char *foreign = foreign_id(rb, "ticket", ticket);
    if (foreign) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign, ud);
        return;
    }
    if (sl__rb_is_local(ticket)) {
        local_done(rb, sl_engine_ticket_hold(rb->local, sl__rb_engine_id(rb, ticket), held, sl__rb_now(b)), 0, cb, ud);
        return;
    }
    id_op(rb, "sluice_ticket_hold", SL_FA(ticket), ticket, held ? 1 : 0, 0, false, cb, ud);
}

/* A cancel of a lease or a ticket (`kind`): refused when another replica's, on the local
 * engine when it was granted there (fail-open), else the Lua function `fn`. */
static void cancel_op(sl_backend_t *b, const char *kind, uint64_t id,
                      int (*local_cancel)(sl_engine_t *e, uint64_t id, double now_s),
                      const char *fn, bool deferrable, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    const char *foreign = foreign_id(rb, kind, id);
    if (foreign) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign, ud);
        return;
    }
    if (sl__rb_is_local(id)) {
        size_t from = rb->n_events;
        int rc = local_cancel(rb->local, sl__rb_engine_id(rb, id), sl__rb_now(b));
        sl__rb_fix_local_events(rb, from);
        local_done(rb, rc, 0, cb, ud);
        return;
    }
    id_op(rb, fn, kind, id, -1, 0, deferrable, cb, ud);
}

void sl__rb_ticket_cancel(sl_backend_t *b, uint64_t ticket, sl_backend_done_cb cb, void *ud)
{
    cancel_op(b, SL_FA(ticket), ticket, sl_engine_ticket_cancel, "sluice_ticket_cancel", false, cb, ud);
}

void sl__rb_cancel(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud)
{
    cancel_op(b, SL_FA(lease), lease, sl_engine_cancel, "sluice_cancel", true, cb, ud);
}

void sl__rb_extend(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb,
                   void *ud)
{
    rb_t *rb = (rb_t *)b;
    const char *foreign = foreign_id(rb, "lease", lease);
    if (foreign) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign, ud);
        return;
    }
    if (sl__rb_is_local(lease)) {
        double at = 0;
        int rc = sl_engine_extend(rb->local, sl__rb_engine_id(rb, lease), ttl_s, sl__rb_now(b), &at);
        local_done(rb, rc, at, cb, ud);
        return;
    }
    if (!(ttl_s > 0) || !isfinite(ttl_s)) {
        if (cb) cb(SL_EINVAL, 0, "ttl must be a finite number of seconds > 0", ud);
        return;
    }
    id_op(rb, "sluice_extend", SL_FA(lease), lease, -1, ttl_s, true, cb, ud);
}

static void on_settle_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL__RPROTO && rb->opt.fail == SL_REDIS_FAIL_OPEN) {
        /* What the call used is a fact: keep it and apply it when Redis returns. */
        sl__rb_defer_cmd(rb, &op->cmd);
        sl_settle_result_t res = {0, 0, 0, false};
        op->cb.settle(SL_OK, &res, NULL, op->ud);
    } else if (rc == SL__RPROTO) {
        op->cb.settle(SL_REDIS_EUNAVAILABLE, NULL, sl__rb_unavailable_msg(rb), op->ud);
    } else if (rc != SL_OK) {
        op->cb.settle(rc, NULL, rep.msg, op->ud);
    } else {
        sl_settle_result_t res = {
            .adjust_input_tokens = (int64_t)sl__rreply_num(&rep, SL_FR(adjust_input_tokens), 0),
            .adjust_output_tokens = (int64_t)sl__rreply_num(&rep, SL_FR(adjust_output_tokens), 0),
            .estimate_error = sl__rreply_num(&rep, SL_FR(estimate_error), 0),
            .not_counted = sl__rreply_num(&rep, SL_FR(counted), 1) == 0,
        };
        sl__rb_queue_reply_events(rb, &rep);
        sl__rb_note_wake(rb, op->pool, &rep);
        op->cb.settle(SL_OK, &res, NULL, op->ud);
    }
    sl__rb_rop_free(op);
}

void sl__rb_settle(sl_backend_t *b, uint64_t lease, const sl_settle_t *s,
                   sl_backend_settle_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    char err[256];
    const char *foreign = foreign_id(rb, "lease", lease);
    if (foreign) {
        cb(SL_ENOTFOUND, NULL, foreign, ud);
        return;
    }
    if (sl__rb_is_local(lease)) {
        sl_settle_result_t res;
        size_t from = rb->n_events;
        sl_settle_t shared = *s;
        const char **scaled = NULL;
        if (s->header_count) {
            scaled = sl__rb_share_headers(rb, s->header_names, s->header_values, s->header_count);
            if (!scaled) {
                cb(SL_ENOMEM, NULL, "out of memory", ud);
                return;
            }
            shared.header_values = scaled;
        }
        int rc = sl_engine_settle(rb->local, sl__rb_engine_id(rb, lease), &shared, sl__rb_now(b), &res);
        free(scaled);
        sl__rb_fix_local_events(rb, from);
        cb(rc, rc == SL_OK ? &res : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(rb->local), ud);
        return;
    }
    rpool_t *p;
    int rc;
    const char *msg;
    rop_t *op = pool_op_new(rb, "lease", lease, ud, &p, &rc, &msg);
    if (!op) {
        cb(rc, NULL, msg, ud);
        return;
    }
    op->cb.settle = cb;
    sl__rcmd_t cmd;
    rc = sl__rcmd_settle(&cmd, p->name, lease, s, NAN, rb->opt.replica_id, err, sizeof err);
    if (rc == SL_OK)
        rc = sl__rcmd_settle(&op->cmd, p->name, lease, s, NAN, rb->opt.replica_id, err, sizeof err);
    if (rc != SL_OK) {
        cb(rc, NULL, err, ud);
        sl__rb_rop_free(op);
        return;
    }
    add_actor(rb, &cmd);
    add_actor(rb, &op->cmd);
    sl__rb_add_history(&cmd, p);
    sl__rb_add_history(&op->cmd, p);
    sl__rb_send_cmd(rb, &cmd, on_settle_reply, op, 0, false);
}

/* The headers of a lease's call, as they arrive: on the local engine for a fail-open
 * lease, else through Redis. Never deferred (op->cmd stays empty): a snapshot replayed
 * after an outage would describe a minute long gone, so Redis away answers unavailable. */
void sl__rb_resync(sl_backend_t *b, uint64_t lease, double sent_after_s,
                   const char *const *names, const char *const *values, size_t count,
                   sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    char err[256];
    const char *foreign = foreign_id(rb, "lease", lease);
    if (foreign) {
        if (cb) cb(SL_ENOTFOUND, 0, foreign, ud);
        return;
    }
    if (sl__rb_is_local(lease)) {
        sl_lease_state_t l;
        if (!rb->local || sl_engine_lease_state(rb->local, sl__rb_engine_id(rb, lease), &l) != SL_OK) {
            if (cb) cb(SL_ENOTFOUND, 0, not_found_msg("lease", lease), ud);
            return;
        }
        size_t from = rb->n_events;
        const char **scaled = sl__rb_share_headers(rb, names, values, count);
        int rc = scaled ? sl_engine_resync_lease_sent(rb->local, sl__rb_engine_id(rb, lease),
                                                      sent_after_s, names, scaled, count,
                                                      sl__rb_now(b), NULL)
                        : SL_ENOMEM;
        free(scaled);
        sl__rb_fix_local_events(rb, from);
        local_done(rb, rc, 0, cb, ud);
        return;
    }
    rpool_t *p;
    int rc;
    const char *msg;
    rop_t *op = pool_op_new(rb, "lease", lease, ud, &p, &rc, &msg);
    if (!op) {
        if (cb) cb(rc, 0, msg, ud);
        return;
    }
    op->cb.done = cb;
    sl__rcmd_t cmd;
    rc = sl__rcmd_resync(&cmd, p->name, lease, sent_after_s, names, values, count, NAN,
                         rb->opt.replica_id, err, sizeof err);
    if (rc != SL_OK) {
        if (cb) cb(rc, 0, err, ud);
        sl__rb_rop_free(op);
        return;
    }
    sl__rb_add_history(&cmd, p);
    sl__rb_send_cmd(rb, &cmd, sl__rb_on_done_reply, op, 0, false);
}
