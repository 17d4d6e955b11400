/* scenario.c - reads a simulator scenario from YAML (libyaml's document API).
 *
 * The format is documented in docs/sim.md. Every key is known: an unknown key, a
 * value of the wrong type or out of range is an error that names the key and the
 * value, so a typo never silently falls back to a default.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include <sluice/engine.h>

#include "sim.h"

typedef struct ctx {
    yaml_document_t *doc;
    char *err;
    size_t errlen;
    bool failed;
} ctx_t;

static void fail(ctx_t *c, const char *fmt, ...)
{
    if (c->failed) return;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static double get_double(ctx_t *c, const char *path, const yaml_node_t *v, double lo, double hi)
{
    const char *s = scalar(v);
    char *end = NULL;
    errno = 0;
    double d = s ? strtod(s, &end) : NAN;
    if (!s || end == s || *end || errno || !isfinite(d) || d < lo || d > hi) {
        fail(c, "%s: \"%s\" is not a number in [%g, %g]", path, s ? s : "(not a scalar)", lo, hi);
        return 0;
    }
    return d;
}

static int64_t get_int(ctx_t *c, const char *path, const yaml_node_t *v, int64_t lo, int64_t hi)
{
    const char *s = scalar(v);
    char *end = NULL;
    errno = 0;
    long long x = s ? strtoll(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || x < lo || x > hi) {
        fail(c, "%s: \"%s\" is not an integer in [%lld, %lld]", path, s ? s : "(not a scalar)",
             (long long)lo, (long long)hi);
        return 0;
    }
    return x;
}

static void get_str(ctx_t *c, const char *path, const yaml_node_t *v, char *out, size_t cap)
{
    const char *s = scalar(v);
    if (!s || !*s || strlen(s) >= cap) {
        fail(c, "%s: \"%s\" is not a name of 1-%zu characters", path, s ? s : "(not a scalar)",
             cap - 1);
        return;
    }
    for (const char *p = s; *p; p++) {
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                  *p == '-' || *p == '_';
        if (!ok) {
            fail(c, "%s: \"%s\" may only hold letters, digits, '-' and '_'", path, s);
            return;
        }
    }
    memcpy(out, s, strlen(s) + 1);
}

/* True (after failing) when the key at `kv` came earlier in `map` too: last-wins would
 * hide a typo'd copy. `prefix` leads the key's name in the message ("provider."). */
static bool given_twice(ctx_t *c, const yaml_node_t *map, const yaml_node_pair_t *kv,
                        const char *prefix)
{
    const char *k = scalar(yaml_document_get_node(c->doc, kv->key));
    for (const yaml_node_pair_t *o = map->data.mapping.pairs.start; k && o < kv; o++) {
        const char *ok = scalar(yaml_document_get_node(c->doc, o->key));
        if (ok && !strcmp(ok, k)) {
            fail(c, "%s%s: given twice", prefix, k);
            return true;
        }
    }
    return false;
}

static const int64_t TOK_MAX = (int64_t)1 << 40;

static void parse_provider(ctx_t *c, const yaml_node_t *map, sl_provider_config_t *p)
{
    if (map->type != YAML_MAPPING_NODE) {
        fail(c, "provider: expected a mapping");
        return;
    }
    for (yaml_node_pair_t *kv = map->data.mapping.pairs.start; kv < map->data.mapping.pairs.top; kv++) {
        const char *k = scalar(yaml_document_get_node(c->doc, kv->key));
        const yaml_node_t *v = yaml_document_get_node(c->doc, kv->value);
        char path[96];
        snprintf(path, sizeof path, "provider.%s", k ? k : "?");
        if (!k) fail(c, "provider: keys must be scalars");
        else if (given_twice(c, map, kv, "provider.")) break;
        else if (!strcmp(k, "input_tpm")) p->input_tpm = get_int(c, path, v, 0, TOK_MAX);
        else if (!strcmp(k, "output_tpm")) p->output_tpm = get_int(c, path, v, 0, TOK_MAX);
        else if (!strcmp(k, "rpm")) p->rpm = get_int(c, path, v, 0, TOK_MAX);
        else if (!strcmp(k, "tokens_tpm")) p->tokens_tpm = get_int(c, path, v, 0, TOK_MAX);
        else if (!strcmp(k, "cache_ttl_s")) p->cache_ttl_s = get_double(c, path, v, 0, 86400);
        else if (!strcmp(k, "cache_min_tokens")) p->cache_min_tokens = get_int(c, path, v, 0, TOK_MAX);
        else if (!strcmp(k, "ttft_s")) p->ttft_s = get_double(c, path, v, 0, 600);
        else if (!strcmp(k, "prefill_tokens_per_s")) p->prefill_tokens_per_s = get_double(c, path, v, 0, 1e9);
        else if (!strcmp(k, "output_tokens_per_s")) p->output_tokens_per_s = get_double(c, path, v, 0.001, 1e9);
        else if (!strcmp(k, "latency_spread")) p->latency_spread = get_double(c, path, v, 0, 0.99);
        else if (!strcmp(k, "drift")) p->drift = get_double(c, path, v, 0.01, 100);
        else if (!strcmp(k, "outside_share")) p->outside_share = get_double(c, path, v, 0, 0.99);
        else if (!strcmp(k, "outside_rpm")) p->outside_rpm = get_double(c, path, v, 0, 1e9);
        else fail(c, "provider: unknown key \"%s\"", k);
    }
}

/* keys: [{name, input_tpm, output_tpm, rpm, tokens_tpm}]: a limit a key leaves out is
 * the provider section's. */
static void parse_keys(ctx_t *c, const yaml_node_t *v, sl_sim_scenario_t *sc)
{
    int n = v->type == YAML_SEQUENCE_NODE
                ? (int)(v->data.sequence.items.top - v->data.sequence.items.start)
                : 0;
    if (n < 1 || n > SL_SIM_KEYS_MAX) {
        fail(c, "keys: expected a list of 1 to %d keys", SL_SIM_KEYS_MAX);
        return;
    }
    for (int i = 0; i < n && !c->failed; i++) {
        const yaml_node_t *map = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        sl_sim_key_t *key = &sc->keys[i];
        *key = (sl_sim_key_t){.input_tpm = -1, .output_tpm = -1, .rpm = -1, .tokens_tpm = -1};
        snprintf(key->name, sizeof key->name, "k%d", i);
        if (!map || map->type != YAML_MAPPING_NODE) {
            fail(c, "keys[%d]: expected a mapping", i);
            return;
        }
        for (yaml_node_pair_t *kv = map->data.mapping.pairs.start;
             kv < map->data.mapping.pairs.top && !c->failed; kv++) {
            const char *k = scalar(yaml_document_get_node(c->doc, kv->key));
            const yaml_node_t *val = yaml_document_get_node(c->doc, kv->value);
            char path[64];
            snprintf(path, sizeof path, "keys[%d].%s", i, k ? k : "?");
            if (!k) fail(c, "keys[%d]: keys must be scalars", i);
            else if (!strcmp(k, "name")) get_str(c, path, val, key->name, sizeof key->name);
            else if (!strcmp(k, "input_tpm")) key->input_tpm = get_int(c, path, val, 0, TOK_MAX);
            else if (!strcmp(k, "output_tpm")) key->output_tpm = get_int(c, path, val, 0, TOK_MAX);
            else if (!strcmp(k, "rpm")) key->rpm = get_int(c, path, val, 0, TOK_MAX);
            else if (!strcmp(k, "tokens_tpm")) key->tokens_tpm = get_int(c, path, val, 0, TOK_MAX);
            else fail(c, "keys[%d]: unknown key \"%s\" (a key sets name and its limits)", i, k);
        }
        for (int j = 0; j < i && !c->failed; j++)
            if (!strcmp(sc->keys[j].name, key->name))
                fail(c, "keys[%d].name: \"%s\" is named twice", i, key->name);
    }
    sc->n_keys = n;
}

/* A limit a key left out is the provider's (known once the whole file is read). */
static void keys_inherit(sl_sim_scenario_t *sc)
{
    for (int i = 0; i < sc->n_keys; i++) {
        sl_sim_key_t *k = &sc->keys[i];
        if (k->input_tpm < 0) k->input_tpm = sc->provider.input_tpm;
        if (k->output_tpm < 0) k->output_tpm = sc->provider.output_tpm;
        if (k->rpm < 0) k->rpm = sc->provider.rpm;
        if (k->tokens_tpm < 0) k->tokens_tpm = sc->provider.tokens_tpm;
    }
}

static void parse_after(ctx_t *c, const char *path, const yaml_node_t *v, sl_sim_group_t *g)
{
    if (v->type != YAML_SEQUENCE_NODE) {
        fail(c, "%s: expected a list of group names", path);
        return;
    }
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        if (g->n_after == SL_SIM_AFTER_MAX) {
            fail(c, "%s: at most %d groups", path, SL_SIM_AFTER_MAX);
            return;
        }
        get_str(c, path, yaml_document_get_node(c->doc, *it), g->after[g->n_after++], SL_SIM_NAME_MAX);
    }
}

static void parse_group(ctx_t *c, int idx, const yaml_node_t *map, sl_sim_group_t *g)
{
    *g = (sl_sim_group_t){.count = 1, .tasks = 1, .turns = 5, .prefix_tokens = 0,
                          .turn_tokens = 1000, .output_tokens = 500, .max_tokens = 4096,
                          .read_s = 5, .edit_s = 3, .test_s = 90, .test_spread = 0.05};
    snprintf(g->role, sizeof g->role, "worker");
    if (map->type != YAML_MAPPING_NODE) {
        fail(c, "agents[%d]: expected a mapping", idx);
        return;
    }
    bool named = false;
    for (yaml_node_pair_t *kv = map->data.mapping.pairs.start; kv < map->data.mapping.pairs.top; kv++) {
        const char *k = scalar(yaml_document_get_node(c->doc, kv->key));
        const yaml_node_t *v = yaml_document_get_node(c->doc, kv->value);
        char path[96];
        snprintf(path, sizeof path, "agents[%d].%s", idx, k ? k : "?");
        char prefix[32];
        snprintf(prefix, sizeof prefix, "agents[%d].", idx);
        if (!k) fail(c, "agents[%d]: keys must be scalars", idx);
        else if (given_twice(c, map, kv, prefix)) break;
        else if (!strcmp(k, "name")) {
            get_str(c, path, v, g->name, sizeof g->name);
            named = true;
        } else if (!strcmp(k, "role")) {
            get_str(c, path, v, g->role, sizeof g->role);
            if (!c->failed && strcmp(g->role, "planner") && strcmp(g->role, "reviewer") &&
                strcmp(g->role, "worker"))
                fail(c, "%s: \"%s\" is not planner, reviewer or worker", path, g->role);
        } else if (!strcmp(k, "count")) g->count = (int)get_int(c, path, v, 0, 100000);
        else if (!strcmp(k, "tasks")) g->tasks = (int)get_int(c, path, v, 1, 10000);
        else if (!strcmp(k, "turns")) g->turns = (int)get_int(c, path, v, 1, 10000);
        else if (!strcmp(k, "prefix_tokens")) g->prefix_tokens = get_int(c, path, v, 0, TOK_MAX);
        else if (!strcmp(k, "turn_tokens")) g->turn_tokens = get_int(c, path, v, 0, TOK_MAX);
        else if (!strcmp(k, "output_tokens")) g->output_tokens = get_int(c, path, v, 1, TOK_MAX);
        else if (!strcmp(k, "max_tokens")) g->max_tokens = get_int(c, path, v, 1, TOK_MAX);
        else if (!strcmp(k, "read_s")) g->read_s = get_double(c, path, v, 0, 86400);
        else if (!strcmp(k, "edit_s")) g->edit_s = get_double(c, path, v, 0, 86400);
        else if (!strcmp(k, "test_s")) g->test_s = get_double(c, path, v, 0, 86400);
        else if (!strcmp(k, "test_spread")) g->test_spread = get_double(c, path, v, 0, 0.99);
        else if (!strcmp(k, "repeat_failure")) g->repeat_failure = get_double(c, path, v, 0, 0.9);
        else if (!strcmp(k, "after")) parse_after(c, path, v, g);
        else fail(c, "agents[%d]: unknown key \"%s\"", idx, k);
    }
    if (!named) fail(c, "agents[%d]: missing key \"name\"", idx);
    if (!c->failed && g->output_tokens > g->max_tokens)
        fail(c, "agents[%d].output_tokens: %lld is above max_tokens %lld", idx,
             (long long)g->output_tokens, (long long)g->max_tokens);
}

static void parse_agents(ctx_t *c, const yaml_node_t *v, sl_sim_scenario_t *sc)
{
    if (v->type != YAML_SEQUENCE_NODE) {
        fail(c, "agents: expected a list");
        return;
    }
    int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    sc->groups = calloc((size_t)(n ? n : 1), sizeof *sc->groups);
    if (!sc->groups) {
        fail(c, "out of memory");
        return;
    }
    for (int i = 0; i < n && !c->failed; i++) {
        parse_group(c, i, yaml_document_get_node(c->doc, v->data.sequence.items.start[i]), &sc->groups[i]);
        sc->n_groups = i + 1;
    }
}

/* team_weights: [w0, w1, ...], each a team's weight in the engine's fair queue. */
static void parse_team_weights(ctx_t *c, const yaml_node_t *v, sl_sim_scenario_t *sc)
{
    if (v->type != YAML_SEQUENCE_NODE) {
        fail(c, "team_weights: expected a list of numbers");
        return;
    }
    int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    free(sc->team_weight);
    sc->team_weight = calloc((size_t)(n ? n : 1), sizeof *sc->team_weight);
    if (!sc->team_weight) {
        fail(c, "out of memory");
        return;
    }
    for (int i = 0; i < n && !c->failed; i++) {
        char key[32];
        snprintf(key, sizeof key, "team_weights[%d]", i);
        /* The engine's bounds (sl_engine_set_team_weight). */
        sc->team_weight[i] = get_double(
            c, key, yaml_document_get_node(c->doc, v->data.sequence.items.start[i]), 0.001, 1000);
    }
    sc->n_team_weights = n;
}

static void check_graph(ctx_t *c, sl_sim_scenario_t *sc)
{
    if (sc->n_groups == 0) fail(c, "agents: the fleet is empty");
    for (int i = 0; i < sc->n_groups && !c->failed; i++) {
        for (int j = i + 1; j < sc->n_groups; j++)
            if (!strcmp(sc->groups[i].name, sc->groups[j].name))
                fail(c, "agents[%d].name: \"%s\" is used twice", j, sc->groups[j].name);
        for (int a = 0; a < sc->groups[i].n_after; a++) {
            int found = -1;
            for (int j = 0; j < sc->n_groups; j++)
                if (!strcmp(sc->groups[j].name, sc->groups[i].after[a])) found = j;
            /* Only earlier groups: the graph is acyclic by construction. */
            if (found < 0 || found >= i)
                fail(c, "agents[%d].after: \"%s\" is not a group listed before it", i,
                     sc->groups[i].after[a]);
        }
    }
}

int sl_sim_scenario_parse(const char *text, size_t len, sl_sim_scenario_t *sc, char *err,
                          size_t errlen)
{
    memset(sc, 0, sizeof *sc);
    snprintf(sc->name, sizeof sc->name, "scenario");
    sc->seed = 1;
    sc->duration_s = 7200;
    sc->start_window_s = 5;
    sc->harness_timeout_s = 30;
    sc->replan_min = 5;
    sc->replan_max = 20;
    sc->loop_continue = 0.6;
    sc->estimate_noise = 0.05;
    sl_pool_config_t pool_defaults;
    sl_pool_config_init(&pool_defaults);
    sc->margin_max = pool_defaults.margin_max;
    sc->teams = 1;
    sc->limits_scale = 1;
    sc->demand_scale = 1;
    sl_provider_config_init(&sc->provider);

    yaml_parser_t parser;
    yaml_document_t doc;
    ctx_t c = {.doc = &doc, .err = err, .errlen = errlen};
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "YAML error at line %zu: %s", parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return -1;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        fail(&c, "the scenario must be a mapping");
    } else {
        for (yaml_node_pair_t *kv = root->data.mapping.pairs.start;
             kv < root->data.mapping.pairs.top && !c.failed; kv++) {
            const char *k = scalar(yaml_document_get_node(&doc, kv->key));
            const yaml_node_t *v = yaml_document_get_node(&doc, kv->value);
            if (!k) fail(&c, "keys must be scalars");
            else if (given_twice(&c, root, kv, "")) break;
            else if (!strcmp(k, "name")) get_str(&c, k, v, sc->name, sizeof sc->name);
            else if (!strcmp(k, "seed")) sc->seed = (uint64_t)get_int(&c, k, v, 0, INT64_MAX);
            else if (!strcmp(k, "duration_s")) sc->duration_s = get_double(&c, k, v, 1, 1e7);
            else if (!strcmp(k, "start_window_s")) sc->start_window_s = get_double(&c, k, v, 0, 86400);
            else if (!strcmp(k, "harness_timeout_s")) sc->harness_timeout_s = get_double(&c, k, v, 0, 86400);
            else if (!strcmp(k, "replan_min")) sc->replan_min = get_double(&c, k, v, 0, 1000);
            else if (!strcmp(k, "replan_max")) sc->replan_max = get_double(&c, k, v, 0, 1000);
            else if (!strcmp(k, "loop_continue")) sc->loop_continue = get_double(&c, k, v, 0, 0.95);
            else if (!strcmp(k, "estimate_noise")) sc->estimate_noise = get_double(&c, k, v, 0, 0.9);
            else if (!strcmp(k, "margin_max")) sc->margin_max = get_double(&c, k, v, 0, 1);
            else if (!strcmp(k, "teams")) sc->teams = (int)get_int(&c, k, v, 1, 10000);
            else if (!strcmp(k, "team_weights")) parse_team_weights(&c, v, sc);
            else if (!strcmp(k, "provider")) parse_provider(&c, v, &sc->provider);
            else if (!strcmp(k, "agents")) parse_agents(&c, v, sc);
            else if (!strcmp(k, "keys")) parse_keys(&c, v, sc);
            else if (!strcmp(k, "keys_queue")) {
                char q[16];
                get_str(&c, k, v, q, sizeof q);
                if (!strcmp(q, "per_key")) sc->keys_per_key_queue = true;
                else if (strcmp(q, "one") != 0 && !c.failed)
                    fail(&c, "keys_queue \"%s\" must be one or per_key", q);
            }
            else fail(&c, "unknown key \"%s\"", k);
        }
    }
    if (!c.failed && sc->replan_max < sc->replan_min)
        fail(&c, "replan_max: %g is below replan_min %g", sc->replan_max, sc->replan_min);
    if (!c.failed) check_graph(&c, sc);
    if (!c.failed) keys_inherit(sc);
    if (!c.failed && sc->team_weight && sc->n_team_weights > sc->teams)
        fail(&c, "team_weights: %d weights for %d teams", sc->n_team_weights, sc->teams);
    if (!c.failed && sc->team_weight) {
        /* Teams the list does not name weigh 1. */
        double *w = realloc(sc->team_weight, (size_t)sc->teams * sizeof *w);
        if (!w) fail(&c, "out of memory");
        else sc->team_weight = w;
        for (int i = sc->n_team_weights; !c.failed && i < sc->teams; i++) w[i] = 1;
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (c.failed) {
        sl_sim_scenario_free(sc);
        return -1;
    }
    return 0;
}

int sl_sim_scenario_load(const char *path, sl_sim_scenario_t *sc, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "%s: out of memory", path);
                return -1;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        snprintf(err, errlen, "%s: read error", path);
        return -1;
    }
    char msg[256];
    int rc = sl_sim_scenario_parse(buf, len, sc, msg, sizeof msg);
    free(buf);
    if (rc != 0) snprintf(err, errlen, "%s: %s", path, msg);
    return rc;
}

void sl_sim_scenario_free(sl_sim_scenario_t *sc)
{
    free(sc->groups);
    sc->groups = NULL;
    sc->n_groups = 0;
    free(sc->team_weight);
    sc->team_weight = NULL;
    sc->n_team_weights = 0;
}
