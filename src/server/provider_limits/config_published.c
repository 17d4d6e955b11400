/* config_published.c - the `provider_limits:` YAML section and the pools' `ramp*` keys (a pool
 * table the core reads through the feature table: `pools.NAME.ramp_factor: ...`).
 *
 *   provider_limits:
 *     refresh_s: 3600
 *     anthropic: {admin_key_env: ANTHROPIC_ADMIN_KEY}     # or admin_key_file; url
 *     openai: {admin_key_env: OPENAI_ADMIN_KEY, project: proj_abc}
 *     pools: [claude]                                     # default: every proxied pool
 *
 * Admin keys are read here, at load, from the variable or file the section names and
 * never from the file itself: a missing or empty one is an error naming the variable.
 * The section and each provider's mapping are field tables read by the core's
 * config_table.c (errors as `FILE:LINE: provider_limits.KEY: ...`). */
#include "pacing.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

static void free_source(sl_published_source_t *s)
{
    if (s->key) {
        volatile char *k = s->key; /* a secret: not left in freed memory */
        for (size_t i = 0; k[i]; i++) k[i] = '\0';
    }
    free(s->key);
    free(s->key_env);
    free(s->key_file);
    free(s->url);
    free(s->project);
    memset(s, 0, sizeof(*s));
}

static void published_clear(sl_published_config_t *c)
{
    free_source(&c->anthropic);
    free_source(&c->openai);
    for (size_t i = 0; i < c->n_pools; i++) free(c->pools[i]);
    free(c->pools);
    for (size_t i = 0; i < c->n_groups; i++) {
        free(c->group_pools[i]);
        free(c->group_types[i]);
    }
    free(c->group_pools);
    free(c->group_types);
    memset(c, 0, sizeof(*c));
}

/* ---- the section's tables (read by the core's config_table.c) ------------------------ */

static int refuse_admin_key(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    return sl__config_fail(x, v, "admin keys are not written in the configuration; use "
                                 "admin_key_env (a variable name) or admin_key_file (a file "
                                 "holding the key)");
}

#define SRC(key, member) {#key, SL_FIELD_OPTIONAL, offsetof(sl_published_source_t, member), 0, 0, NULL, NULL}
static const sl_config_field_t source_fields[] = {
    SRC(admin_key_env, key_env),
    SRC(admin_key_file, key_file),
    {"url", SL_FIELD_CUSTOM, offsetof(sl_published_source_t, url), 0, 0, NULL,
     sl__config_read_url},
    SRC(project, project),
    {"admin_key", SL_FIELD_CUSTOM, 0, 0, 0, NULL, refuse_admin_key},
};
#undef SRC
static const sl_config_table_t source_table =
    SL_CONFIG_TABLE("provider_limits.PROVIDER", sl_published_source_t, source_fields);

/* `anthropic:` or `openai:` (x->key names which): the keys, then the admin key read. */
static int read_source(sl_config_ctx_t *x, yaml_node_t *map, void *field)
{
    sl_published_source_t *s = field;
    char what[400];
    if (sl__config_read_fields(x, map, &source_table, x->key, s) < 0) return -1;
    if (!s->key_env == !s->key_file)
        return sl__config_fail(x, map, "needs exactly one of admin_key_env or admin_key_file");
    if (!strcmp(x->key, "provider_limits.openai") && !s->project)
        return sl__config_fail(x, map, "needs project: the OpenAI project whose rate limits are "
                                       "read");
    if (sl__config_secret(s->key_env, s->key_file, "admin_key_env", "admin_key_file", &s->key,
                          what, sizeof(what)) < 0)
        return sl__config_fail(x, map, "%s", what);
    return 0;
}

static int read_pools(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    sl_published_config_t *c = (sl_published_config_t *)(void *)((char *)field -
                                                                   offsetof(sl_published_config_t,
                                                                            pools));
    return sl__config_string_list(x, v, &c->pools, &c->n_pools);
}

/* `groups: {POOL: GROUP_TYPE}`: the Anthropic group a pool draws from. */
static int read_groups(sl_config_ctx_t *x, yaml_node_t *map, void *field)
{
    static const char *const known[] = {"model_group", "batch", "token_count", "files",
                                        "skills", "web_search"};
    sl_published_config_t *c = (sl_published_config_t *)(void *)((char *)field -
                                                                   offsetof(sl_published_config_t,
                                                                            group_pools));
    if (!map || map->type != YAML_MAPPING_NODE)
        return sl__config_fail(x, map, "expected a mapping of pool: group type");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
            return sl__config_fail(x, map, "expected pool: group type");
        const char *pool = (const char *)k->data.scalar.value;
        const char *type = (const char *)v->data.scalar.value;
        bool ok = false;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (!strcmp(type, known[i])) ok = true;
        char key[200];
        snprintf(key, sizeof(key), "%s.%.128s", x->key, pool);
        sl_config_ctx_t gx = *x;
        gx.key = key;
        if (!ok)
            return sl__config_fail(&gx, v, "'%.64s' is not a group type (known: model_group, "
                                           "batch, token_count, files, skills, web_search)",
                                   type);
        char **gp = realloc(c->group_pools, (c->n_groups + 1) * sizeof(*gp));
        if (gp) c->group_pools = gp;
        char **gt = gp ? realloc(c->group_types, (c->n_groups + 1) * sizeof(*gt)) : NULL;
        if (gt) c->group_types = gt;
        char *a = gt ? strdup(pool) : NULL, *b = a ? strdup(type) : NULL;
        if (!b) {
            free(a);
            return sl__config_fail(&gx, v, "out of memory");
        }
        c->group_pools[c->n_groups] = a;
        c->group_types[c->n_groups++] = b;
    }
    return 0;
}

#define PUB(key, member, fn) {#key, SL_FIELD_CUSTOM, offsetof(sl_published_config_t, member), 0, 0, NULL, fn}
static const sl_config_field_t published_fields[] = {
    {"refresh_s", SL_FIELD_NUMBER, offsetof(sl_published_config_t, refresh_s), 60, 86400, NULL,
     NULL},
    PUB(anthropic, anthropic, read_source),
    PUB(openai, openai, read_source),
    PUB(pools, pools, read_pools),
    PUB(groups, group_pools, read_groups),
};
#undef PUB
static const sl_config_table_t published_table =
    SL_CONFIG_TABLE("provider_limits", sl_published_config_t, published_fields);

static int published_parse(yaml_document_t *doc, yaml_node_t *section, const char *path,
                           sl_config_t *config, char *err, size_t errlen)
{
    sl_published_config_t c = {.on = true, .refresh_s = 3600};
    int rc = sl__config_read_table(doc, section, &published_table, path, &c, err, errlen);
    if (rc == 0 && !c.anthropic.key && !c.openai.key) {
        sl_config_ctx_t x = {.doc = doc, .path = path, .key = "provider_limits.anthropic",
                             .err = err, .errlen = errlen};
        rc = sl__config_fail(&x, section, "the section needs anthropic or openai with an admin key");
    }
    if (rc < 0) {
        published_clear(&c);
        return -1;
    }
    published_clear(SL_PUBLISHED(config));
    *SL_PUBLISHED(config) = c;
    return 0;
}

/* The section's struct, off (`on` false) until a `provider_limits:` section is read. */
static int published_defaults(sl_config_t *c)
{
    c->feature[SL_FEATURE_ID_provider_limits] = calloc(1, sizeof(sl_published_config_t));
    return SL_PUBLISHED(c) ? 0 : -1;
}

static void published_free(sl_config_t *c)
{
    if (SL_PUBLISHED(c)) published_clear(SL_PUBLISHED(c));
    free(SL_PUBLISHED(c));
    c->feature[SL_FEATURE_ID_provider_limits] = NULL;
}

/* ---- the pools' ramp keys: a pool table the core reads through the feature table ------- */

static void ramp_defaults(sl_pool_bounds_t *b)
{
    b->ramp.mode = SL_RAMP_AUTO;
    b->ramp.floor_tpm = 10000;
    b->ramp.factor = 2;
    b->ramp.idle_s = 60;
}

static const char *const ramp_modes[] = {"auto", "on", "off", NULL}; /* sl_ramp_mode_t */

#define RAMP(key, member, type, min, max)                                                          \
    {#key, type, offsetof(sl_pool_bounds_t, ramp.member), min, max, NULL, NULL}
static const sl_config_field_t ramp_fields[] = {
    {"ramp", SL_FIELD_CHOICE, offsetof(sl_pool_bounds_t, ramp.mode), 0, 0, ramp_modes, NULL},
    RAMP(ramp_floor_tpm, floor_tpm, SL_FIELD_INT, 1, 1e15),
    RAMP(ramp_factor, factor, SL_FIELD_NUMBER, 1.01, 100),
    RAMP(ramp_idle_s, idle_s, SL_FIELD_NUMBER, 1, 86400),
};
#undef RAMP
static const sl_config_table_t ramp_table =
    SL_CONFIG_TABLE("pools.NAME", sl_pool_bounds_t, ramp_fields);

_Static_assert(sizeof(sl_ramp_mode_t) == sizeof(int), "ramp is read as an int");

const sl_config_section_t sl__provider_limits_config = {.key = "provider_limits",
    .defaults = published_defaults, .parse = published_parse, .clear = published_free,
    .table = &published_table, .pool_table = &ramp_table, .pool_defaults = ramp_defaults};
