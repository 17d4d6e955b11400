/* proxy_endpoints.h - the proxy's non-chat endpoints: embeddings, moderations, the batch APIs.
 *
 * Pure functions on paths and bodies, and the uploaded files' line counts (proxy_batches.c,
 * proxy_embeddings.c); proxy.c does the leases and the I/O. */
#ifndef SL_PROXY_ENDPOINTS_H
#define SL_PROXY_ENDPOINTS_H

#include "proxy.h"

#include <sluice/tokenizer.h>

/* ---- proxy_embeddings.c ------------------------------------------------------------ */

/* The input tokens of an OpenAI embeddings body's `input`: a string, an array of
 * strings (each counted with `tok`), a token array or an array of token arrays
 * (counted by length). Returns 0, or -1 with `err` naming the field and what is wrong. */
int sl__embeddings_input_tokens(sl_tokenizer_t *tok, const json_t *body, int64_t *tokens, char *err,
                                size_t errlen);

/* Reads an embeddings answer's `usage.prompt_tokens` into `u` (output 0, both sides
 * reported); an answer without it leaves `u` alone. */
void sl__embeddings_usage_from_body(const char *body, size_t len, sl_usage_t *u);

/* ---- proxy_batches.c: the routes ------------------------------------------------------ */

/* One operation of the providers' batch APIs. */
typedef enum sl_batch_op {
    SL_BATCH_NONE = 0,
    SL_BATCH_CREATE,        /* POST .../batches: counts against max_batch_requests */
    SL_BATCH_LIST,          /* GET .../batches */
    SL_BATCH_RETRIEVE,      /* GET .../batches/{id} */
    SL_BATCH_RESULTS,       /* GET /anthropic/v1/messages/batches/{id}/results */
    SL_BATCH_CANCEL,        /* POST .../batches/{id}/cancel */
    SL_BATCH_DELETE,        /* DELETE /anthropic/v1/messages/batches/{id} */
    SL_BATCH_FILE_UPLOAD,   /* POST /openai/v1/files (multipart) */
    SL_BATCH_FILE_LIST,     /* GET /openai/v1/files */
    SL_BATCH_FILE_RETRIEVE, /* GET /openai/v1/files/{id} */
    SL_BATCH_FILE_CONTENT,  /* GET /openai/v1/files/{id}/content */
    SL_BATCH_FILE_DELETE,   /* DELETE /openai/v1/files/{id} */
} sl_batch_op_t;

/* Resolves a raw request path (as it came: nothing decoded; with or without "/v1" after
 * "/anthropic" or "/openai") and `method` against the batch APIs of `api`. Returns the
 * operation with the provider's path in `upstream` and the decoded id in `id` (room for
 * 257 bytes; "" when the operation has none); SL_BATCH_NONE when the path is none of
 * them. A known path with another method sets *allow (the methods it takes) and returns
 * SL_BATCH_NONE. Ids follow the model-id rules of proxy_routes.c. */
sl_batch_op_t sl__batch_resolve(sl_upstream_api_t api, const char *path, size_t len,
                                sl_http_method_t method, char *upstream, size_t upstream_size,
                                char *id, const char **allow);

/* The method a batch operation is sent upstream with. */
const char *sl__batch_method(sl_batch_op_t op);

/* ---- proxy_batches.c: the processing queue -------------------------------------------- */

/* The request counts of uploaded batch input files, as this process saw them uploaded
 * (the queue's count itself is the backend's: sl_backend_batch_queue). Bounded: the last
 * SL_BATCH_TRACKED uploads (the oldest is forgotten first). */
#define SL_BATCH_TRACKED 4096
typedef struct sl_batch_queue sl_batch_queue_t;

sl_batch_queue_t *sl__batch_queue_new(void);
void sl__batch_queue_free(sl_batch_queue_t *q);

/* The requests a create body asks for: Anthropic `requests` length; OpenAI the lines of
 * its `input_file_id` as seen uploaded (0 when the proxy did not see the upload).
 * Returns -1 with `err` set when the body is not a create body. */
int64_t sl__batch_create_requests(const sl_batch_queue_t *q, sl_upstream_api_t api,
                                  const json_t *body, char *err, size_t errlen);

/* A create answered 200 with `body`: true with the batch's id in `id` (SL_BATCHQ_ID_MAX + 1
 * bytes) and, when *requests is 0, the provider's request_counts.total there; false when
 * the body names no usable id. */
bool sl__batch_created(const char *body, size_t len, char *id, int64_t *requests);

/* Called with the id of each batch an answer shows ended. */
typedef void (*sl_batch_ended_fn)(const char *id, void *ud);

/* An answer of `op` (200, `body`): each batch it shows ended is passed to `ended`; an
 * OpenAI file upload records the file's request count (lines of the uploaded JSONL,
 * `upload` being the multipart request body and `ctype` its Content-Type). */
void sl__batch_on_answer(sl_batch_queue_t *q, sl_upstream_api_t api, sl_batch_op_t op,
                         const char *body, size_t len, const char *upload, size_t upload_len,
                         const char *ctype, sl_batch_ended_fn ended, void *ud);

/* The usage a batch's results add up to (Anthropic's results JSONL: result.message.usage;
 * an OpenAI output file: response.body.usage of each line), into `u`. Lines without usage
 * count 0; a body that is not JSONL leaves `u` at 0 with both sides reported. */
void sl__batch_results_usage(sl_upstream_api_t api, const char *body, size_t len, sl_usage_t *u);

/* Anthropic's batch objects carry `results_url`, an absolute URL at the provider that the
 * SDK fetches as is: rewritten to `base` + "/v1/messages/batches/{id}/results" (base e.g.
 * "http://HOST:8750/anthropic"). Returns a new malloc'ed body, or NULL when there is
 * nothing to rewrite (or out of memory). */
char *sl__batch_rewrite_results_url(const char *body, size_t len, const char *base);

#endif
