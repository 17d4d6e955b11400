/* emu.h - sluice-emu's internals shared between its files (sl__ names are not a public API).
 *
 * sluice-emu answers the Anthropic Messages API and the OpenAI Chat Completions API
 * on one libevent loop. Every decision a provider makes (admit or 429, usage, cache,
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
    char tls_cert[1024]; /* "" = plain HTTP */
    char tls_key[1024];
    char vocab[1024];       /* "" = the tokenizer's default path */
    double ping_interval_s; /* streams: a ping after this long without an event */
    int64_t max_body_bytes;
    int cache_breakpoints; /* 1..4: breakpoints, counted back from the last, that the prompt
                              cache reads and writes (1: the last one only) */
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
    struct event *sig_term, *sig_int;
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

/* What an API does at each step of an answer. The generator calls them in order:
 * begin (streams only: headers are out), tokens (streams: emitted tokens [from, to)
 * of the output, in order, any number of times), finish (streams: the closing
 * events) or, for a stream the provider breaks off (result.stream_error), error
 * instead of finish; or complete (non-streaming: the whole body once). */
typedef struct sl_emu_shape {
    void (*begin)(sl_emu_call_t *c, struct evbuffer *out);
    void (*tokens)(sl_emu_call_t *c, int64_t from, int64_t to, struct evbuffer *out);
    void (*finish)(sl_emu_call_t *c, struct evbuffer *out);
    json_t *(*complete)(sl_emu_call_t *c);
    void (*ping)(sl_emu_call_t *c, struct evbuffer *out); /* NULL: no keep-alive events */
    void (*error)(sl_emu_call_t *c, struct evbuffer *out); /* NULL: never breaks off */
} sl_emu_shape_t;

/* A tool call the model makes instead of writing text (forced by tool_choice). */
typedef struct sl_emu_tool_call {
    char *name;       /* malloc'ed */
    char *input_json; /* compact JSON object, malloc'ed */
} sl_emu_tool_call_t;

struct sl_emu_call {
    sl_emu_t *emu;
    struct evhttp_request *req; /* NULL once the client went away */
    struct evhttp_connection *evcon;
    const sl_emu_shape_t *shape;
    sl_emu_api_t api;
    bool stream;
    bool include_usage;   /* OpenAI stream_options.include_usage */
    char id[64];          /* msg_... / chatcmpl-... */
    char *model;          /* as requested, malloc'ed */
    int64_t created_unix; /* OpenAI "created" */
    sl_provider_result_t result;
    bool ended;              /* sl_provider_end done */
    sl_emu_tool_call_t tool; /* name NULL: the answer is text */
    bool tool_named;         /* OpenAI: tool_choice named the function (finish_reason "stop") */
    uint64_t filler_seed;
    /* Pacing. */
    double start_s;     /* provider clock at admission */
    int64_t emitted;    /* output tokens sent so far (streams) */
    int64_t text_chars; /* tool input: characters of input_json sent so far */
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

/* Makes the answer to `c` a call of `tool` (forced by tool_choice): c->tool gets the
 * tool's name and an input generated from its schema, found under `schema_key`
 * (Anthropic "input_schema", OpenAI "parameters"), and call->output_tokens what that
 * answer costs: name + input + 1 tokens. Out of memory leaves a c->tool field NULL,
 * which sl__emu_call_admit answers. */
void sl__emu_call_use_tool(sl_emu_call_t *c, json_t *tool, const char *schema_key,
                           sl_provider_call_t *call);

/* The common end of a model call: takes ownership of `c`. When c->model, or (with
 * `with_tool`) c->tool, could not be allocated, answers 500 of type `oom_type`; else
 * asks the provider to admit `call`, adds its rate-limit headers, and either answers
 * its refusal or names the call `id_prefix`... and starts it (sl__emu_call_start). */
void sl__emu_call_admit(sl_emu_call_t *c, const sl_provider_call_t *call, bool with_tool,
                        const char *id_prefix, const char *oom_type);

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

/* A value that satisfies `schema` (a JSON Schema object; required properties only,
 * first enum value, placeholder strings). Returns a new reference. */
json_t *sl__filler_tool_input(json_t *schema);

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

/* ---- endpoints ---------------------------------------------------------------------- */

/* anthropic.c */
void sl__anthropic_messages(sl_emu_t *emu, struct evhttp_request *req, json_t *body,
                            const char *raw, size_t raw_len);
void sl__anthropic_count_tokens(sl_emu_t *emu, struct evhttp_request *req, json_t *body,
                                const char *raw, size_t raw_len);

/* openai.c */
void sl__openai_chat(sl_emu_t *emu, struct evhttp_request *req, json_t *body, const char *raw,
                     size_t raw_len);

/* stats.c: GET /stats, GET /health, POST /emu/spend-cap. */
void sl__emu_stats(sl_emu_t *emu, struct evhttp_request *req);
void sl__emu_health(sl_emu_t *emu, struct evhttp_request *req);
void sl__emu_spend_cap(sl_emu_t *emu, struct evhttp_request *req, json_t *body);

#endif
