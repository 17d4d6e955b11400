/* generate.c - paces an admitted call in real time: first token, token stream, pings, end.
 *
 * The provider model decides when the first token comes (ttft_s) and when the last
 * one does (duration_s); in between, tokens come evenly. A streaming answer sends
 * its headers at once (the provider admitted the call), then nothing until the first
 * token, when the API's opening events go out together with it; after that a tick
 * every TICK_S sends the tokens that became due, so deltas carry a few tokens each,
 * as the real APIs' do. A non-streaming answer is sent whole at duration_s.
 *
 * A call is owned by the emulator's list from sl__emu_call_start until its answer is
 * complete or its client went away; sl_provider_end is called exactly once for it,
 * with the output actually produced. */
#include "emu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>

#define TICK_S 0.05

sl_emu_call_t *sl__emu_call_new(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api,
                                const sl_emu_shape_t *shape)
{
    sl_emu_call_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->emu = emu;
    c->req = req;
    c->evcon = evhttp_request_get_connection(req);
    c->api = api;
    c->shape = shape;
    c->filler_seed = emu->opt.provider.seed * 0x9e3779b97f4a7c15ULL + ++emu->call_seq;
    return c;
}

static void unlink_call(sl_emu_call_t *c)
{
    sl_emu_t *emu = c->emu;
    if (c->prev)
        c->prev->next = c->next;
    else if (emu->calls == c)
        emu->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

void sl__emu_call_free(sl_emu_call_t *c)
{
    if (!c) return;
    if (c->timer) event_free(c->timer);
    free(c->model);
    free(c->tool.name);
    free(c->tool.input_json);
    free(c);
}

/* Tells the provider the call ended, having produced `produced` output tokens. */
static void end_call(sl_emu_call_t *c, int64_t produced)
{
    if (c->ended) return;
    c->ended = true;
    sl_provider_result_t r = c->result;
    if (produced < r.output_tokens) r.output_tokens = produced;
    sl_provider_end(c->emu->provider, &r, sl__emu_now());
    c->emu->n.active--;
}

static void finish_call(sl_emu_call_t *c)
{
    if (c->req && c->evcon) evhttp_connection_set_closecb(c->evcon, NULL, NULL);
    unlink_call(c);
    sl__emu_call_free(c);
}

/* The client went away before the answer was complete. libevent 2.1 detaches a
 * request the user has not finished (evhttp_connection_incoming_fail: userdone == 0)
 * from its connection instead of freeing it, so the request is still ours to free. */
static void on_client_gone(struct evhttp_connection *evcon, void *arg)
{
    sl_emu_call_t *c = arg;
    (void)evcon;
    struct evhttp_request *req = c->req;
    c->req = NULL;
    c->emu->n.client_gone++;
    end_call(c, c->stream ? c->emitted : 0);
    finish_call(c);
    if (req) evhttp_request_free(req);
}

static void schedule(sl_emu_call_t *c, double delay_s)
{
    if (delay_s < 0) delay_s = 0;
    struct timeval tv;
    tv.tv_sec = (time_t)floor(delay_s);
    tv.tv_usec = (suseconds_t)((delay_s - floor(delay_s)) * 1e6);
    evtimer_add(c->timer, &tv);
}

/* Output tokens due `t` seconds after admission. */
static int64_t tokens_due(const sl_emu_call_t *c, double t)
{
    const sl_provider_result_t *r = &c->result;
    int64_t n = r->output_tokens;
    if (t < r->ttft_s) return 0;
    if (t >= r->duration_s || r->duration_s <= r->ttft_s) return n;
    double frac = (t - r->ttft_s) / (r->duration_s - r->ttft_s);
    int64_t due = 1 + (int64_t)floor((double)(n - 1) * frac);
    return due > n ? n : due;
}

static void send_chunk(sl_emu_call_t *c, struct evbuffer *out)
{
    if (evbuffer_get_length(out) > 0) {
        evhttp_send_reply_chunk(c->req, out);
        c->last_event_s = sl__emu_now();
    }
}

/* ---- the last chunk over TLS ----------------------------------------------------------
 *
 * With bufferevent_openssl, libevent 2.1 runs evhttp's "reply written" callback for
 * the end of a chunked reply before the terminating "0\r\n\r\n" went out, switches
 * the connection to reading the next request and disables writing: the terminator
 * stays in the output buffer and the client waits for it for ever (seen with Python's
 * http.client; strace shows no write after the end). So after ending a reply on a
 * TLS connection a flusher watches the connection and re-enables writing while its
 * output is not empty. It lives until the output is empty (at most FLUSH_TRIES
 * checks), the connection closes, or a new call on the connection takes over. */

#define FLUSH_EVERY_S 0.005
#define FLUSH_TRIES   400

struct sl_emu_flush {
    sl_emu_t *emu;
    struct evhttp_connection *evcon;
    struct event *timer;
    int tries;
    struct sl_emu_flush *prev, *next;
};

static void flush_free(sl_emu_flush_t *f, bool clear_closecb)
{
    sl_emu_t *emu = f->emu;
    if (f->prev)
        f->prev->next = f->next;
    else if (emu->flushes == f)
        emu->flushes = f->next;
    if (f->next) f->next->prev = f->prev;
    if (clear_closecb) evhttp_connection_set_closecb(f->evcon, NULL, NULL);
    if (f->timer) event_free(f->timer);
    free(f);
}

static void on_flush_gone(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    flush_free(arg, false);
}

static void on_flush_timer(evutil_socket_t fd, short what, void *arg)
{
    sl_emu_flush_t *f = arg;
    (void)fd;
    (void)what;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(f->evcon);
    if (!bev || evbuffer_get_length(bufferevent_get_output(bev)) == 0 || ++f->tries > FLUSH_TRIES) {
        flush_free(f, true);
        return;
    }
    bufferevent_enable(bev, EV_WRITE);
    struct timeval tv = {0, (suseconds_t)(FLUSH_EVERY_S * 1e6)};
    evtimer_add(f->timer, &tv);
}

static void flush_later(sl_emu_t *emu, struct evhttp_connection *evcon)
{
    sl_emu_flush_t *f = calloc(1, sizeof *f);
    if (!f) return;
    f->emu = emu;
    f->evcon = evcon;
    f->timer = evtimer_new(emu->base, on_flush_timer, f);
    if (!f->timer) {
        free(f);
        return;
    }
    f->next = emu->flushes;
    if (emu->flushes) emu->flushes->prev = f;
    emu->flushes = f;
    evhttp_connection_set_closecb(evcon, on_flush_gone, f);
    struct timeval tv = {0, 0};
    evtimer_add(f->timer, &tv);
}

/* A new call on `evcon` owns its close callback from now on. */
static void flush_cancel(sl_emu_t *emu, struct evhttp_connection *evcon)
{
    for (sl_emu_flush_t *f = emu->flushes; f; f = f->next) {
        if (f->evcon == evcon) {
            flush_free(f, false);
            return;
        }
    }
}

/* Ends the reply on a tick after the one that wrote the closing events, once they
 * left the connection's buffer, so that the end never races the last chunk (see
 * the TLS note above; on plain TCP this costs one loop turn). */
static void end_stream(sl_emu_call_t *c)
{
    struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
    if (bev && evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
        schedule(c, 0.005); /* bounded: a client that stops reading is gone (close callback) */
        return;
    }
    struct evhttp_request *req = c->req;
    struct evhttp_connection *evcon = c->evcon;
    sl_emu_t *emu = c->emu;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    c->req = NULL;
    unlink_call(c);
    sl__emu_call_free(c);
    evhttp_send_reply_end(req);
    if (emu->ssl_ctx) flush_later(emu, evcon);
}

static void on_stream_tick(sl_emu_call_t *c)
{
    if (c->finished) {
        end_stream(c);
        return;
    }
    double now = sl__emu_now();
    double t = now - c->start_s;
    struct evbuffer *out = evbuffer_new();
    if (!out) {
        schedule(c, TICK_S);
        return;
    }
    if (!c->begun && t >= c->result.ttft_s) {
        c->begun = true;
        c->shape->begin(c, out);
    }
    if (c->begun) {
        int64_t due = tokens_due(c, t);
        if (due > c->emitted) {
            c->shape->tokens(c, c->emitted, due, out);
            c->emitted = due;
        }
    }
    if (c->begun && c->emitted >= c->result.output_tokens) {
        c->shape->finish(c, out);
        c->finished = true;
        end_call(c, c->emitted);
    } else if (c->begun && c->shape->ping && evbuffer_get_length(out) == 0 &&
               now - c->last_event_s >= c->emu->opt.ping_interval_s) {
        c->shape->ping(c, out);
    }
    send_chunk(c, out);
    evbuffer_free(out);
    double next = TICK_S;
    if (c->finished)
        next = 0;
    else if (!c->begun)
        next = c->result.ttft_s - t;
    if (next > c->emu->opt.ping_interval_s) next = c->emu->opt.ping_interval_s;
    schedule(c, next);
}

static void on_whole_answer(sl_emu_call_t *c)
{
    json_t *body = c->shape->complete(c);
    end_call(c, c->result.output_tokens);
    struct evhttp_request *req = c->req;
    evhttp_connection_set_closecb(c->evcon, NULL, NULL);
    c->req = NULL;
    unlink_call(c);
    sl__emu_call_free(c);
    sl__emu_send_json(req, 200, body);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    sl_emu_call_t *c = arg;
    (void)fd;
    (void)what;
    if (c->stream)
        on_stream_tick(c);
    else
        on_whole_answer(c);
}

void sl__emu_call_start(sl_emu_call_t *c)
{
    sl_emu_t *emu = c->emu;
    c->start_s = sl__emu_now();
    c->last_event_s = c->start_s;
    c->created_unix = (int64_t)c->start_s;
    emu->n.active++;
    c->next = emu->calls;
    if (emu->calls) emu->calls->prev = c;
    emu->calls = c;
    c->timer = evtimer_new(emu->base, on_timer, c);
    if (!c->timer) {
        end_call(c, 0);
        unlink_call(c);
        struct evhttp_request *req = c->req;
        sl_emu_api_t api = c->api;
        sl__emu_call_free(c);
        sl__emu_send_error(emu, req, api, 500, "api_error", "out of memory", NULL, NULL);
        return;
    }
    flush_cancel(emu, c->evcon);
    evhttp_connection_set_closecb(c->evcon, on_client_gone, c);
    if (c->stream) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
        evhttp_add_header(h, "Content-Type", "text/event-stream; charset=utf-8");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_send_reply_start(c->req, 200, "OK");
        schedule(c, c->result.ttft_s);
    } else {
        schedule(c, c->result.duration_s);
    }
}

void sl__emu_calls_shutdown(sl_emu_t *emu)
{
    while (emu->flushes)
        flush_free(emu->flushes, true);
    while (emu->calls) {
        sl_emu_call_t *c = emu->calls;
        end_call(c, c->stream ? c->emitted : 0);
        if (c->req) evhttp_connection_set_closecb(c->evcon, NULL, NULL);
        unlink_call(c);
        sl__emu_call_free(c);
    }
}
