/* limits_redis.c - the /v1/limits routes on limits.lua: with the Redis backend up, every replica's checks share one state.
 *
 * The running set still parses, validates and plans each request (sl_limits_plan: the
 * same refusals as in memory); the decision is one FCALL on the backend's command
 * connection (src/backend/redis/limits_fcall.c), atomic over all levels. A check whose
 * FCALL gets no answer (Redis went away, the call timed out) is decided in this
 * process's own set, as when Redis is down from the start (docs/limits.md, "On Redis");
 * a release, report or key view answers 503 then, since the state it names is in Redis.
 *
 * on_limit: queue: a denied check with a `wait` sleeps until its retry_after and asks
 * Redis again, up to its deadline. Held checks of one queue keep no arrival order
 * across replicas (each re-checks on its own timer); within the wait nothing was taken
 * for them. The calls' strings live in call->body; the plan holds copies of the rest.
 */
#include "limits_redis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "limits_fcall.h"
#include "limits_plan.h"

typedef enum { RL_CHECK, RL_RELEASE, RL_REPORT, RL_VIEW } rl_kind_t;

typedef struct rlcall rlcall_t;
struct rlcall {
    sl_call_t *call;
    sl_server_t *srv;
    rl_kind_t kind;
    char name[SL_LIMITS_MAX_NAME + 1];
    sl_limit_request_t req; /* strings in call->body, but the team: */
    char team[SL_LIMITS_MAX_NAME + 1]; /* a copy: a reload may free the config's */
    sl_limit_plan_t plan;
    bool queues;
    int64_t started_us, deadline_us;
    json_t *view; /* RL_VIEW: the limit's view, answered with the state */
    rlcall_t *prev, *next; /* waiting on a timer (held) */
};

static rlcall_t *held_head; /* checks waiting for their retry time, of any server */

static int64_t now_us(const sl_server_t *srv)
{
    return (int64_t)llround(sl_backend_now(srv->backend) * 1e6);
}

static bool redis_up(const sl_server_t *srv)
{
    return sl__limits_set(srv) && sl_backend_redis_available(srv->backend);
}

static void rl_free(rlcall_t *c)
{
    json_decref(c->view);
    free(c);
}

static void unhold(rlcall_t *c)
{
    if (c->prev) c->prev->next = c->next;
    else held_head = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->call->owner = NULL;
    c->call->gone = NULL;
}

static void send_check(rlcall_t *c);

/* A held check's time has come: it is planned again from the set running now (a reload
 * may have changed or removed its limit meanwhile, as in memory) and sent. */
static void on_timer(evutil_socket_t fd, short what, void *ud)
{
    rlcall_t *c = ud;
    (void)fd, (void)what;
    unhold(c);
    sl_limits_t *set = sl__limits_set(c->srv);
    int rc = set ? sl_limits_plan(set, c->name, &c->req, SL_LIMIT_PLAN_CHECK, 0, 0, &c->plan)
                 : SL_ENOTFOUND;
    if (rc == SL_ENOTFOUND) {
        sl__reply_error(c->call, 404, "not_found", "limit: '%s' is no longer configured (reload)",
                        c->name);
    } else if (rc != SL_OK) {
        sl__limits_reply_error(c->call, rc, &c->req);
    } else {
        send_check(c);
        return;
    }
    rl_free(c);
}

static void on_gone(sl_call_t *call)
{
    rlcall_t *c = call->owner;
    unhold(c);
    rl_free(c);
    sl__call_drop(call);
}

/* Sleeps until at_us; false when no timer could be made (the caller answers). */
static bool hold(rlcall_t *c, int64_t at_us)
{
    sl_call_t *call = c->call;
    if (!call->wait_timer) call->wait_timer = evtimer_new(c->srv->base, on_timer, c);
    if (!call->wait_timer) return false;
    int64_t d = at_us - now_us(c->srv);
    if (d < 0) d = 0;
    struct timeval tv = {.tv_sec = (time_t)(d / 1000000), .tv_usec = (suseconds_t)(d % 1000000)};
    c->next = held_head;
    if (held_head) held_head->prev = c;
    held_head = c;
    call->owner = c;
    sl__call_watch_close(call, on_gone);
    evtimer_add(call->wait_timer, &tv);
    return true;
}

/* Redis did not answer: the check is decided in this process's set. */
static void check_locally(rlcall_t *c)
{
    sl_limits_t *set = sl__limits_set(c->srv);
    sl_limit_result_t r;
    int rc = set ? sl_limits_check(set, c->name, &c->req, now_us(c->srv), &r) : SL_ENOTFOUND;
    if (rc == SL_ENOTFOUND)
        sl__reply_error(c->call, 404, "not_found", "limit: '%s' is no longer configured (reload)",
                        c->name);
    else if (rc != SL_OK)
        sl__limits_reply_error(c->call, rc, &c->req);
    else
        sl__limits_reply_result(c->call, c->name, &r, 0);
}

/* True when a concurrency level denied `r`: a release may make room before the TTLs that
 * its retry_after counts on. */
static bool release_may_help(const sl_limit_plan_t *plan, const sl_limit_result_t *r)
{
    for (size_t i = 0; i < r->n_checked && i < plan->n; i++)
        if (r->checked[i].reason == SL_LIMIT_RATE && plan->lv[i].algorithm == SL_LIMIT_CONCURRENCY)
            return true;
    return false;
}

/* A hold of `name` was released through this replica: its checks held on a limit that
 * checks `name` ask again now (those of other replicas wait for their own timers). */
static void wake_held(const sl_server_t *srv, const char *name)
{
    static const struct timeval now_tv = {0, 0};
    for (rlcall_t *c = held_head; c; c = c->next) {
        if (c->srv != srv) continue;
        for (size_t i = 0; i < c->plan.n; i++)
            if (!strcmp(c->plan.lv[i].limit_name, name)) {
                evtimer_add(c->call->wait_timer, &now_tv);
                break;
            }
    }
}

static void on_check_reply(const redisReply *reply, void *ud)
{
    rlcall_t *c = ud;
    sl_limit_result_t r;
    if (sl__rlimits_parse_check(reply, &c->plan, &r, NULL) != SL_OK) {
        check_locally(c);
        rl_free(c);
        return;
    }
    int64_t now = now_us(c->srv);
    int64_t at = r.retry_after_us >= 0 ? now + r.retry_after_us : -1;
    if (at > c->deadline_us && release_may_help(&c->plan, &r))
        at = c->deadline_us; /* a release (on this replica: wake_held) wakes it sooner */
    if (!r.allowed && c->queues && at >= 0 && at <= c->deadline_us && c->call->req && hold(c, at))
        return;
    double waited_s = c->started_us < now && c->queues ? (double)(now - c->started_us) / 1e6 : 0;
    sl__limits_reply_result(c->call, c->name, &r, waited_s);
    rl_free(c);
}

static void send_check(rlcall_t *c)
{
    sl__rcmd_t cmd;
    sl__rlimits_check_cmd(&cmd, &c->plan, SL__RLIMITS_CHECK, -1);
    sl_backend_redis_limits_send(c->srv->backend, &cmd, on_check_reply, c);
}

static rlcall_t *rl_new(sl_call_t *call, rl_kind_t kind, const char *name,
                        const sl_limit_request_t *req, sl_limit_plan_for_t what, int64_t successes,
                        int64_t errors)
{
    sl_limits_t *set = sl__limits_set(call->srv);
    rlcall_t *c = calloc(1, sizeof *c);
    if (!c) {
        sl__reply_error(call, 500, "internal", "server: out of memory");
        return NULL;
    }
    int rc = sl_limits_plan(set, name, req, what, successes, errors, &c->plan);
    if (rc != SL_OK) {
        free(c);
        sl__limits_reply_error(call, rc, req);
        return NULL;
    }
    c->call = call;
    c->srv = call->srv;
    c->kind = kind;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->req = *req;
    if (req->team) {
        snprintf(c->team, sizeof c->team, "%s", req->team);
        c->req.team = c->team;
    }
    return c;
}

bool sl__limits_redis_check(sl_call_t *call, const char *name, const sl_limit_request_t *req,
                            bool queues, int64_t deadline_us)
{
    if (!redis_up(call->srv)) return false;
    rlcall_t *c = rl_new(call, RL_CHECK, name, req, SL_LIMIT_PLAN_CHECK, 0, 0);
    if (!c) return true;
    c->queues = queues;
    c->started_us = now_us(call->srv);
    c->deadline_us = deadline_us;
    send_check(c);
    return true;
}

static void unavailable(rlcall_t *c, const char *what)
{
    sl__reply_error(c->call, 503, "backend_unavailable", "redis: no answer to the %s of limit '%s'",
                    what, c->name);
}

static void on_release_reply(const redisReply *reply, void *ud)
{
    rlcall_t *c = ud;
    int64_t held = 0, remaining = 0;
    int rc = sl__rlimits_parse_release(reply, &held, &remaining);
    if (rc == SL_ENOTFOUND)
        sl__reply_error(c->call, 404, "not_found", "limit \"%s\" key \"%s\": no live hold",
                        c->name, c->plan.lv[0].key);
    else if (rc != SL_OK)
        unavailable(c, "release");
    else
        sl__reply_json(c->call, 200,
                       json_pack("{s:s,s:s,s:I,s:I}", "status", "released", "key",
                                 c->plan.lv[0].key, "held", (json_int_t)held, "remaining",
                                 (json_int_t)remaining));
    if (rc == SL_OK) wake_held(c->srv, c->name);
    rl_free(c);
}

bool sl__limits_redis_release(sl_call_t *call, const char *name, const sl_limit_request_t *req)
{
    if (!redis_up(call->srv)) return false;
    rlcall_t *c = rl_new(call, RL_RELEASE, name, req, SL_LIMIT_PLAN_RELEASE, 0, 0);
    if (!c) return true;
    sl__rcmd_t cmd;
    sl__rlimits_release_cmd(&cmd, &c->plan, -1);
    sl_backend_redis_limits_send(call->srv->backend, &cmd, on_release_reply, c);
    return true;
}

static void on_report_reply(const redisReply *reply, void *ud)
{
    rlcall_t *c = ud;
    sl_limit_adapt_event_t ev = {.limit = c->name, .key = c->plan.lv[0].key};
    if (sl__rlimits_parse_report(reply, &ev) != SL_OK) {
        unavailable(c, "report");
    } else {
        if (ev.new_rate != ev.old_rate && sl__limits_set(c->srv)) sl__limits_adapted(c->srv, &ev);
        sl__reply_json(c->call, 200, json_pack("{s:s,s:f}", "status", "reported", "rate", ev.new_rate));
    }
    rl_free(c);
}

bool sl__limits_redis_report(sl_call_t *call, const char *name, const sl_limit_request_t *req,
                             int64_t successes, int64_t errors)
{
    if (!redis_up(call->srv)) return false;
    rlcall_t *c = rl_new(call, RL_REPORT, name, req, SL_LIMIT_PLAN_REPORT, successes, errors);
    if (!c) return true;
    sl__rcmd_t cmd;
    sl__rlimits_report_cmd(&cmd, &c->plan, successes, errors, -1);
    sl_backend_redis_limits_send(call->srv->backend, &cmd, on_report_reply, c);
    return true;
}

static void on_view_reply(const redisReply *reply, void *ud)
{
    rlcall_t *c = ud;
    sl_limit_result_t r;
    sl_limit_key_info_t info;
    if (sl__rlimits_parse_check(reply, &c->plan, &r, &info) != SL_OK) {
        unavailable(c, "view");
    } else {
        json_t *lv = sl__limits_level_json(&info.level);
        json_object_set_new(lv, "tracked", json_boolean(info.tracked));
        json_object_set_new(lv, "held", json_integer((json_int_t)info.held));
        json_object_set_new(c->view, "state", lv);
        sl__reply_json(c->call, 200, c->view);
        c->view = NULL;
    }
    rl_free(c);
}

bool sl__limits_redis_view(sl_call_t *call, const char *name, const sl_limit_request_t *req,
                           json_t *j)
{
    if (!redis_up(call->srv)) return false;
    sl_limit_request_t one = *req;
    one.hits = 0;
    rlcall_t *c = rl_new(call, RL_VIEW, name, &one, SL_LIMIT_PLAN_INFO, 0, 0);
    if (!c) {
        json_decref(j);
        return true;
    }
    c->view = j;
    sl__rcmd_t cmd;
    sl__rlimits_check_cmd(&cmd, &c->plan, SL__RLIMITS_INFO, -1);
    sl_backend_redis_limits_send(call->srv->backend, &cmd, on_view_reply, c);
    return true;
}

void sl__limits_redis_shutdown(sl_server_t *srv)
{
    for (rlcall_t *c = held_head, *next; c; c = next) {
        next = c->next;
        if (c->srv != srv) continue;
        sl_call_t *call = c->call;
        unhold(c);
        if (call->wait_timer) event_del(call->wait_timer);
        rl_free(c);
        sl__reply_error(call, 503, "shutting_down", "server: sluiced is shutting down");
    }
}
