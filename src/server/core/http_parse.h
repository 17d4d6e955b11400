/* http_parse.h - HTTP/1.1 requests assembled from bytes as they arrive, with node's
 * http-parser (Debian's libhttp-parser) doing the parsing: one reader per connection
 * gathers a whole request (target, fields, body) within limits and stops after it, so
 * pipelined requests are served one at a time. No I/O: the transport (httpd.c) feeds it,
 * and so do the unit tests and the fuzz target.
 *
 * http-parser runs with its strict defaults: Content-Length together with
 * Transfer-Encoding, differing Content-Lengths, codings other than a final `chunked`
 * and invalid header bytes are refused (request smuggling). This file adds the limits,
 * the version check (HTTP/1.0 and 1.1 only) and messages naming what is wrong.
 */
#ifndef SL_HTTP_PARSE_H
#define SL_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum sl_http_method {
    SL_HTTP_OTHER = 0, /* a method http-parser knows that this server does not serve */
    SL_HTTP_GET,
    SL_HTTP_HEAD,
    SL_HTTP_POST,
    SL_HTTP_PUT,
    SL_HTTP_DELETE,
    SL_HTTP_PATCH,
    SL_HTTP_OPTIONS,
} sl_http_method_t;

/* What sl_http_reader_feed says. */
enum {
    SL_HTTP_DONE = 1,       /* a whole request is ready */
    SL_HTTP_MORE = 0,       /* everything was used; more bytes are needed */
    SL_HTTP_BAD = -1,       /* malformed: 400 */
    SL_HTTP_TOO_LARGE = -2, /* head over its limits: 431 */
    SL_HTTP_BODY_TOO_LARGE = -3, /* body over its limit: 413 */
    SL_HTTP_VERSION = -4,   /* not HTTP/1.0 or 1.1: 505 */
};

typedef struct sl_http_field {
    const char *name; /* NUL-terminated, as sent */
    const char *value; /* NUL-terminated, without surrounding blanks */
} sl_http_field_t;

/* A whole request; every pointer is valid until sl_http_reader_next or _free. */
typedef struct sl_http_request {
    sl_http_method_t method;
    int minor;              /* HTTP/1.minor */
    bool keep_alive;        /* the connection may serve another request after this one */
    const char *target;     /* the request-target, NUL-terminated */
    size_t target_len;
    const sl_http_field_t *fields;
    size_t n_fields;
    const char *body; /* chunked bodies decoded; NUL-terminated for convenience */
    size_t body_len;
} sl_http_request_t;

typedef struct sl_http_limits {
    size_t max_head_bytes; /* request line and fields */
    size_t max_fields;
    size_t max_body_bytes; /* the most any request may send */
    /* Optional: the body limit of one request, asked once its head is complete (before
     * any of its body is read) with its method and NUL-terminated target; the smaller of
     * this and max_body_bytes applies. */
    size_t (*body_limit_for)(sl_http_method_t method, const char *target, void *ud);
    void *body_limit_ud;
} sl_http_limits_t;

typedef struct sl_http_reader sl_http_reader_t;

/* A reader for one connection, or NULL when out of memory. */
sl_http_reader_t *sl_http_reader_new(const sl_http_limits_t *limits);
void sl_http_reader_free(sl_http_reader_t *r);
/* Changes the body limit for requests whose head has not been read yet. */
void sl_http_reader_set_max_body(sl_http_reader_t *r, size_t max_body_bytes);

/* Feeds data[0, len) and returns how many bytes were used. *rc is SL_HTTP_DONE when a
 * request is complete (bytes after it are left unused; read it with
 * sl_http_reader_request, then call sl_http_reader_next before feeding more),
 * SL_HTTP_MORE, or an error with `msg` saying what is wrong (the reader is then spent:
 * the connection must close). */
size_t sl_http_reader_feed(sl_http_reader_t *r, const char *data, size_t len, int *rc, char *msg,
                           size_t msglen);
/* True once, when the head of a request with `Expect: 100-continue` is complete and its
 * body has not arrived yet: the caller sends "100 Continue". */
bool sl_http_reader_take_continue(sl_http_reader_t *r);
/* True while part of a request has been fed but it is not complete. */
bool sl_http_reader_partial(const sl_http_reader_t *r);
/* True while the head of a request is complete and its body is not: *body_bytes is then
 * the body received so far (decoded, for a chunked body). */
bool sl_http_reader_in_body(const sl_http_reader_t *r, size_t *body_bytes);
/* The request after SL_HTTP_DONE. */
const sl_http_request_t *sl_http_reader_request(const sl_http_reader_t *r);
/* Readies the reader for the next request on the connection. */
void sl_http_reader_next(sl_http_reader_t *r);

/* Splits a request-target into its path and query (absolute-form targets lose their
 * scheme and authority): offsets into `target`; *query_off is 0 when there is none.
 * A target http-parser cannot read as a URL is all path. */
void sl_http_split_target(const char *target, size_t len, size_t *path_off, size_t *path_len,
                          size_t *query_off, size_t *query_len);

/* The standard reason phrase of `status` (http-parser's table). */
const char *sl_http_reason(int status);

#endif /* SL_HTTP_PARSE_H */
