/* idmap.c - open addressing with linear probing; deleted slots are reclaimed on growth. */
#include "idmap.h"

#include <stdlib.h>

#define DELETED UINT64_MAX

static size_t slot_of(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

void *sl__idmap_get(const sl_idmap_t *m, uint64_t key)
{
    if (m->cap == 0) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (m->keys[i] == 0) return NULL;
    }
}

static int grow(sl_idmap_t *m)
{
    /* Rehash to a size where live entries fill at most 3/8; tombstones are dropped. */
    size_t cap = 16;
    while (cap * 3 <= (m->count + 1) * 8)
        cap *= 2;
    uint64_t *keys = calloc(cap, sizeof(*keys));
    void **vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    for (size_t j = 0; j < m->cap; j++) {
        if (m->keys[j] == 0 || m->keys[j] == DELETED) continue;
        size_t i = slot_of(m->keys[j], cap);
        while (keys[i])
            i = (i + 1) & (cap - 1);
        keys[i] = m->keys[j];
        vals[i] = m->vals[j];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    m->used = m->count;
    return 0;
}

int sl__idmap_put(sl_idmap_t *m, uint64_t key, void *val)
{
    if (m->cap == 0 || (m->used + 1) * 4 >= m->cap * 3) {
        if (grow(m) < 0) return -1;
    }
    size_t tomb = SIZE_MAX;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
        if (m->keys[i] == DELETED && tomb == SIZE_MAX) tomb = i;
        if (m->keys[i] == 0) {
            if (tomb != SIZE_MAX)
                i = tomb;
            else
                m->used++;
            m->keys[i] = key;
            m->vals[i] = val;
            m->count++;
            return 0;
        }
    }
}

void *sl__idmap_del(sl_idmap_t *m, uint64_t key)
{
    if (m->cap == 0) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) {
            void *v = m->vals[i];
            m->keys[i] = DELETED;
            m->vals[i] = NULL;
            m->count--;
            return v;
        }
        if (m->keys[i] == 0) return NULL;
    }
}

void sl__idmap_foreach(sl_idmap_t *m, void (*fn)(uint64_t key, void *val, void *ud), void *ud)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != 0 && m->keys[i] != DELETED) fn(m->keys[i], m->vals[i], ud);
}

void sl__idmap_free(sl_idmap_t *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->used = m->count = 0;
}
