/* config_table.c - reads a flat YAML section through its field table {key, type, offset, min, max}.
 *
 * The pattern of nginx's directive slots: a section is a table of keys, each with its type,
 * its place in the section's struct and its bounds, so adding a key is one row and every
 * key of every table section fails the same way: `FILE:LINE: SECTION.KEY: what`. The
 * `fleet:`, `events:` and `agents:` sections read here; the pools' table (config.c) has
 * three structs behind it and its own types. tests/integration/install/config_keys.py
 * checks that every row is documented in docs/server.md and examples/sluice.yaml. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

int sl__config_number(const char *s, double min, double max, bool integer, void *field,
                      char *what, size_t whatlen)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(d) || d < min || d > max ||
        (integer && d != floor(d))) {
        snprintf(what, whatlen, "'%.64s' must be %s between %g and %g", s,
                 integer ? "an integer" : "a number", min, max);
        return -1;
    }
    if (integer)
        *(int64_t *)field = (int64_t)d;
    else
        *(double *)field = d;
    return 0;
}

static int fail(char *err, size_t errlen, const char *path, const yaml_node_t *at,
                const char *section, const char *key, const char *what)
{
    snprintf(err, errlen, "%s:%lu: %s.%s: %s", path,
             at ? (unsigned long)at->start_mark.line + 1 : 0UL, section, key, what);
    return -1;
}

/* Reads scalar `s` into the struct at `out` as row `f` says; -1 with `what` filled. */
static int set_field(const sl_config_field_t *f, const char *s, char *out, char *what,
                     size_t whatlen)
{
    if (f->type != SL_FIELD_BOOL)
        return sl__config_number(s, f->min, f->max, f->type == SL_FIELD_INT, out + f->offset,
                                 what, whatlen);
    if (strcmp(s, "true") != 0 && strcmp(s, "false") != 0) {
        snprintf(what, whatlen, "'%.64s' must be true or false", s);
        return -1;
    }
    *(bool *)(void *)(out + f->offset) = !strcmp(s, "true");
    return 0;
}

/* "unknown key 'K' (known: a, b, c)" from the table. */
static void unknown_key(const sl_config_table_t *t, const char *key, char *what, size_t whatlen)
{
    int at = snprintf(what, whatlen, "unknown key '%.64s' (known:", key);
    for (size_t i = 0; i < t->n_fields && at > 0 && (size_t)at < whatlen; i++)
        at += snprintf(what + at, whatlen - (size_t)at, "%s %s", i ? "," : "", t->fields[i].key);
    if (at > 0 && (size_t)at < whatlen) snprintf(what + at, whatlen - (size_t)at, ")");
}

int sl__config_read_table(yaml_document_t *doc, yaml_node_t *map, const sl_config_table_t *t,
                          const char *path, void *out, char *err, size_t errlen)
{
    if (!map || map->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%lu: %s: expected a mapping", path,
                 map ? (unsigned long)map->start_mark.line + 1 : 0UL, t->section);
        return -1;
    }
    char *scratch = malloc(t->size);
    if (!scratch) return fail(err, errlen, path, map, t->section, "?", "out of memory");
    memcpy(scratch, out, t->size);
    char what[400];
    int rc = 0;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
         rc == 0 && p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE) {
            rc = fail(err, errlen, path, map, t->section, "?", "keys must be plain names");
            break;
        }
        const char *key = (const char *)k->data.scalar.value;
        if (v->type != YAML_SCALAR_NODE) {
            rc = fail(err, errlen, path, v, t->section, key, "expected a single value");
            break;
        }
        const sl_config_field_t *f = NULL;
        for (size_t i = 0; i < t->n_fields && !f; i++)
            if (!strcmp(t->fields[i].key, key)) f = &t->fields[i];
        if (!f) {
            unknown_key(t, key, what, sizeof(what));
            rc = fail(err, errlen, path, k, t->section, key, what);
        } else if (set_field(f, (const char *)v->data.scalar.value, scratch, what,
                             sizeof(what)) < 0) {
            rc = fail(err, errlen, path, v, t->section, key, what);
        }
    }
    if (rc == 0) memcpy(out, scratch, t->size);
    free(scratch);
    return rc;
}
