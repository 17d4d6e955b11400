/* cache.c - the provider's prompt cache: prefix key -> (length, expiry).
 *
 * A hit refreshes the expiry (the TTL runs from the last use, as Anthropic
 * documents). Lapsed entries are not removed on lookup; they are dropped when the
 * table is rebuilt, which happens when it gets half full, so memory stays bounded
 * by twice the number of prefixes live at any rebuild.
 */
#include <stdlib.h>

#include "provider_internal.h"

static size_t slot_of(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

int sl__cache_init(sl__cache_t *c)
{
    c->cap = 64;
    c->count = 0;
    c->slots = calloc(c->cap, sizeof *c->slots);
    return c->slots ? 0 : -1;
}

void sl__cache_free(sl__cache_t *c)
{
    free(c->slots);
    c->slots = NULL;
    c->cap = c->count = 0;
}

static sl__cache_entry_t *lookup(const sl__cache_t *c, uint64_t key)
{
    for (size_t i = slot_of(key, c->cap);; i = (i + 1) & (c->cap - 1)) {
        sl__cache_entry_t *s = &c->slots[i];
        if (!s->used) return NULL;
        if (s->key == key) return s;
    }
}

sl__cache_entry_t *sl__cache_find(sl__cache_t *c, uint64_t key, int64_t tokens, double now)
{
    sl__cache_entry_t *s = lookup(c, key);
    if (!s || s->tokens != tokens || s->expires_at <= now) return NULL;
    return s;
}

const sl__cache_entry_t *sl__cache_peek(const sl__cache_t *c, uint64_t key, double now)
{
    const sl__cache_entry_t *s = lookup(c, key);
    return s && s->expires_at > now ? s : NULL;
}

static void place(sl__cache_entry_t *slots, size_t cap, const sl__cache_entry_t *e)
{
    size_t i = slot_of(e->key, cap);
    while (slots[i].used) i = (i + 1) & (cap - 1);
    slots[i] = *e;
}

/* Rebuilds without lapsed entries, doubling when more than a quarter stays live. */
static int rebuild(sl__cache_t *c, double now)
{
    size_t live = 0;
    for (size_t i = 0; i < c->cap; i++)
        if (c->slots[i].used && c->slots[i].expires_at > now) live++;
    size_t cap = c->cap;
    while (live * 4 >= cap) cap *= 2;
    sl__cache_entry_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < c->cap; i++)
        if (c->slots[i].used && c->slots[i].expires_at > now) place(slots, cap, &c->slots[i]);
    free(c->slots);
    c->slots = slots;
    c->cap = cap;
    c->count = live;
    return 0;
}

int sl__cache_put(sl__cache_t *c, uint64_t key, int64_t tokens, double expires_at, double now)
{
    sl__cache_entry_t *s = lookup(c, key);
    if (s) {
        s->tokens = tokens;
        s->expires_at = expires_at;
        return 0;
    }
    if ((c->count + 1) * 2 > c->cap && rebuild(c, now) != 0) return -1;
    sl__cache_entry_t e = {.key = key, .tokens = tokens, .expires_at = expires_at, .used = true};
    place(c->slots, c->cap, &e);
    c->count++;
    return 0;
}
