/* limits_api.h - the action limits' feature (limits_api.c, config_limits.c,
 * limits_feature.c): internal to src/server/limits/. */
#ifndef SL_LIMITS_API_H
#define SL_LIMITS_API_H

#include "server.h"

typedef struct sl_limits_api sl_limits_api_t;

/* limits_api.c: the /v1/limits routes over the action-limits library (docs/limits.md). */
/* (Re)builds the limit set from SL_LIMITS_CONF(&srv->config) and tells the bus its
 * names (SL_BUS_LIMITS). A limit whose configuration is the
 * same as the running one keeps its per-key state; a new or changed one starts fresh; a
 * removed one is gone (checks held on it are answered 404 when they re-check). Returns 0,
 * or -1 with `err` (out of memory; the running set stays). */
int sl__limits_apply(sl_server_t *srv, char *err, size_t errlen);
/* Forgets every action-limit key at rest (it would answer as a fresh key): housekeeping. */
void sl__limits_sweep(sl_server_t *srv);
/* Answers every check still held (503) and stops their timers. */
void sl__limits_shutdown(sl_server_t *srv);
void sl__limits_free(sl_server_t *srv);
/* GET /v1/limits (name NULL), GET /v1/limits/NAME, POST /v1/limits/NAME/{check,release,report}. */
void sl__handle_limits(sl_call_t *call, const char *name, const char *action, const char *query);
/* Appends the limits' Prometheus lines to `out`. */
void sl__limits_metrics_render(const sl_server_t *srv, struct evbuffer *out);

/* config_limits.c: the `limits:` section, kept in the configuration's limits slot as the
 * limits library's JSON (name -> fields; NULL: no section), read from YAML validated and
 * linked on a scratch set (errors as "FILE:LINE: limits.NAME.FIELD: ...", the field's
 * line; the slot unchanged); the section as the feature registers it (config.h). */
#define SL_LIMITS_CONF(c) ((json_t *)(c)->feature[SL_FEATURE_ID_limits])
extern const sl_config_section_t sl__limits_config;

/* limits_tiers.c: the tiers' limit multipliers. */
/* Builds into *out the limits JSON `limits` (may be NULL) plus, for every tier of `tiers`
 * with a limit_multiplier other than 1, a scaled copy `NAME@TIER` of each `per: agent`,
 * non-adaptive limit; *copies maps each copy's name to {of, tier, limit_multiplier}.
 * Returns 0, or -1 with `err` as "tiers.TIER.limit_multiplier: ..." naming the limit a
 * scaled figure takes out of range (both outputs are then the caller's to free). */
int sl__limits_with_tiers(const json_t *limits, const sl_token_config_t *tiers, json_t **out,
                          json_t **copies, char *err, size_t errlen);
/* The limit a call's check of `name` uses: its token's tier's copy of `name` when
 * `copies` has one (written into `buf`), else `name`. */
const char *sl__limits_tier_name(const sl_call_t *call, const json_t *copies, const char *name,
                                 char *buf, size_t buflen);

#endif /* SL_LIMITS_API_H */
