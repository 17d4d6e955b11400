/* test_config_keys.c - every key of sluiced's config field tables (the core's sections, the
 * pools' tables of config_pools.c and long_context.c, all read by config_table.c, and each feature's section and pool
 * keys from the feature table) is documented (docs/server.md; the proxy's keys in docs/proxy.md) and
 * shown in examples/sluice.yaml, so a new row cannot land undocumented.
 * (example_config_has_every_key checks the top-level keys.) */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "feature.h"
#include "test_main.h"

static char *slurp(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", SL_SOURCE_DIR, rel);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static bool word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* `key` as a whole word at p (not part of a longer name). */
static bool word_at(const char *text, const char *p, const char *key)
{
    size_t n = strlen(key);
    return (p == text || !word_char(p[-1])) && !word_char(p[n]);
}

/* docs/server.md names the key inside `code` (a table row's `pools.NAME.key`, `key`, or
 * a list of them). */
static bool documented(const char *doc, const char *key)
{
    for (const char *p = strstr(doc, key); p; p = strstr(p + 1, key)) {
        if (!word_at(doc, p, key)) continue;
        const char *open = p;
        while (open > doc && open[-1] != '`' && open[-1] != '\n')
            open--;
        const char *close = p + strlen(key);
        while (*close && *close != '`' && *close != '\n')
            close++;
        if (open > doc && open[-1] == '`' && *close == '`') return true;
    }
    return false;
}

/* examples/sluice.yaml shows it as `key:`, set or in a comment. */
static bool in_example(const char *example, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = strstr(example, key); p; p = strstr(p + 1, key))
        if (word_at(example, p, key) && p[n] == ':') return true;
    return false;
}

static void check_key(const char *doc, const char *example, const char *section, const char *key,
                      int *missing)
{
    if (!documented(doc, key)) {
        print_error("%s.%s is not documented (docs/server.md, docs/proxy.md)\n", section, key);
        (*missing)++;
    }
    if (!in_example(example, key)) {
        print_error("%s.%s is not in examples/sluice.yaml\n", section, key);
        (*missing)++;
    }
}

static void test_every_table_key_is_documented_and_in_the_example(void **state)
{
    (void)state;
    char *doc = slurp("docs/server.md");
    char *example = slurp("examples/sluice.yaml");
    char *proxy_doc = slurp("docs/proxy.md");
    int missing = 0;
    assert_true(sl__pool_table.n_fields > 30); /* the pools' table is there */
    /* The core's tables, then each feature's section and pool keys (feature.h). */
    const sl_config_table_t *tables[] = {
        &sl__root_table,       &sl__server_table,    &sl__engine_table,
        &sl__auth_table,       &sl__agent_caps_table, &sl__team_caps_table,
        &sl__events_table,     &sl__agents_table,    &sl__pool_table,
        &sl__pool_key_table,   &sl__long_context_table};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        assert_true(tables[t]->n_fields > 0);
        for (size_t i = 0; i < tables[t]->n_fields; i++)
            check_key(doc, example, tables[t]->section, tables[t]->fields[i].key, &missing);
    }
    size_t n_feature_tables = 0;
    for (size_t f = 0; f < SL_FEATURE_COUNT; f++) {
        const sl_config_section_t *cs = sl__features[f]->config;
        const sl_config_table_t *own[] = {cs ? cs->table : NULL, cs ? cs->pool_table : NULL};
        for (size_t t = 0; t < 2; t++) {
            if (!own[t]) continue;
            n_feature_tables++;
            const char *where = !strcmp(sl__features[f]->name, "proxy") ? proxy_doc : doc;
            for (size_t i = 0; i < own[t]->n_fields; i++)
                check_key(where, example, own[t]->section, own[t]->fields[i].key, &missing);
        }
    }
    assert_true(n_feature_tables >= 3); /* fleet:, proxy: and the pools' ramp keys */
    free(doc);
    free(proxy_doc);
    free(example);
    assert_int_equal(missing, 0);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_every_table_key_is_documented_and_in_the_example))
