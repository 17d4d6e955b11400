/* map.c - open-addressing hash maps (linear probing, backward-shift deletion).
 *
 * The engine looks up leases, tickets, agents and pools on every request, so the
 * maps avoid per-entry allocation: u64 maps store keys and values inline, string
 * maps borrow the key from the value they point to. Load factor is kept <= 1/2. */
#include "map.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

bool sl__u64map_get(const sl__u64map_t *m, uint64_t key, uint64_t *val)
{
    if (m->cap == 0 || key == 0) return false;
    assert(m->len < m->cap && "probing ends only at an empty slot");
    size_t mask = m->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            if (val) *val = m->vals[i];
            return true;
        }
        if (m->keys[i] == 0) return false;
    }
}

static int u64map_grow(sl__u64map_t *m, size_t want_cap)
{
    assert(want_cap && (want_cap & (want_cap - 1)) == 0 && "capacity is a power of two");
    assert(m->len * 2 <= want_cap && "load factor stays <= 1/2");
    uint64_t *keys = calloc(want_cap, sizeof *keys);
    uint64_t *vals = calloc(want_cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    size_t mask = want_cap - 1;
    for (size_t j = 0; j < m->cap; j++) {
        if (m->keys[j] == 0) continue;
        size_t i = mix64(m->keys[j]) & mask;
        while (keys[i])
            i = (i + 1) & mask;
        keys[i] = m->keys[j];
        vals[i] = m->vals[j];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = want_cap;
    return 0;
}

int sl__u64map_reserve(sl__u64map_t *m, size_t extra)
{
    size_t need = (m->len + extra) * 2;
    if (need <= m->cap) return 0;
    size_t cap = m->cap ? m->cap : 16;
    while (cap < need)
        cap *= 2;
    return u64map_grow(m, cap);
}

int sl__u64map_put(sl__u64map_t *m, uint64_t key, uint64_t val)
{
    if (key == 0) return -1;
    if (m->cap) {
        /* Replacing an existing key never allocates. */
        size_t mask = m->cap - 1;
        for (size_t i = mix64(key) & mask; m->keys[i]; i = (i + 1) & mask) {
            if (m->keys[i] == key) {
                m->vals[i] = val;
                return 0;
            }
        }
    }
    if (sl__u64map_reserve(m, 1) != 0) return -1;
    size_t mask = m->cap - 1;
    size_t i = mix64(key) & mask;
    while (m->keys[i])
        i = (i + 1) & mask;
    m->len++;
    m->keys[i] = key;
    m->vals[i] = val;
    assert(m->len * 2 <= m->cap);
    return 0;
}

bool sl__u64map_del(sl__u64map_t *m, uint64_t key)
{
    if (m->cap == 0 || key == 0) return false;
    size_t mask = m->cap - 1;
    size_t i = mix64(key) & mask;
    while (m->keys[i] != key) {
        if (m->keys[i] == 0) return false;
        i = (i + 1) & mask;
    }
    /* Backward shift: pull later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = mix64(m->keys[j]) & mask;
        /* Entry j may move to i when its home is not in (i, j] cyclically. */
        bool between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = 0;
    m->vals[i] = 0;
    m->len--;
    return true;
}

void sl__u64map_free(sl__u64map_t *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

uint64_t sl__strhash(const char *s)
{
    /* FNV-1a, then a finaliser so short keys spread over the table. Never 0. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    h = mix64(h);
    return h ? h : 1;
}

void *sl__strmap_get(const sl__strmap_t *m, const char *key)
{
    if (m->cap == 0) return NULL;
    uint64_t h = sl__strhash(key);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask; m->slots[i].hash; i = (i + 1) & mask) {
        if (m->slots[i].hash == h && strcmp(m->slots[i].key, key) == 0) return m->slots[i].val;
    }
    return NULL;
}

int sl__strmap_reserve(sl__strmap_t *m, size_t extra)
{
    size_t need = (m->len + extra) * 2;
    if (need <= m->cap) return 0;
    size_t cap = m->cap ? m->cap : 16;
    while (cap < need)
        cap *= 2;
    sl__strmap_slot_t *slots = calloc(cap, sizeof *slots);
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

int sl__strmap_put(sl__strmap_t *m, const char *key, void *val)
{
    assert(key && "the key is borrowed from the value and must exist");
    if (sl__strmap_reserve(m, 1) != 0) return -1;
    uint64_t h = sl__strhash(key);
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    for (; m->slots[i].hash; i = (i + 1) & mask) {
        if (m->slots[i].hash == h && strcmp(m->slots[i].key, key) == 0) {
            m->slots[i].key = key;
            m->slots[i].val = val;
            return 0;
        }
    }
    m->slots[i].hash = h;
    m->slots[i].key = key;
    m->slots[i].val = val;
    m->len++;
    assert(m->len * 2 <= m->cap && "load factor stays <= 1/2");
    return 0;
}

void *sl__strmap_del(sl__strmap_t *m, const char *key)
{
    if (m->cap == 0) return NULL;
    uint64_t h = sl__strhash(key);
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    for (;; i = (i + 1) & mask) {
        if (!m->slots[i].hash) return NULL;
        if (m->slots[i].hash == h && strcmp(m->slots[i].key, key) == 0) break;
    }
    void *val = m->slots[i].val;
    for (size_t j = (i + 1) & mask; m->slots[j].hash; j = (j + 1) & mask) {
        size_t home = m->slots[j].hash & mask;
        bool between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    memset(&m->slots[i], 0, sizeof m->slots[i]);
    m->len--;
    return val;
}

void sl__strmap_free(sl__strmap_t *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}
