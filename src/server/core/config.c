/* config.c - loads sluiced's YAML configuration (libyaml document API) with line-exact errors.
 *
 * The file is parsed into a libyaml document and walked; every node carries its line,
 * so every error names the key path and the line ("pools.default.rpm"). Unknown keys
 * are errors: a typo in a limit must not silently leave the pool unlimited. The top level
 * and every section but `pools:` are field tables (config_sections.c, config_table.c);
 * the pools' table is here, with the keys of a pool of several keys; a feature's section
 * or pool keys reach it through the feature table (features.def).
 */
#include "config.h"
#include "feature.h"
#include "long_context.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

typedef struct parse {
    yaml_document_t *doc;
    const char *path;
    char *err;
    size_t errlen;
} parse_t;

/* Writes "FILE:LINE: KEY: MESSAGE" (MESSAGE from fmt, printf-style) into p->err; returns -1. */
static int fail(parse_t *p, const yaml_node_t *n, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(parse_t *p, const yaml_node_t *n, const char *key, const char *fmt, ...)
{
    sl_config_ctx_t x = {.doc = p->doc, .path = p->path, .key = key, .err = p->err,
                         .errlen = p->errlen};
    va_list ap;
    va_start(ap, fmt);
    sl__config_vfail(&x, n, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *node(parse_t *p, int index)
{
    return yaml_document_get_node(p->doc, index);
}

static int want_scalar(parse_t *p, const yaml_node_t *n, const char *key, const char **out)
{
    *out = scalar(n);
    if (!*out) return fail(p, n, key, "expected a single value, not a list or a mapping");
    return 0;
}

static int get_string(parse_t *p, const yaml_node_t *n, const char *key, char **out)
{
    const char *s;
    if (want_scalar(p, n, key, &s) < 0) return -1;
    char *copy = strdup(s);
    if (!copy) return fail(p, n, key, "out of memory");
    free(*out);
    *out = copy;
    return 0;
}

static int get_i64(parse_t *p, const yaml_node_t *n, const char *key, int64_t *out)
{
    const char *s;
    char *end;
    if (want_scalar(p, n, key, &s) < 0) return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > SL_TOKENS_MAX)
        return fail(p, n, key, "'%s' is not an integer between 0 and 2^53", s);
    *out = v;
    return 0;
}

static int get_double(parse_t *p, const yaml_node_t *n, const char *key, double *out)
{
    const char *s;
    char *end;
    if (want_scalar(p, n, key, &s) < 0) return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return fail(p, n, key, "'%s' is not a non-negative number", s);
    *out = v;
    return 0;
}

static int get_bool(parse_t *p, const yaml_node_t *n, const char *key, bool *out)
{
    const char *s;
    if (want_scalar(p, n, key, &s) < 0) return -1;
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
        *out = true;
    else if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
        *out = false;
    else
        return fail(p, n, key, "'%s' is not true or false", s);
    return 0;
}

static int want_mapping(parse_t *p, const yaml_node_t *n, const char *key)
{
    if (!n || n->type != YAML_MAPPING_NODE)
        return fail(p, n, key, "expected a mapping of keys to values");
    return 0;
}

/* ---- upstreams (the proxy) ---------------------------------------------------------- */

static void upstream_clear(sl_pool_upstream_t *up)
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

static int parse_string_list(parse_t *p, yaml_node_t *seq, const char *key, char ***out,
                             size_t *n_out);

/* The pool keys of the provider behind the pool that are more than a string (the rows
 * of pool_keys[] of type F_CUSTOM). */
static int set_upstream_url(parse_t *p, yaml_node_t *v, const char *key, sl_pool_upstream_t *up)
{
    if (get_string(p, v, key, &up->url) < 0) return -1;
    if (strncmp(up->url, "http://", 7) != 0 && strncmp(up->url, "https://", 8) != 0)
        return fail(p, v, key, "'%s' must start with http:// or https://", up->url);
    size_t n = strlen(up->url);
    while (n > 0 && up->url[n - 1] == '/')
        up->url[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)up->url[i] <= ' ' || up->url[i] == 0x7f)
            return fail(p, v, key, "'%s' contains a space or control character", up->url);
    return 0;
}

static int set_provider(parse_t *p, yaml_node_t *v, const char *key, sl_pool_upstream_t *up)
{
    const char *s;
    if (want_scalar(p, v, key, &s) < 0) return -1;
    if (!strcmp(s, "anthropic"))
        up->api = SL_UPSTREAM_ANTHROPIC;
    else if (!strcmp(s, "openai"))
        up->api = SL_UPSTREAM_OPENAI;
    else
        return fail(p, v, key, "unknown provider '%s' (known: anthropic, openai)", s);
    return 0;
}

static int set_models(parse_t *p, yaml_node_t *v, const char *key, sl_pool_upstream_t *up)
{
    if (parse_string_list(p, v, key, &up->models, &up->n_models) < 0) return -1;
    for (size_t i = 0; i < up->n_models; i++)
        if (!*up->models[i] || strlen(up->models[i]) > 128)
            return fail(p, v, key, "pattern '%s' must be 1-128 characters", up->models[i]);
    return 0;
}

static int refuse_api_key(parse_t *p, yaml_node_t *v, const char *key, sl_pool_upstream_t *up)
{
    (void)up;
    return fail(p, v, key,
                "keys are not written in the configuration; use api_key_env (a variable "
                "name) or api_key_file (a file holding the key)");
}

/* A key is sent as a header value: it must be one printable line. */
static bool key_ok(const char *k)
{
    if (!*k || strlen(k) > 4096) return false;
    for (const char *c = k; *c; c++)
        if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e) return false;
    return true;
}

/* Checks a pool's upstream keys together and reads its key. */
static int finish_upstream(parse_t *p, const char *name, yaml_node_t *map,
                           sl_pool_upstream_t *up)
{
    char key[320];
    snprintf(key, sizeof(key), "pools.%s", name);
    if (!up->url) {
        if (up->api || up->api_key_env || up->api_key_file || up->ca_file)
            return fail(p, map, key,
                        "provider, api_key_env, api_key_file and ca_file need upstream_url");
        return 0;
    }
    if (!up->api)
        return fail(p, map, key, "upstream_url needs provider: anthropic or openai");
    if (up->max_batch_requests && !up->batch)
        return fail(p, map, key, "max_batch_requests needs batch: true");
    if (!up->max_batch_requests) up->max_batch_requests = 100000; /* Anthropic's queue bound */
    if (!up->api_key_env == !up->api_key_file)
        return fail(p, map, key, "upstream_url needs exactly one of api_key_env or api_key_file");
    if (up->api_key_env) {
        const char *k = getenv(up->api_key_env);
        snprintf(key, sizeof(key), "pools.%s.api_key_env", name);
        if (!k || !*k)
            return fail(p, map, key, "the environment variable %s is not set", up->api_key_env);
        up->api_key = strdup(k);
    } else {
        snprintf(key, sizeof(key), "pools.%s.api_key_file", name);
        FILE *f = fopen(up->api_key_file, "rb");
        if (!f) {
            char why[300];
            snprintf(why, sizeof(why), "%.200s: %s", up->api_key_file, strerror(errno));
            return fail(p, map, key, "cannot read %s", why);
        }
        char buf[4100];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
            buf[--n] = '\0';
        up->api_key = strdup(buf);
        memset(buf, 0, sizeof(buf));
    }
    if (!up->api_key) return fail(p, map, key, "out of memory");
    if (!key_ok(up->api_key))
        return fail(p, map, key,
                    "the key must be one line of printable characters without spaces (at most "
                    "4096)");
    if (up->ca_file) {
        FILE *f = fopen(up->ca_file, "rb");
        snprintf(key, sizeof(key), "pools.%s.ca_file", name);
        if (!f) {
            char why[300];
            snprintf(why, sizeof(why), "%.200s: %s", up->ca_file, strerror(errno));
            return fail(p, map, key, "cannot read %s", why);
        }
        fclose(f);
    }
    return 0;
}

static long pool_index(const sl_config_t *c, const char *name);

const sl_pool_upstream_t *sl_config_pool_upstream(const sl_config_t *c, const char *name)
{
    long i = pool_index(c, name);
    return i >= 0 && c->upstreams ? &c->upstreams[i] : NULL;
}

/* ---- pools.NAME.*: a table of keys, like nginx's directive slots ------------------------ */

/* How a key's value is read. */
enum field_type {
    F_I64,    /* int64_t, 0 to 2^53 */
    F_DOUBLE, /* double, non-negative */
    F_BOOL,   /* true/yes/on or false/no/off */
    F_INT,    /* int, 0 to 10^6 */
    F_STRING, /* char * (a copy) */
    F_CHOICE, /* bool: choices[0] is false, choices[1] true */
    F_CUSTOM, /* set() reads it */
};
/* Which structure a key fills: a pool's three, or the section's one (P_CONFIG). */
enum key_part { P_CONFIG, P_UPSTREAM, P_BOUNDS };

/* A key: its name, type, where it goes and, for F_I64 and F_DOUBLE, its bounds
 * (min <= max; max 0: no upper bound); both 0: only the type's own. */
typedef struct config_key {
    const char *name;
    enum field_type type;
    enum key_part part;
    size_t offset;
    double min, max;
    const char *choices[2];
    int (*set)(parse_t *p, yaml_node_t *v, const char *key, sl_pool_upstream_t *up);
} config_key_t;

static const config_key_t pool_keys[] = {
#define PF(name, type) {#name, type, P_CONFIG, offsetof(sl_pool_config_t, name), 0, 0, {0}, NULL}
    PF(input_tpm, F_I64),
    PF(output_tpm, F_I64),
    PF(rpm, F_I64),
    PF(tokens_tpm, F_I64),
    PF(concurrency, F_I64),
    PF(margin_start, F_DOUBLE),
    PF(margin_floor, F_DOUBLE),
    PF(margin_step_down, F_DOUBLE),
    PF(margin_step_up, F_DOUBLE),
    PF(margin_max, F_DOUBLE),
    PF(recover_every_s, F_DOUBLE),
    PF(margin_floor_alert_s, F_DOUBLE),
    PF(lease_ttl_s, F_DOUBLE),
    PF(max_lease_ttl_s, F_DOUBLE),
    PF(max_queue_wait_s, F_DOUBLE),
    PF(cache_ttl_s, F_DOUBLE),
    PF(cache_reads_count, F_BOOL),
    PF(cache_bump_min_tokens, F_I64),
    PF(cache_bump, F_DOUBLE),
    PF(estimate_error_alert, F_DOUBLE),
    PF(estimate_error_window, F_INT),
    PF(claim_timeout_s, F_DOUBLE),
    PF(ticket_idle_s, F_DOUBLE),
    PF(price_input_per_mtok, F_DOUBLE),
    PF(price_output_per_mtok, F_DOUBLE),
    PF(spend_cap_reset_s, F_DOUBLE),
    PF(lease_duration_prior_s, F_DOUBLE),
    PF(backfill, F_BOOL),
    PF(working_set, F_BOOL),
#undef PF
    {"output_reserve", F_CHOICE, P_CONFIG, offsetof(sl_pool_config_t, output_reserve_learned), 0,
     0, {"max_tokens", "learned"}, NULL},
    /* The provider behind the pool (the proxy). */
#define UP(name, type, set) {#name, type, P_UPSTREAM, 0, 0, 0, {0}, set}
    UP(upstream_url, F_CUSTOM, set_upstream_url),
    UP(provider, F_CUSTOM, set_provider),
    {"api_key_env", F_STRING, P_UPSTREAM, offsetof(sl_pool_upstream_t, api_key_env), 0, 0, {0},
     NULL},
    {"api_key_file", F_STRING, P_UPSTREAM, offsetof(sl_pool_upstream_t, api_key_file), 0, 0, {0},
     NULL},
    {"ca_file", F_STRING, P_UPSTREAM, offsetof(sl_pool_upstream_t, ca_file), 0, 0, {0}, NULL},
    UP(models, F_CUSTOM, set_models),
    {"batch", F_BOOL, P_UPSTREAM, offsetof(sl_pool_upstream_t, batch), 0, 0, {0}, NULL},
    {"max_batch_requests", F_I64, P_UPSTREAM, offsetof(sl_pool_upstream_t, max_batch_requests),
     1, 100000000, {0}, NULL},
    UP(api_key, F_CUSTOM, refuse_api_key),
#undef UP
    /* What a settle report may do to the pool (sl_pool_bounds_t, report_bounds.c). */
    {"max_settle_tokens", F_I64, P_BOUNDS, offsetof(sl_pool_bounds_t, max_settle_tokens), 1, 0,
     {0}, NULL},
    {"max_retry_after_s", F_DOUBLE, P_BOUNDS, offsetof(sl_pool_bounds_t, max_retry_after_s), 1,
     86400, {0}, NULL},
    {"limits_from", F_CHOICE, P_BOUNDS, offsetof(sl_pool_bounds_t, limits_from_provider), 0, 0,
     {"config", "provider"}, NULL},
    {"max_report_pool_block_s", F_DOUBLE, P_BOUNDS,
     offsetof(sl_pool_bounds_t, max_report_pool_block_s), 0, 86400, {0}, NULL},
    {"max_resync_factor", F_DOUBLE, P_BOUNDS, offsetof(sl_pool_bounds_t, max_resync_factor), 1,
     1000, {0}, NULL},
};

const char *sl__config_pool_key(size_t i)
{
    return i < sizeof(pool_keys) / sizeof(pool_keys[0]) ? pool_keys[i].name : NULL;
}

/* Reads `v` into `dst` as row `f` says, bounds included (`up`: for F_CUSTOM rows). */
static int set_key(parse_t *p, const config_key_t *f, yaml_node_t *v, const char *key, char *dst,
                   sl_pool_upstream_t *up)
{
    int64_t i64;
    double num = 0;
    const char *s;
    switch (f->type) {
    case F_I64:
        if (get_i64(p, v, key, (int64_t *)(void *)dst) < 0) return -1;
        num = (double)*(int64_t *)(void *)dst;
        break;
    case F_DOUBLE:
        if (get_double(p, v, key, (double *)(void *)dst) < 0) return -1;
        num = *(double *)(void *)dst;
        break;
    case F_BOOL:
        return get_bool(p, v, key, (bool *)(void *)dst);
    case F_INT:
        if (get_i64(p, v, key, &i64) < 0) return -1;
        if (i64 > 1000000) return fail(p, v, key, "'%s' is too large", scalar(v));
        *(int *)(void *)dst = (int)i64;
        return 0;
    case F_STRING:
        return get_string(p, v, key, (char **)(void *)dst);
    case F_CHOICE:
        if (want_scalar(p, v, key, &s) < 0) return -1;
        if (strcmp(s, f->choices[0]) != 0 && strcmp(s, f->choices[1]) != 0)
            return fail(p, v, key, "'%s' must be %s or %s", s, f->choices[0], f->choices[1]);
        *(bool *)(void *)dst = !strcmp(s, f->choices[1]);
        return 0;
    case F_CUSTOM:
        return f->set(p, v, key, up);
    }
    if (f->max > 0 && (num < f->min || num > f->max))
        return fail(p, v, key, "'%s' must be between %.15g and %.15g", scalar(v), f->min, f->max);
    if (num < f->min)
        return fail(p, v, key, "'%s' must be at least %.15g (leave it out for the default)",
                    scalar(v), f->min);
    return 0;
}

/* The row of `rows` (n of them) named `name`, or NULL. */
static const config_key_t *find_key(const config_key_t *rows, size_t n, const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (!strcmp(name, rows[i].name)) return &rows[i];
    return NULL;
}

static void bounds_init(sl_pool_bounds_t *b)
{
    b->max_settle_tokens = 0;
    b->max_retry_after_s = 300;
    b->max_report_pool_block_s = 60;
    b->max_resync_factor = 2;
    b->limits_from_provider = false;
    sl__features_pool_defaults(b);
}

static int parse_pool(parse_t *p, const char *name, yaml_node_t *map, sl_pool_config_t *cfg,
                      sl_pool_upstream_t *up, sl_pool_bounds_t *bounds, yaml_node_t **keys)
{
    char key[320];
    snprintf(key, sizeof(key), "pools.%s", name);
    if (want_mapping(p, map, key) < 0) return -1;
    sl_pool_config_init(cfg);
    bounds_init(bounds);
    char *parts[] = {[P_CONFIG] = (char *)cfg, [P_UPSTREAM] = (char *)up,
                     [P_BOUNDS] = (char *)bounds};
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
        const char *kname = scalar(k);
        const config_key_t *f =
            find_key(pool_keys, sizeof(pool_keys) / sizeof(pool_keys[0]), kname);
        snprintf(key, sizeof(key), "pools.%s.%s", name, kname ? kname : "?");
        if (!f && kname && !strcmp(kname, "long_context")) {
            char msg[320];
            if (sl__long_context_parse(p->doc, v, name, up, msg, sizeof msg) < 0)
                return fail(p, v, key, "%s", msg);
            continue;
        }
        if (!f && kname && !strcmp(kname, "keys")) {
            if (!v || v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top ==
                                                           v->data.sequence.items.start)
                return fail(p, v, key, "expected a list of at least one key");
            *keys = v;
            continue;
        }
        if (!f && kname) { /* a feature's key of every pool (features.def: `ramp`, ...) */
            sl_config_ctx_t x = {.doc = p->doc, .path = p->path, .key = key, .err = p->err,
                                 .errlen = p->errlen};
            int rc = sl__features_pool_key(&x, kname, v, bounds);
            if (rc < 0) return -1;
            if (rc > 0) continue;
        }
        if (!f) return fail(p, k, key, "unknown pool key '%s'", kname ? kname : "?");
        if (set_key(p, f, v, key, parts[f->part] + f->offset, up) < 0) return -1;
    }
    if (*keys) { /* each key reads its own secret (config_keys below) */
        if (up->api_key_env || up->api_key_file)
            return fail(p, map, key,
                        "a pool with keys names each key's api_key_env or api_key_file in its "
                        "entry, not the pool's");
        if (!up->url || !up->api)
            return fail(p, map, key, "keys need the pool's upstream_url and provider");
        return 0;
    }
    return finish_upstream(p, name, map, up);
}

/* ---- keys: a pool of several provider keys (design.md, "A pool of several keys") ---------- */

/* What a key may set besides its secret: its own limits (the rest of the pool's settings
 * are the pool's, so keys differ by workspace or project, never by model family). */
static bool key_limit(const char *kname)
{
    static const char *const limits[] = {"input_tpm", "output_tpm", "rpm", "tokens_tpm",
                                         "concurrency"};
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
        if (!strcmp(kname, limits[i])) return true;
    return false;
}

/* A key's `headers:` mapping (e.g. OpenAI-Project, anthropic-workspace) into "Name: value"
 * lines; the provider key's own header and the framing headers are not for it to set. */
static int parse_key_headers(parse_t *p, yaml_node_t *map, const char *key, sl_pool_upstream_t *up)
{
    if (want_mapping(p, map, key) < 0) return -1;
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    if (!(up->headers = calloc(n ? n : 1, sizeof(char *)))) return fail(p, map, key, "out of memory");
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        const char *name = scalar(node(p, pr->key)), *value;
        if (want_scalar(p, node(p, pr->value), key, &value) < 0) return -1;
        bool ok = name && *name && strlen(name) <= 64;
        for (const char *c = name; ok && *c; c++)
            ok = isalnum((unsigned char)*c) || *c == '-' || *c == '_';
        if (!ok) return fail(p, map, key, "header name '%s' must be 1-64 of [A-Za-z0-9_-]", name ? name : "?");
        static const char *const reserved[] = {"authorization", "x-api-key", "host",
                                               "content-length", "transfer-encoding"};
        for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
            if (!strcasecmp(name, reserved[i]))
                return fail(p, map, key, "header '%s' is set by the proxy, not by a key", name);
        if (!key_ok(value) && *value)
            return fail(p, node(p, pr->value), key, "the value of '%s' must be one printable line", name);
        size_t len = strlen(name) + strlen(value) + 3;
        if (!(up->headers[up->n_headers] = malloc(len))) return fail(p, map, key, "out of memory");
        snprintf(up->headers[up->n_headers++], len, "%s: %s", name, value);
    }
    return 0;
}

/* The pool of key entry `entry` of group `group`: its name "GROUP:KEY", the group's
 * config and upstream (`tmpl`) with the key's limits, secret, URL and headers. */
static int parse_key_entry(parse_t *p, const char *group, size_t index, yaml_node_t *entry,
                           const sl_pool_upstream_t *tmpl, sl_named_pool_t *np,
                           sl_pool_upstream_t *up)
{
    char key[400];
    snprintf(key, sizeof(key), "pools.%s.keys[%zu]", group, index);
    if (want_mapping(p, entry, key) < 0) return -1;
    const char *kn = NULL;
    for (yaml_node_pair_t *pr = entry->data.mapping.pairs.start;
         pr < entry->data.mapping.pairs.top; pr++)
        if (scalar(node(p, pr->key)) && !strcmp(scalar(node(p, pr->key)), "name"))
            if (want_scalar(p, node(p, pr->value), key, &kn) < 0) return -1;
    if (!kn) return fail(p, entry, key, "a key needs a name (1-64 of [A-Za-z0-9._-])");
    char full[200];
    snprintf(full, sizeof(full), "%s:%s", group, kn);
    bool ok = *kn && strlen(kn) <= 64 && strlen(full) <= 128;
    for (const char *c = kn; ok && *c; c++)
        ok = isalnum((unsigned char)*c) || *c == '.' || *c == '_' || *c == '-';
    if (!ok)
        return fail(p, entry, key, "key name '%s' must be 1-64 of [A-Za-z0-9._-] (and POOL:KEY at most 128)", kn);
    if (!(np->name = strdup(full))) return fail(p, entry, key, "out of memory");
    up->api = tmpl->api;
    up->batch = tmpl->batch;
    up->max_batch_requests = tmpl->max_batch_requests;
    sl__long_context_inherit(up, tmpl); /* a long-context pool per key */
    if (!(up->key_group = strdup(group)) || !(up->key_name = strdup(kn)) ||
        (tmpl->ca_file && !(up->ca_file = strdup(tmpl->ca_file))) ||
        (tmpl->n_models && !(up->models = calloc(tmpl->n_models, sizeof(char *)))))
        return fail(p, entry, key, "out of memory");
    for (; up->n_models < tmpl->n_models; up->n_models++)
        if (!(up->models[up->n_models] = strdup(tmpl->models[up->n_models])))
            return fail(p, entry, key, "out of memory");
    for (yaml_node_pair_t *pr = entry->data.mapping.pairs.start;
         pr < entry->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
        const char *kname = scalar(k);
        char fkey[480];
        snprintf(fkey, sizeof(fkey), "%s.%s", key, kname ? kname : "?");
        if (!kname) return fail(p, k, key, "keys must be plain names");
        if (!strcmp(kname, "name")) continue;
        const config_key_t *f =
            find_key(pool_keys, sizeof(pool_keys) / sizeof(pool_keys[0]), kname);
        if (key_limit(kname) && f) { /* a limit of sl_pool_config_t, read by the pools' table */
            if (set_key(p, f, v, fkey, (char *)&np->config + f->offset, up) < 0) return -1;
            continue;
        }
        if (!strcmp(kname, "headers")) {
            if (parse_key_headers(p, v, fkey, up) < 0) return -1;
            continue;
        }
        if (f && f->part == P_UPSTREAM &&
            (!strcmp(kname, "upstream_url") || !strcmp(kname, "api_key_env") ||
             !strcmp(kname, "api_key_file") || !strcmp(kname, "api_key"))) {
            if (set_key(p, f, v, fkey, (char *)up + f->offset, up) < 0) return -1;
            continue;
        }
        return fail(p, k, key,
                    "unknown key '%s' (a key sets name, api_key_env or api_key_file, "
                    "upstream_url, headers and input_tpm, output_tpm, rpm, tokens_tpm, "
                    "concurrency; the rest is the pool's)",
                    kname);
    }
    if (!up->url && !(up->url = strdup(tmpl->url))) return fail(p, entry, key, "out of memory");
    return finish_upstream(p, full, entry, up);
}

/* Replaces the last pool parsed (a pool with `keys:`) by one pool per key, leaving room
 * for the `later` pools still to come. */
static int expand_keys(parse_t *p, sl_config_t *c, yaml_node_t *keys, size_t later)
{
    size_t n_keys = (size_t)(keys->data.sequence.items.top - keys->data.sequence.items.start);
    if (n_keys > SL_CONFIG_KEYS_MAX)
        return fail(p, keys, c->settings.pools[c->settings.n_pools - 1].name,
                    "keys: %zu keys are more than %d", n_keys, SL_CONFIG_KEYS_MAX);
    size_t at = c->settings.n_pools - 1, cap = at + n_keys + later;
    sl_named_pool_t tmpl_pool = c->settings.pools[at];
    sl_pool_upstream_t tmpl_up = c->upstreams[at];
    sl_pool_bounds_t tmpl_bounds = c->bounds[at];
    void *g1 = realloc(c->settings.pools, cap * sizeof(*c->settings.pools));
    if (g1) c->settings.pools = g1;
    void *g2 = realloc(c->pool_lines, cap * sizeof(*c->pool_lines));
    if (g2) c->pool_lines = g2;
    void *g3 = realloc(c->upstreams, cap * sizeof(*c->upstreams));
    if (g3) c->upstreams = g3;
    void *g4 = realloc(c->bounds, cap * sizeof(*c->bounds));
    if (g4) c->bounds = g4;
    c->settings.n_pools = at; /* the template is now owned here, and freed below */
    int rc = 0;
    if (!g1 || !g2 || !g3 || !g4) rc = fail(p, keys, tmpl_pool.name, "out of memory");
    for (size_t i = 0; rc == 0 && i < cap - at; i++) {
        memset(&c->settings.pools[at + i], 0, sizeof(c->settings.pools[0]));
        memset(&c->upstreams[at + i], 0, sizeof(c->upstreams[0]));
    }
    for (size_t i = 0; rc == 0 && i < n_keys; i++) {
        yaml_node_t *entry = node(p, keys->data.sequence.items.start[i]);
        size_t slot = c->settings.n_pools++;
        c->settings.pools[slot].config = tmpl_pool.config;
        c->settings.pools[slot].config.key_group = (int64_t)at + 1; /* one queue over the keys */
        c->bounds[slot] = tmpl_bounds;
        c->pool_lines[slot] = entry ? (int)entry->start_mark.line + 1 : 0;
        rc = parse_key_entry(p, tmpl_pool.name, i, entry, &tmpl_up, &c->settings.pools[slot],
                             &c->upstreams[slot]);
        for (size_t j = 0; rc == 0 && j < slot; j++)
            if (!strcmp(c->settings.pools[j].name, c->settings.pools[slot].name))
                rc = fail(p, entry, tmpl_pool.name, "key '%s' is named twice (or is a pool's name)",
                          c->settings.pools[slot].name);
    }
    free(tmpl_pool.name);
    upstream_clear(&tmpl_up);
    return rc;
}

static int parse_pools(parse_t *p, yaml_node_t *map, sl_config_t *c)
{
    if (want_mapping(p, map, "pools") < 0) return -1;
    size_t n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    if (n == 0) return fail(p, map, "pools", "at least one pool is needed");
    /* The file's pools replace the built-in default pool. */
    for (size_t i = 0; i < c->settings.n_pools; i++)
        free(c->settings.pools[i].name);
    free(c->settings.pools);
    free(c->pool_lines);
    for (size_t i = 0; i < c->settings.n_pools; i++)
        upstream_clear(&c->upstreams[i]);
    free(c->upstreams);
    free(c->bounds);
    c->settings.n_pools = 0;
    c->settings.pools = calloc(n, sizeof(*c->settings.pools));
    c->pool_lines = calloc(n, sizeof(*c->pool_lines));
    c->upstreams = calloc(n, sizeof(*c->upstreams));
    c->bounds = calloc(n, sizeof(*c->bounds));
    if (!c->settings.pools || !c->pool_lines || !c->upstreams || !c->bounds)
        return fail(p, map, "pools", "out of memory");
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = node(p, pr->key);
        const char *name = scalar(k);
        if (!name || !*name || strlen(name) > 128)
            return fail(p, k, "pools", "a pool name must be 1-128 characters");
        for (size_t i = 0; i < c->settings.n_pools; i++)
            if (!strcmp(c->settings.pools[i].name, name) ||
                (c->upstreams[i].key_group && !strcmp(c->upstreams[i].key_group, name)))
                return fail(p, k, "pools", "pool '%s' is defined twice", name);
        sl_named_pool_t *np = &c->settings.pools[c->settings.n_pools];
        np->name = strdup(name);
        if (!np->name) return fail(p, k, "pools", "out of memory");
        c->pool_lines[c->settings.n_pools] = (int)k->start_mark.line + 1;
        c->settings.n_pools++; /* counted first, so a failure below frees what was parsed */
        yaml_node_t *keys = NULL;
        if (parse_pool(p, name, node(p, pr->value), &np->config,
                       &c->upstreams[c->settings.n_pools - 1],
                       &c->bounds[c->settings.n_pools - 1], &keys) < 0)
            return -1;
        if (keys && expand_keys(p, c, keys,
                                (size_t)(map->data.mapping.pairs.top - pr - 1)) < 0)
            return -1;
    }
    char msg[320];
    if (sl__long_context_expand(c, msg, sizeof msg) < 0) return fail(p, map, "pools", "%s", msg);
    return 0;
}

static int parse_string_list(parse_t *p, yaml_node_t *seq, const char *key, char ***out,
                             size_t *n_out)
{
    sl_config_ctx_t x = {.doc = p->doc, .path = p->path, .key = key, .err = p->err,
                         .errlen = p->errlen};
    return sl__config_string_list(&x, seq, out, n_out);
}

int sl__config_parse_pools(const sl_config_ctx_t *x, yaml_node_t *map)
{
    parse_t p = {.doc = x->doc, .path = x->path, .err = x->err, .errlen = x->errlen};
    return parse_pools(&p, map, x->c);
}

/* `backend_fail` against the backend: it needs a redis:// URL, and must agree with the
 * URL's own ?fail= when both are given. */
static int apply_backend_fail(parse_t *p, sl_config_t *c)
{
    if (c->backend_fail < 0) return 0;
    const char *name = c->backend_fail == SL_REDIS_FAIL_OPEN ? "open" : "closed";
    if (!c->redis) {
        snprintf(p->err, p->errlen,
                 "%s: backend_fail: '%s' needs a redis:// backend (backend is '%s')", p->path,
                 name, c->backend);
        return -1;
    }
    const char *q = strchr(c->backend, '?');
    if (q && strstr(q, "fail=") && (int)c->redis_opt.fail != c->backend_fail) {
        snprintf(p->err, p->errlen,
                 "%s: backend_fail: '%s' contradicts the backend URL's ?fail= (%s)", p->path,
                 name, c->redis_opt.fail == SL_REDIS_FAIL_OPEN ? "open" : "closed");
        return -1;
    }
    c->redis_opt.fail = (sl_redis_fail_t)c->backend_fail;
    return 0;
}

/* The top-level `cold_start` reaches a redis:// backend unless its URL names its own
 * ?cold_start=, which wins. */
static void apply_cold_start(sl_config_t *c)
{
    if (!c->redis) return;
    const char *q = strchr(c->backend, '?');
    if (q && strstr(q, "cold_start=")) return;
    c->redis_opt.cold_start_full = c->cold_start == SL_COLD_START_FULL;
}

/* Checks the values against the engine on a scratch engine, naming the pool's line. */
static int check_with_engine(parse_t *p, sl_config_t *c)
{
    char msg[512];
    long bad_pool;
    if (sl_backend_settings_validate(&c->settings, &bad_pool, msg, sizeof(msg)) != SL_OK) {
        int line = bad_pool >= 0 && c->pool_lines ? c->pool_lines[bad_pool] : 0;
        snprintf(p->err, p->errlen, "%s:%d: %s", p->path, line, msg);
        return -1;
    }
    if (c->engine.weight_floor <= 0 || c->engine.tombstone_ttl_s <= 0 ||
        c->engine.idempotency_ttl_s <= 0) {
        snprintf(p->err, p->errlen, "%s: engine: every value must be above 0", p->path);
        return -1;
    }
    return 0;
}

int sl__config_yaml_load(const char *path, yaml_document_t *doc, char *err, size_t errlen)
{
    yaml_parser_t parser;
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)), -1;
    int rc = -1;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: out of memory", path);
    } else {
        yaml_parser_set_input_file(&parser, f);
        if (yaml_parser_load(&parser, doc))
            rc = 0;
        else
            snprintf(err, errlen, "%s:%lu: YAML syntax: %s %s", path,
                     (unsigned long)parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "error",
                     parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
    }
    fclose(f);
    return rc;
}

int sl_config_load(const char *path, sl_config_t *c, char *err, size_t errlen)
{
    int rc = -1;
    yaml_document_t doc;
    bool have_doc = false;
    parse_t p = {.doc = &doc, .path = path, .err = err, .errlen = errlen};
    if (sl__config_yaml_load(path, &doc, err, errlen) < 0) goto done;
    have_doc = true;
    sl_config_ctx_t x = {.doc = &doc, .path = path, .c = c, .err = err, .errlen = errlen};
    yaml_node_t *root = yaml_document_get_root_node(&doc); /* NULL: an empty file */
    if (root && sl__config_read_fields(&x, root, &sl__root_table, NULL, c) < 0) goto done;
    if (apply_backend_fail(&p, c) < 0) goto done;
    apply_cold_start(c);
    if (c->state_file && c->redis) {
        snprintf(err, errlen, "%s: state_file: '%s' needs the memory backend (backend is '%s'; "
                 "Redis keeps its own state)", path, c->state_file, c->backend);
        goto done;
    }
    if (check_with_engine(&p, c) < 0) goto done;
    if (sl__features_config_check(c, path, err, errlen) < 0) goto done;
    if (sl__config_tokens_finish(c, path, err, errlen) < 0) goto done;
    rc = 0;
done:
    if (have_doc) yaml_document_delete(&doc);
    if (rc < 0) sl_config_clear(c);
    return rc;
}

int sl_config_set_listen(sl_config_t *c, const char *addr, char *err, size_t errlen)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr) {
        snprintf(err, errlen, "'%s' is not HOST:PORT", addr);
        return -1;
    }
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < 0 || port > 65535) {
        snprintf(err, errlen, "'%s' has no valid port (0-65535)", addr);
        return -1;
    }
    const char *h = addr;
    size_t hn = (size_t)(colon - addr);
    if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']') {
        h++;
        hn -= 2;
    }
    char *host = strndup(h, hn);
    if (!host) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    free(c->listen_host);
    c->listen_host = host;
    c->listen_port = (int)port;
    return 0;
}

int sl_config_defaults(sl_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->listen_host = strdup("127.0.0.1");
    c->listen_port = 8750;
    c->backend = strdup("memory");
    c->backend_fail = -1;
    c->body_limit_bytes = 64 * 1024;
    c->max_wait_s = 300;
    c->max_hold_s = SL_CHECKPOINTED_MAX_WAIT_S;
    c->state_fsync_interval_s = 1.0;
    c->cold_start = SL_COLD_START_EMPTY;
    sl__config_guard_defaults(&c->events, &c->agents);
    sl_engine_config_init(&c->engine);
    c->server.max_connections = 4096;
    c->server.max_pending_output_bytes = 64 * 1024;
    c->server.write_timeout_s = 30;
    c->server.idle_timeout_s = 60;
    c->server.head_timeout_s = 10;
    c->server.body_min_rate_bytes_per_s = 1024;
    c->settings.pools = calloc(1, sizeof(*c->settings.pools));
    c->pool_lines = calloc(1, sizeof(*c->pool_lines));
    c->upstreams = calloc(1, sizeof(*c->upstreams));
    c->bounds = calloc(1, sizeof(*c->bounds));
    c->max_unblocks = 1000;
    if (!c->listen_host || !c->backend || !c->settings.pools || !c->pool_lines || !c->upstreams ||
        !c->bounds || sl__features_config_defaults(c) < 0)
        goto fail;
    bounds_init(&c->bounds[0]);
    c->settings.pools[0].name = strdup("default");
    if (!c->settings.pools[0].name) goto fail;
    sl_pool_config_init(&c->settings.pools[0].config);
    c->settings.n_pools = 1;
    return 0;
fail:
    sl_config_clear(c);
    return -1;
}

/* The index of pool `name`; a key group's name stands for its first key's pool (they
 * share the provider, the models and every setting but the limits). -1: unknown. */
static long pool_index(const sl_config_t *c, const char *name)
{
    for (size_t i = 0; name && i < c->settings.n_pools; i++)
        if (!strcmp(c->settings.pools[i].name, name)) return (long)i;
    size_t first;
    if (name && sl_config_key_members(c, name, &first, 1) > 0) return (long)first;
    return -1;
}

size_t sl_config_key_members(const sl_config_t *c, const char *group, size_t *idx, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; group && c->upstreams && i < c->settings.n_pools; i++)
        if (c->upstreams[i].key_group && !strcmp(c->upstreams[i].key_group, group)) {
            if (n < max) idx[n] = i;
            n++;
        }
    return n < max ? n : max;
}

const sl_pool_bounds_t *sl_config_pool_bounds(const sl_config_t *c, const char *name)
{
    long i = pool_index(c, name);
    return i >= 0 && c->bounds ? &c->bounds[i] : NULL;
}

const sl_pool_config_t *sl_config_pool(const sl_config_t *c, const char *name)
{
    long i = pool_index(c, name);
    return i >= 0 ? &c->settings.pools[i].config : NULL;
}

#define DEFAULT_SETTLE_CEILING_TOKENS 10000000

static int64_t settle_ceiling(const sl_pool_config_t *pc, const sl_pool_bounds_t *b)
{
    if (b->max_settle_tokens > 0) return b->max_settle_tokens;
    int64_t largest = pc->input_tpm;
    if (pc->output_tpm > largest) largest = pc->output_tpm;
    if (pc->tokens_tpm > largest) largest = pc->tokens_tpm;
    if (largest == 0) return DEFAULT_SETTLE_CEILING_TOKENS;
    double derived = (double)largest * b->max_resync_factor;
    return derived >= (double)SL_TOKENS_MAX ? SL_TOKENS_MAX : (int64_t)derived;
}

int64_t sl_config_settle_ceiling(const sl_config_t *c, const char *name)
{
    long i = pool_index(c, name);
    if (i >= 0 && c->bounds) return settle_ceiling(&c->settings.pools[i].config, &c->bounds[i]);
    int64_t most = 0;
    for (size_t k = 0; c->bounds && k < c->settings.n_pools; k++) {
        int64_t v = settle_ceiling(&c->settings.pools[k].config, &c->bounds[k]);
        if (v > most) most = v;
    }
    return most ? most : DEFAULT_SETTLE_CEILING_TOKENS;
}

double sl_config_priority_factor(const sl_config_t *c, const char *name)
{
    for (size_t i = 0; i < c->settings.n_priorities; i++)
        if (!strcmp(c->settings.priorities[i].name, name)) return c->settings.priorities[i].value;
    if (!strcmp(name, "high")) return 4;
    if (!strcmp(name, "normal")) return 1;
    if (!strcmp(name, "low")) return 0.25;
    return -1;
}

bool sl_config_proxies(const sl_config_t *c, sl_upstream_api_t api)
{
    for (size_t i = 0; c->upstreams && i < c->settings.n_pools; i++)
        if (c->upstreams[i].api == api) return true;
    return false;
}

bool sl_config_auth_enabled(const sl_config_t *c)
{
    return c->admin_token != NULL || c->n_tokens > 0;
}

static void free_list(char **l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(l[i]);
    free(l);
}

void sl_config_clear(sl_config_t *c)
{
    free(c->listen_host);
    free(c->backend);
    free(c->event_log);
    free(c->access_log);
    free(c->state_file);
    free(c->admin_token);
    free(c->pool_lines);
    for (size_t i = 0; c->upstreams && i < c->settings.n_pools; i++)
        upstream_clear(&c->upstreams[i]);
    free(c->upstreams);
    free(c->bounds);
    sl_backend_settings_clear(&c->settings);
    for (size_t i = 0; i < c->n_tokens; i++)
        sl__token_rule_clear(&c->tokens[i]);
    free(c->tokens);
    sl__token_config_clear(&c->token_cfg);
    free_list(c->server.allowed_hosts, c->server.n_allowed_hosts);
    json_decref(c->limits);
    json_decref(c->prices);
    sl__features_config_clear(c);
    memset(c, 0, sizeof(*c));
}
