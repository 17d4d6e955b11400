/* counting.c - request bodies in the shapes sluice's estimator counts.
 *
 * The emulator counts input with sluice's own estimator (sl_estimate_json), which
 * knows the Anthropic Messages and Chat Completions shapes of docs/tokenizer.md.
 * Clients send more than that today: Anthropic messages with role "system", content
 * blocks of server tools and search results, and the whole Responses API. Rather
 * than refuse what the providers accept, the emulator hands the estimator an
 * equivalent body: a system message is counted as a user message with the same
 * content, a block of a known newer type as a text block holding its JSON (its
 * cache_control kept, so breakpoints stay where they were), a PDF document as one
 * page (an image of unknown size), inside tool results too, and a Responses request
 * as the Chat Completions request with the same instructions, items and tools. */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

/* A block the estimator counts as its JSON text (server tools, search results, MCP). */
static bool is_newer_block(json_t *block)
{
    const char *t = json_string_value(json_object_get(block, "type"));
    return t && sl_estimate_counts_block_as_json(t);
}

/* A text block holding `block`'s JSON (cache_control moved onto it). */
static json_t *as_text_block(json_t *block)
{
    json_t *copy = json_deep_copy(block);
    json_t *marker = json_incref(json_object_get(copy, "cache_control"));
    json_object_del(copy, "cache_control");
    char *s = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(copy);
    json_t *t = json_pack("{s:s, s:s}", "type", "text", "text", s ? s : "");
    free(s);
    if (t && marker) json_object_set(t, "cache_control", marker);
    json_decref(marker);
    return t;
}

/* A document the estimator cannot read (a PDF: base64, url or file source). */
static bool is_binary_document(json_t *block)
{
    const char *t = json_string_value(json_object_get(block, "type"));
    const char *st = json_string_value(json_object_get(json_object_get(block, "source"), "type"));
    return t && !strcmp(t, "document") && st && strcmp(st, "text") && strcmp(st, "content");
}

static bool block_needs_rewrite(json_t *block)
{
    if (is_binary_document(block) || is_newer_block(block)) return true;
    size_t k;
    json_t *b;
    json_array_foreach(json_object_get(block, "content"), k,
                       b) if (json_is_object(b) && block_needs_rewrite(b)) return true;
    return false;
}

static bool needs_rewrite(json_t *messages)
{
    size_t i, k;
    json_t *m, *b;
    json_array_foreach(messages, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "system")) return true;
        json_array_foreach(json_object_get(m, "content"), k,
                           b) if (block_needs_rewrite(b)) return true;
    }
    return false;
}

static json_t *rewrite_blocks(json_t *content);

/* The block as the estimator counts it (a new reference). A PDF is counted as one
 * page: an image of unknown size (the estimator's largest), since the emulator does
 * not read PDFs. */
static json_t *rewrite_block(json_t *b)
{
    if (is_newer_block(b)) return as_text_block(b);
    json_t *out;
    if (is_binary_document(b)) {
        out = json_pack("{s:s, s:{s:s, s:s}}", "type", "image", "source", "type", "url", "url",
                        "document");
        json_t *marker = json_object_get(b, "cache_control");
        if (out && marker) json_object_set(out, "cache_control", marker);
        return out;
    }
    json_t *content = json_object_get(b, "content");
    if (!json_is_array(content) || !block_needs_rewrite(b)) return json_incref(b);
    out = json_copy(b);
    if (out) json_object_set_new(out, "content", rewrite_blocks(content));
    return out;
}

static json_t *rewrite_blocks(json_t *content)
{
    json_t *nc = json_array();
    size_t k;
    json_t *b;
    json_array_foreach(content, k, b)
        json_array_append_new(nc, json_is_object(b) ? rewrite_block(b) : json_incref(b));
    return nc;
}

json_t *sl__count_anthropic_body(json_t *body)
{
    json_t *messages = json_object_get(body, "messages");
    if (!needs_rewrite(messages)) return json_incref(body);
    json_t *copy = json_copy(body); /* shallow: only messages is replaced */
    json_t *out = json_array();
    if (!copy || !out) {
        json_decref(copy);
        json_decref(out);
        return NULL;
    }
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        json_t *nm = json_copy(m);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (nm && role && !strcmp(role, "system"))
            json_object_set_new(nm, "role", json_string("user"));
        json_t *content = json_object_get(m, "content");
        if (nm && json_is_array(content))
            json_object_set_new(nm, "content", rewrite_blocks(content));
        json_array_append_new(out, nm ? nm : json_null());
    }
    json_object_set_new(copy, "messages", out);
    return copy;
}

/* The text of a Responses content array or string, as Chat Completions parts. */
static json_t *chat_content(json_t *content)
{
    if (json_is_string(content)) return json_incref(content);
    json_t *parts = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        json_t *url = json_object_get(p, "image_url");
        json_t *part;
        if (json_is_string(text) && t && strcmp(t, "input_image"))
            part = json_pack("{s:s, s:O}", "type", "text", "text", text);
        else if (t && !strcmp(t, "input_image") && json_is_string(url))
            part = json_pack("{s:s, s:{s:O, s:O?}}", "type", "image_url", "image_url", "url", url,
                             "detail", json_object_get(p, "detail"));
        else {
            char *s = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
            part = json_pack("{s:s, s:s}", "type", "text", "text", s ? s : "");
            free(s);
        }
        json_array_append_new(parts, part);
    }
    return parts;
}

/* One Responses input item as a Chat Completions message. */
static json_t *chat_message(json_t *item)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!type || !strcmp(type, "message"))
        return json_pack("{s:O, s:o}", "role", json_object_get(item, "role"), "content",
                         chat_content(json_object_get(item, "content")));
    if (!strcmp(type, "function_call"))
        return json_pack("{s:s, s:n, s:[{s:O, s:s, s:{s:O, s:O}}]}", "role", "assistant", "content",
                         "tool_calls", "id", json_object_get(item, "call_id"), "type", "function",
                         "function", "name", json_object_get(item, "name"), "arguments",
                         json_object_get(item, "arguments"));
    if (!strcmp(type, "function_call_output")) {
        json_t *out = json_object_get(item, "output");
        return json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id",
                         json_object_get(item, "call_id"), "content", chat_content(out));
    }
    if (!strcmp(type, "reasoning")) {
        /* What the model reads back of its reasoning: the summary texts. */
        json_t *texts = json_array();
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(item, "summary"), i, s)
        {
            json_t *text = json_object_get(s, "text");
            if (json_is_string(text))
                json_array_append_new(texts, json_pack("{s:s, s:O}", "type", "text", "text", text));
        }
        return json_pack("{s:s, s:o}", "role", "assistant", "content", texts);
    }
    char *s = json_dumps(item, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *m = json_pack("{s:s, s:s}", "role", "user", "content", s ? s : "");
    free(s);
    return m;
}

json_t *sl__count_responses_body(json_t *body, json_t *items)
{
    json_t *messages = json_array();
    json_t *instructions = json_object_get(body, "instructions");
    if (!messages) return NULL;
    if (json_is_string(instructions))
        json_array_append_new(messages,
                              json_pack("{s:s, s:O}", "role", "system", "content", instructions));
    size_t i;
    json_t *item;
    json_array_foreach(items, i, item)
    {
        json_t *m = chat_message(item);
        if (!m) {
            json_decref(messages);
            return NULL;
        }
        json_array_append_new(messages, m);
    }
    json_t *out =
        json_pack("{s:O, s:o}", "model", json_object_get(body, "model"), "messages", messages);
    json_t *tools = json_object_get(body, "tools");
    if (out && json_is_array(tools) && json_array_size(tools)) json_object_set(out, "tools", tools);
    return out;
}
