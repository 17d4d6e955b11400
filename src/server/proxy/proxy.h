/* proxy.h - the provider proxy's files (proxy*.c, upstream.c, proxy_feature.c): internal to
 * src/server/proxy/. */
#ifndef SL_PROXY_H
#define SL_PROXY_H

#include "server.h"
#include "upstream.h"

/* The proxy's limits (the `proxy:` section). */
typedef struct sl_proxy_config {
    size_t body_limit_bytes;    /* 33554432: larger request bodies get 413 */
    size_t max_headers;         /* 100: requests with more headers get 431 */
    double idle_timeout_s;      /* 300: no byte from the provider for this long fails the call */
    double connect_timeout_s;   /* 10 */
    double ping_interval_s;     /* 5: queued streaming requests get a ping this often */
    double max_hold_s;          /* 540: a proxied call waits in the queue this long (under the
                                   SDKs' 10-minute timeouts) before it is refused */
    char *default_pool;         /* NULL: a model no pool's `models` matches is a 400; else
                                   such calls go to this pool */
    bool allow_unauthenticated; /* false: with auth on, x-sluice-* headers alone do not
                                   identify an agent (with auth off they always do) */
    bool continue_capped;       /* false: an Anthropic answer cut at a learned output cap
                                   below the client's max_tokens is continued (docs/proxy.md) */
    bool probe;                 /* true: a queued call may have the proxy send its provider
                                   the smallest call for rate-limit headers (proxy_probe.c);
                                   false: never, the provider sees only the clients' calls */
    bool estimate_bytes;        /* false (`estimator: tokenizer`): the vocabulary is loaded at
                                   start and a missing one is a startup error; true
                                   (`estimator: bytes`): input is estimated as body bytes / 4 */
} sl_proxy_config_t;

/* The proxy's section of configuration `c` (config_proxy.c; set by sl_config_defaults). */
#define SL_PROXY_CONF(c) ((sl_proxy_config_t *)(c)->feature[SL_FEATURE_ID_proxy])

typedef struct sl_proxy sl_proxy_t;

/* proxy_probe.c: a cold pool asks its provider where it stands (the file says why). */
typedef struct sl__probes sl__probes_t;
/* The proxy's record of pools heard from; NULL when out of memory (then nothing probes). */
sl__probes_t *sl__probes_new(void);
/* Frees it and every probe still running (the upstream client is freed first). */
void sl__probes_free(sl__probes_t *ps);
/* An answer of `pool`'s provider came back: it needs no probe. */
void sl__probes_answered(sl__probes_t *ps, const char *pool);
/* A call of `model` was queued on `pool` (one key, not long-context), to go to `url` with
 * `headers` ("Name: value", the pool's key among them) in `api`'s shape: the first time
 * for a pool not heard from, sends the probe. */
void sl__probes_queued(sl__probes_t *ps, sl_server_t *srv, sl_upstream_t *up, const char *pool,
                       const char *model, const char *url, const char *const *headers,
                       size_t n_headers, int api, bool responses);

/* proxy.c: the provider proxy (/anthropic/..., /openai/...). */
/* Sets up the proxy on srv->base: the upstream client and the tokenizer (unless
 * `proxy.estimator: bytes`). Returns 0, or -1 with `err` set (a missing or invalid
 * vocabulary names its path). */
int sl__proxy_init(sl_server_t *srv, char *err, size_t errlen);

/* config_proxy.c: the `proxy:` section as the feature registers it (config.h): its table,
 * defaults, reader (errors as "FILE:LINE: proxy.KEY: ..."), the check of default_pool
 * against the pools (after the whole file), and what clearing a configuration frees. */
extern const sl_config_section_t sl__proxy_config;
/* Loads the tokenizer vocabulary if configuration `c` estimates with it and none is
 * loaded yet (a reload from `estimator: bytes`). Returns 0, or -1 with `err` naming the
 * path; nothing changes then. */
int sl__proxy_estimator_ready(sl_server_t *srv, const sl_config_t *c, char *err, size_t errlen);
/* sluice_proxy_estimator_info: the estimator in use and the vocabulary's path. */
void sl__proxy_metrics_render(const sl_server_t *srv, struct evbuffer *out);
/* The bus (features.def): wakes the proxied calls waiting on a ticket the event names. */
void sl__proxy_on_event(sl_server_t *srv, const sl_bus_event_t *ev);
/* Answers every proxied call still waiting or streaming (503 / an SSE error event),
 * settling what each used. With `drain`, calls the provider is already answering are
 * left to finish (sl__proxy_in_flight counts them); the rest are answered. */
void sl__proxy_shutdown(sl_server_t *srv, bool drain);
size_t sl__proxy_in_flight(const sl_server_t *srv);
/* Frees the proxy (after shutdown); nothing when it never started. */
void sl__proxy_free(sl_server_t *srv);
/* Handles `call` when its path is a proxy endpoint (segment 0 "anthropic" or "openai")
 * and returns true; false leaves the call alone. The body has not been read and auth
 * has not been checked: the proxy does both in the provider's own error shapes. */
bool sl__proxy_route(sl_call_t *call, int n, char **seg, const char *query);
/* The largest body the transport must let through for the proxy. */
size_t sl__proxy_body_limit(const sl_config_t *c);
/* The proxy's tokenizer; NULL with `proxy.estimator: bytes` (or before the proxy started). */
sl_tokenizer_t *sl__proxy_tokenizer(sl_server_t *srv);

/* estimate.c: POST /v1/estimate, a provider request body counted as the proxy counts it. */
void sl__handle_estimate(sl_call_t *call);

/* proxy_usage.c: what a provider's answer says it used (pure functions, no I/O). */
typedef struct sl_usage {
    int64_t input_tokens; /* uncached input (OpenAI: prompt_tokens - cached_tokens) */
    int64_t output_tokens;
    int64_t cache_creation_input_tokens;
    int64_t cache_read_input_tokens;
    int64_t cache_creation_1h_input_tokens; /* Anthropic's cache_creation
                                               .ephemeral_1h_input_tokens (0: none) */
    bool have_input;            /* the input side was reported */
    bool have_output;           /* the final output count was reported */
    int64_t output_seen_tokens; /* streams: a rough count of the output seen so far */
} sl_usage_t;
/* Reads `usage` from a whole JSON response body of `api`; unknown shapes leave `u` alone. */
void sl__usage_from_body(sl_upstream_api_t api, const char *body, size_t len, sl_usage_t *u);
/* Reads one SSE event (its bytes up to, not including, the blank line) of `api` into
 * `u`. Returns false when the event must not reach the client: the OpenAI usage-only
 * chunk when `drop_usage_chunk` (sluice asked for it, the client did not). */
bool sl__usage_from_event(sl_upstream_api_t api, const char *ev, size_t len, bool drop_usage_chunk,
                          sl_usage_t *u);
/* The top-level member `key` of the JSON object whose text is `s`: a pointer to its
 * value's first byte (not validated), or NULL. */
const char *sl__usage_member_at(const char *s, size_t n, const char *key);
/* That member parsed (the caller decrefs), or NULL when absent or not JSON. */
json_t *sl__usage_member(const char *s, size_t n, const char *key);
/* The value of an SSE event's first line starting with `field` ("event:", "data:"),
 * blanks and a trailing CR cut; NULL when there is none. */
const char *sl__sse_field(const char *ev, size_t len, const char *field, size_t *vlen);

/* proxy_responses.c: the OpenAI Responses API's usage (pure functions, no I/O). */
/* Reads a whole Response body's `usage` into `u`; input is settled net of cached_tokens,
 * which are cache reads; output includes reasoning tokens. */
void sl__responses_usage_from_body(const char *body, size_t len, sl_usage_t *u);
/* Reads one SSE event of a Responses stream into `u` (the usage of response.completed,
 * .incomplete or .failed; every *.delta counts toward output_seen_tokens). Every event
 * goes on to the client. */
void sl__responses_usage_from_event(const char *ev, size_t len, sl_usage_t *u);
/* The data of a Responses stream's `error` event for an error body (OpenAI's shape
 * `{"error":{...}}`, or any text): `{"type":"error","code","message","param","error"}` —
 * the documented event's fields, and `error`, from which the SDKs raise an APIError.
 * The caller frees; NULL when out of memory. */
char *sl__responses_error_event(const char *body, size_t len);
struct evbuffer;
/* Moves a Responses stream's bytes from `in` to `out`: events that carry no usage as
 * their bytes arrive (once their `event:` line is in; `*through` is true while one is
 * part-way, starting false), the usage-carrying last event once whole, read into `u`.
 * Bytes that cannot be placed yet stay in `in`. */
void sl__responses_take_events(struct evbuffer *in, struct evbuffer *out, bool *through,
                               sl_usage_t *u);

/* proxy_routes.c: what a proxied path is. */
typedef enum sl_proxy_kind {
    SL_PROXY_NONE = 0,     /* not an endpoint the proxy serves: refused naming the path */
    SL_PROXY_CALL,         /* Messages or Chat Completions: leased and settled */
    SL_PROXY_RESPONSES,    /* OpenAI Responses: leased and settled */
    SL_PROXY_COUNT_TOKENS, /* passed through without a lease */
    SL_PROXY_MODELS,       /* GET, passed through without a lease */
    SL_PROXY_HELLO,        /* Anthropic's /api/hello connectivity check: answered here */
    SL_PROXY_EMBEDDINGS,   /* OpenAI embeddings: leased on input, settled (proxy_embeddings.c) */
    SL_PROXY_MODERATIONS,  /* OpenAI moderations: a lease of one request, no tokens */
} sl_proxy_kind_t;
/* Resolves the request's path as it came (path[0, len): raw bytes, no query, nothing
 * decoded) against the documented spellings of `api`'s endpoints ("/anthropic/..." or
 * "/openai/...", with or without "/v1"); writes the provider's path into `upstream`.
 * Anything else, dot segments, empty segments and encoded slashes included, is
 * SL_PROXY_NONE (proxy_routes.c). */
sl_proxy_kind_t sl__proxy_resolve(sl_upstream_api_t api, const char *path, size_t len,
                                  char *upstream, size_t upstream_size);
/* A model or object id: one raw path segment decoded into `id` (room for 257 bytes);
 * false for an empty or overlong id, a byte outside [A-Za-z0-9._:@-] once decoded, or a
 * dot segment (proxy_routes.c). */
bool sl__proxy_id_decode(const char *raw, size_t len, char *id);

/* Whether a provider 429 body is an acceleration-limit refusal (Anthropic's
 * error.details.error_code "ramp_limit_exceeded", or a message naming the "acceleration
 * limit"; docs/emu.md): not a full bucket, but a pool grown too fast (the provider_limits
 * feature's ramp learns from it: SL_BUS_ACCELERATION). */
bool sl__is_acceleration_429(const char *body, size_t len);

/* True when a 429 body of `api` is a spend/budget cap rather than a rate limit
 * (Anthropic: "spend limit" wording and no retry-after; OpenAI: insufficient_quota). */
bool sl__usage_is_spend_cap(sl_upstream_api_t api, const char *body, size_t len,
                            bool have_retry_after);

/* proxy_output.c: the output a proxied call asks the provider to hold (pure functions). */
#define SL_PROXY_MAX_CHOICES 128 /* OpenAI's bound on `n` */
#define SL_PROXY_RESPONSES_MIN_OUTPUT 16 /* the Responses API refuses a max_output_tokens below it */
typedef struct sl_proxy_output {
    const char *field;         /* the body's per-choice limit: max_tokens,
                                  max_completion_tokens or max_output_tokens (static) */
    int64_t per_choice_tokens; /* its value; 0 when the call names none */
    int64_t choices;           /* OpenAI Chat Completions' `n`; 1 otherwise */
    bool cappable;             /* the limit may be lowered (not under Anthropic's
                                  extended thinking, whose budget must stay below it) */
    int64_t floor_tokens;      /* the least output it may be lowered to: a token per
                                  choice, SL_PROXY_RESPONSES_MIN_OUTPUT on Responses */
} sl_proxy_output_t;
/* Reads the output limit of a call of `api` (`responses`: the Responses API) from its
 * body. Returns 0, or -1 with `err` naming the field (an `n` that is not an integer
 * 1..SL_PROXY_MAX_CHOICES). */
int sl__proxy_output_read(sl_upstream_api_t api, bool responses, const json_t *body,
                          sl_proxy_output_t *out, char *err, size_t errlen);
/* What the provider will hold for the call's output: the per-choice limit (4096 when
 * none is named) times the choices. */
int64_t sl__proxy_output_tokens(const sl_proxy_output_t *o);
/* Lowers the body's per-choice limit to floor(reserved_tokens / choices) (at least 1)
 * when that is below the call's own. Returns 1 when the body changed, 0 when not, -1
 * when out of memory. */
int sl__proxy_output_cap(json_t *body, const sl_proxy_output_t *o, int64_t reserved_tokens);

/* proxy_continue.c: one client answer from several capped calls (proxy.continue_capped).
 * Pure functions on JSON; the proxy does leases and I/O. */
typedef struct sl_cont sl_cont_t;
/* A continuation state for a call of `api` (`responses`: the Responses API) whose body is
 * `client_body` (copied) and whose own limit, in the body's `field` (static), is
 * `client_max_tokens`; NULL when out of memory. */
sl_cont_t *sl__cont_new(sl_upstream_api_t api, bool responses, const json_t *client_body,
                        const char *field, int64_t client_max_tokens);
void sl__cont_free(sl_cont_t *c);
/* The next part is sent with its limit at `cap_tokens`. */
void sl__cont_round(sl_cont_t *c, int64_t cap_tokens);
/* A streamed part: one SSE event (its bytes up to the blank line) in, what the client
 * gets appended to `out` (events renumbered, joined, held back or dropped). `to_client`
 * false: the event is read but never reaches the client (the OpenAI usage chunk sluice
 * asked for; the Anthropic half skips such events). */
void sl__cont_event(sl_cont_t *c, const char *ev, size_t len, bool to_client,
                    struct evbuffer *out);
/* After a streamed part: it was cut at its cap and the answer goes on. */
bool sl__cont_wants_more(const sl_cont_t *c);
/* A whole (non-stream) part's body: 1 when the answer goes on, 0 when it is complete
 * (sl__cont_answer), -1 when it is not a message this understands (pass it on). */
int sl__cont_absorb(sl_cont_t *c, const char *body, size_t len);
/* The joined answer as JSON text (the caller frees), or NULL when out of memory. */
char *sl__cont_answer(sl_cont_t *c);
/* The next part's body as JSON text (the caller frees; NULL when out of memory), and in
 * *max_tokens_left what the client's limit leaves. */
char *sl__cont_next_body(sl_cont_t *c, int64_t *max_tokens_left);

/* proxy_continue_openai.c: the same for OpenAI Chat Completions and the Responses API
 * (no prefill: the cut text goes back as an assistant message). Each function is its
 * sl__cont_* counterpart's; sl__oai_cont_event takes Chat Completions chunks and whole
 * Responses events. */
typedef struct sl__oai_cont sl__oai_cont_t;
sl__oai_cont_t *sl__oai_cont_new(bool responses, const json_t *client_body, const char *field,
                                 int64_t client_max_tokens);
void sl__oai_cont_free(sl__oai_cont_t *c);
void sl__oai_cont_round(sl__oai_cont_t *c, int64_t cap_tokens);
void sl__oai_cont_event(sl__oai_cont_t *c, const char *ev, size_t len, bool to_client,
                        struct evbuffer *out);
bool sl__oai_cont_wants_more(const sl__oai_cont_t *c);
int sl__oai_cont_absorb(sl__oai_cont_t *c, const char *body, size_t len);
char *sl__oai_cont_answer(sl__oai_cont_t *c);
char *sl__oai_cont_next_body(sl__oai_cont_t *c, int64_t *max_tokens_left);
/* Whether an OpenAI call's body may be continued: not one asking for JSON
 * (response_format / text.format json_schema or json_object), which a second message
 * would break. */
bool sl__oai_cont_takes(const json_t *body, bool responses);
/* Adds every integer of the usage object `part` to `into`'s, nested objects (token
 * details) too; other members `into` lacks are copied. */
void sl__usage_sum(json_t *into, const json_t *part);

/* proxy_prefix.c: the SHA-256 (64 hex digits and a NUL in `out`) of the prompt prefix
 * a call of `api` expects from the provider's cache: Anthropic's blocks up to the last
 * cache_control, OpenAI's tools and messages before the newest. Returns 1 when there
 * is such a prefix, 0 when there is none (`out` untouched), -1 when out of memory. */
int sl__prefix_hash(sl_upstream_api_t api, const json_t *body, char out[65]);

/* Anthropic's 1-hour cache lifetime (cache_control {"ttl": "1h"}). */
#define SL_CACHE_TTL_1H_S 3600.0
/* proxy_prefix.c: the lifetime the provider keeps the prefix of sl__prefix_hash for: 3600
 * when an Anthropic body's last cache_control says "ttl": "1h", else 0 (the pool's
 * cache_ttl_s: the 5-minute default). The lease's sl_request_t.cache_ttl_s. */
double sl__prefix_cache_ttl_s(sl_upstream_api_t api, const json_t *body);

#endif /* SL_PROXY_H */
