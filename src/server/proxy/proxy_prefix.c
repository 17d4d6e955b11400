/* proxy_prefix.c - the identity of the prompt prefix a proxied call expects from the provider's
 * cache.
 *
 * The provider caches a prefix per model and per exact content: a Haiku call right after
 * a Sonnet call of the same agent, or a call whose system prompt changed, finds its cache
 * cold and is billed the prefix as a cache write. So the engine identifies a cache by
 * (cache key, model, prefix hash) and the proxy hashes the prefix: for Anthropic the
 * blocks in cache order (tools, system, messages) up to and including the last one
 * carrying cache_control, for OpenAI's automatic caching everything before the newest
 * message (tools and the earlier messages: what consecutive calls of a loop share).
 * Each part is hashed as compact JSON with sorted keys, cache_control taken out, so the
 * hash follows the content, not the key order an SDK happens to write. */
#include "proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

typedef struct prefix {
    EVP_MD_CTX *md;
    int rc; /* 0, or -1 once something failed */
} prefix_t;

/* Adds one part: a tag naming where it comes from, then its JSON. */
static void add_part(prefix_t *h, const char *tag, const json_t *v)
{
    if (h->rc) return;
    json_t *copy = NULL;
    if (json_is_object(v) && json_object_get(v, "cache_control")) {
        copy = json_copy((json_t *)v); /* shallow: only the top-level key goes */
        if (!copy) {
            h->rc = -1;
            return;
        }
        json_object_del(copy, "cache_control");
        v = copy;
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(copy);
    if (!s || EVP_DigestUpdate(h->md, tag, strlen(tag) + 1) != 1 ||
        EVP_DigestUpdate(h->md, s, strlen(s) + 1) != 1)
        h->rc = -1;
    free(s);
}

static bool has_breakpoint(const json_t *v)
{
    return json_is_object(v) && json_object_get(v, "cache_control") != NULL;
}

/* Counts the parts of an Anthropic body in cache order up to and including the last
 * breakpoint, adding each to `h` when `h` is given, and setting *last_bp (when given) to
 * that breakpoint's part. Returns that count (0: none). */
static size_t anthropic_parts(const json_t *body, prefix_t *h, size_t upto,
                              const json_t **last_bp)
{
    size_t n = 0, last = 0, i, k;
    const json_t *v, *b;
#define PART(tag, part)                                                                            \
    do {                                                                                           \
        n++;                                                                                       \
        if (has_breakpoint(part)) {                                                                \
            last = n;                                                                              \
            if (last_bp) *last_bp = (part);                                                        \
        }                                                                                          \
        if (h && n <= upto) add_part(h, tag, part);                                                \
    } while (0)
    json_array_foreach(json_object_get(body, "tools"), i, v) PART("tool", v);
    const json_t *system = json_object_get(body, "system");
    if (json_is_string(system)) PART("system", system);
    json_array_foreach(system, i, v) PART("system", v);
    json_array_foreach(json_object_get(body, "messages"), i, v)
    {
        PART("role", json_object_get(v, "role"));
        const json_t *content = json_object_get(v, "content");
        if (json_is_string(content)) PART("text", content);
        json_array_foreach(content, k, b) PART("block", b);
    }
#undef PART
    return last;
}

/* OpenAI: tools and every message before the last one. */
static size_t openai_parts(const json_t *body, prefix_t *h)
{
    size_t n = 0, i;
    const json_t *v;
    const json_t *messages = json_object_get(body, "messages");
    size_t n_messages = json_array_size(messages);
    if (n_messages < 2) return 0;
    json_array_foreach(json_object_get(body, "tools"), i, v)
    {
        if (h) add_part(h, "tool", v);
        n++;
    }
    json_array_foreach(messages, i, v)
    {
        if (i + 1 == n_messages) break;
        if (h) add_part(h, "message", v);
        n++;
    }
    return n;
}

int sl__prefix_hash(sl_upstream_api_t api, const json_t *body, char out[65])
{
    size_t upto =
        api == SL_UPSTREAM_ANTHROPIC ? anthropic_parts(body, NULL, 0, NULL)
                                     : openai_parts(body, NULL);
    if (upto == 0) return 0;
    prefix_t h = {.md = EVP_MD_CTX_new()};
    if (!h.md || EVP_DigestInit_ex(h.md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h.md);
        return -1;
    }
    if (api == SL_UPSTREAM_ANTHROPIC)
        anthropic_parts(body, &h, upto, NULL);
    else
        openai_parts(body, &h);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (h.rc == 0 && EVP_DigestFinal_ex(h.md, md, &md_len) != 1) h.rc = -1;
    EVP_MD_CTX_free(h.md);
    if (h.rc) return -1;
    for (unsigned int i = 0; i < 32 && i < md_len; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 1;
}

double sl__prefix_cache_ttl_s(sl_upstream_api_t api, const json_t *body)
{
    if (api != SL_UPSTREAM_ANTHROPIC) return 0;
    const json_t *last = NULL;
    if (anthropic_parts(body, NULL, 0, &last) == 0 || !last) return 0;
    const char *ttl = json_string_value(json_object_get(json_object_get(last, "cache_control"), "ttl"));
    return ttl && strcmp(ttl, "1h") == 0 ? SL_CACHE_TTL_1H_S : 0;
}
