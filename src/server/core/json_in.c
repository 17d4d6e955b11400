/* json_in.c - strict validation of request bodies: every refusal names the field and the value. */
#include "server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/engine.h>

bool sl__name_ok(const char *s, size_t max_len)
{
    size_t n = strlen(s);
    if (n == 0 || n > max_len) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == ':' || c == '-';
        if (!ok) return false;
    }
    return true;
}

/* Length of the valid UTF-8 sequence at `p` (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF), or 0 when the bytes there are not one. */
static size_t utf8_seq_len(const unsigned char *p)
{
    unsigned char c = p[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

bool sl__utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t n; *p; p += n)
        if ((n = utf8_seq_len(p)) == 0) return false;
    return true;
}

void sl__utf8_scrub(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        size_t n = utf8_seq_len(p);
        if (n == 0) {
            *p++ = '?';
        } else {
            p += n;
        }
    }
}

/* Writes a JSON value into `buf` for a message, shortened to fit. */
static const char *show(const json_t *v, char *buf, size_t n)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, n, "(value)");
        return buf;
    }
    if (strlen(s) > 40)
        snprintf(buf, n, "%.37s...", s);
    else
        snprintf(buf, n, "%s", s);
    free(s);
    return buf;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

int sl__json_check_fields(const json_t *obj, const char *const *allowed, char *msg, size_t n)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool known = false;
        for (size_t i = 0; allowed[i]; i++)
            if (!strcmp(key, allowed[i])) known = true;
        if (!known) {
            snprintf(msg, n, "unknown field '%.64s'", key);
            return -1;
        }
    }
    return 0;
}

int sl__json_get_int(const json_t *obj, const char *field, bool required, int64_t *out, char *msg,
                     size_t n)
{
    char shown[64];
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) {
        if (!required) return 0;
        snprintf(msg, n, "%s is required (an integer >= 0)", field);
        return -1;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && d < 0)
            snprintf(msg, n, "%s must be >= 0, not %s", field, show(v, shown, sizeof(shown)));
        else if (d == floor(d) && d > (double)SL_TOKENS_MAX)
            snprintf(msg, n, "%s: %s is above the largest accepted value 2^53", field,
                     show(v, shown, sizeof(shown)));
        else
            snprintf(msg, n, "%s must be an integer, not %s", field, show(v, shown, sizeof(shown)));
        return -1;
    }
    if (!json_is_integer(v)) {
        snprintf(msg, n, "%s must be an integer >= 0, not %s (%s)", field, type_name(v),
                 show(v, shown, sizeof(shown)));
        return -1;
    }
    json_int_t i = json_integer_value(v);
    if (i < 0) {
        snprintf(msg, n, "%s must be >= 0, not %lld", field, (long long)i);
        return -1;
    }
    if (i > SL_TOKENS_MAX) {
        snprintf(msg, n, "%s: %lld is above the largest accepted value 2^53", field, (long long)i);
        return -1;
    }
    *out = (int64_t)i;
    return 0;
}

int sl__json_get_number(const json_t *obj, const char *field, bool required, double min,
                        bool min_exclusive, double *out, char *msg, size_t n)
{
    char shown[64];
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) {
        if (!required) return 0;
        snprintf(msg, n, "%s is required (a number)", field);
        return -1;
    }
    if (!json_is_number(v)) {
        snprintf(msg, n, "%s must be a number, not %s (%s)", field, type_name(v),
                 show(v, shown, sizeof(shown)));
        return -1;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || d < min || (min_exclusive && d == min) || d > 1e9) {
        snprintf(msg, n, "%s must be a number %s %g (at most 1e9), not %s", field,
                 min_exclusive ? ">" : ">=", min, show(v, shown, sizeof(shown)));
        return -1;
    }
    *out = d;
    return 0;
}

int sl__json_get_string(const json_t *obj, const char *field, bool required, size_t max_len,
                        bool name_chars, const char **out, char *msg, size_t n)
{
    char shown[64];
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) {
        if (!required) return 0;
        snprintf(msg, n, "%s is required (a string)", field);
        return -1;
    }
    if (!json_is_string(v)) {
        snprintf(msg, n, "%s must be a string, not %s (%s)", field, type_name(v),
                 show(v, shown, sizeof(shown)));
        return -1;
    }
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (len == 0 || len > max_len) {
        snprintf(msg, n, "%s must be 1-%zu characters long, not %zu", field, max_len, len);
        return -1;
    }
    if (name_chars && !sl__name_ok(s, max_len)) {
        snprintf(msg, n, "%s %s may only contain A-Z a-z 0-9 . _ : -", field,
                 show(v, shown, sizeof(shown)));
        return -1;
    }
    *out = s;
    return 0;
}

int sl__json_get_bool(const json_t *obj, const char *field, bool *out, char *msg, size_t n)
{
    char shown[64];
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        snprintf(msg, n, "%s must be true or false, not %s", field, show(v, shown, sizeof(shown)));
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}
