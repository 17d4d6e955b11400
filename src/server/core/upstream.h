/* upstream.h - HTTP(S) calls to providers: libcurl's multi interface driven by sluiced's libevent loop.
 *
 * One sl_upstream_t per event loop owns a curl multi handle (and so its connection
 * cache: calls to one provider reuse kept-alive TLS connections). Each call is an
 * sl_upstream_xfer_t that reports, in this order: the final response's status and
 * headers once, body pieces as they arrive (the receiver may refuse a piece to pause
 * the transfer: backpressure), and then `on_done` exactly once, unless the caller
 * cancelled it first. Every callback runs on the event loop, never from inside
 * another upstream function.
 */
#ifndef SL_UPSTREAM_H
#define SL_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;

typedef struct sl_upstream sl_upstream_t;
typedef struct sl_upstream_xfer sl_upstream_xfer_t;

/* Results passed to on_done. */
enum {
    SL_UPSTREAM_OK = 0,        /* the whole response arrived */
    SL_UPSTREAM_ECONNECT = -1, /* no connection (DNS, refused, TLS handshake or certificate) */
    SL_UPSTREAM_ETIMEOUT = -2, /* connect timeout, or no byte for idle_timeout_s */
    SL_UPSTREAM_EIO = -3,      /* the connection broke or the response was malformed */
    SL_UPSTREAM_ETOOBIG = -4,  /* refused by the receiver (see on_body) */
};

/* What the receiver is told. `ud` is the request's user data. */
typedef struct sl_upstream_cbs {
    /* The final response (never a 1xx): status and headers, names lower-case and values
     * trimmed; arrays valid during the call only. Called once, before any body. */
    void (*on_headers)(void *ud, int status, const char *const *names, const char *const *values,
                       size_t n);
    /* A piece of the body. Return 1 when consumed; 0 to pause the transfer (the same
     * bytes come again after sl_upstream_resume()); -1 to abort it (on_done follows
     * with SL_UPSTREAM_ETOOBIG). */
    int (*on_body)(void *ud, const char *data, size_t len);
    /* Exactly once, last (not after sl_upstream_cancel()). `request_sent`: whether any
     * of the request reached the network (false: the provider never saw the call).
     * `errmsg` names what failed ("" on success). The transfer is freed after it. */
    void (*on_done)(void *ud, int result, bool request_sent, const char *errmsg);
} sl_upstream_cbs_t;

/* One call. Strings and arrays are copied by sl_upstream_start() except `body`, which
 * must stay valid and unchanged until on_done or sl_upstream_cancel(). */
typedef struct sl_upstream_request {
    const char *method;          /* "POST" or "GET" */
    const char *url;             /* http:// or https:// */
    const char *const *headers;  /* "Name: value" lines sent as they are */
    size_t n_headers;
    const char *body;            /* may be NULL with body_len 0 */
    size_t body_len;
    const char *ca_file;         /* PEM bundle to verify the server with; NULL = system CAs */
    double connect_timeout_s;    /* > 0 */
    double idle_timeout_s;       /* > 0: no byte received for this long fails the call
                                    (not counted while paused by the receiver) */
} sl_upstream_request_t;

/* Creates the upstream client on `base`. Returns NULL when libcurl cannot be set up
 * (curl_global_init is done here once per process). Free with sl_upstream_free(). */
sl_upstream_t *sl_upstream_new(struct event_base *base);

/* Cancels every transfer still running (without callbacks) and frees `u`. NULL is allowed. */
void sl_upstream_free(sl_upstream_t *u);

/* Starts a call. Returns the transfer (owned by `u` until on_done or cancel), or NULL
 * when it cannot start (out of memory, bad URL); then no callback runs and `err`
 * (errlen bytes) says why. */
sl_upstream_xfer_t *sl_upstream_start(sl_upstream_t *u, const sl_upstream_request_t *req,
                                      const sl_upstream_cbs_t *cbs, void *ud, char *err,
                                      size_t errlen);

/* Resumes a transfer paused by on_body returning 0. The refused bytes may be
 * delivered before this returns. No-op when it is not paused. */
void sl_upstream_resume(sl_upstream_xfer_t *x);

/* Stops a transfer and frees it; no callback runs afterwards. Safe from inside its
 * own callbacks (the transfer is then torn down when the callback returns). */
void sl_upstream_cancel(sl_upstream_xfer_t *x);

/* Seconds from sl_upstream_start() until the request began to be written (after the
 * connection and TLS were set up, or a kept connection was taken): when the provider can
 * first see the call. Negative when not known yet. Valid in the callbacks. */
double sl_upstream_sent_after_s(sl_upstream_xfer_t *x);

/* Transfers running now (for tests and metrics). */
size_t sl_upstream_running(const sl_upstream_t *u);

#endif /* SL_UPSTREAM_H */
