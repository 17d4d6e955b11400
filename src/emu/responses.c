/* responses.c - the OpenAI Responses API: POST /v1/responses (JSON or SSE).
 *
 * The same provider model as the other endpoints (one key, one set of buckets, the
 * x-ratelimit-* headers, 429s in OpenAI's error shape), answered as OpenAI documents
 * the Responses API. A request's `instructions`, `input` (a string, or items:
 * messages with input_text parts, function_call and function_call_output items,
 * reasoning items; other item types are counted as their JSON) and `tools` are
 * counted as the equivalent Chat Completions request (counting.c). The answer is a
 * Response whose `output` holds, in order: a reasoning item when `reasoning.effort`
 * asks for reasoning (summary empty; its tokens are output_tokens_details.
 * reasoning_tokens; an opaque encrypted_content when include asks for it), then a message with one
 * output_text part, function_call items (tool_choice "required" or a named function, or a scripted
 * turn), or text that is JSON matching text.format's schema. A stream sends response.created,
 * response.in_progress, then per item response.output_item.added, (message)
 * response.content_part.added, response.output_text.delta..., response.output_text.done,
 * response.content_part.done, (function call) response.function_call_arguments.delta...,
 * response.function_call_arguments.done, and response.output_item.done; then
 * response.completed (response.incomplete when max_output_tokens cut it). Every event
 * carries `type` (also the SSE event name) and a sequence_number counting from 0.
 *
 * The turn of a scripted conversation is the number of assistant turns in the input:
 * maximal runs of items the model wrote (see assistant_turns).
 *
 * previous_response_id: a stored response (store is not false) keeps its input and
 * output items (the last MAX_STORED responses, in memory); a request naming one is
 * answered as if those items came first in its input. An unknown id is a 400. */
#include "emu.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define MAX_STORED 256

/* ---- wire shapes -------------------------------------------------------------------- */

static const char *status_of(const sl_emu_call_t *c)
{
    if (c->cut) return "incomplete";
    if (c->filler_answer && c->result.output_tokens >= c->result.reserved_output_tokens)
        return "incomplete";
    return "completed";
}

static json_t *usage_json(const sl_emu_call_t *c)
{
    const sl_provider_result_t *r = &c->result;
    int64_t input = r->input_tokens + r->cache_creation_input_tokens + r->cache_read_input_tokens;
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens", (json_int_t)input,
                     "input_tokens_details", "cached_tokens",
                     (json_int_t)r->cache_read_input_tokens, "output_tokens",
                     (json_int_t)r->output_tokens, "output_tokens_details", "reasoning_tokens",
                     (json_int_t)sl__emu_call_tokens_of(c, SL_EMU_PART_THINKING), "total_tokens",
                     (json_int_t)(input + r->output_tokens));
}

static void name_part(sl_emu_call_t *c, size_t i)
{
    sl_emu_part_t *p = &c->parts[i];
    if (p->id[0]) return;
    static const char *const prefix[] = {"rs_", "msg_", "fc_"};
    sl__emu_new_id(c->emu, prefix[p->kind], p->id, sizeof p->id);
    if (p->kind == SL_EMU_PART_TOOL) sl__emu_new_id(c->emu, "call_", p->call_id, sizeof p->call_id);
}

static json_t *text_part_json(const sl_emu_part_t *p, bool whole)
{
    size_t n;
    const char *s = sl__emu_part_text(p, &n);
    return json_pack("{s:s, s:[], s:[], s:s%}", "type", "output_text", "annotations", "logprobs",
                     "text", s, whole ? n : 0);
}

/* Output item i: whole (done) or as output_item.added has it. */
static json_t *item_json(sl_emu_call_t *c, size_t i, bool whole)
{
    name_part(c, i);
    sl_emu_part_t *p = &c->parts[i];
    const char *status = whole ? "completed" : "in_progress";
    if (whole && c->cut && i + 1 == c->n_parts) status = "incomplete";
    if (p->kind == SL_EMU_PART_THINKING) {
        json_t *r = json_pack("{s:s, s:s, s:[]}", "id", p->id, "type", "reasoning", "summary");
        /* include ["reasoning.encrypted_content"] (what store: false clients send back):
         * an opaque token derived from the item id, never checked when it returns. */
        if (r && c->encrypted_reasoning) {
            char enc[8 + sizeof p->id + sizeof c->id];
            snprintf(enc, sizeof enc, "gAAAAB%s%s", p->id, c->id);
            json_object_set_new(r, "encrypted_content", json_string(enc));
        }
        return r;
    }
    if (p->kind == SL_EMU_PART_TEXT)
        return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", p->id, "type", "message", "status",
                         status, "role", "assistant", "content",
                         whole ? json_pack("[o]", text_part_json(p, true)) : json_array());
    size_t n;
    const char *args = sl__emu_part_text(p, &n);
    return json_pack("{s:s, s:s, s:s, s:s%, s:s, s:s}", "id", p->id, "type", "function_call",
                     "status", status, "arguments", args, whole ? n : 0, "call_id", p->call_id,
                     "name", p->name);
}

static json_t *output_json(sl_emu_call_t *c)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < c->n_parts; i++)
        json_array_append_new(out, item_json(c, i, true));
    return out;
}

/* The Response object: the request's echoed fields, then status, output and usage. */
static json_t *response_json(sl_emu_call_t *c, const char *status, json_t *output, bool usage)
{
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:b, s:n, s:n, s:s}", "id", c->id, "object",
                          "response", "created_at", (json_int_t)c->created_unix, "status", status,
                          "background", 0, "error", "incomplete_details", "model", c->model);
    if (!r) {
        json_decref(output);
        return NULL;
    }
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details",
                            json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_update(r, c->echo);
    json_object_set_new(r, "output", output ? output : json_array());
    json_object_set_new(r, "usage", usage ? usage_json(c) : json_null());
    return r;
}

static void event(sl_emu_call_t *c, struct evbuffer *out, const char *type, json_t *data)
{
    json_t *e = data ? json_pack("{s:s}", "type", type) : NULL;
    if (e) json_object_update(e, data);
    json_decref(data);
    if (!e) return;
    json_object_set_new(e, "sequence_number", json_integer((json_int_t)c->seq++));
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    if (!s) return;
    evbuffer_add_printf(out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

/* Keeps the conversation of a finished response for previous_response_id. */
static void store_response(sl_emu_call_t *c)
{
    sl_emu_t *emu = c->emu;
    if (!c->history) return;
    json_t *items = json_copy(c->history);
    json_t *out = output_json(c);
    json_array_extend(items, out);
    json_decref(out);
    if (!items) return;
    if (!emu->stored) emu->stored = json_object();
    if (!emu->stored_order) emu->stored_order = json_array();
    if (!emu->stored || !emu->stored_order) {
        json_decref(items);
        return;
    }
    json_object_set_new(emu->stored, c->id, items);
    json_array_append_new(emu->stored_order, json_string(c->id));
    while (json_array_size(emu->stored_order) > MAX_STORED) {
        json_object_del(emu->stored, json_string_value(json_array_get(emu->stored_order, 0)));
        json_array_remove(emu->stored_order, 0);
    }
}

static void r_begin(sl_emu_call_t *c, struct evbuffer *out)
{
    event(c, out, "response.created",
          json_pack("{s:o}", "response", response_json(c, "in_progress", NULL, false)));
    event(c, out, "response.in_progress",
          json_pack("{s:o}", "response", response_json(c, "in_progress", NULL, false)));
}

static void r_part_begin(sl_emu_call_t *c, size_t i, struct evbuffer *out)
{
    event(c, out, "response.output_item.added",
          json_pack("{s:i, s:o}", "output_index", (int)i, "item", item_json(c, i, false)));
    if (c->parts[i].kind == SL_EMU_PART_TEXT)
        event(c, out, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", c->parts[i].id, "output_index", (int)i,
                        "content_index", 0, "part", text_part_json(&c->parts[i], false)));
}

static void r_part_delta(sl_emu_call_t *c, size_t i, const char *s, size_t n, struct evbuffer *out)
{
    sl_emu_part_t *p = &c->parts[i];
    if (p->kind == SL_EMU_PART_TEXT)
        event(c, out, "response.output_text.delta",
              json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", p->id, "output_index", (int)i,
                        "content_index", 0, "delta", s, n, "logprobs"));
    else if (p->kind == SL_EMU_PART_TOOL)
        event(
            c, out, "response.function_call_arguments.delta",
            json_pack("{s:s, s:i, s:s%}", "item_id", p->id, "output_index", (int)i, "delta", s, n));
}

static void r_part_end(sl_emu_call_t *c, size_t i, struct evbuffer *out)
{
    sl_emu_part_t *p = &c->parts[i];
    size_t n;
    const char *s = sl__emu_part_text(p, &n);
    if (p->kind == SL_EMU_PART_TEXT) {
        event(c, out, "response.output_text.done",
              json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", p->id, "output_index", (int)i,
                        "content_index", 0, "text", s, n, "logprobs"));
        event(c, out, "response.content_part.done",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", p->id, "output_index", (int)i,
                        "content_index", 0, "part", text_part_json(p, true)));
    } else if (p->kind == SL_EMU_PART_TOOL) {
        event(c, out, "response.function_call_arguments.done",
              json_pack("{s:s, s:i, s:s, s:s%}", "item_id", p->id, "output_index", (int)i, "name",
                        p->name, "arguments", s, n));
    }
    event(c, out, "response.output_item.done",
          json_pack("{s:i, s:o}", "output_index", (int)i, "item", item_json(c, i, true)));
}

static void r_finish(sl_emu_call_t *c, struct evbuffer *out)
{
    const char *status = status_of(c);
    event(c, out, strcmp(status, "completed") ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response", response_json(c, status, output_json(c), true)));
    store_response(c);
}

static json_t *r_complete(sl_emu_call_t *c)
{
    json_t *r = response_json(c, status_of(c), output_json(c), true);
    store_response(c);
    return r;
}

static const sl_emu_shape_t responses_shape = {
    .begin = r_begin,
    .part_begin = r_part_begin,
    .part_delta = r_part_delta,
    .part_end = r_part_end,
    .finish = r_finish,
    .complete = r_complete,
    .ping = NULL,
};

/* ---- requests ----------------------------------------------------------------------- */

static bool bad(sl_emu_t *emu, struct evhttp_request *req, const char *param, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error", msg, param, NULL);
    return false;
}

/* Checks one input item (what the answer and the count depend on). */
static bool check_item(sl_emu_t *emu, struct evhttp_request *req, json_t *item, size_t i)
{
    char param[64];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(item))
        return bad(emu, req, param, "Invalid type for 'input[%zu]': expected an object.", i);
    const char *type = json_string_value(json_object_get(item, "type"));
    json_t *role = json_object_get(item, "role");
    if (!type && !role)
        return bad(emu, req, param, "Missing required parameter: 'input[%zu].type'.", i);
    if (!type || !strcmp(type, "message")) {
        const char *r = json_string_value(role);
        if (!r || (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") &&
                   strcmp(r, "developer")))
            return bad(emu, req, param,
                       "Invalid value for 'input[%zu].role': expected one of 'user', "
                       "'assistant', 'system' or 'developer'.",
                       i);
        json_t *content = json_object_get(item, "content");
        if (!json_is_string(content) && !json_is_array(content))
            return bad(emu, req, param,
                       "Invalid type for 'input[%zu].content': expected a string or an array "
                       "of content parts.",
                       i);
        size_t k;
        json_t *part;
        json_array_foreach(content, k, part)
        {
            if (!json_is_string(json_object_get(part, "type")))
                return bad(emu, req, param,
                           "Missing required parameter: 'input[%zu].content[%zu].type'.", i, k);
        }
        return true;
    }
    if (!strcmp(type, "function_call")) {
        if (!json_is_string(json_object_get(item, "name")) ||
            !json_is_string(json_object_get(item, "arguments")) ||
            !json_is_string(json_object_get(item, "call_id")))
            return bad(emu, req, param,
                       "Invalid 'input[%zu]': a function_call item needs string 'call_id', "
                       "'name' and 'arguments'.",
                       i);
    } else if (!strcmp(type, "function_call_output")) {
        json_t *out = json_object_get(item, "output");
        if (!json_is_string(json_object_get(item, "call_id")) ||
            (!json_is_string(out) && !json_is_array(out)))
            return bad(emu, req, param,
                       "Invalid 'input[%zu]': a function_call_output item needs a string "
                       "'call_id' and an 'output' (a string or an array).",
                       i);
    }
    return true;
}

/* The input items of the request, after the stored conversation of
 * previous_response_id (a new reference), or NULL after answering 400. */
static json_t *resolve_input(sl_emu_t *emu, struct evhttp_request *req, json_t *body)
{
    json_t *input = json_object_get(body, "input");
    json_t *prev = json_object_get(body, "previous_response_id");
    json_t *items = json_array();
    if (!items) return NULL;
    if (prev && !json_is_null(prev)) {
        json_t *stored =
            json_is_string(prev) ? json_object_get(emu->stored, json_string_value(prev)) : NULL;
        if (!stored) {
            json_decref(items);
            char msg[200];
            snprintf(msg, sizeof msg, "Previous response with id '%.100s' not found.",
                     json_is_string(prev) ? json_string_value(prev) : "");
            sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error", msg,
                               "previous_response_id", "previous_response_not_found");
            return NULL;
        }
        json_array_extend(items, stored);
    }
    if (json_is_string(input)) {
        json_array_append_new(items, json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user",
                                               "content", input));
    } else if (json_is_array(input)) {
        size_t i;
        json_t *item;
        json_array_foreach(input, i, item)
        {
            if (!check_item(emu, req, item, i)) {
                json_decref(items);
                return NULL;
            }
        }
        json_array_extend(items, input);
    } else if (input && !json_is_null(input)) {
        json_decref(items);
        bad(emu, req, "input", "Invalid type for 'input': expected a string or an array of items.");
        return NULL;
    }
    if (json_array_size(items) == 0) {
        json_decref(items);
        bad(emu, req, "input", "Missing required parameter: 'input'.");
        return NULL;
    }
    return items;
}

static bool validate(sl_emu_t *emu, struct evhttp_request *req, json_t *body, int64_t *max_tokens)
{
    json_t *model = json_object_get(body, "model");
    json_t *stream = json_object_get(body, "stream");
    json_t *instructions = json_object_get(body, "instructions");
    json_t *tools = json_object_get(body, "tools");
    json_t *max = json_object_get(body, "max_output_tokens");
    if (!json_is_string(model) || !json_string_length(model))
        return bad(emu, req, "model", "Missing required parameter: 'model'.");
    if (stream && !json_is_null(stream) && !json_is_boolean(stream))
        return bad(emu, req, "stream", "Invalid type for 'stream': expected a boolean.");
    if (instructions && !json_is_null(instructions) && !json_is_string(instructions))
        return bad(emu, req, "instructions", "Invalid type for 'instructions': expected a string.");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return bad(emu, req, "tools", "Invalid type for 'tools': expected an array.");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        if (!type) return bad(emu, req, param, "Missing required parameter: 'tools[%zu].type'.", i);
        if (!strcmp(type, "function") && !json_is_string(json_object_get(t, "name")))
            return bad(emu, req, param, "Missing required parameter: 'tools[%zu].name'.", i);
    }
    *max_tokens = SL_EMU_OPENAI_DEFAULT_MAX_TOKENS;
    if (max && !json_is_null(max)) {
        if (!json_is_integer(max) || json_integer_value(max) < 16)
            return bad(emu, req, "max_output_tokens",
                       "Invalid 'max_output_tokens': integer below minimum value. Expected a "
                       "value >= 16.");
        *max_tokens = json_integer_value(max);
    }
    json_t *format = json_object_get(json_object_get(body, "text"), "format");
    const char *ft = json_string_value(json_object_get(format, "type"));
    if (format && !json_is_null(format) &&
        (!ft || (strcmp(ft, "text") && strcmp(ft, "json_object") && strcmp(ft, "json_schema"))))
        return bad(emu, req, "text.format.type",
                   "Invalid value for 'text.format.type': expected one of 'text', 'json_object' "
                   "or 'json_schema'.");
    if (ft && !strcmp(ft, "json_schema") &&
        (!json_is_string(json_object_get(format, "name")) ||
         !json_is_object(json_object_get(format, "schema"))))
        return bad(emu, req, "text.format",
                   "Invalid 'text.format': a json_schema format needs a string 'name' and a "
                   "'schema' object.");
    return true;
}

/* The function tool_choice forces ("required": the first function tool; {"type":
 * "function","name":N}: that one), or NULL. Answers 400 and sets *failed when the
 * named function is not among the tools. */
static json_t *forced_tool(sl_emu_t *emu, struct evhttp_request *req, json_t *body, bool *named,
                           bool *failed)
{
    *failed = *named = false;
    json_t *choice = json_object_get(body, "tool_choice");
    const char *want = NULL;
    if (json_is_string(choice) && !strcmp(json_string_value(choice), "required")) {
        want = NULL;
    } else if (json_is_object(choice) && json_is_string(json_object_get(choice, "type")) &&
               !strcmp(json_string_value(json_object_get(choice, "type")), "function")) {
        want = json_string_value(json_object_get(choice, "name"));
        *named = true;
    } else {
        return NULL;
    }
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(body, "tools"), i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(t, "name"));
        if (type && !strcmp(type, "function") && name && (!want || !strcmp(name, want))) return t;
    }
    bad(emu, req, "tool_choice",
        "Invalid value for 'tool_choice': no function named '%.100s' in 'tools'.",
        want ? want : "");
    *failed = true;
    return NULL;
}

/* The request fields a Response repeats, with OpenAI's defaults. */
static json_t *echo_fields(json_t *body, int64_t max_tokens)
{
    json_t *max = json_object_get(body, "max_output_tokens");
    json_t *format = json_object_get(json_object_get(body, "text"), "format");
    json_t *reasoning = json_object_get(body, "reasoning");
    json_t *e = json_object();
    if (!e) return NULL;
    static const char *const same[] = {"instructions", "previous_response_id", "user",
                                       "prompt_cache_key", "safety_identifier"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(body, same[i]);
        json_object_set_new(e, same[i], v ? json_incref(v) : json_null());
    }
    (void)max_tokens;
    json_object_set_new(e, "max_output_tokens", max ? json_incref(max) : json_null());
    json_object_set_new(e, "max_tool_calls", json_null());
    json_t *v;
    json_object_set_new(e, "metadata",
                        (v = json_object_get(body, "metadata")) && json_is_object(v)
                            ? json_incref(v)
                            : json_object());
    json_object_set_new(e, "parallel_tool_calls",
                        json_boolean(!json_is_false(json_object_get(body, "parallel_tool_calls"))));
    json_object_set_new(e, "reasoning",
                        json_pack("{s:O?, s:O?}", "effort", json_object_get(reasoning, "effort"),
                                  "summary", json_object_get(reasoning, "summary")));
    json_object_set_new(e, "service_tier", json_string("default"));
    json_object_set_new(e, "store", json_boolean(!json_is_false(json_object_get(body, "store"))));
    json_object_set_new(e, "temperature",
                        (v = json_object_get(body, "temperature")) ? json_incref(v) : json_real(1));
    json_object_set_new(e, "text",
                        json_pack("{s:o, s:s}", "format",
                                  format ? json_incref(format) : json_pack("{s:s}", "type", "text"),
                                  "verbosity", "medium"));
    json_object_set_new(e, "tool_choice",
                        (v = json_object_get(body, "tool_choice")) ? json_incref(v)
                                                                   : json_string("auto"));
    json_object_set_new(e, "tools",
                        (v = json_object_get(body, "tools")) && json_is_array(v) ? json_incref(v)
                                                                                 : json_array());
    json_object_set_new(e, "top_logprobs", json_integer(0));
    json_object_set_new(e, "top_p",
                        (v = json_object_get(body, "top_p")) ? json_incref(v) : json_real(1));
    json_object_set_new(e, "truncation",
                        (v = json_object_get(body, "truncation")) ? json_incref(v)
                                                                  : json_string("disabled"));
    return e;
}

/* Whether an input item is something the model wrote: an assistant message, a
 * reasoning item, or a call (function_call, custom_tool_call, web_search_call, ...). */
static bool model_item(json_t *item)
{
    const char *t = json_string_value(json_object_get(item, "type"));
    const char *role = json_string_value(json_object_get(item, "role"));
    if (!t || !strcmp(t, "message")) return role && !strcmp(role, "assistant");
    size_t n = strlen(t);
    return !strcmp(t, "reasoning") || (n > 5 && !strcmp(t + n - 5, "_call"));
}

/* The assistant turns already in the conversation: maximal runs of model items. A
 * turn of several calls is one run (its calls come together, then their outputs), so
 * a scripted turn with k calls is one turn here as it is in the other APIs; with one
 * call per turn this is the number of function_call_output items. */
static size_t assistant_turns(json_t *items)
{
    size_t i, n = 0;
    json_t *it;
    bool in_run = false;
    json_array_foreach(items, i, it)
    {
        bool m = model_item(it);
        if (m && !in_run) n++;
        in_run = m;
    }
    return n;
}

void sl__openai_responses(sl_emu_t *emu, struct evhttp_request *req, json_t *body)
{
    emu->n.responses++;
    int64_t max_tokens = SL_EMU_OPENAI_DEFAULT_MAX_TOKENS;
    if (!validate(emu, req, body, &max_tokens)) return;
    bool stream = json_is_true(json_object_get(body, "stream"));
    if (stream) emu->n.responses_stream++;
    bool named, failed;
    json_t *tool = forced_tool(emu, req, body, &named, &failed);
    if (failed) return;
    json_t *items = resolve_input(emu, req, body);
    if (!items) return;
    json_t *counted = sl__count_responses_body(body, items);
    sl_estimate_t est;
    char err[512] = "";
    int rc = counted ? sl_estimate_json(emu->tok, SL_API_OPENAI, counted, &est, err, sizeof err)
                     : SL_TOK_ENOMEM;
    json_decref(counted);
    if (rc != 0) {
        json_decref(items);
        if (rc == SL_TOK_EREQUEST)
            bad(emu, req, NULL, "%s", err);
        else
            sl__emu_send_error(emu, req, SL_EMU_OPENAI, 500, "server_error",
                               "token counting failed", NULL, NULL);
        return;
    }
    sl_emu_call_t *c = sl__emu_call_new(emu, req, SL_EMU_OPENAI, &responses_shape);
    if (!c) {
        json_decref(items);
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 500, "server_error", "out of memory", NULL,
                           NULL);
        return;
    }
    c->stream = stream;
    c->model = strdup(json_string_value(json_object_get(body, "model")));
    c->echo = echo_fields(body, max_tokens);
    size_t k;
    json_t *inc;
    json_array_foreach(json_object_get(body, "include"), k, inc)
    {
        if (json_is_string(inc) && !strcmp(json_string_value(inc), "reasoning.encrypted_content"))
            c->encrypted_reasoning = true;
    }
    size_t turn = assistant_turns(items);
    if (!json_is_false(json_object_get(body, "store")))
        c->history = items;
    else
        json_decref(items);
    c->thinking_budget = sl__openai_reasoning_budget(
        json_object_get(json_object_get(body, "reasoning"), "effort"), max_tokens);
    sl_provider_call_t call = {
        .input_tokens = est.input_tokens + est.cached_tokens,
        .max_tokens = max_tokens,
        .output_tokens = -1,
    };
    json_t *format = json_object_get(json_object_get(body, "text"), "format");
    const char *ft = json_string_value(json_object_get(format, "type"));
    json_t *script_turn = sl__script_turn(emu, turn);
    bool ok = c->echo != NULL;
    if (script_turn) {
        ok = ok && sl__script_answer(c, script_turn);
    } else if (tool) {
        ok = ok && sl__emu_call_use_tool(c, tool, "parameters");
        c->tool_named = named;
    } else if (ft && strcmp(ft, "text")) {
        ok = ok && sl__emu_call_use_schema(c, json_object_get(format, "schema"));
    }
    sl__emu_call_admit(c, &call, ok, "resp_", "server_error");
}
