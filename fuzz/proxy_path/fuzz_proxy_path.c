/* fuzz_proxy_path.c - libFuzzer target for the proxy's path router
 * (src/server/proxy/proxy_routes.c, sl__proxy_resolve).
 *
 * The first byte picks the API (its low bit: Anthropic or OpenAI); the rest is the path as
 * it came on the request line. Beyond memory errors the target checks the router's
 * contract (docs/proxy.md "Paths"): a routed path is a documented spelling byte for byte
 * (the API's prefix, an optional /v1, then exactly the provider's path, a model id alone
 * percent-decoded), and what would leave with the pool's key holds no dot segment, no
 * empty segment, no backslash, no '%' and no byte outside [A-Za-z0-9/._:@-]. The batch APIs'
 * router (proxy_batches.c, sl__batch_resolve) is held to the same contract for every
 * method, its id segment being the one percent-decoded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_endpoints.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int hex(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The provider path a client's spelling names: `rest` with %XX decoded (NULL on a bad
 * escape). */
static char *decode(const char *rest, size_t len)
{
    char *out = malloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; out && i < len; i++) {
        if (rest[i] != '%') {
            out[n++] = rest[i];
            continue;
        }
        if (i + 2 >= len || hex(rest[i + 1]) < 0 || hex(rest[i + 2]) < 0) {
            free(out);
            return NULL;
        }
        out[n++] = (char)(hex(rest[i + 1]) * 16 + hex(rest[i + 2]));
        i += 2;
    }
    if (out) out[n] = '\0';
    return out;
}

static void check_upstream(const char *up)
{
    if (strncmp(up, "/v1/", 4) != 0) abort();
    for (const char *p = up; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '/' || c == '-' || c == '_' || c == '.' || c == ':' || c == '@'))
            abort();
    }
    for (const char *seg = up; seg; seg = strchr(seg + 1, '/')) {
        size_t n = strcspn(seg + 1, "/");
        if (n == 0 || (n == 1 && seg[1] == '.') || (n == 2 && seg[1] == '.' && seg[2] == '.'))
            abort(); /* an empty or a dot segment */
    }
}

/* The batch router on the same path, with each method it serves. */
static void check_batch(sl_upstream_api_t api, const char *path, size_t len)
{
    static const sl_http_method_t methods[] = {SL_HTTP_GET, SL_HTTP_POST, SL_HTTP_DELETE};
    const char *prefix = api == SL_UPSTREAM_ANTHROPIC ? "/anthropic" : "/openai";
    size_t plen = strlen(prefix);
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        char up[320], id[257];
        const char *allow;
        memset(up, 0x5a, sizeof up);
        sl_batch_op_t op = sl__batch_resolve(api, path, len, methods[m], up, sizeof up, id, &allow);
        if (op == SL_BATCH_NONE) continue;
        if (allow || memchr(up, '\0', sizeof up) == NULL) abort();
        check_upstream(up);
        if (len < plen || memcmp(path, prefix, plen) != 0) abort();
        const char *rest = path + plen;
        size_t rlen = len - plen;
        if (rlen >= 4 && memcmp(rest, "/v1/", 4) == 0) rest += 3, rlen -= 3;
        char *named = decode(rest, rlen);
        if (!named || strcmp(named, up + 3) != 0) abort(); /* byte for byte, the id decoded */
        free(named);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    sl_upstream_api_t api = (data[0] & 1) ? SL_UPSTREAM_OPENAI : SL_UPSTREAM_ANTHROPIC;
    const char *path = (const char *)data + 1;
    size_t len = size - 1;
    char up[320], again[320];
    memset(up, 0x5a, sizeof up);
    sl_proxy_kind_t kind = sl__proxy_resolve(api, path, len, up, sizeof up);
    if (kind != sl__proxy_resolve(api, path, len, again, sizeof again)) abort();
    if (kind == SL_PROXY_NONE) {
        check_batch(api, path, len);
        return 0;
    }
    const char *prefix = api == SL_UPSTREAM_ANTHROPIC ? "/anthropic" : "/openai";
    size_t plen = strlen(prefix);
    if (len < plen || memcmp(path, prefix, plen) != 0) abort();
    const char *rest = path + plen;
    size_t rlen = len - plen;
    if (kind == SL_PROXY_HELLO) {
        if (rlen != 10 || memcmp(rest, "/api/hello", 10) != 0) abort();
        return 0;
    }
    if (memchr(up, '\0', sizeof up) == NULL || strcmp(up, again) != 0) abort();
    check_upstream(up);
    if (rlen >= 4 && memcmp(rest, "/v1/", 4) == 0) rest += 3, rlen -= 3;
    /* Only the last segment (a model id) may be percent-encoded. */
    const char *last = rest + rlen;
    while (last > rest && last[-1] != '/')
        last--;
    if (memchr(rest, '%', (size_t)(last - rest))) abort();
    char *named = decode(rest, rlen);
    if (!named || strcmp(named, up + 3) != 0) abort(); /* byte for byte, /v1 aside */
    free(named);
    return 0;
}
