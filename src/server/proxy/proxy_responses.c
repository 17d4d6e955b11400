/* proxy_responses.c - what an OpenAI Responses answer says it used: the body and the stream.
 *
 * A Response reports `usage.input_tokens` (the whole prompt, cached included, broken
 * out in input_tokens_details.cached_tokens) and `usage.output_tokens` (reasoning
 * included, broken out in output_tokens_details.reasoning_tokens: billed as output, so
 * settled as output). A stream carries the Response only in its lifecycle events;
 * `response.created` and `response.in_progress` have `usage: null`, and the usage comes
 * in the last one, `response.completed`, `response.incomplete` (cut at
 * max_output_tokens) or `response.failed`. Every delta event adds one token to the
 * rough count of output seen, used when a stream breaks before its usage arrives.
 *
 * Only lifecycle events are parsed as JSON, and of those only the `response` member's
 * `usage` (sl__usage_member); the deltas are recognised by their event name.
 *
 * Events are not all small: `response.output_text.done`, `response.content_part.done`
 * and `response.output_item.done` repeat the whole text written, so for a long answer
 * each is as big as the answer. Holding every event whole before passing it on would
 * make sluiced hold those while the client is slow, so an event that carries no usage
 * is passed on as its bytes arrive once its `event:` line has been read; only the last
 * event (the Response with its usage) is held whole to be parsed.
 */
#include "server.h"

#include <string.h>

#include <event2/buffer.h>

#define HELD_EVENT_LIMIT_BYTES (64u * 1024 * 1024) /* a longer last event is passed on unread */

static int64_t count_of(const json_t *o, const char *k, bool *have)
{
    const json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    if (have) *have = true;
    return (int64_t)json_integer_value(v);
}

/* A Response's `usage` object into `u`; anything else (null, absent) leaves it alone. */
static void responses_usage(const json_t *usage, sl_usage_t *u)
{
    if (!json_is_object(usage)) return;
    bool have_in = false, have_out = false;
    int64_t in = count_of(usage, "input_tokens", &have_in);
    int64_t out = count_of(usage, "output_tokens", &have_out);
    int64_t cached =
        count_of(json_object_get(usage, "input_tokens_details"), "cached_tokens", NULL);
    if (cached > in) cached = in;
    if (have_in) {
        u->input_tokens = in - cached;
        u->cache_read_input_tokens = cached;
        u->cache_creation_input_tokens = 0;
        u->have_input = true;
    }
    if (have_out) {
        u->output_tokens = out;
        u->have_output = true;
    }
}

void sl__responses_usage_from_body(const char *body, size_t len, sl_usage_t *u)
{
    json_t *usage = sl__usage_member(body, len, "usage");
    responses_usage(usage, u);
    json_decref(usage);
}

static bool name_is(const char *name, size_t n, const char *want)
{
    size_t k = strlen(want);
    return n == k && !memcmp(name, want, k);
}

static bool name_ends(const char *name, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && !memcmp(name + n - k, suffix, k);
}

void sl__responses_usage_from_event(const char *ev, size_t len, sl_usage_t *u)
{
    size_t nlen = 0, dlen = 0;
    const char *name = sl__sse_field(ev, len, "event:", &nlen);
    const char *data = sl__sse_field(ev, len, "data:", &dlen);
    if (!name || !data) return;
    if (name_ends(name, nlen, ".delta")) {
        u->output_seen_tokens += 1;
        return;
    }
    if (!name_is(name, nlen, "response.completed") && !name_is(name, nlen, "response.incomplete") &&
        !name_is(name, nlen, "response.failed"))
        return;
    const char *resp = sl__usage_member_at(data, dlen, "response");
    if (!resp) return;
    json_t *usage = sl__usage_member(resp, dlen - (size_t)(resp - data), "usage");
    responses_usage(usage, u);
    json_decref(usage);
}

char *sl__responses_error_event(const char *body, size_t len)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    json_t *err = json_object_get(j, "error");
    json_t *ev;
    if (json_is_object(err)) {
        ev = json_pack("{s:s,s:O?,s:O?,s:O?,s:O}", "type", "error", "code",
                       json_object_get(err, "code"), "message", json_object_get(err, "message"),
                       "param", json_object_get(err, "param"), "error", err);
    } else { /* not OpenAI's shape: its text is the message */
        ev = json_pack("{s:s,s:n,s:s%,s:n,s:{s:s%,s:s}}", "type", "error", "code", "message", body,
                       len, "param", "error", "message", body, len, "type", "server_error");
    }
    char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    json_decref(j);
    return s;
}

/* The event that ends a stream with the usage: held whole to be read. */
static bool carries_usage(const char *name, size_t n)
{
    return name_is(name, n, "response.completed") || name_is(name, n, "response.incomplete") ||
           name_is(name, n, "response.failed");
}

void sl__responses_take_events(struct evbuffer *in, struct evbuffer *out, bool *through,
                               sl_usage_t *u)
{
    for (;;) {
        size_t have = evbuffer_get_length(in);
        if (have == 0) return;
        struct evbuffer_ptr end = evbuffer_search(in, "\n\n", 2, NULL);
        if (*through) { /* the rest of an event being passed on as it comes */
            if (end.pos >= 0) {
                evbuffer_remove_buffer(in, out, (size_t)end.pos + 2);
                *through = false;
                continue;
            }
            /* A last '\n' may be the first half of the event's end: it stays. */
            unsigned char last = 0;
            struct evbuffer_ptr at;
            evbuffer_ptr_set(in, &at, have - 1, EVBUFFER_PTR_SET);
            evbuffer_copyout_from(in, &at, &last, 1);
            evbuffer_remove_buffer(in, out, have - (last == '\n'));
            return;
        }
        if (end.pos >= 0) {
            size_t len = (size_t)end.pos + 2;
            const char *ev = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
            sl__responses_usage_from_event(ev, len - 2, u);
            evbuffer_remove_buffer(in, out, len);
            continue;
        }
        struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, NULL);
        if (nl.pos < 0) { /* the event's first line is not complete yet */
            if (have > HELD_EVENT_LIMIT_BYTES) evbuffer_add_buffer(out, in);
            return;
        }
        const char *head = (const char *)evbuffer_pullup(in, nl.pos + 1);
        size_t nlen = 0;
        const char *name = sl__sse_field(head, (size_t)nl.pos, "event:", &nlen);
        if (!name || carries_usage(name, nlen)) { /* held until whole */
            if (have > HELD_EVENT_LIMIT_BYTES) evbuffer_add_buffer(out, in);
            return;
        }
        if (name_ends(name, nlen, ".delta")) u->output_seen_tokens += 1;
        *through = true;
    }
}
