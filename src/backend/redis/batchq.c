/* batchq.c - the batch processing queues in Redis: one FCALL of the library's batch section (batch.lua) per operation, so every replica counts against one queue.
 *
 * Keys `sluice:{POOL}:batchq` (a hash: id -> requests, "" -> their sum) and
 * `sluice:{POOL}:batchq_exp` (a zset: id -> when it is forgotten), under the pool's hash
 * tag: one Cluster slot. Like the suspensions, the calls need only the command
 * connection, not the pools. Redis down: the operation answers SL_EUNAVAILABLE and
 * changes nothing (a release lost so is made good by the entry's expiry).
 */
#include "redis_internal.h"

#include <inttypes.h>

typedef struct bop {
    sl_backend_batchq_cb cb;
    void *ud;
} bop_t;

static const char *const op_names[] = {
    [SL_BATCHQ_COUNT] = "count",
    [SL_BATCHQ_ADD] = "add",
    [SL_BATCHQ_BIND] = "bind",
    [SL_BATCHQ_RELEASE] = "release",
};

static void on_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    bop_t *op = c->ctx;
    if (!op) return;
    long long counted = -1, queued = -1;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_INTEGER) continue;
        if (!strcmp(k->str, SL_FR(counted))) counted = v->integer;
        if (!strcmp(k->str, SL_FR(queued_requests))) queued = v->integer;
    }
    if (counted < 0 || queued < 0) {
        const char *why = r && r->type == REDIS_REPLY_ERROR ? r->str : sl__rb_unavailable_msg(rb);
        op->cb(r && r->type == REDIS_REPLY_ERROR ? SL_EINVAL : SL_EUNAVAILABLE, false, 0, why,
               op->ud);
    } else {
        op->cb(SL_OK, counted == 1, (int64_t)queued, NULL, op->ud);
    }
    free(op);
}

void sl__rb_batch_queue(sl_backend_t *b, const sl_batchq_call_t *q, sl_backend_batchq_cb cb,
                        void *ud)
{
    bop_t *op = calloc(1, sizeof *op);
    if (!op) {
        cb(SL_ENOMEM, false, 0, "out of memory", ud);
        return;
    }
    *op = (bop_t){cb, ud};
    char hash[200], zset[200], num[32];
    snprintf(hash, sizeof hash, "sluice:{%s}:batchq", q->pool);
    snprintf(zset, sizeof zset, "sluice:{%s}:batchq_exp", q->pool);
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_batch_queue");
    sl__rcmd_raw(&cmd, "2");
    sl__rcmd_raw(&cmd, hash);
    sl__rcmd_raw(&cmd, zset);
    sl__rcmd_str(&cmd, SL_FA(batch_op), op_names[q->op]);
    if (q->op != SL_BATCHQ_COUNT) sl__rcmd_str(&cmd, SL_FA(batch), q->id);
    if (q->op == SL_BATCHQ_BIND) sl__rcmd_str(&cmd, SL_FA(new_batch), q->new_id);
    if (q->op == SL_BATCHQ_ADD || q->op == SL_BATCHQ_BIND) {
        snprintf(num, sizeof num, "%" PRId64, q->requests);
        sl__rcmd_str(&cmd, SL_FA(requests), num);
        sl__rcmd_num(&cmd, SL_FA(ttl), q->ttl_s);
    }
    if (q->op == SL_BATCHQ_ADD) {
        snprintf(num, sizeof num, "%" PRId64, q->max_requests);
        sl__rcmd_str(&cmd, SL_FA(max_requests), num);
        sl__rcmd_num(&cmd, SL_FA(max_entries), SL_BATCHQ_MAX_ENTRIES);
    }
    sl__rb_send_cmd((rb_t *)b, &cmd, on_reply, op, 0, true);
}
