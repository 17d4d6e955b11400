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
 * (docs/design.md "Long context" says why a pool and not a bucket set). */
#include "long_context.h"

#include "server.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUFFIX ":long_context"

/* `pools.NAME.long_context:` (read by config_pools.c, which also checks that
 * threshold_tokens is given). */
#define LC(key) {#key, SL_FIELD_INT, offsetof(sl_pool_upstream_t, long_context_##key), 0, \
                 9007199254740992.0, NULL, NULL}
static const sl_config_field_t long_context_fields[] = {LC(threshold_tokens), LC(input_tpm),
                                                        LC(output_tpm)};
#undef LC
const sl_config_table_t sl__long_context_table = {
    "pools.NAME.long_context", sizeof(sl_pool_upstream_t), long_context_fields,
    sizeof(long_context_fields) / sizeof(long_context_fields[0]), NULL, true};

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
        if (parent->key_group) {
            /* Not yet: a call is routed before its key is picked (issue 28 item 5 left). */
            snprintf(msg, n, "pools.%s.long_context: not supported on a pool with keys",
                     parent->key_group);
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
        /* The long-context limits replace the token limits; its requests are few and the
         * provider lists no RPM of their own for them: no request or combined limit. */
        np->config.input_tpm = parent->long_context_input_tpm;
        np->config.output_tpm = parent->long_context_output_tpm;
        np->config.rpm = 0;
        np->config.tokens_tpm = 0;
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

void sl__long_context_route(const sl_config_t *c, sl_request_t *r)
{
    const char *pool = r->pool && *r->pool ? r->pool : "default";
    const sl_pool_upstream_t *up = sl_config_pool_upstream(c, pool);
    if (!up || up->long_context_threshold_tokens <= 0) return;
    int64_t prompt = r->input_tokens + r->cached_tokens; /* each <= 2^53: no overflow */
    if (prompt <= up->long_context_threshold_tokens) return;
    /* The routed pool's name is owned by the configuration, which outlives the request. */
    char want[160];
    snprintf(want, sizeof want, "%s%s", pool, SUFFIX);
    for (size_t i = 0; i < c->settings.n_pools; i++)
        if (!strcmp(c->settings.pools[i].name, want)) {
            r->pool = c->settings.pools[i].name;
            return;
        }
}
