/* provider.h - a model of an LLM provider's rate limits, prompt cache and usage.
 *
 * One sl_provider_t stands for one API key at one provider (Anthropic- or
 * OpenAI-shaped) and answers, for each model call, what the real provider would:
 * admitted or 429 (with retry-after, or a spend-cap stop without one), the usage it
 * bills, how long the answer takes, and the rate-limit headers it sends. The
 * emulator (src/emu/) wraps it in HTTP; the simulator (src/sim/) calls it directly
 * on a virtual clock. Both must see the same provider, so every rule lives here.
 *
 * Pure C11: no I/O, no global state, no threads. The caller passes `now_s` (seconds
 * on any monotonic clock; Unix time when headers are wanted, since reset times are
 * printed as RFC 3339) to every call that depends on time, and never passes a time
 * earlier than one already seen (an earlier time is treated as the latest one seen).
 * Anything random (latency spread, output length, outside traffic) comes from a
 * PRNG seeded by the config, so the same calls with the same times give the same
 * answers. Not thread-safe: callers serialise access.
 *
 * The rules, as Anthropic documents them for current models:
 *   - limits are token buckets refilled continuously (limit / 60 per second), not
 *     reset at the minute; a bucket starts full;
 *   - input TPM counts uncached input only: input_tokens + cache_creation_input_tokens.
 *     Cache reads are free (`cache_reads_count` turns them back on for models where
 *     they count);
 *   - output TPM is charged max_tokens when the request starts and corrected to the
 *     real output_tokens when it ends (sl_provider_end);
 *   - a request is admitted only when every limited bucket holds its need; else 429
 *     with retry-after = whole seconds until it would fit;
 *   - the prompt cache holds a prefix (everything up to the last cache_control
 *     breakpoint), identified by a caller-given key, for `cache_ttl_s` (300) after its
 *     last use: every hit refreshes it. A miss, or a lapsed entry, bills the whole
 *     prefix as cache_creation_input_tokens. Prefixes shorter than
 *     `cache_min_tokens` are not cached at all and are billed as plain input.
 *     A call may also name earlier breakpoints (up to 4 in all, as the API allows):
 *     it then reads the longest prefix cached at any of its breakpoints, bills only
 *     the rest up to the last breakpoint as creation, and writes every breakpoint;
 *   - optional faults, all off by default: a share of calls refused as overloaded
 *     (Anthropic's 529 overloaded_error, OpenAI's 503) before anything is counted,
 *     and a share of streaming calls that break off mid-stream with an error event;
 *   - the token counting endpoint has its own requests-per-minute bucket
 *     (`count_tokens_rpm`), separate from and independent of the Messages limits.
 * OpenAI style adds a combined tokens-per-minute bucket (input + max_tokens), set
 * with `tokens_tpm`; its headers are x-ratelimit-*.
 */
#ifndef SLUICE_PROVIDER_H
#define SLUICE_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Which provider's wire shapes (headers, error bodies) to produce. */
typedef enum sl_provider_style {
    SL_PROVIDER_ANTHROPIC = 0,
    SL_PROVIDER_OPENAI,
} sl_provider_style_t;

/* The provider's limits and behaviour. sl_provider_config_init() fills the
 * defaults given in the comments. */
typedef struct sl_provider_config {
    int64_t input_tpm;          /* uncached input tokens per minute; 0 = not limited */
    int64_t output_tpm;         /* output tokens per minute; 0 = not limited */
    int64_t rpm;                /* requests per minute; 0 = not limited */
    int64_t tokens_tpm;         /* combined input + output per minute (OpenAI); 0 = not limited */
    double cache_ttl_s;         /* 300: an entry lives this long after its last use */
    double cache_ttl_1h_s;      /* 3600: the lifetime of a write marked ttl "1h" (billed
                                   as a 1-hour write) */
    int64_t cache_min_tokens;   /* 1024: shorter prefixes are not cached */
    bool cache_reads_count;     /* false: cache reads do not count against input TPM */
    double ttft_s;              /* 0.6: time to first token, before prefill */
    double prefill_tokens_per_s; /* 0 = prefill is free; else ttft grows with uncached input */
    double output_tokens_per_s; /* 60: streaming speed of the output */
    double latency_spread;      /* 0.2: latencies vary uniformly by +-20% */
    int64_t default_output_tokens; /* 1000: used when a call does not say (clamped to max_tokens) */
    double drift;               /* 1.0: provider token counts = caller's counts x drift */
    double outside_share;       /* 0: share (0..1) of every limit used by traffic outside the caller */
    double outside_rpm;         /* 0 = outside traffic comes as rpm x share requests per
                                   minute (6 per minute when rpm is not limited) */
    int64_t spend_cap_tokens;   /* 0 = no cap; once this many tokens were billed, every
                                   request is refused with a spend-cap 429 */
    uint64_t seed;              /* 1 */
    double overload_rate;       /* 0: share (0..1) of calls refused as overloaded before
                                   anything is counted (drawn from a stream of its own) */
    double stream_error_rate;   /* 0: share (0..1) of admitted streaming calls that break
                                   off mid-stream with an overloaded error */
    int64_t count_tokens_rpm;   /* token counting requests per minute; 0 = not limited */
    /* Long context (Anthropic, models with the 1M context window): a call whose prompt
     * (input + cached prefix, as the provider counts it) is above the threshold draws its
     * input and output tokens from buckets of their own instead of input_tpm and
     * output_tpm (its request still counts against rpm). 0 = no long-context limits. */
    int64_t long_context_threshold_tokens; /* 0 = off (Anthropic: 200000) */
    int64_t long_context_input_tpm;        /* 0 = not limited */
    int64_t long_context_output_tpm;       /* 0 = not limited */
    /* The acceleration limit (accel.c), off while accel_idle_s is 0: after this long with
     * no call (and from creation), uncached input tokens admitted in any 60 s may grow
     * at most by accel_factor per minute from max(accel_floor_tpm, the minute before). */
    double accel_idle_s;      /* 0 = no acceleration limit */
    double accel_factor;      /* 2: growth allowed per minute (> 1) */
    int64_t accel_floor_tpm;  /* 10000: the allowance a ramp starts from at least */
} sl_provider_config_t;

/* Fills `cfg` with the defaults above (all limits 0 = not limited). */
void sl_provider_config_init(sl_provider_config_t *cfg);

typedef struct sl_provider sl_provider_t;

/* Creates a provider whose buckets are full at `now_s`. Returns NULL when `cfg`
 * holds a value out of range (negative limit, drift <= 0, share outside [0, 1),
 * non-finite times; `err` (may be NULL, `errlen` bytes) then names the field and
 * the value) or when out of memory. */
sl_provider_t *sl_provider_new(const sl_provider_config_t *cfg, double now_s, char *err,
                               size_t errlen);

/* Frees the provider and its cache. NULL is allowed. */
void sl_provider_free(sl_provider_t *p);

/* The configuration in force (pointer valid while the provider lives). */
const sl_provider_config_t *sl_provider_config(const sl_provider_t *p);

/* Switches spend-cap mode on or off at once (the emulator's control endpoint).
 * While on, every request is refused with a spend-cap 429. */
void sl_provider_set_spend_capped(sl_provider_t *p, bool capped);

/* Tokens as the provider counts them: round(tokens x drift), 0 stays 0. */
int64_t sl_provider_count(const sl_provider_t *p, int64_t tokenizer_tokens);

/* The most cache_control breakpoints one call can name (Anthropic's limit). */
#define SL_PROVIDER_MAX_BREAKPOINTS 4

/* A breakpoint before the last one: the prompt up to it and its prefix's identity. */
typedef struct sl_provider_breakpoint {
    int64_t prefix_tokens; /* > 0, and below the next breakpoint's */
    uint64_t cache_key;
    bool ttl_1h;           /* marked ttl "1h": written as a 1-hour entry */
} sl_provider_breakpoint_t;

/* One model call, as the caller's tokenizer sees it. The prompt is split at the
 * last cache_control breakpoint: the prefix before it (cacheable) and the rest.
 * Fields added after output_tokens are optional: zero keeps the plain behaviour. */
typedef struct sl_provider_call {
    int64_t input_tokens;        /* >= 0: tokens after the last breakpoint (the whole
                                    prompt when there is none) */
    int64_t cached_prefix_tokens; /* >= 0: tokens up to the breakpoint; 0 = no breakpoint */
    uint64_t cache_key;          /* identifies the exact prefix (e.g. a hash of it) */
    int64_t max_tokens;          /* >= 1 */
    int64_t output_tokens;       /* what the model will write (clamped to max_tokens);
                                    < 0 = the provider picks around default_output_tokens */
    bool stream;                 /* a streaming answer: may break off (stream_error_rate) */
    size_t earlier_count;        /* breakpoints before the last one, 0..3 */
    sl_provider_breakpoint_t earlier[SL_PROVIDER_MAX_BREAKPOINTS - 1]; /* in prompt order */
    /* OpenAI's `n`: answers generated at once, 0..SL_PROVIDER_MAX_CHOICES (0 = 1). Each
     * is up to max_tokens, so the output (and combined) limit is charged max_tokens x
     * choices at the start, and every choice's output is billed. */
    int64_t choices;
    /* The last breakpoint is marked ttl "1h". A 1-hour breakpoint may not follow a
     * 5-minute one (the call is invalid: longer lifetimes come first). Writes are billed
     * as the provider documents for mixed lifetimes: the prompt from the longest hit up
     * to the last 1-hour breakpoint is a 1-hour write, the rest up to the last
     * breakpoint a 5-minute write. */
    bool ttl_1h;
} sl_provider_call_t;

#define SL_PROVIDER_MAX_CHOICES 128 /* OpenAI's documented bound on n */

/* Why a request was refused. */
typedef enum sl_provider_refusal {
    SL_PROVIDER_OK = 0,       /* admitted */
    SL_PROVIDER_RATE_LIMITED, /* 429 rate_limit_error with retry-after */
    SL_PROVIDER_SPEND_CAP,    /* 429 without retry-after: a spend/budget stop */
    SL_PROVIDER_INVALID,      /* the call itself is malformed (negative count, max_tokens < 1) */
    SL_PROVIDER_OVERLOADED,   /* 529 overloaded_error (OpenAI 503): nothing counted, no
                                 retry-after */
} sl_provider_refusal_t;

/* Which limit a rate-limited request ran into (the first, in this order, that
 * does not hold the need). */
typedef enum sl_provider_limit {
    SL_PROVIDER_LIMIT_NONE = 0,
    SL_PROVIDER_LIMIT_REQUESTS,
    SL_PROVIDER_LIMIT_INPUT,
    SL_PROVIDER_LIMIT_OUTPUT,
    SL_PROVIDER_LIMIT_TOKENS,
    SL_PROVIDER_LIMIT_COUNT_TOKENS, /* the token counting endpoint's own RPM */
    SL_PROVIDER_LIMIT_LONG_CONTEXT_INPUT,  /* long_context_input_tpm */
    SL_PROVIDER_LIMIT_LONG_CONTEXT_OUTPUT, /* long_context_output_tpm */
    SL_PROVIDER_LIMIT_ACCELERATION, /* usage grew faster than the acceleration limit allows */
} sl_provider_limit_t;

/* The answer to one call. */
typedef struct sl_provider_result {
    sl_provider_refusal_t refusal;  /* SL_PROVIDER_OK = admitted (HTTP 200) */
    int http_status;                /* 200, 429, 400 for SL_PROVIDER_INVALID, 529 for
                                       SL_PROVIDER_OVERLOADED (see sl_provider_http_status) */
    sl_provider_limit_t limit;      /* rate limited: the limit hit */
    double retry_after_s;           /* rate limited: whole seconds >= 1; else -1 */
    /* Usage exactly as the provider reports it (all 0 when refused). */
    int64_t input_tokens;                 /* uncached input after the breakpoint */
    int64_t cache_creation_input_tokens;  /* prefix written to the cache (a miss) */
    int64_t cache_read_input_tokens;      /* prefix read from the cache (a hit) */
    int64_t cache_creation_1h_input_tokens; /* the part of cache_creation_input_tokens
                                               written as 1-hour entries (the rest: 5m) */
    bool long_context;                    /* drew from the long-context buckets */
    int64_t output_tokens;                /* what the model writes per choice (before the
                                             error, for a stream that breaks off) */
    int64_t choices;                      /* >= 1: the output billed is output_tokens x
                                             choices (OpenAI's completion_tokens) */
    /* Timing of an admitted call, from the `now_s` of sl_provider_begin. */
    double ttft_s;                  /* first token after this long */
    double duration_s;              /* last token after this long (>= ttft_s) */
    /* For sl_provider_end: the output charged at the start (max_tokens x choices). */
    int64_t reserved_output_tokens;
    /* A streaming call that breaks off: after output_tokens (at duration_s) the stream
     * ends with an overloaded error event instead of its closing events. */
    bool stream_error;
} sl_provider_result_t;

/* Starts a call at `now_s`: refills the buckets, plays outside traffic up to now,
 * and admits or refuses the call. When admitted, takes 1 request, the uncached
 * input (input + cache creation; + cache reads when they count) and max_tokens of
 * output from the buckets, and hits or fills the cache. When refused, changes no
 * bucket and no cache entry (the 429 is counted). Always fills `out`. The caller
 * must later call sl_provider_end() with `out` for every admitted call. */
void sl_provider_begin(sl_provider_t *p, const sl_provider_call_t *call, double now_s,
                       sl_provider_result_t *out);

/* A token counting call at `now_s`: admitted (one request taken from the count_tokens
 * bucket when `count_tokens_rpm` is set) or refused with SL_PROVIDER_RATE_LIMITED,
 * limit SL_PROVIDER_LIMIT_COUNT_TOKENS and retry-after. Touches no Messages bucket and
 * no Messages counter. Always fills `out` (no usage; needs no sl_provider_end). */
void sl_provider_count_tokens(sl_provider_t *p, double now_s, sl_provider_result_t *out);

/* The HTTP status of `r` in `style`'s API: r->http_status, except that an overloaded
 * refusal is 503 for OpenAI ("The engine is currently overloaded"). */
int sl_provider_http_status(sl_provider_style_t style, const sl_provider_result_t *r);

/* Ends an admitted call at `now_s` (normally begin's now + duration_s): gives back
 * the output reserved but not written (max_tokens - output_tokens) to the output
 * and combined buckets, never above capacity. Refused results are ignored. */
void sl_provider_end(sl_provider_t *p, const sl_provider_result_t *r, double now_s);

/* Whether `cache_key` holds a live entry at `now_s` (does not refresh it). */
bool sl_provider_cache_warm(const sl_provider_t *p, uint64_t cache_key, double now_s);

/* Bucket levels after refilling to `now_s` (read-only view, for tests and /stats).
 * Levels of unlimited buckets are 0. */
typedef struct sl_provider_levels {
    double requests, input_tokens, output_tokens, tokens;
} sl_provider_levels_t;

void sl_provider_levels(sl_provider_t *p, double now_s, sl_provider_levels_t *out);

/* Counters since creation (GET /stats). Only the caller's calls; outside traffic
 * has its own counters. Tokens are the billed usage of admitted calls. */
typedef struct sl_provider_stats {
    uint64_t requests;           /* every sl_provider_begin */
    uint64_t admitted;
    uint64_t http_429;           /* rate limited + spend cap */
    uint64_t http_429_rate;
    uint64_t http_429_spend_cap;
    uint64_t invalid;
    uint64_t overloaded;         /* refused as overloaded (529 / 503) */
    uint64_t stream_errors;      /* admitted streams that broke off with an error event */
    uint64_t count_tokens;       /* token counting calls */
    uint64_t count_tokens_429;   /* ... refused by the count_tokens bucket */
    int64_t input_tokens;
    int64_t cache_creation_input_tokens;
    int64_t cache_read_input_tokens;
    int64_t cache_creation_1h_input_tokens; /* part of cache_creation_input_tokens */
    uint64_t long_context;       /* admitted calls that drew from the long-context buckets */
    int64_t output_tokens;
    uint64_t outside_requests;   /* outside traffic admitted */
    uint64_t outside_refused;    /* outside traffic that found no room */
    int64_t outside_input_tokens;
    int64_t outside_output_tokens;
    int64_t cache_entries;       /* live or lapsed entries still held */
    uint64_t http_429_acceleration; /* rate limited by the acceleration limit (in http_429_rate) */
} sl_provider_stats_t;

/* Changes the limits in force at `now_s` (the emulator's runtime knob): a bucket keeps
 * its level, clamped to a lower limit; a bucket limited only now starts full. Negative
 * values are refused (-1, nothing changed). */
int sl_provider_set_limits(sl_provider_t *p, int64_t input_tpm, int64_t output_tpm, int64_t rpm,
                           int64_t tokens_tpm, double now_s);

/* The acceleration allowance in force at `now_s` in uncached input tokens per minute,
 * or -1 when no ramp binds (limit off, or the ramp has caught up with the limits). */
double sl_provider_accel_allowance(const sl_provider_t *p, double now_s);

void sl_provider_stats(const sl_provider_t *p, sl_provider_stats_t *out);

/* One response header. Fixed buffers so formatting never allocates. */
typedef struct sl_provider_header {
    char name[48];
    char value[48];
} sl_provider_header_t;

/* The number of headers sl_provider_headers() can write at most. */
#define SL_PROVIDER_MAX_HEADERS 16

/* Formats the rate-limit headers the provider sends with the answer `r` (NULL for
 * an answer that is not a model call, e.g. count_tokens) at `now_s`, describing
 * the buckets after the call, into `out` (room for `cap` headers; give
 * SL_PROVIDER_MAX_HEADERS). Names are lower-case. Returns the number written.
 *   Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
 *     {limit,remaining,reset} for each limited bucket; token remaining values are
 *     rounded to the nearest thousand; reset is RFC 3339 UTC with seconds, the time
 *     the bucket would be full again; the tokens-* trio repeats the most restrictive
 *     of input/output (least remaining); plus retry-after (whole seconds) on a
 *     rate-limit 429 only.
 *   OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens} (tokens = the
 *     combined bucket, or input when there is none); reset is a duration such as
 *     "6m0s", "1s", "12ms"; plus retry-after on a rate-limit 429. */
size_t sl_provider_headers(sl_provider_t *p, sl_provider_style_t style,
                           const sl_provider_result_t *r, double now_s,
                           sl_provider_header_t *out, size_t cap);

/* Formats the error body of a refused answer in the provider's shape into `buf`
 * (`cap` bytes, NUL-terminated, truncated if short). Returns the length it needed
 * (like snprintf), 0 for an admitted answer.
 *   Anthropic rate limit: {"type":"error","error":{"type":"rate_limit_error",...}}
 *   Anthropic spend cap:  the same envelope and type, message "This request would
 *                         exceed your account's monthly spend limit..." as the API
 *                         answers a spent key with 429 (no retry-after); callers tell
 *                         it apart by the missing retry-after and the "spend limit"
 *                         wording. (A workspace limit set in the console is a 400
 *                         invalid_request_error instead; that is not modelled.)
 *   OpenAI rate limit:    {"error":{"message":...,"type":"requests"|"tokens",
 *                         "param":null,"code":"rate_limit_exceeded"}}
 *   OpenAI spend cap:     code and type "insufficient_quota".
 *   Invalid:              invalid_request_error (both shapes).
 *   Anthropic overloaded: {"type":"error","error":{"type":"overloaded_error",
 *                         "message":"Overloaded"}} (also the data of a stream's error event)
 *   OpenAI overloaded:    {"error":{"message":"The engine is currently overloaded, please
 *                         try again later","type":"server_error","param":null,"code":null}}
 *   Count tokens 429:     rate_limit_error / rate_limit_exceeded naming the token
 *                         counting requests-per-minute limit.
 *   Acceleration 429:     rate_limit_error / rate_limit_exceeded whose message says the
 *                         organisation's usage grew too fast and names the "acceleration
 *                         limit" (the phrase callers recognise it by). */
size_t sl_provider_error_body(const sl_provider_t *p, sl_provider_style_t style,
                              const sl_provider_result_t *r, char *buf, size_t cap);

/* Formats a Go-style duration as OpenAI sends it: "6m0s", "1s", "1.5s", "12ms",
 * "1h2m3s". Negative is treated as 0 ("0s"). Returns snprintf's length. */
int sl_provider_format_duration(double seconds, char *buf, size_t cap);

/* Formats Unix seconds as RFC 3339 UTC with whole seconds, "2026-11-30T03:39:42Z".
 * Returns snprintf's length. */
int sl_provider_format_rfc3339(double unix_s, char *buf, size_t cap);

/* The seeded PRNG, exported so the simulator and emulator draw from the same kind
 * of stream (splitmix64-style). State is one 64-bit word; any seed is fine. */
typedef struct sl_rng {
    uint64_t state;
} sl_rng_t;

void sl_rng_seed(sl_rng_t *r, uint64_t seed);
uint64_t sl_rng_next(sl_rng_t *r);
/* Uniform in [0, 1). */
double sl_rng_uniform(sl_rng_t *r);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_PROVIDER_H */
