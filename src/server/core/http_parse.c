/* http_parse.c - HTTP/1.1 requests assembled on node's http-parser (see http_parse.h).
 *
 * http-parser hands over the target, field names and values in pieces as bytes arrive;
 * they are appended to one buffer, each ended by a NUL, and indexed by offset (the buffer
 * may move while it grows). On the message's end the parser is paused, so the bytes of
 * a pipelined next request stay unread until the caller asks for it.
 */
#include "http_parse.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#define FIELD_OVERHEAD_BYTES 4 /* ": " and CRLF, counted towards the head limit */
#define KEEP_BODY_BYTES      65536 /* a larger body buffer is given back after its request */

typedef struct span {
    size_t name_off, value_off;
} span_t;

typedef struct buf {
    char *data;
    size_t len, cap;
} buf_t;

struct sl_http_reader {
    http_parser p;
    sl_http_limits_t lim;
    buf_t head;          /* target NUL, then name NUL value NUL for each field */
    buf_t body;
    span_t *spans;
    size_t n_spans, cap_spans;
    size_t head_bytes;   /* counted against lim.max_head_bytes */
    size_t body_limit_bytes; /* this request's: lim.body_limit_for's answer, at most lim's */
    enum { IN_NONE, IN_URL, IN_NAME, IN_VALUE } in;
    bool begun;          /* a request has started arriving */
    bool headers_done;
    bool complete;
    bool expect_continue;
    bool continue_told;
    int err_rc;          /* set by a callback that stops the parser */
    char err_msg[160];
    sl_http_field_t *fields; /* built when the request is complete */
    size_t cap_fields;
    sl_http_request_t req;
};

static int buf_add(buf_t *b, const char *p, size_t n)
{
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n + 1) {
            if (cap > SIZE_MAX / 4) return -1;
            cap *= 2;
        }
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0'; /* room was kept for it */
    return 0;
}

static int fail(sl_http_reader_t *r, int rc, const char *msg)
{
    r->err_rc = rc;
    snprintf(r->err_msg, sizeof(r->err_msg), "%s", msg);
    return -1;
}

/* Counts head bytes against the limit. */
static int count_head(sl_http_reader_t *r, size_t n)
{
    r->head_bytes += n;
    if (r->head_bytes > r->lim.max_head_bytes) {
        char m[96];
        snprintf(m, sizeof(m), "header: the request head is over %zu bytes",
                 r->lim.max_head_bytes);
        return fail(r, SL_HTTP_TOO_LARGE, m);
    }
    return 0;
}

/* Ends the element being gathered (NUL) and starts the next one. */
static int switch_to(sl_http_reader_t *r, int next)
{
    if (r->in != IN_NONE && buf_add(&r->head, "", 1) < 0)
        return fail(r, SL_HTTP_TOO_LARGE, "server: out of memory");
    r->in = next;
    return 0;
}

static int on_message_begin(http_parser *p)
{
    sl_http_reader_t *r = p->data;
    r->begun = true;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    sl_http_reader_t *r = p->data;
    if (count_head(r, n) < 0) return -1;
    if (r->in != IN_URL && switch_to(r, IN_URL) < 0) return -1;
    return buf_add(&r->head, at, n) < 0 ? fail(r, SL_HTTP_TOO_LARGE, "server: out of memory") : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    sl_http_reader_t *r = p->data;
    if (count_head(r, n + (r->in != IN_NAME ? FIELD_OVERHEAD_BYTES : 0)) < 0) return -1;
    if (memchr(at, ' ', n) || memchr(at, '\t', n)) /* RFC 9112 section 5.1: smuggling */
        return fail(r, SL_HTTP_BAD, "header: whitespace between a field name and its colon");
    if (r->headers_done) return 0; /* trailers are counted, not kept */
    if (r->in != IN_NAME) {
        if (r->n_spans == r->lim.max_fields) {
            char m[64];
            snprintf(m, sizeof(m), "header: more than %zu fields", r->lim.max_fields);
            return fail(r, SL_HTTP_TOO_LARGE, m);
        }
        if (r->n_spans == r->cap_spans) {
            size_t cap = r->cap_spans ? r->cap_spans * 2 : 16;
            span_t *s = realloc(r->spans, cap * sizeof(*s));
            if (!s) return fail(r, SL_HTTP_TOO_LARGE, "server: out of memory");
            r->spans = s;
            r->cap_spans = cap;
        }
        if (switch_to(r, IN_NAME) < 0) return -1;
        r->spans[r->n_spans].name_off = r->head.len;
        r->spans[r->n_spans].value_off = SIZE_MAX;
        r->n_spans++;
    }
    return buf_add(&r->head, at, n) < 0 ? fail(r, SL_HTTP_TOO_LARGE, "server: out of memory") : 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    sl_http_reader_t *r = p->data;
    if (count_head(r, n) < 0) return -1;
    if (r->headers_done) return 0;
    if (r->in != IN_VALUE) {
        if (switch_to(r, IN_VALUE) < 0) return -1;
        r->spans[r->n_spans - 1].value_off = r->head.len;
    }
    return buf_add(&r->head, at, n) < 0 ? fail(r, SL_HTTP_TOO_LARGE, "server: out of memory") : 0;
}

static sl_http_method_t method_of(unsigned m)
{
    switch (m) {
    case HTTP_GET:
        return SL_HTTP_GET;
    case HTTP_HEAD:
        return SL_HTTP_HEAD;
    case HTTP_POST:
        return SL_HTTP_POST;
    case HTTP_PUT:
        return SL_HTTP_PUT;
    case HTTP_DELETE:
        return SL_HTTP_DELETE;
    case HTTP_PATCH:
        return SL_HTTP_PATCH;
    case HTTP_OPTIONS:
        return SL_HTTP_OPTIONS;
    default:
        return SL_HTTP_OTHER;
    }
}

static int on_headers_complete(http_parser *p)
{
    sl_http_reader_t *r = p->data;
    if (switch_to(r, IN_NONE) < 0) return -1;
    r->headers_done = true;
    if (p->http_major != 1 || p->http_minor > 1) {
        char m[96];
        snprintf(m, sizeof(m), "request line: HTTP/%u.%u is not supported (HTTP/1.1 is)",
                 p->http_major, p->http_minor);
        return fail(r, SL_HTTP_VERSION, m);
    }
    r->body_limit_bytes = r->lim.max_body_bytes;
    if (r->lim.body_limit_for) {
        size_t own = r->lim.body_limit_for(method_of(p->method), r->head.data ? r->head.data : "",
                                           r->lim.body_limit_ud);
        if (own < r->body_limit_bytes) r->body_limit_bytes = own;
    }
    if (!(p->flags & F_CHUNKED) && p->content_length != ULLONG_MAX &&
        p->content_length > r->body_limit_bytes) {
        char m[128];
        snprintf(m, sizeof(m), "body: %llu bytes is over the limit of %zu bytes",
                 (unsigned long long)p->content_length, r->body_limit_bytes);
        return fail(r, SL_HTTP_BODY_TOO_LARGE, m);
    }
    for (size_t i = 0; i < r->n_spans; i++) {
        const span_t *s = &r->spans[i];
        if (s->value_off != SIZE_MAX && !strcasecmp(r->head.data + s->name_off, "expect") &&
            !strcasecmp(r->head.data + s->value_off, "100-continue"))
            r->expect_continue = true;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    sl_http_reader_t *r = p->data;
    if (r->body.len + n > r->body_limit_bytes) {
        char m[128];
        snprintf(m, sizeof(m), "body: the chunked body is over the limit of %zu bytes",
                 r->body_limit_bytes);
        return fail(r, SL_HTTP_BODY_TOO_LARGE, m);
    }
    return buf_add(&r->body, at, n) < 0 ? fail(r, SL_HTTP_BODY_TOO_LARGE, "server: out of memory")
                                        : 0;
}

/* Trims trailing blanks off a NUL-terminated value in place. */
static void rtrim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
}

static int on_message_complete(http_parser *p)
{
    sl_http_reader_t *r = p->data;
    if (r->cap_fields < r->n_spans) {
        sl_http_field_t *f = realloc(r->fields, r->n_spans * sizeof(*f));
        if (!f) return fail(r, SL_HTTP_TOO_LARGE, "server: out of memory");
        r->fields = f;
        r->cap_fields = r->n_spans;
    }
    if (!r->head.data && buf_add(&r->head, "", 0) < 0)
        return fail(r, SL_HTTP_TOO_LARGE, "server: out of memory");
    static const char empty[] = "";
    for (size_t i = 0; i < r->n_spans; i++) {
        r->fields[i].name = r->head.data + r->spans[i].name_off;
        if (r->spans[i].value_off == SIZE_MAX) {
            r->fields[i].value = empty;
        } else {
            rtrim(r->head.data + r->spans[i].value_off);
            r->fields[i].value = r->head.data + r->spans[i].value_off;
        }
    }
    sl_http_request_t *q = &r->req;
    q->method = method_of(p->method);
    q->minor = p->http_minor;
    q->keep_alive = http_should_keep_alive(p) && !p->upgrade;
    q->target = r->head.data;
    q->target_len = strlen(r->head.data);
    q->fields = r->fields;
    q->n_fields = r->n_spans;
    q->body = r->body.data ? r->body.data : empty;
    q->body_len = r->body.len;
    r->complete = true;
    http_parser_pause(p, 1); /* the next request waits for sl_http_reader_next */
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

sl_http_reader_t *sl_http_reader_new(const sl_http_limits_t *limits)
{
    sl_http_reader_t *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->lim = *limits;
    http_parser_init(&r->p, HTTP_REQUEST);
    r->p.data = r;
    return r;
}

void sl_http_reader_free(sl_http_reader_t *r)
{
    if (!r) return;
    free(r->head.data);
    free(r->body.data);
    free(r->spans);
    free(r->fields);
    free(r);
}

void sl_http_reader_set_max_body(sl_http_reader_t *r, size_t max_body_bytes)
{
    r->lim.max_body_bytes = max_body_bytes;
}

size_t sl_http_reader_feed(sl_http_reader_t *r, const char *data, size_t len, int *rc, char *msg,
                           size_t msglen)
{
    if (r->complete) {
        *rc = SL_HTTP_DONE;
        return 0;
    }
    size_t used = http_parser_execute(&r->p, &settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&r->p);
    if (r->complete) {
        *rc = SL_HTTP_DONE;
        return used;
    }
    if (e == HPE_OK) {
        *rc = SL_HTTP_MORE;
        return used;
    }
    if (r->err_rc) {
        *rc = r->err_rc;
        snprintf(msg, msglen, "%s", r->err_msg);
    } else if (e == HPE_HEADER_OVERFLOW) {
        *rc = SL_HTTP_TOO_LARGE;
        snprintf(msg, msglen, "header: the request head is too large");
    } else {
        *rc = SL_HTTP_BAD;
        snprintf(msg, msglen, "request: %s (%s)", http_errno_description(e), http_errno_name(e));
    }
    return used;
}

bool sl_http_reader_take_continue(sl_http_reader_t *r)
{
    if (!r->headers_done || r->complete || !r->expect_continue || r->continue_told ||
        r->p.http_minor < 1)
        return false;
    r->continue_told = true;
    return true;
}

bool sl_http_reader_partial(const sl_http_reader_t *r)
{
    return r->begun && !r->complete;
}

bool sl_http_reader_in_body(const sl_http_reader_t *r, size_t *body_bytes)
{
    *body_bytes = r->body.len;
    return r->headers_done && !r->complete;
}

const sl_http_request_t *sl_http_reader_request(const sl_http_reader_t *r)
{
    return r->complete ? &r->req : NULL;
}

void sl_http_reader_next(sl_http_reader_t *r)
{
    r->head.len = 0;
    r->body.len = 0;
    if (r->body.cap > KEEP_BODY_BYTES) { /* a keep-alive connection does not hold on to it */
        free(r->body.data);
        r->body.data = NULL;
        r->body.cap = 0;
    }
    r->n_spans = 0;
    r->head_bytes = 0;
    r->in = IN_NONE;
    r->begun = r->headers_done = r->complete = false;
    r->expect_continue = r->continue_told = false;
    r->err_rc = 0;
    memset(&r->req, 0, sizeof(r->req));
    http_parser_pause(&r->p, 0);
}

void sl_http_split_target(const char *target, size_t len, size_t *path_off, size_t *path_len,
                          size_t *query_off, size_t *query_len)
{
    struct http_parser_url u;
    *path_off = 0;
    *path_len = len;
    *query_off = *query_len = 0;
    if (len > 0 && target[0] == '/') { /* origin-form, nearly every request: no URL parse */
        const char *q = memchr(target, '?', len);
        const char *end = memchr(target, '#', len);
        if (end && q && q > end) q = NULL;
        *path_len = (size_t)((q ? q : end ? end : target + len) - target);
        if (q) {
            *query_off = (size_t)(q + 1 - target);
            *query_len = (size_t)((end ? end : target + len) - (q + 1));
        }
        return;
    }
    http_parser_url_init(&u);
    if (len > UINT16_MAX || http_parser_parse_url(target, len, 0, &u) != 0) return;
    if (u.field_set & (1 << UF_PATH)) {
        *path_off = u.field_data[UF_PATH].off;
        *path_len = u.field_data[UF_PATH].len;
    } else {
        *path_len = 0;
    }
    if (u.field_set & (1 << UF_QUERY)) {
        *query_off = u.field_data[UF_QUERY].off;
        *query_len = u.field_data[UF_QUERY].len;
    }
}

const char *sl_http_reason(int status)
{
    const char *s = http_status_str((enum http_status)status);
    return s && strcmp(s, "<unknown>") != 0 ? s : status < 500 ? "Client Error" : "Server Error";
}
