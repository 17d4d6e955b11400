/* config_limits.c - the `limits:` YAML section, mapped onto the limits library's JSON reader.
 *
 * YAML scalars carry no types, so a plain scalar becomes a JSON integer, a number, a
 * boolean or null when it reads as one, and a string otherwise; a quoted scalar is always a
 * string. The library then validates every field (sl_limits_add_json) and names it as
 * `limits.NAME.FIELD`; this file only finds the line of that field in the file, so the
 * error reads `FILE:LINE: limits.NAME.FIELD: ...` like every other config error.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "limits_json.h"
#include "limits_api.h"

static json_t *plain_scalar(const char *s)
{
    char *end;
    if (!*s || !strcmp(s, "~") || !strcmp(s, "null")) return json_null();
    if (!strcmp(s, "true")) return json_true();
    if (!strcmp(s, "false")) return json_false();
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (!errno && end != s && !*end) return json_integer(i);
    errno = 0;
    double d = strtod(s, &end);
    if (!errno && end != s && !*end && isfinite(d)) return json_real(d);
    return json_string(s);
}

/* The node as JSON; NULL when out of memory or a mapping key is not a scalar. */
static json_t *to_json(yaml_document_t *doc, yaml_node_t *n)
{
    if (!n) return json_null();
    switch (n->type) {
    case YAML_SCALAR_NODE: {
        const char *s = (const char *)n->data.scalar.value;
        return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? plain_scalar(s) : json_string(s);
    }
    case YAML_SEQUENCE_NODE: {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             a && it < n->data.sequence.items.top; it++) {
            json_t *v = to_json(doc, yaml_document_get_node(doc, *it));
            if (!v || json_array_append_new(a, v) < 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case YAML_MAPPING_NODE: {
        json_t *o = json_object();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; o && p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            json_t *v = k && k->type == YAML_SCALAR_NODE
                            ? to_json(doc, yaml_document_get_node(doc, p->value))
                            : NULL;
            if (!v || json_object_set_new(o, (const char *)k->data.scalar.value, v) < 0) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    }
    default:
        return json_null();
    }
}

/* The value node of `key` in mapping `map`, or NULL. */
static yaml_node_t *member(yaml_document_t *doc, yaml_node_t *map, const char *key, size_t len)
{
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && strlen((const char *)k->data.scalar.value) == len &&
            !strncmp((const char *)k->data.scalar.value, key, len))
            return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

/* The line of the field a library message names ("limits.NAME.FIELD: ..."): the field's
 * own node when the limit has it, else the limit's. */
static unsigned long error_line(yaml_document_t *doc, yaml_node_t *section, const char *msg)
{
    for (yaml_node_pair_t *p = section->data.mapping.pairs.start;
         p < section->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || k->type != YAML_SCALAR_NODE) continue;
        const char *name = (const char *)k->data.scalar.value;
        size_t nl = strlen(name);
        if (strncmp(msg, "limits.", 7) != 0 || strncmp(msg + 7, name, nl) != 0) continue;
        const char *rest = msg + 7 + nl;
        if (*rest != '.' && *rest != ':') continue;
        yaml_node_t *at = k;
        if (*rest == '.') {
            const char *f = rest + 1;
            size_t fl = strcspn(f, ".:[ ");
            yaml_node_t *fv = member(doc, v, f, fl);
            if (!fv) continue; /* a longer limit name may match this message */
            at = fv;
        }
        return (unsigned long)at->start_mark.line + 1;
    }
    return (unsigned long)section->start_mark.line + 1;
}

/* A check names its action as 1-128 of [A-Za-z0-9._:-] (docs/api.md): a cost under any
 * other name would never apply. Writes "limits.NAME.costs: ..." into msg and returns -1
 * for the first such name, else 0. */
static int check_cost_names(json_t *all, char *msg, size_t n)
{
    const char *name, *action;
    json_t *lim, *cost;
    json_object_foreach(all, name, lim)
    {
        json_object_foreach(json_object_get(lim, "costs"), action, cost)
        {
            if (sl__name_ok(action, 128)) continue;
            snprintf(msg, n,
                     "limits.%s.costs: '%.40s%s' is not an action a check can name (1-128 "
                     "of A-Za-z0-9._:-)",
                     name, action, strlen(action) > 40 ? "..." : "");
            return -1;
        }
    }
    return 0;
}

static int limits_config_parse(yaml_document_t *doc, yaml_node_t *section, const char *path,
                               sl_config_t *c, char *err, size_t errlen)
{
    if (!section || section->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%lu: limits: expected a mapping of limit names to limits", path,
                 section ? (unsigned long)section->start_mark.line + 1 : 0UL);
        return -1;
    }
    json_t *all = to_json(doc, section);
    if (!all) {
        snprintf(err, errlen, "%s:%lu: limits: out of memory, or a key that is not a name", path,
                 (unsigned long)section->start_mark.line + 1);
        return -1;
    }
    sl_limits_t *scratch = sl_limits_new();
    int rc = scratch ? sl_limits_add_all_json(scratch, all) : SL_ENOMEM;
    char names[400] = ""; /* set only when a cost's action cannot be named */
    if (rc == SL_OK && check_cost_names(all, names, sizeof(names)) < 0) rc = SL_EINVAL;
    if (rc != SL_OK) {
        const char *msg = names[0]  ? names
                          : scratch ? sl_limits_errmsg(scratch)
                                    : "limits: out of memory";
        snprintf(err, errlen, "%s:%lu: %s", path, error_line(doc, section, msg), msg);
        sl_limits_free(scratch);
        json_decref(all);
        return -1;
    }
    sl_limits_free(scratch);
    json_decref(SL_LIMITS_CONF(c));
    c->feature[SL_FEATURE_ID_limits] = all;
    return 0;
}

static void limits_config_clear(sl_config_t *c)
{
    json_decref(SL_LIMITS_CONF(c));
    c->feature[SL_FEATURE_ID_limits] = NULL;
}

const sl_config_section_t sl__limits_config = {.key = "limits", .parse = limits_config_parse,
                                               .clear = limits_config_clear};
