/* config_pools.c - the `pools:` section as field tables: a pool's keys, a `keys:` entry's and
 * `long_context` (long_context.c).
 *
 * A pool's mapping fills three structs: the engine's sl_pool_config_t, the proxy's
 * sl_pool_upstream_t and the report bounds sl_pool_bounds_t. One table reads all three, its
 * offsets into `pool_read_t` (the three side by side), with config_table.c's reader, so a
 * bad pool key fails like every other key: `FILE:LINE: pools.NAME.KEY: 'VALUE' must be ...`.
 * A key of every pool that a feature owns (`ramp`, ...) is read through the feature table
 * (the table's `other`). A key entry of a pool with `keys:` (design.md, "A pool of several
 * keys") reads into the same struct through a table made of the rows it shares with a
 * pool (its limits and its secret) plus `name` and `headers`: one row per key, written once.
 */
#include "config.h"
#include "feature.h"
#include "long_context.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

/* What one pool's mapping (or a key entry's) is read into. */
typedef struct pool_read {
    sl_pool_config_t config;
    sl_pool_upstream_t up;
    sl_pool_bounds_t bounds;
    yaml_node_t *keys; /* the pool's `keys:` list, expanded once the pool is read */
    char *key_name;    /* a key entry's `name` */
} pool_read_t;

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

void sl__config_upstream_clear(sl_pool_upstream_t *up)
{
    if (up->api_key) {
        /* The key is a secret: do not leave it in freed memory. */
        volatile char *k = up->api_key;
        for (size_t i = 0; k[i]; i++)
            k[i] = '\0';
    }
    free(up->url);
    free(up->api_key);
    free(up->api_key_env);
    free(up->api_key_file);
    free(up->ca_file);
    for (size_t i = 0; i < up->n_models; i++)
        free(up->models[i]);
    free(up->models);
    free(up->key_group);
    free(up->key_name);
    for (size_t i = 0; i < up->n_headers; i++)
        free(up->headers[i]);
    free(up->headers);
    memset(up, 0, sizeof(*up));
}

void sl__config_bounds_defaults(sl_pool_bounds_t *b)
{
    b->max_settle_tokens = 0;
    b->max_retry_after_s = 300;
    b->max_report_pool_block_s = 60;
    b->max_resync_factor = 2;
    b->limits_from_provider = false;
    sl__features_pool_defaults(b);
}

/* ---- the readers of the rows that are more than a number, a flag or a string ----------- */

static int read_provider(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = scalar(v);
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    sl_upstream_api_t *api = field;
    if (!strcmp(s, "anthropic"))
        *api = SL_UPSTREAM_ANTHROPIC;
    else if (!strcmp(s, "openai"))
        *api = SL_UPSTREAM_OPENAI;
    else
        return sl__config_fail(x, v, "unknown provider '%.64s' (known: anthropic, openai)", s);
    return 0;
}

static int read_models(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    sl_pool_upstream_t *up =
        (sl_pool_upstream_t *)(void *)((char *)field - offsetof(sl_pool_upstream_t, models));
    if (sl__config_string_list(x, v, &up->models, &up->n_models) < 0) return -1;
    for (size_t i = 0; i < up->n_models; i++)
        if (!*up->models[i] || strlen(up->models[i]) > 128)
            return sl__config_fail(x, v, "pattern '%.140s' must be 1-128 characters",
                                   up->models[i]);
    return 0;
}

static int refuse_api_key(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    return sl__config_fail(x, v, "keys are not written in the configuration; use api_key_env (a "
                                 "variable name) or api_key_file (a file holding the key)");
}

/* `long_context:` through its own table, into the pool's upstream (long_context.c). */
static int read_long_context(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    sl_pool_upstream_t *up = field;
    if (sl__config_read_fields(x, v, &sl__long_context_table, x->key, up) < 0) return -1;
    if (up->long_context_threshold_tokens <= 0) {
        sl_config_ctx_t tx = *x;
        char key[400];
        snprintf(key, sizeof key, "%s.threshold_tokens", x->key);
        tx.key = key;
        return sl__config_fail(&tx, v, "must be given and above 0");
    }
    return 0;
}

/* `keys:`: kept, and expanded into one pool per entry once the pool is read. */
static int read_keys(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    if (!v || v->type != YAML_SEQUENCE_NODE ||
        v->data.sequence.items.top == v->data.sequence.items.start)
        return sl__config_fail(x, v, "expected a list of at least one key");
    *(yaml_node_t **)field = v;
    return 0;
}

/* A key entry's `name`: 1-64 of [A-Za-z0-9._-]. */
static int read_key_name(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = scalar(v);
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    bool ok = *s && strlen(s) <= 64;
    for (const char *c = s; ok && *c; c++)
        ok = isalnum((unsigned char)*c) || *c == '.' || *c == '_' || *c == '-';
    if (!ok) return sl__config_fail(x, v, "'%.80s' must be 1-64 of [A-Za-z0-9._-]", s);
    char *copy = strdup(s);
    if (!copy) return sl__config_fail(x, v, "out of memory");
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
}

/* A key entry's `headers:` mapping (e.g. OpenAI-Project, anthropic-workspace) into "Name:
 * value" lines; the provider key's own header and the framing headers are not for it. */
static int read_key_headers(sl_config_ctx_t *x, yaml_node_t *map, void *field)
{
    sl_pool_upstream_t *up =
        (sl_pool_upstream_t *)(void *)((char *)field - offsetof(sl_pool_upstream_t, headers));
    static const char *const reserved[] = {"authorization", "x-api-key", "host", "content-length",
                                           "transfer-encoding"};
    if (!map || map->type != YAML_MAPPING_NODE)
        return sl__config_fail(x, map, "expected a mapping of keys to values");
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    if (up->headers || !(up->headers = calloc(n ? n : 1, sizeof(char *))))
        return sl__config_fail(x, map, up->headers ? "given twice" : "out of memory");
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *vn = yaml_document_get_node(x->doc, pr->value);
        const char *name = scalar(yaml_document_get_node(x->doc, pr->key)), *value = scalar(vn);
        if (!value) return sl__config_fail(x, vn, "expected a single value, not a list or a mapping");
        bool ok = name && *name && strlen(name) <= 64;
        for (const char *c = name; ok && *c; c++)
            ok = isalnum((unsigned char)*c) || *c == '-' || *c == '_';
        if (!ok)
            return sl__config_fail(x, map, "header name '%.80s' must be 1-64 of [A-Za-z0-9_-]",
                                   name ? name : "?");
        for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
            if (!strcasecmp(name, reserved[i]))
                return sl__config_fail(x, map, "header '%s' is set by the proxy, not by a key",
                                       name);
        if (*value && !sl__config_secret_ok(value))
            return sl__config_fail(x, vn, "the value of '%s' must be one printable line", name);
        size_t len = strlen(name) + strlen(value) + 3;
        if (!(up->headers[up->n_headers] = malloc(len)))
            return sl__config_fail(x, map, "out of memory");
        snprintf(up->headers[up->n_headers++], len, "%s: %s", name, value);
    }
    return 0;
}

/* A key of every pool that a feature owns (features.def: `ramp`, ...). */
static int read_feature_pool_key(sl_config_ctx_t *x, const char *key, yaml_node_t *k,
                                 yaml_node_t *v, void *out)
{
    (void)k;
    return sl__features_pool_key(x, key, v, &((pool_read_t *)out)->bounds);
}

/* ---- the tables ------------------------------------------------------------------------- */

#define TOKENS_MAX 9007199254740992.0 /* SL_TOKENS_MAX, 2^53 */
#define CFG(key, type, min, max)                                                                   \
    {#key, type, offsetof(pool_read_t, config.key), min, max, NULL, NULL}
#define COUNT(key) CFG(key, SL_FIELD_INT, 0, TOKENS_MAX)   /* tokens, requests: 0 to 2^53 */
#define AMOUNT(key) CFG(key, SL_FIELD_NUMBER, 0, INFINITY) /* seconds, factors, prices: >= 0 */
#define FLAG(key) CFG(key, SL_FIELD_BOOL, 0, 0)
#define UP(key, member, type, fn) {#key, type, offsetof(pool_read_t, up.member), 0, 0, NULL, fn}
#define BOUND(key, type, min, max)                                                                 \
    {#key, type, offsetof(pool_read_t, bounds.key), min, max, NULL, NULL}
/* The rows a key entry shares with its pool: its own limits, and where its secret is. */
#define LIMIT_ROWS COUNT(input_tpm), COUNT(output_tpm), COUNT(rpm), COUNT(tokens_tpm), COUNT(concurrency)
#define SECRET_ROWS                                                                                \
    UP(upstream_url, url, SL_FIELD_CUSTOM, sl__config_read_url),                                   \
        UP(api_key_env, api_key_env, SL_FIELD_STRING, NULL),                                       \
        UP(api_key_file, api_key_file, SL_FIELD_STRING, NULL),                                     \
        {"api_key", SL_FIELD_CUSTOM, 0, 0, 0, NULL, refuse_api_key}

static const char *const output_reserve_names[] = {"max_tokens", "learned", NULL}; /* false, true */
static const char *const limits_from_names[] = {"config", "provider", NULL};       /* false, true */

static const sl_config_field_t pool_fields[] = {
    LIMIT_ROWS,
    AMOUNT(margin_start),
    AMOUNT(margin_floor),
    AMOUNT(margin_step_down),
    AMOUNT(margin_step_up),
    AMOUNT(margin_max),
    AMOUNT(recover_every_s),
    AMOUNT(margin_floor_alert_s),
    AMOUNT(lease_ttl_s),
    AMOUNT(max_lease_ttl_s),
    AMOUNT(max_queue_wait_s),
    AMOUNT(cache_ttl_s),
    FLAG(cache_reads_count),
    COUNT(cache_bump_min_tokens),
    AMOUNT(cache_bump),
    AMOUNT(estimate_error_alert),
    CFG(estimate_error_window, SL_FIELD_INT32, 0, 1000000),
    AMOUNT(claim_timeout_s),
    AMOUNT(ticket_idle_s),
    AMOUNT(price_input_per_mtok),
    AMOUNT(price_output_per_mtok),
    AMOUNT(spend_cap_reset_s),
    AMOUNT(lease_duration_prior_s),
    AMOUNT(send_window_s),
    FLAG(backfill),
    FLAG(working_set),
    {"output_reserve", SL_FIELD_BOOL, offsetof(pool_read_t, config.output_reserve_learned), 0, 0,
     output_reserve_names, NULL},
    /* The provider behind the pool (the proxy). */
    SECRET_ROWS,
    UP(provider, api, SL_FIELD_CUSTOM, read_provider),
    UP(ca_file, ca_file, SL_FIELD_STRING, NULL),
    UP(models, models, SL_FIELD_CUSTOM, read_models),
    UP(batch, batch, SL_FIELD_BOOL, NULL),
    {"max_batch_requests", SL_FIELD_INT, offsetof(pool_read_t, up.max_batch_requests), 1,
     100000000, NULL, NULL},
    {"long_context", SL_FIELD_CUSTOM, offsetof(pool_read_t, up), 0, 0, NULL, read_long_context},
    {"keys", SL_FIELD_CUSTOM, offsetof(pool_read_t, keys), 0, 0, NULL, read_keys},
    /* What a settle report may do to the pool (sl_pool_bounds_t, report_bounds.c). */
    BOUND(max_settle_tokens, SL_FIELD_INT, 1, TOKENS_MAX),
    BOUND(max_retry_after_s, SL_FIELD_NUMBER, 1, 86400),
    {"limits_from", SL_FIELD_BOOL, offsetof(pool_read_t, bounds.limits_from_provider), 0, 0,
     limits_from_names, NULL},
    BOUND(max_report_pool_block_s, SL_FIELD_NUMBER, 0, 86400),
    BOUND(max_resync_factor, SL_FIELD_NUMBER, 1, 1000),
};
const sl_config_table_t sl__pool_table = {"pools.NAME", sizeof(pool_read_t), pool_fields,
                                          sizeof(pool_fields) / sizeof(pool_fields[0]),
                                          read_feature_pool_key, false};

/* A key sets its name, its own limits, its secret and URL, and its headers; the rest is the
 * pool's, so keys differ by workspace or project, never by model family. */
static const sl_config_field_t key_fields[] = {
    {"name", SL_FIELD_CUSTOM, offsetof(pool_read_t, key_name), 0, 0, NULL, read_key_name},
    LIMIT_ROWS,
    SECRET_ROWS,
    UP(headers, headers, SL_FIELD_CUSTOM, read_key_headers),
};
const sl_config_table_t sl__pool_key_table = {"pools.NAME.keys[]", sizeof(pool_read_t),
                                              key_fields,
                                              sizeof(key_fields) / sizeof(key_fields[0]), NULL,
                                              true};
#undef SECRET_ROWS
#undef LIMIT_ROWS
#undef BOUND
#undef UP
#undef AMOUNT
#undef FLAG
#undef COUNT
#undef CFG

/* ---- a pool read whole: its upstream checked, its key read ------------------------------- */

/* Checks a pool's upstream keys together and reads its provider key (`name`: the pool's,
 * "GROUP:KEY" for a key entry's; x->key the pool's or entry's section). */
static int finish_upstream(const sl_config_ctx_t *x, const char *name, yaml_node_t *map,
                           sl_pool_upstream_t *up)
{
    char key[320], what[400];
    snprintf(key, sizeof(key), "pools.%s", name);
    sl_config_ctx_t px = *x;
    px.key = key;
    if (!up->url) {
        if (up->api || up->api_key_env || up->api_key_file || up->ca_file)
            return sl__config_fail(&px, map, "provider, api_key_env, api_key_file and ca_file "
                                             "need upstream_url");
        return 0;
    }
    if (!up->api)
        return sl__config_fail(&px, map, "upstream_url needs provider: anthropic or openai");
    if (up->max_batch_requests && !up->batch)
        return sl__config_fail(&px, map, "max_batch_requests needs batch: true");
    if (!up->max_batch_requests) up->max_batch_requests = 100000; /* Anthropic's queue bound */
    if (!up->api_key_env == !up->api_key_file)
        return sl__config_fail(&px, map,
                               "upstream_url needs exactly one of api_key_env or api_key_file");
    if (sl__config_secret(up->api_key_env, up->api_key_file, "api_key_env", "api_key_file",
                          &up->api_key, what, sizeof what) < 0)
        return sl__config_fail(&px, map, "%s", what);
    if (up->ca_file) {
        FILE *f = fopen(up->ca_file, "rb");
        if (!f) {
            snprintf(what, sizeof what, "%.200s", up->ca_file);
            return sl__config_fail(&px, map, "ca_file: cannot read %s", what);
        }
        fclose(f);
    }
    return 0;
}

/* Reads pool `name`'s mapping into `r` (its defaults first). */
static int read_pool(const sl_config_ctx_t *x, const char *name, yaml_node_t *map, pool_read_t *r)
{
    char section[320];
    snprintf(section, sizeof(section), "pools.%s", name);
    sl_config_ctx_t px = *x;
    px.key = section;
    sl_pool_config_init(&r->config);
    sl__config_bounds_defaults(&r->bounds);
    if (sl__config_read_fields(&px, map, &sl__pool_table, section, r) < 0) return -1;
    if (!r->keys) return finish_upstream(&px, name, map, &r->up);
    /* Each key reads its own secret (read_key_entry). */
    if (r->up.api_key_env || r->up.api_key_file)
        return sl__config_fail(&px, map, "a pool with keys names each key's api_key_env or "
                                         "api_key_file in its entry, not the pool's");
    if (!r->up.url || !r->up.api)
        return sl__config_fail(&px, map, "keys need the pool's upstream_url and provider");
    return 0;
}

/* Key entry `index` of group `group` into `r`: the group's config, bounds and upstream
 * (`tmpl`) with the entry's limits, secret, URL and headers; its name "GROUP:KEY". */
static int read_key_entry(const sl_config_ctx_t *x, const char *group, size_t index,
                          yaml_node_t *entry, const pool_read_t *tmpl, pool_read_t *r,
                          char **pool_name)
{
    char section[400];
    snprintf(section, sizeof(section), "pools.%s.keys[%zu]", group, index);
    sl_config_ctx_t kx = *x;
    kx.key = section;
    const sl_pool_upstream_t *t = &tmpl->up;
    sl_pool_upstream_t *up = &r->up;
    r->config = tmpl->config;
    r->bounds = tmpl->bounds;
    up->api = t->api;
    up->batch = t->batch;
    up->max_batch_requests = t->max_batch_requests;
    sl__long_context_inherit(up, t); /* a long-context pool per key */
    if (!(up->key_group = strdup(group)) || (t->ca_file && !(up->ca_file = strdup(t->ca_file))) ||
        (t->n_models && !(up->models = calloc(t->n_models, sizeof(char *)))))
        return sl__config_fail(&kx, entry, "out of memory");
    for (; up->n_models < t->n_models; up->n_models++)
        if (!(up->models[up->n_models] = strdup(t->models[up->n_models])))
            return sl__config_fail(&kx, entry, "out of memory");
    if (sl__config_read_fields(&kx, entry, &sl__pool_key_table, section, r) < 0) return -1;
    if (!r->key_name)
        return sl__config_fail(&kx, entry, "a key needs a name (1-64 of [A-Za-z0-9._-])");
    char full[200];
    snprintf(full, sizeof(full), "%s:%s", group, r->key_name);
    if (strlen(full) > 128)
        return sl__config_fail(&kx, entry, "'%s' is longer than 128 characters", full);
    up->key_name = r->key_name;
    r->key_name = NULL;
    if (!(*pool_name = strdup(full)) || (!up->url && !(up->url = strdup(t->url))))
        return sl__config_fail(&kx, entry, "out of memory");
    return finish_upstream(x, full, entry, up);
}

/* ---- the section ------------------------------------------------------------------------ */

/* Room for `more` pools after the ones counted (their slots zeroed). */
static int grow_pools(sl_config_t *c, size_t more)
{
    size_t n = c->settings.n_pools, cap = n + more;
    void *g1 = realloc(c->settings.pools, cap * sizeof(*c->settings.pools));
    if (g1) c->settings.pools = g1;
    void *g2 = realloc(c->pool_lines, cap * sizeof(*c->pool_lines));
    if (g2) c->pool_lines = g2;
    void *g3 = realloc(c->upstreams, cap * sizeof(*c->upstreams));
    if (g3) c->upstreams = g3;
    void *g4 = realloc(c->bounds, cap * sizeof(*c->bounds));
    if (g4) c->bounds = g4;
    if (!g1 || !g2 || !g3 || !g4) return -1;
    memset(&c->settings.pools[n], 0, more * sizeof(*c->settings.pools));
    memset(&c->upstreams[n], 0, more * sizeof(*c->upstreams));
    return 0;
}

/* Appends pool `name` (owned by the call from now on, freed with the configuration) read
 * into `r` (its upstream moved into the configuration), first line `line`. */
static void add_pool(sl_config_t *c, char *name, pool_read_t *r, int line)
{
    size_t i = c->settings.n_pools++;
    c->settings.pools[i].name = name;
    c->settings.pools[i].config = r->config;
    c->upstreams[i] = r->up;
    c->bounds[i] = r->bounds;
    c->pool_lines[i] = line;
    memset(&r->up, 0, sizeof(r->up));
}

/* True when `name` is a pool's or a key group's already. */
static bool pool_taken(const sl_config_t *c, const char *name)
{
    for (size_t i = 0; i < c->settings.n_pools; i++)
        if (!strcmp(c->settings.pools[i].name, name) ||
            (c->upstreams[i].key_group && !strcmp(c->upstreams[i].key_group, name)))
            return true;
    return false;
}

/* The keys of pool `group` (read into `tmpl`): one pool "GROUP:KEY" per entry. */
static int add_keys(const sl_config_ctx_t *x, sl_config_t *c, const char *group,
                    const pool_read_t *tmpl)
{
    yaml_node_t *keys = tmpl->keys;
    size_t n_keys = (size_t)(keys->data.sequence.items.top - keys->data.sequence.items.start);
    char section[320];
    snprintf(section, sizeof section, "pools.%s.keys", group);
    sl_config_ctx_t kx = *x;
    kx.key = section;
    if (n_keys > SL_CONFIG_KEYS_MAX)
        return sl__config_fail(&kx, keys, "%zu keys are more than %d", n_keys, SL_CONFIG_KEYS_MAX);
    if (grow_pools(c, n_keys) < 0) return sl__config_fail(&kx, keys, "out of memory");
    int64_t key_group = (int64_t)c->settings.n_pools + 1; /* one queue over the keys */
    for (size_t i = 0; i < n_keys; i++) {
        yaml_node_t *entry = yaml_document_get_node(x->doc, keys->data.sequence.items.start[i]);
        pool_read_t r = {0};
        char *name = NULL;
        int rc = read_key_entry(x, group, i, entry, tmpl, &r, &name);
        if (rc == 0 && pool_taken(c, name))
            rc = sl__config_fail(&kx, entry, "key '%s' is named twice (or is a pool's name)",
                                 name);
        if (rc < 0) {
            free(name);
            free(r.key_name);
            sl__config_upstream_clear(&r.up);
            return -1;
        }
        r.config.key_group = key_group;
        add_pool(c, name, &r, entry ? (int)entry->start_mark.line + 1 : 0);
    }
    return 0;
}

/* The file's pools replace the built-in default pool. */
static void drop_pools(sl_config_t *c)
{
    for (size_t i = 0; i < c->settings.n_pools; i++) {
        free(c->settings.pools[i].name);
        sl__config_upstream_clear(&c->upstreams[i]);
    }
    free(c->settings.pools);
    free(c->pool_lines);
    free(c->upstreams);
    free(c->bounds);
    c->settings.pools = NULL;
    c->pool_lines = NULL;
    c->upstreams = NULL;
    c->bounds = NULL;
    c->settings.n_pools = 0;
}

int sl__config_parse_pools(const sl_config_ctx_t *x, yaml_node_t *map)
{
    sl_config_t *c = x->c;
    sl_config_ctx_t px = *x;
    px.key = "pools";
    if (!map || map->type != YAML_MAPPING_NODE)
        return sl__config_fail(&px, map, "expected a mapping of keys to values");
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    if (n == 0) return sl__config_fail(&px, map, "at least one pool is needed");
    drop_pools(c);
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, pr->key);
        const char *name = scalar(k);
        if (!name || !*name || strlen(name) > 128)
            return sl__config_fail(&px, k, "a pool name must be 1-128 characters");
        if (pool_taken(c, name))
            return sl__config_fail(&px, k, "pool '%s' is defined twice", name);
        pool_read_t r = {0};
        char *copy = strdup(name);
        int rc = copy ? read_pool(x, name, yaml_document_get_node(x->doc, pr->value), &r)
                      : sl__config_fail(&px, k, "out of memory");
        if (rc < 0 || grow_pools(c, 1) < 0) {
            free(copy);
            sl__config_upstream_clear(&r.up);
            return rc < 0 ? -1 : sl__config_fail(&px, k, "out of memory");
        }
        if (!r.keys) {
            add_pool(c, copy, &r, (int)k->start_mark.line + 1);
            continue;
        }
        rc = add_keys(x, c, copy, &r); /* the group itself is no pool: its keys are */
        free(copy);
        sl__config_upstream_clear(&r.up);
        if (rc < 0) return -1;
    }
    char msg[320];
    if (sl__long_context_expand(c, msg, sizeof msg) < 0)
        return sl__config_fail(&px, map, "%s", msg);
    return 0;
}
