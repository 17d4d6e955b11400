/* namemap.c - names (copied) to pointers: the owned-key functions of the common string map
 * (src/common/map.c), whose deletion shifts the probe run back, so a map whose agents or
 * tasks come and go does not fill up with dead slots. */
#include "namemap.h"

#include <assert.h>
#include <stdlib.h>

void *sl__namemap_get(const sl_namemap_t *m, const char *key)
{
    return sl_strmap_get(m, key);
}

const char *sl__namemap_put(sl_namemap_t *m, const char *key, void *val)
{
    return sl_strmap_put_copy(m, key, val);
}

void *sl__namemap_obtain(sl_namemap_t *m, const char *key, size_t size, size_t max_count,
                         const char **stored_key)
{
    return sl_strmap_obtain(m, key, size, max_count, stored_key);
}

void *sl__namemap_del(sl_namemap_t *m, const char *key)
{
    return sl_strmap_del_copy(m, key);
}

void sl__namemap_foreach(const sl_namemap_t *m, void (*fn)(const char *key, void *val, void *ud),
                         void *ud)
{
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].hash) continue;
#ifndef NDEBUG
        size_t len = m->len;
#endif
        fn(m->slots[i].key, m->slots[i].val, ud);
        assert(m->len == len && "fn added or removed no entry");
    }
}

void sl__namemap_free_all(sl_namemap_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].hash) free(m->slots[i].val);
    sl_strmap_free_keys(m);
}

void sl__namemap_free(sl_namemap_t *m)
{
    sl_strmap_free_keys(m);
}
