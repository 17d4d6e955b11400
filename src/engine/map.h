/* map.h - open-addressing hash maps used by the engine: u64 -> u64 and string -> pointer. */
#ifndef SL_ENGINE_MAP_H
#define SL_ENGINE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* u64 keys (0 is reserved as "empty") to u64 values. Linear probing with
 * backward-shift deletion, so there are no tombstones and lookups stay short. */
typedef struct sl__u64map {
    uint64_t *keys;
    uint64_t *vals;
    size_t cap; /* a power of two, or 0 */
    size_t len;
} sl__u64map_t;

/* Returns true and sets *val when `key` is present. */
bool sl__u64map_get(const sl__u64map_t *m, uint64_t key, uint64_t *val);
/* Inserts or replaces. Returns 0, or -1 when out of memory (map unchanged). */
int sl__u64map_put(sl__u64map_t *m, uint64_t key, uint64_t val);
/* Removes `key`; returns true when it was present. */
bool sl__u64map_del(sl__u64map_t *m, uint64_t key);
/* Makes room for `extra` more keys without rehashing later. 0 or -1 (no memory). */
int sl__u64map_reserve(sl__u64map_t *m, size_t extra);
void sl__u64map_free(sl__u64map_t *m);

/* String keys to pointers. The key string is borrowed: it must live as long as the
 * entry (the engine keeps it inside the value). */
typedef struct sl__strmap_slot {
    uint64_t hash; /* 0 = empty */
    const char *key;
    void *val;
} sl__strmap_slot_t;

typedef struct sl__strmap {
    sl__strmap_slot_t *slots;
    size_t cap;
    size_t len;
} sl__strmap_t;

uint64_t sl__strhash(const char *s);
void *sl__strmap_get(const sl__strmap_t *m, const char *key);
/* Inserts or replaces. Returns 0, or -1 when out of memory (map unchanged). */
int sl__strmap_put(sl__strmap_t *m, const char *key, void *val);
/* Makes room for one more key, so a following put cannot fail. 0 or -1. */
int sl__strmap_reserve(sl__strmap_t *m, size_t extra);
/* Removes `key` and returns its value, or NULL. */
void *sl__strmap_del(sl__strmap_t *m, const char *key);
void sl__strmap_free(sl__strmap_t *m);

/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].hash) ... */

#endif
