/* keymap.c - the per-limit map from key to state: open addressing, linear probing, backward-shift deletion.
 *
 * The table stays at most half full, so a lookup probes about 1.5 slots. Deletion
 * shifts later nodes of the run back instead of leaving tombstones, so a sweep that
 * removes most keys leaves a table as fast as a fresh one. */
#include "limits_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_of(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

sl__knode_t *sl__kmap_find(const sl__kmap_t *m, const char *key)
{
    if (m->n == 0) return NULL;
    size_t len = strlen(key);
    uint64_t h = hash_of(key, len);
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        sl__knode_t *node = m->slot[i];
        if (!node) return NULL;
        if (node->hash == h && node->key_len == len && memcmp(node->key, key, len) == 0) return node;
    }
}

static void place(sl__knode_t **slot, size_t cap, sl__knode_t *node)
{
    size_t i = node->hash & (cap - 1);
    while (slot[i]) i = (i + 1) & (cap - 1);
    slot[i] = node;
}

static int grow(sl__kmap_t *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    sl__knode_t **slot = calloc(cap, sizeof *slot);
    if (!slot) return SL_ENOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slot[i]) place(slot, cap, m->slot[i]);
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return SL_OK;
}

sl__knode_t *sl__kmap_insert(sl__kmap_t *m, const char *key)
{
    assert(!sl__kmap_find(m, key) && "the key is not in the map yet");
    if ((m->n + 1) * 2 > m->cap && grow(m) != SL_OK) return NULL;
    size_t len = strlen(key);
    sl__knode_t *node = calloc(1, sizeof *node + len + 1);
    if (!node) return NULL;
    node->hash = hash_of(key, len);
    node->key_len = len;
    memcpy(node->key, key, len + 1);
    node->state.fresh = true;
    place(m->slot, m->cap, node);
    m->n++;
    return node;
}

void sl__kmap_remove_at(sl__kmap_t *m, size_t i)
{
    assert(i < m->cap && m->slot[i] && "slot i holds a node");
    sl__knode_t *gone = m->slot[i];
    sl__ring_free(&gone->state.ring);
    sl__adaptive_free(&gone->state);
    free(gone);
    m->slot[i] = NULL;
    m->n--;
    /* Shift back every later node of the run that may live at i. */
    size_t hole = i;
    for (size_t j = (i + 1) & (m->cap - 1); m->slot[j]; j = (j + 1) & (m->cap - 1)) {
        size_t home = m->slot[j]->hash & (m->cap - 1);
        /* The node at j may move to the hole when its home is not in (hole, j]. */
        bool in_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (in_between) continue;
        m->slot[hole] = m->slot[j];
        m->slot[j] = NULL;
        hole = j;
    }
}

void sl__kmap_free(sl__kmap_t *m)
{
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slot[i]) continue;
        sl__ring_free(&m->slot[i]->state.ring);
        sl__adaptive_free(&m->slot[i]->state);
        free(m->slot[i]);
    }
    free(m->slot);
    memset(m, 0, sizeof *m);
}

size_t sl__kmap_slot_of(const sl__kmap_t *m, const sl__knode_t *node)
{
    for (size_t i = node->hash & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i] == node) return i;
        assert(m->slot[i] && "the node is in this map");
        if (!m->slot[i]) return SIZE_MAX; /* not in the map: a caller's bug */
    }
}
