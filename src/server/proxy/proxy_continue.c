/* proxy_continue.c - capped-and-continued answers: one client answer from several capped provider
 * calls.
 *
 * With `proxy.continue_capped` (opt-in) an Anthropic Messages call on a pool with
 * `output_reserve: learned` is sent with max_tokens capped to the learned percentile
 * (proxy_output.c), so the pool reserves what the answer will most likely use instead
 * of the client's whole max_tokens. When the answer stops at that cap below the client's
 * own limit, the proxy asks again with the answer so far as an assistant prefill (the
 * model continues it) and max_tokens = what the client's limit leaves, and gives the
 * client one answer: the content joined, the stop_reason of the last part, output_tokens
 * summed, the input usage of the first part (what the client's own call would have
 * billed).
 *
 * Where it cannot be exact (docs/proxy.md):
 *   - a cut inside a tool_use block: a partial tool input is no prefill the API takes, so
 *     the block is dropped (a stream holds a tool_use block's events until it completes,
 *     so the client never sees a partial one) and the model writes it again after the
 *     text before it; its tokens are billed twice (output_tokens says so);
 *   - a cut after a complete tool_use block, or with thinking blocks: a prefill cannot
 *     hold them, so the answer ends there as the provider cut it (stop_reason
 *     max_tokens); calls with extended thinking are never capped in the first place;
 *   - the API refuses a prefill that ends in white space: it is sent without it, and the
 *     same white space at the start of the continuation is dropped;
 *   - the continuation is a new call: sampled afresh, its input billed again.
 *
 * OpenAI's APIs have no prefill: their half is proxy_continue_openai.c, to which every
 * function here hands an OpenAI call's state.
 *
 * Pure functions on JSON: the proxy (proxy.c) does the leases and the I/O. */
#include "proxy.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define MAX_ROUNDS 8 /* a call is continued at most this many times */

struct sl_cont {
    json_t *base;       /* the client's body */
    int64_t client_max; /* the client's own max_tokens */
    int64_t out_total;  /* output of the finished parts */
    int64_t round_cap;  /* max_tokens the current part was sent with */
    int rounds;         /* parts finished and continued */
    json_t *content;    /* the answer's blocks so far, as the client sees them */
    bool open_text;     /* the last of them is a text block left open for the next part */
    char ws[32];        /* white space cut from the prefill, dropped from the next part */
    bool want_more;     /* the current part was cut at its cap: continue */
    json_t *message;    /* non-stream: the first part's message (id, model, usage) */
    json_t *first_usage; /* stream: the first part's message_start usage */
    /* Stream splicing. */
    int index_base;        /* client index of the current part's block 0 */
    int next_index;        /* client index of the next new block */
    bool merge_first;      /* the part's block 0 continues the open text block */
    struct evbuffer *held; /* events held back until the next says whether it was cut */
    enum { HELD_NONE, HELD_TEXT_STOP, HELD_TOOL } held_kind;
    bool writing_tool;   /* the block being written is a tool_use (its events held) */
    json_t *block;       /* the block being written (a copy, for the prefill) */
    sl__oai_cont_t *oai; /* an OpenAI call: all of it is proxy_continue_openai.c's */
};

sl_cont_t *sl__cont_new(sl_upstream_api_t api, bool responses, const json_t *client_body,
                        const char *field, int64_t client_max_tokens)
{
    sl_cont_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    if (api == SL_UPSTREAM_OPENAI) {
        c->oai = sl__oai_cont_new(responses, client_body, field, client_max_tokens);
        if (!c->oai) {
            free(c);
            return NULL;
        }
        return c;
    }
    c->base = json_deep_copy(client_body);
    c->content = json_array();
    c->held = evbuffer_new();
    c->client_max = client_max_tokens;
    if (!c->base || !c->content || !c->held) {
        sl__cont_free(c);
        return NULL;
    }
    return c;
}

void sl__cont_free(sl_cont_t *c)
{
    if (!c) return;
    sl__oai_cont_free(c->oai);
    json_decref(c->base);
    json_decref(c->content);
    json_decref(c->message);
    json_decref(c->first_usage);
    json_decref(c->block);
    if (c->held) evbuffer_free(c->held);
    free(c);
}

void sl__cont_round(sl_cont_t *c, int64_t cap_tokens)
{
    if (c->oai) {
        sl__oai_cont_round(c->oai, cap_tokens);
        return;
    }
    c->round_cap = cap_tokens;
    c->want_more = false;
    c->index_base = c->open_text ? c->next_index - 1 : c->next_index;
    c->merge_first = c->rounds > 0 && c->open_text;
}

bool sl__cont_wants_more(const sl_cont_t *c)
{
    if (c->oai) return sl__oai_cont_wants_more(c->oai);
    return c->want_more;
}

/* Whether every block so far can go back to the API as a prefill (text only). */
static bool prefill_able(const json_t *content)
{
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *t = json_string_value(json_object_get(b, "type"));
        if (!t || strcmp(t, "text") != 0) return false;
    }
    return true;
}

/* A part stopped: does the answer go on? Cut at the cap (not at the client's limit),
 * room left, and a prefill the API takes. */
static bool goes_on(sl_cont_t *c, const char *stop_reason, int64_t output_tokens)
{
    return stop_reason && !strcmp(stop_reason, "max_tokens") && output_tokens >= c->round_cap &&
           c->out_total + output_tokens < c->client_max && c->rounds < MAX_ROUNDS &&
           prefill_able(c->content) && json_array_size(c->content) > 0;
}

/* Appends `s` to the text of block `b`, dropping the white space cut from the last
 * prefill when `s` starts with it. */
static void text_append(sl_cont_t *c, json_t *b, const char *s, size_t n)
{
    size_t w = strlen(c->ws);
    if (w && n >= w && !memcmp(s, c->ws, w)) {
        s += w;
        n -= w;
    }
    c->ws[0] = '\0';
    const char *old = json_string_value(json_object_get(b, "text"));
    size_t ol = old ? strlen(old) : 0;
    char *joined = malloc(ol + n + 1);
    if (!joined) return;
    memcpy(joined, old ? old : "", ol);
    memcpy(joined + ol, s, n);
    joined[ol + n] = '\0';
    json_object_set_new(b, "text", json_stringn(joined, ol + n));
    free(joined);
}

/* ---- the next part's body ------------------------------------------------------------- */

char *sl__cont_next_body(sl_cont_t *c, int64_t *max_tokens_left)
{
    if (c->oai) return sl__oai_cont_next_body(c->oai, max_tokens_left);
    json_t *body = json_deep_copy(c->base);
    json_t *blocks = json_deep_copy(c->content);
    if (!body || !blocks) goto fail;
    /* The API refuses a final assistant turn ending in white space. */
    json_t *last = json_array_get(blocks, json_array_size(blocks) - 1);
    const char *text = json_string_value(json_object_get(last, "text"));
    size_t n = text ? strlen(text) : 0, keep = n;
    while (keep > 0 && n - keep < sizeof(c->ws) - 1 && isspace((unsigned char)text[keep - 1]))
        keep--;
    memcpy(c->ws, text + keep, n - keep);
    c->ws[n - keep] = '\0';
    if (keep < n) json_object_set_new(last, "text", json_stringn(text, keep));
    json_t *messages = json_object_get(body, "messages");
    json_t *tail = json_array_get(messages, json_array_size(messages) - 1);
    const char *tail_role = json_string_value(json_object_get(tail, "role"));
    if (tail_role && !strcmp(tail_role, "assistant")) {
        /* The client's own prefill: the answer continues it. */
        json_t *own = json_object_get(tail, "content");
        if (json_is_string(own)) {
            json_t *as_block = json_pack("[{s:s,s:O}]", "type", "text", "text", own);
            json_array_extend(as_block, blocks);
            json_object_set_new(tail, "content", as_block);
        } else if (json_is_array(own)) {
            json_array_extend(own, blocks);
        }
        json_decref(blocks);
    } else {
        json_array_append_new(messages,
                              json_pack("{s:s,s:o}", "role", "assistant", "content", blocks));
    }
    *max_tokens_left = c->client_max - c->out_total;
    json_object_set_new(body, "max_tokens", json_integer((json_int_t)*max_tokens_left));
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    c->rounds++;
    return s;
fail:
    json_decref(body);
    json_decref(blocks);
    return NULL;
}

/* ---- whole answers -------------------------------------------------------------------- */

/* Adds a part's blocks to the answer: its first text block continues an open one. */
static void absorb_blocks(sl_cont_t *c, json_t *blocks)
{
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        const char *t = json_string_value(json_object_get(b, "type"));
        json_t *last = json_array_get(c->content, json_array_size(c->content) - 1);
        if (i == 0 && c->open_text && last && t && !strcmp(t, "text")) {
            const char *s = json_string_value(json_object_get(b, "text"));
            text_append(c, last, s ? s : "", s ? strlen(s) : 0);
            continue;
        }
        json_array_append(c->content, b);
    }
}

int sl__cont_absorb(sl_cont_t *c, const char *body, size_t len)
{
    if (c->oai) return sl__oai_cont_absorb(c->oai, body, len);
    json_t *m = json_loadb(body, len, 0, NULL);
    json_t *blocks = json_object_get(m, "content");
    json_t *usage = json_object_get(m, "usage");
    if (!json_is_array(blocks) || !json_is_object(usage)) {
        json_decref(m);
        return -1;
    }
    const char *stop = json_string_value(json_object_get(m, "stop_reason"));
    int64_t out = json_integer_value(json_object_get(usage, "output_tokens"));
    absorb_blocks(c, blocks);
    /* A tool_use cut mid-input is no prefill: without it, the model writes it again. */
    size_t last = json_array_size(c->content) - 1;
    const char *lt = json_string_value(json_object_get(json_array_get(c->content, last), "type"));
    bool cut = stop && !strcmp(stop, "max_tokens") && out >= c->round_cap;
    json_t *tool = NULL;
    if (cut && lt && !strcmp(lt, "tool_use")) {
        tool = json_incref(json_array_get(c->content, last));
        json_array_remove(c->content, last);
    }
    if (!c->message) c->message = json_incref(m);
    c->open_text = true;
    bool more = goes_on(c, stop, out);
    if (!more && tool) json_array_append(c->content, tool);
    json_decref(tool);
    c->out_total += out;
    if (!more) {
        json_object_set_new(c->message, "stop_reason", json_string(stop ? stop : "end_turn"));
        json_t *seq = json_object_get(m, "stop_sequence");
        json_object_set(c->message, "stop_sequence", seq ? seq : json_null());
    }
    json_decref(m);
    return more ? 1 : 0;
}

char *sl__cont_answer(sl_cont_t *c)
{
    if (c->oai) return sl__oai_cont_answer(c->oai);
    json_object_set(c->message, "content", c->content);
    json_t *usage = json_object_get(c->message, "usage");
    json_object_set_new(usage, "output_tokens", json_integer((json_int_t)c->out_total));
    return json_dumps(c->message, JSON_COMPACT);
}

/* ---- streams -------------------------------------------------------------------------- */

static void emit(struct evbuffer *out, const char *name, json_t *data)
{
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    if (s) evbuffer_add_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
}

/* The first line of the event `ev` (len bytes) that starts with `field`, past it. */
static const char *line_after(const char *ev, size_t len, const char *field)
{
    size_t f = strlen(field);
    for (size_t i = 0; i + f <= len; i++)
        if ((i == 0 || ev[i - 1] == '\n') && !memcmp(ev + i, field, f)) return ev + i + f;
    return NULL;
}

static json_t *event_data(const char *ev, size_t len, char name[32])
{
    name[0] = '\0';
    const char *e = line_after(ev, len, "event: ");
    if (e) {
        size_t i = 0;
        for (; i < 31 && e < ev + len && *e != '\n' && *e != '\r'; e++)
            name[i++] = *e;
        name[i] = '\0';
    }
    const char *d = line_after(ev, len, "data: ");
    return d ? json_loadb(d, (size_t)(ev + len - d), JSON_DISABLE_EOF_CHECK, NULL) : NULL;
}

static void release_held(sl_cont_t *c, struct evbuffer *out)
{
    evbuffer_add_buffer(out, c->held);
    c->held_kind = HELD_NONE;
}

/* The part's block k is the client's index_base + k. */
static void renumber(sl_cont_t *c, json_t *d)
{
    json_int_t k = json_integer_value(json_object_get(d, "index"));
    json_object_set_new(d, "index", json_integer(c->index_base + k));
}

static void on_block_start(sl_cont_t *c, json_t *d, struct evbuffer *out)
{
    release_held(c, out); /* whatever was held back: the answer went on after it */
    json_int_t k = json_integer_value(json_object_get(d, "index"));
    json_t *block = json_object_get(d, "content_block");
    const char *t = json_string_value(json_object_get(block, "type"));
    json_decref(c->block);
    c->block = NULL;
    if (k == 0 && c->merge_first && t && !strcmp(t, "text")) {
        /* The open block goes on: no new start for the client. */
        size_t last = json_array_size(c->content) - 1;
        c->block = json_incref(json_array_get(c->content, last));
        json_array_remove(c->content, last);
        c->merge_first = false;
        return;
    }
    c->merge_first = false;
    c->block = json_deep_copy(block);
    c->writing_tool = t && !strcmp(t, "tool_use");
    renumber(c, d);
    c->next_index = c->index_base + (int)k + 1;
    emit(c->writing_tool ? c->held : out, "content_block_start", d);
    if (c->writing_tool) c->held_kind = HELD_TOOL;
}

static void on_block_delta(sl_cont_t *c, json_t *d, struct evbuffer *out)
{
    json_t *delta = json_object_get(d, "delta");
    const char *t = json_string_value(json_object_get(delta, "type"));
    if (t && !strcmp(t, "text_delta") && c->block) {
        const char *s = json_string_value(json_object_get(delta, "text"));
        size_t n = s ? strlen(s) : 0, w = strlen(c->ws);
        char *own = s ? strdup(s) : NULL;
        if (own && w && n >= w && !memcmp(own, c->ws, w))
            json_object_set_new(delta, "text", json_string(own + w));
        if (own) text_append(c, c->block, own, n);
        free(own);
    }
    renumber(c, d);
    emit(c->writing_tool ? c->held : out, "content_block_delta", d);
}

/* A block's stop is held back (a tool_use block with all of it) until the next event
 * says whether the answer was cut there. */
static void on_block_stop(sl_cont_t *c, json_t *d)
{
    renumber(c, d);
    if (c->block) json_array_append_new(c->content, c->block);
    c->block = NULL;
    emit(c->held, "content_block_stop", d);
    if (!c->writing_tool) c->held_kind = HELD_TEXT_STOP;
    c->writing_tool = false;
}

static void on_message_delta(sl_cont_t *c, json_t *d, struct evbuffer *out)
{
    const char *stop =
        json_string_value(json_object_get(json_object_get(d, "delta"), "stop_reason"));
    json_t *usage = json_object_get(d, "usage");
    int64_t part = json_integer_value(json_object_get(usage, "output_tokens"));
    bool cut = stop && !strcmp(stop, "max_tokens") && part >= c->round_cap;
    json_t *tool = NULL;
    if (cut && c->held_kind == HELD_TOOL) { /* a partial tool input: try without it */
        size_t last = json_array_size(c->content) - 1;
        tool = json_incref(json_array_get(c->content, last));
        json_array_remove(c->content, last);
    }
    if (goes_on(c, stop, part)) {
        c->want_more = true;
        c->out_total += part;
        /* A text stop held back: dropped, the next part continues that block. A tool
         * block held back: dropped, the model writes it again. */
        c->open_text = c->held_kind == HELD_TEXT_STOP;
        /* The dropped block's index was never shown: the next block takes it. */
        if (tool) c->next_index--;
        evbuffer_drain(c->held, evbuffer_get_length(c->held));
        c->held_kind = HELD_NONE;
        json_decref(tool);
        return;
    }
    if (tool) json_array_append_new(c->content, tool);
    release_held(c, out);
    if (json_is_object(usage)) {
        /* The delta's usage is cumulative and the SDKs copy it over message_start's: its
         * input counts are the last part's (prompt and prefill); the answer's are the
         * first's, as a whole answer reports. */
        const char *k;
        json_t *v;
        if (c->rounds > 0)
            json_object_foreach(usage, k, v)
            {
                json_t *first = json_object_get(c->first_usage, k);
                if (strcmp(k, "output_tokens") != 0 && first) json_object_set(usage, k, first);
            }
        json_object_set_new(usage, "output_tokens",
                            json_integer((json_int_t)(c->out_total + part)));
    }
    emit(out, "message_delta", d);
}

void sl__cont_event(sl_cont_t *c, const char *ev, size_t len, bool to_client, struct evbuffer *out)
{
    if (c->oai) {
        sl__oai_cont_event(c->oai, ev, len, to_client, out);
        return;
    }
    if (!to_client) return;
    char name[32];
    json_t *d = event_data(ev, len, name);
    if (!d) { /* not an event this understands: as is */
        evbuffer_add(out, ev, len);
        evbuffer_add(out, "\n\n", 2);
        return;
    }
    if (!strcmp(name, "message_start")) {
        if (c->rounds == 0) {
            json_decref(c->first_usage);
            c->first_usage = json_incref(json_object_get(json_object_get(d, "message"), "usage"));
            emit(out, name, d);
        }
    } else if (!strcmp(name, "content_block_start")) {
        on_block_start(c, d, out);
    } else if (!strcmp(name, "content_block_delta")) {
        on_block_delta(c, d, out);
    } else if (!strcmp(name, "content_block_stop")) {
        on_block_stop(c, d);
    } else if (!strcmp(name, "message_delta")) {
        on_message_delta(c, d, out);
    } else if (!strcmp(name, "message_stop")) {
        if (!c->want_more) emit(out, name, d);
    } else if (!strcmp(name, "ping")) {
        emit(out, name, d);
    } else { /* error and anything newer: after what was held */
        release_held(c, out);
        emit(out, name[0] ? name : "message", d);
    }
    json_decref(d);
}
