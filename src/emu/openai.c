/* openai.c - the OpenAI Chat Completions API: POST /v1/chat/completions (JSON or SSE).
 *
 * The same provider model as the Anthropic endpoint (one key, one set of buckets),
 * answered in OpenAI's shapes: a chat.completion object, or chat.completion.chunk
 * events ("data: {...}" lines ending with "data: [DONE]"). With
 * stream_options.include_usage every chunk carries "usage": null and one last chunk
 * with empty choices carries the usage, as documented. tool_choice "required" or a
 * named function makes the answer a tool call; OpenAI reports finish_reason
 * "tool_calls" for "required" and "stop" for a named function, and so does this.
 * response_format json_schema / json_object answers JSON text (matching the schema);
 * reasoning_effort (other than none / minimal) adds hidden reasoning tokens to the
 * output, reported as completion_tokens_details.reasoning_tokens. `n` (1..128) answers
 * n choices as OpenAI charges them: max_tokens x n held from the start, every choice's
 * tokens billed (completion_tokens is their sum); the choices carry the same answer.
 * No prompt caching is modelled for OpenAI (cached_tokens is always 0). */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

static int64_t choices_of(const sl_emu_call_t *c)
{
    return c->choices > 1 ? c->choices : 1;
}

static const char *finish_reason(const sl_emu_call_t *c)
{
    if (c->cut) return "length";
    if (sl__emu_call_has_tool(c)) return c->tool_named ? "stop" : "tool_calls";
    if (c->filler_answer &&
        c->result.output_tokens >= c->result.reserved_output_tokens / choices_of(c))
        return "length";
    return "stop";
}

/* Every choice is billed: completion_tokens (and its reasoning share) is their sum. */
static json_t *usage_json(const sl_emu_call_t *c)
{
    const sl_provider_result_t *r = &c->result;
    int64_t prompt = r->input_tokens + r->cache_creation_input_tokens + r->cache_read_input_tokens;
    int64_t completion = r->output_tokens * choices_of(c);
    return json_pack("{s:I, s:I, s:I, s:{s:I, s:i}, s:{s:I, s:i, s:i, s:i}}", "prompt_tokens",
                     (json_int_t)prompt, "completion_tokens", (json_int_t)completion,
                     "total_tokens", (json_int_t)(prompt + completion), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)r->cache_read_input_tokens, "audio_tokens", 0,
                     "completion_tokens_details", "reasoning_tokens",
                     (json_int_t)(sl__emu_call_tokens_of(c, SL_EMU_PART_THINKING) * choices_of(c)),
                     "audio_tokens", 0, "accepted_prediction_tokens", 0,
                     "rejected_prediction_tokens", 0);
}

/* The position of tool part i among the answer's tool calls. */
static int tool_index(const sl_emu_call_t *c, size_t i)
{
    int k = 0;
    for (size_t j = 0; j < i; j++)
        k += c->parts[j].kind == SL_EMU_PART_TOOL;
    return k;
}

static json_t *tool_call_json(sl_emu_call_t *c, size_t i, bool with_index, bool whole)
{
    sl_emu_part_t *p = &c->parts[i];
    if (!p->call_id[0]) sl__emu_new_id(c->emu, "call_", p->call_id, sizeof p->call_id);
    size_t n;
    const char *args = sl__emu_part_text(p, &n);
    json_t *tc = json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id", p->call_id, "type", "function",
                           "function", "name", p->name, "arguments", args, whole ? n : 0);
    if (tc && with_index) json_object_set_new(tc, "index", json_integer(tool_index(c, i)));
    return tc;
}

/* ---- streaming ---------------------------------------------------------------------- */

static json_t *chunk(sl_emu_call_t *c, int64_t index, json_t *delta, const char *finish)
{
    json_t *choice =
        json_pack("{s:I, s:o, s:n, s:o}", "index", (json_int_t)index, "delta", delta, "logprobs",
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

/* One chunk per choice carrying `delta` (taken), as OpenAI streams n choices. */
static void choice_chunks(sl_emu_call_t *c, struct evbuffer *out, json_t *delta, const char *finish)
{
    for (int64_t i = 0; delta && i < choices_of(c); i++)
        data_line(out,
                  chunk(c, i, i + 1 < choices_of(c) ? json_deep_copy(delta) : json_incref(delta),
                        finish));
    json_decref(delta);
}

static void o_begin(sl_emu_call_t *c, struct evbuffer *out)
{
    (void)c;
    (void)out;
}

/* The first visible delta carries the role (text: content ""; a tool call: content
 * null), as OpenAI's first chunk does. Reasoning is not shown in Chat Completions. */
static void o_part_begin(sl_emu_call_t *c, size_t i, struct evbuffer *out)
{
    sl_emu_part_kind_t kind = c->parts[i].kind;
    if (kind == SL_EMU_PART_THINKING) return;
    json_t *delta = json_object();
    if (!delta) return;
    if (!c->role_sent) {
        c->role_sent = true;
        json_object_set_new(delta, "role", json_string("assistant"));
        json_object_set_new(delta, "content",
                            kind == SL_EMU_PART_TEXT ? json_string("") : json_null());
        json_object_set_new(delta, "refusal", json_null());
    } else if (kind == SL_EMU_PART_TEXT) {
        json_decref(delta);
        return;
    }
    if (kind == SL_EMU_PART_TOOL)
        json_object_set_new(delta, "tool_calls",
                            json_pack("[o]", tool_call_json(c, i, true, false)));
    choice_chunks(c, out, delta, NULL);
}

static void o_part_delta(sl_emu_call_t *c, size_t i, const char *s, size_t n, struct evbuffer *out)
{
    json_t *delta;
    if (c->parts[i].kind == SL_EMU_PART_THINKING) return;
    if (c->parts[i].kind == SL_EMU_PART_TOOL)
        delta = json_pack("{s:[{s:i, s:{s:s%}}]}", "tool_calls", "index", tool_index(c, i),
                          "function", "arguments", s, n);
    else
        delta = json_pack("{s:s%}", "content", s, n);
    choice_chunks(c, out, delta, NULL);
}

static void o_part_end(sl_emu_call_t *c, size_t i, struct evbuffer *out)
{
    (void)c;
    (void)i;
    (void)out;
}

static void o_finish(sl_emu_call_t *c, struct evbuffer *out)
{
    choice_chunks(c, out, json_object(), finish_reason(c));
    if (c->include_usage)
        data_line(out, json_pack("{s:s, s:s, s:I, s:s, s:s, s:n, s:[], s:o}", "id", c->id, "object",
                                 "chat.completion.chunk", "created", (json_int_t)c->created_unix,
                                 "model", c->model, "service_tier", "default", "system_fingerprint",
                                 "choices", "usage", usage_json(c)));
    evbuffer_add_printf(out, "data: [DONE]\n\n");
}

static json_t *o_complete(sl_emu_call_t *c)
{
    struct evbuffer *text = evbuffer_new();
    json_t *calls = json_array();
    bool any_text = false;
    for (size_t i = 0; text && calls && i < c->n_parts; i++) {
        size_t n;
        const char *s = sl__emu_part_text(&c->parts[i], &n);
        if (c->parts[i].kind == SL_EMU_PART_TEXT) {
            evbuffer_add(text, s, n);
            any_text = true;
        } else if (c->parts[i].kind == SL_EMU_PART_TOOL) {
            json_array_append_new(calls, tool_call_json(c, i, false, true));
        }
    }
    json_t *message =
        json_pack("{s:s, s:o, s:n, s:[]}", "role", "assistant", "content",
                  any_text && text ? json_stringn((const char *)evbuffer_pullup(text, -1),
                                                  evbuffer_get_length(text))
                                   : json_null(),
                  "refusal", "annotations");
    if (message && json_array_size(calls)) json_object_set(message, "tool_calls", calls);
    json_decref(calls);
    if (text) evbuffer_free(text);
    json_t *choices = json_array();
    for (int64_t i = 0; choices && message && i < choices_of(c); i++)
        json_array_append_new(
            choices,
            json_pack("{s:I, s:o, s:n, s:s}", "index", (json_int_t)i, "message",
                      i + 1 < choices_of(c) ? json_deep_copy(message) : json_incref(message),
                      "logprobs", "finish_reason", finish_reason(c)));
    json_decref(message);
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:s, s:n}", "id", c->id, "object",
                     "chat.completion", "created", (json_int_t)c->created_unix, "model", c->model,
                     "choices", choices, "usage", usage_json(c), "service_tier", "default",
                     "system_fingerprint");
}

static const sl_emu_shape_t openai_shape = {
    .begin = o_begin,
    .part_begin = o_part_begin,
    .part_delta = o_part_delta,
    .part_end = o_part_end,
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
 * *max_tokens (per choice) and *choices (`n`): the buckets are charged their product. */
static bool validate(sl_emu_t *emu, struct evhttp_request *req, json_t *body, int64_t *max_tokens,
                     int64_t *choices)
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
    *choices = 1;
    if (n && !json_is_null(n)) {
        char msg[160];
        if (!json_is_integer(n) || json_integer_value(n) < 1 ||
            json_integer_value(n) > SL_PROVIDER_MAX_CHOICES) {
            snprintf(msg, sizeof msg, "Invalid 'n': expected an integer between 1 and %d.",
                     SL_PROVIDER_MAX_CHOICES);
            return bad_request(emu, req, msg, "n"), false;
        }
        *choices = json_integer_value(n);
    }
    const char *fields[] = {"max_completion_tokens", "max_tokens"};
    *max_tokens = SL_EMU_OPENAI_DEFAULT_MAX_TOKENS;
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

/* response_format: json_schema (its schema in *schema) or json_object (*schema NULL,
 * *json true); text or absent: plain text. Answers 400 and returns false otherwise. */
static bool read_format(sl_emu_t *emu, struct evhttp_request *req, json_t *body, bool *json,
                        json_t **schema)
{
    *json = false;
    *schema = NULL;
    json_t *rf = json_object_get(body, "response_format");
    if (!rf || json_is_null(rf)) return true;
    const char *t = json_string_value(json_object_get(rf, "type"));
    if (t && !strcmp(t, "text")) return true;
    if (t && !strcmp(t, "json_object")) return *json = true;
    if (t && !strcmp(t, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_string(json_object_get(js, "name")))
            return bad_request(emu, req,
                               "Missing required parameter: 'response_format.json_schema.name'.",
                               "response_format.json_schema.name"),
                   false;
        json_t *sc = json_object_get(js, "schema");
        if (sc && !json_is_object(sc))
            return bad_request(emu, req,
                               "Invalid type for 'response_format.json_schema.schema': "
                               "expected an object.",
                               "response_format.json_schema.schema"),
                   false;
        *json = true;
        *schema = sc;
        return true;
    }
    return bad_request(emu, req,
                       "Invalid value for 'response_format.type': expected one of 'text', "
                       "'json_object' or 'json_schema'.",
                       "response_format.type"),
           false;
}

/* reasoning_effort other than "none" and "minimal" makes the answer reason first
 * (hidden; counted as completion_tokens_details.reasoning_tokens). */
int64_t sl__openai_reasoning_budget(json_t *effort, int64_t max_tokens)
{
    const char *e = json_string_value(effort);
    if (!e || !strcmp(e, "none") || !strcmp(e, "minimal")) return 0;
    return max_tokens;
}

void sl__openai_chat(sl_emu_t *emu, struct evhttp_request *req, json_t *body, const char *raw,
                     size_t raw_len)
{
    emu->n.chat_completions++;
    int64_t max_tokens, choices;
    if (!validate(emu, req, body, &max_tokens, &choices)) return;
    bool stream = json_is_true(json_object_get(body, "stream"));
    if (stream) emu->n.chat_stream++;
    bool named, failed, json;
    json_t *tool = forced_tool(emu, req, body, &named, &failed);
    if (failed) return;
    json_t *schema;
    if (!read_format(emu, req, body, &json, &schema)) return;
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
    c->choices = choices;
    c->include_usage =
        stream &&
        json_is_true(json_object_get(json_object_get(body, "stream_options"), "include_usage"));
    c->model = strdup(json_string_value(json_object_get(body, "model")));
    c->thinking_budget =
        sl__openai_reasoning_budget(json_object_get(body, "reasoning_effort"), max_tokens);
    sl_provider_call_t call = {
        .input_tokens = est.input_tokens + est.cached_tokens,
        .cached_prefix_tokens = 0,
        .max_tokens = max_tokens,
        .choices = choices,
        .output_tokens = -1,
        /* .stream stays false: OpenAI does not document how a stream breaks off with an
         * error, so --stream-error-rate does not apply here (docs/emu.md). */
    };
    json_t *turn = sl__script_turn(emu, sl__script_assistant_turns(body));
    bool ok = true;
    if (turn) {
        ok = sl__script_answer(c, turn);
    } else if (tool) {
        ok = sl__emu_call_use_tool(c, tool, "parameters");
        c->tool_named = named;
    } else if (json) {
        ok = sl__emu_call_use_schema(c, schema);
    }
    sl__emu_call_admit(c, &call, ok, "chatcmpl-", "server_error");
}
