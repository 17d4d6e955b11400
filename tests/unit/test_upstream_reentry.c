/* test_upstream_reentry.c - a call started from inside another's header callback goes out.
 *
 * A provider's answer headers resync the pool as they arrive (inside curl's header
 * callback); a resync may grant a queued call, whose upstream request then starts right
 * there, where curl refuses to be re-entered. Before the fix that call failed at once
 * ("API function called from within callback", a 502 to its client).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "upstream.h"
#include "test_main.h"

typedef struct world {
    struct event_base *base;
    sl_upstream_t *up;
    char url[64];
    int done, ok, statuses[2];
    sl_upstream_xfer_t *second;
} world_t;

typedef struct call {
    world_t *w;
    int index;
} call_t;

static void on_http(struct evhttp_request *req, void *arg)
{
    (void)arg;
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "{\"ok\":true}");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static const sl_upstream_cbs_t *cbs_of(void);

static void start(world_t *w, call_t *c, char *err, size_t errlen, sl_upstream_xfer_t **out)
{
    sl_upstream_request_t rq = {.method = "GET", .url = w->url, .connect_timeout_s = 5,
                                .idle_timeout_s = 5};
    *out = sl_upstream_start(w->up, &rq, cbs_of(), c, err, errlen);
}

static call_t second_call;

static void on_headers(void *ud, int status, const char *const *names, const char *const *values,
                       size_t n)
{
    call_t *c = ud;
    (void)names;
    (void)values;
    (void)n;
    c->w->statuses[c->index] = status;
    if (c->index == 0) { /* inside curl's header callback: start the second call here */
        char err[256] = "";
        second_call.w = c->w;
        second_call.index = 1;
        start(c->w, &second_call, err, sizeof err, &c->w->second);
        if (!c->w->second) fprintf(stderr, "second call refused: %s\n", err);
    }
}

static int on_body(void *ud, const char *data, size_t len)
{
    (void)ud;
    (void)data;
    (void)len;
    return 1;
}

static void on_done(void *ud, int result, bool request_sent, const char *errmsg)
{
    call_t *c = ud;
    (void)request_sent;
    c->w->done++;
    if (result != SL_UPSTREAM_OK) fprintf(stderr, "call %d: %s\n", c->index, errmsg);
    if (result == SL_UPSTREAM_OK) c->w->ok++;
}

static const sl_upstream_cbs_t cbs = {on_headers, on_body, on_done};

static const sl_upstream_cbs_t *cbs_of(void)
{
    return &cbs;
}

static void test_a_call_started_in_a_header_callback_goes_out(void **state)
{
    (void)state;
    world_t w = {0};
    w.base = event_base_new();
    struct evhttp *http = evhttp_new(w.base);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    assert_non_null(sock);
    evhttp_set_gencb(http, on_http, NULL);
    struct sockaddr_storage ss;
    ev_socklen_t len = sizeof ss;
    getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &len);
    int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    snprintf(w.url, sizeof w.url, "http://127.0.0.1:%d/x", port);
    w.up = sl_upstream_new(w.base);
    assert_non_null(w.up);
    call_t first = {&w, 0};
    char err[256];
    sl_upstream_xfer_t *x = NULL;
    start(&w, &first, err, sizeof err, &x);
    assert_non_null(x);
    for (int i = 0; i < 2000 && w.done < 2; i++) event_base_loop(w.base, EVLOOP_ONCE);
    assert_non_null(w.second);
    assert_int_equal(w.done, 2);
    assert_int_equal(w.ok, 2);
    assert_int_equal(w.statuses[1], 200);
    sl_upstream_free(w.up);
    evhttp_free(http);
    event_base_free(w.base);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_a_call_started_in_a_header_callback_goes_out))
