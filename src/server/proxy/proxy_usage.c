/* proxy_usage.c - reads what a provider used from its answer: JSON bodies, SSE events, cap errors.
 *
 * Anthropic reports usage in the body's `usage` (input_tokens after the last cache
 * breakpoint, cache_creation_input_tokens, cache_read_input_tokens, output_tokens);
 * a stream reports the input side in message_start's message.usage and the running
 * output count in each message_delta's usage. OpenAI reports `usage.prompt_tokens`
 * (cached included, broken out in prompt_tokens_details.cached_tokens) and
 * `completion_tokens`; a stream only does so in one extra last chunk (empty
 * `choices`) when stream_options.include_usage is set.
 *
 * SSE events are looked at cheaply: only events that can carry usage are parsed as
 * JSON; every other event just adds to a rough count of the output seen, used when a
 * stream ends before its usage arrives.
 *
 * Nor is a whole answer parsed to read a few numbers: member_value() walks the JSON
 * text (strings and nesting only, no values built) to the top-level member wanted,
 * and jansson parses just that value. On a proxied call this was a tenth of sluiced's
 * time; it grows with the answer, which the usage does not.
 */
#include "proxy.h"

#include <string.h>
#include <strings.h>

static int64_t int_field(const json_t *o, const char *k, bool *have)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) return 0;
    json_int_t n = json_integer_value(v);
    if (n < 0) return 0;
    if (have) *have = true;
    return (int64_t)n;
}

static void anthropic_usage(const json_t *usage, sl_usage_t *u, bool input_side)
{
    if (!json_is_object(usage)) return;
    bool have_in = false, have_out = false;
    int64_t in = int_field(usage, "input_tokens", &have_in);
    int64_t out = int_field(usage, "output_tokens", &have_out);
    if (have_in) {
        u->input_tokens = in;
        u->have_input = true;
        bool h = false;
        int64_t v = int_field(usage, "cache_creation_input_tokens", &h);
        if (h) u->cache_creation_input_tokens = v;
        h = false;
        v = int_field(usage, "cache_read_input_tokens", &h);
        if (h) u->cache_read_input_tokens = v;
        h = false;
        v = int_field(json_object_get(usage, "cache_creation"), "ephemeral_1h_input_tokens", &h);
        if (h) u->cache_creation_1h_input_tokens = v;
    }
    /* message_start's output_tokens is a placeholder (1): only final counts count. */
    if (have_out && !input_side) {
        u->output_tokens = out;
        u->have_output = true;
    }
}

static void openai_usage(const json_t *usage, sl_usage_t *u)
{
    if (!json_is_object(usage)) return;
    bool have_in = false, have_out = false;
    int64_t prompt = int_field(usage, "prompt_tokens", &have_in);
    int64_t completion = int_field(usage, "completion_tokens", &have_out);
    int64_t cached = int_field(json_object_get(usage, "prompt_tokens_details"), "cached_tokens",
                               NULL);
    if (cached > prompt) cached = prompt;
    if (have_in) {
        u->input_tokens = prompt - cached;
        u->cache_read_input_tokens = cached;
        u->cache_creation_input_tokens = 0;
        u->have_input = true;
    }
    if (have_out) {
        u->output_tokens = completion;
        u->have_output = true;
    }
}

/* The value of member `key` of the JSON object whose text starts `s` (leading blanks
 * allowed): a pointer to the value's first byte, or NULL. Only the object's own members
 * count, not those of objects inside it; of duplicate members the last one counts, as
 * in jansson. The text is not validated here; the value is, by whoever parses it. */
static const char *member_value(const char *s, size_t n, const char *key)
{
    size_t klen = strlen(key), i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    if (i == n || s[i] != '{') return NULL;
    const char *found = NULL;
    int depth = 0;
    bool expect_key = false;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '"') {
            size_t start = ++i;
            while (i < n && s[i] != '"')
                i += s[i] == '\\' ? 2 : 1;
            if (i >= n) return found;
            if (depth != 1 || !expect_key) continue;
            expect_key = false;
            if (i - start != klen || memcmp(s + start, key, klen) != 0) continue;
            size_t v = i + 1;
            while (v < n && (s[v] == ' ' || s[v] == '\t' || s[v] == '\n' || s[v] == '\r' ||
                             s[v] == ':'))
                v++;
            if (v < n) found = s + v;
        } else if (c == '{' || c == '[') {
            depth++;
            expect_key = depth == 1;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return found;
        } else if (c == ',') {
            expect_key = depth == 1;
        }
    }
    return found;
}

/* Parses the value of top-level member `key` of the object in `s`; NULL when absent or
 * not JSON. The caller decrefs. */
static json_t *member_json(const char *s, size_t n, const char *key)
{
    const char *v = member_value(s, n, key);
    if (!v) return NULL;
    return json_loadb(v, n - (size_t)(v - s), JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, NULL);
}

void sl__usage_from_body(sl_upstream_api_t api, const char *body, size_t len, sl_usage_t *u)
{
    json_t *usage = member_json(body, len, "usage");
    if (api == SL_UPSTREAM_OPENAI)
        openai_usage(usage, u);
    else
        anthropic_usage(usage, u, false);
    json_decref(usage);
}

/* The value of the event's first line starting with `field` ("event: ", "data: "). */
static const char *line_value(const char *ev, size_t len, const char *field, size_t *vlen)
{
    size_t flen = strlen(field);
    const char *p = ev, *end = ev + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) >= flen && !memcmp(p, field, flen)) {
            const char *v = p + flen;
            while (v < le && *v == ' ')
                v++;
            size_t n = (size_t)(le - v);
            if (n > 0 && v[n - 1] == '\r') n--;
            *vlen = n;
            return v;
        }
        p = nl ? nl + 1 : end;
    }
    return NULL;
}

static bool has(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (k > n) return false;
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, k)) return true;
    return false;
}

static bool anthropic_event(const char *ev, size_t len, sl_usage_t *u)
{
    size_t nlen = 0, dlen = 0;
    const char *name = line_value(ev, len, "event:", &nlen);
    const char *data = line_value(ev, len, "data:", &dlen);
    if (!name || !data) return true;
    bool start = nlen == 13 && !memcmp(name, "message_start", 13);
    bool delta = nlen == 13 && !memcmp(name, "message_delta", 13);
    if (nlen == 19 && !memcmp(name, "content_block_delta", 19)) {
        /* About four bytes of text per token; at least one token per delta. */
        int64_t t = (int64_t)(dlen > 80 ? (dlen - 80) / 4 : 0);
        u->output_seen_tokens += t > 0 ? t : 1;
        return true;
    }
    if (!start && !delta) return true;
    if (start) { /* message.usage: skip the message's other members */
        const char *msg = member_value(data, dlen, "message");
        if (!msg) return true;
        dlen -= (size_t)(msg - data);
        data = msg;
    }
    json_t *usage = member_json(data, dlen, "usage");
    anthropic_usage(usage, u, start);
    json_decref(usage);
    return true;
}

static bool openai_event(const char *ev, size_t len, bool drop_usage_chunk, sl_usage_t *u)
{
    size_t dlen = 0;
    const char *data = line_value(ev, len, "data:", &dlen);
    if (!data || (dlen == 6 && !memcmp(data, "[DONE]", 6))) return true;
    if (!has(data, dlen, "\"usage\":{") && !has(data, dlen, "\"usage\": {")) {
        u->output_seen_tokens += 1;
        return true;
    }
    json_t *j = json_loadb(data, dlen, 0, NULL);
    bool forward = true;
    if (json_is_object(j)) {
        openai_usage(json_object_get(j, "usage"), u);
        const json_t *choices = json_object_get(j, "choices");
        if (drop_usage_chunk && json_is_array(choices) && json_array_size(choices) == 0)
            forward = false;
        else if (json_array_size(choices) > 0)
            u->output_seen_tokens += 1;
    }
    json_decref(j);
    return forward;
}

bool sl__usage_from_event(sl_upstream_api_t api, const char *ev, size_t len,
                          bool drop_usage_chunk, sl_usage_t *u)
{
    if (api == SL_UPSTREAM_OPENAI) return openai_event(ev, len, drop_usage_chunk, u);
    return anthropic_event(ev, len, u);
}

/* True when `needle` occurs in body[0, len), case aside. */
static bool contains(const char *body, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (!strncasecmp(body + i, needle, n)) return true;
    return false;
}

bool sl__is_acceleration_429(const char *body, size_t len)
{
    /* Anthropic's error code (its SDKs' RampLimitExceededError), or the words of a
     * provider (or an emulator) that names the limit in the message only. */
    return contains(body, len, "\"ramp_limit_exceeded\"") ||
           contains(body, len, "acceleration limit");
}

bool sl__usage_is_spend_cap(sl_upstream_api_t api, const char *body, size_t len,
                            bool have_retry_after)
{
    json_t *j = json_loadb(body, len, JSON_DECODE_ANY, NULL);
    const json_t *err = json_object_get(j, "error");
    bool cap = false;
    if (json_is_object(err)) {
        const char *type = json_string_value(json_object_get(err, "type"));
        const char *code = json_string_value(json_object_get(err, "code"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        if (api == SL_UPSTREAM_OPENAI) {
            cap = (type && !strcmp(type, "insufficient_quota")) ||
                  (code && !strcmp(code, "insufficient_quota"));
        } else {
            cap = !have_retry_after && msg &&
                  (strstr(msg, "spend limit") || strstr(msg, "spending limit") ||
                   strstr(msg, "credit balance"));
        }
    }
    json_decref(j);
    return cap;
}

/* ---- shared with proxy_responses.c ---- */

const char *sl__usage_member_at(const char *s, size_t n, const char *key)
{
    return member_value(s, n, key);
}

json_t *sl__usage_member(const char *s, size_t n, const char *key)
{
    return member_json(s, n, key);
}

const char *sl__sse_field(const char *ev, size_t len, const char *field, size_t *vlen)
{
    return line_value(ev, len, field, vlen);
}
