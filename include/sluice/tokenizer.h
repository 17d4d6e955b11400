/* sluice tokenizer: Claude-vocabulary BPE token counts and request estimates. */
#ifndef SLUICE_TOKENIZER_H
#define SLUICE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes: 0 on success, one of these on failure: the tokenizer's names for codes
 * of the one set in common.h. */
enum {
    SL_TOK_EINVAL = SL_EARG,      /* a caller error: NULL argument, bad option */
    SL_TOK_EIO = SL_EIO,          /* the vocabulary file cannot be read */
    SL_TOK_EFORMAT = SL_ECORRUPT, /* the vocabulary file is not a valid claude.json */
    SL_TOK_ENOMEM = SL_ENOMEM,    /* out of memory */
    SL_TOK_EREQUEST = SL_EINVAL   /* the request body is invalid (the message names the
                                     field and the value) */
};

/* A loaded vocabulary plus per-instance scratch state (regex match data, a cache of
 * word counts). Not thread-safe: use one per thread, or serialise calls. */
typedef struct sl_tokenizer sl_tokenizer_t;

/* The vocabulary path used when sl_tokenizer_load() gets NULL: $SLUICE_VOCAB when set
 * and non-empty; else, for a program run from its build tree, data/claude.json of the
 * source tree; else share/sluice/claude.json of the prefix the program is installed in
 * (found from the program's own path, so `cmake --install --prefix` and DESTDIR staging
 * move it along; /usr/share/sluice/claude.json for /usr/bin/sluiced). An installed
 * program never reads the build tree. The returned string is static or the
 * environment's; do not free it. */
const char *sl_tokenizer_default_path(void);

/* Loads the npm package's claude.json (bpe_ranks, pat_str, special_tokens,
 * explicit_n_vocab) from `path` (NULL: sl_tokenizer_default_path()). On success
 * returns 0 and stores a tokenizer the caller frees with sl_tokenizer_free(). On
 * failure returns SL_TOK_EIO, SL_TOK_EFORMAT or SL_TOK_ENOMEM, leaves *out NULL and,
 * when err is non-NULL, writes a message naming the file and the problem. */
int sl_tokenizer_load(const char *path, sl_tokenizer_t **out, char *err, size_t err_size);

/* Frees a tokenizer; NULL is accepted. */
void sl_tokenizer_free(sl_tokenizer_t *tok);

/* Counts the tokens of `text` (text_len bytes, any bytes, NUL included) exactly as
 * @anthropic-ai/tokenizer 0.0.4's countTokens() counts the string node obtains by
 * decoding the same bytes as UTF-8:
 *   1. invalid UTF-8 is replaced by U+FFFD, one per maximal ill-formed subpart
 *      (the WHATWG decoder node uses); a byte-order mark is kept as U+FEFF;
 *   2. NFKC normalisation;
 *   3. every special token string (e.g. "<EOT>") counts as one token;
 *   4. the rest is split by the vocabulary's pattern and merged by rank.
 * Returns 0 and stores the count in *tokens_out, or SL_TOK_EINVAL / SL_TOK_ENOMEM. */
int sl_tokenizer_count(sl_tokenizer_t *tok, const char *text, size_t text_len,
                       int64_t *tokens_out);

/* Number of special tokens and the i-th one's string (NUL-terminated, owned by tok). */
size_t sl_tokenizer_special_count(const sl_tokenizer_t *tok);
const char *sl_tokenizer_special_at(const sl_tokenizer_t *tok, size_t i);

/* Which API a request body is written for. */
typedef enum {
    SL_API_AUTO = 0,  /* decide from the body (see sl_estimate_request) */
    SL_API_ANTHROPIC, /* Anthropic Messages: POST /v1/messages */
    SL_API_OPENAI,    /* OpenAI Chat Completions: POST /v1/chat/completions */
    SL_API_OPENAI_RESPONSES /* OpenAI Responses: POST /v1/responses (never auto-detected) */
} sl_api_t;

/* What a request will cost, in tokens. input_tokens excludes cached_tokens; the
 * request's whole prompt is input_tokens + cached_tokens. */
typedef struct {
    int64_t input_tokens;  /* prompt tokens after the last cache breakpoint */
    int64_t cached_tokens; /* prompt tokens up to and including the last block with
                              cache_control (Anthropic only; 0 for OpenAI) */
    int64_t output_tokens; /* max_tokens (max_completion_tokens, Responses
                              max_output_tokens); 0 when absent */
} sl_estimate_t;

/* Estimates a request body (JSON, body_len bytes). With SL_API_AUTO the body is
 * OpenAI when a message has role "system", "developer" or "tool", or it has
 * max_completion_tokens, or a content part of type "image_url"; Anthropic otherwise.
 * The rules and per-message overheads are in docs/tokenizer.md. Returns 0 and fills
 * *out, or SL_TOK_EREQUEST with a message naming the field and the value (e.g.
 * `messages[3].content[0].type: unknown block type "foo"`), or SL_TOK_EINVAL /
 * SL_TOK_ENOMEM. */
int sl_estimate_request(sl_tokenizer_t *tok, sl_api_t api, const char *body, size_t body_len,
                        sl_estimate_t *out, char *err, size_t err_size);

struct json_t; /* jansson's */
/* sl_estimate_request on a body the caller already parsed with jansson (`root`), so a
 * proxy that reads the body itself does not parse it twice. Same results and errors. */
int sl_estimate_json(sl_tokenizer_t *tok, sl_api_t api, const struct json_t *root,
                     sl_estimate_t *out, char *err, size_t err_size);

/* 1 when the estimator counts an Anthropic content block of `type` as its JSON text
 * (server tools, search results, MCP: blocks the API accepts back in the history),
 * else 0. One list, which sluice-emu also uses to hand such blocks to the estimator. */
int sl_estimate_counts_block_as_json(const char *type);

/* What SL_API_AUTO takes the parsed body `root` for: SL_API_OPENAI or SL_API_ANTHROPIC
 * (the rules above; never SL_API_OPENAI_RESPONSES). */
sl_api_t sl_estimate_detect_api(const struct json_t *root);

#ifdef __cplusplus
}
#endif

#endif
