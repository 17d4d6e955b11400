/* generate.c - admits a model call and paces its answer in real time: first token, stream, end.
 *
 * The provider model decides when the first token comes (ttft_s) and when the last
 * one does (duration_s); in between, tokens come evenly. A streaming answer sends
 * its headers at once (the provider admitted the call), then nothing until the first
 * token, when the API's opening events go out together with it; after that a tick
 * every TICK_S sends the tokens that became due, so deltas carry a few tokens each,
 * as the real APIs' do. A non-streaming answer is sent whole at duration_s.
 *
 * A stream the provider breaks off (result.stream_error) sends its tokens the same
 * way and then the API's error event where the closing events would be.
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

/* ---- ending a stream -----------------------------------------------------------------
 *
 * evhttp_send_reply_end must only be called from the write callback of the last
 * chunk. evhttp finishes a reply (evhttp_send_done: frees the request, starts reading
 * the next one and disables writing) from the bufferevent's write callback, and that
 * callback runs whatever completion the connection holds when it runs, not when the
 * write that triggered it happened. bufferevent_openssl defers its write callback
 * (do_write triggers it with BEV_OPT_DEFER_CALLBACKS), so the callback for the
 * previous chunk's bytes can still be pending when the reply is ended; it then runs
 * evhttp_send_done before "0\r\n\r\n" went out, writing is switched off with the
 * terminator still buffered, and the client waits for ever. Anything that pushes the
 * terminator out afterwards fires evhttp_send_done a second time, now on the
 * connection's next request: an empty one (HTTP/0.0, so the connection is closed) or
 * one already being answered (freed under its handler). Plain sockets run the write
 * callback at once, so they never showed it.
 *
 * Inside the last chunk's own write callback no write callback is pending (it was
 * cleared before it ran), and the terminator is in the buffer before any later drain
 * can empty it, so evhttp_send_done runs exactly once, after the terminator left. */
static void on_last_chunk_written(struct evhttp_connection *evcon, void *arg)
{
    sl_emu_call_t *c = arg;
    struct evhttp_request *req = c->req;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    c->req = NULL;
    unlink_call(c);
    sl__emu_call_free(c);
    evhttp_send_reply_end(req);
}

static void on_stream_tick(sl_emu_call_t *c)
{
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
        /* A stream the provider breaks off ends with its error event instead of the
         * closing events; it is billed the output sent (result.output_tokens). */
        if (c->result.stream_error && c->shape->error)
            c->shape->error(c, out);
        else
            c->shape->finish(c, out);
        end_call(c, c->emitted);
        /* The call is ours until the closing events were written (the close callback
         * still frees it if the client leaves first). */
        evhttp_send_reply_chunk_with_cb(c->req, out, on_last_chunk_written, c);
        evbuffer_free(out);
        return;
    } else if (c->begun && c->shape->ping && evbuffer_get_length(out) == 0 &&
               now - c->last_event_s >= c->emu->opt.ping_interval_s) {
        c->shape->ping(c, out);
    }
    send_chunk(c, out);
    evbuffer_free(out);
    double next = TICK_S;
    if (!c->begun)
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

void sl__emu_call_use_tool(sl_emu_call_t *c, json_t *tool, const char *schema_key,
                           sl_provider_call_t *call)
{
    json_t *input = sl__filler_tool_input(json_object_get(tool, schema_key));
    c->tool.name = strdup(json_string_value(json_object_get(tool, "name")));
    c->tool.input_json = json_dumps(input, JSON_COMPACT);
    json_decref(input);
    int64_t n_name = 0, n_input = 0;
    if (c->tool.name && c->tool.input_json) {
        sl_tokenizer_count(c->emu->tok, c->tool.name, strlen(c->tool.name), &n_name);
        sl_tokenizer_count(c->emu->tok, c->tool.input_json, strlen(c->tool.input_json),
                           &n_input);
    }
    call->output_tokens = n_name + n_input + 1;
}

void sl__emu_call_admit(sl_emu_call_t *c, const sl_provider_call_t *call, bool with_tool,
                        const char *id_prefix, const char *oom_type)
{
    sl_emu_t *emu = c->emu;
    struct evhttp_request *req = c->req;
    sl_emu_api_t api = c->api;
    if (!c->model || (with_tool && (!c->tool.name || !c->tool.input_json))) {
        sl__emu_call_free(c);
        sl__emu_send_error(emu, req, api, 500, oom_type, "out of memory", NULL, NULL);
        return;
    }
    double now = sl__emu_now();
    sl_provider_begin(emu->provider, call, now, &c->result);
    sl__emu_add_ratelimit_headers(emu, req, api, &c->result, now);
    if (c->result.refusal != SL_PROVIDER_OK) {
        sl_provider_result_t r = c->result;
        sl__emu_call_free(c);
        sl__emu_send_refusal(emu, req, api, &r);
        return;
    }
    sl__emu_new_id(emu, id_prefix, c->id, sizeof c->id);
    sl__emu_call_start(c);
}

void sl__emu_calls_shutdown(sl_emu_t *emu)
{
    while (emu->calls) {
        sl_emu_call_t *c = emu->calls;
        end_call(c, c->stream ? c->emitted : 0);
        if (c->req) evhttp_connection_set_closecb(c->evcon, NULL, NULL);
        unlink_call(c);
        sl__emu_call_free(c);
    }
}
