/* proxy_continue_openai.c - capped-and-continued answers for OpenAI Chat Completions and the
 * Responses API: one client answer from several capped provider calls.
 *
 * The Anthropic Messages half (proxy_continue.c) continues a cut answer from an assistant
 * prefill. OpenAI has no prefill: a conversation ending with an assistant message is
 * answered with a new assistant message. So the next part is the client's body with the
 * answer's text so far appended as an assistant message (Chat Completions: a `messages`
 * entry; Responses: an `input` item) and the limit (`max_completion_tokens`,
 * `max_tokens` or `max_output_tokens`) set to what the client's own leaves; the new
 * message's text is appended to the answer as it comes. The model sees its cut text as
 * its previous turn and most likely goes on from it; nothing makes it (docs/proxy.md).
 *
 * The client gets one answer: the text joined, the finish_reason (Responses: status and
 * incomplete_details) of the last part, and the usage summed over the parts in every
 * field, which is what the provider billed and what sluice settled (each part is settled
 * on its own). A stream is spliced: the first part's opening, every part's text deltas
 * under the first part's id, and one closing: the finish chunk (held back until the
 * part's usage says whether it was cut at the cap) and one usage chunk with the sum.
 *
 * A Responses stream is spliced the same way: the first part's response.created and
 * .in_progress, every part's item events renumbered (output_index, and the message's
 * item_id: a later part's message continues the first's, its opening events dropped),
 * the message's closing events (output_text.done, content_part.done, output_item.done,
 * each repeating the whole text) held back until the part's last event says whether it
 * was cut, then sent with the whole text; sequence_number counts the client's events;
 * the last event carries the joined Response (as above) with the summed usage, under the
 * first part's id, which response.created announced (the SDKs refuse a stream whose
 * Response id changes).
 *
 * Where it cannot be exact, the answer ends as the provider cut it (finish_reason
 * "length", status incomplete): a part that wrote a tool call, a refusal or no text at
 * all (reasoning only) has nothing an assistant message can carry.
 *
 * Pure functions on JSON: the proxy (proxy.c) does the leases and the I/O. */
#include "proxy.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define MAX_ROUNDS 8 /* a call is continued at most this many times, as Anthropic's */
#define MAX_ITEMS            64 /* output items of a part renumbered; later ones keep their index */

struct sl__oai_cont {
    bool responses;        /* the Responses API; else Chat Completions */
    json_t *base;          /* the client's body */
    const char *field;     /* the client's limit field (static) */
    int64_t client_max;    /* the client's own limit */
    int64_t out_total;     /* output of the finished parts */
    int64_t round_cap;     /* the limit the current part was sent with */
    int rounds;            /* parts finished and continued */
    struct evbuffer *text; /* the answer's text so far */
    json_t *usage;         /* the finished parts' usage, summed */
    bool want_more;        /* the current part was cut at its cap: continue */
    bool part_other;       /* the part wrote what no assistant text can carry */
    json_t *first;         /* Chat: the first part's object (non-stream) */
    json_t *outputs;       /* Responses: the earlier parts' non-message output items */
    /* Chat streams. */
    json_t *id, *created;  /* the first part's chunk id and created (Responses: its id) */
    struct evbuffer *held; /* the part's finish chunk, until its usage says if it was cut */
    char finish[32];       /* that chunk's finish_reason */
    bool decided;          /* the part's usage came: held released or dropped */
    /* Responses streams. */
    json_int_t seq;            /* the client's next sequence_number */
    json_t *msg_id;            /* the answer's message item id (the first part's) */
    json_int_t msg_index;      /* its output_index for the client */
    json_int_t next_index;     /* the client's next output_index */
    json_t *part_msg_id;       /* the current part's message item id */
    json_int_t map[MAX_ITEMS]; /* the part's output_index -> the client's (-1: none yet) */
};

bool sl__oai_cont_takes(const json_t *body, bool responses)
{
    const json_t *format = responses ? json_object_get(json_object_get(body, "text"), "format")
                                     : json_object_get(body, "response_format");
    const char *type = json_string_value(json_object_get(format, "type"));
    return !type || (strcmp(type, "json_schema") && strcmp(type, "json_object"));
}

sl__oai_cont_t *sl__oai_cont_new(bool responses, const json_t *client_body, const char *field,
                                 int64_t client_max_tokens)
{
    sl__oai_cont_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->responses = responses;
    c->field = field;
    c->client_max = client_max_tokens;
    c->base = json_deep_copy(client_body);
    c->text = evbuffer_new();
    c->held = evbuffer_new();
    c->usage = json_object();
    c->outputs = json_array();
    if (!c->base || !c->text || !c->held || !c->usage || !c->outputs) {
        sl__oai_cont_free(c);
        return NULL;
    }
    return c;
}

void sl__oai_cont_free(sl__oai_cont_t *c)
{
    if (!c) return;
    json_decref(c->base);
    json_decref(c->usage);
    json_decref(c->first);
    json_decref(c->outputs);
    json_decref(c->id);
    json_decref(c->created);
    json_decref(c->msg_id);
    json_decref(c->part_msg_id);
    if (c->text) evbuffer_free(c->text);
    if (c->held) evbuffer_free(c->held);
    free(c);
}

void sl__oai_cont_round(sl__oai_cont_t *c, int64_t cap_tokens)
{
    c->round_cap = cap_tokens;
    c->want_more = false;
    c->part_other = false;
    c->decided = false;
    c->finish[0] = '\0';
    evbuffer_drain(c->held, evbuffer_get_length(c->held));
    json_decref(c->part_msg_id);
    c->part_msg_id = NULL;
    for (int i = 0; i < MAX_ITEMS; i++)
        c->map[i] = -1;
}

bool sl__oai_cont_wants_more(const sl__oai_cont_t *c)
{
    return c->want_more;
}

void sl__usage_sum(json_t *into, const json_t *part)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)part, key, v)
    {
        json_t *have = json_object_get(into, key);
        if (json_is_integer(v)) {
            json_int_t sum =
                json_integer_value(v) + (json_is_integer(have) ? json_integer_value(have) : 0);
            json_object_set_new(into, key, json_integer(sum));
        } else if (json_is_object(v)) {
            if (!json_is_object(have)) {
                have = json_object();
                json_object_set_new(into, key, have);
            }
            sl__usage_sum(have, v);
        } else if (!have) {
            json_object_set(into, key, v);
        }
    }
}

/* The part's output tokens, from its usage. */
static int64_t part_output(const sl__oai_cont_t *c, const json_t *usage)
{
    const char *k = c->responses ? "output_tokens" : "completion_tokens";
    return (int64_t)json_integer_value(json_object_get(usage, k));
}

/* A part ended with `cut` (finish_reason length / incomplete at max_output_tokens) and
 * `usage`: does the answer go on? Cut at the cap (not at the client's limit), room
 * left, and text an assistant message can carry. Either way the usage is summed. */
static bool part_ended(sl__oai_cont_t *c, bool cut, const json_t *usage)
{
    int64_t out = part_output(c, usage);
    int64_t least = c->responses ? SL_PROXY_RESPONSES_MIN_OUTPUT : 1; /* what the next part may ask */
    bool more = cut && out >= c->round_cap && c->out_total + out + least <= c->client_max &&
                c->rounds < MAX_ROUNDS && !c->part_other && evbuffer_get_length(c->text) > 0;
    if (json_is_object(usage)) sl__usage_sum(c->usage, usage);
    c->out_total += out;
    c->want_more = more;
    return more;
}

/* ---- the next part's body ------------------------------------------------------------- */

char *sl__oai_cont_next_body(sl__oai_cont_t *c, int64_t *max_tokens_left)
{
    json_t *body = json_deep_copy(c->base);
    size_t n = evbuffer_get_length(c->text);
    json_t *said = json_stringn((const char *)evbuffer_pullup(c->text, -1), n);
    json_t *turn = said ? json_pack("{s:s,s:o}", "role", "assistant", "content", said) : NULL;
    if (!body || !turn) goto fail;
    const char *list = c->responses ? "input" : "messages";
    json_t *items = json_object_get(body, list);
    if (json_is_string(items)) { /* Responses: a string input is one user message */
        items = json_pack("[{s:s,s:O}]", "role", "user", "content", items);
        json_object_set_new(body, list, items);
    }
    if (!json_is_array(items) || json_array_append_new(items, turn) != 0) {
        turn = NULL;
        goto fail;
    }
    *max_tokens_left = c->client_max - c->out_total;
    json_object_set_new(body, c->field, json_integer((json_int_t)*max_tokens_left));
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    c->rounds++;
    return s;
fail:
    json_decref(body);
    json_decref(turn);
    return NULL;
}

/* ---- whole answers: Chat Completions -------------------------------------------------- */

/* Whether a Chat message (or delta) carries what no assistant text can: a tool call or a
 * refusal. */
static bool chat_other(const json_t *m)
{
    const json_t *calls = json_object_get(m, "tool_calls");
    return (json_is_array(calls) && json_array_size(calls) > 0) ||
           json_is_object(json_object_get(m, "function_call")) ||
           json_is_string(json_object_get(m, "refusal"));
}

static int chat_absorb(sl__oai_cont_t *c, json_t *m)
{
    json_t *choice = json_array_get(json_object_get(m, "choices"), 0);
    json_t *msg = json_object_get(choice, "message");
    json_t *usage = json_object_get(m, "usage");
    if (!json_is_object(msg) || !json_is_object(usage) ||
        json_array_size(json_object_get(m, "choices")) != 1)
        return -1;
    const char *s = json_string_value(json_object_get(msg, "content"));
    if (s) evbuffer_add(c->text, s, strlen(s));
    c->part_other = chat_other(msg);
    const char *finish = json_string_value(json_object_get(choice, "finish_reason"));
    if (!c->first) c->first = json_incref(m);
    if (part_ended(c, finish && !strcmp(finish, "length"), usage)) return 1;
    /* The answer: the first part's object, the text joined, the last part's ending. */
    json_t *one = json_array_get(json_object_get(c->first, "choices"), 0);
    json_t *one_msg = json_object_get(one, "message");
    if (c->first != m) {
        size_t n = evbuffer_get_length(c->text);
        json_object_set_new(one_msg, "content",
                            json_stringn((const char *)evbuffer_pullup(c->text, -1), n));
        const char *keys[] = {"tool_calls", "function_call", "refusal", "annotations"};
        for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++) {
            json_t *v = json_object_get(msg, keys[i]);
            if (v) json_object_set(one_msg, keys[i], v);
        }
        json_object_set(one, "finish_reason", json_object_get(choice, "finish_reason"));
    }
    json_object_set(c->first, "usage", c->usage);
    return 0;
}

/* ---- whole answers: Responses --------------------------------------------------------- */

/* The text of a Response's message items, appended to the answer; whether it wrote
 * anything else than messages and reasoning (a function call, a refusal). */
static void responses_read(sl__oai_cont_t *c, const json_t *output)
{
    size_t i, k;
    json_t *item, *part;
    json_array_foreach(output, i, item)
    {
        const char *t = json_string_value(json_object_get(item, "type"));
        if (!t || !strcmp(t, "reasoning")) continue;
        if (strcmp(t, "message")) {
            c->part_other = true;
            continue;
        }
        json_array_foreach(json_object_get(item, "content"), k, part)
        {
            const char *pt = json_string_value(json_object_get(part, "type"));
            const char *s = json_string_value(json_object_get(part, "text"));
            if (pt && !strcmp(pt, "output_text") && s)
                evbuffer_add(c->text, s, strlen(s));
            else
                c->part_other = true; /* a refusal */
        }
    }
}

/* Whether a Response stopped at its max_output_tokens. */
static bool responses_cut(const json_t *r)
{
    const char *status = json_string_value(json_object_get(r, "status"));
    const char *why =
        json_string_value(json_object_get(json_object_get(r, "incomplete_details"), "reason"));
    return status && !strcmp(status, "incomplete") && why && !strcmp(why, "max_output_tokens");
}

/* The last part's Response `r` becomes the answer: the earlier parts' reasoning items
 * first, then its own output with its first message's text replaced by the whole text
 * (a message is added when it wrote none), the summed usage. Its id is the last part's:
 * a stored Response chained with previous_response_id then holds the whole answer (the
 * input, the cut text as an assistant message and the rest). */
static void responses_join(sl__oai_cont_t *c, json_t *r, json_t *first_message)
{
    json_t *output = json_object_get(r, "output");
    json_t *joined = json_deep_copy(c->outputs);
    size_t n = evbuffer_get_length(c->text);
    json_t *text = json_stringn((const char *)evbuffer_pullup(c->text, -1), n);
    bool placed = false;
    size_t i;
    json_t *item;
    json_array_foreach(output, i, item)
    {
        const char *t = json_string_value(json_object_get(item, "type"));
        if (!placed && t && !strcmp(t, "message")) {
            json_t *part = json_array_get(json_object_get(item, "content"), 0);
            json_object_set(part, "text", text);
            placed = true;
        }
        json_array_append(joined, item);
    }
    if (!placed && first_message) {
        json_t *m = json_deep_copy(first_message);
        json_object_set(json_array_get(json_object_get(m, "content"), 0), "text", text);
        json_array_insert_new(joined, json_array_size(c->outputs), m);
    }
    json_decref(text);
    json_object_set_new(r, "output", joined);
    json_object_set(r, "usage", c->usage);
}

/* The first message item of `output`, or NULL. */
static json_t *first_message(json_t *output)
{
    size_t i;
    json_t *item;
    json_array_foreach(output, i, item)
    {
        const char *t = json_string_value(json_object_get(item, "type"));
        if (t && !strcmp(t, "message")) return item;
    }
    return NULL;
}

static int responses_absorb(sl__oai_cont_t *c, json_t *r)
{
    json_t *output = json_object_get(r, "output");
    json_t *usage = json_object_get(r, "usage");
    if (!json_is_array(output) || !json_is_object(usage)) return -1;
    responses_read(c, output);
    if (!c->first && first_message(output)) c->first = json_incref(first_message(output));
    if (part_ended(c, responses_cut(r), usage)) {
        size_t i;
        json_t *item;
        json_array_foreach(output, i, item)
        {
            const char *t = json_string_value(json_object_get(item, "type"));
            if (t && !strcmp(t, "reasoning")) json_array_append(c->outputs, item);
        }
        return 1;
    }
    if (c->rounds > 0) responses_join(c, r, c->first);
    json_object_set_new(r, c->field, json_integer((json_int_t)c->client_max)); /* as asked */
    json_decref(c->first);
    c->first = json_incref(r);
    return 0;
}

int sl__oai_cont_absorb(sl__oai_cont_t *c, const char *body, size_t len)
{
    json_t *m = json_loadb(body, len, 0, NULL);
    int rc = !json_is_object(m) ? -1 : c->responses ? responses_absorb(c, m) : chat_absorb(c, m);
    json_decref(m);
    return rc;
}

char *sl__oai_cont_answer(sl__oai_cont_t *c)
{
    return c->first ? json_dumps(c->first, JSON_COMPACT) : NULL;
}

/* ---- streams: Chat Completions -------------------------------------------------------- */

static void data_line(struct evbuffer *out, const json_t *d)
{
    char *s = json_dumps(d, JSON_COMPACT);
    if (s) evbuffer_add_printf(out, "data: %s\n\n", s);
    free(s);
}

/* Whether a continuation's delta says nothing the client has not had: the opening
 * chunk's role, an empty content, a null refusal. */
static bool delta_empty(json_t *delta)
{
    const char *key;
    json_t *v;
    json_object_foreach(delta, key, v)
    {
        if (json_is_null(v) ||
            (!strcmp(key, "content") && json_is_string(v) && json_string_length(v) == 0))
            continue;
        return false;
    }
    return true;
}

/* A chunk with choices: the text noted, a later part's chunk under the first part's
 * id, the finish chunk held back. */
static void chat_chunk(sl__oai_cont_t *c, json_t *d, struct evbuffer *out)
{
    json_t *choice = json_array_get(json_object_get(d, "choices"), 0);
    json_t *delta = json_object_get(choice, "delta");
    const json_t *finish = json_object_get(choice, "finish_reason");
    if (!c->id) {
        c->id = json_incref(json_object_get(d, "id"));
        c->created = json_incref(json_object_get(d, "created"));
    } else if (c->rounds > 0) {
        if (c->id) json_object_set(d, "id", c->id);
        if (c->created) json_object_set(d, "created", c->created);
        json_object_del(delta, "role");
        if (json_is_object(delta) && delta_empty(delta) && json_is_null(finish)) return;
    }
    const char *s = json_string_value(json_object_get(delta, "content"));
    if (s) evbuffer_add(c->text, s, strlen(s));
    if (chat_other(delta)) c->part_other = true;
    if (json_is_string(finish)) {
        snprintf(c->finish, sizeof(c->finish), "%s", json_string_value(finish));
        data_line(c->held, d);
        return;
    }
    data_line(out, d);
}

/* The usage chunk ends the part: the held finish chunk goes out with the summed usage,
 * or both are dropped and the next part goes on. */
static void chat_usage_chunk(sl__oai_cont_t *c, json_t *d, bool to_client, struct evbuffer *out)
{
    c->decided = true;
    if (part_ended(c, !strcmp(c->finish, "length"), json_object_get(d, "usage"))) {
        evbuffer_drain(c->held, evbuffer_get_length(c->held));
        return;
    }
    evbuffer_add_buffer(out, c->held);
    if (!to_client) return;
    if (c->id) json_object_set(d, "id", c->id);
    if (c->created) json_object_set(d, "created", c->created);
    json_object_set(d, "usage", c->usage);
    data_line(out, d);
}

/* ---- streams: Responses -------------------------------------------------------------- */

static void responses_emit(sl__oai_cont_t *c, struct evbuffer *out, json_t *d)
{
    json_object_set_new(d, "sequence_number", json_integer(c->seq++));
    const char *type = json_string_value(json_object_get(d, "type"));
    char *s = json_dumps(d, JSON_COMPACT);
    if (s) evbuffer_add_printf(out, "event: %s\ndata: %s\n\n", type ? type : "message", s);
    free(s);
}

/* The client's output_index for the part's `k`: the answer's message for the part's
 * message, a new one for any other item. */
static json_int_t client_index(sl__oai_cont_t *c, json_int_t k, bool message)
{
    if (k < 0 || k >= MAX_ITEMS) return c->next_index + k;
    if (c->map[k] < 0) {
        if (message && c->msg_id && c->rounds > 0) {
            c->map[k] = c->msg_index;
        } else {
            c->map[k] = c->next_index++;
            if (message && !c->msg_id) c->msg_index = c->map[k];
        }
    }
    return c->map[k];
}

/* An item event: renumbered; the part's message under the answer's message id; the
 * message's own opening events of a later part dropped; its closing events held back
 * until the part's end says whether it was cut. */
static void responses_item_event(sl__oai_cont_t *c, const char *type, json_t *d,
                                 struct evbuffer *out)
{
    json_t *item = json_object_get(d, "item");
    const char *it = json_string_value(json_object_get(item, "type"));
    if (!strcmp(type, "response.output_item.added") && it && !strcmp(it, "message") &&
        !c->part_msg_id)
        c->part_msg_id = json_incref(json_object_get(item, "id"));
    json_t *item_id = json_object_get(d, "item_id");
    if (!item_id) item_id = json_object_get(item, "id");
    bool message = c->part_msg_id && json_equal(item_id, c->part_msg_id);
    bool merged = message && c->msg_id && c->rounds > 0;
    json_int_t k = json_integer_value(json_object_get(d, "output_index"));
    json_object_set_new(d, "output_index", json_integer(client_index(c, k, message)));
    if (message && !c->msg_id) c->msg_id = json_incref(item_id);
    if (merged) {
        if (json_object_get(d, "item_id")) json_object_set(d, "item_id", c->msg_id);
        if (json_is_object(item)) json_object_set(item, "id", c->msg_id);
        if (!strcmp(type, "response.output_item.added") ||
            !strcmp(type, "response.content_part.added"))
            return;
    }
    if (message && (!strcmp(type, "response.output_text.done") ||
                    !strcmp(type, "response.content_part.done") ||
                    !strcmp(type, "response.output_item.done"))) {
        char *s = json_dumps(d, JSON_COMPACT);
        if (s) evbuffer_add_printf(c->held, "%s\n", s);
        free(s);
        return;
    }
    responses_emit(c, out, d);
}

/* The held closing events of the message, their text the whole answer's. */
static void release_message_done(sl__oai_cont_t *c, struct evbuffer *out)
{
    size_t n = evbuffer_get_length(c->text);
    json_t *text = json_stringn((const char *)evbuffer_pullup(c->text, -1), n);
    char *line;
    size_t len;
    while ((line = evbuffer_readln(c->held, &len, EVBUFFER_EOL_LF))) {
        json_t *d = json_loadb(line, len, 0, NULL);
        free(line);
        if (!d) continue;
        if (c->rounds > 0) {
            json_t *part = json_object_get(d, "part");
            json_t *item = json_object_get(d, "item");
            if (json_object_get(d, "text")) json_object_set(d, "text", text);
            if (json_is_object(part)) json_object_set(part, "text", text);
            if (json_is_object(item))
                json_object_set(json_array_get(json_object_get(item, "content"), 0), "text", text);
        }
        responses_emit(c, out, d);
        json_decref(d);
    }
    json_decref(text);
}

/* The part's last event (response.completed, .incomplete, .failed): the answer goes on
 * (everything held dropped), or ends with the message's closing events and the joined
 * Response with the summed usage. */
static void responses_end(sl__oai_cont_t *c, json_t *d, struct evbuffer *out)
{
    json_t *r = json_object_get(d, "response");
    int rc = json_is_object(r) ? responses_absorb(c, r) : -1;
    if (rc == 1) {
        c->want_more = true;
        evbuffer_drain(c->held, evbuffer_get_length(c->held));
        return;
    }
    release_message_done(c, out);
    /* The ids the stream announced: the SDKs refuse a stream whose Response id changes. */
    if (rc == 0 && c->id) json_object_set(c->first, "id", c->id);
    json_t *message = rc == 0 ? first_message(json_object_get(c->first, "output")) : NULL;
    if (message && c->msg_id) json_object_set(message, "id", c->msg_id);
    if (rc == 0) json_object_set(d, "response", c->first);
    responses_emit(c, out, d);
}

static void responses_event(sl__oai_cont_t *c, json_t *d, struct evbuffer *out)
{
    const char *type = json_string_value(json_object_get(d, "type"));
    json_t *r = json_object_get(d, "response");
    if (!type) {
        responses_emit(c, out, d);
    } else if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete") ||
               !strcmp(type, "response.failed")) {
        responses_end(c, d, out);
    } else if (json_is_object(r)) { /* created, in_progress: the first part's */
        if (c->rounds > 0) return;
        if (!c->id) c->id = json_incref(json_object_get(r, "id"));
        json_object_set_new(r, c->field, json_integer((json_int_t)c->client_max));
        responses_emit(c, out, d);
    } else if (json_object_get(d, "output_index")) {
        /* The text is read from the part's last event, whole (responses_end). */
        responses_item_event(c, type, d, out);
    } else {
        responses_emit(c, out, d);
    }
}

void sl__oai_cont_event(sl__oai_cont_t *c, const char *ev, size_t len, bool to_client,
                        struct evbuffer *out)
{
    size_t n = 0;
    const char *v = sl__sse_field(ev, len, "data:", &n);
    json_t *d = v ? json_loadb(v, n, 0, NULL) : NULL;
    if (c->responses) {
        if (json_is_object(d))
            responses_event(c, d, out);
        else if (to_client) { /* not an event this understands: as it came */
            evbuffer_add(out, ev, len);
            evbuffer_add(out, "\n\n", 2);
        }
        json_decref(d);
        return;
    }
    if (v && n == 6 && !memcmp(v, "[DONE]", 6)) {
        if (c->want_more) return;
        evbuffer_add_buffer(out, c->held); /* a part without usage: its finish as it came */
        evbuffer_add(out, ev, len);
        evbuffer_add(out, "\n\n", 2);
        return;
    }
    json_t *choices = json_object_get(d, "choices");
    if (json_is_array(choices) && json_array_size(choices) > 0) {
        chat_chunk(c, d, out);
    } else if (json_is_array(choices) && json_is_object(json_object_get(d, "usage"))) {
        chat_usage_chunk(c, d, to_client, out);
    } else if (to_client) { /* not a chunk this understands, an error: after what was held */
        evbuffer_add_buffer(out, c->held);
        evbuffer_add(out, ev, len);
        evbuffer_add(out, "\n\n", 2);
    }
    json_decref(d);
}
