/* limits_json.h - one limit's configuration from a JSON object (jansson), so sluiced only maps its YAML to JSON. */
#ifndef SLUICE_LIMITS_JSON_H
#define SLUICE_LIMITS_JSON_H

#include <jansson.h>

#include "limits.h"

/* Adds limit `name` from `obj`, whose members are the fields of docs/limits.md
 * ("algorithm", "rate", "period_s", "burst", "per", "costs" {action: cost},
 * "parents" [names], "on_limit", "adaptive" {...}, "ttl_s", "max_keys"). A member
 * that is unknown, of the wrong type, or not used by the algorithm is an error
 * naming `limits.NAME.FIELD` and the value, e.g.
 *   limits.db.query.algorithm: unknown "foo" (token_bucket | leaky_bucket | ...)
 * Returns sl_limits_add's codes; SL_EINVAL for any of the above. `obj` is only read. */
int sl_limits_add_json(sl_limits_t *ls, const char *name, const json_t *obj);

/* Adds every member of `limits` (name -> object) and links the set. */
int sl_limits_add_all_json(sl_limits_t *ls, const json_t *limits);

#endif /* SLUICE_LIMITS_JSON_H */
