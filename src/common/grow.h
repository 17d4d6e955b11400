/* grow.h - the one "full? double it" step of every growable array: a header-only helper. */
#ifndef SL_COMMON_GROW_H
#define SL_COMMON_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Makes room for one more element of `size` bytes in `items`, an array holding `n` of
 * `*cap`: when it is full, reallocates it to twice the capacity (`first` elements the first
 * time) and updates *cap. Returns the array to store back (`items` itself when there was
 * room), or NULL when out of memory: then `items` and *cap are unchanged and still the
 * caller's. */
static inline void *sl_grow(void *items, size_t n, size_t *cap, size_t size, size_t first)
{
    if (n < *cap) return items;
    size_t want = *cap ? *cap * 2 : first;
    void *grown = realloc(items, want * size);
    if (grown) *cap = want;
    return grown;
}

#endif
