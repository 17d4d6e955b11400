/* heap.h - an intrusive indexed binary min-heap of deadlines (lease expiry, ticket idleness). */
#ifndef SL_ENGINE_HEAP_H
#define SL_ENGINE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#define SL__HEAP_NONE ((size_t)-1)

/* Embed in the object that has a deadline; `idx` is SL__HEAP_NONE when not in a heap. */
typedef struct sl__hnode {
    double at;
    uint64_t tie; /* orders equal deadlines (lowest first); 0 where order does not matter */
    size_t idx;
} sl__hnode_t;

typedef struct sl__heap {
    sl__hnode_t **items;
    size_t len;
    size_t cap;
} sl__heap_t;

/* Makes room for one more item so a following push cannot fail. 0 or -1. */
int sl__heap_reserve(sl__heap_t *h);
/* Pushes `n` (not in any heap) with deadline n->at (ties: n->tie). Call sl__heap_reserve first. */
void sl__heap_push(sl__heap_t *h, sl__hnode_t *n);
/* The earliest node, or NULL. */
sl__hnode_t *sl__heap_top(const sl__heap_t *h);
/* Removes `n` from the heap (no-op when it is not in it). */
void sl__heap_remove(sl__heap_t *h, sl__hnode_t *n);
/* Changes n->at to `at` and restores heap order. `n` must be in the heap. */
void sl__heap_update(sl__heap_t *h, sl__hnode_t *n, double at);
void sl__heap_free(sl__heap_t *h);

#define sl__container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#endif
