/* proxy_routes.c - which client paths the proxy serves, and the provider path each goes to.
 *
 * SDKs differ in whether their base URL ends in /v1: the Anthropic SDKs append
 * /v1/messages to `.../anthropic`, the Vercel AI SDK appends /messages to a base URL
 * that must include /v1, the OpenAI SDKs append /chat/completions to `.../openai/v1`.
 * Both spellings are the same endpoint here. What sluice does not coordinate (files,
 * batches, fine-tuning, ...) is refused by the caller with a message naming the path
 * rather than passed through: the pool's key is spent only on calls that took a lease
 * or that the provider does not rate-limit (count_tokens, the model list).
 */
#include "server.h"

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
};

/* True when seg[from..n) spells `path` ("/a/b"). */
static bool segments_are(int n, char **seg, int from, const char *path)
{
    const char *p = path;
    for (int i = from; i < n; i++) {
        if (*p != '/') return false;
        p++;
        size_t len = strcspn(p, "/");
        if (strlen(seg[i]) != len || strncmp(seg[i], p, len) != 0) return false;
        p += len;
    }
    return *p == '\0';
}

/* A model id: one path segment the SDKs percent-encode; passed on as it came. */
static bool model_id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 256) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':' || c == '@'))
            return false;
    }
    return true;
}

sl_proxy_kind_t sl__proxy_resolve(sl_upstream_api_t api, int n, char **seg, char *upstream,
                                  size_t upstream_size)
{
    if (api == SL_UPSTREAM_ANTHROPIC && n == 3 && !strcmp(seg[1], "api") &&
        !strcmp(seg[2], "hello"))
        return SL_PROXY_HELLO;
    int from = n > 1 && !strcmp(seg[1], "v1") ? 2 : 1;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const proxy_route_t *r = &routes[i];
        if (r->api != api) continue;
        if (segments_are(n, seg, from, r->path)) {
            snprintf(upstream, upstream_size, "%s", r->upstream);
            return r->kind;
        }
        /* /models/{id} */
        if (r->kind == SL_PROXY_MODELS && n == from + 2 &&
            segments_are(n - 1, seg, from, r->path) && model_id_ok(seg[n - 1])) {
            snprintf(upstream, upstream_size, "%s/%s", r->upstream, seg[n - 1]);
            return r->kind;
        }
    }
    return SL_PROXY_NONE;
}
