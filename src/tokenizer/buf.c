/* Small shared helpers: a growable byte buffer and a fast hash for short byte strings. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

int sl__buf_reserve(sl__buf_t *b, size_t extra)
{
    if (extra <= b->cap - b->n)
        return 0;
    if (extra > SIZE_MAX / 2 - b->n)
        return SL_TOK_ENOMEM;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < extra)
        cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p)
        return SL_TOK_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

void sl__buf_free(sl__buf_t *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

uint64_t sl__hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
        h = (h << 29) | (h >> 35);
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n)
        memcpy(&w, p, n);
    return mix64(h ^ w);
}
