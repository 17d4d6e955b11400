/* limits_redis.h - what limits_api.c and limits_redis.c (the /v1/limits routes on limits.lua) share. */
#ifndef SL_SERVER_LIMITS_REDIS_H
#define SL_SERVER_LIMITS_REDIS_H

#include "server.h"

#include "limits.h"

/* ---- limits_api.c ---- */
/* The running set (NULL: no limits configured). */
sl_limits_t *sl__limits_set(const sl_server_t *srv);
/* A check's answer (200 or 429, headers, counters); a library error's answer. */
void sl__limits_reply_result(sl_call_t *call, const char *name, const sl_limit_result_t *r,
                             double waited_s);
void sl__limits_reply_error(sl_call_t *call, int rc, const sl_limit_request_t *req);
json_t *sl__limits_level_json(const sl_limit_level_t *lv);
/* An adaptive rate change decided elsewhere (Redis): the event and the metrics. */
void sl__limits_adapted(sl_server_t *srv, const sl_limit_adapt_event_t *ev);
/* A hold of concurrency limit `name` ended by a release in memory: the held checks of
 * limits that check it re-check now (their retry_after counted on the TTLs alone). */
void sl__limits_wake_held(sl_server_t *srv, const char *name);

/* ---- limits_redis.c: each returns false when the Redis backend is not up (the caller
 * then decides in its own set), else true: the call is (or will be) answered. ---- */
/* A check: `queues` holds a deny until `deadline_us` (server µs), re-checking at its
 * retry_after. */
bool sl__limits_redis_check(sl_call_t *call, const char *name, const sl_limit_request_t *req,
                            bool queues, int64_t deadline_us);
bool sl__limits_redis_release(sl_call_t *call, const char *name, const sl_limit_request_t *req);
bool sl__limits_redis_report(sl_call_t *call, const char *name, const sl_limit_request_t *req,
                             int64_t successes, int64_t errors);
/* GET /v1/limits/NAME?key=K: `j` (stolen) is the limit's view, answered with its state. */
bool sl__limits_redis_view(sl_call_t *call, const char *name, const sl_limit_request_t *req,
                           json_t *j);
/* Answers every check of `srv` held on Redis (503) and stops their timers. */
void sl__limits_redis_shutdown(sl_server_t *srv);

#endif /* SL_SERVER_LIMITS_REDIS_H */
