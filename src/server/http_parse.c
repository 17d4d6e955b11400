/* http_parse.c - HTTP/1.1 request heads, chunked bodies and percent-escapes (see http_parse.h). */
#include "http_parse.h"

#include <stdio.h>
#include <string.h>

#define CHUNK_LINE_MAX_BYTES 1024  /* a chunk-size line with its extensions */
#define TRAILERS_MAX_BYTES   8192  /* all trailer lines of a chunked body */

static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A field value's bytes: HTAB, SP, visible ASCII and obs-text. */
static bool is_value_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool sl_http_token_eq(const char *s, size_t len, const char *lit)
{
    size_t n = strlen(lit);
    if (n != len) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char a = (unsigned char)s[i], b = (unsigned char)lit[i];
        if (a >= 'A' && a <= 'Z') a = (unsigned char)(a + 32);
        if (b >= 'A' && b <= 'Z') b = (unsigned char)(b + 32);
        if (a != b) return false;
    }
    return true;
}

/* Finds the line starting at `p`: sets *end (exclusive, without CR) and *next (after LF).
 * Returns 1, 0 when no LF yet, -1 for a CR not followed by LF. */
static int next_line(const char *buf, size_t len, size_t p, size_t *end, size_t *next)
{
    const char *nl = memchr(buf + p, '\n', len - p);
    if (!nl) return 0;
    size_t e = (size_t)(nl - buf);
    *next = e + 1;
    if (e > p && buf[e - 1] == '\r') e--;
    if (memchr(buf + p, '\r', e - p)) return -1;
    *end = e;
    return 1;
}

static sl_http_method_t method_of(const char *s, size_t n)
{
    static const struct {
        const char *name;
        sl_http_method_t m;
    } known[] = {{"GET", SL_HTTP_GET},       {"HEAD", SL_HTTP_HEAD},   {"POST", SL_HTTP_POST},
                 {"PUT", SL_HTTP_PUT},       {"DELETE", SL_HTTP_DELETE}, {"PATCH", SL_HTTP_PATCH},
                 {"OPTIONS", SL_HTTP_OPTIONS}};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strlen(known[i].name) == n && memcmp(known[i].name, s, n) == 0) return known[i].m;
    return SL_HTTP_OTHER; /* methods are case-sensitive */
}

static int parse_request_line(const char *s, size_t n, sl_http_head_t *h, char *msg, size_t msglen)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ' ') {
        snprintf(msg, msglen, "request line: the method must be a token followed by one space");
        return SL_HTTP_BAD;
    }
    h->method_str = s;
    h->method_len = i;
    h->method = method_of(s, i);
    size_t t = ++i;
    while (i < n && (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f)
        i++;
    if (i == t || i >= n || s[i] != ' ') {
        snprintf(msg, msglen,
                 "request line: the target must be visible ASCII followed by one space");
        return SL_HTTP_BAD;
    }
    h->target = s + t;
    h->target_len = i - t;
    const char *v = s + i + 1;
    size_t vn = n - i - 1;
    if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9') {
        snprintf(msg, msglen, "request line: the version must be HTTP/1.1 or HTTP/1.0");
        return SL_HTTP_BAD;
    }
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) {
        snprintf(msg, msglen, "request line: HTTP/%c.%c is not supported (HTTP/1.1 is)", v[5],
                 v[7]);
        return SL_HTTP_VERSION;
    }
    h->minor = v[7] - '0';
    return SL_HTTP_DONE;
}

static int parse_field(const char *s, size_t n, sl_http_field_t *f, char *msg, size_t msglen)
{
    if (s[0] == ' ' || s[0] == '\t') {
        snprintf(msg, msglen, "header: folded lines (starting with a blank) are not accepted");
        return SL_HTTP_BAD;
    }
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ':') {
        snprintf(msg, msglen, "header '%.*s': the name must be a token followed by ':'",
                 (int)(i < 64 ? i : 64), s);
        return SL_HTTP_BAD;
    }
    f->name = s;
    f->name_len = i;
    size_t v = i + 1;
    while (v < n && (s[v] == ' ' || s[v] == '\t'))
        v++;
    size_t e = n;
    while (e > v && (s[e - 1] == ' ' || s[e - 1] == '\t'))
        e--;
    for (size_t k = v; k < e; k++)
        if (!is_value_char((unsigned char)s[k])) {
            snprintf(msg, msglen, "header '%.*s': the value holds control character 0x%02x",
                     (int)(i < 64 ? i : 64), s, (unsigned char)s[k]);
            return SL_HTTP_BAD;
        }
    f->value = s + v;
    f->value_len = e - v;
    return SL_HTTP_DONE;
}

/* Walks a comma-separated list, calling `fn` with each trimmed element. */
static void each_element(const char *s, size_t n, void (*fn)(const char *e, size_t len, void *ud),
                         void *ud)
{
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && (s[a] == ' ' || s[a] == '\t'))
            a++;
        while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'))
            b--;
        if (b > a) fn(s + a, b - a, ud);
        i = j + 1;
    }
}

static void connection_option(const char *e, size_t len, void *ud)
{
    sl_http_head_t *h = ud;
    if (sl_http_token_eq(e, len, "close")) h->keep_alive = false;
    if (sl_http_token_eq(e, len, "keep-alive") && h->minor == 0) h->keep_alive = true;
}

/* What the fields mean for framing and the connection. */
static int interpret_fields(sl_http_head_t *h, char *msg, size_t msglen)
{
    bool have_te = false;
    h->content_length = -1;
    h->keep_alive = h->minor >= 1;
    for (size_t i = 0; i < h->n_fields; i++) {
        const sl_http_field_t *f = &h->fields[i];
        if (sl_http_token_eq(f->name, f->name_len, "content-length")) {
            int64_t v = 0;
            if (f->value_len == 0 || f->value_len > 18) goto bad_length;
            for (size_t k = 0; k < f->value_len; k++) {
                if (f->value[k] < '0' || f->value[k] > '9') goto bad_length;
                v = v * 10 + (f->value[k] - '0');
            }
            if (h->content_length >= 0 && h->content_length != v) {
                snprintf(msg, msglen, "header 'Content-Length': sent twice with different values");
                return SL_HTTP_BAD;
            }
            h->content_length = v;
        } else if (sl_http_token_eq(f->name, f->name_len, "transfer-encoding")) {
            if (have_te || !sl_http_token_eq(f->value, f->value_len, "chunked")) {
                snprintf(msg, msglen,
                         "header 'Transfer-Encoding': '%.*s' is not supported (only chunked)",
                         (int)(f->value_len < 64 ? f->value_len : 64), f->value);
                return SL_HTTP_BAD;
            }
            have_te = true;
        } else if (sl_http_token_eq(f->name, f->name_len, "connection")) {
            each_element(f->value, f->value_len, connection_option, h);
        } else if (sl_http_token_eq(f->name, f->name_len, "expect")) {
            if (sl_http_token_eq(f->value, f->value_len, "100-continue"))
                h->expect_continue = true;
        }
    }
    if (have_te && h->minor == 0) {
        snprintf(msg, msglen, "header 'Transfer-Encoding': not allowed in HTTP/1.0");
        return SL_HTTP_BAD;
    }
    if (have_te && h->content_length >= 0) {
        snprintf(msg, msglen,
                 "header 'Content-Length': not allowed together with Transfer-Encoding");
        return SL_HTTP_BAD;
    }
    h->chunked = have_te;
    return SL_HTTP_DONE;
bad_length:
    snprintf(msg, msglen, "header 'Content-Length': must be digits only (at most 18)");
    return SL_HTTP_BAD;
}

int sl_http_parse_head(const char *buf, size_t len, size_t max_head, sl_http_head_t *h, char *msg,
                       size_t msglen)
{
    size_t p = 0, end, next;
    sl_http_field_t *fields = h->fields;
    size_t max_fields = h->max_fields;
    memset(h, 0, sizeof(*h));
    h->fields = fields;
    h->max_fields = max_fields;
    h->content_length = -1;
    /* Empty lines before the request line are ignored (RFC 9112 section 2.2). */
    while (p < len && (buf[p] == '\n' || (buf[p] == '\r' && p + 1 < len && buf[p + 1] == '\n')))
        p += buf[p] == '\n' ? 1 : 2;
    bool first = true;
    for (;;) {
        int r = next_line(buf, len, p, &end, &next);
        if (r == 0 || (r > 0 && next > max_head)) {
            if ((r == 0 && len > max_head) || r > 0) {
                snprintf(msg, msglen, "header: the request head is over %zu bytes", max_head);
                return SL_HTTP_TOO_LARGE;
            }
            return SL_HTTP_MORE;
        }
        if (r < 0) {
            snprintf(msg, msglen, "header: a CR not followed by LF");
            return SL_HTTP_BAD;
        }
        if (first) {
            int rc = parse_request_line(buf + p, end - p, h, msg, msglen);
            if (rc != SL_HTTP_DONE) return rc;
            first = false;
        } else if (end == p) {
            h->head_len = next;
            return interpret_fields(h, msg, msglen);
        } else {
            if (h->n_fields == h->max_fields) {
                snprintf(msg, msglen, "header: more than %zu fields", h->max_fields);
                return SL_HTTP_TOO_LARGE;
            }
            int rc = parse_field(buf + p, end - p, &h->fields[h->n_fields], msg, msglen);
            if (rc != SL_HTTP_DONE) return rc;
            h->n_fields++;
        }
        p = next;
    }
}

/* Walks a chunked body; copies the data into `out` when it is not NULL. */
static int walk_chunked(const char *buf, size_t len, size_t max_body, char *out, size_t *wire_len,
                        size_t *body_len, char *msg, size_t msglen)
{
    size_t p = 0, total = 0, end, next;
    for (;;) {
        int r = next_line(buf, len, p, &end, &next);
        if (r == 0) {
            if (len - p > CHUNK_LINE_MAX_BYTES) goto bad_size_line;
            return SL_HTTP_MORE;
        }
        if (r < 0 || next - p > CHUNK_LINE_MAX_BYTES) goto bad_size_line;
        size_t i = p, size = 0;
        while (i < end && hexval((unsigned char)buf[i]) >= 0) {
            if (i - p == 15) goto bad_size_line;
            size = size * 16 + (size_t)hexval((unsigned char)buf[i]);
            i++;
        }
        if (i == p) goto bad_size_line;
        while (i < end && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        if (i < end && buf[i] != ';') goto bad_size_line; /* extensions are ignored */
        p = next;
        if (size == 0) {
            /* Trailer lines (ignored) up to the empty line. */
            for (;;) {
                size_t start = p;
                r = next_line(buf, len, p, &end, &next);
                if (r == 0) {
                    if (len - p > TRAILERS_MAX_BYTES) goto bad_trailers;
                    return SL_HTTP_MORE;
                }
                if (r < 0) goto bad_trailers;
                p = next;
                if (end == start) break;
            }
            *wire_len = p;
            *body_len = total;
            return SL_HTTP_DONE;
        }
        if (size > max_body || total + size > max_body) {
            snprintf(msg, msglen, "body: the chunked body is over the limit of %zu bytes",
                     max_body);
            return SL_HTTP_TOO_LARGE;
        }
        if (len - p < size + 1) return SL_HTTP_MORE;
        if (out) memcpy(out + total, buf + p, size);
        total += size;
        p += size;
        if (buf[p] == '\n') {
            p++;
        } else if (buf[p] == '\r') {
            if (len - p < 2) return SL_HTTP_MORE;
            if (buf[p + 1] != '\n') goto bad_data_end;
            p += 2;
        } else {
            goto bad_data_end;
        }
    }
bad_size_line:
    snprintf(msg, msglen, "body: a malformed chunk-size line");
    return SL_HTTP_BAD;
bad_trailers:
    snprintf(msg, msglen, "body: malformed trailers after the last chunk");
    return SL_HTTP_BAD;
bad_data_end:
    snprintf(msg, msglen, "body: a chunk's data is longer than its size");
    return SL_HTTP_BAD;
}

int sl_http_scan_chunked(const char *buf, size_t len, size_t max_body, size_t *wire_len,
                         size_t *body_len, char *msg, size_t msglen)
{
    return walk_chunked(buf, len, max_body, NULL, wire_len, body_len, msg, msglen);
}

void sl_http_decode_chunked(const char *buf, size_t wire_len, char *out)
{
    size_t w, b;
    char msg[8];
    walk_chunked(buf, wire_len, (size_t)-1 / 2, out, &w, &b, msg, sizeof(msg));
}

ssize_t sl_http_pct_decode(const char *s, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\0') return -1;
        if (s[i] != '%') {
            out[o++] = s[i];
            continue;
        }
        if (len - i < 3) return -1;
        int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return -1;
        out[o++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[o] = '\0';
    return (ssize_t)o;
}
