/* heap.c - intrusive indexed binary min-heap: O(log n) push, remove and re-key. */
#include "heap.h"
#include "../common/grow.h"

#include <assert.h>
#include <stdlib.h>

/* Whether a comes out of the heap before b. */
static int earlier(const sl__hnode_t *a, const sl__hnode_t *b)
{
    return a->at < b->at || (a->at == b->at && a->tie < b->tie);
}

static void place(sl__heap_t *h, size_t i, sl__hnode_t *n)
{
    h->items[i] = n;
    n->idx = i;
}

static void sift_up(sl__heap_t *h, size_t i)
{
    sl__hnode_t *n = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!earlier(n, h->items[parent])) break;
        place(h, i, h->items[parent]);
        i = parent;
    }
    place(h, i, n);
}

static void sift_down(sl__heap_t *h, size_t i)
{
    sl__hnode_t *n = h->items[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len) break;
        if (c + 1 < h->len && earlier(h->items[c + 1], h->items[c])) c++;
        if (!earlier(h->items[c], n)) break;
        place(h, i, h->items[c]);
        i = c;
    }
    place(h, i, n);
}

int sl__heap_reserve(sl__heap_t *h)
{
    sl__hnode_t **items = sl_grow(h->items, h->len, &h->cap, sizeof *items, 16);
    if (!items) return -1;
    h->items = items;
    return 0;
}

void sl__heap_push(sl__heap_t *h, sl__hnode_t *n)
{
    assert(h->len < h->cap && "sl__heap_reserve() must come first");
    assert(n->idx == SL__HEAP_NONE && "the node is in a heap already");
    place(h, h->len++, n);
    sift_up(h, n->idx);
}

sl__hnode_t *sl__heap_top(const sl__heap_t *h)
{
    return h->len ? h->items[0] : NULL;
}

void sl__heap_remove(sl__heap_t *h, sl__hnode_t *n)
{
    size_t i = n->idx;
    if (i == SL__HEAP_NONE || i >= h->len || h->items[i] != n) return;
    n->idx = SL__HEAP_NONE;
    sl__hnode_t *last = h->items[--h->len];
    if (last == n) return;
    place(h, i, last);
    sift_down(h, i);
    sift_up(h, last->idx);
}

void sl__heap_update(sl__heap_t *h, sl__hnode_t *n, double at)
{
    assert(n->idx < h->len && h->items[n->idx] == n && "the node is not in this heap");
    n->at = at;
    sift_down(h, n->idx);
    sift_up(h, n->idx);
}

void sl__heap_free(sl__heap_t *h)
{
    for (size_t i = 0; i < h->len; i++)
        h->items[i]->idx = SL__HEAP_NONE;
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}
