/* limits_drive.c - one action-limit operation run on the C library or on limits.lua, answered in the backend-neutral record. */
#include "limits_drive.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limits_fcall.h"

static json_t *scalar(const char *v)
{
    char *end;
    double d = strtod(v, &end);
    if (*v && *end == '\0') return d == floor(d) && fabs(d) < 1e15 ? json_integer((json_int_t)d) : json_real(d);
    return json_string(v);
}

/* `limit NAME k=v...`: costs=a:1,b:5  parents=x,y  adaptive.min_rate=10 */
int limits_config_line(json_t *limits, const char *path, char **tok, int n, int lineno)
{
    if (n < 2) {
        fprintf(stderr, "%s:%d: limit needs a name\n", path, lineno);
        return -1;
    }
    json_t *obj = json_object();
    for (int i = 2; i < n; i++) {
        char *eq = strchr(tok[i], '=');
        if (!eq) {
            fprintf(stderr, "%s:%d: %s is not field=value\n", path, lineno, tok[i]);
            json_decref(obj);
            return -1;
        }
        *eq = '\0';
        const char *k = tok[i], *v = eq + 1;
        if (strcmp(k, "costs") == 0) {
            json_t *costs = json_object();
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) {
                char *colon = strchr(p, ':');
                if (!colon) continue;
                *colon = '\0';
                json_object_set_new(costs, p, scalar(colon + 1));
            }
            json_object_set_new(obj, "costs", costs);
        } else if (strcmp(k, "parents") == 0) {
            json_t *arr = json_array();
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) json_array_append_new(arr, json_string(p));
            json_object_set_new(obj, "parents", arr);
        } else if (strncmp(k, "adaptive.", 9) == 0) {
            json_t *ad = json_object_get(obj, "adaptive");
            if (!ad) json_object_set_new(obj, "adaptive", ad = json_object());
            json_object_set_new(ad, k + 9, scalar(v));
        } else {
            json_object_set_new(obj, k, scalar(v));
        }
    }
    json_object_set_new(limits, tok[1], obj);
    return 0;
}

static double secs(int64_t us)
{
    return us < 0 ? -1 : (double)us / 1e6;
}

/* ---- the C library backend ---- */

static void level_fields(result_t *r, const char *prefix, const sl_limit_level_t *lv)
{
    char name[72];
#define NUM(f, v) (snprintf(name, sizeof name, "%s%s", prefix, f), put_num(r, name, v))
    NUM("limit", (double)lv->limit);
    NUM("remaining", (double)lv->remaining);
    NUM("retry_after", secs(lv->retry_after_us));
    NUM("reset_after", secs(lv->reset_after_us));
    NUM("delay", secs(lv->delay_us));
    NUM("cost", (double)lv->cost);
    NUM("rate", lv->rate);
#undef NUM
    snprintf(name, sizeof name, "%sreason", prefix);
    put_str(r, name, sl_limit_reason_name(lv->reason));
    snprintf(name, sizeof name, "%skey", prefix);
    put_str(r, name, lv->key);
}

static void result_fields(result_t *r, const sl_limit_result_t *res)
{
    put_num(r, "allowed", res->allowed);
    put_num(r, "limit", (double)res->limit);
    put_num(r, "remaining", (double)res->remaining);
    put_num(r, "retry_after", secs(res->retry_after_us));
    put_num(r, "reset_after", secs(res->reset_after_us));
    put_num(r, "delay", secs(res->delay_us));
    put_num(r, "levels", (double)res->n_checked);
    put_str(r, "denied_by", res->denied_by >= 0 ? res->checked[res->denied_by].limit_name : "");
    put_str(r, "denied_key", res->denied_by >= 0 ? res->checked[res->denied_by].key : "");
    for (size_t i = 0; i < res->n_checked; i++) {
        char prefix[300];
        snprintf(prefix, sizeof prefix, "@%s.", res->checked[i].limit_name);
        level_fields(r, prefix, &res->checked[i]);
    }
}

void limits_lib_op(sl_limits_t *ls, const op_t *op, result_t *r)
{
    int64_t now = (LIMITS_T0_S * 1000000) + (int64_t)llround(op->t_s * 1e6);
    const char *what = op->tok[0], *name = op->ntok > 1 ? op->tok[1] : "";
    sl_limit_request_t req = {.agent = arg(op, "agent"), .team = arg(op, "team"),
                              .key = arg(op, "key"), .action = arg(op, "action"),
                              .hits = (int64_t)arg_num(op, "hits", 1)};
    if (strcmp(what, "check") == 0 || strcmp(what, "peek") == 0 || strcmp(what, "probe") == 0) {
        sl_limit_result_t res;
        if (strcmp(what, "peek") == 0) req.hits = 0;
        r->rc = strcmp(what, "probe") == 0 ? sl_limits_probe(ls, name, &req, now, &res)
                                           : sl_limits_check(ls, name, &req, now, &res);
        if (r->rc) return;
        result_fields(r, &res);
    } else if (strcmp(what, "when") == 0) {
        int64_t at = 0;
        r->rc = sl_limits_when(ls, name, &req, now, &at);
        if (!r->rc) put_num(r, "at", (double)(at - LIMITS_T0_S * 1000000) / 1e6);
    } else if (strcmp(what, "release") == 0) {
        r->rc = sl_limits_release(ls, name, &req, now);
    } else if (strcmp(what, "report") == 0) {
        double rate = 0;
        r->rc = sl_limits_report(ls, name, &req, (int64_t)arg_num(op, "successes", 0),
                                 (int64_t)arg_num(op, "errors", 0), now, &rate);
        if (!r->rc) put_num(r, "rate", rate);
    } else if (strcmp(what, "info") == 0) {
        sl_limit_key_info_t info;
        r->rc = sl_limits_key_info(ls, name, &req, now, &info);
        if (r->rc) return;
        put_num(r, "tracked", info.tracked);
        put_num(r, "held", (double)info.held);
        level_fields(r, "", &info.level);
    } else if (strcmp(what, "keys") == 0) {
        size_t keys = 0;
        r->rc = sl_limits_config(ls, name, NULL, &keys);
        if (!r->rc) put_num(r, "keys", (double)keys);
    } else if (strcmp(what, "sweep") == 0) {
        r->rc = SL_OK;
        put_num(r, "freed", (double)sl_limits_sweep(ls, now));
    } else {
        r->rc = SL_EINVAL;
        put_str(r, "error", "unknown operation");
    }
}

/* ---- the Redis backend: limits.lua, planned by the same set ---- */

static redisContext *redis;
static char redis_nodes[512]; /* HOST:PORT[,HOST:PORT...]: one server, or Cluster masters */

static redisContext *connect_node(char *node)
{
    char *colon = strrchr(node, ':');
    int port = colon ? atoi(colon + 1) : 6379;
    if (colon) *colon = '\0';
    redisContext *c = redisConnect(node, port);
    if (!c || c->err) {
        fprintf(stderr, "redis %s:%d: %s\n", node, port, c ? c->errstr : "no memory");
        if (c) redisFree(c);
        return NULL;
    }
    return c;
}

/* On Cluster a MOVED answer names the node of the slot: reconnect there and resend (a
 * check whose keys spanned slots would fail instead, CROSSSLOT). */
static redisReply *redis_call(sl__rcmd_t *c)
{
    redisReply *x = NULL;
    for (int hop = 0; hop < 4 && redis; hop++) {
        x = redisCommandArgv(redis, c->argc, (const char **)c->argv, c->len);
        char node[160];
        if (!x || x->type != REDIS_REPLY_ERROR || sscanf(x->str, "MOVED %*d %159s", node) != 1) break;
        freeReplyObject(x);
        x = NULL;
        redisFree(redis);
        redis = connect_node(node);
    }
    sl__rcmd_free(c);
    if (x && x->type == REDIS_REPLY_ERROR) fprintf(stderr, "redis: %s\n", x->str);
    return x;
}

/* A check (mode) of `req` on Redis, decoded; r->rc an SL_E code or SL__RPROTO. */
static redisReply *redis_check(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                               sl__rlimits_mode_t mode, int64_t now, sl_limit_plan_t *plan,
                               sl_limit_result_t *res, sl_limit_key_info_t *info, result_t *r)
{
    r->rc = sl_limits_plan(ls, name, req, mode == SL__RLIMITS_INFO ? SL_LIMIT_PLAN_INFO : SL_LIMIT_PLAN_CHECK,
                           0, 0, plan);
    if (r->rc) return NULL;
    sl__rcmd_t c;
    sl__rlimits_check_cmd(&c, plan, mode, now);
    redisReply *x = redis_call(&c);
    r->rc = sl__rlimits_parse_check(x, plan, res, info);
    return x;
}

void limits_redis_op(sl_limits_t *ls, const op_t *op, result_t *r)
{
    static sl_limit_plan_t plan;
    int64_t now = (LIMITS_T0_S * 1000000) + (int64_t)llround(op->t_s * 1e6);
    const char *what = op->tok[0], *name = op->ntok > 1 ? op->tok[1] : "";
    sl_limit_request_t req = {.agent = arg(op, "agent"), .team = arg(op, "team"),
                              .key = arg(op, "key"), .action = arg(op, "action"),
                              .hits = (int64_t)arg_num(op, "hits", 1)};
    sl_limit_result_t res;
    redisReply *x = NULL;
    if (strcmp(what, "check") == 0 || strcmp(what, "peek") == 0 || strcmp(what, "probe") == 0) {
        if (strcmp(what, "peek") == 0) req.hits = 0;
        x = redis_check(ls, name, &req, strcmp(what, "probe") == 0 ? SL__RLIMITS_PROBE : SL__RLIMITS_CHECK,
                        now, &plan, &res, NULL, r);
        if (!r->rc) result_fields(r, &res);
    } else if (strcmp(what, "when") == 0) {
        x = redis_check(ls, name, &req, SL__RLIMITS_PROBE, now, &plan, &res, NULL, r);
        if (!r->rc && !res.allowed && res.retry_after_us < 0) r->rc = SL_ECAPACITY;
        if (!r->rc)
            put_num(r, "at", (double)(now + (res.allowed ? 0 : res.retry_after_us) - LIMITS_T0_S * 1000000) / 1e6);
    } else if (strcmp(what, "release") == 0) {
        r->rc = sl_limits_plan(ls, name, &req, SL_LIMIT_PLAN_RELEASE, 0, 0, &plan);
        if (r->rc) return;
        sl__rcmd_t c;
        sl__rlimits_release_cmd(&c, &plan, now);
        x = redis_call(&c);
        int64_t held, remaining;
        r->rc = sl__rlimits_parse_release(x, &held, &remaining);
    } else if (strcmp(what, "report") == 0) {
        int64_t successes = (int64_t)arg_num(op, "successes", 0), errors = (int64_t)arg_num(op, "errors", 0);
        r->rc = sl_limits_plan(ls, name, &req, SL_LIMIT_PLAN_REPORT, successes, errors, &plan);
        if (r->rc) return;
        sl__rcmd_t c;
        sl__rlimits_report_cmd(&c, &plan, successes, errors, now);
        x = redis_call(&c);
        sl_limit_adapt_event_t ev;
        r->rc = sl__rlimits_parse_report(x, &ev);
        if (!r->rc) put_num(r, "rate", ev.new_rate);
    } else if (strcmp(what, "info") == 0) {
        sl_limit_key_info_t info;
        req.hits = 0;
        x = redis_check(ls, name, &req, SL__RLIMITS_INFO, now, &plan, &res, &info, r);
        if (!r->rc) {
            put_num(r, "tracked", info.tracked);
            put_num(r, "held", (double)info.held);
            level_fields(r, "", &info.level);
        }
    } else {
        r->rc = SL_EINVAL;
        put_str(r, "error", "operation not run on redis (a memory-only one: `only memory`)");
    }
    if (x) freeReplyObject(x);
}

/* FLUSHALL and FUNCTION LOAD REPLACE on every node; leaves `redis` on the last one. */
int limits_redis_reset(void)
{
    char nodes[sizeof redis_nodes];
    snprintf(nodes, sizeof nodes, "%s", redis_nodes);
    for (char *node = strtok(nodes, ","); node; node = strtok(NULL, ",")) {
        if (redis) redisFree(redis);
        redis = connect_node(node);
        if (!redis) return -1;
        redisReply *x = redisCommand(redis, "FLUSHALL");
        if (x) freeReplyObject(x);
        x = redisCommand(redis, "FUNCTION LOAD REPLACE %s", sl__redis_limits_lua_source);
        if (!x || x->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "FUNCTION LOAD failed: %s\n", x ? x->str : redis->errstr);
            if (x) freeReplyObject(x);
            return -1;
        }
        freeReplyObject(x);
    }
    return 0;
}

int limits_redis_open(const char *nodes)
{
    snprintf(redis_nodes, sizeof redis_nodes, "%s", nodes);
    return limits_redis_reset();
}

void limits_redis_close(void)
{
    if (redis) redisFree(redis);
    redis = NULL;
}
