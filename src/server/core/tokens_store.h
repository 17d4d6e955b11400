/* tokens_store.h - minted agent tokens, kept hashed in their own file (tokens_store.c). */
#ifndef SL_TOKENS_STORE_H
#define SL_TOKENS_STORE_H

#include "config.h"

typedef struct sl_token_store sl_token_store_t;

/* Why a mint or a revoke was refused. */
typedef struct sl_token_refusal {
    int status;        /* 400, 404, 409 or 500 */
    const char *type;  /* static: invalid_request, not_found, conflict, internal */
    char message[600]; /* names the field and the value */
} sl_token_refusal_t;

/* Opens the store of `cfg` (minted_file; NULL: minting is refused, nothing is kept),
 * reading the tokens minted before and resolving them against cfg's tiers. NULL with
 * `err` ("FILE: record N: ...") when the file cannot be read or names an unknown tier. */
sl_token_store_t *sl__token_store_open(const sl_token_config_t *cfg, char *err, size_t errlen);
void sl__token_store_free(sl_token_store_t *s);

/* The live minted token with SHA-256 `sha`, or NULL (s may be NULL). */
sl_token_rule_t *sl__token_store_find(const sl_token_store_t *s,
                                      const unsigned char sha[SL_TOKEN_SHA256_BYTES]);
/* The live minted token `id`, or NULL. */
sl_token_rule_t *sl__token_store_by_id(const sl_token_store_t *s, const char *id);
/* The live minted tokens (borrowed; valid until the next mint, revoke or reload). */
sl_token_rule_t *const *sl__token_store_rules(const sl_token_store_t *s, size_t *n);

/* Mints the token `body` asks for (agent or agent_prefix, tier, bound fields), writes the
 * store durably, and returns its listing with "token": the secret, shown only here. NULL
 * with `ref` filled when refused; the store is then as it was. */
json_t *sl__token_store_mint(sl_token_store_t *s, const sl_token_config_t *cfg, json_t *body,
                             sl_token_refusal_t *ref);
/* Revokes minted token `id`: written durably, then out of the index (refused from now
 * on). Returns 0 with *revoked (still readable for a while), or -1 with `ref` (404 for an
 * unknown id); the store is then as it was. */
int sl__token_store_revoke(sl_token_store_t *s, const char *id, sl_token_refusal_t *ref,
                           sl_token_rule_t **revoked);

/* Whether every minted token resolves against `next` (a reload's configuration): 0, or
 * -1 with `err` naming the token's id and the field. Changes nothing. */
int sl__token_store_check(const sl_token_store_t *s, const sl_token_config_t *next, char *err,
                          size_t errlen);
/* Resolves every minted token against `cfg` (after a reload that passed the check) and
 * takes its max_minted_tokens. */
void sl__token_store_reconfigure(sl_token_store_t *s, const sl_token_config_t *cfg);

/* Takes `rules` (n of them, an array the replaced configuration owned) and frees them
 * some minutes later: a call that authenticated with one may still be reading its body
 * or queued when a reload replaces the configuration. */
void sl__token_store_retire_rules(sl_token_store_t *s, sl_token_rule_t *rules, size_t n);

/* The tokens_file version a reload last refused (sl__tokens_watch does not retry it). */
sl_file_stamp_t *sl__token_store_refused_stamp(sl_token_store_t *s);

#endif /* SL_TOKENS_STORE_H */
