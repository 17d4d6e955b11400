/* batchq.c - the batch processing queues of the memory backend (batchq.h). */
#include "batchq.h"
#include "../common/grow.h"

#include <stdlib.h>
#include <string.h>

static long find(const sl_batchq_set_t *set, const char *pool, const char *id)
{
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->items[i].id, id) && !strcmp(set->items[i].pool, pool)) return (long)i;
    return -1;
}

static void remove_at(sl_batchq_set_t *set, size_t i)
{
    free(set->items[i].pool);
    free(set->items[i].id);
    set->items[i] = set->items[--set->n];
}

int sl__batchq_put(sl_batchq_set_t *set, const char *pool, const char *id, int64_t requests,
                   double expires_at)
{
    long at = find(set, pool, id);
    if (at >= 0) {
        set->items[at].requests = requests;
        set->items[at].expires_at = expires_at;
        return 0;
    }
    sl_batchq_entry_t *v = sl_grow(set->items, set->n, &set->cap, sizeof *v, 16);
    if (!v) return -1;
    set->items = v;
    sl_batchq_entry_t e = {strdup(pool), strdup(id), requests, expires_at};
    if (!e.pool || !e.id) {
        free(e.pool);
        free(e.id);
        return -1;
    }
    set->items[set->n++] = e;
    return 1;
}

bool sl__batchq_del(sl_batchq_set_t *set, const char *pool, const char *id)
{
    long at = find(set, pool, id);
    if (at < 0) return false;
    remove_at(set, (size_t)at);
    return true;
}

void sl__batchq_expire(sl_batchq_set_t *set, double now_s)
{
    for (size_t i = set->n; i-- > 0;)
        if (set->items[i].expires_at <= now_s) remove_at(set, i);
}

int64_t sl__batchq_queued(const sl_batchq_set_t *set, const char *pool, size_t *entries)
{
    int64_t n = 0;
    size_t count = 0;
    for (size_t i = 0; i < set->n; i++) {
        if (strcmp(set->items[i].pool, pool) != 0) continue;
        n += set->items[i].requests;
        count++;
    }
    if (entries) *entries = count;
    return n;
}

int sl__batchq_apply(sl_batchq_set_t *set, const sl_batchq_call_t *c, double now_s, bool *counted,
                     int64_t *queued)
{
    sl__batchq_expire(set, now_s);
    size_t entries = 0;
    int64_t before = sl__batchq_queued(set, c->pool, &entries);
    *counted = false;
    *queued = before;
    switch (c->op) {
    case SL_BATCHQ_COUNT:
        return SL_OK;
    case SL_BATCHQ_ADD:
        if (find(set, c->pool, c->id) >= 0 || entries >= SL_BATCHQ_MAX_ENTRIES ||
            before + c->requests > c->max_requests)
            return SL_OK;
        if (sl__batchq_put(set, c->pool, c->id, c->requests, now_s + c->ttl_s) < 0)
            return SL_ENOMEM;
        break;
    case SL_BATCHQ_BIND: {
        /* Put first: out of memory leaves the hold counted, as before the call. */
        if (sl__batchq_put(set, c->pool, c->new_id, c->requests, now_s + c->ttl_s) < 0)
            return SL_ENOMEM;
        if (strcmp(c->id, c->new_id) != 0) sl__batchq_del(set, c->pool, c->id);
        break;
    }
    case SL_BATCHQ_RELEASE:
        if (!sl__batchq_del(set, c->pool, c->id)) return SL_OK;
        break;
    }
    *counted = true;
    *queued = sl__batchq_queued(set, c->pool, NULL);
    return SL_OK;
}

void sl__batchq_clear(sl_batchq_set_t *set)
{
    for (size_t i = 0; i < set->n; i++) {
        free(set->items[i].pool);
        free(set->items[i].id);
    }
    free(set->items);
    set->items = NULL;
    set->n = set->cap = 0;
}
