/* keymap.c - the per-limit map from key to state: nodes holding their own key, indexed by
 * the common string map (src/common/map.h; backward-shift deletion, load <= 1/2).
 *
 * A sweep that removes most keys leaves a table as fast as a fresh one, since deletion
 * leaves no tombstones. */
#include "limits_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

sl__knode_t *sl__kmap_find(const sl__kmap_t *m, const char *key)
{
    return sl_strmap_get(m, key);
}

sl__knode_t *sl__kmap_insert(sl__kmap_t *m, const char *key)
{
    assert(!sl__kmap_find(m, key) && "the key is not in the map yet");
    if (sl_strmap_reserve(m, 1) != 0) return NULL;
    size_t len = strlen(key);
    sl__knode_t *node = calloc(1, sizeof *node + len + 1);
    if (!node) return NULL;
    memcpy(node->key, key, len + 1);
    node->state.fresh = true;
    int rc = sl_strmap_put(m, node->key, node); /* the key borrowed from its node */
    assert(rc == 0 && "room was reserved");
    (void)rc;
    return node;
}

static void node_free(sl__knode_t *node)
{
    sl__ring_free(&node->state.ring);
    sl__adaptive_free(&node->state);
    free(node);
}

void sl__kmap_remove_at(sl__kmap_t *m, size_t i)
{
    node_free(sl_strmap_del_at(m, i));
}

void sl__kmap_free(sl__kmap_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].hash) node_free(m->slots[i].val);
    sl_strmap_free(m);
}

size_t sl__kmap_slot_of(const sl__kmap_t *m, const sl__knode_t *node)
{
    const sl_strmap_slot_t *s = sl_strmap_find(m, node->key);
    assert(s && s->val == node && "the node is in this map");
    return s ? (size_t)(s - m->slots) : SIZE_MAX;
}
