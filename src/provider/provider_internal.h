/* provider_internal.h - the provider model's state, shared by its source files only. */
#ifndef SLUICE_PROVIDER_INTERNAL_H
#define SLUICE_PROVIDER_INTERNAL_H

#include "provider.h"

/* The largest token count accepted in a call (2^53, exact in a double). */
#define SL_PROVIDER_TOKENS_MAX ((int64_t)1 << 53)

/* The buckets; the long-context pair is used instead of INPUT and OUTPUT by a call
 * above long_context_threshold_tokens. */
enum {
    SL__PB_REQUESTS = 0,
    SL__PB_INPUT,
    SL__PB_OUTPUT,
    SL__PB_TOKENS,
    SL__PB_LC_INPUT,
    SL__PB_LC_OUTPUT,
    SL__PB_COUNT
};

typedef struct sl__cache_entry {
    uint64_t key;
    int64_t tokens;     /* the prefix's length: a different length is a different prefix */
    double expires_at;  /* last use + ttl */
    bool used;
} sl__cache_entry_t;

/* Open-addressing table of cache entries. Lapsed entries stay until the table is
 * rebuilt (on growth), so a lookup must check expires_at. */
typedef struct sl__cache {
    sl__cache_entry_t *slots;
    size_t cap;   /* a power of two */
    size_t count; /* used slots, lapsed included */
} sl__cache_t;

int sl__cache_init(sl__cache_t *c);
void sl__cache_free(sl__cache_t *c);
/* The live entry for (key, tokens) at `now`, or NULL. */
sl__cache_entry_t *sl__cache_find(sl__cache_t *c, uint64_t key, int64_t tokens, double now);
/* The live entry for key (any length) at `now`, or NULL. */
const sl__cache_entry_t *sl__cache_peek(const sl__cache_t *c, uint64_t key, double now);
/* Inserts or overwrites (key -> tokens, expires_at). Returns 0 or -1 (out of memory). */
int sl__cache_put(sl__cache_t *c, uint64_t key, int64_t tokens, double expires_at, double now);

/* The acceleration limit's state (accel.c): admitted uncached input per second over
 * the last minute, and the ramp in force. */
#define SL__ACCEL_SLOTS 60
typedef struct sl__accel {
    int64_t slot_tokens[SL__ACCEL_SLOTS]; /* tokens admitted in second slot_second[i] */
    int64_t slot_second[SL__ACCEL_SLOTS];
    double last_call_s;  /* the latest call (admitted or not); -INFINITY before any */
    bool ramping;        /* a ramp is in force */
    double ramp_start_s; /* when it began */
    double ramp_base;    /* its allowance at the start, tokens per minute */
} sl__accel_t;

/* Refuses (true) a call needing `tokens` uncached input at `now` beyond the allowance,
 * setting *retry_after_s; else false. Arms a ramp after an idle period first. */
bool sl__accel_refuses(sl_provider_t *p, int64_t tokens, double now, double *retry_after_s);
/* Records `tokens` admitted at `now`. */
void sl__accel_admit(sl_provider_t *p, int64_t tokens, double now);
void sl__accel_init(sl__accel_t *a);

struct sl_provider {
    sl_provider_config_t cfg;
    double now_s;                     /* latest time seen; buckets are refilled to it */
    int64_t limit[SL__PB_COUNT];      /* 0 = not limited */
    double level[SL__PB_COUNT];
    bool spend_capped;
    sl_rng_t rng;                     /* latency and output length */
    sl_rng_t outside_rng;             /* outside traffic arrivals */
    sl_rng_t fault_rng;               /* overloads and broken streams (drawn only when on) */
    double count_tokens_level;        /* the token counting bucket (count_tokens_rpm > 0) */
    double outside_next_s;
    sl__cache_t cache;
    sl_provider_stats_t stats;
    sl__accel_t accel;
};

/* Plays outside traffic and refills the buckets up to `now_s` (no-op for the past). */
void sl__provider_advance(sl_provider_t *p, double now_s);

#endif
