/* long_context.c - requests above a provider's long-context threshold lease from limits of
 * their own.
 *
 * Anthropic answers requests above 200k input tokens (models with the 1M context window)
 * from separate long-context rate limits (input and output tokens per minute). A pool
 * that says so,
 *     pools: {sonnet: {..., long_context: {threshold_tokens: 200000,
 *                                          input_tpm: 1000000, output_tpm: 200000}}}
 * gets a second pool "sonnet:long_context" with those limits (and the parent's other
 * settings), and every call of `sonnet` whose estimated prompt (input + cached tokens)
 * is above the threshold leases from it instead: the lease API by its input_tokens +
 * cached_tokens, the proxy by its own count. The routed pool is an ordinary engine pool,
 * so both backends, the queue, metrics and the dashboard treat it like any other
 * (docs/design.md "Long context" says why a pool and not a bucket set), but for one rule:
 * its requests are its parent's (request_parent). A pool with `keys:` gives each key
 * "POOL:KEY" its own "POOL:KEY:long_context" (a workspace's long-context limits are its
 * own, like its standard ones), and keys.c routes a long call to the picked key's; those
 * pools are one queue over the keys of their own, as the keys are. */
#include "long_context.h"

#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUFFIX ":long_context"
#define LONG_KEY_GROUP ((int64_t)1 << 40) /* added to the keys' key_group: their long pools' */

static int field_i64(const char *pool, const char *field, const char *text, int64_t *out,
                     char *msg, size_t n)
{
    char *end;
    long long v = text ? strtoll(text, &end, 10) : 0;
    if (!text || !*text || *end || v < 0 || v > SL_TOKENS_MAX) {
        snprintf(msg, n, "pools.%s.long_context.%s: '%s' must be a whole number >= 0", pool,
                 field, text ? text : "?");
        return -1;
    }
    *out = v;
    return 0;
}

int sl__long_context_parse(yaml_document_t *doc, yaml_node_t *map, const char *pool,
                           sl_pool_upstream_t *up, char *msg, size_t n)
{
    if (!map || map->type != YAML_MAPPING_NODE) {
        snprintf(msg, n, "pools.%s.long_context: expected a mapping of keys to values", pool);
        return -1;
    }
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = yaml_document_get_node(doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(doc, pr->value);
        const char *key = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "?";
        const char *val = v && v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
        int64_t *dst = !strcmp(key, "threshold_tokens") ? &up->long_context_threshold_tokens
                       : !strcmp(key, "input_tpm")      ? &up->long_context_input_tpm
                       : !strcmp(key, "output_tpm")     ? &up->long_context_output_tpm
                                                        : NULL;
        if (!dst) {
            snprintf(msg, n,
                     "pools.%s.long_context: unknown key '%s' (threshold_tokens, input_tpm, "
                     "output_tpm)",
                     pool, key);
            return -1;
        }
        if (field_i64(pool, key, val, dst, msg, n) < 0) return -1;
    }
    if (up->long_context_threshold_tokens <= 0) {
        snprintf(msg, n, "pools.%s.long_context.threshold_tokens: must be given and above 0", pool);
        return -1;
    }
    return 0;
}

void sl__long_context_inherit(sl_pool_upstream_t *key, const sl_pool_upstream_t *pool)
{
    key->long_context_threshold_tokens = pool->long_context_threshold_tokens;
    key->long_context_input_tpm = pool->long_context_input_tpm;
    key->long_context_output_tpm = pool->long_context_output_tpm;
}

int sl__long_context_expand(sl_config_t *c, char *msg, size_t n)
{
    size_t have = c->settings.n_pools, extra = 0;
    for (size_t i = 0; i < have; i++)
        if (c->upstreams[i].long_context_threshold_tokens > 0) extra++;
    if (extra == 0) return 0;
    size_t total = have + extra;
    sl_named_pool_t *pools = realloc(c->settings.pools, total * sizeof *pools);
    if (pools) c->settings.pools = pools;
    int *lines = realloc(c->pool_lines, total * sizeof *lines);
    if (lines) c->pool_lines = lines;
    sl_pool_upstream_t *ups = realloc(c->upstreams, total * sizeof *ups);
    if (ups) c->upstreams = ups;
    sl_pool_bounds_t *bounds = realloc(c->bounds, total * sizeof *bounds);
    if (bounds) c->bounds = bounds;
    if (!pools || !lines || !ups || !bounds) goto oom;
    for (size_t i = 0; i < have; i++) {
        const sl_pool_upstream_t *parent = &c->upstreams[i];
        if (parent->long_context_threshold_tokens <= 0) continue;
        size_t k = c->settings.n_pools;
        const char *name = c->settings.pools[i].name;
        if (strlen(name) + strlen(SUFFIX) > 128) {
            snprintf(msg, n, "pools.%s.long_context: '%s%s' is longer than a pool name's 128",
                     parent->key_group ? parent->key_group : name, name, SUFFIX);
            return -1;
        }
        char *sub = malloc(strlen(name) + sizeof SUFFIX);
        if (!sub) goto oom;
        sprintf(sub, "%s%s", name, SUFFIX);
        for (size_t j = 0; j < k; j++)
            if (!strcmp(c->settings.pools[j].name, sub)) {
                snprintf(msg, n, "pools.%s.long_context: a pool named '%s' exists already", name,
                         sub);
                free(sub);
                return -1;
            }
        sl_named_pool_t *np = &c->settings.pools[k];
        np->name = sub;
        np->config = c->settings.pools[i].config;
        /* The long-context limits replace the token limits; the provider lists no RPM of
         * their own: its calls count against the parent's RPM, whose request bucket it
         * shares (request_parent, src/engine/reqparent.c). No combined limit. */
        np->config.input_tpm = parent->long_context_input_tpm;
        np->config.output_tpm = parent->long_context_output_tpm;
        np->config.rpm = 0;
        np->config.request_parent = true;
        np->config.tokens_tpm = 0;
        /* A key's: one queue over the keys' long-context pools, a key group of their own
         * (the engine's keyqueue.c; sluice.lua's KQ finds them as "POOL:*:long_context"). */
        int64_t group = c->settings.pools[i].config.key_group;
        np->config.key_group = group ? group + LONG_KEY_GROUP : 0;
        c->pool_lines[k] = c->pool_lines[i];
        memset(&c->upstreams[k], 0, sizeof c->upstreams[k]);
        c->upstreams[k].api = parent->api;
        c->upstreams[k].long_context_of = true;
        c->bounds[k] = c->bounds[i];
        c->settings.n_pools++;
    }
    return 0;
oom:
    snprintf(msg, n, "pools: out of memory");
    return -1;
}

bool sl__long_context_is_long(const sl_config_t *c, const sl_request_t *r)
{
    const char *pool = r->pool && *r->pool ? r->pool : "default";
    const sl_pool_upstream_t *up = sl_config_pool_upstream(c, pool); /* keys: the first's */
    int64_t prompt = r->input_tokens + r->cached_tokens; /* each <= 2^53: no overflow */
    return up && up->long_context_threshold_tokens > 0 &&
           prompt > up->long_context_threshold_tokens;
}

const char *sl__long_context_pool(const sl_config_t *c, const char *pool)
{
    char want[160];
    if (!pool || strlen(pool) + strlen(SUFFIX) >= sizeof want) return NULL;
    snprintf(want, sizeof want, "%s%s", pool, SUFFIX);
    for (size_t i = 0; i < c->settings.n_pools; i++)
        if (!strcmp(c->settings.pools[i].name, want)) return c->settings.pools[i].name;
    return NULL;
}

const char *sl__long_context_parent(const sl_config_t *c, const char *pool)
{
    const sl_pool_upstream_t *up = pool ? sl_config_pool_upstream(c, pool) : NULL;
    size_t n = pool ? strlen(pool) : 0, s = strlen(SUFFIX);
    if (!up || !up->long_context_of || n <= s) return pool;
    for (size_t i = 0; i < c->settings.n_pools; i++) {
        const char *name = c->settings.pools[i].name;
        if (strlen(name) == n - s && !strncmp(name, pool, n - s)) return name;
    }
    return pool;
}

void sl__long_context_route(const sl_config_t *c, sl_request_t *r)
{
    const char *pool = r->pool && *r->pool ? r->pool : "default";
    const char *lc = sl__long_context_is_long(c, r) ? sl__long_context_pool(c, pool) : NULL;
    /* The routed pool's name is owned by the configuration, which outlives the request. */
    if (lc) r->pool = lc;
}
