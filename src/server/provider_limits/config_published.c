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
 * never from the file itself: a missing or empty one is an error naming the variable. */
#include "pacing.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

static int fail(char *err, size_t errlen, const char *path, const yaml_node_t *at, const char *key,
                const char *what)
{
    snprintf(err, errlen, "%s:%lu: provider_limits.%s: %s", path,
             at ? (unsigned long)at->start_mark.line + 1 : 0UL, key, what);
    return -1;
}

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

void sl__config_published_clear(sl_published_config_t *c)
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

/* Reads the admin key from the variable or the file; `what` says what is wrong. */
static int read_key(sl_published_source_t *s, char *what, size_t whatlen)
{
    char buf[4100];
    if (s->key_env) {
        const char *k = getenv(s->key_env);
        if (!k || !*k) {
            snprintf(what, whatlen, "the environment variable %s (admin_key_env) is not set",
                     s->key_env);
            return -1;
        }
        snprintf(buf, sizeof(buf), "%s", k);
    } else {
        FILE *f = fopen(s->key_file, "rb");
        if (!f) {
            snprintf(what, whatlen, "admin_key_file: cannot read %.200s: %s", s->key_file,
                     strerror(errno));
            return -1;
        }
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
            buf[--n] = '\0';
    }
    bool ok = buf[0] != '\0' && strlen(buf) <= 4096;
    for (const char *c = buf; ok && *c; c++)
        if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e) ok = false;
    if (ok) s->key = strdup(buf);
    memset(buf, 0, sizeof(buf));
    if (!ok) {
        snprintf(what, whatlen,
                 "the admin key in %s %s must be one line of printable characters without "
                 "spaces",
                 s->key_env ? "variable" : "file", s->key_env ? s->key_env : s->key_file);
        return -1;
    }
    if (!s->key) snprintf(what, whatlen, "out of memory");
    return s->key ? 0 : -1;
}

static int parse_source(yaml_document_t *doc, yaml_node_t *map, const char *path,
                        const char *name, sl_published_source_t *s, char *err, size_t errlen)
{
    char key[96], what[400];
    if (map->type != YAML_MAPPING_NODE)
        return fail(err, errlen, path, map, name, "expected a mapping (admin_key_env, ...)");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        const char *kn = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "?";
        snprintf(key, sizeof(key), "%s.%s", name, kn);
        if (!v || v->type != YAML_SCALAR_NODE || !v->data.scalar.length)
            return fail(err, errlen, path, v ? v : map, key, "expected a single value");
        const char *sv = (const char *)v->data.scalar.value;
        char **dst = !strcmp(kn, "admin_key_env")    ? &s->key_env
                     : !strcmp(kn, "admin_key_file") ? &s->key_file
                     : !strcmp(kn, "url")            ? &s->url
                     : !strcmp(kn, "project")        ? &s->project
                                                     : NULL;
        if (!strcmp(kn, "admin_key"))
            return fail(err, errlen, path, k, key,
                        "admin keys are not written in the configuration; use admin_key_env (a "
                        "variable name) or admin_key_file (a file holding the key)");
        if (!dst)
            return fail(err, errlen, path, k, key,
                        "unknown key (known: admin_key_env, admin_key_file, url, project)");
        if (!strcmp(kn, "url") && strncmp(sv, "http://", 7) && strncmp(sv, "https://", 8))
            return fail(err, errlen, path, v, key, "must start with http:// or https://");
        free(*dst);
        *dst = strdup(sv);
        if (!*dst) return fail(err, errlen, path, v, key, "out of memory");
    }
    if (!s->key_env == !s->key_file)
        return fail(err, errlen, path, map, name,
                    "needs exactly one of admin_key_env or admin_key_file");
    if (!strcmp(name, "openai") && !s->project)
        return fail(err, errlen, path, map, name,
                    "needs project: the OpenAI project whose rate limits are read");
    if (s->url) {
        size_t n = strlen(s->url);
        while (n > 0 && s->url[n - 1] == '/') s->url[--n] = '\0';
    }
    if (read_key(s, what, sizeof(what)) < 0) return fail(err, errlen, path, map, name, what);
    return 0;
}

/* `groups: {POOL: GROUP_TYPE}`: the Anthropic group a pool draws from. */
static int parse_groups(yaml_document_t *doc, yaml_node_t *map, const char *path,
                        sl_published_config_t *c, char *err, size_t errlen)
{
    static const char *const known[] = {"model_group", "batch", "token_count", "files",
                                        "skills", "web_search"};
    if (map->type != YAML_MAPPING_NODE)
        return fail(err, errlen, path, map, "groups", "expected a mapping of pool: group type");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
            return fail(err, errlen, path, map, "groups", "expected pool: group type");
        const char *pool = (const char *)k->data.scalar.value;
        const char *type = (const char *)v->data.scalar.value;
        bool ok = false;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (!strcmp(type, known[i])) ok = true;
        if (!ok) {
            char what[300];
            snprintf(what, sizeof(what),
                     "'%.64s' is not a group type (known: model_group, batch, token_count, "
                     "files, skills, web_search)",
                     type);
            char key[200];
            snprintf(key, sizeof(key), "groups.%.128s", pool);
            return fail(err, errlen, path, v, key, what);
        }
        char **gp = realloc(c->group_pools, (c->n_groups + 1) * sizeof(*gp));
        if (gp) c->group_pools = gp;
        char **gt = gp ? realloc(c->group_types, (c->n_groups + 1) * sizeof(*gt)) : NULL;
        if (gt) c->group_types = gt;
        char *a = gt ? strdup(pool) : NULL, *b = a ? strdup(type) : NULL;
        if (!b) {
            free(a);
            return fail(err, errlen, path, v, "groups", "out of memory");
        }
        c->group_pools[c->n_groups] = a;
        c->group_types[c->n_groups++] = b;
    }
    return 0;
}

int sl__config_parse_published(yaml_document_t *doc, yaml_node_t *section, const char *path,
                               sl_published_config_t *out, char *err, size_t errlen)
{
    sl_published_config_t c = {.on = true, .refresh_s = 3600};
    int rc = 0;
    if (!section || section->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%lu: provider_limits: expected a mapping", path,
                 section ? (unsigned long)section->start_mark.line + 1 : 0UL);
        return -1;
    }
    for (yaml_node_pair_t *p = section->data.mapping.pairs.start;
         rc == 0 && p < section->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        const char *kn = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "?";
        char what[200];
        if (!v) {
            rc = fail(err, errlen, path, k, kn, "expected a value");
        } else if (!strcmp(kn, "anthropic") || !strcmp(kn, "openai")) {
            rc = parse_source(doc, v, path, kn, !strcmp(kn, "anthropic") ? &c.anthropic : &c.openai,
                              err, errlen);
        } else if (!strcmp(kn, "refresh_s")) {
            if (v->type != YAML_SCALAR_NODE ||
                sl__config_number((const char *)v->data.scalar.value, 60, 86400, false,
                                  &c.refresh_s, what, sizeof(what)) < 0)
                rc = fail(err, errlen, path, v, kn,
                          v->type == YAML_SCALAR_NODE ? what : "expected a number");
        } else if (!strcmp(kn, "pools")) {
            if (v->type != YAML_SEQUENCE_NODE) {
                rc = fail(err, errlen, path, v, kn, "expected a list of pool names");
                break;
            }
            for (yaml_node_item_t *it = v->data.sequence.items.start;
                 rc == 0 && it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = yaml_document_get_node(doc, *it);
                char **grown = realloc(c.pools, (c.n_pools + 1) * sizeof(*grown));
                if (!grown || !e || e->type != YAML_SCALAR_NODE) {
                    if (grown) c.pools = grown;
                    rc = fail(err, errlen, path, e ? e : v, kn, "expected pool names");
                    break;
                }
                c.pools = grown;
                c.pools[c.n_pools] = strdup((const char *)e->data.scalar.value);
                if (!c.pools[c.n_pools]) rc = fail(err, errlen, path, e, kn, "out of memory");
                else c.n_pools++;
            }
        } else if (!strcmp(kn, "groups")) {
            rc = parse_groups(doc, v, path, &c, err, errlen);
        } else {
            rc = fail(err, errlen, path, k, kn,
                      "unknown key (known: refresh_s, anthropic, openai, pools, groups)");
        }
    }
    if (rc == 0 && !c.anthropic.key && !c.openai.key)
        rc = fail(err, errlen, path, section, "anthropic",
                  "the section needs anthropic or openai with an admin key");
    if (rc < 0) {
        sl__config_published_clear(&c);
        return -1;
    }
    sl__config_published_clear(out);
    *out = c;
    return 0;
}

/* ---- the pools' ramp keys: a pool table the core reads through the feature table ------- */

void sl__config_ramp_defaults(sl_pool_bounds_t *b)
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
const sl_config_table_t sl__ramp_table =
    SL_CONFIG_TABLE("pools.NAME", sl_pool_bounds_t, ramp_fields);

_Static_assert(sizeof(sl_ramp_mode_t) == sizeof(int), "ramp is read as an int");
