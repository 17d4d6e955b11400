/* usage.h - the usage feature's own state, shared by its files (usage.c, prices.c,
 * rollup.c); the hooks other parts of sluiced call are in server.h ("usage/"). */
#ifndef SL_USAGE_H
#define SL_USAGE_H

#include "server.h"

/* What calls used and cost. */
typedef struct sl_usage_counts {
    int64_t input_tokens; /* uncached input */
    int64_t output_tokens;
    int64_t cache_read_tokens;
    int64_t cache_write_tokens;
    double cost_usd;
    uint64_t calls;
} sl_usage_counts_t;

/* Prices in USD per million tokens. */
typedef struct sl_price {
    double input, output, cache_read, cache_write;
} sl_price_t;

/* One rollup bucket: counts per "agent \x1f team \x1f model" starting at `start_s`. */
typedef struct sl_usage_bucket {
    double start_s; /* Unix time; 0: unused */
    sl_namemap_t keys; /* -> sl_usage_counts_t */
} sl_usage_bucket_t;

#define SL_USAGE_MINUTES 60         /* one-minute buckets: the last hour */
#define SL_USAGE_HOURS 24           /* one-hour buckets: the last day */
#define SL_USAGE_MAX_KEYS 4096      /* per bucket; more agents are counted as "other" */
#define SL_USAGE_MAX_AGENTS 100000  /* agents with their own totals; more: "other" */
#define SL_USAGE_MAX_MODELS 64      /* model names kept; more: "other" */
#define SL_USAGE_MAX_TEAMS 1024     /* team names kept; more: "other" */

typedef struct pool_latency pool_latency_t;

struct sl_usage_state {
    sl_namemap_t by_agent; /* -> sl_usage_counts_t, since the start */
    sl_namemap_t by_team;
    sl_namemap_t by_model;
    sl_usage_bucket_t minutes[SL_USAGE_MINUTES];
    sl_usage_bucket_t hours[SL_USAGE_HOURS];
    double started_s; /* Unix time the first call was counted */
    pool_latency_t *pools;
    size_t n_pools;
};

/* prices.c: the price of `model` (NULL or "": none) used in `pool`: the configuration's
 * `prices:` (first pattern that matches), then prices.def, then the pool's
 * price_input_per_mtok / price_output_per_mtok (cache reads and writes at the input
 * price; 0 when the pool names none). */
sl_price_t sl__usage_price(const sl_server_t *srv, const char *model, const char *pool);
/* The cost in USD of `c`'s tokens at `p`. */
double sl__usage_cost(const sl_price_t *p, const sl_usage_counts_t *c);

/* rollup.c: adds `c` to the current minute's and hour's buckets under `key` at `now_s`. */
void sl__usage_rollup_add(sl_usage_state_t *u, const char *key, const sl_usage_counts_t *c,
                          double now_s);
void sl__usage_rollup_free(sl_usage_state_t *u);

/* usage.c: adds `c` to `into`. */
void sl__usage_counts_add(sl_usage_counts_t *into, const sl_usage_counts_t *c);
/* The wall clock, Unix seconds. */
double sl__usage_now_s(void);

#endif /* SL_USAGE_H */
