/* ring.c - the time-ordered ring of entries that sliding_window's log and concurrency's holds live in.
 *
 * Both probe their log the same way (sl__log_probe): only where an entry stops counting
 * differs. */
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

int64_t sl__log_expired(const sl__kstate_t *s, int64_t shift_us, int64_t now_us, uint32_t *n)
{
    int64_t units = 0;
    uint32_t i = 0;
    for (; i < s->ring.n; i++) {
        const sl__entry_t *e = sl__ring_at(&s->ring, i);
        if (e->t_us + shift_us > now_us) break;
        units += e->units;
    }
    *n = i;
    return units;
}

void sl__log_probe(const sl__kstate_t *s, int64_t limit, int64_t shift_us, int64_t span_us,
                   int64_t units, int64_t now_us, sl__answer_t *a)
{
    uint32_t first = 0;
    int64_t count = s->fresh ? 0 : s->ring.sum - sl__log_expired(s, shift_us, now_us, &first);
    bool live = !s->fresh && first < s->ring.n;
    int64_t newest = live ? sl__ring_at(&s->ring, s->ring.n - 1)->t_us : 0;
    if (sl__answer_count(a, limit, count, units)) {
        a->reset_after_us = units > 0 ? span_us : live ? newest + shift_us - now_us : 0;
        return;
    }
    a->reset_after_us = live ? newest + shift_us - now_us : 0;
    if (a->reason == SL_LIMIT_NEVER) return;
    /* Walk the oldest live entries until enough have stopped counting. */
    int64_t left = count;
    for (uint32_t i = first; i < s->ring.n; i++) {
        const sl__entry_t *e = sl__ring_at(&s->ring, i);
        left -= e->units;
        if (left + units <= limit) {
            a->retry_after_us = e->t_us + shift_us - now_us;
            return;
        }
    }
    a->retry_after_us = span_us; /* unreachable: the whole log stops counting by then */
}
