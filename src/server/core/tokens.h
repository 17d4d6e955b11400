/* tokens.h - agent tokens at fleet scale: hashed look-up, tiers of shared bounds, minted tokens.
 *
 * Three places hold agent tokens (docs/server.md "Tokens at fleet scale"): the YAML's
 * `auth.tokens` (plaintext), the `auth.tokens_file` (SHA-256 of each token, never the
 * token) and the minted store (tokens made by POST /v1/admin/tokens, kept hashed in their
 * own file). Each is found by the SHA-256 of what a caller presents, in O(1). A token's
 * bounds (roles, pools, priorities, max_unblocks, resync and the engine's caps) come from
 * its tier (`tiers:`), then its own fields, which override the tier's one by one.
 */
#ifndef SL_TOKENS_H
#define SL_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <sluice/engine.h>

#define SL_TOKEN_SHA256_BYTES    32
#define SL_TOKEN_MAX_FILE_TOKENS 1000000 /* entries one tokens_file may hold */

/* Which bounds a level (a tier, a token) gives itself; the others come from below it. */
enum {
    SL_TB_ROLES = 1u << 0,
    SL_TB_POOLS = 1u << 1,
    SL_TB_PRIORITIES = 1u << 2,
    SL_TB_MAX_UNBLOCKS = 1u << 3,
    SL_TB_RESYNC = 1u << 4,
    SL_TB_MAX_SHARE = 1u << 5,
    SL_TB_MAX_RPM = 1u << 6,
    SL_TB_MAX_CONCURRENT = 1u << 7,
    SL_TB_BUDGET_HOUR = 1u << 8,
    SL_TB_BUDGET_DAY = 1u << 9,
};
#define SL_TB_CAPS                                                                                 \
    (SL_TB_MAX_SHARE | SL_TB_MAX_RPM | SL_TB_MAX_CONCURRENT | SL_TB_BUDGET_HOUR | SL_TB_BUDGET_DAY)

/* What a tier or a token says about the token's use; a field counts only when its bit is
 * in `set`. Lists are owned. */
typedef struct sl_token_bounds {
    unsigned set;
    char **roles; /* roles it may ask for; empty = any */
    size_t n_roles;
    char **pools; /* pools it may use; empty = any */
    size_t n_pools;
    char **priorities; /* priorities it may ask for; empty = factor <= 1 */
    size_t n_priorities;
    int64_t max_unblocks;
    bool resync;
    sl_caps_t caps; /* the engine's caps, per agent name (engine.h sl_caps_t) */
} sl_token_bounds_t;

/* One `tiers:` entry: a named set of bounds shared by every token naming it. */
typedef struct sl_tier {
    char *name;
    sl_token_bounds_t bounds;
    double limit_multiplier; /* `limit_multiplier`: the `per: agent` action limits' rate and
                                burst, scaled for its tokens (limits/limits_tiers.c); 0: not
                                given (1) */
    int line;
} sl_tier_t;

/* Where a token was read from. */
typedef enum sl_token_source {
    SL_TOKEN_CONFIG = 0, /* auth.tokens (plaintext in the YAML) */
    SL_TOKEN_FILE,       /* auth.tokens_file (hashed) */
    SL_TOKEN_MINTED,     /* POST /v1/admin/tokens (hashed, in the minted store) */
} sl_token_source_t;

/* What a token rule (config.h sl_token_rule_t) carries besides its resolved bounds. */
typedef struct sl_token_meta {
    unsigned char sha256[SL_TOKEN_SHA256_BYTES]; /* of the secret: how it is found */
    char *id;              /* its name in lists and in revoke: never the secret */
    char *tier;            /* the tier it names, or NULL */
    sl_token_bounds_t own; /* the bounds it gives itself (over its tier's) */
    sl_caps_t caps;        /* the caps in force: the tier's, then its own */
    sl_token_source_t source;
    int line;           /* config and file tokens: the line of its entry */
    double created_s;   /* minted: Unix time of the mint; else 0 */
    double last_used_s; /* Unix time it last authenticated a call (0: not since start) */
    double retired_s;   /* minted and revoked: when (freed some time after) */
} sl_token_meta_t;

typedef struct sl_token_index sl_token_index_t;

/* What a file looked like when read: a change in any field means it was rewritten. */
typedef struct sl_file_stamp {
    bool present;
    long long inode, size_bytes, mtime_ns;
} sl_file_stamp_t;

/* The configuration's part of it (sl_config_t.token_cfg). */
typedef struct sl_token_config {
    sl_tier_t *tiers; /* `tiers:` */
    size_t n_tiers;
    char *tokens_file;       /* auth.tokens_file, resolved against the config's directory */
    char *minted_file;       /* auth.minted_file, else "<state_file>.tokens", else NULL */
    int64_t max_minted;      /* auth.max_minted_tokens: 10000 */
    sl_token_index_t *index; /* auth.tokens and the tokens_file's, by SHA-256 */
    sl_file_stamp_t tokens_file_read; /* the tokens_file as this configuration read it */
} sl_token_config_t;

struct sl_token_rule;
struct sl_config;
struct yaml_document_s;
struct yaml_node_s;

/* ---- tokens.c: hashing, the index, the bounds' one field table, resolution ----------- */

/* SHA-256 of the NUL-terminated `secret` into `out`. */
void sl__token_sha256(const char *secret, unsigned char out[SL_TOKEN_SHA256_BYTES]);

/* Parses 64 hex digits into `out`; -1 when `hex` is anything else. */
int sl__token_sha256_parse(const char *hex, unsigned char out[SL_TOKEN_SHA256_BYTES]);

/* Borrowed rules by their meta.sha256 (the common string map, keyed by the digest's hex),
 * holding at most `n`. NULL when out of memory. */
sl_token_index_t *sl__token_index_new(size_t n);
/* Adds `r` (borrowed; must outlive its place in the index). Returns 0, -1 when the same
 * SHA-256 is already in (the one in is returned in *dup when dup is not NULL), or -2 when
 * the index is full (it never grows past the n it was made for) or out of memory. */
int sl__token_index_add(sl_token_index_t *ix, struct sl_token_rule *r, struct sl_token_rule **dup);
/* The rule with SHA-256 `sha`, or NULL. */
struct sl_token_rule *sl__token_index_find(const sl_token_index_t *ix,
                                           const unsigned char sha[SL_TOKEN_SHA256_BYTES]);
/* Takes `r` out (no-op when it is not in). */
void sl__token_index_remove(sl_token_index_t *ix, const struct sl_token_rule *r);
void sl__token_index_free(sl_token_index_t *ix);

/* Sets bound field `name` of `b` from its text (a scalar: `value`; a list: `items`, `n`,
 * with `is_list` true). Returns 0; -1 with `what` saying why the value is refused; -2 when
 * `name` is not a bound field (`what` lists the known ones). `b` is unchanged on error. */
int sl__token_bound_set(sl_token_bounds_t *b, const char *name, const char *value,
                        char *const *items, size_t n, bool is_list, char *what, size_t whatlen);
/* As sl__token_bound_set, from a JSON value (numbers for numbers, true/false, arrays of
 * strings for lists). */
int sl__token_bound_set_json(sl_token_bounds_t *b, const char *name, json_t *v, char *what,
                             size_t whatlen);
/* The fields `b` sets, as a JSON object (the minted store's `bounds`). */
json_t *sl__token_bounds_json(const sl_token_bounds_t *b);
void sl__token_bounds_clear(sl_token_bounds_t *b);

/* The tier named `name` in `cfg`, or NULL. */
const sl_tier_t *sl__tier_find(const sl_token_config_t *cfg, const char *name);

/* The caps in force for a token: `tier`'s (may be NULL), then `own`'s, field by field. */
sl_caps_t sl__token_effective_caps(const sl_tier_t *tier, const sl_token_bounds_t *own);

/* Fills r's resolved bounds (roles, pools, priorities, max_unblocks, resync, meta.caps)
 * from its tier in `cfg` and its own. Returns 0, or -1 with `what` naming the field and
 * the value (an unknown tier; caps on an agent_prefix token: the engine keeps caps per
 * agent name, so a prefix token cannot carry them). On error r's resolved bounds are as
 * they were. */
int sl__token_resolve(struct sl_token_rule *r, const sl_token_config_t *cfg, char *what,
                      size_t whatlen);

/* The token as GET /v1/admin/tokens lists it: id, source, agent or agent_prefix, tier,
 * the bounds in force, created, last_used. Never the secret nor its hash. */
json_t *sl__token_rule_json(const struct sl_token_rule *r);

/* Frees everything a rule holds and zeroes it (a secret is wiped first). */
void sl__token_rule_clear(struct sl_token_rule *r);

/* ---- config_tokens.c: the YAML side ------------------------------------------------- */

/* Reads one token mapping (auth.tokens[] with `token:`, or a tokens_file entry with
 * `sha256:` when `hashed`) into `r`: agent or agent_prefix, tier, id and the bound fields.
 * Errors as "FILE:LINE: KEY: ...", KEY starting with `key`. */
int sl__config_parse_token(struct yaml_document_s *doc, struct yaml_node_s *map, const char *path,
                           const char *key, bool hashed, struct sl_token_rule *r, char *err,
                           size_t errlen);
/* The `tiers:` section (NAME: {bound fields, limit_multiplier}). */
int sl__config_parse_tiers(struct yaml_document_s *doc, struct yaml_node_s *section,
                           const char *path, sl_token_config_t *cfg, char *err, size_t errlen);
/* After the whole file is read: loads the tokens_file, resolves every token against the
 * tiers, refuses a token listed twice, builds the index and derives minted_file from
 * state_file when not given. Errors name the file and line of the entry at fault. */
int sl__config_tokens_finish(struct sl_config *c, const char *path, char *err, size_t errlen);
void sl__token_config_clear(sl_token_config_t *cfg);
/* The stamp of file `path` now (present false when it cannot be stat'ed). */
void sl__file_stamp(const char *path, sl_file_stamp_t *out);
bool sl__file_stamp_equal(const sl_file_stamp_t *a, const sl_file_stamp_t *b);

#endif /* SL_TOKENS_H */
