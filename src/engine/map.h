/* map.h - the engine's names for the common hash maps (src/common/map.h): u64 -> u64 and
 * borrowed string -> pointer. Thin aliases, so the engine's call sites read as before. */
#ifndef SL_ENGINE_MAP_H
#define SL_ENGINE_MAP_H

#include "../common/map.h"

#include <stdlib.h>
#include <string.h>

typedef sl_u64map_t sl__u64map_t;
typedef sl_strmap_slot_t sl__strmap_slot_t;
typedef sl_strmap_t sl__strmap_t;

/* The contracts are those of src/common/map.h. */
static inline bool sl__u64map_get(const sl__u64map_t *m, uint64_t key, uint64_t *val)
{
    return sl_u64map_get(m, key, val);
}
static inline int sl__u64map_put(sl__u64map_t *m, uint64_t key, uint64_t val)
{
    return sl_u64map_put(m, key, val);
}
static inline bool sl__u64map_del(sl__u64map_t *m, uint64_t key) { return sl_u64map_del(m, key); }
static inline int sl__u64map_reserve(sl__u64map_t *m, size_t extra)
{
    return sl_u64map_reserve(m, extra);
}
static inline void sl__u64map_free(sl__u64map_t *m) { sl_u64map_free(m); }

static inline void *sl__strmap_get(const sl__strmap_t *m, const char *key)
{
    return sl_strmap_get(m, key);
}
static inline int sl__strmap_put(sl__strmap_t *m, const char *key, void *val)
{
    return sl_strmap_put(m, key, val);
}
static inline int sl__strmap_reserve(sl__strmap_t *m, size_t extra)
{
    return sl_strmap_reserve(m, extra);
}
static inline void *sl__strmap_del(sl__strmap_t *m, const char *key)
{
    return sl_strmap_del(m, key);
}
static inline void sl__strmap_free(sl__strmap_t *m) { sl_strmap_free(m); }

/* Adds under `key`, which must be absent, a zeroed struct of `size` bytes owning a malloc'd
 * copy of `key` at byte `str_offset` (offsetof its member): the map's key is that copy, and
 * sl__strmap_free_owned frees both. Returns the struct, or NULL when out of memory (the map
 * unchanged). */
static inline void *sl__strmap_make(sl__strmap_t *m, const char *key, size_t size,
                                    size_t str_offset)
{
    if (sl__strmap_reserve(m, 1) != 0) return NULL;
    char *val = calloc(1, size);
    size_t n = strlen(key) + 1;
    char *copy = malloc(n);
    if (!val || !copy) {
        free(val);
        free(copy);
        return NULL;
    }
    memcpy(copy, key, n);
    memcpy(val + str_offset, &copy, sizeof copy);
    sl__strmap_put(m, copy, val);
    return val;
}

/* Frees every value of `m`, each a malloc'd struct owning one malloc'd string at byte
 * `str_offset` (offsetof its member), the string first; then the map itself. */
static inline void sl__strmap_free_owned(sl__strmap_t *m, size_t str_offset)
{
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].hash) continue;
        char *str;
        memcpy(&str, (char *)m->slots[i].val + str_offset, sizeof str);
        free(str);
        free(m->slots[i].val);
    }
    sl__strmap_free(m);
}

/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].hash) ... */

#endif
