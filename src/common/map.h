/* map.h - the one hash map of the tree: u64 -> u64 and string -> pointer, open addressing.
 *
 * Used by the engine (leases, tickets, agents, pools), the limits library (keys) and
 * sluiced (ids, names). Linear probing with backward-shift deletion: no tombstones, so a
 * map whose keys come and go stays as fast as a fresh one. The load factor stays <= 1/2.
 * Both kinds are zero-initialised (`= {0}` is an empty map) and never shrink. */
#ifndef SL_COMMON_MAP_H
#define SL_COMMON_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- u64 keys (0 is reserved as "empty") to u64 values ------------------------------ */
typedef struct sl_u64map {
    uint64_t *keys; /* 0 = empty slot */
    uint64_t *vals;
    size_t cap; /* a power of two, or 0 */
    size_t len;
} sl_u64map_t;

/* Returns true and sets *val (when val is not NULL) when `key` is present. */
bool sl_u64map_get(const sl_u64map_t *m, uint64_t key, uint64_t *val);
/* Inserts or replaces. Returns 0, or -1 when key is 0 or out of memory (map unchanged).
 * Replacing an existing key never allocates. */
int sl_u64map_put(sl_u64map_t *m, uint64_t key, uint64_t val);
/* Removes `key`; returns true when it was present. */
bool sl_u64map_del(sl_u64map_t *m, uint64_t key);
/* Makes room for `extra` more keys, so that many puts cannot fail. 0 or -1 (no memory). */
int sl_u64map_reserve(sl_u64map_t *m, size_t extra);
/* Calls `fn` once on every entry; `fn` may delete the entry it is given (and no other). */
void sl_u64map_foreach(sl_u64map_t *m, void (*fn)(uint64_t key, uint64_t val, void *ud), void *ud);
/* Frees the arrays; the map is empty and usable again. */
void sl_u64map_free(sl_u64map_t *m);

/* ---- string keys to pointers ---------------------------------------------------------
 * A map either borrows its keys (sl_strmap_put: the key string must live as long as the
 * entry, e.g. inside the value) or owns copies of them (the *_copy functions, sl_strmap_
 * obtain and sl_strmap_free_keys); one map uses one way, never both. */
typedef struct sl_strmap_slot {
    uint32_t hash;    /* 0 = empty slot */
    uint32_t key_len; /* strlen(key): a key is compared only when hash and length agree */
    const char *key;
    void *val;
} sl_strmap_slot_t;

typedef struct sl_strmap {
    sl_strmap_slot_t *slots;
    size_t cap; /* a power of two, or 0 */
    union {     /* the number of entries; `count` is the name sluiced's name maps use */
        size_t len;
        size_t count;
    };
} sl_strmap_t;

/* The slot holding `key`, or NULL. The pointer is valid until the next put or delete. */
sl_strmap_slot_t *sl_strmap_find(const sl_strmap_t *m, const char *key);
/* The value under `key`, or NULL. */
void *sl_strmap_get(const sl_strmap_t *m, const char *key);
/* Inserts or replaces under the borrowed `key`. 0, or -1 when out of memory or the key is
 * 4 GiB long (unchanged). */
int sl_strmap_put(sl_strmap_t *m, const char *key, void *val);
/* Makes room for `extra` more keys, so that many puts cannot fail. 0 or -1. */
int sl_strmap_reserve(sl_strmap_t *m, size_t extra);
/* Removes `key` and returns its value, or NULL. */
void *sl_strmap_del(sl_strmap_t *m, const char *key);
/* Removes the entry in slot `i` (occupied) and returns its value; a later entry of the
 * probe run may then sit at `i`, so a sweep over the slots looks at `i` again. */
void *sl_strmap_del_at(sl_strmap_t *m, size_t i);
/* Frees the slots (not keys nor values); the map is empty and usable again. */
void sl_strmap_free(sl_strmap_t *m);

/* Owned keys. Stores `val` under a copy of `key`, replacing any value. Returns the stored
 * key (valid until the entry is removed), or NULL when out of memory (map unchanged). */
const char *sl_strmap_put_copy(sl_strmap_t *m, const char *key, void *val);
/* The bounded insert: the value under `key`; when absent and the map holds fewer than
 * `max_len` entries, a new zeroed value of `size` bytes (malloc'd, the caller frees it)
 * under a copy of `key`, whose stored key goes to `*stored_key` when that is not NULL.
 * NULL when absent and full, or out of memory (map unchanged). */
void *sl_strmap_obtain(sl_strmap_t *m, const char *key, size_t size, size_t max_len,
                       const char **stored_key);
/* Removes `key` (freeing its copy) and returns its value, or NULL. */
void *sl_strmap_del_copy(sl_strmap_t *m, const char *key);
/* Frees every key copy, then the slots (not the values). */
void sl_strmap_free_keys(sl_strmap_t *m);

#endif /* SL_COMMON_MAP_H */
