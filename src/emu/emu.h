/* emu.h - sluice-emu's internals shared between its files (sl__ names are not a public API).
 *
 * sluice-emu answers the Anthropic Messages API, the OpenAI Chat Completions and
 * Responses APIs and both providers' model lists on one libevent loop. Every decision a provider makes (admit or 429, usage, cache,
 * latency, rate-limit headers, error bodies) comes from src/provider; this program
 * only turns HTTP requests into sl_provider_call_t and results back into the wire
 * shapes, paced in real time. */
#ifndef SL_EMU_H
#define SL_EMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

#include "provider.h"
#include "sluice/tokenizer.h"

/* ---- options (options.c) ------------------------------------------------------------ */

typedef struct sl_emu_options {
    char listen_host[256];
    int listen_port; /* 0: the kernel picks one (printed on stdout) */
    sl_provider_config_t provider;
    bool spend_capped;   /* --spend-cap: refuse every call from the start */
    char api_key[256];   /* "" = any non-empty key is accepted */
    char admin_key[256]; /* the rate-limit endpoints' key; "" = any non-empty key */
    char tls_cert[1024]; /* "" = plain HTTP */
    char tls_key[1024];
    char vocab[1024];       /* "" = the tokenizer's default path */
    double ping_interval_s; /* streams: a ping after this long without an event */
    int64_t max_body_bytes;
    int cache_breakpoints; /* 1..4: breakpoints, counted back from the last, that the prompt
                              cache reads and writes (1: the last one only) */
    char script[1024];     /* --script FILE: scripted turns ("" = none) */
    double batch_s;        /* --batch-seconds: a batch is processed this long after create */
    int64_t batch_rpm;     /* --batch-rpm: Anthropic batch endpoint requests per minute */
    int64_t batch_queue_requests; /* --batch-queue: Anthropic processing-queue bound */
} sl_emu_options_t;

/* Parses argv into `o` (defaults first). Returns 0 to run, 1 when --help or --version
 * was printed (exit 0), or -1 after writing a message that names the flag and the
 * value to `err` (exit 2). */
int sl__emu_parse_options(int argc, char **argv, sl_emu_options_t *o, char *err, size_t errlen);

/* Writes the --help text. */
void sl__emu_usage(FILE *out);

/* ---- the server (http.c) ------------------------------------------------------------- */

/* Counters of what HTTP saw, beyond the provider's own (which count model calls). */
typedef struct sl_emu_counters {
    uint64_t http_requests;    /* every request received */
    uint64_t messages;         /* POST /v1/messages */
    uint64_t messages_stream;  /* ... with stream: true */
    uint64_t count_tokens;     /* POST /v1/messages/count_tokens */
    uint64_t chat_completions; /* POST /v1/chat/completions */
    uint64_t chat_stream;      /* ... with stream: true */
    uint64_t responses;        /* POST /v1/responses */
    uint64_t responses_stream; /* ... with stream: true */
    uint64_t models;           /* GET /v1/models[/{id}] */
    uint64_t http_400;
    uint64_t http_401;
    uint64_t http_404;
    uint64_t http_429;
    uint64_t http_503;    /* OpenAI overloaded */
    uint64_t http_529;    /* Anthropic overloaded */
    uint64_t client_gone; /* answers abandoned because the client went away */
    uint64_t active;      /* calls being generated now */
} sl_emu_counters_t;

typedef struct sl_emu {
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    void *ssl_ctx; /* SSL_CTX *, NULL without TLS */
    sl_emu_options_t opt;
    sl_provider_t *provider;
    sl_tokenizer_t *tok;
    sl_rng_t ids;      /* message ids, seeded from --seed */
    uint64_t call_seq; /* numbers the calls: selects their filler text */
    sl_emu_counters_t n;
    struct sl_emu_call *calls; /* calls being generated (freed on shutdown) */
    bool spend_capped;         /* spend-cap mode switched on by flag or endpoint */
    json_t *script;            /* --script: the checked file ({"turns": [...]}), or NULL */
    json_t *stored;            /* Responses kept for previous_response_id: id -> items */
    json_t *stored_order;      /* their ids, oldest first (evicted beyond a cap) */
    struct event *sig_term, *sig_int;
    struct sl_emu_batches *batches; /* files, batches and their counters (batches.c) */
} sl_emu_t;

/* Now on the provider's clock: Unix seconds, so reset headers print real times. */
double sl__emu_now(void);

/* Binds the listener (and TLS when configured). Returns 0, or -1 with `err` set. */
int sl__emu_start(sl_emu_t *emu, char *err, size_t errlen);

/* The port the listener is bound to. */
int sl__emu_bound_port(const sl_emu_t *emu);

/* Stops listening and frees every call in flight. */
void sl__emu_stop(sl_emu_t *emu);

/* ---- answers (http.c) ------------------------------------------------------------------ */

/* Which wire shape an endpoint speaks. */
typedef enum sl_emu_api { SL_EMU_ANTHROPIC = 0, SL_EMU_OPENAI } sl_emu_api_t;

/* Adds the provider's rate-limit headers for `r` (NULL: not a model call). */
void sl__emu_add_ratelimit_headers(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api,
                                   const sl_provider_result_t *r, double now_s);

/* Sends `body` (a JSON text, `len` bytes) with `status`. Does not touch req afterwards. */
void sl__emu_send(struct evhttp_request *req, int status, const char *body, size_t len);

/* Sends `body` (decref'ed here) as compact JSON. */
void sl__emu_send_json(struct evhttp_request *req, int status, json_t *body);

/* Sends an error in `api`'s shape: Anthropic {"type":"error","error":{"type":T,
 * "message":M}}, OpenAI {"error":{"message":M,"type":T,"param":P,"code":C}}. `param`
 * and `code` may be NULL (JSON null); they are ignored for Anthropic. Adds the
 * rate-limit headers (not a model call) first. */
void sl__emu_send_error(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, int status,
                        const char *type, const char *message, const char *param, const char *code);

/* Sends the provider's refusal `r` (rate limit, spend cap, invalid, overloaded) with
 * its status and error body in `api`'s shape and counts the status. The caller has
 * added the rate-limit headers. Does not touch req afterwards. */
void sl__emu_send_refusal(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api,
                          const sl_provider_result_t *r);

/* Writes a fresh id "<prefix><24 base62 characters>" into buf (cap >= strlen(prefix)+25). */
void sl__emu_new_id(sl_emu_t *emu, const char *prefix, char *buf, size_t cap);

/* ---- generation: one admitted model call being answered (generate.c) ------------------- */

typedef struct sl_emu_call sl_emu_call_t;

/* What an answer is made of, in order. Every API writes the same parts in its own
 * shapes: Anthropic content blocks, Chat Completions content and tool_calls (thinking
 * hidden, counted as reasoning tokens), Responses output items. */
typedef enum sl_emu_part_kind {
    SL_EMU_PART_THINKING = 0, /* reasoning: an Anthropic thinking block, an OpenAI reasoning item */
    SL_EMU_PART_TEXT,         /* answer text */
    SL_EMU_PART_TOOL,         /* a function / tool call: name and arguments JSON */
} sl_emu_part_kind_t;

#define SL_EMU_MAX_PARTS 10

typedef struct sl_emu_part {
    sl_emu_part_kind_t kind;
    int64_t tokens;   /* output tokens billed for this part (>= 1 once laid out) */
    char *text;       /* malloc'ed: the text, or the tool's arguments as compact JSON;
                         NULL (before layout) for filler of `tokens` tokens */
    size_t text_len;  /* bytes of `text` the answer carries (shorter when cut at max_tokens) */
    char *name;       /* tool name, malloc'ed */
    char id[64];      /* block / item id, given when the part starts */
    char call_id[64]; /* OpenAI tool call id */
} sl_emu_part_t;

/* What an API does at each step of an answer. The generator calls them in order:
 * begin (streams only: headers are out), for each part part_begin, part_delta with
 * consecutive pieces of its text (never empty), part_end; then finish (the closing
 * events) or, for a stream the provider breaks off (result.stream_error), error
 * instead of finish (the part being written is not ended); or complete
 * (non-streaming: the whole body once). */
typedef struct sl_emu_shape {
    void (*begin)(sl_emu_call_t *c, struct evbuffer *out);
    void (*part_begin)(sl_emu_call_t *c, size_t i, struct evbuffer *out);
    void (*part_delta)(sl_emu_call_t *c, size_t i, const char *s, size_t n, struct evbuffer *out);
    void (*part_end)(sl_emu_call_t *c, size_t i, struct evbuffer *out);
    void (*finish)(sl_emu_call_t *c, struct evbuffer *out);
    json_t *(*complete)(sl_emu_call_t *c);
    void (*ping)(sl_emu_call_t *c, struct evbuffer *out);  /* NULL: no keep-alive events */
    void (*error)(sl_emu_call_t *c, struct evbuffer *out); /* NULL: never breaks off */
} sl_emu_shape_t;

struct sl_emu_call {
    sl_emu_t *emu;
    struct evhttp_request *req; /* NULL once the client went away */
    struct evhttp_connection *evcon;
    const sl_emu_shape_t *shape;
    sl_emu_api_t api;
    bool stream;
    bool include_usage;   /* OpenAI stream_options.include_usage */
    int64_t choices;      /* OpenAI `n` (>= 1 once admitted): the answer, once per choice */
    char id[64];          /* msg_... / chatcmpl-... / resp_... */
    char *model;          /* as requested, malloc'ed */
    int64_t created_unix; /* OpenAI "created" */
    sl_provider_result_t result;
    bool ended; /* sl_provider_end done */
    /* The answer: fixed parts set before admission (sl__emu_call_add_*), laid out
     * over the billed output after it (filler text fills what is not fixed). */
    sl_emu_part_t parts[SL_EMU_MAX_PARTS];
    size_t n_parts;
    bool filler_answer;      /* no fixed text or tool: the provider picks the length */
    int64_t thinking_budget; /* > 0: a thinking part leads the answer, at most this long */
    bool tool_named;         /* OpenAI: tool_choice named the function (finish_reason "stop") */
    bool cut;                /* the answer was cut at max_tokens */
    uint64_t filler_seed;
    json_t *echo;             /* Responses: request fields the response object repeats */
    json_t *history;          /* Responses: the input items, kept with the output when stored */
    bool encrypted_reasoning; /* Responses: include asks for reasoning.encrypted_content */
    /* Pacing. */
    double start_s;     /* provider clock at admission */
    int64_t emitted;    /* output tokens sent so far (streams) */
    int64_t seq;        /* Responses: the next sequence_number */
    size_t parts_begun; /* streams: parts whose opening events went out */
    bool role_sent;     /* Chat Completions stream: the role went out */
    bool begun;
    double last_event_s;
    struct event *timer;
    struct sl_emu_call *prev, *next;
};

/* Starts answering an admitted call: takes ownership of `c` (allocated by the caller
 * with sl__emu_call_new, result filled), sends the headers (status 200 and the
 * rate-limit headers) and schedules the events. */
void sl__emu_call_start(sl_emu_call_t *c);

/* Allocates a call for `req` (zeroed, linked to emu). NULL when out of memory. */
sl_emu_call_t *sl__emu_call_new(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api,
                                const sl_emu_shape_t *shape);

/* Frees a call that was never started (e.g. refused by the provider). */
void sl__emu_call_free(sl_emu_call_t *c);

/* Appends a fixed part to the answer: text (`text`, copied; `pad_tokens` filler tokens
 * follow it), or a tool call `name` with `input` (a JSON value, dumped compact).
 * Returns false when out of memory or out of parts (the call is then answered 500). */
bool sl__emu_call_add_text(sl_emu_call_t *c, const char *text, int64_t pad_tokens);
bool sl__emu_call_add_tool(sl_emu_call_t *c, const char *name, json_t *input);

/* Makes the answer to `c` a call of `tool` (forced by tool_choice): its name (under
 * "name") and an input generated from its schema, found under `schema_key`
 * (Anthropic "input_schema", OpenAI "parameters"). */
bool sl__emu_call_use_tool(sl_emu_call_t *c, json_t *tool, const char *schema_key);

/* Makes the answer to `c` a text that is JSON matching `schema` (structured output;
 * NULL schema: any JSON object). */
bool sl__emu_call_use_schema(sl_emu_call_t *c, json_t *schema);

/* Output tokens of the fixed parts (what call->output_tokens should be), or -1 for a
 * filler answer. Thinking is added by sl__emu_call_admit. */
int64_t sl__emu_call_fixed_tokens(const sl_emu_call_t *c);

/* Output tokens of the thinking part of an answer of `answer_tokens` (filler) or of
 * a fixed answer (answer_tokens < 0): a quarter of it (of --output-tokens for a fixed
 * answer), at most thinking_budget; 0 without thinking. */
int64_t sl__emu_call_thinking_tokens(const sl_emu_call_t *c, int64_t answer_tokens);

/* The whole text a part carries (its first text_len bytes). */
const char *sl__emu_part_text(const sl_emu_part_t *p, size_t *len);

/* The common end of a model call: takes ownership of `c`. `ok` false (something could
 * not be allocated) answers 500 of type `oom_type`; else sets call->output_tokens from
 * the parts (and thinking), asks the provider to admit `call`, adds its rate-limit
 * headers, and either answers its refusal or lays the answer out over the billed
 * output, names the call `id_prefix`... and starts it (sl__emu_call_start). */
void sl__emu_call_admit(sl_emu_call_t *c, sl_provider_call_t *call, bool ok, const char *id_prefix,
                        const char *oom_type);

/* Output tokens of the parts of `kind` as laid out. */
int64_t sl__emu_call_tokens_of(const sl_emu_call_t *c, sl_emu_part_kind_t kind);

/* Whether the answer holds a tool call (as laid out). */
bool sl__emu_call_has_tool(const sl_emu_call_t *c);

/* Frees every call (shutdown): the provider is told they ended. */
void sl__emu_calls_shutdown(sl_emu_t *emu);

/* ---- filler output (filler.c) -------------------------------------------------------- */

/* Picks the filler vocabulary: words the tokenizer counts as exactly one token each,
 * so n filler tokens are n tokens for the tokenizer as well. Returns 0, or -1 with
 * `err` set when too few words qualify (a broken vocabulary). */
int sl__filler_init(sl_tokenizer_t *tok, char *err, size_t errlen);

/* Appends filler tokens [from, to) of the text selected by `seed` to `out`. The same
 * seed always gives the same text, and [0,a) + [a,b) equals [0,b). */
void sl__filler_append(uint64_t seed, int64_t from, int64_t to, struct evbuffer *out);

/* The whole filler text of n tokens as a malloc'ed string (NULL: out of memory). */
char *sl__filler_text(uint64_t seed, int64_t n);

/* ---- JSON Schema values (schema.c) --------------------------------------------------- */

/* A value that satisfies `schema` (rules atop schema.c). Returns a new reference
 * (NULL only when out of memory). */
json_t *sl__schema_value(json_t *schema);

/* sl__schema_value, but always an object (a tool's input): {} when the schema does not
 * describe one. */
json_t *sl__schema_object(json_t *schema);

/* ---- bodies for the estimator (counting.c) --------------------------------------------- */

/* An Anthropic body the estimator counts: `body` itself (a new reference) or a copy
 * with role "system" messages as user messages and newer block types as text of
 * their JSON. NULL when out of memory. */
json_t *sl__count_anthropic_body(json_t *body);

/* The Chat Completions body equivalent to a Responses request `body` whose input
 * items (previous_response_id resolved) are `items`. New reference; NULL when out of
 * memory. */
json_t *sl__count_responses_body(json_t *body, json_t *items);

/* ---- scripted conversations (script.c) ------------------------------------------------ */

/* Loads and checks a script file (format in docs/emu.md). Returns 0 with *out set, or
 * -1 with `err` naming the file, the field and the value. */
int sl__script_load(const char *path, json_t **out, char *err, size_t errlen);

/* The script's turn number `turn` (borrowed), or NULL: no script, or past its end
 * without "after_last": "repeat". */
json_t *sl__script_turn(sl_emu_t *emu, size_t turn);

/* The assistant turns already in a Messages or Chat Completions body's `messages`: the
 * number of the scripted turn to answer. */
size_t sl__script_assistant_turns(json_t *body);

/* Makes the answer to `c` the scripted `turn`. Returns false when out of memory. */
bool sl__script_answer(sl_emu_call_t *c, json_t *turn);

/* ---- the prompt cache key (prefix.c) ------------------------------------------------- */

/* The identity of an Anthropic request's cacheable prefix: a 64-bit hash of the model
 * and every tool, system block and message block up to and including the last one
 * that carries cache_control (cache_control itself excluded). Returns false when the
 * request has no breakpoint. */
bool sl__prefix_cache_key(json_t *body, uint64_t *key);

/* One cache_control breakpoint of a request: the marked block (an object inside
 * `body`, borrowed) and the key of the prefix up to and including it. */
typedef struct sl_emu_breakpoint {
    json_t *block;
    uint64_t key;
} sl_emu_breakpoint_t;

/* Every breakpoint of `body` in prompt order (tools, system, message blocks); the
 * last one's key is sl__prefix_cache_key's. Writes at most `cap` (>= 1) into `out`
 * and returns how many there are; when that exceeds `cap`, out[cap - 1] holds the
 * last breakpoint. */
size_t sl__prefix_breakpoints(json_t *body, sl_emu_breakpoint_t *out, size_t cap);

/* Sets call->ttl_1h and each earlier breakpoint's ttl_1h from the cache_control markers of
 * `body` (matched by prefix key; call's breakpoints filled first). Returns false with a
 * sentence in `err` when a ttl is not "5m" or "1h" or a 1-hour marker follows a 5-minute
 * one, as the API refuses (cache_ttl.c). */
bool sl__cache_ttls(json_t *body, sl_provider_call_t *call, char *err, size_t errlen);

/* ---- endpoints ---------------------------------------------------------------------- */

/* anthropic.c */
void sl__anthropic_messages(sl_emu_t *emu, struct evhttp_request *req, json_t *body,
                            const char *raw, size_t raw_len);
void sl__anthropic_count_tokens(sl_emu_t *emu, struct evhttp_request *req, json_t *body,
                                const char *raw, size_t raw_len);

/* openai.c */
void sl__openai_chat(sl_emu_t *emu, struct evhttp_request *req, json_t *body, const char *raw,
                     size_t raw_len);

/* max_tokens charged when an OpenAI request gives no output limit. */
#define SL_EMU_OPENAI_DEFAULT_MAX_TOKENS 4096

/* The thinking budget an OpenAI reasoning effort asks for: 0 for none, "none" and
 * "minimal", else max_tokens. */
int64_t sl__openai_reasoning_budget(json_t *effort, int64_t max_tokens);

/* responses.c: POST /v1/responses. */
void sl__openai_responses(sl_emu_t *emu, struct evhttp_request *req, json_t *body);

/* models.c: GET /v1/models (id NULL) and GET /v1/models/{id} in `api`'s shape. */
void sl__emu_models(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, const char *id);

/* models.c: the i-th model id of `api`'s fixed list, NULL past its end. */
const char *sl__emu_model_id(sl_emu_api_t api, size_t i);

/* admin.c: the provider's rate-limit endpoints (Anthropic's Admin API
 * GET /v1/organizations/rate_limits, OpenAI's GET /v1/organization/projects/{id}/rate_limits)
 * and the runtime knob POST /emu/limits. Answers and returns true when `path` is one of
 * them; false leaves the request to the other routes. */
bool sl__emu_admin_route(sl_emu_t *emu, struct evhttp_request *req, const char *path);

/* http.c, for the endpoints outside its table: answers 401 and returns false when the key
 * is missing or wrong; parses the body as one JSON object (answers 400 or 413 and returns
 * NULL otherwise; *raw is the body, malloc'ed). */
bool sl__emu_check_key(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api);
json_t *sl__emu_read_json(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, char **raw,
                          size_t *raw_len);

/* embeddings.c: POST /v1/embeddings and POST /v1/moderations (OpenAI). */
void sl__openai_embeddings(sl_emu_t *emu, struct evhttp_request *req, json_t *body);
void sl__openai_moderations(sl_emu_t *emu, struct evhttp_request *req, json_t *body);
/* The embeddings answer of `body` (new reference), or NULL with `err` naming the field;
 * *tokens is its usage.prompt_tokens. Also what an embeddings batch line gets. */
json_t *sl__embeddings_answer(sl_emu_t *emu, json_t *body, int64_t *tokens, char *err,
                              size_t errlen);

/* batches.c: the batch APIs and OpenAI's files. sl__emu_batch_api says whether `path`
 * is one of theirs (or embeddings / moderations) and which API's shape it speaks (-1:
 * none); sl__emu_batch_request answers it. */
int sl__emu_batch_api(const char *path);
void sl__emu_batch_request(sl_emu_t *emu, struct evhttp_request *req, const char *path);
/* Ends the batches due by now; their results are billed. */
void sl__emu_batches_advance(sl_emu_t *emu);
/* {"anthropic": {...}, "openai": {...}, "embeddings": {...}} for /stats (new reference). */
json_t *sl__emu_batches_stats(sl_emu_t *emu);
void sl__emu_batches_free(sl_emu_t *emu);

/* stats.c: GET /stats, GET /health, POST /emu/spend-cap. */
void sl__emu_stats(sl_emu_t *emu, struct evhttp_request *req);
void sl__emu_health(sl_emu_t *emu, struct evhttp_request *req);
void sl__emu_spend_cap(sl_emu_t *emu, struct evhttp_request *req, json_t *body);

#endif
