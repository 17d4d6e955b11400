/* pacing.h - limits sluiced sets on its pools from outside the file: the provider's
 * published rate limits (`provider_limits:`) and the slow start (`pools.NAME.ramp`).
 *
 * Both lower what a pool may use below its configured figures, never above them: the
 * limits in force are, per bucket, the least of the configured figure (a ceiling), the
 * published one and the ramp's cap. sluiced writes them into its running
 * configuration (so the bounds on `*-limit` headers follow them: docs/server.md
 * `limits_from`) and hands that to the backend, as a reload does.
 */
#ifndef SL_PACING_H
#define SL_PACING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct sl_server;
struct evbuffer;

/* Per-pool state, kept across reloads by pool name. */
typedef struct sl_pace_pool {
    char name[129];
    int64_t configured[4]; /* the file's rpm, input_tpm, output_tpm, tokens_tpm */
    int64_t published[4];  /* the provider's, 0 = none published */
    bool have_published;
    char group[96];        /* the provider's group they came from */
    bool alert_changed;    /* provider_limits_changed raised, not yet cleared */
    /* The ramp (ramp.c). */
    bool learned;        /* met an acceleration 429 (turns `ramp: auto` on) */
    bool armed;          /* held at the ramp's start, waiting for the pool to go busy */
    bool ramping;        /* growing */
    double ramp_start_s; /* when it began growing */
    double ramp_base_tpm; /* its rate at ramp_start_s (the floor, or learned lower) */
    double floor_tpm;    /* where a ramp starts: the configured floor, lowered by learning */
    double idle_since_s; /* nothing in flight or queued since then; < 0 busy */
    int64_t cap_tpm;     /* the input cap in force, 0 = none */
} sl_pace_pool_t;

typedef struct sl_pacing sl_pacing_t;

/* The feature's state: srv->slot[SL_FEATURE_ID_provider_limits] (server.h), NULL before
 * sl__pacing_start. */
/* Reading the provider's published rate limits (the `provider_limits:` section,
 * provider_limits/): one admin key per provider, never in the file. */
typedef struct sl_published_source {
    char *key_env;  /* the variable holding the admin key, or NULL */
    char *key_file; /* or the file, or NULL */
    char *key;      /* the admin key read at load (secret), NULL when neither is set */
    char *url;      /* NULL: each pool's upstream_url */
    char *project;  /* OpenAI: the project whose limits are read */
} sl_published_source_t;

typedef struct sl_published_config {
    bool on;           /* the section is present */
    double refresh_s;  /* 3600: read again this often (and at start and on reload) */
    char **pools;      /* pools that adopt them; n_pools 0 = every proxied pool of a
                          provider configured here */
    size_t n_pools;
    char **group_pools;  /* `groups:` pool -> the Anthropic group type it draws from */
    char **group_types;  /* (model_group when not named: batch, token_count, files, ...) */
    size_t n_groups;
    sl_published_source_t anthropic, openai;
} sl_published_config_t;

/* The `provider_limits:` section of configuration `c` (config_published.c). */
#define SL_PUBLISHED(c) ((sl_published_config_t *)(c)->feature[SL_FEATURE_ID_provider_limits])

#define SL_PACING(srv) ((sl_pacing_t *)(srv)->slot[SL_FEATURE_ID_provider_limits])

/* config_published.c: the `provider_limits:` section as the feature registers it
 * (config.h): its struct in the configuration's slot (SL_PUBLISHED, off until a section is
 * read), its reader (errors as `FILE:LINE: provider_limits.KEY: ...`, a missing admin key
 * naming its variable or file) and table, and the pools' `ramp*` keys (offsets into
 * sl_pool_bounds_t) with their defaults. */
extern const sl_config_section_t sl__provider_limits_config;

/* At start, before the backend is first configured: reads the published limits of
 * every pool that adopts them (blocking, up to 10 s per provider; a missing, refused or
 * unreadable answer is an error naming the key's variable or file and the URL), arms the
 * pools whose ramp is on, and writes the limits in force into srv->config. Schedules
 * the hourly refresh and the ramp's tick on srv->base. Returns 0, or -1 with `err`. */
int sl__pacing_start(struct sl_server *srv, char *err, size_t errlen);
/* The core's tick (feature.h, every 0.25 s; `quarter` counts them): the ramp's tick every
 * 0.5 s, and the published limits read again once refresh_s passed since the last read. */
void sl__pacing_tick(struct sl_server *srv, unsigned quarter);

/* On reload, before the backend takes `next`: records next's pools' figures as the
 * configured ones and writes the limits in force into it. */
void sl__pacing_prepare(struct sl_server *srv, sl_config_t *next);

/* After a reload took effect: reads the published limits again (in the background). */
void sl__pacing_reloaded(struct sl_server *srv);

/* Frees the state and its timers (after the loop stopped). NULL state is allowed. */
void sl__pacing_free(struct sl_server *srv);

/* A proxied call of `pool` met an acceleration 429: the ramp restarts one minute's
 * growth lower and the pool's floor is lowered to it (the ramp is learnt). */
void sl__pacing_on_acceleration(struct sl_server *srv, const char *pool);

/* Appends sluice_alert{name="provider_limits_changed"} and the ramp gauges to `out`. */
void sl__pacing_metrics_render(const struct sl_server *srv, struct evbuffer *out);

/* The pool's state, NULL when the pool has none (pacing.c). */
sl_pace_pool_t *sl__pace_pool(sl_pacing_t *pc, const char *name);

/* Writes the limits in force of every pool into `c` and, when `push`, hands them to
 * the backend (pacing.c). */
void sl__pacing_apply(struct sl_server *srv, sl_config_t *c, bool push);

/* published.c: reads every adopting pool's published limits; `blocking` at start
 * (errors returned), else on the loop (errors logged). */
int sl__published_fetch(struct sl_server *srv, bool blocking, char *err, size_t errlen);
/* Frees the background client (reads still running are cancelled). */
void sl__published_free_client(void);

/* ramp.c: the ramp's cap for `pp` at `now_s` (0 = none) and its tick. */
void sl__ramp_tick(struct sl_server *srv, double now_s);
bool sl__ramp_active(const sl_pool_ramp_t *r, const sl_pace_pool_t *pp);
/* Holds `pp` at the ramp's start until it goes busy. */
void sl__ramp_arm(sl_pace_pool_t *pp, const sl_pool_ramp_t *r);

#endif
