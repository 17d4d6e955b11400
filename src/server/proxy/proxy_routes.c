/* proxy_routes.c - which client paths the proxy serves, and the provider path each goes to.
 *
 * SDKs differ in whether their base URL ends in /v1: the Anthropic SDKs append
 * /v1/messages to `.../anthropic`, the Vercel AI SDK appends /messages to a base URL
 * that must include /v1, the OpenAI SDKs append /chat/completions to `.../openai/v1`.
 * Both spellings are the same endpoint here. The batch APIs (and OpenAI's files) are
 * resolved by proxy_batches.c with the same rules. What sluice does not coordinate
 * (fine-tuning, audio, ...) is refused by the caller with a message naming the path
 * rather than passed through: the pool's key is spent only on calls that took a lease
 * or that the provider does not rate-limit (count_tokens, the model list).
 *
 * Byte for byte: the router reads the path as it came on the request line, before any
 * decoding or collapsing of slashes, and serves only the spellings in the table below
 * (and a model id in /models/{id}). A dot segment, an empty segment, a backslash or an
 * encoded slash is a 404 here, so no HTTP client or provider server can resolve what
 * leaves with the pool's key into another endpoint (`/models/..?x=1` into `/v1/?x=1`).
 */
#include "proxy_endpoints.h"

#include <string.h>

typedef struct proxy_route {
    sl_upstream_api_t api;
    const char *path; /* after /anthropic or /openai, without /v1 */
    sl_proxy_kind_t kind;
    const char *upstream; /* the provider's path */
} proxy_route_t;

static const proxy_route_t routes[] = {
    {SL_UPSTREAM_ANTHROPIC, "/messages", SL_PROXY_CALL, "/v1/messages"},
    {SL_UPSTREAM_ANTHROPIC, "/messages/count_tokens", SL_PROXY_COUNT_TOKENS,
     "/v1/messages/count_tokens"},
    {SL_UPSTREAM_ANTHROPIC, "/models", SL_PROXY_MODELS, "/v1/models"},
    {SL_UPSTREAM_OPENAI, "/chat/completions", SL_PROXY_CALL, "/v1/chat/completions"},
    {SL_UPSTREAM_OPENAI, "/responses", SL_PROXY_RESPONSES, "/v1/responses"},
    {SL_UPSTREAM_OPENAI, "/models", SL_PROXY_MODELS, "/v1/models"},
    {SL_UPSTREAM_OPENAI, "/embeddings", SL_PROXY_EMBEDDINGS, "/v1/embeddings"},
    {SL_UPSTREAM_OPENAI, "/moderations", SL_PROXY_MODERATIONS, "/v1/moderations"},
};

/* Does path[0, len) begin with the NUL-terminated `prefix`? */
static bool starts_with(const char *path, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(path, prefix, n) == 0;
}

static bool spells(const char *path, size_t len, const char *word)
{
    return len == strlen(word) && memcmp(path, word, len) == 0;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A model id: one path segment the SDKs percent-encode (`ft:gpt-4.1:acme` as
 * `ft%3Agpt-4.1%3Aacme`), decoded into `id` (room for 257 bytes). Refused: an empty or
 * overlong id, a byte outside [A-Za-z0-9._:@-] once decoded (so no '/', '\', '%', no
 * control byte) and the dot segments "." and ".." however they are spelled, which an HTTP
 * client or the provider's server would resolve into another path. */
bool sl__proxy_id_decode(const char *raw, size_t len, char *id)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = raw[i];
        if (c == '%') {
            int hi = i + 2 < len ? hex_value(raw[i + 1]) : -1;
            int lo = hi >= 0 ? hex_value(raw[i + 2]) : -1;
            if (lo < 0) return false;
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':' || c == '@'))
            return false;
        if (n == 256) return false;
        id[n++] = c;
    }
    id[n] = '\0';
    return n > 0 && strcmp(id, ".") != 0 && strcmp(id, "..") != 0;
}

sl_proxy_kind_t sl__proxy_resolve(sl_upstream_api_t api, const char *path, size_t len,
                                  char *upstream, size_t upstream_size)
{
    const char *prefix = api == SL_UPSTREAM_ANTHROPIC ? "/anthropic" : "/openai";
    if (!starts_with(path, len, prefix)) return SL_PROXY_NONE;
    path += strlen(prefix), len -= strlen(prefix);
    if (api == SL_UPSTREAM_ANTHROPIC && spells(path, len, "/api/hello")) return SL_PROXY_HELLO;
    if (starts_with(path, len, "/v1/")) path += 3, len -= 3; /* with or without /v1 */
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const proxy_route_t *r = &routes[i];
        if (r->api != api) continue;
        if (spells(path, len, r->path)) {
            snprintf(upstream, upstream_size, "%s", r->upstream);
            return r->kind;
        }
        size_t plen = strlen(r->path);
        char id[257];
        if (r->kind == SL_PROXY_MODELS && starts_with(path, len, r->path) && len > plen &&
            path[plen] == '/' && sl__proxy_id_decode(path + plen + 1, len - plen - 1, id)) {
            snprintf(upstream, upstream_size, "%s/%s", r->upstream, id); /* /models/{id} */
            return r->kind;
        }
    }
    return SL_PROXY_NONE;
}
