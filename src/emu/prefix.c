/* prefix.c - the identity of an Anthropic request's cacheable prefix.
 *
 * Anthropic caches "the full prefix": tools, then system, then messages, up to and
 * including the block marked with cache_control, and a later request hits only when
 * that prefix is identical. The key is a 64-bit FNV-1a hash over the model name and
 * each block's canonical JSON (keys sorted, compact, cache_control removed so that
 * moving a marker does not change the content it marks), with the message roles in
 * between. Every breakpoint's key is the hash so far at its block, so a request
 * whose prefix extends an earlier one shares that one's key at the same block. By
 * default only the last breakpoint is used; --cache-breakpoints lets the provider
 * model read and write earlier ones too (see docs/emu.md). The tokenizer counts the
 * same span (docs/tokenizer.md: cache_control on any tool, system block or message
 * block; the last one wins). */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME  0x100000001b3ULL

static void hash_bytes(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        *h ^= s[i];
        *h *= FNV_PRIME;
    }
}

static void hash_str(uint64_t *h, const char *s)
{
    hash_bytes(h, s, strlen(s) + 1); /* the NUL separates fields */
}

/* Hashes one block; returns whether it carries a cache_control marker. */
static bool hash_block(uint64_t *h, json_t *block)
{
    bool marked = false;
    json_t *copy = NULL;
    if (json_is_object(block)) {
        json_t *cc = json_object_get(block, "cache_control");
        marked = cc && !json_is_null(cc);
        if (cc) {
            copy = json_deep_copy(block);
            if (copy) json_object_del(copy, "cache_control");
            block = copy ? copy : block;
        }
    }
    char *s = json_dumps(block, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (s) {
        hash_str(h, s);
        free(s);
    }
    json_decref(copy);
    return marked;
}

/* Records breakpoint number *n (block `block`, key `h`): in its own slot while there
 * is room, else over the last slot, which so always holds the last breakpoint. */
static void record(sl_emu_breakpoint_t *out, size_t cap, size_t *n, json_t *block, uint64_t h)
{
    size_t at = *n < cap ? *n : cap - 1;
    out[at].block = block;
    out[at].key = h;
    (*n)++;
}

bool sl__prefix_cache_key(json_t *body, uint64_t *key)
{
    sl_emu_breakpoint_t last;
    if (sl__prefix_breakpoints(body, &last, 1) == 0) return false;
    *key = last.key;
    return true;
}

size_t sl__prefix_breakpoints(json_t *body, sl_emu_breakpoint_t *out, size_t cap)
{
    uint64_t h = FNV_OFFSET;
    size_t found = 0;
    size_t i, j;
    json_t *v, *b;

    const char *model = json_string_value(json_object_get(body, "model"));
    hash_str(&h, "model");
    hash_str(&h, model ? model : "");

    hash_str(&h, "tools");
    json_array_foreach(json_object_get(body, "tools"), i, v)
    {
        if (hash_block(&h, v)) record(out, cap, &found, v, h);
    }
    hash_str(&h, "system");
    json_t *system = json_object_get(body, "system");
    if (json_is_string(system)) {
        hash_str(&h, json_string_value(system));
    } else {
        json_array_foreach(system, i, v)
        {
            if (hash_block(&h, v)) record(out, cap, &found, v, h);
        }
    }
    hash_str(&h, "messages");
    json_array_foreach(json_object_get(body, "messages"), i, v)
    {
        const char *role = json_string_value(json_object_get(v, "role"));
        hash_str(&h, role ? role : "");
        json_t *content = json_object_get(v, "content");
        if (json_is_string(content)) {
            hash_str(&h, json_string_value(content));
            continue;
        }
        json_array_foreach(content, j, b)
        {
            if (hash_block(&h, b)) record(out, cap, &found, b, h);
        }
    }
    return found;
}
