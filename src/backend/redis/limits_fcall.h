/* limits_fcall.h - FCALLs of limits.lua (the action limits on Redis) from a plan, and decoding of their replies.
 *
 * Shared by sluiced (through sl_backend_redis_limits_send on the backend's command
 * connection), the limits conformance runner and the benchmark, so all speak to the
 * library alike. Keys: every key of one check is under the hash tag of its limit tree,
 * "sluice:{L<tree id>}:", so a check is one call in one Cluster slot (docs/limits.md).
 */
#ifndef SL_REDIS_LIMITS_FCALL_H
#define SL_REDIS_LIMITS_FCALL_H

#include <hiredis.h>

#include "backend.h"
#include "limits_plan.h"
#include "redis_proto.h"

/* limits.lua's VERSION. */
#define SL__REDIS_LIMITS_VERSION "3"

typedef enum sl__rlimits_mode {
    SL__RLIMITS_CHECK = 0, /* takes the units when every level allows */
    SL__RLIMITS_PROBE,     /* answers the same, changes nothing */
    SL__RLIMITS_INFO,      /* one-level plan: a peek plus tracked and held */
} sl__rlimits_mode_t;

/* The commands. `now_us` < 0 means Redis TIME (sluiced); a time pins it (tests). */
void sl__rlimits_check_cmd(sl__rcmd_t *c, const sl_limit_plan_t *p, sl__rlimits_mode_t mode,
                           int64_t now_us);
void sl__rlimits_release_cmd(sl__rcmd_t *c, const sl_limit_plan_t *p, int64_t now_us);
void sl__rlimits_report_cmd(sl__rcmd_t *c, const sl_limit_plan_t *p, int64_t successes,
                            int64_t errors, int64_t now_us);

/* Decodes a check reply into `out` (names, keys and costs point into `p`); `info` (may be
 * NULL) gets tracked and held of an INFO call. Returns 0, or SL__RPROTO (NULL reply, an
 * error, a malformed reply). */
int sl__rlimits_parse_check(const redisReply *r, const sl_limit_plan_t *p, sl_limit_result_t *out,
                            sl_limit_key_info_t *info);
/* A release reply: 0 with held and remaining, SL_ENOTFOUND (no live hold), SL__RPROTO. */
int sl__rlimits_parse_release(const redisReply *r, int64_t *held, int64_t *remaining);
/* A report reply: 0 with the event's rates (limit and key from the caller), SL__RPROTO. */
int sl__rlimits_parse_report(const redisReply *r, sl_limit_adapt_event_t *ev);

/* Sends `cmd` (freed here) on the redis backend's command connection: cb(reply) later,
 * or cb(NULL), possibly before this returns, when `b` is not a redis backend, the
 * connection is not open, or the call timed out. The reply is hiredis's, valid during cb. */
typedef void (*sl_redis_limits_cb)(const redisReply *r, void *ud);
void sl_backend_redis_limits_send(sl_backend_t *b, sl__rcmd_t *cmd, sl_redis_limits_cb cb, void *ud);

/* The library source (limits.lua, embedded). */
extern const char sl__redis_limits_lua_source[];

#endif /* SL_REDIS_LIMITS_FCALL_H */
