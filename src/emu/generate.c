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
 * An answer is a list of parts (thinking, text, tool calls). Fixed parts (a forced
 * tool call, structured output, a scripted turn) are known before admission and
 * decide the output billed; a filler answer gets the length the provider picks.
 * After admission the parts are laid out over the billed output, in order: a part
 * the output runs out in is cut (text at the same share of its bytes), later ones
 * are dropped. A stream's deltas split a part's text in proportion to its tokens
 * (at UTF-8 character boundaries), so the pieces add up to the whole text.
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
    for (size_t i = 0; i < c->n_parts; i++) {
        free(c->parts[i].text);
        free(c->parts[i].name);
    }
    json_decref(c->echo);
    json_decref(c->history);
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

/* Byte offset in part `p` where its output token k ends: text_len * k / tokens,
 * moved back to the start of a UTF-8 character. */
static size_t part_offset(const sl_emu_part_t *p, int64_t k)
{
    if (k >= p->tokens || p->tokens <= 0) return p->text_len;
    size_t at = (size_t)((double)p->text_len * (double)k / (double)p->tokens);
    while (at > 0 && at < p->text_len && ((unsigned char)p->text[at] & 0xC0) == 0x80)
        at--;
    return at;
}

/* Begins part i (once). */
static void begin_part(sl_emu_call_t *c, size_t i, struct evbuffer *out)
{
    if (i < c->parts_begun) return;
    c->parts_begun = i + 1;
    c->shape->part_begin(c, i, out);
}

/* Emits output tokens [from, to) of the answer: the parts they fall in are begun,
 * written and ended through the shape. */
static void emit_tokens(sl_emu_call_t *c, int64_t from, int64_t to, struct evbuffer *out)
{
    int64_t base = 0;
    for (size_t i = 0; i < c->n_parts && base < to; i++) {
        const sl_emu_part_t *p = &c->parts[i];
        int64_t lo = base, hi = base + p->tokens;
        base = hi;
        if (from >= hi) continue;
        int64_t a = (from > lo ? from : lo) - lo, b = (to < hi ? to : hi) - lo;
        begin_part(c, i, out);
        size_t x = part_offset(p, a), y = part_offset(p, b);
        if (y > x) c->shape->part_delta(c, i, p->text + x, y - x, out);
        if (b == p->tokens) c->shape->part_end(c, i, out);
    }
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
        /* The first part opens with the first token (a stream broken off before any
         * token still shows where its answer began). */
        if (c->n_parts > 0) begin_part(c, 0, out);
    }
    if (c->begun) {
        int64_t due = tokens_due(c, t);
        if (due > c->emitted) {
            emit_tokens(c, c->emitted, due, out);
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
    if (!c->begun) next = c->result.ttft_s - t;
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

/* ---- the answer's parts ------------------------------------------------------------ */

static sl_emu_part_t *add_part(sl_emu_call_t *c, sl_emu_part_kind_t kind)
{
    if (c->n_parts >= SL_EMU_MAX_PARTS) return NULL;
    sl_emu_part_t *p = &c->parts[c->n_parts++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    return p;
}

static int64_t count_tokens(sl_emu_t *emu, const char *s, size_t n)
{
    int64_t k = 0;
    if (n && sl_tokenizer_count(emu->tok, s, n, &k) != 0) k = 0;
    return k;
}

bool sl__emu_call_add_text(sl_emu_call_t *c, const char *text, int64_t pad_tokens)
{
    sl_emu_part_t *p = add_part(c, SL_EMU_PART_TEXT);
    if (!p) return false;
    size_t n = strlen(text);
    struct evbuffer *b = evbuffer_new();
    if (!b) return false;
    evbuffer_add(b, text, n);
    /* Filler after literal text starts at its token 1, which has its leading space. */
    if (pad_tokens > 0) sl__filler_append(c->filler_seed, n ? 1 : 0, pad_tokens + (n ? 1 : 0), b);
    p->text_len = evbuffer_get_length(b);
    p->text = malloc(p->text_len + 1);
    if (p->text) {
        evbuffer_copyout(b, p->text, p->text_len);
        p->text[p->text_len] = '\0';
    }
    evbuffer_free(b);
    if (!p->text) return false;
    p->tokens = count_tokens(c->emu, p->text, p->text_len);
    if (p->tokens < 1) p->tokens = 1;
    return true;
}

bool sl__emu_call_add_tool(sl_emu_call_t *c, const char *name, json_t *input)
{
    sl_emu_part_t *p = add_part(c, SL_EMU_PART_TOOL);
    if (!p) return false;
    p->name = strdup(name);
    p->text = json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!p->name || !p->text) return false;
    p->text_len = strlen(p->text);
    /* What the call costs: its name and its input, and one token to open it. */
    p->tokens = count_tokens(c->emu, p->name, strlen(p->name)) +
                count_tokens(c->emu, p->text, p->text_len) + 1;
    return true;
}

bool sl__emu_call_use_tool(sl_emu_call_t *c, json_t *tool, const char *schema_key)
{
    const char *name = json_string_value(json_object_get(tool, "name"));
    json_t *input = sl__schema_object(json_object_get(tool, schema_key));
    bool ok = name && input && sl__emu_call_add_tool(c, name, input);
    json_decref(input);
    return ok;
}

bool sl__emu_call_use_schema(sl_emu_call_t *c, json_t *schema)
{
    json_t *v = schema ? sl__schema_value(schema) : json_pack("{s:s}", "answer", "filler");
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    bool ok = s && sl__emu_call_add_text(c, s, 0);
    free(s);
    return ok;
}

int64_t sl__emu_call_fixed_tokens(const sl_emu_call_t *c)
{
    if (c->n_parts == 0) return -1;
    int64_t n = 0;
    for (size_t i = 0; i < c->n_parts; i++)
        n += c->parts[i].tokens;
    return n;
}

int64_t sl__emu_call_thinking_tokens(const sl_emu_call_t *c, int64_t answer_tokens)
{
    if (c->thinking_budget <= 0) return 0;
    int64_t base = answer_tokens >= 0 ? answer_tokens : c->emu->opt.provider.default_output_tokens;
    int64_t n = base / 4;
    if (n < 1) n = 1;
    return n < c->thinking_budget ? n : c->thinking_budget;
}

const char *sl__emu_part_text(const sl_emu_part_t *p, size_t *len)
{
    *len = p->text_len;
    return p->text ? p->text : "";
}

int64_t sl__emu_call_tokens_of(const sl_emu_call_t *c, sl_emu_part_kind_t kind)
{
    int64_t n = 0;
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].kind == kind) n += c->parts[i].tokens;
    return n;
}

bool sl__emu_call_has_tool(const sl_emu_call_t *c)
{
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].kind == SL_EMU_PART_TOOL) return true;
    return false;
}

/* Writes filler of part p's tokens into its text (a filler part). */
static bool fill_part(sl_emu_part_t *p, uint64_t seed)
{
    p->text = sl__filler_text(seed, p->tokens);
    if (!p->text) return false;
    p->text_len = strlen(p->text);
    return true;
}

/* Lays the answer out over `total` output tokens (see the top of this file). A
 * filler answer is one text part of what thinking leaves. Returns false when out of
 * memory. */
static bool lay_out(sl_emu_call_t *c, int64_t total)
{
    if (c->filler_answer) {
        int64_t think = sl__emu_call_thinking_tokens(c, total);
        if (think >= total) think = total > 1 ? total - 1 : 0;
        sl_emu_part_t *t = think > 0 ? add_part(c, SL_EMU_PART_THINKING) : NULL;
        if (t) t->tokens = think;
        sl_emu_part_t *p = add_part(c, SL_EMU_PART_TEXT);
        if (!p) return false;
        p->tokens = total - think;
        if ((t && !fill_part(t, ~c->filler_seed)) || !fill_part(p, c->filler_seed)) return false;
        return true;
    }
    int64_t left = total;
    size_t kept = 0;
    for (size_t i = 0; i < c->n_parts; i++) {
        sl_emu_part_t *p = &c->parts[i];
        if (left <= 0) {
            free(p->text);
            free(p->name);
            c->cut = true;
            continue;
        }
        if (p->tokens > left) {
            c->cut = true;
            if (p->kind != SL_EMU_PART_TOOL) /* tool input stays whole JSON */
                p->text_len = (size_t)((double)p->text_len * (double)left / (double)p->tokens);
            while (p->text_len > 0 && ((unsigned char)p->text[p->text_len] & 0xC0) == 0x80)
                p->text_len--;
            p->tokens = left;
        }
        left -= p->tokens;
        c->parts[kept++] = *p;
    }
    c->n_parts = kept;
    return true;
}

/* Puts a thinking part of `n` tokens in front of the fixed parts. */
static bool prepend_thinking(sl_emu_call_t *c, int64_t n)
{
    if (n <= 0) return true;
    if (c->n_parts >= SL_EMU_MAX_PARTS) return false;
    memmove(&c->parts[1], &c->parts[0], c->n_parts * sizeof c->parts[0]);
    c->n_parts++;
    memset(&c->parts[0], 0, sizeof c->parts[0]);
    c->parts[0].kind = SL_EMU_PART_THINKING;
    c->parts[0].tokens = n;
    return fill_part(&c->parts[0], ~c->filler_seed);
}

void sl__emu_call_admit(sl_emu_call_t *c, sl_provider_call_t *call, bool ok, const char *id_prefix,
                        const char *oom_type)
{
    sl_emu_t *emu = c->emu;
    struct evhttp_request *req = c->req;
    sl_emu_api_t api = c->api;
    c->filler_answer = c->n_parts == 0;
    if (ok && c->model && !c->filler_answer)
        ok = prepend_thinking(c, sl__emu_call_thinking_tokens(c, -1));
    if (!ok || !c->model) {
        sl__emu_call_free(c);
        sl__emu_send_error(emu, req, api, 500, oom_type, "out of memory", NULL, NULL);
        return;
    }
    call->output_tokens = sl__emu_call_fixed_tokens(c);
    double now = sl__emu_now();
    sl_provider_begin(emu->provider, call, now, &c->result);
    sl__emu_add_ratelimit_headers(emu, req, api, &c->result, now);
    if (c->result.refusal != SL_PROVIDER_OK) {
        sl_provider_result_t r = c->result;
        sl__emu_call_free(c);
        sl__emu_send_refusal(emu, req, api, &r);
        return;
    }
    /* A stream that breaks off stops inside its answer: lay out the whole answer (a
     * filler one a token longer than what is sent) so the part it stops in stays open. */
    int64_t total = c->result.output_tokens;
    if (c->result.stream_error)
        total = call->output_tokens > total ? call->output_tokens : total + 1;
    if (!lay_out(c, total)) {
        sl_provider_end(emu->provider, &c->result, now);
        sl__emu_call_free(c);
        sl__emu_send_error(emu, req, api, 500, oom_type, "out of memory", NULL, NULL);
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
