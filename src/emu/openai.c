/* openai.c - the OpenAI Chat Completions API: POST /v1/chat/completions (JSON or SSE).
 *
 * The same provider model as the Anthropic endpoint (one key, one set of buckets),
 * answered in OpenAI's shapes: a chat.completion object, or chat.completion.chunk
 * events ("data: {...}" lines ending with "data: [DONE]"). With
 * stream_options.include_usage every chunk carries "usage": null and one last chunk
 * with empty choices carries the usage, as documented. tool_choice "required" or a
 * named function makes the answer a tool call; OpenAI reports finish_reason
 * "tool_calls" for "required" and "stop" for a named function, and so does this.
 * No prompt caching is modelled for OpenAI (cached_tokens is always 0). */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

/* max_tokens charged when a request gives neither max_completion_tokens nor max_tokens. */
#define OPENAI_DEFAULT_MAX_TOKENS 4096

static const char *finish_reason(const sl_emu_call_t *c)
{
    if (c->tool.name) return c->tool_named ? "stop" : "tool_calls";
    if (c->result.output_tokens >= c->result.reserved_output_tokens) return "length";
    return "stop";
}

static json_t *usage_json(const sl_emu_call_t *c)
{
    const sl_provider_result_t *r = &c->result;
    int64_t prompt = r->input_tokens + r->cache_creation_input_tokens + r->cache_read_input_tokens;
    return json_pack("{s:I, s:I, s:I, s:{s:I, s:i}, s:{s:i, s:i, s:i, s:i}}", "prompt_tokens",
                     (json_int_t)prompt, "completion_tokens", (json_int_t)r->output_tokens,
                     "total_tokens", (json_int_t)(prompt + r->output_tokens),
                     "prompt_tokens_details", "cached_tokens",
                     (json_int_t)r->cache_read_input_tokens, "audio_tokens", 0,
                     "completion_tokens_details", "reasoning_tokens", 0, "audio_tokens", 0,
                     "accepted_prediction_tokens", 0, "rejected_prediction_tokens", 0);
}

static json_t *tool_call_json(sl_emu_call_t *c, bool with_index, const char *args)
{
    char cid[48];
    sl__emu_new_id(c->emu, "call_", cid, sizeof cid);
    json_t *tc = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", cid, "type", "function", "function",
                           "name", c->tool.name, "arguments", args);
    if (tc && with_index) json_object_set_new(tc, "index", json_integer(0));
    return tc;
}

/* ---- streaming ---------------------------------------------------------------------- */

static json_t *chunk(sl_emu_call_t *c, json_t *delta, const char *finish)
{
    json_t *choice = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "delta", delta, "logprobs",
                               "finish_reason", finish ? json_string(finish) : json_null());
    json_t *ch =
        json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:[o]}", "id", c->id, "object",
                  "chat.completion.chunk", "created", (json_int_t)c->created_unix, "model",
                  c->model, "service_tier", "default", "system_fingerprint", "choices", choice);
    if (ch && c->include_usage) json_object_set_new(ch, "usage", json_null());
    return ch;
}

static void data_line(struct evbuffer *out, json_t *data)
{
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!s) return;
    evbuffer_add_printf(out, "data: %s\n\n", s);
    free(s);
}

static void o_begin(sl_emu_call_t *c, struct evbuffer *out)
{
    json_t *delta;
    if (c->tool.name)
        delta = json_pack("{s:s, s:n, s:n, s:[o]}", "role", "assistant", "content", "refusal",
                          "tool_calls", tool_call_json(c, true, ""));
    else
        delta = json_pack("{s:s, s:s, s:n}", "role", "assistant", "content", "", "refusal");
    data_line(out, chunk(c, delta, NULL));
}

static void o_tokens(sl_emu_call_t *c, int64_t from, int64_t to, struct evbuffer *out)
{
    json_t *delta;
    if (c->tool.name) {
        size_t len = strlen(c->tool.input_json);
        int64_t n = c->result.output_tokens;
        size_t a = from >= n ? len : (size_t)((double)len * (double)from / (double)n);
        size_t b = to >= n ? len : (size_t)((double)len * (double)to / (double)n);
        delta = json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", 0, "function",
                          "arguments", c->tool.input_json + a, b - a);
    } else {
        struct evbuffer *text = evbuffer_new();
        if (!text) return;
        sl__filler_append(c->filler_seed, from, to, text);
        delta = json_pack("{s:s%}", "content", (const char *)evbuffer_pullup(text, -1),
                          evbuffer_get_length(text));
        evbuffer_free(text);
    }
    data_line(out, chunk(c, delta, NULL));
}

static void o_finish(sl_emu_call_t *c, struct evbuffer *out)
{
    data_line(out, chunk(c, json_object(), finish_reason(c)));
    if (c->include_usage)
        data_line(out, json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:[], s:o}", "id", c->id, "object",
                                 "chat.completion.chunk", "created", (json_int_t)c->created_unix,
                                 "model", c->model, "service_tier", "default", "system_fingerprint",
                                 "choices", "usage", usage_json(c)));
    evbuffer_add_printf(out, "data: [DONE]\n\n");
}

static json_t *o_complete(sl_emu_call_t *c)
{
    json_t *message;
    if (c->tool.name) {
        message =
            json_pack("{s:s, s:n, s:n, s:[], s:[o]}", "role", "assistant", "content", "refusal",
                      "annotations", "tool_calls", tool_call_json(c, false, c->tool.input_json));
    } else {
        char *text = sl__filler_text(c->filler_seed, c->result.output_tokens);
        message = json_pack("{s:s, s:s, s:n, s:[]}", "role", "assistant", "content",
                            text ? text : "", "refusal", "annotations");
        free(text);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:s}], s:o, s:s, s:n}", "id", c->id,
                     "object", "chat.completion", "created", (json_int_t)c->created_unix, "model",
                     c->model, "choices", "index", 0, "message", message, "logprobs",
                     "finish_reason", finish_reason(c), "usage", usage_json(c), "service_tier",
                     "default", "system_fingerprint");
}

static const sl_emu_shape_t openai_shape = {
    .begin = o_begin,
    .tokens = o_tokens,
    .finish = o_finish,
    .complete = o_complete,
    .ping = NULL,
};

/* ---- requests ----------------------------------------------------------------------- */

static void bad_request(sl_emu_t *emu, struct evhttp_request *req, const char *msg,
                        const char *param)
{
    sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error", msg, param, NULL);
}

/* Checks the request's fields; answers 400 and returns false on a bad one. Sets
 * *max_tokens (the limit the buckets are charged with). */
static bool validate(sl_emu_t *emu, struct evhttp_request *req, json_t *body, int64_t *max_tokens)
{
    json_t *model = json_object_get(body, "model");
    json_t *messages = json_object_get(body, "messages");
    json_t *stream = json_object_get(body, "stream");
    json_t *opts = json_object_get(body, "stream_options");
    json_t *n = json_object_get(body, "n");
    if (!json_is_string(model) || !json_string_length(model))
        return bad_request(emu, req, "you must provide a model parameter", "model"), false;
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return bad_request(emu, req, "'messages' must be a non-empty array", "messages"), false;
    if (stream && !json_is_null(stream) && !json_is_boolean(stream))
        return bad_request(emu, req, "'stream' must be a boolean", "stream"), false;
    if (opts && !json_is_null(opts) && !json_is_true(stream))
        return bad_request(emu, req,
                           "The 'stream_options' parameter is only allowed when 'stream' is "
                           "enabled.",
                           "stream_options"),
               false;
    if (n && !json_is_null(n) && (!json_is_integer(n) || json_integer_value(n) != 1))
        return bad_request(emu, req, "n: sluice-emu answers one choice only (n = 1)", "n"), false;
    const char *fields[] = {"max_completion_tokens", "max_tokens"};
    *max_tokens = OPENAI_DEFAULT_MAX_TOKENS;
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(body, fields[i]);
        if (!v || json_is_null(v)) continue;
        if (!json_is_integer(v) || json_integer_value(v) < 1) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "Invalid '%s': integer below minimum value. Expected a "
                     "value >= 1.",
                     fields[i]);
            return bad_request(emu, req, msg, fields[i]), false;
        }
        *max_tokens = json_integer_value(v);
        break;
    }
    return true;
}

/* The function tool_choice forces ("required": the first; {"type":"function",
 * "function":{"name":N}}: that one), or NULL. Answers 400 and sets *failed when the
 * named function is not defined. */
static json_t *forced_tool(sl_emu_t *emu, struct evhttp_request *req, json_t *body, bool *named,
                           bool *failed)
{
    *failed = *named = false;
    json_t *choice = json_object_get(body, "tool_choice");
    json_t *tools = json_object_get(body, "tools");
    const char *want = NULL;
    if (json_is_string(choice) && !strcmp(json_string_value(choice), "required")) {
        want = NULL;
    } else if (json_is_object(choice)) {
        want = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
        *named = true;
    } else {
        return NULL;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (name && (!want || !strcmp(name, want))) return fn;
    }
    char msg[200];
    snprintf(msg, sizeof msg,
             "Invalid value for 'tool_choice': no function named '%.100s' in "
             "'tools'.",
             want ? want : "");
    bad_request(emu, req, msg, "tool_choice");
    *failed = true;
    return NULL;
}

void sl__openai_chat(sl_emu_t *emu, struct evhttp_request *req, json_t *body, const char *raw,
                     size_t raw_len)
{
    emu->n.chat_completions++;
    int64_t max_tokens;
    if (!validate(emu, req, body, &max_tokens)) return;
    bool stream = json_is_true(json_object_get(body, "stream"));
    if (stream) emu->n.chat_stream++;
    bool named, failed;
    json_t *tool = forced_tool(emu, req, body, &named, &failed);
    if (failed) return;
    sl_estimate_t est;
    char err[512] = "";
    int rc = sl_estimate_request(emu->tok, SL_API_OPENAI, raw, raw_len, &est, err, sizeof err);
    if (rc != 0) {
        if (rc == SL_TOK_EREQUEST)
            bad_request(emu, req, err, NULL);
        else
            sl__emu_send_error(emu, req, SL_EMU_OPENAI, 500, "server_error",
                               "token counting failed", NULL, NULL);
        return;
    }

    sl_emu_call_t *c = sl__emu_call_new(emu, req, SL_EMU_OPENAI, &openai_shape);
    if (!c) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 500, "server_error", "out of memory", NULL,
                           NULL);
        return;
    }
    c->stream = stream;
    c->include_usage =
        stream &&
        json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage"));
    c->model = strdup(json_string_value(json_object_get(body, "model")));
    sl_provider_call_t call = {
        .input_tokens = est.input_tokens + est.cached_tokens,
        .cached_prefix_tokens = 0,
        .max_tokens = max_tokens,
        .output_tokens = -1,
        /* .stream stays false: OpenAI does not document how a stream breaks off with an
         * error, so --stream-error-rate does not apply here (docs/emu.md). */
    };
    if (tool) {
        sl__emu_call_use_tool(c, tool, "parameters", &call);
        c->tool_named = named;
    }
    sl__emu_call_admit(c, &call, tool != NULL, "chatcmpl-", "server_error");
}
