/* config_tokens.c - the YAML side of agent tokens: token entries, `tiers:`, the tokens_file.
 *
 * A token entry reads the same in `auth.tokens` (with `token:`, plaintext) and in the
 * tokens_file (with `sha256:`, the hex SHA-256 of the token): who it acts as, its tier,
 * and any bound field of tokens.c's table, which overrides the tier's. The tokens_file is
 * a YAML file of its own (`tokens: [...]`), read on every load and reload, its errors as
 * "FILE:LINE: tokens[].KEY: ..." like the configuration's.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#define DEFAULT_MAX_MINTED 10000
#define MAX_MINTED_CEILING 10000000
#define MIN_MULTIPLIER     0.01 /* a tier's limit_multiplier: 1/100 to 1000 times the limits */
#define MAX_MULTIPLIER     1000

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static unsigned long line_of(const yaml_node_t *n)
{
    return n ? (unsigned long)n->start_mark.line + 1 : 0UL;
}

static int fail(char *err, size_t errlen, const char *path, const yaml_node_t *at, const char *key,
                const char *what)
{
    snprintf(err, errlen, "%s:%lu: %s: %s", path, line_of(at), key, what);
    return -1;
}

/* One bound field from its YAML value (a scalar, or a list of scalars). */
static int set_bound(yaml_document_t *doc, sl_token_bounds_t *b, const char *name, yaml_node_t *v,
                     const char *path, const char *key, const char *also, char *err, size_t errlen)
{
    char what[400];
    int rc;
    if (v && v->type == YAML_SEQUENCE_NODE) {
        size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
        char **items = calloc(n ? n : 1, sizeof(*items));
        if (!items) return fail(err, errlen, path, v, key, "out of memory");
        for (size_t i = 0; i < n; i++) {
            items[i] = (char *)scalar(yaml_document_get_node(doc, v->data.sequence.items.start[i]));
            if (!items[i]) {
                free(items);
                return fail(err, errlen, path, v, key, "expected a list of names");
            }
        }
        rc = sl__token_bound_set(b, name, NULL, items, n, true, what, sizeof what);
        free(items);
    } else if (scalar(v)) {
        rc = sl__token_bound_set(b, name, scalar(v), NULL, 0, false, what, sizeof what);
    } else {
        return fail(err, errlen, path, v, key, "expected a value or a list of names");
    }
    if (rc == -2) { /* the key's line, and the keys an entry knows besides the bounds */
        size_t at = strlen(what);
        if (also && at > 0 && at + strlen(also) + 2 < sizeof what)
            snprintf(what + at - 1, sizeof what - at + 1, " %s)", also);
        char base[128];
        snprintf(base, sizeof base, "%.*s", (int)(strrchr(key, '.') - key), key);
        return fail(err, errlen, path, v, base, what);
    }
    return rc < 0 ? fail(err, errlen, path, v, key, what) : 0;
}

/* ---- a token entry's table (auth.tokens[] or a tokens_file entry) ---------------------- */

/* A secret (a token, the admin token): at least 8 characters. */
static int read_secret(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = scalar(v);
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    if (strlen(s) < 8) return sl__config_fail(x, v, "must be at least 8 characters");
    char *copy = strdup(s);
    if (!copy) return sl__config_fail(x, v, "out of memory");
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
}

static int read_sha256(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = scalar(v);
    if (!s || sl__token_sha256_parse(s, field) < 0)
        return sl__config_fail(x, v, "expected the 64 hex digits of the token's SHA-256 "
                                     "(printf %%s TOKEN | sha256sum)");
    return 0;
}

static int read_id(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = scalar(v);
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    if (!*s || strlen(s) > 128) return sl__config_fail(x, v, "must be 1-128 characters");
    char *copy = strdup(s);
    if (!copy) return sl__config_fail(x, v, "out of memory");
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
}

/* A key no row names is a bound field of the token's own (x->arg: the entry's other keys,
 * for the message that lists what an entry knows). */
static int read_own_bound(sl_config_ctx_t *x, const char *key, yaml_node_t *k, yaml_node_t *v,
                          void *out)
{
    (void)k;
    sl_token_rule_t *r = out;
    return set_bound(x->doc, &r->meta.own, key, v, x->path, x->key, x->arg, x->err, x->errlen) < 0
               ? -1
               : 1;
}

#define TOK(key, member, type, fn) {#key, type, offsetof(sl_token_rule_t, member), 0, 0, NULL, fn}
#define WHO                                                                                        \
    TOK(agent, agent, SL_FIELD_STRING, NULL), TOK(agent_prefix, agent_prefix, SL_FIELD_STRING, NULL), \
        TOK(tier, meta.tier, SL_FIELD_STRING, NULL), TOK(id, meta.id, SL_FIELD_CUSTOM, read_id)
static const sl_config_field_t config_token_fields[] = {
    TOK(token, token, SL_FIELD_CUSTOM, read_secret), WHO};
static const sl_config_field_t file_token_fields[] = {
    TOK(sha256, meta.sha256, SL_FIELD_CUSTOM, read_sha256), WHO};
#undef WHO
#undef TOK
static const sl_config_table_t config_token_table = {
    "auth.tokens[]", sizeof(sl_token_rule_t), config_token_fields,
    sizeof(config_token_fields) / sizeof(config_token_fields[0]), read_own_bound, true};
static const sl_config_table_t file_token_table = {
    "tokens[]", sizeof(sl_token_rule_t), file_token_fields,
    sizeof(file_token_fields) / sizeof(file_token_fields[0]), read_own_bound, true};

int sl__config_parse_token(yaml_document_t *doc, yaml_node_t *map, const char *path,
                           const char *key, bool hashed, sl_token_rule_t *r, char *err,
                           size_t errlen)
{
    static const unsigned char unset[SL_TOKEN_SHA256_BYTES];
    sl_config_ctx_t x = {.doc = doc, .path = path, .key = key, .err = err, .errlen = errlen,
                         .arg = hashed ? "sha256 agent agent_prefix tier id"
                                       : "token agent agent_prefix tier id"};
    r->meta.line = (int)line_of(map);
    if (sl__config_read_fields(&x, map, hashed ? &file_token_table : &config_token_table, key, r) <
        0)
        return -1;
    if (hashed && !memcmp(r->meta.sha256, unset, sizeof(unset)))
        return fail(err, errlen, path, map, key,
                    "every entry needs `sha256:` (the token's SHA-256)");
    if (!hashed && !r->token)
        return fail(err, errlen, path, map, key,
                    "every token needs a `token` of at least 8 characters");
    if (!r->agent == !r->agent_prefix)
        return fail(err, errlen, path, map, key, "give exactly one of `agent` or `agent_prefix`");
    if (!hashed) sl__token_sha256(r->token, r->meta.sha256);
    r->meta.source = hashed ? SL_TOKEN_FILE : SL_TOKEN_CONFIG;
    return 0;
}

/* A tier's `limit_multiplier`: a number in [MIN_MULTIPLIER, MAX_MULTIPLIER]. */
static int parse_multiplier(const yaml_node_t *v, const char *path, const char *key, double *out,
                            char *err, size_t errlen)
{
    char what[200];
    const char *s = scalar(v);
    if (!s) return fail(err, errlen, path, v, key, "expected a number, not a list or a mapping");
    if (sl__config_number(s, MIN_MULTIPLIER, MAX_MULTIPLIER, false, out, what, sizeof what) < 0)
        return fail(err, errlen, path, v, key, what);
    return 0;
}

int sl__config_parse_tiers(yaml_document_t *doc, yaml_node_t *section, const char *path,
                           sl_token_config_t *cfg, char *err, size_t errlen)
{
    if (!section || section->type != YAML_MAPPING_NODE)
        return fail(err, errlen, path, section, "tiers", "expected a mapping of tier names");
    for (yaml_node_pair_t *pr = section->data.mapping.pairs.start;
         pr < section->data.mapping.pairs.top; pr++) {
        yaml_node_t *k = yaml_document_get_node(doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(doc, pr->value);
        const char *name = scalar(k);
        if (!name || !*name || strlen(name) > 64)
            return fail(err, errlen, path, k, "tiers", "a tier name must be 1-64 characters");
        char key[96];
        snprintf(key, sizeof key, "tiers.%s", name);
        if (sl__tier_find(cfg, name)) return fail(err, errlen, path, k, key, "named twice");
        if (!v || v->type != YAML_MAPPING_NODE)
            return fail(err, errlen, path, v, key, "expected a mapping of bounds");
        sl_tier_t *grown = realloc(cfg->tiers, (cfg->n_tiers + 1) * sizeof(*grown));
        if (!grown) return fail(err, errlen, path, v, key, "out of memory");
        cfg->tiers = grown;
        sl_tier_t *t = &grown[cfg->n_tiers];
        memset(t, 0, sizeof(*t));
        if (!(t->name = strdup(name))) return fail(err, errlen, path, v, key, "out of memory");
        t->line = (int)line_of(k);
        cfg->n_tiers++;
        for (yaml_node_pair_t *f = v->data.mapping.pairs.start; f < v->data.mapping.pairs.top;
             f++) {
            yaml_node_t *fk = yaml_document_get_node(doc, f->key);
            const char *fname = scalar(fk);
            char fkey[192];
            snprintf(fkey, sizeof fkey, "%s.%s", key, fname ? fname : "?");
            if (!fname) return fail(err, errlen, path, fk, key, "keys must be plain names");
            if (!strcmp(fname, "limit_multiplier")) {
                if (parse_multiplier(yaml_document_get_node(doc, f->value), path, fkey,
                                     &t->limit_multiplier, err, errlen) < 0)
                    return -1;
                continue;
            }
            if (set_bound(doc, &t->bounds, fname, yaml_document_get_node(doc, f->value), path, fkey,
                          "limit_multiplier", err, errlen) < 0)
                return -1;
        }
    }
    return 0;
}

/* `name` against the directory of `config_path` when relative. */
static char *beside(const char *config_path, const char *name)
{
    const char *slash = strrchr(config_path, '/');
    if (name[0] == '/' || !slash) return strdup(name);
    size_t dir = (size_t)(slash - config_path) + 1, n = dir + strlen(name) + 1;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%.*s%s", (int)dir, config_path, name);
    return out;
}

/* ---- the `auth:` section's table (read by config_table.c into sl_config_t) --------------- */

/* auth.tokens: a list of token mappings (resolved in sl__config_tokens_finish). */
static int read_tokens(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    sl_config_t *c = x->c;
    if (!v || v->type != YAML_SEQUENCE_NODE) return sl__config_fail(x, v, "expected a list");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    sl_token_rule_t *grown = realloc(c->tokens, (c->n_tokens + n + 1) * sizeof(*grown));
    if (!grown) return sl__config_fail(x, v, "out of memory");
    c->tokens = grown;
    memset(grown + c->n_tokens, 0, (n + 1) * sizeof(*grown));
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++)
        if (sl__config_parse_token(x->doc, yaml_document_get_node(x->doc, *it), x->path,
                                   "auth.tokens[]", false, &c->tokens[c->n_tokens++], x->err,
                                   x->errlen) < 0)
            return -1;
    return 0;
}

/* tokens_file, minted_file: a file name, against the configuration's directory. */
static int read_file_name(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = scalar(v);
    if (!s || !*s) return sl__config_fail(x, v, "expected a file name");
    char *full = beside(x->path, s);
    if (!full) return sl__config_fail(x, v, "out of memory");
    free(*(char **)field);
    *(char **)field = full;
    return 0;
}

#define AUTH(key, member, fn) {#key, SL_FIELD_CUSTOM, offsetof(sl_config_t, member), 0, 0, NULL, fn}
static const sl_config_field_t auth_fields[] = {
    AUTH(admin_token, admin_token, read_secret), /* a secret as a token's: 8 or more */
    AUTH(tokens, tokens, read_tokens),
    AUTH(tokens_file, token_cfg.tokens_file, read_file_name),
    AUTH(minted_file, token_cfg.minted_file, read_file_name),
    {"max_minted_tokens", SL_FIELD_INT, offsetof(sl_config_t, token_cfg.max_minted), 1,
     MAX_MINTED_CEILING, NULL, NULL},
};
#undef AUTH
const sl_config_table_t sl__auth_table = SL_CONFIG_TABLE("auth", sl_config_t, auth_fields);

/* Reads the tokens_file's entries onto the end of c->tokens. */
static int load_tokens_file(sl_config_t *c, char *err, size_t errlen)
{
    const char *path = c->token_cfg.tokens_file;
    yaml_document_t doc;
    int rc = -1;
    bool have_doc = false;
    char why[512];
    if (sl__config_yaml_load(path, &doc, why, sizeof why) < 0) {
        snprintf(err, errlen, "auth.tokens_file: %s", why); /* which key named the file */
        goto done;
    }
    have_doc = true;
    yaml_node_t *root = yaml_document_get_root_node(&doc), *list = NULL;
    if (!root) { /* an empty file: no tokens */
        rc = 0;
        goto done;
    }
    if (root->type != YAML_MAPPING_NODE) {
        fail(err, errlen, path, root, "(top level)", "expected `tokens:` (a list of entries)");
        goto done;
    }
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = yaml_document_get_node(&doc, pr->key);
        const char *kname = scalar(k);
        if (!kname || strcmp(kname, "tokens") != 0) {
            snprintf(err, errlen, "%s:%lu: %s: unknown key (known: tokens)", path, line_of(k),
                     kname ? kname : "?");
            goto done;
        }
        list = yaml_document_get_node(&doc, pr->value);
    }
    if (!list || list->type != YAML_SEQUENCE_NODE) {
        fail(err, errlen, path, list ? list : root, "tokens", "expected a list of entries");
        goto done;
    }
    size_t n = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
    if (n > SL_TOKEN_MAX_FILE_TOKENS) {
        char what[96];
        snprintf(what, sizeof what, "%zu entries, at most %d", n, SL_TOKEN_MAX_FILE_TOKENS);
        fail(err, errlen, path, list, "tokens", what);
        goto done;
    }
    sl_token_rule_t *grown = realloc(c->tokens, (c->n_tokens + n + 1) * sizeof(*grown));
    if (!grown) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto done;
    }
    c->tokens = grown;
    for (size_t i = 0; i < n; i++) {
        sl_token_rule_t *r = &c->tokens[c->n_tokens++];
        memset(r, 0, sizeof(*r));
        if (sl__config_parse_token(&doc,
                                   yaml_document_get_node(&doc, list->data.sequence.items.start[i]),
                                   path, "tokens[]", true, r, err, errlen) < 0)
            goto done;
    }
    rc = 0;
done:
    if (have_doc) yaml_document_delete(&doc);
    return rc;
}

int sl__config_tokens_finish(sl_config_t *c, const char *path, char *err, size_t errlen)
{
    sl_token_config_t *cfg = &c->token_cfg;
    if (!cfg->max_minted) cfg->max_minted = DEFAULT_MAX_MINTED;
    if (!cfg->minted_file && c->state_file) {
        size_t n = strlen(c->state_file) + sizeof ".tokens";
        if (!(cfg->minted_file = malloc(n))) return snprintf(err, errlen, "out of memory"), -1;
        snprintf(cfg->minted_file, n, "%s.tokens", c->state_file);
    }
    size_t n_config = c->n_tokens;
    if (cfg->tokens_file) sl__file_stamp(cfg->tokens_file, &cfg->tokens_file_read);
    if (cfg->tokens_file && load_tokens_file(c, err, errlen) < 0) return -1;
    sl__token_index_free(cfg->index);
    if (!(cfg->index = sl__token_index_new(c->n_tokens)))
        return snprintf(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < c->n_tokens; i++) {
        sl_token_rule_t *r = &c->tokens[i], *dup = NULL;
        const char *file = i < n_config ? path : cfg->tokens_file;
        const char *key = i < n_config ? "auth.tokens[]" : "tokens[]";
        char what[400], id[160];
        if (!r->meta.id) {
            snprintf(id, sizeof id, "%s:%d", i < n_config ? "config" : "file", r->meta.line);
            if (!(r->meta.id = strdup(id))) return snprintf(err, errlen, "out of memory"), -1;
        }
        if (sl__token_resolve(r, cfg, what, sizeof what) < 0) {
            snprintf(err, errlen, "%s:%d: %s.%s", file, r->meta.line, key, what);
            return -1;
        }
        if (sl__token_index_add(cfg->index, r, &dup) < 0) {
            snprintf(err, errlen, "%s:%d: %s: the same token is listed twice (also %s)", file,
                     r->meta.line, key, dup ? dup->meta.id : "?");
            return -1;
        }
    }
    return 0;
}

void sl__file_stamp(const char *path, sl_file_stamp_t *out)
{
    struct stat st;
    memset(out, 0, sizeof(*out));
    if (stat(path, &st) < 0) return;
    out->present = true;
    out->inode = (long long)st.st_ino;
    out->size_bytes = (long long)st.st_size;
    out->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

bool sl__file_stamp_equal(const sl_file_stamp_t *a, const sl_file_stamp_t *b)
{
    return a->present == b->present && a->inode == b->inode && a->size_bytes == b->size_bytes &&
           a->mtime_ns == b->mtime_ns;
}

void sl__token_config_clear(sl_token_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_tiers; i++) {
        free(cfg->tiers[i].name);
        sl__token_bounds_clear(&cfg->tiers[i].bounds);
    }
    free(cfg->tiers);
    free(cfg->tokens_file);
    free(cfg->minted_file);
    sl__token_index_free(cfg->index);
    memset(cfg, 0, sizeof(*cfg));
}
