/* config.c - loads sluiced's YAML configuration (libyaml document API) with line-exact errors,
 * and answers what the rest of sluiced asks of it (a pool's settings, upstream and bounds).
 *
 * The file is parsed into a libyaml document and walked; every node carries its line,
 * so every error names the key path and the line ("pools.default.rpm"). Unknown keys
 * are errors: a typo in a limit must not silently leave the pool unlimited. Every section
 * is a field table read by config_table.c: the core's in config_sections.c, the pools' in
 * config_pools.c; a feature's section or pool keys reach it through the feature table
 * (features.def). Checks that span sections (backend_fail against the backend, the
 * engine's own rules) run here once the file is read.
 */
#include "config.h"
#include "feature.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

typedef struct parse {
    yaml_document_t *doc;
    const char *path;
    char *err;
    size_t errlen;
} parse_t;

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
    sl__config_bounds_defaults(&c->bounds[0]);
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

const sl_pool_upstream_t *sl_config_pool_upstream(const sl_config_t *c, const char *name)
{
    long i = pool_index(c, name);
    return i >= 0 && c->upstreams ? &c->upstreams[i] : NULL;
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
        sl__config_upstream_clear(&c->upstreams[i]);
    free(c->upstreams);
    free(c->bounds);
    sl_backend_settings_clear(&c->settings);
    for (size_t i = 0; i < c->n_tokens; i++)
        sl__token_rule_clear(&c->tokens[i]);
    free(c->tokens);
    sl__token_config_clear(&c->token_cfg);
    free_list(c->server.allowed_hosts, c->server.n_allowed_hosts);
    sl__features_config_clear(c);
    memset(c, 0, sizeof(*c));
}
