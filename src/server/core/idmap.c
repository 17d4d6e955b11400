/* idmap.c - ids to pointers: the common u64 map (src/common/map.c) with pointer values. */
#include "idmap.h"

void *sl__idmap_get(const sl_idmap_t *m, uint64_t key)
{
    uint64_t val;
    return sl_u64map_get(m, key, &val) ? (void *)(uintptr_t)val : NULL;
}

int sl__idmap_put(sl_idmap_t *m, uint64_t key, void *val)
{
    return sl_u64map_put(m, key, (uint64_t)(uintptr_t)val);
}

void *sl__idmap_del(sl_idmap_t *m, uint64_t key)
{
    void *val = sl__idmap_get(m, key);
    sl_u64map_del(m, key);
    return val;
}

typedef struct foreach_ctx {
    void (*fn)(uint64_t key, void *val, void *ud);
    void *ud;
} foreach_ctx_t;

static void call_with_pointer(uint64_t key, uint64_t val, void *ud)
{
    const foreach_ctx_t *c = ud;
    c->fn(key, (void *)(uintptr_t)val, c->ud);
}

void sl__idmap_foreach(sl_idmap_t *m, void (*fn)(uint64_t key, void *val, void *ud), void *ud)
{
    foreach_ctx_t c = {fn, ud};
    sl_u64map_foreach(m, call_with_pointer, &c);
}

void sl__idmap_free(sl_idmap_t *m)
{
    sl_u64map_free(m);
}
