/* upstream.c - HTTP(S) calls to providers: libcurl's multi socket interface on libevent.
 *
 * curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION) and when to wake it
 * (CURLMOPT_TIMERFUNCTION); we turn both into libevent events and hand activity back
 * with curl_multi_socket_action(), then collect finished transfers from
 * curl_multi_info_read(). Nothing blocks and there are no threads.
 *
 * Reentrancy: on_headers and on_body run inside curl's own callbacks, where a handle
 * must not be removed. A cancel requested there only marks the transfer; the curl
 * callback then returns an abort code and the transfer is torn down when curl reports
 * it finished (silently, since it was cancelled). on_done always runs outside curl. A
 * transfer started there (a header callback resyncs a pool, which grants a queued call)
 * cannot be added to the multi handle either (curl refuses a recursive call): it is
 * added from the loop, at the next turn of the timer event, before curl runs again.
 *
 * Idle timeout: our own timer per transfer, pushed back by every byte received and
 * stopped while the receiver has paused the transfer (a slow client is not the
 * provider's fault). HTTP/1.1 is used: the provider APIs need nothing newer, and a
 * paused HTTP/1.1 stream stops the provider's socket cleanly.
 *
 * Finished transfers are kept (up to SPARE_XFERS) with their easy handle and idle timer
 * and reused by the next call: a new easy handle costs libcurl several allocations
 * and kilobytes of zeroing, and a transfer holds a 64 KiB header buffer. A reused
 * easy handle is reset (curl_easy_reset) and set up from scratch, so nothing of the
 * previous call carries over but what libcurl keeps on purpose (its caches).
 */
#include "upstream.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <event2/event.h>

#define MAX_HEADERS       96
#define HEADER_BYTES_MAX  (64u * 1024)
#define SPARE_XFERS       16 /* finished transfers kept for reuse */

struct sl_upstream {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;
    size_t running;
    sl_upstream_xfer_t *xfers; /* every live transfer, for sl_upstream_free */
    sl_upstream_xfer_t *spare; /* finished transfers kept for reuse (linked by next) */
    size_t n_spare;
    bool in_action; /* inside curl_multi_socket_action */
    struct event *adder; /* adds the transfers started inside curl (add_pending_xfers) */
};

struct sl_upstream_xfer {
    /* Kept across reuse. */
    sl_upstream_t *u;
    CURL *easy;
    struct event *idle;
    /* Reset for every call (zeroed up to hbuf). */
    struct curl_slist *headers;
    sl_upstream_cbs_t cbs;
    void *ud;
    struct timeval idle_tv;
    bool in_curl_cb;   /* inside a curl callback: cancel must be deferred */
    bool cancelled;    /* cancel was asked for: no more callbacks */
    bool aborted;      /* on_body asked to abort */
    bool timed_out;    /* our idle timer fired */
    bool paused;
    bool headers_done; /* on_headers ran */
    bool in_multi;     /* added to the multi handle */
    bool add_pending;  /* started inside curl: added from the loop (add_pending_xfers) */
    size_t hlen;
    const char *hnames[MAX_HEADERS], *hvalues[MAX_HEADERS];
    size_t hcount;
    char errbuf[CURL_ERROR_SIZE];
    sl_upstream_xfer_t *prev, *next;
    /* The response header block being read (not zeroed: hlen says what is valid). */
    char hbuf[HEADER_BYTES_MAX];
};

/* ---- transfers ---------------------------------------------------------------------- */

static void unlink_xfer(sl_upstream_xfer_t *x)
{
    sl_upstream_t *u = x->u;
    if (x->prev)
        x->prev->next = x->next;
    else
        u->xfers = x->next;
    if (x->next) x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

static void on_idle(evutil_socket_t fd, short what, void *ud);

static void xfer_destroy(sl_upstream_xfer_t *x)
{
    if (x->easy) curl_easy_cleanup(x->easy);
    if (x->idle) event_free(x->idle);
    free(x);
}

/* Ends a transfer (no callbacks): out of the multi handle, and kept for reuse or freed. */
static void xfer_free(sl_upstream_xfer_t *x)
{
    sl_upstream_t *u = x->u;
    unlink_xfer(x);
    if (x->in_multi) {
        curl_multi_remove_handle(u->multi, x->easy);
        u->running--;
    }
    curl_slist_free_all(x->headers);
    x->headers = NULL;
    if (x->idle) evtimer_del(x->idle);
    if (u->n_spare < SPARE_XFERS && x->easy && x->idle) {
        curl_easy_reset(x->easy);
        x->next = u->spare;
        u->spare = x;
        u->n_spare++;
        return;
    }
    xfer_destroy(x);
}

/* A transfer ready to be set up: a spare one, reset, or a new one. */
static sl_upstream_xfer_t *xfer_get(sl_upstream_t *u)
{
    sl_upstream_xfer_t *x = u->spare;
    if (x) {
        u->spare = x->next;
        u->n_spare--;
        CURL *easy = x->easy;
        struct event *idle = x->idle;
        memset(x, 0, offsetof(sl_upstream_xfer_t, hbuf));
        x->u = u;
        x->easy = easy;
        x->idle = idle;
        return x;
    }
    x = malloc(sizeof(*x));
    if (!x) return NULL;
    memset(x, 0, offsetof(sl_upstream_xfer_t, hbuf));
    x->u = u;
    x->easy = curl_easy_init();
    x->idle = evtimer_new(u->base, on_idle, x);
    if (!x->easy || !x->idle) {
        xfer_destroy(x);
        return NULL;
    }
    return x;
}

double sl_upstream_sent_after_s(sl_upstream_xfer_t *x)
{
    curl_off_t us = 0;
    if (curl_easy_getinfo(x->easy, CURLINFO_PRETRANSFER_TIME_T, &us) != CURLE_OK || us < 0)
        return -1;
    return (double)us / 1e6;
}

static void idle_restart(sl_upstream_xfer_t *x)
{
    if (x->idle && !x->paused) evtimer_add(x->idle, &x->idle_tv);
}

static void finish(sl_upstream_xfer_t *x, int result, const char *errmsg)
{
    long req_bytes = 0;
    curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &req_bytes);
    sl_upstream_cbs_t cbs = x->cbs;
    void *ud = x->ud;
    bool sent = req_bytes > 0;
    char msg[CURL_ERROR_SIZE + 64];
    snprintf(msg, sizeof(msg), "%s", errmsg ? errmsg : "");
    xfer_free(x);
    if (cbs.on_done) cbs.on_done(ud, result, sent, msg);
}

static int classify(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return SL_UPSTREAM_OK;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        return SL_UPSTREAM_ECONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return SL_UPSTREAM_ETIMEOUT;
    default:
        return SL_UPSTREAM_EIO;
    }
}

static void check_done(sl_upstream_t *u)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(u->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        sl_upstream_xfer_t *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        if (!x) continue;
        CURLcode rc = m->data.result;
        if (x->cancelled) {
            xfer_free(x);
        } else if (x->aborted) {
            finish(x, SL_UPSTREAM_ETOOBIG, "the response was refused by the receiver");
        } else {
            int result = classify(rc);
            char msg[CURL_ERROR_SIZE + 64];
            if (rc != CURLE_OK)
                snprintf(msg, sizeof(msg), "%s", x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
            else
                msg[0] = '\0';
            finish(x, result, msg);
        }
    }
}

static void on_idle(evutil_socket_t fd, short what, void *ud)
{
    sl_upstream_xfer_t *x = ud;
    (void)fd;
    (void)what;
    if (x->paused || x->cancelled) return;
    x->timed_out = true;
    char msg[96];
    snprintf(msg, sizeof(msg), "no data from upstream for %.3g s", (double)x->idle_tv.tv_sec +
                                                                      x->idle_tv.tv_usec / 1e6);
    finish(x, SL_UPSTREAM_ETIMEOUT, msg);
}

static size_t trim_len(const char *s, size_t n)
{
    while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return n;
}

static size_t on_curl_header(char *data, size_t size, size_t nmemb, void *ud)
{
    sl_upstream_xfer_t *x = ud;
    size_t n = size * nmemb;
    if (x->cancelled) return 0;
    idle_restart(x);
    size_t len = trim_len(data, n);
    if (len >= 5 && !strncmp(data, "HTTP/", 5)) { /* a status line starts a new block */
        x->hlen = 0;
        x->hcount = 0;
        return n;
    }
    if (len == 0) { /* the end of a block */
        long status = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 200 && !x->headers_done) {
            x->headers_done = true;
            x->in_curl_cb = true;
            if (x->cbs.on_headers) x->cbs.on_headers(x->ud, (int)status, x->hnames, x->hvalues, x->hcount);
            x->in_curl_cb = false;
            if (x->cancelled) return 0;
        }
        return n;
    }
    const char *colon = memchr(data, ':', len);
    if (!colon || x->hcount == MAX_HEADERS || x->hlen + len + 2 > sizeof(x->hbuf)) return n;
    char *name = x->hbuf + x->hlen;
    size_t nlen = (size_t)(colon - data);
    for (size_t i = 0; i < nlen; i++)
        name[i] = (char)tolower((unsigned char)data[i]);
    name[nlen] = '\0';
    const char *v = colon + 1;
    while (v < data + len && (*v == ' ' || *v == '\t'))
        v++;
    size_t vlen = (size_t)(data + len - v);
    char *value = name + nlen + 1;
    memcpy(value, v, vlen);
    value[vlen] = '\0';
    x->hlen += nlen + vlen + 2;
    x->hnames[x->hcount] = name;
    x->hvalues[x->hcount] = value;
    x->hcount++;
    return n;
}

static size_t on_curl_write(char *data, size_t size, size_t nmemb, void *ud)
{
    sl_upstream_xfer_t *x = ud;
    size_t n = size * nmemb;
    if (x->cancelled) return 0;
    if (!x->cbs.on_body || n == 0) return n;
    x->in_curl_cb = true;
    int r = x->cbs.on_body(x->ud, data, n);
    x->in_curl_cb = false;
    if (x->cancelled) return 0;
    if (r < 0) {
        x->aborted = true;
        return 0;
    }
    if (r == 0) {
        x->paused = true;
        if (x->idle) evtimer_del(x->idle);
        return CURL_WRITEFUNC_PAUSE;
    }
    idle_restart(x);
    return n;
}

/* ---- the multi handle on libevent ------------------------------------------------- */

static void on_socket_event(evutil_socket_t fd, short what, void *ud)
{
    sl_upstream_t *u = ud;
    int flags = 0, running = 0;
    if (what & EV_READ) flags |= CURL_CSELECT_IN;
    if (what & EV_WRITE) flags |= CURL_CSELECT_OUT;
    u->in_action = true;
    curl_multi_socket_action(u->multi, fd, flags, &running);
    u->in_action = false;
    check_done(u);
}

/* Adds the transfers started inside curl; one curl refuses ends with on_done now. */
static void add_pending_xfers(sl_upstream_t *u)
{
    for (sl_upstream_xfer_t *x = u->xfers, *next; x; x = next) {
        next = x->next;
        if (!x->add_pending) continue;
        x->add_pending = false;
        if (curl_multi_add_handle(u->multi, x->easy) == CURLM_OK) {
            u->running++;
            x->in_multi = true;
            continue;
        }
        sl_upstream_cbs_t cbs = x->cbs;
        void *ud = x->ud;
        xfer_free(x);
        if (cbs.on_done) cbs.on_done(ud, SL_UPSTREAM_EIO, false, "upstream: cannot start the request");
    }
}

static void on_adder_event(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    add_pending_xfers(ud);
}

static void on_timer_event(evutil_socket_t fd, short what, void *ud)
{
    sl_upstream_t *u = ud;
    int running = 0;
    (void)fd;
    (void)what;
    u->in_action = true;
    curl_multi_socket_action(u->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    u->in_action = false;
    check_done(u);
}

static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    sl_upstream_t *u = userp;
    struct event *ev = socketp;
    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (ev) event_free(ev);
        curl_multi_assign(u->multi, s, NULL);
        return 0;
    }
    short kind = EV_PERSIST;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) kind |= EV_READ;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) kind |= EV_WRITE;
    if (ev) {
        event_del(ev);
        event_assign(ev, u->base, s, kind, on_socket_event, u);
    } else {
        ev = event_new(u->base, s, kind, on_socket_event, u);
        if (!ev) return -1;
        curl_multi_assign(u->multi, s, ev);
    }
    return event_add(ev, NULL);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    sl_upstream_t *u = userp;
    (void)multi;
    if (timeout_ms < 0) return evtimer_del(u->timer);
    /* Even a 0 ms timeout goes through the loop: curl must not be re-entered here. Asked
     * for from outside curl (a transfer being added), the timer is made active rather
     * than added, so the request goes out in this loop turn instead of after another
     * epoll_wait. From inside curl it is added as usual: were curl to ask for 0 ms
     * again and again, active events alone would keep the loop from polling sockets. */
    if (timeout_ms == 0 && !u->in_action) {
        evtimer_del(u->timer);
        event_active(u->timer, EV_TIMEOUT, 0);
        return 0;
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    return evtimer_add(u->timer, &tv);
}

sl_upstream_t *sl_upstream_new(struct event_base *base)
{
    static bool global_done;
    if (!global_done) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return NULL;
        global_done = true;
    }
    sl_upstream_t *u = calloc(1, sizeof(*u));
    if (!u) return NULL;
    u->base = base;
    u->multi = curl_multi_init();
    u->timer = evtimer_new(base, on_timer_event, u);
    u->adder = event_new(base, -1, 0, on_adder_event, u);
    if (!u->multi || !u->timer || !u->adder) {
        sl_upstream_free(u);
        return NULL;
    }
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETDATA, u);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERDATA, u);
    return u;
}

void sl_upstream_free(sl_upstream_t *u)
{
    if (!u) return;
    while (u->xfers)
        xfer_free(u->xfers);
    while (u->spare) {
        sl_upstream_xfer_t *x = u->spare;
        u->spare = x->next;
        xfer_destroy(x);
    }
    if (u->multi) curl_multi_cleanup(u->multi);
    if (u->timer) event_free(u->timer);
    if (u->adder) event_free(u->adder);
    free(u);
}

static struct timeval seconds_tv(double s)
{
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - floor(s)) * 1e6)};
    return tv;
}

sl_upstream_xfer_t *sl_upstream_start(sl_upstream_t *u, const sl_upstream_request_t *req,
                                      const sl_upstream_cbs_t *cbs, void *ud, char *err,
                                      size_t errlen)
{
    sl_upstream_xfer_t *x = xfer_get(u);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    x->cbs = *cbs;
    x->ud = ud;
    for (size_t i = 0; i < req->n_headers; i++) {
        struct curl_slist *l = curl_slist_append(x->headers, req->headers[i]);
        if (!l) goto oom;
        x->headers = l;
    }
    /* curl would add these on its own; the providers want none of them. */
    static const char *const suppressed[] = {"Expect:", "Accept:"};
    for (size_t i = 0; i < sizeof(suppressed) / sizeof(suppressed[0]); i++) {
        bool given = false;
        for (size_t k = 0; k < req->n_headers; k++)
            given |= !strncasecmp(req->headers[k], suppressed[i], strlen(suppressed[i]));
        if (given) continue;
        struct curl_slist *l = curl_slist_append(x->headers, suppressed[i]);
        if (!l) goto oom;
        x->headers = l;
    }
    CURL *e = x->easy;
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(e, CURLOPT_URL, req->url);
    /* The path leaves as the router built it: libcurl would otherwise resolve dot segments
     * (RFC 3986 5.2.4) into another endpoint (proxy_routes.c refuses them first). */
    rc |= curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)x);
    rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    rc |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_curl_header);
    rc |= curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_curl_write);
    rc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    rc |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    rc |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                           (long)fmax(1, req->connect_timeout_s * 1000));
    if (req->ca_file) rc |= curl_easy_setopt(e, CURLOPT_CAINFO, req->ca_file);
    if (!strcmp(req->method, "POST")) {
        rc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
        rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body ? req->body : "");
        rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    } else if (strcmp(req->method, "GET") != 0) {
        rc |= curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    }
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "upstream: cannot set up the request to %s", req->url);
        goto fail;
    }
    x->idle_tv = seconds_tv(req->idle_timeout_s > 0 ? req->idle_timeout_s : 300);
    if (u->in_action) {
        /* Inside curl: added from the loop (add_pending_xfers), this very turn. */
        x->add_pending = true;
        x->next = u->xfers;
        if (u->xfers) u->xfers->prev = x;
        u->xfers = x;
        event_active(u->adder, EV_TIMEOUT, 0);
        idle_restart(x);
        return x;
    }
    if (curl_multi_add_handle(u->multi, e) != CURLM_OK) {
        snprintf(err, errlen, "upstream: cannot start the request");
        goto fail;
    }
    u->running++;
    x->in_multi = true;
    x->next = u->xfers;
    if (u->xfers) u->xfers->prev = x;
    u->xfers = x;
    idle_restart(x);
    return x;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    curl_slist_free_all(x->headers);
    x->headers = NULL;
    xfer_destroy(x); /* never linked: not kept, its easy handle may hold options */
    return NULL;
}

void sl_upstream_resume(sl_upstream_xfer_t *x)
{
    if (!x || !x->paused || x->cancelled) return;
    x->paused = false;
    idle_restart(x);
    curl_easy_pause(x->easy, CURLPAUSE_CONT);
}

void sl_upstream_cancel(sl_upstream_xfer_t *x)
{
    if (!x || x->cancelled) return;
    x->cancelled = true;
    if (x->in_curl_cb) return; /* torn down in check_done once curl has unwound */
    if (x->paused) {
        /* A paused handle may still hold refused bytes; removing it is fine. */
        x->paused = false;
    }
    xfer_free(x);
}

size_t sl_upstream_running(const sl_upstream_t *u)
{
    return u->running;
}
