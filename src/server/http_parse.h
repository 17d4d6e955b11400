/* http_parse.h - HTTP/1.1 request heads, chunked bodies and percent-escapes, parsed from bytes
 * (pure functions, no I/O: the transport in httpd.c feeds them, the fuzz target too).
 *
 * Strict where leniency lets a request mean two things (request smuggling): a field name
 * must touch its colon, obs-fold lines, control characters, Content-Length together with
 * Transfer-Encoding, differing Content-Lengths and any coding but `chunked` are refused.
 * Lenient where RFC 9112 allows it: bare LF line ends, empty lines before the request line.
 */
#ifndef SL_HTTP_PARSE_H
#define SL_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum sl_http_method {
    SL_HTTP_OTHER = 0, /* a well-formed method this server does not serve */
    SL_HTTP_GET,
    SL_HTTP_HEAD,
    SL_HTTP_POST,
    SL_HTTP_PUT,
    SL_HTTP_DELETE,
    SL_HTTP_PATCH,
    SL_HTTP_OPTIONS,
} sl_http_method_t;

/* Outcomes of the parsers. */
enum {
    SL_HTTP_DONE = 1,       /* complete */
    SL_HTTP_MORE = 0,       /* well-formed so far; more bytes are needed */
    SL_HTTP_BAD = -1,       /* malformed: 400 */
    SL_HTTP_TOO_LARGE = -2, /* head over its limit or too many fields: 431; body: 413 */
    SL_HTTP_VERSION = -3,   /* not HTTP/1.0 or 1.1: 505 */
};

/* One header field; name and value point into the parsed bytes (not NUL-terminated). */
typedef struct sl_http_field {
    const char *name;
    size_t name_len;
    const char *value; /* without leading and trailing blanks */
    size_t value_len;
} sl_http_field_t;

typedef struct sl_http_head {
    sl_http_method_t method;
    const char *method_str;
    size_t method_len;
    const char *target; /* the request-target as sent */
    size_t target_len;
    int minor; /* HTTP/1.minor: 0 or 1 */
    sl_http_field_t *fields; /* set by the caller: room for max_fields */
    size_t max_fields;       /* set by the caller */
    size_t n_fields;
    size_t head_len;        /* bytes up to and including the empty line */
    int64_t content_length; /* -1: no Content-Length */
    bool chunked;           /* Transfer-Encoding: chunked */
    bool keep_alive;        /* the connection may serve another request after this one */
    bool expect_continue;   /* Expect: 100-continue */
} sl_http_head_t;

/* Parses the request head at the start of buf[0, len) into `h`, whose `fields` and
 * `max_fields` the caller sets. Returns SL_HTTP_DONE with `h` filled; SL_HTTP_MORE when
 * the empty line has not arrived yet and `len` <= `max_head`; SL_HTTP_TOO_LARGE past
 * `max_head` bytes or `max_fields` fields; SL_HTTP_BAD or
 * SL_HTTP_VERSION with `msg` saying what is wrong (naming the line or field). */
int sl_http_parse_head(const char *buf, size_t len, size_t max_head, sl_http_head_t *h, char *msg,
                       size_t msglen);

/* Scans a chunked body at buf[0, len). Returns SL_HTTP_DONE with *wire_len (the bytes of
 * the whole body, trailers and final empty line included) and *body_len (decoded size);
 * SL_HTTP_MORE; SL_HTTP_BAD with `msg`; SL_HTTP_TOO_LARGE when the decoded size passes
 * `max_body` (known as soon as a chunk size says so). */
int sl_http_scan_chunked(const char *buf, size_t len, size_t max_body, size_t *wire_len,
                         size_t *body_len, char *msg, size_t msglen);

/* Decodes a chunked body that sl_http_scan_chunked accepted (its `wire_len` bytes) into
 * `out`, which has room for its `body_len` bytes. */
void sl_http_decode_chunked(const char *buf, size_t wire_len, char *out);

/* Percent-decodes s[0, len) into `out` (room for len + 1) and NUL-terminates it. Returns
 * the decoded length, or -1 for a malformed escape or a NUL (raw or encoded). `+` stays `+`. */
ssize_t sl_http_pct_decode(const char *s, size_t len, char *out);

/* Case-insensitive comparison of a counted string with a NUL-terminated one. */
bool sl_http_token_eq(const char *s, size_t len, const char *lit);

#endif /* SL_HTTP_PARSE_H */
