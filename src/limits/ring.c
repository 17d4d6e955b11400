/* ring.c - the time-ordered ring of entries that sliding_window's log and concurrency's holds live in. */
#include "limits_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int sl__ring_reserve(sl__ring_t *r, uint32_t n)
{
    if (n <= r->cap) return SL_OK;
    uint32_t cap = r->cap ? r->cap : 4;
    while (cap < n) cap *= 2;
    sl__entry_t *e = malloc((size_t)cap * sizeof *e);
    if (!e) return SL_ENOMEM;
    for (uint32_t i = 0; i < r->n; i++) e[i] = *sl__ring_at(r, i);
    free(r->e);
    r->e = e;
    r->cap = cap;
    r->head = 0;
    return SL_OK;
}

const sl__entry_t *sl__ring_at(const sl__ring_t *r, uint32_t i)
{
    assert(i < r->n && "the ring holds entry i");
    return &r->e[(r->head + i) & (r->cap - 1)];
}

/* The caller reserved room. With `merge`, an entry at the newest entry's time joins it. */
void sl__ring_push(sl__ring_t *r, int64_t t_us, int64_t units, bool merge)
{
    r->sum += units;
    if (merge && r->n > 0) {
        sl__entry_t *last = &r->e[(r->head + r->n - 1) & (r->cap - 1)];
        if (last->t_us == t_us) {
            last->units += units;
            return;
        }
    }
    assert(r->n < r->cap && "sl__ring_reserve() must come first");
    sl__entry_t *e = &r->e[(r->head + r->n) & (r->cap - 1)];
    e->t_us = t_us;
    e->units = units;
    r->n++;
}

void sl__ring_pop(sl__ring_t *r)
{
    assert(r->n > 0 && "the ring is not empty");
    r->sum -= r->e[r->head].units;
    r->head = (r->head + 1) & (r->cap - 1);
    r->n--;
}

void sl__ring_free(sl__ring_t *r)
{
    free(r->e);
    memset(r, 0, sizeof *r);
}
