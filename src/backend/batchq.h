/* batchq.h - the batch processing queues as the memory backend and its state file keep them: a set of (pool, id, requests, expires_at).
 *
 * Batch calls are rare (the providers allow 50 a minute to their batch endpoints), so the
 * set is an array searched linearly: SL_BATCHQ_MAX_ENTRIES entries cost a millisecond
 * next to a call that waits on the provider. The rules of sl_batchq_op_t are
 * sl__batchq_apply's; sluice.lua's batch section is their port for Redis.
 */
#ifndef SL_BATCHQ_H
#define SL_BATCHQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct sl_batchq_entry {
    char *pool, *id; /* owned */
    int64_t requests;
    double expires_at; /* Unix seconds: forgotten then */
} sl_batchq_entry_t;

typedef struct sl_batchq_set {
    sl_batchq_entry_t *items;
    size_t n, cap;
} sl_batchq_set_t;

/* Counts (pool, id) with `requests` until `expires_at`, or sets those of an entry already
 * there. Returns 1 when added, 0 when it was there (updated), -1 out of memory (nothing
 * changed). */
int sl__batchq_put(sl_batchq_set_t *set, const char *pool, const char *id, int64_t requests,
                   double expires_at);

/* Removes (pool, id). Returns true when it was there. */
bool sl__batchq_del(sl_batchq_set_t *set, const char *pool, const char *id);

/* Forgets the entries whose expires_at is at or before `now_s`. */
void sl__batchq_expire(sl_batchq_set_t *set, double now_s);

/* The requests counted for `pool`, and (entries may be NULL) how many entries it has. */
int64_t sl__batchq_queued(const sl_batchq_set_t *set, const char *pool, size_t *entries);

/* Applies `c` (valid, as sl_backend_batch_queue checks) at `now_s` after forgetting what
 * expired: the rules of sl_batchq_op_t. Sets *counted and *queued as the callback wants
 * them. Returns SL_OK, or SL_ENOMEM with nothing changed. */
int sl__batchq_apply(sl_batchq_set_t *set, const sl_batchq_call_t *c, double now_s, bool *counted,
                     int64_t *queued);

/* Frees every entry; the set is empty and reusable afterwards. */
void sl__batchq_clear(sl_batchq_set_t *set);

#endif /* SL_BATCHQ_H */
