/* config_table.c - reads a YAML section through its field table {key, type, offset, min, max}.
 *
 * The pattern of nginx's directive slots: a section is a table of keys, each with its type,
 * its place in the section's struct and its bounds, so adding a key is one row and every
 * key of every section fails the same way: `FILE:LINE: SECTION.KEY: what`. The top level,
 * `server:`, `engine:`, `auth:`, the caps (config_sections.c, config_tokens.c), `events:`
 * and `agents:` (config_guard.c), `pools:` with its `keys:` entries and `long_context`
 * (config_pools.c, long_context.c) and the features' sections (`fleet:`, `proxy:`,
 * `provider_limits:`, the pools' `ramp*` keys) read here; a row that is more than a
 * number, a flag, a string or a choice names its reader (SL_FIELD_CUSTOM). An unknown key
 * lists the table's keys, and names the nearest when it is one or two edits away.
 * tests/unit/test_config_keys.c checks that every row is documented in docs/server.md
 * and shown in examples/sluice.yaml. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
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
        /* Integer bounds in full (2^53 is 9007199254740992, not 9.0072e+15). */
        if (isinf(max))
            snprintf(what, whatlen, "'%.64s' must be %s of at least %g", s,
                     integer ? "an integer" : "a number", min);
        else if (integer)
            snprintf(what, whatlen, "'%.64s' must be an integer between %.0f and %.0f", s, min,
                     max);
        else
            snprintf(what, whatlen, "'%.64s' must be a number between %g and %g", s, min, max);
        return -1;
    }
    if (integer)
        *(int64_t *)field = (int64_t)d;
    else
        *(double *)field = d;
    return 0;
}

int sl__config_vfail(const sl_config_ctx_t *x, const yaml_node_t *at, const char *fmt, va_list ap)
{
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    snprintf(x->err, x->errlen, "%s:%lu: %s: %s", x->path,
             at ? (unsigned long)at->start_mark.line + 1 : 0UL, x->key, msg);
    return -1;
}

int sl__config_fail(const sl_config_ctx_t *x, const yaml_node_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl__config_vfail(x, at, fmt, ap);
    va_end(ap);
    return -1;
}

int sl__config_string_list(const sl_config_ctx_t *x, yaml_node_t *seq, char ***out, size_t *n_out)
{
    if (!seq || seq->type != YAML_SEQUENCE_NODE) return sl__config_fail(x, seq, "expected a list");
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    char **grown = realloc(*out, (*n_out + n + 1) * sizeof(char *));
    if (!grown) return sl__config_fail(x, seq, "out of memory");
    *out = grown;
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t *e = yaml_document_get_node(x->doc, *it);
        if (!e || e->type != YAML_SCALAR_NODE)
            return sl__config_fail(x, e ? e : seq, "expected a list of single values");
        if (!((*out)[*n_out] = strdup((const char *)e->data.scalar.value)))
            return sl__config_fail(x, e, "out of memory");
        (*n_out)++;
    }
    return 0;
}

/* "'V' must be a, b or c" from a CHOICE row's names. */
static int bad_choice(const sl_config_ctx_t *x, const yaml_node_t *v, const char *s,
                      const char *const *choices)
{
    char list[200];
    size_t n = 0, at = 0;
    while (choices[n])
        n++;
    list[0] = '\0';
    for (size_t i = 0; i < n && at < sizeof(list); i++)
        at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s",
                               i == 0 ? "" : i + 1 == n ? " or " : ", ", choices[i]);
    return sl__config_fail(x, v, "'%.64s' must be %s", s, list);
}

/* Reads node `v` into `dst` as row `f` says; -1 through sl__config_fail. */
static int set_field(const sl_config_ctx_t *x, const sl_config_field_t *f, yaml_node_t *v, char *dst)
{
    if (f->type == SL_FIELD_CUSTOM) return f->read((sl_config_ctx_t *)x, v, dst);
    if (!v || v->type != YAML_SCALAR_NODE)
        return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    const char *s = (const char *)v->data.scalar.value;
    char what[240];
    int64_t n;
    switch (f->type) {
    case SL_FIELD_INT:
    case SL_FIELD_NUMBER:
        if (sl__config_number(s, f->min, f->max, f->type == SL_FIELD_INT, dst, what,
                              sizeof(what)) < 0)
            return sl__config_fail(x, v, "%s", what);
        return 0;
    case SL_FIELD_SIZE:
    case SL_FIELD_INT32:
        if (sl__config_number(s, f->min, f->max, true, &n, what, sizeof(what)) < 0)
            return sl__config_fail(x, v, "%s", what);
        if (f->type == SL_FIELD_INT32)
            *(int *)(void *)dst = (int)n;
        else
            *(size_t *)(void *)dst = (size_t)n;
        return 0;
    case SL_FIELD_BOOL:
        if (f->choices) {
            if (strcmp(s, f->choices[0]) != 0 && strcmp(s, f->choices[1]) != 0)
                return bad_choice(x, v, s, f->choices);
            *(bool *)(void *)dst = !strcmp(s, f->choices[1]);
        } else if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
            *(bool *)(void *)dst = true;
        else if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
            *(bool *)(void *)dst = false;
        else
            return sl__config_fail(x, v, "'%.64s' must be true or false", s);
        return 0;
    case SL_FIELD_STRING:
    case SL_FIELD_OPTIONAL: {
        bool unset = f->type == SL_FIELD_OPTIONAL && !*s;
        char *copy = unset ? NULL : strdup(s);
        if (!unset && !copy) return sl__config_fail(x, v, "out of memory");
        free(*(char **)(void *)dst);
        *(char **)(void *)dst = copy;
        return 0;
    }
    case SL_FIELD_CHOICE:
        for (int i = 0; f->choices[i]; i++)
            if (!strcmp(s, f->choices[i])) {
                *(int *)(void *)dst = i;
                return 0;
            }
        return bad_choice(x, v, s, f->choices);
    case SL_FIELD_CUSTOM:
        break;
    }
    return 0;
}

int sl__config_read_row(const sl_config_ctx_t *x, const sl_config_table_t *t, const char *key,
                        yaml_node_t *v, void *out)
{
    for (size_t i = 0; i < t->n_fields; i++)
        if (!strcmp(t->fields[i].key, key))
            return set_field(x, &t->fields[i], v, (char *)out + t->fields[i].offset) < 0 ? -1 : 1;
    return 0;
}

/* The edit distance of a and b (insertions, deletions, substitutions, a swap of two
 * neighbours), or 99 when either is longer than 63. */
static int distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* "unknown key 'K' (known: a, b, c)" from the table; a long table's list ends in "...", and
 * a key one or two edits from a row's ("inptu_tpm") is named: "; did you mean 'input_tpm'?". */
static int unknown_key(const sl_config_ctx_t *x, const yaml_node_t *k, const sl_config_table_t *t,
                       const char *key)
{
    const char *near = NULL;
    int near_d = 3;
    for (size_t i = 0; i < t->n_fields; i++) {
        int d = distance(key, t->fields[i].key);
        if (d < near_d && (size_t)d * 3 <= strlen(key)) near = t->fields[i].key, near_d = d;
    }
    char known[300];
    size_t at = 0;
    known[0] = '\0';
    for (size_t i = 0; i < t->n_fields; i++) {
        size_t need = strlen(t->fields[i].key) + 2;
        if (at + need + 5 >= sizeof(known)) {
            snprintf(known + at, sizeof(known) - at, ", ...");
            break;
        }
        at += (size_t)snprintf(known + at, sizeof(known) - at, "%s%s", i ? ", " : "",
                               t->fields[i].key);
    }
    if (near)
        return sl__config_fail(x, k, "unknown key '%.64s' (known: %s); did you mean '%s'?", key,
                               known, near);
    return sl__config_fail(x, k, "unknown key '%.64s' (known: %s)", key, known);
}

int sl__config_read_fields(const sl_config_ctx_t *x, yaml_node_t *map, const sl_config_table_t *t,
                           const char *section, void *out)
{
    if (!section) section = t->section;
    sl_config_ctx_t row = *x;
    row.key = *section ? section : "(top level)";
    if (!map || map->type != YAML_MAPPING_NODE)
        return sl__config_fail(&row, map, "expected a mapping of keys to values");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
        row.key = *section ? section : "(top level)";
        if (!k || k->type != YAML_SCALAR_NODE)
            return sl__config_fail(&row, k ? k : map, "keys must be plain names");
        const char *key = (const char *)k->data.scalar.value;
        char full[400];
        if (*section)
            snprintf(full, sizeof(full), "%s.%.64s", section, key);
        else
            snprintf(full, sizeof(full), "%.64s", key);
        row.key = full;
        int rc = sl__config_read_row(&row, t, key, v, out);
        if (rc == 0 && t->other) rc = t->other(&row, key, k, v, out);
        if (rc < 0) return -1;
        if (rc == 0 && t->unknown_at_section) row.key = section;
        if (rc == 0) return unknown_key(&row, k, t, key);
    }
    return 0;
}

int sl__config_read_table(yaml_document_t *doc, yaml_node_t *map, const sl_config_table_t *t,
                          const char *path, void *out, char *err, size_t errlen)
{
    sl_config_ctx_t x = {.doc = doc, .path = path, .err = err, .errlen = errlen};
    return sl__config_read_fields(&x, map, t, NULL, out);
}

int sl__config_read_url(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = v && v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    if (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0)
        return sl__config_fail(x, v, "'%.200s' must start with http:// or https://", s);
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return sl__config_fail(x, v, "'%.200s' contains a space or control character", s);
    char *copy = strdup(s);
    if (!copy) return sl__config_fail(x, v, "out of memory");
    size_t n = strlen(copy);
    while (n > 0 && copy[n - 1] == '/')
        copy[--n] = '\0';
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
}
