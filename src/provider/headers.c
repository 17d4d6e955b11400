/* headers.c - the provider's wire shapes: rate-limit headers and 429 error bodies.
 *
 * Anthropic describes each limit with limit / remaining / reset, token remaining
 * values rounded to the nearest thousand and reset as the RFC 3339 instant the
 * bucket is full again; OpenAI uses x-ratelimit-* with reset as a Go-style
 * duration. Both add retry-after (whole seconds) to a rate-limit 429; a spend-cap
 * 429 carries none, which is how a client tells a budget stop from a rate limit,
 * and neither does an overloaded 529 / 503.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "provider_internal.h"

int sl_provider_format_rfc3339(double unix_s, char *buf, size_t cap)
{
    if (!isfinite(unix_s) || unix_s < 0) unix_s = 0;
    time_t t = (time_t)floor(unix_s);
    struct tm tm;
    if (!gmtime_r(&t, &tm)) return snprintf(buf, cap, "1970-01-01T00:00:00Z");
    return snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                    tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

int sl_provider_format_duration(double seconds, char *buf, size_t cap)
{
    if (!isfinite(seconds) || seconds < 0) seconds = 0;
    int64_t ms = (int64_t)llround(seconds * 1000.0);
    if (ms == 0) return snprintf(buf, cap, "0s");
    if (ms < 1000) return snprintf(buf, cap, "%" PRId64 "ms", ms);
    int64_t h = ms / 3600000, m = ms / 60000 % 60, sec = ms / 1000 % 60, frac = ms % 1000;
    char s[24];
    if (frac == 0) {
        snprintf(s, sizeof s, "%" PRId64 "s", sec);
    } else {
        /* Go prints the shortest fraction: 1.5s, 1.25s, 1.125s. */
        int digits = 3;
        while (frac % 10 == 0) {
            frac /= 10;
            digits--;
        }
        snprintf(s, sizeof s, "%" PRId64 ".%0*" PRId64 "s", sec, digits, frac);
    }
    if (h > 0) return snprintf(buf, cap, "%" PRId64 "h%" PRId64 "m%s", h, m, s);
    if (m > 0) return snprintf(buf, cap, "%" PRId64 "m%s", m, s);
    return snprintf(buf, cap, "%s", s);
}

static size_t add(sl_provider_header_t *out, size_t n, size_t cap, const char *name,
                  const char *value)
{
    if (n >= cap) return n;
    snprintf(out[n].name, sizeof out[n].name, "%s", name);
    snprintf(out[n].value, sizeof out[n].value, "%s", value);
    return n + 1;
}

static int64_t floor_level(double level)
{
    return level > 0 ? (int64_t)floor(level) : 0;
}

/* Seconds until bucket b is full again. */
static double until_full(const sl_provider_t *p, int b)
{
    double lim = (double)p->limit[b];
    double missing = lim - p->level[b];
    return missing > 0 ? missing / (lim / 60.0) : 0;
}

static size_t anthropic_trio(const sl_provider_t *p, int b, const char *what,
                             sl_provider_header_t *out, size_t n, size_t cap)
{
    char name[48], value[48];
    snprintf(name, sizeof name, "anthropic-ratelimit-%s-limit", what);
    snprintf(value, sizeof value, "%" PRId64, p->limit[b]);
    n = add(out, n, cap, name, value);
    int64_t rem = floor_level(p->level[b]);
    if (b != SL__PB_REQUESTS) rem = (rem + 500) / 1000 * 1000;
    snprintf(name, sizeof name, "anthropic-ratelimit-%s-remaining", what);
    snprintf(value, sizeof value, "%" PRId64, rem);
    n = add(out, n, cap, name, value);
    snprintf(name, sizeof name, "anthropic-ratelimit-%s-reset", what);
    sl_provider_format_rfc3339(p->now_s + until_full(p, b), value, sizeof value);
    return add(out, n, cap, name, value);
}

static size_t openai_headers(const sl_provider_t *p, sl_provider_header_t *out, size_t n,
                             size_t cap)
{
    int tok = p->limit[SL__PB_TOKENS] > 0 ? SL__PB_TOKENS : SL__PB_INPUT;
    const int bs[2] = {SL__PB_REQUESTS, tok};
    const char *names[2] = {"requests", "tokens"};
    char name[48], value[48];
    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < 2; i++) {
            int b = bs[i];
            if (p->limit[b] <= 0) continue;
            if (f == 0) {
                snprintf(name, sizeof name, "x-ratelimit-limit-%s", names[i]);
                snprintf(value, sizeof value, "%" PRId64, p->limit[b]);
            } else if (f == 1) {
                snprintf(name, sizeof name, "x-ratelimit-remaining-%s", names[i]);
                snprintf(value, sizeof value, "%" PRId64, floor_level(p->level[b]));
            } else {
                snprintf(name, sizeof name, "x-ratelimit-reset-%s", names[i]);
                sl_provider_format_duration(until_full(p, b), value, sizeof value);
            }
            n = add(out, n, cap, name, value);
        }
    }
    return n;
}

size_t sl_provider_headers(sl_provider_t *p, sl_provider_style_t style,
                           const sl_provider_result_t *r, double now_s,
                           sl_provider_header_t *out, size_t cap)
{
    sl__provider_advance(p, now_s);
    size_t n = 0;
    if (style == SL_PROVIDER_ANTHROPIC) {
        if (p->limit[SL__PB_REQUESTS] > 0)
            n = anthropic_trio(p, SL__PB_REQUESTS, "requests", out, n, cap);
        /* tokens-*: whichever token limit has the least room left, by share. */
        int most = -1;
        double least = 2;
        const int tb[3] = {SL__PB_INPUT, SL__PB_OUTPUT, SL__PB_TOKENS};
        for (int i = 0; i < 3; i++) {
            int b = tb[i];
            if (p->limit[b] <= 0) continue;
            double share = p->level[b] / (double)p->limit[b];
            if (share < least) {
                least = share;
                most = b;
            }
        }
        if (most >= 0) n = anthropic_trio(p, most, "tokens", out, n, cap);
        if (p->limit[SL__PB_INPUT] > 0)
            n = anthropic_trio(p, SL__PB_INPUT, "input-tokens", out, n, cap);
        if (p->limit[SL__PB_OUTPUT] > 0)
            n = anthropic_trio(p, SL__PB_OUTPUT, "output-tokens", out, n, cap);
    } else {
        n = openai_headers(p, out, n, cap);
    }
    if (r && r->refusal == SL_PROVIDER_RATE_LIMITED && r->retry_after_s >= 0) {
        char value[48];
        snprintf(value, sizeof value, "%" PRId64, (int64_t)ceil(r->retry_after_s));
        n = add(out, n, cap, "retry-after", value);
    }
    return n;
}

static const char *limit_words(sl_provider_limit_t l)
{
    switch (l) {
    case SL_PROVIDER_LIMIT_REQUESTS: return "requests per minute";
    case SL_PROVIDER_LIMIT_INPUT: return "input tokens per minute";
    case SL_PROVIDER_LIMIT_OUTPUT: return "output tokens per minute";
    case SL_PROVIDER_LIMIT_TOKENS: return "tokens per minute";
    case SL_PROVIDER_LIMIT_COUNT_TOKENS: return "token counting requests per minute";
    case SL_PROVIDER_LIMIT_LONG_CONTEXT_INPUT: return "long context input tokens per minute";
    case SL_PROVIDER_LIMIT_LONG_CONTEXT_OUTPUT: return "long context output tokens per minute";
    case SL_PROVIDER_LIMIT_ACCELERATION: return "input tokens per minute";
    default: return "requests";
    }
}

static int64_t limit_value(const sl_provider_t *p, sl_provider_limit_t l)
{
    switch (l) {
    case SL_PROVIDER_LIMIT_REQUESTS: return p->limit[SL__PB_REQUESTS];
    case SL_PROVIDER_LIMIT_INPUT: return p->limit[SL__PB_INPUT];
    case SL_PROVIDER_LIMIT_OUTPUT: return p->limit[SL__PB_OUTPUT];
    case SL_PROVIDER_LIMIT_TOKENS: return p->limit[SL__PB_TOKENS];
    case SL_PROVIDER_LIMIT_COUNT_TOKENS: return p->cfg.count_tokens_rpm;
    case SL_PROVIDER_LIMIT_LONG_CONTEXT_INPUT: return p->limit[SL__PB_LC_INPUT];
    case SL_PROVIDER_LIMIT_LONG_CONTEXT_OUTPUT: return p->limit[SL__PB_LC_OUTPUT];
    default: return 0;
    }
}

size_t sl_provider_error_body(const sl_provider_t *p, sl_provider_style_t style,
                              const sl_provider_result_t *r, char *buf, size_t cap)
{
    int n = 0;
    bool anthropic = style == SL_PROVIDER_ANTHROPIC;
    switch (r->refusal) {
    case SL_PROVIDER_OK:
        if (cap) buf[0] = '\0';
        return 0;
    case SL_PROVIDER_RATE_LIMITED:
        if (r->limit == SL_PROVIDER_LIMIT_ACCELERATION) {
            /* Anthropic's SDKs know this 429 by error.details.error_code
             * "ramp_limit_exceeded" ("the request would exceed a ramp limit, which caps
             * how fast usage can grow"); its message text is not documented, so the words
             * are this model's, after the rate-limits page ("acceleration limits", ramp
             * up gradually) and the SDKs' description (docs/emu.md). */
            const char *msg =
                "This request would exceed a ramp limit, which caps how fast your "
                "organization's usage can grow (the acceleration limit). Please ramp up your "
                "traffic gradually and retry after the time in the retry-after header.";
            if (anthropic)
                n = snprintf(buf, cap,
                             "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                             "\"message\":\"%s\",\"details\":{\"error_code\":"
                             "\"ramp_limit_exceeded\"}}}",
                             msg);
            else
                n = snprintf(buf, cap,
                             "{\"error\":{\"message\":\"%s\",\"type\":\"tokens\",\"param\":null,"
                             "\"code\":\"rate_limit_exceeded\"}}",
                             msg);
            break;
        }
        if (anthropic)
            n = snprintf(buf, cap,
                         "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                         "\"message\":\"This request would exceed the rate limit for your "
                         "organization of %" PRId64 " %s. Please reduce the prompt length or "
                         "the maximum tokens requested, or try again later.\"}}",
                         limit_value(p, r->limit), limit_words(r->limit));
        else
            n = snprintf(buf, cap,
                         "{\"error\":{\"message\":\"Rate limit reached on %s: Limit %" PRId64
                         ". Please try again in %gs.\",\"type\":\"%s\",\"param\":null,"
                         "\"code\":\"rate_limit_exceeded\"}}",
                         limit_words(r->limit), limit_value(p, r->limit), r->retry_after_s,
                         r->limit == SL_PROVIDER_LIMIT_REQUESTS ||
                                 r->limit == SL_PROVIDER_LIMIT_COUNT_TOKENS
                             ? "requests"
                             : "tokens");
        break;
    case SL_PROVIDER_SPEND_CAP:
        if (anthropic)
            n = snprintf(buf, cap,
                         "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                         "\"message\":\"This request would exceed your account's monthly "
                         "spend limit. Please try again later.\"}}");
        else
            n = snprintf(buf, cap,
                         "{\"error\":{\"message\":\"You exceeded your current quota, please "
                         "check your plan and billing details.\",\"type\":\"insufficient_quota\","
                         "\"param\":null,\"code\":\"insufficient_quota\"}}");
        break;
    case SL_PROVIDER_OVERLOADED:
        /* Anthropic's documented 529 (and stream error event) body; OpenAI documents
         * only the status and message of its 503, so type and code are a choice. */
        if (anthropic)
            n = snprintf(buf, cap,
                         "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
                         "\"message\":\"Overloaded\"}}");
        else
            n = snprintf(buf, cap,
                         "{\"error\":{\"message\":\"The engine is currently overloaded, please "
                         "try again later\",\"type\":\"server_error\",\"param\":null,"
                         "\"code\":null}}");
        break;
    case SL_PROVIDER_INVALID:
        if (anthropic)
            n = snprintf(buf, cap,
                         "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
                         "\"message\":\"token counts must be non-negative and max_tokens at "
                         "least 1\"}}");
        else
            n = snprintf(buf, cap,
                         "{\"error\":{\"message\":\"token counts must be non-negative and "
                         "max_tokens at least 1\",\"type\":\"invalid_request_error\","
                         "\"param\":\"max_tokens\",\"code\":null}}");
        break;
    }
    return n < 0 ? 0 : (size_t)n;
}
