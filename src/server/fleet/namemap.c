/* namemap.c - an open-addressing hash map from names to pointers (linear probing, FNV-1a).
 *
 * Deletion shifts the following entries of the probe run back (no tombstones), so a map
 * whose agents or tasks come and go does not fill up with dead slots.
 */
#include "fleet.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static size_t find(const sl_namemap_t *m, const char *key)
{
    size_t mask = m->cap - 1, i = (size_t)hash(key) & mask;
    while (m->keys[i] && strcmp(m->keys[i], key) != 0)
        i = (i + 1) & mask;
    return i;
}

void *sl__namemap_get(const sl_namemap_t *m, const char *key)
{
    if (!m->cap) return NULL;
    size_t i = find(m, key);
    return m->keys[i] ? m->vals[i] : NULL;
}

static int grow(sl_namemap_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    char **keys = calloc(cap, sizeof(*keys));
    void **vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    sl_namemap_t next = {keys, vals, cap, m->count};
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = find(&next, m->keys[i]);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    *m = next;
    return 0;
}

const char *sl__namemap_put(sl_namemap_t *m, const char *key, void *val)
{
    if ((m->count + 1) * 4 > m->cap * 3 && grow(m) < 0) return NULL;
    size_t i = find(m, key);
    if (m->keys[i]) {
        m->vals[i] = val;
        return m->keys[i];
    }
    char *copy = strdup(key);
    if (!copy) return NULL;
    m->keys[i] = copy;
    m->vals[i] = val;
    m->count++;
    return copy;
}

void *sl__namemap_obtain(sl_namemap_t *m, const char *key, size_t size, size_t max_count,
                         const char **stored_key)
{
    void *val = sl__namemap_get(m, key);
    if (val || m->count >= max_count) return val;
    val = calloc(1, size);
    const char *k = val ? sl__namemap_put(m, key, val) : NULL;
    if (!k) {
        free(val);
        return NULL;
    }
    if (stored_key) *stored_key = k;
    return val;
}

void *sl__namemap_del(sl_namemap_t *m, const char *key)
{
    if (!m->cap) return NULL;
    size_t mask = m->cap - 1, i = find(m, key);
    if (!m->keys[i]) return NULL;
    void *val = m->vals[i];
    free(m->keys[i]);
    m->keys[i] = NULL;
    m->count--;
    /* Move back every later entry of the run whose home slot is not in (i, j]. */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = (size_t)hash(m->keys[j]) & mask;
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        m->keys[j] = NULL;
        i = j;
    }
    return val;
}

void sl__namemap_foreach(const sl_namemap_t *m, void (*fn)(const char *key, void *val, void *ud),
                         void *ud)
{
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
#ifndef NDEBUG
        size_t count = m->count;
#endif
        fn(m->keys[i], m->vals[i], ud);
        assert(m->count == count && "fn added or removed no entry");
    }
}

void sl__namemap_free_all(sl_namemap_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) free(m->vals[i]);
    sl__namemap_free(m);
}

void sl__namemap_free(sl_namemap_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
