/* config_proxy.c - the `proxy:` YAML section: the proxy's limits as one field table.
 *
 * Read by the core's table reader (config_table.c) through the feature table, so a bad
 * value fails as every other key does: `FILE:LINE: proxy.KEY: 'VALUE' must be ...`.
 * docs/proxy.md documents each row; test_config_keys checks it does. */
#include "proxy.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const estimator_names[] = {"tokenizer", "bytes", NULL}; /* false, true */

#define PX sl_proxy_config_t
static const sl_config_field_t proxy_fields[] = {
    SL_ROW_SIZE(PX, body_limit_bytes, 1024, 1073741824),
    SL_ROW_SIZE(PX, max_headers, 8, 10000),
    SL_ROW_NUMBER(PX, idle_timeout_s, 0.01, 86400),
    SL_ROW_NUMBER(PX, connect_timeout_s, 0.01, 86400),
    SL_ROW_NUMBER(PX, ping_interval_s, 0.01, 86400),
    SL_ROW_NUMBER(PX, max_hold_s, 0.1, 86400),
    SL_ROW_STRING(PX, default_pool),
    SL_ROW_FLAG(PX, allow_unauthenticated),
    SL_ROW_FLAG(PX, continue_capped),
    {"estimator", SL_FIELD_BOOL, offsetof(PX, estimate_bytes), 0, 0, estimator_names, NULL},
    SL_ROW_FLAG(PX, probe),
};
#undef PX
static const sl_config_table_t proxy_table =
    SL_CONFIG_TABLE("proxy", sl_proxy_config_t, proxy_fields);

static const sl_proxy_config_t proxy_defaults = {
    .body_limit_bytes = 32u * 1024 * 1024,
    .max_headers = 100,
    .idle_timeout_s = 300,
    .connect_timeout_s = 10,
    .ping_interval_s = 5,
    .max_hold_s = 540,
    .probe = true,
};

static int proxy_config_defaults(sl_config_t *c)
{
    sl_proxy_config_t *px = malloc(sizeof(*px));
    if (!px) return -1;
    *px = proxy_defaults;
    c->feature[SL_FEATURE_ID_proxy] = px;
    return 0;
}

static int proxy_config_parse(struct yaml_document_s *doc, struct yaml_node_s *section,
                              const char *path, sl_config_t *c, char *err, size_t errlen)
{
    return sl__config_read_table(doc, section, &proxy_table, path, SL_PROXY_CONF(c), err,
                                 errlen);
}

static int proxy_config_check(const sl_config_t *c, const char *path, char *err, size_t errlen)
{
    if (!SL_PROXY_CONF(c)->default_pool) return 0;
    const sl_pool_upstream_t *up = sl_config_pool_upstream(c, SL_PROXY_CONF(c)->default_pool);
    if (up && up->url) return 0;
    snprintf(err, errlen, "%s: proxy.default_pool: '%.128s' is not a pool with an upstream_url",
             path, SL_PROXY_CONF(c)->default_pool);
    return -1;
}

static void proxy_config_clear(sl_config_t *c)
{
    sl_proxy_config_t *px = SL_PROXY_CONF(c);
    if (px) free(px->default_pool);
    free(px);
    c->feature[SL_FEATURE_ID_proxy] = NULL;
}

const sl_config_section_t sl__proxy_config = {.key = "proxy", .defaults = proxy_config_defaults,
    .parse = proxy_config_parse, .clear = proxy_config_clear, .table = &proxy_table,
    .check = proxy_config_check};
