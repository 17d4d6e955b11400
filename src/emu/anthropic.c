/* anthropic.c - the Anthropic Messages API: POST /v1/messages (JSON or SSE) and count_tokens.
 *
 * A request is validated (the fields the API requires), estimated with sluice's
 * tokenizer (input after the last cache_control breakpoint, the prefix up to it),
 * and handed to the provider model, which admits it or refuses it. An admitted call
 * answers with a Message whose content is, in order: a thinking block (with a
 * signature) when `thinking` is on; then filler text, a tool_use block when
 * tool_choice forces a tool ("any" or "tool"), JSON text matching the schema of
 * output_config.format (or the older output_format), or a scripted turn (--script).
 * Streams follow the documented event flow: message_start (a Message with empty
 * content and the input usage, including the cache fields), then per block
 * content_block_start, content_block_delta... (text_delta, thinking_delta then one
 * signature_delta, input_json_delta), content_block_stop, with a ping after the first
 * block's start; message_delta (stop_reason and the cumulative usage, output_tokens
 * final), message_stop; a ping also goes out after ping_interval without other events.
 *
 * Current clients send more than the first Messages API did: role "system" messages
 * inside `messages`, context_management, metadata, output_config.effort, betas in
 * anthropic-beta headers and ?beta=true. Those are accepted (fields it does not model
 * are ignored, as the API ignores what a beta does not enable). */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

/* ---- wire shapes -------------------------------------------------------------------- */

static json_t *usage_json(const sl_emu_call_t *c, int64_t output_tokens)
{
    const sl_provider_result_t *r = &c->result;
    return json_pack("{s:I, s:I, s:I, s:{s:I, s:I}, s:I, s:s}", "input_tokens",
                     (json_int_t)r->input_tokens, "cache_creation_input_tokens",
                     (json_int_t)r->cache_creation_input_tokens, "cache_read_input_tokens",
                     (json_int_t)r->cache_read_input_tokens, "cache_creation",
                     "ephemeral_5m_input_tokens",
                     (json_int_t)(r->cache_creation_input_tokens - r->cache_creation_1h_input_tokens),
                     "ephemeral_1h_input_tokens", (json_int_t)r->cache_creation_1h_input_tokens,
                     "output_tokens",
                     (json_int_t)output_tokens, "service_tier", "standard");
}

static const char *stop_reason(const sl_emu_call_t *c)
{
    if (c->cut) return "max_tokens";
    if (sl__emu_call_has_tool(c)) return "tool_use";
    if (c->filler_answer && c->result.output_tokens >= c->result.reserved_output_tokens)
        return "max_tokens";
    return "end_turn";
}

static json_t *message_json(const sl_emu_call_t *c, json_t *content, bool final)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:n, s:o}", "id", c->id, "type", "message",
                     "role", "assistant", "model", c->model, "content", content, "stop_reason",
                     final ? json_string(stop_reason(c)) : json_null(), "stop_sequence", "usage",
                     usage_json(c, final ? c->result.output_tokens : 1));
}

static void sse(struct evbuffer *out, const char *event, json_t *data)
{
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!s) return;
    evbuffer_add_printf(out, "event: %s\ndata: %s\n\n", event, s);
    free(s);
}

/* A thinking block's signature: opaque base64, as the API's are (clients send it back
 * unchanged; the emulator never checks it). Derived from the message id and the
 * block's index, so a stream and its reassembled message agree. */
static void signature(const sl_emu_call_t *c, size_t i, char *buf, size_t cap)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint64_t x = 0xcbf29ce484222325ULL ^ i;
    for (const char *p = c->id; *p; p++)
        x = (x ^ (unsigned char)*p) * 0x100000001b3ULL;
    size_t n = cap > 97 ? 96 : cap - 1;
    for (size_t k = 0; k < n; k++) {
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 32;
        buf[k] = b64[x % 64];
    }
    buf[n] = '\0';
}

/* A content block of part i: whole (`whole`) or as content_block_start has it. */
static json_t *block_json(sl_emu_call_t *c, size_t i, bool whole)
{
    sl_emu_part_t *p = &c->parts[i];
    size_t n;
    const char *text = sl__emu_part_text(p, &n);
    if (!whole) n = 0;
    if (p->kind == SL_EMU_PART_THINKING) {
        char sig[128] = "";
        if (whole) signature(c, i, sig, sizeof sig);
        return json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking", text, n, "signature",
                         sig);
    }
    if (p->kind == SL_EMU_PART_TEXT)
        return json_pack("{s:s, s:s%}", "type", "text", "text", text, n);
    if (!p->id[0]) sl__emu_new_id(c->emu, "toolu_", p->id, sizeof p->id);
    json_t *input = whole ? json_loadb(text, n, 0, NULL) : json_object();
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", p->id, "name", p->name,
                     "input", input ? input : json_object());
}

static void a_begin(sl_emu_call_t *c, struct evbuffer *out)
{
    sse(out, "message_start",
        json_pack("{s:s, s:o}", "type", "message_start", "message",
                  message_json(c, json_array(), false)));
}

static void a_part_begin(sl_emu_call_t *c, size_t i, struct evbuffer *out)
{
    sse(out, "content_block_start",
        json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", (int)i,
                  "content_block", block_json(c, i, false)));
    if (i == 0) sse(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static void a_part_delta(sl_emu_call_t *c, size_t i, const char *s, size_t n, struct evbuffer *out)
{
    json_t *delta;
    switch (c->parts[i].kind) {
    case SL_EMU_PART_THINKING:
        delta = json_pack("{s:s, s:s%}", "type", "thinking_delta", "thinking", s, n);
        break;
    case SL_EMU_PART_TOOL:
        delta = json_pack("{s:s, s:s%}", "type", "input_json_delta", "partial_json", s, n);
        break;
    default:
        delta = json_pack("{s:s, s:s%}", "type", "text_delta", "text", s, n);
        break;
    }
    sse(out, "content_block_delta",
        json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", (int)i, "delta",
                  delta));
}

static void a_part_end(sl_emu_call_t *c, size_t i, struct evbuffer *out)
{
    if (c->parts[i].kind == SL_EMU_PART_THINKING) {
        char sig[128];
        signature(c, i, sig, sizeof sig);
        sse(out, "content_block_delta",
            json_pack("{s:s, s:i, s:{s:s, s:s}}", "type", "content_block_delta", "index", (int)i,
                      "delta", "type", "signature_delta", "signature", sig));
    }
    sse(out, "content_block_stop",
        json_pack("{s:s, s:i}", "type", "content_block_stop", "index", (int)i));
}

static void a_finish(sl_emu_call_t *c, struct evbuffer *out)
{
    const sl_provider_result_t *r = &c->result;
    sse(out, "message_delta",
        json_pack("{s:s, s:{s:s, s:n}, s:{s:I, s:I, s:I, s:I}}", "type", "message_delta", "delta",
                  "stop_reason", stop_reason(c), "stop_sequence", "usage", "input_tokens",
                  (json_int_t)r->input_tokens, "cache_creation_input_tokens",
                  (json_int_t)r->cache_creation_input_tokens, "cache_read_input_tokens",
                  (json_int_t)r->cache_read_input_tokens, "output_tokens",
                  (json_int_t)r->output_tokens));
    sse(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void a_ping(sl_emu_call_t *c, struct evbuffer *out)
{
    (void)c;
    sse(out, "ping", json_pack("{s:s}", "type", "ping"));
}

/* The documented error event ("event: error", data in the error shape of a 529): the
 * provider's overloaded body. The stream ends after it. */
static void a_error(sl_emu_call_t *c, struct evbuffer *out)
{
    sl_provider_result_t r = {.refusal = SL_PROVIDER_OVERLOADED, .http_status = 529};
    char buf[256];
    size_t n = sl_provider_error_body(c->emu->provider, SL_PROVIDER_ANTHROPIC, &r, buf, sizeof buf);
    if (n == 0 || n >= sizeof buf) return;
    evbuffer_add_printf(out, "event: error\ndata: %s\n\n", buf);
}

static json_t *a_complete(sl_emu_call_t *c)
{
    json_t *content = json_array();
    for (size_t i = 0; content && i < c->n_parts; i++)
        json_array_append_new(content, block_json(c, i, true));
    return message_json(c, content, true);
}

static const sl_emu_shape_t anthropic_shape = {
    .begin = a_begin,
    .part_begin = a_part_begin,
    .part_delta = a_part_delta,
    .part_end = a_part_end,
    .finish = a_finish,
    .complete = a_complete,
    .ping = a_ping,
    .error = a_error,
};

/* ---- requests ----------------------------------------------------------------------- */

static void bad_request(sl_emu_t *emu, struct evhttp_request *req, const char *msg)
{
    sl__emu_send_error(emu, req, SL_EMU_ANTHROPIC, 400, "invalid_request_error", msg, NULL, NULL);
}

/* Checks the fields the API requires before anything else. Answers 400 and returns
 * false when one is missing or of the wrong type. */
static bool validate(sl_emu_t *emu, struct evhttp_request *req, json_t *body, bool need_max)
{
    json_t *model = json_object_get(body, "model");
    json_t *messages = json_object_get(body, "messages");
    json_t *max = json_object_get(body, "max_tokens");
    json_t *stream = json_object_get(body, "stream");
    if (!model) return bad_request(emu, req, "model: Field required"), false;
    if (!json_is_string(model) || !json_string_length(model))
        return bad_request(emu, req, "model: Input should be a non-empty string"), false;
    if (!messages) return bad_request(emu, req, "messages: Field required"), false;
    if (!json_is_array(messages))
        return bad_request(emu, req, "messages: Input should be a valid list"), false;
    if (json_array_size(messages) == 0)
        return bad_request(emu, req, "messages: at least one message is required"), false;
    if (need_max && !max) return bad_request(emu, req, "max_tokens: Field required"), false;
    if (need_max && (!json_is_integer(max) || json_integer_value(max) < 1))
        return bad_request(emu, req,
                           "max_tokens: Input should be an integer greater than or "
                           "equal to 1"),
               false;
    if (stream && !json_is_boolean(stream))
        return bad_request(emu, req, "stream: Input should be a valid boolean"), false;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        char msg[200];
        if (!role ||
            (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system"))) {
            snprintf(msg, sizeof msg,
                     "messages.%zu.role: Input should be 'user', 'assistant' or 'system'", i);
            return bad_request(emu, req, msg), false;
        }
    }
    return true;
}

/* Reads `thinking` and output_config (effort, format) or the older output_format.
 * Sets c->thinking_budget and *format (borrowed; NULL: plain text). Answers 400 and
 * returns false on a bad value. */
static bool read_options(sl_emu_t *emu, struct evhttp_request *req, json_t *body, sl_emu_call_t *c,
                         json_t **format)
{
    char msg[256];
    *format = NULL;
    json_t *thinking = json_object_get(body, "thinking");
    int64_t max_tokens = json_integer_value(json_object_get(body, "max_tokens"));
    if (thinking && !json_is_null(thinking)) {
        const char *t = json_string_value(json_object_get(thinking, "type"));
        json_t *budget = json_object_get(thinking, "budget_tokens");
        if (!t || (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")))
            return bad_request(emu, req,
                               "thinking.type: Input should be 'enabled', 'disabled' or "
                               "'adaptive'"),
                   false;
        if (!strcmp(t, "enabled")) {
            if (!json_is_integer(budget) || json_integer_value(budget) < 1024)
                return bad_request(emu, req,
                                   "thinking.enabled.budget_tokens: Input should be an integer "
                                   "greater than or equal to 1024"),
                       false;
            c->thinking_budget = json_integer_value(budget);
        } else if (!strcmp(t, "adaptive")) {
            c->thinking_budget = max_tokens;
        }
    }
    json_t *cfg = json_object_get(body, "output_config");
    if (cfg && !json_is_null(cfg) && !json_is_object(cfg))
        return bad_request(emu, req, "output_config: Input should be an object"), false;
    json_t *effort = json_object_get(cfg, "effort");
    if (effort && !json_is_null(effort)) {
        static const char *const efforts[] = {"low", "medium", "high", "xhigh", "max"};
        bool known = false;
        for (size_t k = 0; json_is_string(effort) && k < 5; k++)
            known |= !strcmp(json_string_value(effort), efforts[k]);
        if (!known)
            return bad_request(emu, req,
                               "output_config.effort: Input should be 'low', 'medium', 'high', "
                               "'xhigh' or 'max'"),
                   false;
    }
    const char *where = "output_config.format";
    json_t *f = json_object_get(cfg, "format");
    if (!f || json_is_null(f)) {
        f = json_object_get(body, "output_format");
        where = "output_format";
    }
    if (f && !json_is_null(f)) {
        const char *t = json_string_value(json_object_get(f, "type"));
        if (!t || strcmp(t, "json_schema")) {
            snprintf(msg, sizeof msg, "%s.type: Input should be 'json_schema'", where);
            return bad_request(emu, req, msg), false;
        }
        if (!json_is_object(json_object_get(f, "schema"))) {
            snprintf(msg, sizeof msg, "%s.schema: Field required (a JSON Schema object)", where);
            return bad_request(emu, req, msg), false;
        }
        *format = json_object_get(f, "schema");
    }
    return true;
}

/* The tool that tool_choice forces, or NULL for a text answer. Answers 400 and sets
 * *failed when tool_choice names a tool that is not defined. */
static json_t *forced_tool(sl_emu_t *emu, struct evhttp_request *req, json_t *body, bool *failed)
{
    *failed = false;
    json_t *choice = json_object_get(body, "tool_choice");
    json_t *tools = json_object_get(body, "tools");
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (!type || (strcmp(type, "any") != 0 && strcmp(type, "tool") != 0)) return NULL;
    if (!json_is_array(tools) || json_array_size(tools) == 0) {
        bad_request(emu, req,
                    "tool_choice: tools must be given when tool_choice is \"any\" or \"tool\"");
        *failed = true;
        return NULL;
    }
    const char *want = json_string_value(json_object_get(choice, "name"));
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (!name) continue;
        if (!strcmp(type, "any") || (want && !strcmp(name, want))) return t;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "tool_choice.name: tool \"%.100s\" is not among the tools",
             want ? want : "");
    bad_request(emu, req, msg);
    *failed = true;
    return NULL;
}

/* Estimates the body with the tokenizer. Answers 400 and returns false on a body
 * the estimator refuses (its message names the field and the value). */
static bool estimate(sl_emu_t *emu, struct evhttp_request *req, sl_api_t api, json_t *counted,
                     sl_estimate_t *est)
{
    char err[512] = "";
    int rc =
        counted ? sl_estimate_json(emu->tok, api, counted, est, err, sizeof err) : SL_TOK_ENOMEM;
    if (rc == 0) return true;
    sl_emu_api_t eapi = api == SL_API_OPENAI ? SL_EMU_OPENAI : SL_EMU_ANTHROPIC;
    if (rc == SL_TOK_EREQUEST)
        sl__emu_send_error(emu, req, eapi, 400, "invalid_request_error", err, NULL, NULL);
    else
        sl__emu_send_error(emu, req, eapi, 500, "api_error", "token counting failed", NULL, NULL);
    return false;
}

/* Fills call->earlier with the breakpoints before the last one (at most
 * --cache-breakpoints in all): each one's key, and its prefix as the tokenizer counts
 * it, which is the estimate's cached span with only that block marked (the estimator
 * counts in order, so the span ends at the one marker). The markers are taken off the
 * body and put back. Leaves call->earlier_count 0 when anything disagrees (a marker
 * the key walk does not see, such as one inside a tool_result), so the call falls
 * back to its last breakpoint alone. */
static void earlier_breakpoints(sl_emu_t *emu, json_t *body, sl_provider_call_t *call)
{
    enum { MAX_MARKED = 64 };
    sl_emu_breakpoint_t bp[MAX_MARKED];
    json_t *marker[MAX_MARKED];
    size_t n = sl__prefix_breakpoints(body, bp, MAX_MARKED);
    if (n < 2 || n > MAX_MARKED || bp[n - 1].key != call->cache_key) return;
    size_t want = (size_t)emu->opt.cache_breakpoints;
    size_t first = n > want ? n - want : 0; /* the earliest breakpoint used */
    for (size_t i = 0; i < n; i++) {
        marker[i] = json_incref(json_object_get(bp[i].block, "cache_control"));
        json_object_del(bp[i].block, "cache_control");
    }
    sl_provider_call_t tmp = *call;
    tmp.earlier_count = 0;
    bool ok = true;
    for (size_t i = first; ok && i + 1 < n; i++) {
        json_object_set(bp[i].block, "cache_control", marker[i]);
        sl_estimate_t est;
        char err[256];
        int64_t prev = tmp.earlier_count ? tmp.earlier[tmp.earlier_count - 1].prefix_tokens : 0;
        ok = sl_estimate_json(emu->tok, SL_API_ANTHROPIC, body, &est, err, sizeof err) == 0 &&
             est.cached_tokens > prev && est.cached_tokens < call->cached_prefix_tokens;
        if (ok) {
            tmp.earlier[tmp.earlier_count].prefix_tokens = est.cached_tokens;
            tmp.earlier[tmp.earlier_count].cache_key = bp[i].key;
            tmp.earlier_count++;
        }
        json_object_del(bp[i].block, "cache_control");
    }
    for (size_t i = 0; i < n; i++)
        json_object_set_new(bp[i].block, "cache_control", marker[i]);
    if (ok) *call = tmp;
}

void sl__anthropic_messages(sl_emu_t *emu, struct evhttp_request *req, json_t *body,
                            const char *raw, size_t raw_len)
{
    (void)raw;
    (void)raw_len;
    emu->n.messages++;
    if (!validate(emu, req, body, true)) return;
    bool stream = json_is_true(json_object_get(body, "stream"));
    if (stream) emu->n.messages_stream++;
    bool failed;
    json_t *tool = forced_tool(emu, req, body, &failed);
    if (failed) return;
    sl_emu_call_t *c = sl__emu_call_new(emu, req, SL_EMU_ANTHROPIC, &anthropic_shape);
    if (!c) {
        sl__emu_send_error(emu, req, SL_EMU_ANTHROPIC, 500, "api_error", "out of memory", NULL,
                           NULL);
        return;
    }
    json_t *format;
    if (!read_options(emu, req, body, c, &format)) {
        sl__emu_call_free(c);
        return;
    }
    if (tool && c->thinking_budget > 0) {
        sl__emu_call_free(c);
        bad_request(emu, req,
                    "Thinking may not be enabled when tool_choice forces tool use (tool_choice "
                    "type \"any\" or \"tool\").");
        return;
    }
    json_t *counted = sl__count_anthropic_body(body);
    sl_estimate_t est;
    if (!estimate(emu, req, SL_API_ANTHROPIC, counted, &est)) {
        json_decref(counted);
        sl__emu_call_free(c);
        return;
    }
    c->stream = stream;
    c->model = strdup(json_string_value(json_object_get(body, "model")));
    sl_provider_call_t call = {
        .input_tokens = est.input_tokens,
        .cached_prefix_tokens = est.cached_tokens,
        .max_tokens = json_integer_value(json_object_get(body, "max_tokens")),
        .output_tokens = -1,
        .stream = stream,
    };
    if (est.cached_tokens > 0 && !sl__prefix_cache_key(counted, &call.cache_key)) {
        /* The tokenizer saw a breakpoint the key walk did not: cache nothing. */
        call.input_tokens += call.cached_prefix_tokens;
        call.cached_prefix_tokens = 0;
    }
    if (call.cached_prefix_tokens > 0 && emu->opt.cache_breakpoints > 1)
        earlier_breakpoints(emu, counted, &call);
    char ttl_err[256];
    if (!sl__cache_ttls(counted, &call, ttl_err, sizeof ttl_err)) {
        json_decref(counted);
        sl__emu_call_free(c);
        bad_request(emu, req, ttl_err);
        return;
    }
    json_decref(counted);
    json_t *turn = sl__script_turn(emu, sl__script_assistant_turns(body));
    bool ok = true;
    if (turn)
        ok = sl__script_answer(c, turn);
    else if (tool)
        ok = sl__emu_call_use_tool(c, tool, "input_schema");
    else if (format)
        ok = sl__emu_call_use_schema(c, format);
    sl__emu_call_admit(c, &call, ok, "msg_", "api_error");
}

void sl__anthropic_count_tokens(sl_emu_t *emu, struct evhttp_request *req, json_t *body,
                                const char *raw, size_t raw_len)
{
    emu->n.count_tokens++;
    if (!validate(emu, req, body, false)) return;
    (void)raw;
    (void)raw_len;
    sl_estimate_t est;
    json_t *counted = sl__count_anthropic_body(body);
    bool ok = estimate(emu, req, SL_API_ANTHROPIC, counted, &est);
    json_decref(counted);
    if (!ok) return;
    /* Its own requests-per-minute bucket, after validation as for a model call. */
    double now = sl__emu_now();
    sl_provider_result_t r;
    sl_provider_count_tokens(emu->provider, now, &r);
    if (r.refusal != SL_PROVIDER_OK) {
        sl__emu_add_ratelimit_headers(emu, req, SL_EMU_ANTHROPIC, &r, now);
        sl__emu_send_refusal(emu, req, SL_EMU_ANTHROPIC, &r);
        return;
    }
    int64_t n = sl_provider_count(emu->provider, est.input_tokens + est.cached_tokens);
    sl__emu_add_ratelimit_headers(emu, req, SL_EMU_ANTHROPIC, NULL, now);
    sl__emu_send_json(req, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n));
}
