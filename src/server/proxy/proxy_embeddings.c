/* proxy_embeddings.c - what an OpenAI embeddings call asks and what it used (pure functions).
 *
 * An embeddings call has input only. Its lease is the input counted here with sluice's
 * tokenizer, output 0: an estimate for OpenAI's models (their tokenizers differ from
 * sluice's), settled by the provider's usage.prompt_tokens. Token arrays are counted by
 * their length, which is exact. */
#include "proxy_endpoints.h"

#include <sluice/tokenizer.h>

#define EMBEDDINGS_MAX_INPUTS 2048 /* OpenAI's bound on the inputs of one call */

/* One element of `input`: a string (counted), or a token array (its length). */
static int count_one(sl_tokenizer_t *tok, const json_t *v, int64_t *tokens, size_t at, char *err,
                     size_t errlen)
{
    if (json_is_string(v)) {
        int64_t n = 0;
        if (!tok) { /* no tokenizer: bytes / 4, as the proxy's fallback */
            *tokens += (int64_t)(json_string_length(v) / 4 + 1);
            return 0;
        }
        if (sl_tokenizer_count(tok, json_string_value(v), json_string_length(v), &n) != 0) {
            snprintf(err, errlen, "sluice: input[%zu]: the text cannot be counted", at);
            return -1;
        }
        *tokens += n;
        return 0;
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *t;
        json_array_foreach(v, i, t) if (!json_is_integer(t))
        {
            snprintf(err, errlen, "sluice: input[%zu][%zu]: a token array holds integers", at, i);
            return -1;
        }
        *tokens += (int64_t)json_array_size(v);
        return 0;
    }
    snprintf(err, errlen, "sluice: input[%zu]: expected a string or an array of token integers",
             at);
    return -1;
}

int sl__embeddings_input_tokens(sl_tokenizer_t *tok, const json_t *body, int64_t *tokens, char *err,
                                size_t errlen)
{
    const json_t *in = json_object_get(body, "input");
    *tokens = 0;
    if (json_is_string(in)) return count_one(tok, in, tokens, 0, err, errlen);
    if (!json_is_array(in) || json_array_size(in) == 0) {
        snprintf(err, errlen,
                 "sluice: input: expected a string, an array of strings or token "
                 "arrays, not %s",
                 !in                 ? "nothing"
                 : json_is_array(in) ? "an empty array"
                                     : "this value");
        return -1;
    }
    if (json_array_size(in) > EMBEDDINGS_MAX_INPUTS) {
        snprintf(err, errlen, "sluice: input: %zu inputs are more than %d", json_array_size(in),
                 EMBEDDINGS_MAX_INPUTS);
        return -1;
    }
    /* One token array on its own: [1, 2, 3]. */
    if (json_is_integer(json_array_get(in, 0))) return count_one(tok, in, tokens, 0, err, errlen);
    size_t i;
    json_t *v;
    json_array_foreach(in, i, v) if (count_one(tok, v, tokens, i, err, errlen) < 0) return -1;
    return 0;
}

void sl__embeddings_usage_from_body(const char *body, size_t len, sl_usage_t *u)
{
    json_t *usage = sl__usage_member(body, len, "usage");
    json_t *prompt = json_object_get(usage, "prompt_tokens");
    if (json_is_integer(prompt) && json_integer_value(prompt) >= 0) {
        u->input_tokens = json_integer_value(prompt);
        u->output_tokens = 0;
        u->have_input = u->have_output = true;
    }
    json_decref(usage);
}
