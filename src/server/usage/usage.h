/* usage.h - the usage feature's own state and functions, shared by its files (usage.c,
 * prices.c, rollup.c, config_usage.c, usage_feature.c). The rest of sluiced reaches it
 * through the feature table only (usage_feature.c): settles and upstream latencies come
 * over the bus. */
#ifndef SL_USAGE_H
#define SL_USAGE_H

#include "server.h"

typedef struct sl_usage_state sl_usage_state_t;

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

/* The feature's state: srv->slot[SL_FEATURE_ID_usage], NULL until the first call is counted. */
#define SL_USAGE_STATE(srv) ((sl_usage_state_t *)(srv)->slot[SL_FEATURE_ID_usage])

/* A call of `agent` in `pool` naming `model` (NULL: unknown) was settled with `s`'s
 * tokens: counted per agent, team and model, priced, and added to the day's rollup. */
void sl__usage_record(sl_server_t *srv, const char *agent, const char *pool, const char *model,
                      const sl_settle_t *s);
/* A proxied call of `pool` took `upstream_s` from sending to its last byte; a stream's
 * first output event came after `first_token_s` (< 0: not a stream, or none came). */
void sl__usage_latency(sl_server_t *srv, const char *pool, double upstream_s, double first_token_s);
/* The team `agent` is counted in: its caps.teams membership, else "default". */
const char *sl__usage_team(const sl_server_t *srv, const char *agent);
/* Appends the token, cost and latency series; agents by name only with `name_agents`. */
void sl__usage_metrics_render(sl_server_t *srv, struct evbuffer *out, bool name_agents);
/* GET /v1/usage?by=team|agent|model&since=... (admin). */
void sl__handle_usage(sl_call_t *call, const char *query);
void sl__usage_free(sl_server_t *srv);

/* config_usage.c: the `prices:` section, kept in the configuration's usage slot as
 * [{pattern, input, output, cache_read, cache_write}] (NULL: no section; errors as
 * `FILE:LINE: prices.PATTERN.KEY`, the slot unchanged); the section as the feature
 * registers it (config.h). */
#define SL_USAGE_PRICES(c) ((json_t *)(c)->feature[SL_FEATURE_ID_usage])
extern const sl_config_section_t sl__prices_config;

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
