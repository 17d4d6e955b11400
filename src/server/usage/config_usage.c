/* config_usage.c - the `prices:` YAML section: list prices per model pattern for chargeback. */
#include "usage.h"

#include <stdio.h>
#include <string.h>

#include <yaml.h>

static const char *const price_keys[] = {"input_per_mtok", "output_per_mtok",
                                         "cache_read_per_mtok", "cache_write_per_mtok"};
#define N_PRICE_KEYS (sizeof(price_keys) / sizeof(price_keys[0]))

static int fail(char *err, size_t errlen, const char *path, const yaml_node_t *at,
                const char *pattern, const char *key, const char *what)
{
    snprintf(err, errlen, "%s:%lu: prices.%s%s%s: %s", path,
             at ? (unsigned long)at->start_mark.line + 1 : 0UL, pattern, key ? "." : "",
             key ? key : "", what);
    return -1;
}

/* One pattern's mapping into {pattern, input, output, cache_read, cache_write}: input and
 * output are required, a cache price not given is the input price. */
static json_t *parse_one(yaml_document_t *doc, yaml_node_t *map, const char *pattern,
                         const char *path, char *err, size_t errlen)
{
    double v[N_PRICE_KEYS] = {-1, -1, -1, -1};
    if (map->type != YAML_MAPPING_NODE) {
        fail(err, errlen, path, map, pattern, NULL,
             "expected a mapping of input_per_mtok, output_per_mtok, cache_read_per_mtok, "
             "cache_write_per_mtok");
        return NULL;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *val = yaml_document_get_node(doc, p->value);
        const char *key = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value
                                                           : "?";
        size_t i = 0;
        while (i < N_PRICE_KEYS && strcmp(price_keys[i], key) != 0)
            i++;
        char what[200];
        if (i == N_PRICE_KEYS) {
            snprintf(what, sizeof(what),
                     "unknown key (known: input_per_mtok, output_per_mtok, cache_read_per_mtok, "
                     "cache_write_per_mtok)");
            fail(err, errlen, path, k, pattern, key, what);
            return NULL;
        }
        if (!val || val->type != YAML_SCALAR_NODE ||
            sl__config_number((const char *)val->data.scalar.value, 0, 1e6, false, &v[i], what,
                              sizeof(what)) < 0) {
            if (!val || val->type != YAML_SCALAR_NODE) snprintf(what, sizeof(what), "expected a number");
            fail(err, errlen, path, val ? val : k, pattern, key, what);
            return NULL;
        }
    }
    for (size_t i = 0; i < 2; i++)
        if (v[i] < 0) {
            fail(err, errlen, path, map, pattern, price_keys[i],
                 "missing: input_per_mtok and output_per_mtok are required");
            return NULL;
        }
    for (size_t i = 2; i < N_PRICE_KEYS; i++)
        if (v[i] < 0) v[i] = v[0];
    return json_pack("{s:s,s:f,s:f,s:f,s:f}", "pattern", pattern, "input", v[0], "output", v[1],
                     "cache_read", v[2], "cache_write", v[3]);
}

static int prices_config_parse(yaml_document_t *doc, yaml_node_t *section, const char *path,
                               sl_config_t *c, char *err, size_t errlen)
{
    if (!section || section->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%lu: prices: expected a mapping of model pattern to prices",
                 path, section ? (unsigned long)section->start_mark.line + 1 : 0UL);
        return -1;
    }
    json_t *all = json_array();
    if (!all) {
        snprintf(err, errlen, "%s: prices: out of memory", path);
        return -1;
    }
    for (yaml_node_pair_t *p = section->data.mapping.pairs.start;
         p < section->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE || !k->data.scalar.length ||
            k->data.scalar.length > 128) {
            json_decref(all);
            return fail(err, errlen, path, k ? k : section, "?", NULL,
                        "a model pattern is 1 to 128 characters");
        }
        json_t *one = parse_one(doc, v, (const char *)k->data.scalar.value, path, err, errlen);
        if (!one || json_array_append_new(all, one) < 0) {
            if (!one && !err[0]) snprintf(err, errlen, "%s: prices: out of memory", path);
            json_decref(all);
            return -1;
        }
    }
    json_decref(SL_USAGE_PRICES(c));
    c->feature[SL_FEATURE_ID_usage] = all;
    return 0;
}

static void prices_config_clear(sl_config_t *c)
{
    json_decref(SL_USAGE_PRICES(c));
    c->feature[SL_FEATURE_ID_usage] = NULL;
}

const sl_config_section_t sl__prices_config = {.key = "prices", .parse = prices_config_parse,
                                               .clear = prices_config_clear};
