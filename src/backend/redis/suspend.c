/* suspend.c - suspensions in Redis: one hash every replica reads, so a suspension holds fleet-wide.
 *
 * Key `sluice:{agents}:suspended` (its own hash tag: one Cluster slot, apart from the
 * pools'), field = agent, value = `role \x1f reason \x1f metric \x1f z \x1f count \x1f at`,
 * and a marker field "" (no agent has an empty name) written with every suspension and
 * never deleted: a hash read without the marker by a replica that read it before was
 * lost with Redis's state (restarted empty, flushed), not emptied by releases, and the
 * listing answers SL_ENOTFOUND so the replicas write back the suspensions they hold.
 * Plain commands on the command connection, no library function: HSETNX (the first
 * record stands), HDEL, HGETALL. They need only the connection, not the pools: a
 * replica whose pools are still being configured can read the list. Redis down: the
 * operation answers SL_EUNAVAILABLE and changes nothing. How replicas learn of each
 * other's changes (each reads the hash once a second) is the server's (suspend.c).
 */
#include "redis_internal.h"

#define SUSPENDED_KEY "sluice:{agents}:suspended"
#define SEP           '\x1f'
#define MARKER        "" /* the marker field */

typedef struct sop {
    sl_backend_done_cb done;
    sl_backend_suspensions_cb list;
    void *ud;
} sop_t;

static sop_t *sop_new(sl_backend_done_cb done, sl_backend_suspensions_cb list, void *ud)
{
    sop_t *op = calloc(1, sizeof *op);
    if (op) *op = (sop_t){done, list, ud};
    return op;
}

static void cmd3(sl__rcmd_t *cmd, const char *verb, const char *field)
{
    *cmd = (sl__rcmd_t){0};
    sl__rcmd_raw(cmd, verb);
    sl__rcmd_raw(cmd, SUSPENDED_KEY);
    if (field) sl__rcmd_raw(cmd, field);
}

static void on_written(rb_t *rb, rcall_t *c, redisReply *r)
{
    sop_t *op = c->ctx;
    bool ok = r && r->type == REDIS_REPLY_INTEGER;
    if (!op) return;
    if (!ok)
        op->done(SL_EUNAVAILABLE, 0, sl__rb_unavailable_msg(rb), op->ud);
    else if (c->idx == 1 && r->integer == 0) /* HDEL of no field */
        op->done(SL_ENOTFOUND, 0, "agent: not suspended", op->ud);
    else
        op->done(SL_OK, (double)r->integer, NULL, op->ud);
    free(op);
}

static void ignore_done(int rc, double value, const char *errmsg, void *ud)
{
    (void)rc, (void)value, (void)errmsg, (void)ud;
}

static void send_write(rb_t *rb, sl__rcmd_t *cmd, int is_release, sl_backend_done_cb cb, void *ud)
{
    sop_t *op = sop_new(cb ? cb : ignore_done, NULL, ud);
    if (!op) {
        sl__rcmd_free(cmd);
        if (cb) cb(SL_ENOMEM, 0, "out of memory", ud);
        return;
    }
    sl__rb_send_cmd(rb, cmd, on_written, op, is_release, true);
}

static void on_marker(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)rb, (void)c, (void)r; /* the HSETNX after it says whether the write landed */
}

void sl__rb_suspend(sl_backend_t *b, const sl_suspension_t *s, sl_backend_done_cb cb, void *ud)
{
    sl__rcmd_t marker;
    cmd3(&marker, "HSET", MARKER);
    sl__rcmd_raw(&marker, "1");
    sl__rb_send_cmd((rb_t *)b, &marker, on_marker, NULL, 0, true);
    char value[512];
    snprintf(value, sizeof value, "%s%c%s%c%s%c%.17g%c%lld%c%.17g", s->role ? s->role : "", SEP,
             s->reason ? s->reason : "", SEP, s->metric ? s->metric : "", SEP, s->z, SEP,
             (long long)s->count, SEP, s->at_s);
    sl__rcmd_t cmd;
    cmd3(&cmd, "HSETNX", s->agent);
    sl__rcmd_raw(&cmd, value);
    send_write((rb_t *)b, &cmd, 0, cb, ud);
}

void sl__rb_release(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud)
{
    sl__rcmd_t cmd;
    cmd3(&cmd, "HDEL", agent);
    send_write((rb_t *)b, &cmd, 1, cb, ud);
}

/* Splits a stored value into `s` (pointers into `buf`, which is modified). */
static void parse_value(char *buf, sl_suspension_t *s)
{
    char *f[6] = {"", "", "", "0", "0", "0"};
    f[0] = buf;
    for (int i = 1; i < 6 && f[i - 1]; i++) {
        char *sep = strchr(f[i - 1], SEP);
        if (!sep) break;
        *sep = '\0';
        f[i] = sep + 1;
    }
    s->role = f[0];
    s->reason = f[1];
    s->metric = f[2];
    s->z = strtod(f[3], NULL);
    s->count = strtoll(f[4], NULL, 10);
    s->at_s = strtod(f[5], NULL);
}

static void on_listed(rb_t *rb, rcall_t *c, redisReply *r)
{
    sop_t *op = c->ctx;
    if (!op) return;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements % 2) {
        op->list(SL_EUNAVAILABLE, NULL, 0, sl__rb_unavailable_msg(rb), op->ud);
        free(op);
        return;
    }
    size_t n = r->elements / 2, got = 0;
    bool marked = false;
    sl_suspension_t *v = calloc(n ? n : 1, sizeof *v);
    char **bufs = calloc(n ? n : 1, sizeof *bufs);
    for (size_t i = 0; v && bufs && i < n; i++) {
        const redisReply *k = r->element[2 * i], *val = r->element[2 * i + 1];
        if (k->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING) continue;
        if (k->len == 0) {
            marked = true;
            continue;
        }
        bufs[got] = strndup(val->str, val->len);
        if (!bufs[got]) continue;
        v[got].agent = k->str;
        parse_value(bufs[got], &v[got]);
        got++;
    }
    bool lost = !marked && rb->suspended_seen;
    rb->suspended_seen = marked;
    if (lost)
        op->list(SL_ENOTFOUND, NULL, 0, "suspensions: Redis lost them (restarted empty or flushed)",
                 op->ud);
    else if (v && bufs)
        op->list(SL_OK, v, got, NULL, op->ud);
    else
        op->list(SL_ENOMEM, NULL, 0, "out of memory", op->ud);
    for (size_t i = 0; bufs && i < got; i++)
        free(bufs[i]);
    free(bufs);
    free(v);
    free(op);
}

void sl__rb_suspensions(sl_backend_t *b, sl_backend_suspensions_cb cb, void *ud)
{
    sop_t *op = sop_new(NULL, cb, ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, 0, "out of memory", ud);
        return;
    }
    sl__rcmd_t cmd;
    cmd3(&cmd, "HGETALL", NULL);
    sl__rb_send_cmd((rb_t *)b, &cmd, on_listed, op, 0, true);
}
