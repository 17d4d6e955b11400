/* idmap.h - an open-addressing hash map from nonzero uint64 ids (leases, tickets) to pointers. */
#ifndef SL_IDMAP_H
#define SL_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_idmap {
    uint64_t *keys; /* 0 = empty, UINT64_MAX = deleted */
    void **vals;
    size_t cap;   /* a power of two, or 0 */
    size_t used;  /* live + deleted slots */
    size_t count; /* live entries */
} sl_idmap_t;

/* The value stored under `key` (nonzero, not UINT64_MAX), or NULL. */
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
