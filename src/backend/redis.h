/* redis.h - the `redis` backend: many sluiced replicas share one quota kept in Redis 7 by sluice.lua.
 *
 * Every decision is one FCALL of the Functions library src/backend/redis/sluice.lua
 * (loaded and version-checked here), sent through hiredis's asynchronous API on the
 * daemon's libevent loop. Grants of queued tickets are published by the library, so
 * the replica holding the waiting request answers it; each replica advances every
 * pool on a timer. When Redis does not answer within the timeout the backend is
 * *down*: with `fail: open` requests are decided by an in-process engine on a
 * 1/replicas share of the limits (alert `backend_unavailable`), settles of Redis
 * leases are kept and replayed when Redis returns; with `fail: closed` operations
 * answer SL_REDIS_EUNAVAILABLE. See docs/redis.md.
 */
#ifndef SL_BACKEND_REDIS_H
#define SL_BACKEND_REDIS_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

/* The backend could not reach Redis and `fail: closed` (HTTP 503 backend_unavailable):
 * the engine's SL_EUNAVAILABLE, under the name this backend has used since before. */
#define SL_REDIS_EUNAVAILABLE SL_EUNAVAILABLE

/* sl_redis_options_t, sl_redis_fail_t and their parsing are declared in backend.h. */

/* Creates the backend on `base`. Connects once synchronously to check the library
 * version: a library of another version is refused (NULL, `err` says which versions
 * and how to replace it) unless `replace_library`; a missing one is loaded. Redis
 * being unreachable is not an error: the backend starts down and keeps trying.
 * `cfg` may be NULL for the engine defaults. */
sl_backend_t *sl_backend_redis_new(struct event_base *base, const sl_redis_options_t *o,
                                   const sl_engine_config_t *cfg, char *err, size_t errlen);

/* True while Redis answers and the library is loaded and configured. */
bool sl_backend_redis_available(sl_backend_t *b);

/* True while the alert backend_state_lost is raised for `pool`: Redis lost the pool's
 * state (restarted empty, flushed, failed over to a copy that missed writes) less than
 * a cold-start window (60 s) ago. False for other backends. */
bool sl_backend_redis_state_lost(sl_backend_t *b, const char *pool);

/* Replicas seen alive by the last heartbeat (at least 1). */
int sl_backend_redis_replicas(sl_backend_t *b);

#endif /* SL_BACKEND_REDIS_H */
