/* limits_fcall.c - FCALLs of limits.lua from a plan, their replies decoded, sending them on the backend's connection, loading the library. */
#include "limits_fcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_internal.h"

static void raw_i64(sl__rcmd_t *c, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    sl__rcmd_raw(c, b);
}

static void raw_num(sl__rcmd_t *c, double v)
{
    char b[40];
    snprintf(b, sizeof b, "%.17g", v);
    sl__rcmd_raw(c, b);
}

/* "sluice:{L<tree>}:<kind>:<config>:<name length>:<name>:<key>": the length makes the
 * split of name and key unambiguous whatever bytes they hold. */
static void level_key(sl__rcmd_t *c, const sl_limit_plan_t *p, size_t i, char kind)
{
    const sl_limit_plan_level_t *lv = &p->lv[i];
    char k[2 * SL_LIMITS_MAX_NAME + 96];
    snprintf(k, sizeof k, "sluice:{L%016llx}:%c:%016llx:%zu:%s:%s", (unsigned long long)p->tree_id,
             kind, (unsigned long long)lv->config_id, strlen(lv->limit_name), lv->limit_name,
             lv->key);
    sl__rcmd_raw(c, k);
}

/* sliding_window's state has its own kinds, W and R (a ring of timestamps in a string):
 * the keys of its former layout (S and a ZSET G) are ignored and expire. */
static char record_kind(const sl_limit_plan_level_t *lv)
{
    return lv->algorithm == SL_LIMIT_SLIDING_WINDOW ? 'W' : 'S';
}

static char log_kind(const sl_limit_plan_level_t *lv)
{
    return lv->algorithm == SL_LIMIT_SLIDING_WINDOW ? 'R' : 'G';
}

static void begin(sl__rcmd_t *c, const char *fn, int nkeys)
{
    c->argc = 0;
    sl__rcmd_raw(c, "FCALL");
    sl__rcmd_raw(c, fn);
    raw_i64(c, nkeys);
}

static void time_arg(sl__rcmd_t *c, int64_t now_us)
{
    if (now_us < 0) sl__rcmd_raw(c, "");
    else raw_i64(c, now_us);
}

/* "algorithm:rate:period_us:burst_units:ttl_us:adaptive", then units: the first is the
 * same string for every check of the limit, which limits.lua parses once. */
static void level_params(sl__rcmd_t *c, const sl_limit_plan_level_t *lv)
{
    char b[160];
    snprintf(b, sizeof b, "%d:%.17g:%lld:%lld:%lld:%d", (int)lv->algorithm, lv->rate,
             (long long)lv->period_us, (long long)lv->burst_units, (long long)lv->ttl_us,
             lv->adaptive ? 1 : 0);
    sl__rcmd_raw(c, b);
    raw_i64(c, lv->units);
}

void sl__rlimits_check_cmd(sl__rcmd_t *c, const sl_limit_plan_t *p, sl__rlimits_mode_t mode,
                           int64_t now_us)
{
    static const char *const MODE[] = {"check", "probe", "info"};
    begin(c, "sluice_limit_check", (int)(2 * p->n));
    for (size_t i = 0; i < p->n; i++) {
        level_key(c, p, i, record_kind(&p->lv[i]));
        level_key(c, p, i, log_kind(&p->lv[i]));
    }
    time_arg(c, now_us);
    sl__rcmd_raw(c, MODE[mode]);
    raw_i64(c, (int64_t)p->n);
    for (size_t i = 0; i < p->n; i++) level_params(c, &p->lv[i]);
}

/* "FCALL fn" on level 0 alone: its keys (and its outcomes' with `outcomes`), the time,
 * one level, its parameters. */
static void one_level_cmd(sl__rcmd_t *c, const char *fn, const sl_limit_plan_t *p, bool outcomes,
                          int64_t now_us)
{
    begin(c, fn, outcomes ? 3 : 2);
    level_key(c, p, 0, record_kind(&p->lv[0]));
    level_key(c, p, 0, log_kind(&p->lv[0]));
    if (outcomes) level_key(c, p, 0, 'O');
    time_arg(c, now_us);
    sl__rcmd_raw(c, "1");
    level_params(c, &p->lv[0]);
}

void sl__rlimits_release_cmd(sl__rcmd_t *c, const sl_limit_plan_t *p, int64_t now_us)
{
    one_level_cmd(c, "sluice_limit_release", p, false, now_us);
}

void sl__rlimits_report_cmd(sl__rcmd_t *c, const sl_limit_plan_t *p, int64_t successes,
                            int64_t errors, int64_t now_us)
{
    const sl_limit_adaptive_t *a = &p->adaptive;
    one_level_cmd(c, "sluice_limit_report", p, true, now_us);
    raw_i64(c, successes);
    raw_i64(c, errors);
    raw_num(c, a->min_rate);
    raw_num(c, a->max_rate);
    raw_num(c, a->decrease);
    raw_num(c, a->increase);
    raw_num(c, a->high_error);
    raw_num(c, a->low_error);
    raw_i64(c, a->window);
}

static bool int_at(const redisReply *r, size_t i, int64_t *v)
{
    if (i >= r->elements || r->element[i]->type != REDIS_REPLY_INTEGER) return false;
    *v = r->element[i]->integer;
    return true;
}

/* A number: an integer, or a string of its digits. */
static bool num_at(const redisReply *r, size_t i, double *v)
{
    if (i < r->elements && r->element[i]->type == REDIS_REPLY_INTEGER) {
        *v = (double)r->element[i]->integer;
        return true;
    }
    if (i >= r->elements || r->element[i]->type != REDIS_REPLY_STRING) return false;
    char *end;
    *v = strtod(r->element[i]->str, &end);
    return end != r->element[i]->str;
}

#define HEAD 3 /* with several levels: allowed, top (1-based), denied_by (0: none) */
#define PER_LEVEL 7

int sl__rlimits_parse_check(const redisReply *r, const sl_limit_plan_t *p, sl_limit_result_t *out,
                            sl_limit_key_info_t *info)
{
    /* One level: no head, its reason says whether it allowed. */
    size_t head = p->n > 1 ? HEAD : 0;
    if (!r || r->type != REDIS_REPLY_ARRAY || p->n < 1 || r->elements < head + PER_LEVEL * p->n)
        return SL__RPROTO;
    int64_t allowed, top, denied;
    if (head) {
        if (!int_at(r, 0, &allowed) || !int_at(r, 1, &top) || !int_at(r, 2, &denied)) return SL__RPROTO;
    } else {
        if (!int_at(r, 0, &allowed)) return SL__RPROTO;
        allowed = allowed == SL_LIMIT_ALLOWED;
        top = 1;
        denied = allowed ? 0 : 1;
    }
    if (top < 1 || top > (int64_t)p->n) return SL__RPROTO;
    memset(out, 0, sizeof *out);
    out->allowed = allowed == 1;
    out->n_checked = p->n;
    out->top = (size_t)(top - 1);
    out->denied_by = out->allowed ? -1 : (int)(denied - 1);
    sl_limits_plan_names(p, out);
    for (size_t i = 0; i < p->n; i++) {
        sl_limit_level_t *lv = &out->checked[i];
        size_t b = head + PER_LEVEL * i;
        int64_t reason;
        if (!int_at(r, b, &reason) || !int_at(r, b + 1, &lv->limit) ||
            !int_at(r, b + 2, &lv->remaining) || !int_at(r, b + 3, &lv->retry_after_us) ||
            !int_at(r, b + 4, &lv->reset_after_us) || !int_at(r, b + 5, &lv->delay_us) ||
            !num_at(r, b + 6, &lv->rate) || reason < 0 || reason > SL_LIMIT_MAX_KEYS)
            return SL__RPROTO;
        lv->reason = (sl_limit_reason_t)reason;
        if (lv->delay_us > out->delay_us) out->delay_us = lv->delay_us;
    }
    const sl_limit_level_t *t = &out->checked[out->top];
    out->limit = t->limit;
    out->remaining = t->remaining;
    out->retry_after_us = t->retry_after_us;
    out->reset_after_us = t->reset_after_us;
    if (!out->allowed) out->delay_us = 0;
    if (info) {
        size_t b = head + PER_LEVEL * p->n;
        int64_t tracked;
        memset(info, 0, sizeof *info);
        if (!int_at(r, b, &tracked) || !int_at(r, b + 1, &info->held)) return SL__RPROTO;
        info->tracked = tracked == 1;
        info->level = out->checked[0];
    }
    return SL_OK;
}

int sl__rlimits_parse_release(const redisReply *r, int64_t *held, int64_t *remaining)
{
    int64_t ok;
    if (!r || r->type != REDIS_REPLY_ARRAY || !int_at(r, 0, &ok)) return SL__RPROTO;
    if (ok != 1) return SL_ENOTFOUND;
    if (!int_at(r, 1, held) || !int_at(r, 2, remaining)) return SL__RPROTO;
    return SL_OK;
}

int sl__rlimits_parse_report(const redisReply *r, sl_limit_adapt_event_t *ev)
{
    int64_t n;
    if (!r || r->type != REDIS_REPLY_ARRAY || !num_at(r, 0, &ev->old_rate) ||
        !num_at(r, 1, &ev->new_rate) || !num_at(r, 2, &ev->error_rate) || !int_at(r, 3, &n))
        return SL__RPROTO;
    ev->window_outcomes = n;
    return SL_OK;
}

/* ---- on the backend's command connection ---- */

typedef struct lcall {
    sl_redis_limits_cb cb;
    void *ud;
} lcall_t;

static void on_limits_reply(rb_t *rb, rcall_t *c, redisReply *r)
{
    lcall_t *l = c->ctx;
    /* The library went away (FUNCTION FLUSH, or a restart the connection never saw):
     * this call is decided locally by the caller; the next ones find it loaded again. */
    if (r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "not found")) sl__rb_limits_connect(rb);
    l->cb(r, l->ud);
    free(l);
}

void sl_backend_redis_limits_send(sl_backend_t *b, sl__rcmd_t *cmd, sl_redis_limits_cb cb, void *ud)
{
    lcall_t *l = sl_backend_redis_available(b) ? malloc(sizeof *l) : NULL;
    if (!l) {
        sl__rcmd_free(cmd);
        cb(NULL, ud);
        return;
    }
    l->cb = cb;
    l->ud = ud;
    /* Internal: the limits need only the connection and their library, not the pools. */
    sl__rb_send_cmd((rb_t *)b, cmd, on_limits_reply, l, 0, true);
}

static void on_limits_loaded(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    if (r && r->type == REDIS_REPLY_ERROR)
        sl__backend_log(SL_BACKEND_LOG_WARN, "redis %s:%d: loading limits.lua failed: %s (limits stay local)",
                rb->opt.host, rb->opt.port, r->str);
}

static void on_limits_version(rb_t *rb, rcall_t *c, redisReply *r)
{
    (void)c;
    if (!r) return;
    if (r->type == REDIS_REPLY_STRING && strcmp(r->str, SL__REDIS_LIMITS_VERSION) == 0) return;
    /* Missing (a fresh or flushed Redis) or another version: the library keeps no state of
     * its own, so replacing it is always safe. */
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FUNCTION");
    sl__rcmd_raw(&cmd, "LOAD");
    sl__rcmd_raw(&cmd, "REPLACE");
    sl__rcmd_raw(&cmd, sl__redis_limits_lua_source);
    sl__rb_send_cmd(rb, &cmd, on_limits_loaded, NULL, 0, true);
}

void sl__rb_limits_connect(rb_t *rb)
{
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_limits_version");
    sl__rcmd_raw(&cmd, "0");
    sl__rb_send_cmd(rb, &cmd, on_limits_version, NULL, 0, true);
}
