/* script.c - scripted conversations: what the model answers at each turn (--script FILE).
 *
 * A real harness (an agent loop that runs tools) needs a model that asks for the same
 * tools in the same order every run. The script is a JSON file of turns; the turn a
 * request is answered with is the number of assistant turns already in it (Anthropic
 * and Chat Completions: messages with role "assistant"; Responses: runs of items the
 * model wrote (assistant messages, reasoning, calls) in the input, after
 * previous_response_id is resolved). Each turn gives text,
 * tool calls, and the output tokens billed; the format is in docs/emu.md. The file is
 * checked whole at start-up, every error naming the file, the field and the value. */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *path, const char *field, const char *what)
{
    snprintf(err, errlen, "--script: %s: %s: %s", path, field, what);
    return -1;
}

static int check_turn(json_t *turn, size_t i, const char *path, char *err, size_t errlen)
{
    char field[160];
    snprintf(field, sizeof field, "turns[%zu]", i);
    if (!json_is_object(turn)) return fail(err, errlen, path, field, "not an object");
    const char *key;
    json_t *v;
    json_object_foreach(turn, key, v)
    {
        snprintf(field, sizeof field, "turns[%zu].%.40s", i, key);
        if (!strcmp(key, "text")) {
            if (!json_is_string(v)) return fail(err, errlen, path, field, "not a string");
        } else if (!strcmp(key, "output_tokens")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 10000000)
                return fail(err, errlen, path, field, "not an integer in [1, 10000000]");
        } else if (!strcmp(key, "tool_calls")) {
            if (!json_is_array(v) || json_array_size(v) == 0 ||
                json_array_size(v) > SL_EMU_MAX_PARTS - 2)
                return fail(err, errlen, path, field, "not an array of 1 to 8 tool calls");
            size_t k;
            json_t *tc;
            json_array_foreach(v, k, tc)
            {
                snprintf(field, sizeof field, "turns[%zu].tool_calls[%zu]", i, k);
                const char *name = json_string_value(json_object_get(tc, "name"));
                if (!json_is_object(tc) || !name || !*name)
                    return fail(err, errlen, path, field, "needs a \"name\" (a non-empty string)");
                json_t *input = json_object_get(tc, "input");
                if (input && !json_is_object(input))
                    return fail(err, errlen, path, field, "\"input\" is not an object");
                const char *k2;
                json_t *v2;
                json_object_foreach(tc, k2, v2)
                {
                    if (strcmp(k2, "name") && strcmp(k2, "input")) {
                        snprintf(field, sizeof field, "turns[%zu].tool_calls[%zu].%.40s", i, k, k2);
                        return fail(err, errlen, path, field,
                                    "unknown key (a tool call has name and input)");
                    }
                }
            }
        } else {
            return fail(err, errlen, path, field,
                        "unknown key (a turn has text, tool_calls and output_tokens)");
        }
    }
    return 0;
}

int sl__script_load(const char *path, json_t **out, char *err, size_t errlen)
{
    json_error_t jerr;
    *out = NULL;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errlen, "--script: %s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        return -1;
    }
    json_t *turns = json_object_get(root, "turns");
    json_t *after = json_object_get(root, "after_last");
    int rc = 0;
    if (!json_is_object(root))
        rc = fail(err, errlen, path, "(top)", "not an object with \"turns\"");
    else if (!json_is_array(turns) || json_array_size(turns) == 0)
        rc = fail(err, errlen, path, "turns", "missing or not a non-empty array");
    else if (after && (!json_is_string(after) || (strcmp(json_string_value(after), "filler") &&
                                                  strcmp(json_string_value(after), "repeat"))))
        rc = fail(err, errlen, path, "after_last", "not \"filler\" or \"repeat\"");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (rc == 0 && strcmp(key, "turns") && strcmp(key, "after_last")) {
            char field[64];
            snprintf(field, sizeof field, "%.40s", key);
            rc = fail(err, errlen, path, field, "unknown key (the file has turns and after_last)");
        }
    }
    size_t i;
    json_t *turn;
    json_array_foreach(turns, i, turn)
    {
        if (rc == 0) rc = check_turn(turn, i, path, err, errlen);
    }
    if (rc != 0) {
        json_decref(root);
        return -1;
    }
    *out = root;
    return 0;
}

size_t sl__script_assistant_turns(json_t *body)
{
    size_t i, n = 0;
    json_t *m;
    json_array_foreach(json_object_get(body, "messages"), i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "assistant")) n++;
    }
    return n;
}

json_t *sl__script_turn(sl_emu_t *emu, size_t turn)
{
    if (!emu->script) return NULL;
    json_t *turns = json_object_get(emu->script, "turns");
    size_t n = json_array_size(turns);
    const char *after = json_string_value(json_object_get(emu->script, "after_last"));
    if (turn >= n) {
        if (!after || strcmp(after, "repeat")) return NULL;
        turn %= n;
    }
    return json_array_get(turns, turn);
}

bool sl__script_answer(sl_emu_call_t *c, json_t *turn)
{
    const char *text = json_string_value(json_object_get(turn, "text"));
    json_t *calls = json_object_get(turn, "tool_calls");
    json_t *want = json_object_get(turn, "output_tokens");
    if (!text && !calls) {
        /* Text of the given length (or the default's): a filler answer. */
        return !want || sl__emu_call_add_text(c, "", json_integer_value(want));
    }
    if (text && !sl__emu_call_add_text(c, text, 0)) return false;
    size_t i;
    json_t *tc;
    json_array_foreach(calls, i, tc)
    {
        json_t *input = json_object_get(tc, "input");
        json_t *empty = input ? NULL : json_object();
        bool ok = sl__emu_call_add_tool(c, json_string_value(json_object_get(tc, "name")),
                                        input ? input : empty);
        json_decref(empty);
        if (!ok) return false;
    }
    int64_t pad = want ? json_integer_value(want) - sl__emu_call_fixed_tokens(c) : 0;
    if (pad <= 0) return true;
    /* What the turn bills beyond its text and calls is filler text: after the literal
     * text, or as a text part before the calls. */
    sl_emu_part_t *first = &c->parts[0];
    if (text) {
        char *lit = first->text;
        first->text = NULL;
        c->n_parts--;
        memmove(&c->parts[0], &c->parts[1], c->n_parts * sizeof c->parts[0]);
        /* Re-add the text with its padding, then move it back in front. */
        bool ok = sl__emu_call_add_text(c, lit, pad);
        free(lit);
        if (!ok) return false;
    } else if (!sl__emu_call_add_text(c, "", pad)) {
        return false;
    }
    sl_emu_part_t t = c->parts[c->n_parts - 1];
    memmove(&c->parts[1], &c->parts[0], (c->n_parts - 1) * sizeof c->parts[0]);
    c->parts[0] = t;
    return true;
}
