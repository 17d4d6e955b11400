/* map.c - open-addressing hash maps (linear probing, backward-shift deletion).
 *
 * The engine looks up leases, tickets, agents and pools on every request and the limits
 * library a key on every check, so the maps avoid per-entry allocation: u64 maps store
 * keys and values inline, string maps keep the hash and the length beside a key pointer
 * (a mismatch is rejected without touching the key, a match is one memcmp). The load
 * factor stays <= 1/2, so a lookup probes about 1.5 slots.
 *
 * Deletion shifts the later entries of the probe run back into the hole instead of
 * leaving a tombstone: a map that saw a million keys come and go probes like a fresh one,
 * and "empty slot" is the only stop condition. */
#include "map.h"
#include "mix.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CAP 16

/* The capacity for len + extra entries at load <= 1/2, or `cap` when it is enough. */
static size_t cap_for(size_t cap, size_t len, size_t extra)
{
    size_t need = (len + extra) * 2;
    if (need <= cap) return cap;
    size_t next = cap ? cap : MIN_CAP;
    while (next < need)
        next *= 2;
    return next;
}

/* Backward shift: may the entry at j, whose home slot is `home`, move to the hole? It may
 * unless its home lies cyclically in (hole, j] (then it would sit before its home). */
static bool may_fill(size_t hole, size_t j, size_t home)
{
    bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    return !between;
}

/* ---- u64 -> u64 ------------------------------------------------------------------------ */

bool sl_u64map_get(const sl_u64map_t *m, uint64_t key, uint64_t *val)
{
    if (m->cap == 0 || key == 0) return false;
    assert(m->len < m->cap && "probing ends only at an empty slot");
    size_t mask = m->cap - 1;
    for (size_t i = sl_mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            if (val) *val = m->vals[i];
            return true;
        }
        if (m->keys[i] == 0) return false;
    }
}

int sl_u64map_reserve(sl_u64map_t *m, size_t extra)
{
    size_t cap = cap_for(m->cap, m->len, extra);
    if (cap == m->cap) return 0;
    uint64_t *keys = calloc(cap, sizeof *keys);
    uint64_t *vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    size_t mask = cap - 1;
    for (size_t j = 0; j < m->cap; j++) {
        if (m->keys[j] == 0) continue;
        size_t i = sl_mix64(m->keys[j]) & mask;
        while (keys[i])
            i = (i + 1) & mask;
        keys[i] = m->keys[j];
        vals[i] = m->vals[j];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int sl_u64map_put(sl_u64map_t *m, uint64_t key, uint64_t val)
{
    if (key == 0) return -1;
    if (m->cap) {
        size_t mask = m->cap - 1;
        for (size_t i = sl_mix64(key) & mask; m->keys[i]; i = (i + 1) & mask) {
            if (m->keys[i] == key) {
                m->vals[i] = val;
                return 0;
            }
        }
    }
    if (sl_u64map_reserve(m, 1) != 0) return -1;
    size_t mask = m->cap - 1;
    size_t i = sl_mix64(key) & mask;
    while (m->keys[i])
        i = (i + 1) & mask;
    m->len++;
    m->keys[i] = key;
    m->vals[i] = val;
    assert(m->len * 2 <= m->cap && "load factor stays <= 1/2");
    return 0;
}

static void u64map_del_at(sl_u64map_t *m, size_t i)
{
    size_t mask = m->cap - 1;
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        if (!may_fill(i, j, sl_mix64(m->keys[j]) & mask)) continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        i = j;
    }
    m->keys[i] = 0;
    m->vals[i] = 0;
    m->len--;
}

bool sl_u64map_del(sl_u64map_t *m, uint64_t key)
{
    if (m->cap == 0 || key == 0) return false;
    size_t mask = m->cap - 1;
    size_t i = sl_mix64(key) & mask;
    while (m->keys[i] != key) {
        if (m->keys[i] == 0) return false;
        i = (i + 1) & mask;
    }
    u64map_del_at(m, i);
    return true;
}

void sl_u64map_foreach(sl_u64map_t *m, void (*fn)(uint64_t key, uint64_t val, void *ud), void *ud)
{
    if (m->len == 0) return;
    /* Start after an empty slot: no probe run crosses it, so a deletion only pulls entries
     * not visited yet into the visited position, never one visited already. */
    size_t mask = m->cap - 1, start = 0;
    while (m->keys[start])
        start++;
    for (size_t n = 1; n <= m->cap; n++) {
        size_t i = (start + n) & mask;
        while (m->keys[i]) {
            uint64_t key = m->keys[i];
            fn(key, m->vals[i], ud);
            if (m->keys[i] == key) break; /* kept: next slot; deleted: look at i again */
        }
    }
}

void sl_u64map_free(sl_u64map_t *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- string -> pointer ---------------------------------------------------------------- */

/* The hash of `n` bytes at `s`, 8 at a time (a lookup of a short name costs a few
 * multiplications, not one per byte), finalised so short keys spread over the table.
 * Never 0. */
static inline uint32_t strhash(const char *s, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0; /* the tail by shifts: a short memcpy into w stalls on store forwarding */
    for (size_t k = 0; k < n; k++)
        w |= (uint64_t)(unsigned char)s[k] << (8 * k);
    uint32_t h32 = (uint32_t)(sl_mix64(h ^ w) >> 32);
    return h32 ? h32 : 1;
}

/* The slot of `key` (length n, hash h), or the empty slot ending its probe run. cap > 0.
 * Inline: it is most of a lookup. */
static inline size_t strmap_probe(const sl_strmap_t *m, const char *key, size_t n, uint32_t h)
{
    size_t mask = m->cap - 1, i = h & mask;
    for (;; i = (i + 1) & mask) {
        const sl_strmap_slot_t *s = &m->slots[i];
        if (!s->hash || (s->hash == h && s->key_len == n && !memcmp(s->key, key, n))) return i;
    }
}

sl_strmap_slot_t *sl_strmap_find(const sl_strmap_t *m, const char *key)
{
    if (m->len == 0) return NULL;
    size_t n = strlen(key);
    size_t i = strmap_probe(m, key, n, strhash(key, n));
    return m->slots[i].hash ? &m->slots[i] : NULL;
}

void *sl_strmap_get(const sl_strmap_t *m, const char *key)
{
    sl_strmap_slot_t *s = sl_strmap_find(m, key);
    return s ? s->val : NULL;
}

int sl_strmap_reserve(sl_strmap_t *m, size_t extra)
{
    size_t cap = cap_for(m->cap, m->len, extra);
    if (cap == m->cap) return 0;
    sl_strmap_slot_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    size_t mask = cap - 1;
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->slots[j].hash) continue;
        size_t i = m->slots[j].hash & mask;
        while (slots[i].hash)
            i = (i + 1) & mask;
        slots[i] = m->slots[j];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

int sl_strmap_put(sl_strmap_t *m, const char *key, void *val)
{
    assert(key && "a borrowed key must exist");
    size_t n = strlen(key);
    if (n >= UINT32_MAX || sl_strmap_reserve(m, 1) != 0) return -1;
    uint32_t h = strhash(key, n);
    sl_strmap_slot_t *s = &m->slots[strmap_probe(m, key, n, h)];
    if (!s->hash) m->len++;
    *s = (sl_strmap_slot_t){h, (uint32_t)n, key, val};
    assert(m->len * 2 <= m->cap && "load factor stays <= 1/2");
    return 0;
}

void *sl_strmap_del_at(sl_strmap_t *m, size_t i)
{
    assert(i < m->cap && m->slots[i].hash && "slot i holds an entry");
    void *val = m->slots[i].val;
    size_t mask = m->cap - 1;
    for (size_t j = (i + 1) & mask; m->slots[j].hash; j = (j + 1) & mask) {
        if (!may_fill(i, j, m->slots[j].hash & mask)) continue;
        m->slots[i] = m->slots[j];
        i = j;
    }
    memset(&m->slots[i], 0, sizeof m->slots[i]);
    m->len--;
    return val;
}

void *sl_strmap_del(sl_strmap_t *m, const char *key)
{
    sl_strmap_slot_t *s = sl_strmap_find(m, key);
    return s ? sl_strmap_del_at(m, (size_t)(s - m->slots)) : NULL;
}

void sl_strmap_free(sl_strmap_t *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

const char *sl_strmap_put_copy(sl_strmap_t *m, const char *key, void *val)
{
    sl_strmap_slot_t *s = sl_strmap_find(m, key);
    if (s) {
        s->val = val;
        return s->key;
    }
    char *copy = strdup(key);
    if (!copy || sl_strmap_put(m, copy, val) != 0) {
        free(copy);
        return NULL;
    }
    return copy;
}

void *sl_strmap_obtain(sl_strmap_t *m, const char *key, size_t size, size_t max_len,
                       const char **stored_key)
{
    void *val = sl_strmap_get(m, key);
    if (val || m->len >= max_len) return val;
    val = calloc(1, size);
    const char *k = val ? sl_strmap_put_copy(m, key, val) : NULL;
    if (!k) {
        free(val);
        return NULL;
    }
    if (stored_key) *stored_key = k;
    return val;
}

void *sl_strmap_del_copy(sl_strmap_t *m, const char *key)
{
    sl_strmap_slot_t *s = sl_strmap_find(m, key);
    if (!s) return NULL;
    char *copy = (char *)s->key;
    void *val = sl_strmap_del_at(m, (size_t)(s - m->slots));
    free(copy);
    return val;
}

void sl_strmap_free_keys(sl_strmap_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].hash) free((char *)m->slots[i].key);
    sl_strmap_free(m);
}
