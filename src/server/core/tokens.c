/* tokens.c - agent tokens by SHA-256: the index, the bounds' one field table, tier resolution.
 *
 * Why SHA-256 and not a password KDF: every token sluiced accepts from a tokens_file or
 * mints is 256 random bits (`sluice token create`, or `openssl rand -hex 32`), so there
 * is no dictionary to slow down: a KDF's work factor buys nothing against 2^256 guesses,
 * and would cost a KDF run on every request of every agent. A digest also gives the
 * index its key: the presented token is hashed once and looked up in O(1) in the common
 * string map (src/common/map.c, by the digest's hex), instead of compared with each of
 * 2,000 tokens. A lookup's timing can tell at most how much of a stored *digest* a guess's
 * digest shares, which brings no one closer to a token (SHA-256 has no known preimages).
 */
#include "config.h"
#include "../../common/map.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

void sl__token_sha256(const char *secret, unsigned char out[SL_TOKEN_SHA256_BYTES])
{
    unsigned int n = 0;
    if (EVP_Digest(secret, strlen(secret), out, &n, EVP_sha256(), NULL) != 1 ||
        n != SL_TOKEN_SHA256_BYTES)
        memset(out, 0, SL_TOKEN_SHA256_BYTES); /* matches no token: every stored one is set */
}

int sl__token_sha256_parse(const char *hex, unsigned char out[SL_TOKEN_SHA256_BYTES])
{
    if (strlen(hex) != 2 * SL_TOKEN_SHA256_BYTES) return -1;
    for (size_t i = 0; i < SL_TOKEN_SHA256_BYTES; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char ch = hex[2 * i + (size_t)k];
            unsigned d;
            if (ch >= '0' && ch <= '9')
                d = (unsigned)(ch - '0');
            else if (ch >= 'a' && ch <= 'f')
                d = (unsigned)(ch - 'a' + 10);
            else if (ch >= 'A' && ch <= 'F')
                d = (unsigned)(ch - 'A' + 10);
            else
                return -1;
            v = v * 16 + d;
        }
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* ---- the index: the common string map (src/common/map.c) keyed by the digest in hex ---- */

struct sl_token_index {
    sl_strmap_t by_sha; /* 64 hex digits (owned copies) -> sl_token_rule_t * (borrowed) */
    size_t max;         /* the most it holds: the n it was made for */
};

/* The map's key of a digest: its 64 lowercase hex digits. */
static void sha_key(const unsigned char sha[SL_TOKEN_SHA256_BYTES],
                    char key[2 * SL_TOKEN_SHA256_BYTES + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < SL_TOKEN_SHA256_BYTES; i++) {
        key[2 * i] = digits[sha[i] >> 4];
        key[2 * i + 1] = digits[sha[i] & 15];
    }
    key[2 * SL_TOKEN_SHA256_BYTES] = '\0';
}

sl_token_index_t *sl__token_index_new(size_t n)
{
    sl_token_index_t *ix = calloc(1, sizeof(*ix));
    if (!ix || sl_strmap_reserve(&ix->by_sha, n) < 0) {
        free(ix);
        return NULL;
    }
    ix->max = n;
    return ix;
}

int sl__token_index_add(sl_token_index_t *ix, sl_token_rule_t *r, sl_token_rule_t **dup)
{
    char key[2 * SL_TOKEN_SHA256_BYTES + 1];
    sha_key(r->meta.sha256, key);
    sl_token_rule_t *in = sl_strmap_get(&ix->by_sha, key);
    if (in) {
        if (dup) *dup = in;
        return -1;
    }
    if (ix->by_sha.len >= ix->max || !sl_strmap_put_copy(&ix->by_sha, key, r)) return -2;
    return 0;
}

sl_token_rule_t *sl__token_index_find(const sl_token_index_t *ix,
                                      const unsigned char sha[SL_TOKEN_SHA256_BYTES])
{
    if (!ix) return NULL;
    char key[2 * SL_TOKEN_SHA256_BYTES + 1];
    sha_key(sha, key);
    return sl_strmap_get(&ix->by_sha, key);
}

void sl__token_index_remove(sl_token_index_t *ix, const sl_token_rule_t *r)
{
    char key[2 * SL_TOKEN_SHA256_BYTES + 1];
    sha_key(r->meta.sha256, key);
    if (sl_strmap_get(&ix->by_sha, key) == r) sl_strmap_del_copy(&ix->by_sha, key);
}

void sl__token_index_free(sl_token_index_t *ix)
{
    if (!ix) return;
    sl_strmap_free_keys(&ix->by_sha);
    free(ix);
}

/* ---- the bound fields: one table for tiers, YAML tokens, tokens_file and the API ---- */

typedef enum { K_LIST, K_INT, K_SHARE, K_MONEY, K_BOOL } kind_t;

/* One bound field: its name, its bit in `set`, its kind (how it is read and written), its
 * largest value, and where it lives in sl_token_bounds_t (K_LIST: the char ** and, at
 * count_at, its size_t count; K_INT: int64_t; K_SHARE, K_MONEY: double; K_BOOL: bool). */
static const struct bound_field {
    const char *name;
    unsigned bit;
    kind_t kind;
    double max;
    size_t at, count_at;
} fields[] = {
    {"roles", SL_TB_ROLES, K_LIST, 0, offsetof(sl_token_bounds_t, roles),
     offsetof(sl_token_bounds_t, n_roles)},
    {"pools", SL_TB_POOLS, K_LIST, 0, offsetof(sl_token_bounds_t, pools),
     offsetof(sl_token_bounds_t, n_pools)},
    {"priorities", SL_TB_PRIORITIES, K_LIST, 0, offsetof(sl_token_bounds_t, priorities),
     offsetof(sl_token_bounds_t, n_priorities)},
    {"max_unblocks", SL_TB_MAX_UNBLOCKS, K_INT, 1000000, offsetof(sl_token_bounds_t, max_unblocks),
     0},
    {"resync", SL_TB_RESYNC, K_BOOL, 0, offsetof(sl_token_bounds_t, resync), 0},
    {"max_share", SL_TB_MAX_SHARE, K_SHARE, 1, offsetof(sl_token_bounds_t, caps.max_share), 0},
    {"max_rpm", SL_TB_MAX_RPM, K_INT, 1e12, offsetof(sl_token_bounds_t, caps.max_rpm), 0},
    {"max_concurrent", SL_TB_MAX_CONCURRENT, K_INT, 1e9,
     offsetof(sl_token_bounds_t, caps.max_concurrent), 0},
    {"budget_usd_per_hour", SL_TB_BUDGET_HOUR, K_MONEY, 1e12,
     offsetof(sl_token_bounds_t, caps.budget_usd_per_hour), 0},
    {"budget_usd_per_day", SL_TB_BUDGET_DAY, K_MONEY, 1e12,
     offsetof(sl_token_bounds_t, caps.budget_usd_per_day), 0},
};
#define N_FIELDS (sizeof(fields) / sizeof(fields[0]))

#define MAX_LIST_ITEMS 256

/* The field's place in `b`. */
#define AT(b, f, type) ((type *)((char *)(b) + (f)->at))
#define COUNT_AT(b, f) ((size_t *)((char *)(b) + (f)->count_at))

static const struct bound_field *field_named(const char *name)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (!strcmp(fields[i].name, name)) return &fields[i];
    return NULL;
}

static void free_list(char **l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(l[i]);
    free(l);
}

static int set_list(sl_token_bounds_t *b, const struct bound_field *f, char *const *items, size_t n,
                    char *what, size_t whatlen)
{
    if (n > MAX_LIST_ITEMS) {
        snprintf(what, whatlen, "%zu names, at most %d", n, MAX_LIST_ITEMS);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(items[i]);
        if (len == 0 || len > 128) {
            snprintf(what, whatlen, "'%.64s' must be 1-128 characters", items[i]);
            return -1;
        }
    }
    char **copy = calloc(n ? n : 1, sizeof(*copy));
    for (size_t i = 0; copy && i < n; i++)
        if (!(copy[i] = strdup(items[i]))) {
            free_list(copy, i);
            copy = NULL;
        }
    if (!copy) {
        snprintf(what, whatlen, "out of memory");
        return -1;
    }
    char ***slot = AT(b, f, char **);
    free_list(*slot, *COUNT_AT(b, f));
    *slot = copy;
    *COUNT_AT(b, f) = n;
    return 0;
}

static int set_scalar(sl_token_bounds_t *b, const struct bound_field *f, const char *s, char *what,
                      size_t whatlen)
{
    if (f->kind == K_BOOL) {
        if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
            *AT(b, f, bool) = true;
        else if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
            *AT(b, f, bool) = false;
        else
            return snprintf(what, whatlen, "'%.64s' is not true or false", s), -1;
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    bool integer = f->kind == K_INT;
    double max = f->max;
    if (errno || end == s || *end || !isfinite(v) || v < 0 || v > max ||
        (integer && v != floor(v))) {
        snprintf(what, whatlen, "'%.64s' must be %s between 0 and %g", s,
                 integer ? "a whole number" : "a number", max);
        return -1;
    }
    if (integer)
        *AT(b, f, int64_t) = (int64_t)v;
    else
        *AT(b, f, double) = v;
    return 0;
}

static void known_fields(char *what, size_t whatlen, const char *name)
{
    int at = snprintf(what, whatlen, "unknown key '%.64s' (known:", name);
    for (size_t i = 0; i < N_FIELDS && at > 0 && (size_t)at < whatlen; i++)
        at += snprintf(what + at, whatlen - (size_t)at, " %s", fields[i].name);
    if (at > 0 && (size_t)at < whatlen) snprintf(what + at, whatlen - (size_t)at, ")");
}

int sl__token_bound_set(sl_token_bounds_t *b, const char *name, const char *value,
                        char *const *items, size_t n, bool is_list, char *what, size_t whatlen)
{
    const struct bound_field *f = field_named(name);
    if (!f) return known_fields(what, whatlen, name), -2;
    if ((f->kind == K_LIST) != is_list) {
        snprintf(what, whatlen,
                 f->kind == K_LIST ? "expected a list of names"
                                   : "expected a single value, not a list");
        return -1;
    }
    int rc =
        is_list ? set_list(b, f, items, n, what, whatlen) : set_scalar(b, f, value, what, whatlen);
    if (rc == 0) b->set |= f->bit;
    return rc;
}

int sl__token_bound_set_json(sl_token_bounds_t *b, const char *name, json_t *v, char *what,
                             size_t whatlen)
{
    const struct bound_field *f = field_named(name);
    if (!f) return known_fields(what, whatlen, name), -2;
    if (f->kind == K_LIST) {
        size_t n = json_is_array(v) ? json_array_size(v) : 0;
        if (!json_is_array(v) || n > MAX_LIST_ITEMS)
            return snprintf(what, whatlen, "expected a list of at most %d names", MAX_LIST_ITEMS),
                   -1;
        char *items[MAX_LIST_ITEMS];
        for (size_t i = 0; i < n; i++) {
            items[i] = (char *)json_string_value(json_array_get(v, i));
            if (!items[i]) return snprintf(what, whatlen, "item %zu is not a string", i), -1;
        }
        return sl__token_bound_set(b, name, NULL, items, n, true, what, whatlen);
    }
    char text[64];
    if (f->kind == K_BOOL && json_is_boolean(v))
        snprintf(text, sizeof text, "%s", json_is_true(v) ? "true" : "false");
    else if (f->kind != K_BOOL && json_is_integer(v))
        snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
    else if (f->kind != K_BOOL && json_is_real(v))
        snprintf(text, sizeof text, "%.17g", json_real_value(v));
    else
        return snprintf(what, whatlen, "expected %s",
                        f->kind == K_BOOL ? "true or false" : "a number"),
               -1;
    return sl__token_bound_set(b, name, text, NULL, 0, false, what, whatlen);
}

static json_t *list_json(char **l, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(l[i]));
    return a;
}

/* The value of field `f` of `b` as JSON. */
static json_t *field_json(const sl_token_bounds_t *b, const struct bound_field *f)
{
    sl_token_bounds_t *m = (sl_token_bounds_t *)b; /* AT() casts; nothing is written */
    switch (f->kind) {
    case K_LIST:
        return list_json(*AT(m, f, char **), *COUNT_AT(m, f));
    case K_INT:
        return json_integer(*AT(m, f, int64_t));
    case K_BOOL:
        return json_boolean(*AT(m, f, bool));
    default:
        return json_real(*AT(m, f, double));
    }
}

json_t *sl__token_bounds_json(const sl_token_bounds_t *b)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < N_FIELDS; i++)
        if (b->set & fields[i].bit)
            json_object_set_new(o, fields[i].name, field_json(b, &fields[i]));
    return o;
}

void sl__token_bounds_clear(sl_token_bounds_t *b)
{
    free_list(b->roles, b->n_roles);
    free_list(b->pools, b->n_pools);
    free_list(b->priorities, b->n_priorities);
    memset(b, 0, sizeof(*b));
}

/* ---- resolution: tier, then the token's own ------------------------------------------ */

const sl_tier_t *sl__tier_find(const sl_token_config_t *cfg, const char *name)
{
    for (size_t i = 0; name && i < cfg->n_tiers; i++)
        if (!strcmp(cfg->tiers[i].name, name)) return &cfg->tiers[i];
    return NULL;
}

/* The level that gives field `bit`: the token's own, else its tier's, else none. */
static const sl_token_bounds_t *giver(const sl_tier_t *tier, const sl_token_bounds_t *own,
                                      unsigned bit)
{
    if (own->set & bit) return own;
    if (tier && (tier->bounds.set & bit)) return &tier->bounds;
    return NULL;
}

sl_caps_t sl__token_effective_caps(const sl_tier_t *tier, const sl_token_bounds_t *own)
{
    sl_caps_t c = {0};
    const sl_token_bounds_t *g;
    if ((g = giver(tier, own, SL_TB_MAX_SHARE))) c.max_share = g->caps.max_share;
    if ((g = giver(tier, own, SL_TB_MAX_RPM))) c.max_rpm = g->caps.max_rpm;
    if ((g = giver(tier, own, SL_TB_MAX_CONCURRENT))) c.max_concurrent = g->caps.max_concurrent;
    if ((g = giver(tier, own, SL_TB_BUDGET_HOUR)))
        c.budget_usd_per_hour = g->caps.budget_usd_per_hour;
    if ((g = giver(tier, own, SL_TB_BUDGET_DAY))) c.budget_usd_per_day = g->caps.budget_usd_per_day;
    return c;
}

static bool caps_zero(const sl_caps_t *c)
{
    return c->max_share == 0 && c->max_rpm == 0 && c->max_concurrent == 0 &&
           c->budget_usd_per_hour == 0 && c->budget_usd_per_day == 0;
}

static int copy_list(char ***dst, size_t *n_dst, char **src, size_t n)
{
    char **copy = calloc(n ? n : 1, sizeof(*copy));
    for (size_t i = 0; copy && i < n; i++)
        if (!(copy[i] = strdup(src[i]))) {
            free_list(copy, i);
            copy = NULL;
        }
    if (!copy) return -1;
    *dst = copy;
    *n_dst = n;
    return 0;
}

int sl__token_resolve(sl_token_rule_t *r, const sl_token_config_t *cfg, char *what, size_t whatlen)
{
    const sl_tier_t *tier = NULL;
    if (r->meta.tier && !(tier = sl__tier_find(cfg, r->meta.tier))) {
        int at = snprintf(what, whatlen, "tier: '%.64s' is not in `tiers:` (known:", r->meta.tier);
        for (size_t i = 0; i < cfg->n_tiers && at > 0 && (size_t)at < whatlen; i++)
            at += snprintf(what + at, whatlen - (size_t)at, " %s", cfg->tiers[i].name);
        if (at > 0 && (size_t)at < whatlen)
            snprintf(what + at, whatlen - (size_t)at, "%s)", cfg->n_tiers ? "" : " none");
        return -1;
    }
    sl_caps_t caps = sl__token_effective_caps(tier, &r->meta.own);
    if (r->agent_prefix && !caps_zero(&caps)) {
        snprintf(what, whatlen,
                 "%s: caps (max_share, max_rpm, max_concurrent, budget_usd_*) are kept per agent "
                 "name, so they need a token with `agent`, not `agent_prefix` '%.64s'",
                 tier && !(r->meta.own.set & SL_TB_CAPS) ? "tier" : "caps", r->agent_prefix);
        return -1;
    }
    sl_token_bounds_t next = {0};
    const sl_token_bounds_t *g;
    int rc = 0;
    if ((g = giver(tier, &r->meta.own, SL_TB_ROLES)))
        rc |= copy_list(&next.roles, &next.n_roles, g->roles, g->n_roles);
    if ((g = giver(tier, &r->meta.own, SL_TB_POOLS)))
        rc |= copy_list(&next.pools, &next.n_pools, g->pools, g->n_pools);
    if ((g = giver(tier, &r->meta.own, SL_TB_PRIORITIES)))
        rc |= copy_list(&next.priorities, &next.n_priorities, g->priorities, g->n_priorities);
    if (rc) {
        sl__token_bounds_clear(&next);
        return snprintf(what, whatlen, "out of memory"), -1;
    }
    free_list(r->roles, r->n_roles);
    free_list(r->pools, r->n_pools);
    free_list(r->priorities, r->n_priorities);
    r->roles = next.roles, r->n_roles = next.n_roles;
    r->pools = next.pools, r->n_pools = next.n_pools;
    r->priorities = next.priorities, r->n_priorities = next.n_priorities;
    g = giver(tier, &r->meta.own, SL_TB_MAX_UNBLOCKS);
    r->max_unblocks = g ? g->max_unblocks : 8;
    g = giver(tier, &r->meta.own, SL_TB_RESYNC);
    r->resync = g ? g->resync : false;
    r->meta.caps = caps;
    return 0;
}

json_t *sl__token_rule_json(const sl_token_rule_t *r)
{
    static const char *const sources[] = {"config", "file", "minted"};
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "id", json_string(r->meta.id ? r->meta.id : ""));
    json_object_set_new(o, "source", json_string(sources[r->meta.source]));
    if (r->agent) json_object_set_new(o, "agent", json_string(r->agent));
    if (r->agent_prefix) json_object_set_new(o, "agent_prefix", json_string(r->agent_prefix));
    json_object_set_new(o, "tier", r->meta.tier ? json_string(r->meta.tier) : json_null());
    sl_token_bounds_t in_force = {.set = ~0u,
                                  .roles = r->roles,
                                  .n_roles = r->n_roles,
                                  .pools = r->pools,
                                  .n_pools = r->n_pools,
                                  .priorities = r->priorities,
                                  .n_priorities = r->n_priorities,
                                  .max_unblocks = r->max_unblocks,
                                  .resync = r->resync,
                                  .caps = r->meta.caps};
    json_object_set_new(o, "bounds", sl__token_bounds_json(&in_force));
    json_object_set_new(o, "own", sl__token_bounds_json(&r->meta.own));
    json_object_set_new(o, "created",
                        r->meta.created_s > 0 ? json_real(r->meta.created_s) : json_null());
    json_object_set_new(o, "last_used",
                        r->meta.last_used_s > 0 ? json_real(r->meta.last_used_s) : json_null());
    return o;
}

void sl__token_rule_clear(sl_token_rule_t *r)
{
    if (r->token) {
        volatile char *k = r->token; /* a secret: not left in freed memory */
        for (size_t i = 0; k[i]; i++)
            k[i] = '\0';
    }
    free(r->token);
    free(r->agent);
    free(r->agent_prefix);
    free_list(r->roles, r->n_roles);
    free_list(r->pools, r->n_pools);
    free_list(r->priorities, r->n_priorities);
    free(r->meta.id);
    free(r->meta.tier);
    sl__token_bounds_clear(&r->meta.own);
    memset(r, 0, sizeof(*r));
}
