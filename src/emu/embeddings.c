/* embeddings.c - OpenAI's embeddings and moderations endpoints, answered the way the provider does.
 *
 * Embeddings: one vector per input, of the model's dimension (text-embedding-3-small
 * 1536, -3-large 3072, ada-002 1536; `dimensions` shortens the -3 models'), unit length,
 * a function of the model and the input alone (the same input gives the same vector);
 * `encoding_format: "base64"` (what the OpenAI SDKs ask by default) gives the float32
 * little-endian bytes in base64. usage.prompt_tokens counts strings with the tokenizer
 * (times --drift, as the provider's own counts) and token arrays by their length.
 * Moderations: one result per input, nothing flagged, the documented categories with
 * small scores. Neither draws from the emulator's token buckets (OpenAI limits
 * embedding models separately); both are counted in /stats under "batches". */
#include "batch.h"

#include <math.h>
#include <string.h>

#include <openssl/evp.h>

#define MAX_INPUTS 2048

static int64_t model_dimension(const char *model)
{
    if (!strcmp(model, "text-embedding-3-large")) return 3072;
    return 1536; /* text-embedding-3-small, text-embedding-ada-002 */
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The vector of one input (its hash `seed`) as a JSON array or a base64 string. */
static json_t *vector(uint64_t seed, int64_t dim, bool base64)
{
    float *v = malloc((size_t)dim * sizeof(float));
    if (!v) return NULL;
    sl_rng_t rng;
    sl_rng_seed(&rng, seed);
    double norm = 0;
    for (int64_t k = 0; k < dim; k++) {
        v[k] = (float)(sl_rng_uniform(&rng) * 2.0 - 1.0);
        norm += (double)v[k] * v[k];
    }
    norm = sqrt(norm > 0 ? norm : 1);
    json_t *out = NULL;
    if (base64) {
        size_t bytes = (size_t)dim * 4;
        unsigned char *raw = malloc(bytes), *enc = malloc(bytes / 3 * 4 + 8);
        if (raw && enc) {
            for (int64_t k = 0; k < dim; k++) {
                float f = (float)(v[k] / norm);
                uint32_t u;
                memcpy(&u, &f, 4);
                for (int b = 0; b < 4; b++)
                    raw[k * 4 + b] = (unsigned char)(u >> (8 * b)); /* little-endian */
            }
            int n = EVP_EncodeBlock(enc, raw, (int)bytes);
            out = json_stringn((const char *)enc, (size_t)n);
        }
        free(raw);
        free(enc);
    } else {
        out = json_array();
        for (int64_t k = 0; out && k < dim; k++)
            json_array_append_new(out, json_real((double)v[k] / norm));
    }
    free(v);
    return out;
}

json_t *sl__embeddings_answer(sl_emu_t *emu, json_t *body, int64_t *tokens, char *err,
                              size_t errlen)
{
    const char *model = json_string_value(json_object_get(body, "model"));
    json_t *input = json_object_get(body, "input");
    const char *fmt = json_string_value(json_object_get(body, "encoding_format"));
    json_t *dims = json_object_get(body, "dimensions");
    *tokens = 0;
    if (!model) {
        snprintf(err, errlen, "model: a string is required");
        return NULL;
    }
    if (fmt && strcmp(fmt, "float") != 0 && strcmp(fmt, "base64") != 0) {
        snprintf(err, errlen, "encoding_format: '%s' is not one of 'float', 'base64'", fmt);
        return NULL;
    }
    int64_t dim = model_dimension(model);
    if (dims) {
        if (!json_is_integer(dims) || json_integer_value(dims) < 1 ||
            json_integer_value(dims) > dim || !strncmp(model, "text-embedding-ada", 18)) {
            snprintf(err, errlen, "dimensions: must be an integer 1-%lld for model %s",
                     (long long)dim, model);
            return NULL;
        }
        dim = json_integer_value(dims);
    }
    /* The inputs as a list: a string or one token array is a list of one. */
    json_t *list =
        json_is_string(input) || (json_is_array(input) && json_is_integer(json_array_get(input, 0)))
            ? json_pack("[O]", input)
            : json_incref(input);
    if (!json_is_array(list) || json_array_size(list) == 0 || json_array_size(list) > MAX_INPUTS) {
        json_decref(list);
        snprintf(err, errlen,
                 "input: expected a string or an array of 1-%d strings or token "
                 "arrays",
                 MAX_INPUTS);
        return NULL;
    }
    json_t *data = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        uint64_t seed = fnv(0xcbf29ce484222325ULL, model, strlen(model) + 1);
        if (json_is_string(v)) {
            int64_t n = 0;
            sl_tokenizer_count(emu->tok, json_string_value(v), json_string_length(v), &n);
            *tokens += sl_provider_count(emu->provider, n);
            seed = fnv(seed, json_string_value(v), json_string_length(v));
        } else if (json_is_array(v) && json_array_size(v) > 0) {
            size_t k;
            json_t *t;
            json_array_foreach(v, k, t)
            {
                json_int_t id = json_integer_value(t);
                if (!json_is_integer(t)) break;
                seed = fnv(seed, &id, sizeof id);
            }
            if (k < json_array_size(v)) break;
            *tokens += (int64_t)json_array_size(v);
        } else {
            break;
        }
        json_array_append_new(data, json_pack("{s:s, s:I, s:o}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding",
                                              vector(seed, dim, fmt && !strcmp(fmt, "base64"))));
    }
    if (i < json_array_size(list)) {
        snprintf(err, errlen, "input[%zu]: expected a non-empty string or array of token integers",
                 i);
        json_decref(list);
        json_decref(data);
        return NULL;
    }
    json_decref(list);
    return json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                     model, "usage", "prompt_tokens", (json_int_t)*tokens, "total_tokens",
                     (json_int_t)*tokens);
}

void sl__openai_embeddings(sl_emu_t *emu, struct evhttp_request *req, json_t *body)
{
    char err[256];
    int64_t tokens = 0;
    json_t *answer = sl__embeddings_answer(emu, body, &tokens, err, sizeof err);
    if (!answer) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error", err, NULL, NULL);
        return;
    }
    sl_emu_batches_t *b = sl__emu_batches(emu);
    if (b) {
        b->embeddings.requests++;
        b->embeddings.input_tokens += tokens;
    }
    sl__emu_add_ratelimit_headers(emu, req, SL_EMU_OPENAI, NULL, sl__emu_now());
    sl__emu_send_json(req, 200, answer);
}

/* OpenAI's moderation categories (docs: platform.openai.com/docs/api-reference/moderations). */
static const char *const categories[] = {
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
};

void sl__openai_moderations(sl_emu_t *emu, struct evhttp_request *req, json_t *body)
{
    json_t *input = json_object_get(body, "input");
    const char *model = json_string_value(json_object_get(body, "model"));
    size_t n = json_is_string(input) ? 1 : json_is_array(input) ? json_array_size(input) : 0;
    if (n == 0 || (json_is_array(input) && json_is_string(json_array_get(input, 0)) && n > 32)) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error",
                           "input: expected a string, an array of strings or of input objects",
                           "input", NULL);
        return;
    }
    /* An array of multimodal parts ({"type": "text", ...}) is one input. */
    if (json_is_array(input) && json_is_object(json_array_get(input, 0))) n = 1;
    json_t *results = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *cats = json_object(), *scores = json_object(), *types = json_object();
        for (size_t k = 0; k < sizeof categories / sizeof categories[0]; k++) {
            json_object_set_new(cats, categories[k], json_false());
            json_object_set_new(scores, categories[k], json_real(1e-6 * (double)(k + 1)));
            json_object_set_new(types, categories[k], json_pack("[s]", "text"));
        }
        json_array_append_new(results, json_pack("{s:b, s:o, s:o, s:o}", "flagged", 0, "categories",
                                                 cats, "category_scores", scores,
                                                 "category_applied_input_types", types));
    }
    char id[48];
    sl__emu_new_id(emu, "modr-", id, sizeof id);
    sl_emu_batches_t *b = sl__emu_batches(emu);
    if (b) b->moderations++;
    sl__emu_add_ratelimit_headers(emu, req, SL_EMU_OPENAI, NULL, sl__emu_now());
    sl__emu_send_json(req, 200,
                      json_pack("{s:s, s:s, s:o}", "id", id, "model",
                                model ? model : "omni-moderation-latest", "results", results));
}
