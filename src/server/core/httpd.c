/* httpd.c - sluiced's HTTP/1.1 transport: listener, connections, requests, answers (httpd.h).
 *
 * A connection is one socket with two events: reading (on until the input ends,
 * level-triggered, so the reset of a client whose request is waiting is seen at once) and
 * writing (on only while an answer is backed up). An end of input after whole requests is
 * a half-close, not a departure: what was read is answered, then the connection closes; a
 * request that waits is probed with an interim 100 so that a client that closed
 * altogether (its FIN looks the same) is still noticed (watch_half_closed). A read takes everything the socket has; the requests in
 * it are parsed (http_parse.c, on http-parser) and handed to `on_request` one at a time.
 * Answers given during the reads of one loop turn are sent after all of them, one send
 * per connection, back to back (on_flush: a client process on another core woken by the
 * first finds the rest, instead of one wake-up per answer). Answers given later (a
 * long-poll granted by a timer) are sent at once.
 *
 * Connections are freed only from the loop's own callbacks (read, write, resume, sweep),
 * never inside an sl_hreq_* call: those mark the connection and activate its write event.
 * Errors that leave request bytes unread close "lingering": the write side is shut, input
 * is discarded until the client closes or LINGER_S passes, so the client reads the error
 * instead of a reset.
 *
 * What a connection may cost is bounded (sl_httpd_limits_t), against clients that never
 * read, send slowly or open connections without end: once max_pending_output_bytes of
 * answers wait for a client, its next requests are not parsed and, once READ_AHEAD_BYTES of
 * them are buffered, not read either, until the backlog drains; a backlog that does not move
 * for write_timeout_s closes the connection; a head must arrive within head_timeout_s of its
 * first byte and a body at body_min_rate_bytes_per_s (408 otherwise); a body over the
 * request's own limit is refused when its head arrives; and past max_connections a new
 * connection is answered 503 and closed. The sweep, once a second, enforces the times.
 */
#include "httpd.h"
#include "log.h"
#include "netaddr.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/listener.h>

#define READ_MIN_SPACE_BYTES 4096  /* free room ensured before each read */
#define LINGER_S             2.0   /* how long a lingering close waits for the client's close */
#define LISTEN_BACKLOG       4096  /* capped by net.core.somaxconn */
#define ACCEPT_RETRY_S       0.1   /* after running out of file descriptors */
#define READ_AHEAD_BYTES     65536 /* input buffered past what may be parsed before reads pause */
#define READ_BATCH_BYTES     65536 /* input read before it is parsed, per wake-up */
#define KEEP_BUFFER_BYTES    65536 /* an emptied buffer larger than this is given back */
/* Over-cap connections kept open to hear their 503 (at most a quarter of the cap more). */
#define REJECT_EXTRA_CONNS   64

typedef struct hbuf {
    char *data;
    size_t off, len, cap; /* unread bytes are data[off, len) */
} hbuf_t;

typedef struct conn conn_t;

typedef struct hfield {
    char *name;
    char *value;
} hfield_t;

struct sl_hreq {
    conn_t *conn;
    sl_http_method_t method;
    bool keep_alive;
    bool http10;
    bool streaming; /* a streamed answer was started */
    bool chunked;   /* ... in chunked coding */
    char *target;   /* NUL-terminated */
    size_t path_off, path_len;
    char *query; /* NULL: none */
    hfield_t *fields;
    size_t n_fields;
    char *body;
    size_t body_len;
    hbuf_t out_headers; /* "Name: value\r\n" lines */
    void (*gone)(void *ud);
    void *gone_ud;
    void (*drained)(void *ud);
    void *drained_ud;
    bool watched; /* the request waits: a client that closes must be noticed (probe) */
    int status;   /* the status answered, 0 before an answer */
    void (*finished)(void *ud, const sl_hreq_t *r, int status);
    void *finished_ud;
};

struct conn {
    sl_httpd_t *d;
    evutil_socket_t fd;
    struct event *rev, *wev, *resume;
    struct event *reset_watch; /* half-closed: edge-triggered, wakes on the client's reset */
    bool reset_watch_added;
    bool probed;               /* half-closed: the interim 100 was sent */
    hbuf_t in, out;             /* in: bytes not yet given to the reader */
    sl_http_reader_t *reader;   /* the request being received */
    sl_hreq_t *cur;             /* the request being served */
    double last_active_s;
    double linger_since_s;
    double head_started_s;   /* the current request's first byte was parsed; 0: none */
    double body_started_s;   /* its head was complete; 0: not in a body */
    double write_progress_s; /* the backlog began or last moved */
    bool reading;       /* inside input processing: answers are sent at its end */
    bool wev_added;     /* the write event is watching a backlog */
    bool backlogged;    /* a send came up short since the last `drained` */
    bool close_after;   /* close once the answers are written */
    bool linger;        /* ... lingering (request bytes may be left unread) */
    bool lingering;     /* write side shut; discarding input */
    bool eof;           /* the client shut its write side: no more requests */
    bool dead;          /* close at the next loop turn, writing nothing more */
    bool read_paused;   /* too much input queued behind what may be parsed */
    bool output_full;   /* max_pending_output_bytes reached: requests wait unparsed */
    bool flush_queued;              /* on the server's list of answers to send */
    conn_t *flush_prev, *flush_next;
    conn_t *prev, *next;
};

struct sl_httpd {
    struct event_base *base;
    struct evconnlistener *listener;
    struct event *accept_retry;
    struct event *sweep;
    int port;
    bool draining; /* not accepting: every answer closes its connection */
    sl_httpd_opts_t opts;
    bool loopback; /* the address bound is a loopback one */
    conn_t *conns;
    size_t n_conns;
    struct event *flusher; /* sends the answers of a loop turn after all its reads */
    conn_t *flush_head;
    time_t date_sec;
    char date[48]; /* "Date: ...\r\n" for date_sec */
    size_t date_len;
};

/* ---- buffers ---------------------------------------------------------------------------- */

static int hbuf_reserve(hbuf_t *b, size_t need)
{
    if (b->cap - b->len >= need) return 0;
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->cap - b->len >= need) return 0;
    }
    size_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < need) {
        if (cap > SIZE_MAX / 4) return -1;
        cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static int hbuf_add(hbuf_t *b, const void *p, size_t n)
{
    if (hbuf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static int hbuf_adds(hbuf_t *b, const char *s)
{
    return hbuf_add(b, s, strlen(s));
}

static size_t hbuf_pending(const hbuf_t *b)
{
    return b->len - b->off;
}

static void hbuf_consume(hbuf_t *b, size_t n)
{
    b->off += n;
    if (b->off == b->len) b->off = b->len = 0;
}

static void hbuf_free(hbuf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* Decimal digits of `v` into `buf` (room for 20); returns their count. */
static size_t fmt_u64(char *buf, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

/* ---- time ------------------------------------------------------------------------------- */

static double now_s(const sl_httpd_t *d)
{
    struct timeval tv;
    event_base_gettimeofday_cached(d->base, &tv);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* The Date header for this second (RFC 9110 section 6.6.1), reformatted once a second. */
static const char *date_header(sl_httpd_t *d, size_t *len)
{
    struct timeval tv;
    event_base_gettimeofday_cached(d->base, &tv);
    if (tv.tv_sec != d->date_sec || d->date_len == 0) {
        struct tm tm;
        time_t t = tv.tv_sec;
        gmtime_r(&t, &tm);
        d->date_len = strftime(d->date, sizeof(d->date), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        d->date_sec = tv.tv_sec;
    }
    *len = d->date_len;
    return d->date;
}

/* ---- connections ------------------------------------------------------------------------ */

static void on_read(evutil_socket_t fd, short what, void *ud);
static void on_write(evutil_socket_t fd, short what, void *ud);
static void on_resume(evutil_socket_t fd, short what, void *ud);

static void req_free(sl_hreq_t *r)
{
    if (r->finished) r->finished(r->finished_ud, r, r->status);
    hbuf_free(&r->out_headers);
    free(r);
}

/* Frees `c`; the current request's `gone` runs first when `call_gone`. */
static void conn_free(conn_t *c, bool call_gone)
{
    sl_httpd_t *d = c->d;
    sl_hreq_t *r = c->cur;
    if (r) {
        c->cur = NULL;
        r->conn = NULL;
        if (call_gone && r->gone) r->gone(r->gone_ud);
        req_free(r);
    }
    if (c->prev)
        c->prev->next = c->next;
    else if (d->conns == c)
        d->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    d->n_conns--;
    if (c->flush_queued) {
        if (c->flush_prev)
            c->flush_prev->flush_next = c->flush_next;
        else
            d->flush_head = c->flush_next;
        if (c->flush_next) c->flush_next->flush_prev = c->flush_prev;
    }
    event_free(c->rev);
    event_free(c->wev);
    if (c->resume) event_free(c->resume);
    if (c->reset_watch) event_free(c->reset_watch);
    sl_http_reader_free(c->reader);
    evutil_closesocket(c->fd);
    hbuf_free(&c->in);
    hbuf_free(&c->out);
    free(c);
}

/* Marks `c` for closing at the next loop turn (safe inside any callback). */
static void conn_kill(conn_t *c)
{
    c->dead = true;
    event_active(c->wev, EV_WRITE, 0);
}

/* Sends what `out` holds. A short send arms the write event; an error kills `c`. When a
 * backlog empties outside the write callback, that callback is run to report `drained`. */
static void conn_flush(conn_t *c, bool from_write_cb)
{
    if (c->dead) return;
    while (hbuf_pending(&c->out) > 0) {
        ssize_t n = send(c->fd, c->out.data + c->out.off, hbuf_pending(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            hbuf_consume(&c->out, (size_t)n);
            c->write_progress_s = now_s(c->d);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->backlogged) c->write_progress_s = now_s(c->d);
            c->backlogged = true;
            if (!c->wev_added) {
                /* One registration per descriptor is edge- or level-triggered: while the
                 * write event watches, a reset shows as its send's error. */
                if (c->reset_watch_added) {
                    event_del(c->reset_watch);
                    c->reset_watch_added = false;
                }
                event_add(c->wev, NULL);
                c->wev_added = true;
            }
            return;
        }
        conn_kill(c);
        return;
    }
    if (c->out.cap > KEEP_BUFFER_BYTES) hbuf_free(&c->out); /* after a burst */
    if (c->wev_added) {
        event_del(c->wev);
        c->wev_added = false;
        if (c->reset_watch && event_add(c->reset_watch, NULL) == 0) c->reset_watch_added = true;
    }
    if (!from_write_cb && (c->backlogged || (c->close_after && !c->cur)))
        event_active(c->wev, EV_WRITE, 0);
}

/* The answers are written and the connection is to close: now, or lingering. */
static void conn_close_or_linger(conn_t *c)
{
    if (!c->linger || c->eof) {
        conn_free(c, true);
        return;
    }
    shutdown(c->fd, SHUT_WR);
    c->close_after = false;
    c->lingering = true;
    c->linger_since_s = now_s(c->d);
    c->in.off = c->in.len = 0;
    if (c->read_paused) {
        event_add(c->rev, NULL);
        c->read_paused = false;
    }
}

/* JSON string body of `s`: quotes and backslashes escaped, other bytes outside printable
 * ASCII replaced by '?'. */
static void add_json_text(hbuf_t *b, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            hbuf_add(b, e, 2);
        } else {
            char o = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
            hbuf_add(b, &o, 1);
        }
    }
}

/* Writes the head of an answer: status line, Date, Content-Type, framing, the request's
 * own headers, Connection. `len` < 0: a streamed answer. Returns 0, or -1 out of memory. */
static int put_head(conn_t *c, sl_hreq_t *r, int status, const char *ctype, int64_t len,
                    bool chunked, bool close)
{
    hbuf_t *o = &c->out;
    char num[24];
    size_t dlen;
    const char *date = date_header(c->d, &dlen);
    const char *reason = sl_http_reason(status);
    if (status < 100 || status > 999) status = 500;
    char line[64] = "HTTP/1.1 ";
    size_t n = 9 + fmt_u64(line + 9, (uint64_t)status);
    line[n++] = ' ';
    int rc = hbuf_add(o, line, n) | hbuf_adds(o, reason) | hbuf_add(o, "\r\n", 2) |
             hbuf_add(o, date, dlen);
    if (ctype && !(r && sl_hreq_has_header(r, "Content-Type")))
        rc |= hbuf_add(o, "Content-Type: ", 14) | hbuf_adds(o, ctype) | hbuf_add(o, "\r\n", 2);
    if (len >= 0 && status != 304 && status != 204) { /* those have no content */
        rc |= hbuf_add(o, "Content-Length: ", 16) | hbuf_add(o, num, fmt_u64(num, (uint64_t)len)) |
              hbuf_add(o, "\r\n", 2);
    } else if (chunked) {
        rc |= hbuf_add(o, "Transfer-Encoding: chunked\r\n", 28);
    }
    if (r && hbuf_pending(&r->out_headers))
        rc |= hbuf_add(o, r->out_headers.data + r->out_headers.off, hbuf_pending(&r->out_headers));
    if (close)
        rc |= hbuf_add(o, "Connection: close\r\n", 19);
    else if (r && r->http10)
        rc |= hbuf_add(o, "Connection: keep-alive\r\n", 24);
    rc |= hbuf_add(o, "\r\n", 2);
    return rc ? -1 : 0;
}

/* An error the transport answers itself (the request never reaches `on_request`); the
 * connection then closes, lingering. */
static void transport_error(conn_t *c, int status, const char *type, const char *msg)
{
    hbuf_t body = {0};
    hbuf_adds(&body, "{\"error\":{\"type\":\"");
    hbuf_adds(&body, type);
    hbuf_adds(&body, "\",\"message\":\"");
    add_json_text(&body, msg);
    hbuf_adds(&body, "\"}}\n");
    if (!body.data || put_head(c, NULL, status, "application/json", (int64_t)body.len, false, true) < 0 ||
        hbuf_add(&c->out, body.data, body.len) < 0)
        c->dead = true;
    hbuf_free(&body);
    c->close_after = true;
    c->linger = true;
}

/* Copies a request the reader assembled into one allocation the request owns. */
static sl_hreq_t *req_new(conn_t *c, const sl_http_request_t *q)
{
    size_t need = sizeof(sl_hreq_t) + q->n_fields * sizeof(hfield_t) + q->target_len + 1 +
                  q->body_len + 1;
    for (size_t i = 0; i < q->n_fields; i++)
        need += strlen(q->fields[i].name) + strlen(q->fields[i].value) + 2;
    char *mem = malloc(need);
    if (!mem) return NULL;
    sl_hreq_t *r = (sl_hreq_t *)(void *)mem;
    memset(r, 0, sizeof(*r));
    r->conn = c;
    r->method = q->method;
    r->keep_alive = q->keep_alive;
    r->http10 = q->minor == 0;
    r->fields = (hfield_t *)(void *)(mem + sizeof(sl_hreq_t));
    r->n_fields = q->n_fields;
    char *s = (char *)(r->fields + q->n_fields);
    r->target = s;
    memcpy(s, q->target, q->target_len + 1);
    s += q->target_len + 1;
    size_t query_off, query_len;
    sl_http_split_target(r->target, q->target_len, &r->path_off, &r->path_len, &query_off,
                         &query_len);
    if (query_off) {
        r->query = r->target + query_off;
        r->query[query_len] = '\0'; /* cuts a #fragment, if a client sent one */
    }
    for (size_t i = 0; i < q->n_fields; i++) {
        size_t nn = strlen(q->fields[i].name) + 1, vn = strlen(q->fields[i].value) + 1;
        r->fields[i].name = memcpy(s, q->fields[i].name, nn);
        s += nn;
        r->fields[i].value = memcpy(s, q->fields[i].value, vn);
        s += vn;
    }
    r->body = s;
    r->body_len = q->body_len;
    memcpy(s, q->body, q->body_len);
    s[q->body_len] = '\0';
    return r;
}

/* True while the answers waiting for the client are at the cap: no request is parsed. */
static bool output_at_cap(const conn_t *c)
{
    return hbuf_pending(&c->out) >= c->d->opts.limits.max_pending_output_bytes;
}

/* Parses and hands on the requests waiting in `c->in`, one at a time. */
static void process_input(conn_t *c)
{
    sl_httpd_t *d = c->d;
    c->reading = true;
    while (!c->cur && !c->dead && !c->close_after && hbuf_pending(&c->in) > 0) {
        if (output_at_cap(c)) {
            c->output_full = true;
            break;
        }
        int rc;
        char msg[256];
        size_t used = sl_http_reader_feed(c->reader, c->in.data + c->in.off,
                                          hbuf_pending(&c->in), &rc, msg, sizeof(msg));
        hbuf_consume(&c->in, used);
        if (rc != SL_HTTP_DONE && c->head_started_s == 0) c->head_started_s = now_s(d);
        size_t body_bytes;
        if (rc == SL_HTTP_MORE && c->body_started_s == 0 &&
            sl_http_reader_in_body(c->reader, &body_bytes))
            c->body_started_s = now_s(d);
        if (rc == SL_HTTP_MORE) {
            if (sl_http_reader_take_continue(c->reader)) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (hbuf_add(&c->out, cont, sizeof(cont) - 1) < 0) c->dead = true;
            }
            break;
        }
        if (rc != SL_HTTP_DONE) {
            int status = rc == SL_HTTP_TOO_LARGE        ? 431
                         : rc == SL_HTTP_BODY_TOO_LARGE ? 413
                         : rc == SL_HTTP_VERSION        ? 505
                                                        : 400;
            transport_error(c, status, status == 413 ? "body_too_large" : "invalid_request", msg);
            break;
        }
        sl_hreq_t *r = req_new(c, sl_http_reader_request(c->reader));
        sl_http_reader_next(c->reader);
        c->head_started_s = c->body_started_s = 0;
        if (!r) {
            transport_error(c, 503, "out_of_memory", "server: out of memory");
            break;
        }
        c->cur = r;
        d->opts.on_request(r, d->opts.ud);
    }
    if (hbuf_pending(&c->in) == 0 && c->in.cap > KEEP_BUFFER_BYTES) hbuf_free(&c->in);
    c->reading = false;
}

/* True when the client's end of `c` is gone altogether: its socket answered our bytes with
 * a reset. A client that only shut its write side (a FIN, the same as a close's) still reads. */
static bool peer_reset(const conn_t *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP));
}

static void on_reset_watch(evutil_socket_t fd, short what, void *ud)
{
    conn_t *c = ud;
    (void)fd;
    (void)what;
    if (c->dead) return; /* the write callback frees it */
    if (peer_reset(c)) conn_free(c, true);
}

/* `c` is half-closed while its request waits (sl_hreq_watch): the client may still read, or
 * may have closed altogether, which looks the same until sluiced writes. So an interim
 * "100 Continue" is written (RFC 9110 15.2: a client parses 1xx answers it did not ask for);
 * a closed socket answers it with a reset, which an edge-triggered watch sees at once (the
 * sweep, once a second, where the event backend has no edge triggering). A streamed answer
 * already under way is its own probe. HTTP/1.0 has no 1xx: its client counts as gone.
 * Returns 0, or -1 when the client is to be taken for gone. */
static int watch_half_closed(conn_t *c)
{
    sl_hreq_t *r = c->cur;
    if (!c->reset_watch && (event_base_get_features(c->d->base) & EV_FEATURE_ET)) {
        c->reset_watch =
            event_new(c->d->base, c->fd, EV_READ | EV_ET | EV_PERSIST, on_reset_watch, c);
        if (c->reset_watch && !c->wev_added && event_add(c->reset_watch, NULL) == 0)
            c->reset_watch_added = true;
    }
    if (c->probed || r->streaming) return 0;
    if (r->http10) return -1;
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (hbuf_add(&c->out, cont, sizeof(cont) - 1) < 0) return -1;
    c->probed = true;
    return 0;
}

/* After input was processed: send the answers, close or pause as they say. An end of input
 * after whole requests means "no more requests": those read are answered, then the
 * connection closes; in the middle of one, nothing is left to answer. */
static void after_input(conn_t *c)
{
    if (c->dead) {
        conn_free(c, true);
        return;
    }
    if (c->eof) {
        if (c->cur) {
            if (c->cur->watched && watch_half_closed(c) < 0) {
                conn_free(c, true);
                return;
            }
        } else if (!c->output_full) {
            c->close_after = true; /* what is left of the input is an unfinished request */
        }
    }
    if (hbuf_pending(&c->out) > 0 || (c->close_after && !c->cur)) {
        if (!c->flush_queued) {
            sl_httpd_t *d = c->d;
            c->flush_queued = true;
            c->flush_prev = NULL;
            c->flush_next = d->flush_head;
            if (d->flush_head) d->flush_head->flush_prev = c;
            d->flush_head = c;
            event_active(d->flusher, EV_TIMEOUT, 0);
        }
        if (c->close_after && !c->cur) return;
    }
    if ((c->cur || c->output_full) && !c->read_paused && !c->eof &&
        hbuf_pending(&c->in) > READ_AHEAD_BYTES) {
        event_del(c->rev);
        c->read_paused = true;
    }
}

/* Parsing may go on (a request finished, or a backlog drained below the cap): reads resume
 * and buffered requests are parsed at the next loop turn. */
static void conn_resume(conn_t *c)
{
    if (c->dead || c->close_after || c->lingering || c->cur) return;
    if (c->output_full) {
        if (output_at_cap(c)) return;
        c->output_full = false;
    }
    if (c->read_paused) {
        event_add(c->rev, NULL);
        c->read_paused = false;
    }
    /* Pipelined requests, or the close of a half-closed one: at the next loop turn. */
    if (hbuf_pending(&c->in) > 0 || c->eof) {
        if (!c->resume) c->resume = event_new(c->d->base, -1, 0, on_resume, c);
        if (c->resume)
            event_active(c->resume, EV_READ, 0);
        else
            conn_kill(c);
    }
}

/* After the loop turn's reads: every answer they produced goes out, back to back, so a
 * client woken by the first finds the others there (fewer wake-ups across cores). */
static void on_flush(evutil_socket_t fd, short what, void *ud)
{
    sl_httpd_t *d = ud;
    (void)fd;
    (void)what;
    while (d->flush_head) {
        conn_t *c = d->flush_head;
        d->flush_head = c->flush_next;
        if (d->flush_head) d->flush_head->flush_prev = NULL;
        c->flush_queued = false;
        c->flush_next = c->flush_prev = NULL;
        conn_flush(c, false); /* a backlog emptied here is reported by the write callback */
        if (c->dead) {
            conn_free(c, true);
            continue;
        }
        if (c->close_after && !c->cur && hbuf_pending(&c->out) == 0) {
            conn_close_or_linger(c);
            continue;
        }
        if (c->output_full) conn_resume(c);
    }
}

static void on_read(evutil_socket_t fd, short what, void *ud)
{
    conn_t *c = ud;
    (void)what;
    if (c->dead) return; /* the write callback frees it */
    for (;;) {
        if (hbuf_reserve(&c->in, READ_MIN_SPACE_BYTES) < 0) {
            conn_free(c, true);
            return;
        }
        size_t space = c->in.cap - c->in.len;
        ssize_t n = recv(fd, c->in.data + c->in.len, space, 0);
        if (n > 0) {
            c->last_active_s = now_s(c->d);
            if (c->lingering) continue; /* discarded */
            c->in.len += (size_t)n;
            /* Level-triggered: what is left is read after this much is parsed. */
            if ((size_t)n == space && hbuf_pending(&c->in) < READ_BATCH_BYTES) continue;
            break;
        }
        if (n == 0) {
            c->eof = true;
            event_del(c->rev);
            break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        conn_free(c, true);
        return;
    }
    if (c->lingering) {
        if (c->eof) conn_free(c, true);
        return;
    }
    if (!c->cur) process_input(c);
    after_input(c);
}

static void on_resume(evutil_socket_t fd, short what, void *ud)
{
    conn_t *c = ud;
    (void)fd;
    (void)what;
    if (c->dead || c->lingering) return;
    if (!c->cur) process_input(c);
    after_input(c);
}

static void on_write(evutil_socket_t fd, short what, void *ud)
{
    conn_t *c = ud;
    (void)fd;
    (void)what;
    if (c->dead) {
        conn_free(c, true);
        return;
    }
    conn_flush(c, true);
    if (c->dead) {
        conn_free(c, true);
        return;
    }
    if (hbuf_pending(&c->out) > 0) {
        if (c->output_full) conn_resume(c);
        return;
    }
    if (c->backlogged) {
        c->backlogged = false;
        if (c->cur && c->cur->drained) c->cur->drained(c->cur->drained_ud);
        if (c->dead) {
            conn_free(c, true);
            return;
        }
        if (hbuf_pending(&c->out) > 0) return;
    }
    if (c->close_after && !c->cur) {
        conn_close_or_linger(c);
        return;
    }
    if (c->output_full) conn_resume(c);
}

/* The request on `c` is finished: free it and carry on with the connection. */
static void req_finish(sl_hreq_t *r)
{
    conn_t *c = r->conn;
    c->cur = NULL;
    req_free(r);
    c->last_active_s = now_s(c->d);
    if (c->reading) return; /* process_input goes on and after_input sends */
    conn_flush(c, false);
    if (c->dead || c->close_after) return;
    if (output_at_cap(c)) {
        c->output_full = true; /* resumed by the write callback once it drains */
        return;
    }
    conn_resume(c);
}

/* The 503 of a connection over the cap, sent as it is accepted (no request is read). */
static void refuse_over_cap(conn_t *c)
{
    char msg[160];
    snprintf(msg, sizeof(msg),
             "server: %zu connections are open, the most allowed (server.max_connections); "
             "retry later",
             c->d->opts.limits.max_connections);
    transport_error(c, 503, "too_many_connections", msg);
    after_input(c);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *ud)
{
    sl_httpd_t *d = ud;
    (void)l;
    (void)sa;
    (void)socklen;
    size_t max = d->opts.limits.max_connections;
    size_t extra = max / 4 + 1 < REJECT_EXTRA_CONNS ? max / 4 + 1 : REJECT_EXTRA_CONNS;
    if (d->n_conns >= max + extra) {
        /* Even the 503s are at their bound: one try to send it, then closed at once (a
         * request already sent may turn the close into a reset), never out of descriptors. */
        static const char body[] = "{\"error\":{\"type\":\"too_many_connections\",\"message\":"
                                   "\"server: too many connections are open "
                                   "(server.max_connections); retry later\"}}\n";
        char busy[384];
        int n = snprintf(busy, sizeof(busy),
                         "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         sizeof(body) - 1, body);
        if (n > 0 && (size_t)n < sizeof(busy)) (void)send(fd, busy, (size_t)n, MSG_NOSIGNAL);
        evutil_closesocket(fd);
        return;
    }
    conn_t *c = calloc(1, sizeof(*c));
    if (c) {
        c->d = d;
        c->fd = fd;
        c->rev = event_new(d->base, fd, EV_READ | EV_PERSIST, on_read, c);
        c->wev = event_new(d->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
        sl_http_limits_t lim = {d->opts.max_head_bytes, d->opts.max_fields, d->opts.max_body_bytes,
                                d->opts.body_limit_for, d->opts.ud};
        c->reader = sl_http_reader_new(&lim);
    }
    if (!c || !c->rev || !c->wev || !c->reader || event_add(c->rev, NULL) < 0) {
        if (c && c->rev) event_free(c->rev);
        if (c && c->wev) event_free(c->wev);
        if (c) sl_http_reader_free(c->reader);
        free(c);
        evutil_closesocket(fd);
        return;
    }
    c->last_active_s = now_s(d);
    c->next = d->conns;
    if (d->conns) d->conns->prev = c;
    d->conns = c;
    if (++d->n_conns > d->opts.limits.max_connections) refuse_over_cap(c);
}

static void on_accept_retry(evutil_socket_t fd, short what, void *ud)
{
    sl_httpd_t *d = ud;
    (void)fd;
    (void)what;
    if (d->listener) evconnlistener_enable(d->listener);
}

static void on_accept_error(struct evconnlistener *l, void *ud)
{
    sl_httpd_t *d = ud;
    int err = EVUTIL_SOCKET_ERROR();
    static bool warned;
    if (!warned) {
        sl__log(SL_LOG_WARN, "accept: %s; pausing new connections briefly",
                evutil_socket_error_to_string(err));
        warned = true;
    }
    /* Out of descriptors: the pending connection stays readable, so wait instead of spinning. */
    evconnlistener_disable(l);
    struct timeval tv = {0, (suseconds_t)(ACCEPT_RETRY_S * 1e6)};
    event_add(d->accept_retry, &tv);
}

static void on_sweep(evutil_socket_t fd, short what, void *ud)
{
    sl_httpd_t *d = ud;
    (void)fd;
    (void)what;
    double now = now_s(d);
    const sl_httpd_limits_t *lim = &d->opts.limits;
    for (conn_t *c = d->conns, *next; c; c = next) {
        next = c->next;
        if (c->lingering) {
            if (now - c->linger_since_s > LINGER_S) conn_free(c, true);
            continue;
        }
        if (c->dead) continue;
        if (c->eof && c->cur && c->cur->watched && peer_reset(c)) {
            conn_free(c, true); /* without edge triggering, or while backlogged */
            continue;
        }
        if (hbuf_pending(&c->out) > 0) { /* answers not yet sent, or a backlog */
            if (c->backlogged && now - c->write_progress_s > lim->write_timeout_s)
                conn_free(c, true);
            continue;
        }
        if (c->cur || c->close_after) continue;
        char msg[192];
        size_t body_bytes;
        if (c->body_started_s > 0 && sl_http_reader_in_body(c->reader, &body_bytes)) {
            double earned_s =
                lim->head_timeout_s + (double)body_bytes / lim->body_min_rate_bytes_per_s;
            if (now - c->body_started_s <= earned_s) continue;
            snprintf(msg, sizeof(msg),
                     "request: the body arrived slower than %g bytes/s "
                     "(server.body_min_rate_bytes_per_s); %zu bytes in %.0f s",
                     lim->body_min_rate_bytes_per_s, body_bytes, now - c->body_started_s);
        } else if (c->head_started_s > 0) {
            if (now - c->head_started_s <= lim->head_timeout_s) continue;
            snprintf(msg, sizeof(msg),
                     "request: the head did not arrive within %g s of its first byte "
                     "(server.head_timeout_s)",
                     lim->head_timeout_s);
        } else {
            if (now - c->last_active_s > lim->idle_timeout_s) conn_free(c, true);
            continue;
        }
        transport_error(c, 408, "request_timeout", msg);
        after_input(c);
    }
}

/* ---- the server ------------------------------------------------------------------------- */

sl_httpd_t *sl_httpd_new(struct event_base *base, const sl_httpd_opts_t *opts, char *err,
                         size_t errlen)
{
    sl_httpd_t *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->base = base;
    d->opts = *opts;
    d->opts.host = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", opts->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(opts->host, port, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "listen: cannot resolve %s: %s", opts->host, gai_strerror(gai));
        free(d);
        return NULL;
    }
    int bind_errno = 0;
    for (struct addrinfo *a = ai; a && !d->listener; a = a->ai_next) {
        d->listener = evconnlistener_new_bind(
            base, on_accept, d, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
            LISTEN_BACKLOG, a->ai_addr, (int)a->ai_addrlen);
        if (!d->listener) bind_errno = errno;
    }
    freeaddrinfo(ai);
    if (!d->listener) {
        snprintf(err, errlen, "listen: cannot bind %s:%d: %s", opts->host, opts->port,
                 strerror(bind_errno));
        free(d);
        return NULL;
    }
    evconnlistener_set_error_cb(d->listener, on_accept_error);
    evutil_socket_t lfd = evconnlistener_get_fd(d->listener);
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    d->loopback = getsockname(lfd, (struct sockaddr *)&bound, &bound_len) == 0 &&
                  sl_net_addr_is_loopback((struct sockaddr *)&bound);
    /* Answers and streamed events are small writes that must not wait for the ACK of the
     * previous one (Nagle against the client's delayed ACK: 40 ms). Accepted sockets
     * inherit the option on Linux, so no request pays a setsockopt. */
    int one = 1;
    setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    d->port = opts->port;
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0)
        d->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    d->accept_retry = evtimer_new(base, on_accept_retry, d);
    /* The flusher, made active by the first read of a loop turn, joins the end of the
     * active queue: it runs after the other events that poll reported ready together
     * (never later: events found by the next poll queue behind it). */
    d->flusher = event_new(base, -1, 0, on_flush, d);
    d->sweep = event_new(base, -1, EV_PERSIST, on_sweep, d);
    struct timeval one_s = {1, 0};
    if (!d->accept_retry || !d->sweep || !d->flusher || event_add(d->sweep, &one_s) < 0) {
        snprintf(err, errlen, "out of memory");
        sl_httpd_free(d);
        return NULL;
    }
    return d;
}

int sl_httpd_port(const sl_httpd_t *d)
{
    return d->listener ? d->port : -1;
}

bool sl_httpd_is_loopback(const sl_httpd_t *d)
{
    return d->loopback;
}

void sl_httpd_set_limits(sl_httpd_t *d, const sl_httpd_limits_t *limits)
{
    d->opts.limits = *limits;
}

void sl_httpd_set_max_body(sl_httpd_t *d, size_t max_body_bytes)
{
    d->opts.max_body_bytes = max_body_bytes;
    for (conn_t *c = d->conns; c; c = c->next)
        sl_http_reader_set_max_body(c->reader, max_body_bytes);
}

void sl_httpd_stop_accepting(sl_httpd_t *d)
{
    if (d->listener) evconnlistener_free(d->listener);
    d->listener = NULL;
    d->draining = true;
    for (conn_t *c = d->conns; c; c = c->next)
        if (!c->cur && hbuf_pending(&c->in) == 0 && hbuf_pending(&c->out) == 0) conn_kill(c);
}

void sl_httpd_free(sl_httpd_t *d)
{
    if (!d) return;
    sl_httpd_stop_accepting(d);
    while (d->conns)
        conn_free(d->conns, true);
    if (d->accept_retry) event_free(d->accept_retry);
    if (d->sweep) event_free(d->sweep);
    if (d->flusher) event_free(d->flusher);
    free(d);
}

/* ---- requests --------------------------------------------------------------------------- */

sl_http_method_t sl_hreq_method(const sl_hreq_t *r)
{
    return r->method;
}

const char *sl_hreq_target(const sl_hreq_t *r)
{
    return r->target;
}

const char *sl_hreq_path(const sl_hreq_t *r, size_t *len)
{
    *len = r->path_len;
    return r->target + r->path_off;
}

const char *sl_hreq_query(const sl_hreq_t *r)
{
    return r->query;
}

const char *sl_hreq_header(const sl_hreq_t *r, const char *name)
{
    for (size_t i = 0; i < r->n_fields; i++)
        if (!strcasecmp(r->fields[i].name, name)) return r->fields[i].value;
    return NULL;
}

size_t sl_hreq_header_count(const sl_hreq_t *r)
{
    return r->n_fields;
}

void sl_hreq_header_at(const sl_hreq_t *r, size_t i, const char **name, const char **value)
{
    *name = r->fields[i].name;
    *value = r->fields[i].value;
}

const char *sl_hreq_body(const sl_hreq_t *r, size_t *len)
{
    *len = r->body_len;
    return r->body;
}

void sl_hreq_on_gone(sl_hreq_t *r, void (*gone)(void *ud), void *ud)
{
    r->gone = gone;
    r->gone_ud = ud;
}

void sl_hreq_watch(sl_hreq_t *r)
{
    conn_t *c = r->conn;
    r->watched = true;
    if (!c->eof || c->cur != r) return;
    if (watch_half_closed(c) < 0) {
        conn_kill(c);
        return;
    }
    if (!c->reading) conn_flush(c, false);
}

void sl_hreq_on_finish(sl_hreq_t *r, void (*finished)(void *ud, const sl_hreq_t *r, int status),
                       void *ud)
{
    r->finished = finished;
    r->finished_ud = ud;
}

void sl_hreq_on_drained(sl_hreq_t *r, void (*drained)(void *ud), void *ud)
{
    r->drained = drained;
    r->drained_ud = ud;
}

/* ---- answers ---------------------------------------------------------------------------- */

int sl_hreq_add_header(sl_hreq_t *r, const char *name, const char *value)
{
    size_t n = strlen(name);
    if (n == 0 || strcspn(value, "\r\n") != strlen(value)) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= 0x20 || ch >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", ch)) return -1;
    }
    hbuf_t *h = &r->out_headers;
    size_t mark = h->len;
    if (hbuf_add(h, name, n) < 0 || hbuf_add(h, ": ", 2) < 0 || hbuf_adds(h, value) < 0 ||
        hbuf_add(h, "\r\n", 2) < 0) {
        h->len = mark;
        return -1;
    }
    return 0;
}

bool sl_hreq_has_header(const sl_hreq_t *r, const char *name)
{
    size_t n = strlen(name);
    if (!r->out_headers.data) return false;
    const char *p = r->out_headers.data, *end = p + r->out_headers.len;
    while (p < end) {
        if ((size_t)(end - p) > n && p[n] == ':' && !strncasecmp(p, name, n)) return true;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    return false;
}

void sl_hreq_reply(sl_hreq_t *r, int status, const char *content_type, const void *body,
                   size_t len)
{
    conn_t *c = r->conn;
    /* Half-closed: the last request read is the last one answered. */
    bool close = !r->keep_alive || (c->eof && hbuf_pending(&c->in) == 0) || c->d->draining;
    r->status = status;
    if (put_head(c, r, status, content_type, (int64_t)len, false, close) < 0 ||
        (r->method != SL_HTTP_HEAD && hbuf_add(&c->out, body, len) < 0))
        conn_kill(c);
    if (close) c->close_after = true;
    req_finish(r);
}

void sl_hreq_start(sl_hreq_t *r, int status, const char *content_type)
{
    conn_t *c = r->conn;
    r->streaming = true;
    r->status = status;
    r->chunked = !r->http10;
    bool close = r->http10 || !r->keep_alive;
    if (put_head(c, r, status, content_type, -1, r->chunked, close) < 0) conn_kill(c);
    if (close) c->close_after = true;
    if (!c->reading) conn_flush(c, false);
}

void sl_hreq_send(sl_hreq_t *r, const void *data, size_t len)
{
    conn_t *c = r->conn;
    if (!r->streaming || len == 0 || r->method == SL_HTTP_HEAD) return;
    int rc = 0;
    if (r->chunked) {
        char hex[20];
        int n = snprintf(hex, sizeof(hex), "%zx\r\n", len);
        rc |= hbuf_add(&c->out, hex, (size_t)n);
    }
    rc |= hbuf_add(&c->out, data, len);
    if (r->chunked) rc |= hbuf_add(&c->out, "\r\n", 2);
    if (rc) {
        conn_kill(c);
        return;
    }
    /* Backed up: the write event sends when the client reads; trying now would be one
     * failing system call per send (an event stream gets one per event). */
    if (!c->reading && !c->wev_added) conn_flush(c, false);
}

void sl_hreq_end(sl_hreq_t *r)
{
    conn_t *c = r->conn;
    if (r->streaming && r->chunked && r->method != SL_HTTP_HEAD &&
        hbuf_add(&c->out, "0\r\n\r\n", 5) < 0)
        conn_kill(c);
    if (c->d->draining) c->close_after = true;
    req_finish(r);
}

size_t sl_hreq_backlog(const sl_hreq_t *r)
{
    return hbuf_pending(&r->conn->out);
}

void sl_hreq_abort(sl_hreq_t *r)
{
    conn_t *c = r->conn;
    c->cur = NULL;
    req_free(r);
    conn_kill(c);
}
