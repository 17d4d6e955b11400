/* namemap.h - names (copied) to pointers, on the common string map (namemap.c): the core's
 * report holds and the features' per-agent and per-task state. */
#ifndef SL_NAMEMAP_H
#define SL_NAMEMAP_H

#include <stddef.h>

#include "../../common/map.h"

typedef sl_strmap_t sl_namemap_t; /* `= {0}` is an empty map; .count is its entry count */
/* The value stored under `key`, or NULL. */
void *sl__namemap_get(const sl_namemap_t *m, const char *key);
/* Stores `val` under a copy of `key`, replacing any value. Returns the stored key (valid
 * until the entry is removed), or NULL when out of memory (the map is unchanged). */
const char *sl__namemap_put(sl_namemap_t *m, const char *key, void *val);
/* The value under `key`; when absent and the map holds fewer than `max_count` entries, a
 * new zeroed value of `size` bytes (malloc'd) stored under a copy of `key`, whose stored
 * key goes to `*stored_key`. NULL when absent and full, or out of memory. */
void *sl__namemap_obtain(sl_namemap_t *m, const char *key, size_t size, size_t max_count,
                         const char **stored_key);
/* Removes `key` and returns its value (NULL when absent). */
void *sl__namemap_del(sl_namemap_t *m, const char *key);
/* Calls `fn` on every entry; `fn` must not add or remove entries. */
void sl__namemap_foreach(const sl_namemap_t *m, void (*fn)(const char *key, void *val, void *ud),
                         void *ud);
/* Frees the map's keys and arrays (not the values). */
void sl__namemap_free(sl_namemap_t *m);
/* Frees every value with free(), then the map. */
void sl__namemap_free_all(sl_namemap_t *m);

#endif /* SL_NAMEMAP_H */
