/* httpd.h - sluiced's HTTP/1.1 transport: the listener, keep-alive connections, requests and
 * their answers (whole, or streamed in chunks), on one libevent loop.
 *
 * Why not evhttp: evhttp does several allocations, header-list copies, printf/scanf
 * calls and an epoll_ctl pair per request; at 50 busy connections that was half of
 * sluiced's CPU. Here a request costs one read, one write and one allocation (parsing
 * is node's http-parser, see http_parse.h), and a
 * connection's socket is always watched for reading, so a client that goes away while
 * its request waits (long-poll, stream, proxied call) is noticed at once.
 *
 * Contract: a request (sl_hreq_t) is valid from the `on_request` callback until it is
 * finished: sl_hreq_reply(), sl_hreq_end() or sl_hreq_abort(), or its `gone` callback
 * returning (the client closed the connection first). Answers written while the loop
 * reads go out after that loop turn's reads; others at once.
 * Requests on one connection are served one at a time, in order.
 */
#ifndef SL_HTTPD_H
#define SL_HTTPD_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/event.h>

#include "http_parse.h"

typedef struct sl_httpd sl_httpd_t;
typedef struct sl_hreq sl_hreq_t;

/* What one connection may cost; every one is a bound against a client that reads slowly,
 * sends slowly or opens too many connections. */
typedef struct sl_httpd_limits {
    size_t max_connections;          /* more are answered 503 and closed */
    size_t max_pending_output_bytes; /* answers waiting for the client beyond this: the
                                        connection's requests are not read until it drains */
    double write_timeout_s;          /* a backlog that does not move for this long: closed */
    double idle_timeout_s;           /* a keep-alive connection with nothing to do: closed */
    double head_timeout_s;           /* a request head must arrive within this, from its first
                                        byte (408) ... */
    double body_min_rate_bytes_per_s; /* ... and its body at this rate, after a grace of
                                         head_timeout_s (408) */
} sl_httpd_limits_t;

typedef struct sl_httpd_opts {
    const char *host; /* address to listen on (numeric or a name) */
    int port;         /* 0: any free port */
    size_t max_head_bytes;
    size_t max_fields; /* header fields per request */
    size_t max_body_bytes; /* larger bodies get 413 from the transport itself */
    /* Optional: a smaller body limit for one request, decided from its head before its
     * body is read (see sl_http_limits_t.body_limit_for); gets `ud`. */
    size_t (*body_limit_for)(sl_http_method_t method, const char *target, void *ud);
    sl_httpd_limits_t limits;
    void (*on_request)(sl_hreq_t *req, void *ud);
    void *ud;
} sl_httpd_opts_t;

/* Listens on opts->host:port. Returns the server, or NULL with `err` naming the address
 * and the reason. Accepted sockets inherit TCP_NODELAY from the listener. */
sl_httpd_t *sl_httpd_new(struct event_base *base, const sl_httpd_opts_t *opts, char *err,
                         size_t errlen);
/* The port listened on (the chosen one when opts->port was 0), or -1 after stop. */
int sl_httpd_port(const sl_httpd_t *d);
/* True when the address listened on is a loopback one (127.0.0.0/8, ::1, or 127/8 mapped
 * into IPv6), as bound, whatever name the configuration gave. */
bool sl_httpd_is_loopback(const sl_httpd_t *d);
/* Changes the transport's body limit for requests not yet read. */
void sl_httpd_set_max_body(sl_httpd_t *d, size_t max_body_bytes);
/* Changes the per-connection limits; open connections follow them from now on. */
void sl_httpd_set_limits(sl_httpd_t *d, const sl_httpd_limits_t *limits);
/* Stops accepting connections. Idle connections are closed; the others are closed after
 * their current answer (which says Connection: close). */
void sl_httpd_stop_accepting(sl_httpd_t *d);
/* Closes every connection (each current request's `gone` runs) and frees the server. */
void sl_httpd_free(sl_httpd_t *d);

/* ---- a request ------------------------------------------------------------------------ */

sl_http_method_t sl_hreq_method(const sl_hreq_t *r);
/* The request-target as sent, NUL-terminated. */
const char *sl_hreq_target(const sl_hreq_t *r);
/* The path (target up to '?', still percent-encoded) and its length. */
const char *sl_hreq_path(const sl_hreq_t *r, size_t *len);
/* The query (after '?'), NUL-terminated, or NULL when there is none. */
const char *sl_hreq_query(const sl_hreq_t *r);
/* The first field named `name` (any case), NUL-terminated, or NULL. */
const char *sl_hreq_header(const sl_hreq_t *r, const char *name);
size_t sl_hreq_header_count(const sl_hreq_t *r);
/* Field `i` (< sl_hreq_header_count), both NUL-terminated. */
void sl_hreq_header_at(const sl_hreq_t *r, size_t i, const char **name, const char **value);
/* The body (chunked bodies decoded); never NULL, NUL-terminated for convenience. */
const char *sl_hreq_body(const sl_hreq_t *r, size_t *len);

/* `gone` runs once if the client closes the connection before `r` is finished; `r` is
 * freed when it returns and must not be used from then on. */
void sl_hreq_on_gone(sl_hreq_t *r, void (*gone)(void *ud), void *ud);

/* `finished` runs once when `r` is finished, however that happens (answered, aborted,
 * the client gone: after `gone`), with the status answered (0: none was); `r` may be read
 * during the call, and is freed when it returns. NULL removes it. */
void sl_hreq_on_finish(sl_hreq_t *r, void (*finished)(void *ud, const sl_hreq_t *r, int status),
                       void *ud);
/* `r` waits (a long-poll, a queued call, a stream): a client that shuts only its write side
 * is still answered, but one that closed altogether must be noticed while `r` waits, so once
 * the connection is half-closed an interim "100 Continue" is written before the answer (a
 * closed socket answers it with a reset, and `gone` runs). Unwatched requests of a
 * half-closed connection are simply answered. May close the connection (HTTP/1.0 has no
 * 1xx: its half-close counts as gone), never inside this call. */
void sl_hreq_watch(sl_hreq_t *r);

/* ---- answering ------------------------------------------------------------------------ */

/* Adds a header to the answer. Names must be tokens and values free of CR, LF and NUL:
 * otherwise it returns -1 and adds nothing. */
int sl_hreq_add_header(sl_hreq_t *r, const char *name, const char *value);
/* True when the answer already has a header `name` (any case). */
bool sl_hreq_has_header(const sl_hreq_t *r, const char *name);
/* Answers with a whole body (Content-Type `content_type` unless a header set one) and
 * finishes `r`. */
void sl_hreq_reply(sl_hreq_t *r, int status, const char *content_type, const void *body,
                   size_t len);
/* Starts a streamed answer (chunked; HTTP/1.0 clients get the bytes until close). */
void sl_hreq_start(sl_hreq_t *r, int status, const char *content_type);
/* Sends part of a streamed answer. */
void sl_hreq_send(sl_hreq_t *r, const void *data, size_t len);
/* Ends a streamed answer and finishes `r`. */
void sl_hreq_end(sl_hreq_t *r);
/* Bytes of answer written by the server but not yet taken by the client's socket. */
size_t sl_hreq_backlog(const sl_hreq_t *r);
/* `drained` runs (from the loop) each time a backlog has been fully written. */
void sl_hreq_on_drained(sl_hreq_t *r, void (*drained)(void *ud), void *ud);
/* Closes the connection without (the rest of) an answer and finishes `r`; `gone` does
 * not run. */
void sl_hreq_abort(sl_hreq_t *r);

#endif /* SL_HTTPD_H */
