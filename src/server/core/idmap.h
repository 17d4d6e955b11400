/* idmap.h - a map from nonzero uint64 ids (leases, tickets) to pointers, on the common u64 map. */
#ifndef SL_IDMAP_H
#define SL_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/map.h"

/* The common u64 map (src/common/map.h) holding pointers: `= {0}` is an empty map. */
typedef sl_u64map_t sl_idmap_t;

/* The value stored under `key` (nonzero), or NULL. */
void *sl__idmap_get(const sl_idmap_t *m, uint64_t key);

/* Stores `val` under `key`, replacing any value. Returns 0, or -1 when out of memory
 * (the map is unchanged). */
int sl__idmap_put(sl_idmap_t *m, uint64_t key, void *val);

/* Removes `key` and returns its value (NULL when absent). */
void *sl__idmap_del(sl_idmap_t *m, uint64_t key);

/* Calls `fn` on every entry; `fn` may delete the entry it is given. */
void sl__idmap_foreach(sl_idmap_t *m, void (*fn)(uint64_t key, void *val, void *ud), void *ud);

/* Frees the map's arrays (not the values). */
void sl__idmap_free(sl_idmap_t *m);

#endif /* SL_IDMAP_H */
