/* Byte-pair merging by rank, counting the tokens one pre-tokenised piece becomes.
 *
 * tiktoken's rule: among adjacent parts, merge the pair whose concatenated bytes form
 * the lowest-ranked token, the leftmost one on a tie, until no adjacent pair forms a
 * token. Short pieces (nearly all of them) use tiktoken's own O(n^2) array scan, which
 * is fastest when n is small. Long pieces (a 1 MB word, 100,000 spaces) use a binary
 * heap ordered by (rank, start offset) with lazily discarded stale pairs: popping the
 * least (rank, start) is the same choice as scanning for the leftmost minimum, so both
 * paths produce identical merges, and the long one is O(n log n). */
#include <stdlib.h>

#include "tokenizer_internal.h"

#define SHORT_PIECE_MAX_BYTES 256

static int64_t count_short(const sl__vocab_t *v, const unsigned char *p, size_t n)
{
    uint16_t start[SHORT_PIECE_MAX_BYTES + 1];
    uint32_t rank[SHORT_PIECE_MAX_BYTES];
    size_t m = n; /* parts; part i is p[start[i]..start[i+1]) */
    for (size_t i = 0; i <= n; i++)
        start[i] = (uint16_t)i;
    for (size_t i = 0; i + 1 < n; i++)
        rank[i] = sl__vocab_rank(v, p + i, 2);
    rank[n - 1] = SL__RANK_NONE;
    for (;;) {
        uint32_t best = SL__RANK_NONE;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        }
        if (best == SL__RANK_NONE)
            break;
        /* Merge parts bi and bi+1: drop boundary bi+1. */
        for (size_t k = bi + 1; k < m; k++)
            start[k] = start[k + 1];
        for (size_t k = bi + 1; k + 1 < m; k++)
            rank[k] = rank[k + 1];
        m--;
        rank[bi] = bi + 1 < m ? sl__vocab_rank(v, p + start[bi], start[bi + 2] - start[bi])
                              : SL__RANK_NONE;
        if (bi > 0)
            rank[bi - 1] = sl__vocab_rank(v, p + start[bi - 1], start[bi + 1] - start[bi - 1]);
    }
    return (int64_t)m;
}

/* A candidate merge of the two parts spanning p[start..end). */
typedef struct {
    uint32_t rank;
    uint32_t start;
    uint32_t end;
} pair_t;

static int pair_less(const pair_t *a, const pair_t *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->start < b->start);
}

typedef struct {
    pair_t *items;
    size_t n;
    size_t cap;
} heap_t;

static int heap_push(heap_t *h, pair_t e)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 1024;
        pair_t *items = realloc(h->items, cap * sizeof(*items));
        if (!items)
            return -1;
        h->items = items;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_less(&e, &h->items[parent]))
            break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = e;
    return 0;
}

static pair_t heap_pop(heap_t *h)
{
    pair_t top = h->items[0];
    pair_t last = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && pair_less(&h->items[c + 1], &h->items[c]))
            c++;
        if (!pair_less(&h->items[c], &last))
            break;
        h->items[i] = h->items[c];
        i = c;
    }
    if (h->n)
        h->items[i] = last;
    return top;
}

static int push_pair(heap_t *h, const sl__vocab_t *v, const unsigned char *p, uint32_t start,
                     uint32_t end)
{
    uint32_t r = sl__vocab_rank(v, p + start, end - start);
    if (r == SL__RANK_NONE)
        return 0;
    pair_t e = {r, start, end};
    return heap_push(h, e);
}

static int64_t count_long(const sl__vocab_t *v, const unsigned char *p, size_t n)
{
    if (n >= UINT32_MAX)
        return -1;
    uint32_t *next = malloc((n + 1) * sizeof(*next)); /* next part's start, for live parts */
    uint32_t *prev = malloc((n + 1) * sizeof(*prev));
    unsigned char *dead = calloc(n + 1, 1);            /* no longer a part boundary */
    heap_t h = {0};
    int64_t parts = -1;
    if (!next || !prev || !dead)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        next[i] = i + 1;
        prev[i] = i - 1;
    }
    for (uint32_t i = 0; i + 1 < n; i++)
        if (push_pair(&h, v, p, i, i + 2) != 0)
            goto out;
    int64_t m = (int64_t)n;
    while (h.n) {
        pair_t e = heap_pop(&h);
        if (dead[e.start])
            continue;
        uint32_t mid = next[e.start];
        if (mid >= n || next[mid] != e.end)
            continue; /* stale: one of the two parts has merged since */
        next[e.start] = e.end;
        dead[mid] = 1;
        if (e.end < n)
            prev[e.end] = e.start;
        m--;
        if (e.end < n && push_pair(&h, v, p, e.start, next[e.end]) != 0)
            goto out;
        if (e.start > 0 && push_pair(&h, v, p, prev[e.start], e.end) != 0)
            goto out;
    }
    parts = m;
out:
    free(h.items);
    free(dead);
    free(prev);
    free(next);
    return parts;
}

int64_t sl__bpe_count_scan(const sl__vocab_t *v, const unsigned char *p, size_t n)
{
    if (n == 0 || n > SHORT_PIECE_MAX_BYTES)
        return -1;
    return count_short(v, p, n);
}

int64_t sl__bpe_count_heap(const sl__vocab_t *v, const unsigned char *p, size_t n)
{
    return n == 0 ? 0 : count_long(v, p, n);
}

int64_t sl__bpe_count(const sl__vocab_t *v, const unsigned char *p, size_t n)
{
    if (n <= 1)
        return (int64_t)n;
    if (sl__vocab_rank(v, p, n) != SL__RANK_NONE)
        return 1;
    if (n <= SHORT_PIECE_MAX_BYTES)
        return count_short(v, p, n);
    return count_long(v, p, n);
}
