/* lifetime.c - the redis backend's creation with the library check, ops table, teardown. */
#include "redis_internal.h"

static void rb_free(sl_backend_t *b)
{
    rb_t *rb = (rb_t *)b;
    rb->freeing = true;
    sl__rb_drop_connections(rb);
    sl__rcl_free(rb);
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
    .now = sl__rb_now,
    .configure = sl__rb_configure,
    .request = sl__rb_request,
    .ticket_poll = sl__rb_ticket_poll,
    .ticket_hold = sl__rb_ticket_hold,
    .ticket_cancel = sl__rb_ticket_cancel,
    .settle = sl__rb_settle,
    .cancel = sl__rb_cancel,
    .extend = sl__rb_extend,
    .resync = sl__rb_resync,
    .task_put = sl__rb_task_put,
    .task_delete = sl__rb_task_delete,
    .tasks = sl__rb_tasks,
    .pools = sl__rb_pools,
    .agents = sl__rb_agents,
    .ping = sl__rb_ping,
    .suspend = sl__rb_suspend,
    .release = sl__rb_release,
    .agent_forget = sl__rb_agent_forget,
    .suspensions = sl__rb_suspensions,
    .batch_queue = sl__rb_batch_queue,
};

bool sl_backend_redis_state_lost(sl_backend_t *b, const char *pool)
{
    if (!b || b->ops != &redis_ops || !pool) return false;
    rpool_t *p = sl__rb_pool_by_name((rb_t *)b, pool);
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

/* The startup check: is the library there, and of our version? */
static int check_library(const sl_redis_options_t *o, char *err, size_t errlen)
{
    struct timeval tv = sl__rb_tv_of(o->timeout_s * 4);
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
    /* A Cluster has db 0 only: another db in the URL is a configuration error. */
    r = rc || !o->db ? NULL : redisCommand(c, "INFO cluster");
    if (r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_enabled:1")) {
        snprintf(err, errlen,
                 "backend: db %d in redis://%s:%d/%d: a Redis Cluster has only db 0 (SELECT is "
                 "refused there): use /0",
                 o->db, o->host, o->port, o->db);
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
    rb->tick = event_new(base, -1, EV_PERSIST, sl__rb_on_tick, rb);
    rb->wake = evtimer_new(base, sl__rb_on_wake, rb);
    rb->deadline_ev = evtimer_new(base, sl__rb_on_deadline, rb);
    rb->flush_ev = event_new(base, -1, 0, sl__rb_on_flush, rb);
    if (!rb->check || !rb->tick || !rb->wake || !rb->deadline_ev || !rb->flush_ev) {
        rb_free(&rb->base);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct timeval tv = sl__rb_tv_of(rb->opt.tick_s);
    event_add(rb->tick, &tv);
    sl__rb_connect_redis(rb);
    return &rb->base;
}
