/* cache_ttl.c - the lifetime each cache_control breakpoint of a Messages call asks for.
 *
 * Anthropic's prompt cache keeps an entry 5 minutes ({"type": "ephemeral"} or
 * "ttl": "5m") or an hour ("ttl": "1h", a write billed at 2x the base input price
 * instead of 1.25x). In one request the longer lifetimes must come first: a 1-hour
 * breakpoint after a 5-minute one is refused (docs/emu.md cites the page). */
#include "emu.h"

#include <stdio.h>
#include <string.h>

/* Reads one marker's ttl into *is_1h. False (with `err`) for a value the API refuses. */
static bool read_ttl(json_t *block, bool *is_1h, char *err, size_t errlen)
{
    json_t *ttl = json_object_get(json_object_get(block, "cache_control"), "ttl");
    *is_1h = false;
    if (!ttl) return true;
    const char *v = json_string_value(ttl);
    if (v && !strcmp(v, "5m")) return true;
    if (v && !strcmp(v, "1h")) {
        *is_1h = true;
        return true;
    }
    snprintf(err, errlen, "cache_control.ttl: Input should be '5m' or '1h' (got %.60s)",
             v ? v : "a non-string");
    return false;
}

bool sl__cache_ttls(json_t *body, sl_provider_call_t *call, char *err, size_t errlen)
{
    enum { MAX_MARKED = 64 };
    sl_emu_breakpoint_t bp[MAX_MARKED];
    size_t n = sl__prefix_breakpoints(body, bp, MAX_MARKED);
    if (n > MAX_MARKED) n = MAX_MARKED; /* the API refuses more than 4 anyway */
    bool seen_5m = false;
    for (size_t i = 0; i < n; i++) {
        bool is_1h;
        if (!read_ttl(bp[i].block, &is_1h, err, errlen)) return false;
        if (is_1h && seen_5m) {
            snprintf(err, errlen,
                     "a cache_control block with ttl '1h' may not come after one with ttl "
                     "'5m': longer TTLs must come before shorter ones");
            return false;
        }
        seen_5m = seen_5m || !is_1h;
        if (i + 1 == n && call->cached_prefix_tokens > 0 && bp[i].key == call->cache_key)
            call->ttl_1h = is_1h;
        for (size_t j = 0; j < call->earlier_count; j++)
            if (call->earlier[j].cache_key == bp[i].key) call->earlier[j].ttl_1h = is_1h;
    }
    return true;
}
