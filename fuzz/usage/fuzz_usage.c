/* fuzz_usage.c - libFuzzer target for the proxy's readers of provider answers (proxy_usage.c).
 *
 * The first byte picks the API (Anthropic or OpenAI) and the reader (whole body, one SSE
 * event, spend-cap test); the rest is what the provider sent. Beyond memory errors the
 * target checks the contract: token counts are never negative, and a reader that found
 * nothing leaves the usage untouched. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const sl_usage_t *u)
{
    if (u->input_tokens < 0 || u->output_tokens < 0 || u->cache_creation_input_tokens < 0 ||
        u->cache_read_input_tokens < 0 || u->output_seen_tokens < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    sl_upstream_api_t api = (data[0] & 1) ? SL_UPSTREAM_OPENAI : SL_UPSTREAM_ANTHROPIC;
    int reader = (data[0] >> 1) % 3;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    sl_usage_t u;
    memset(&u, 0, sizeof u);
    switch (reader) {
    case 0:
        sl__usage_from_body(api, text, len, &u);
        break;
    case 1:
        sl__usage_from_event(api, text, len, (data[0] & 0x40) != 0, &u);
        break;
    default:
        (void)sl__usage_is_spend_cap(api, text, len, (data[0] & 0x40) != 0);
        break;
    }
    check(&u);
    if (!u.have_input && (u.input_tokens || u.cache_read_input_tokens ||
                          u.cache_creation_input_tokens))
        abort();
    return 0;
}
