/* long_context.h - the long-context pools (long_context.c, docs/design.md "Long context"). */
#ifndef SL_LONG_CONTEXT_H
#define SL_LONG_CONTEXT_H

#include <stddef.h>

#include <sluice/engine.h>
#include <yaml.h>

#include "config.h"

/* Reads `pools.<pool>.long_context` (`map`, a node of `doc`) into up->long_context_*.
 * Returns 0, or -1 with `msg` naming the key and the value. */
int sl__long_context_parse(yaml_document_t *doc, yaml_node_t *map, const char *pool,
                           sl_pool_upstream_t *up, char *msg, size_t n);

/* A key of a pool with `keys:` (`key`, being parsed) takes its pool's (`pool`'s)
 * long_context: each key then gets a long-context pool of its own. */
void sl__long_context_inherit(sl_pool_upstream_t *key, const sl_pool_upstream_t *pool);

/* After the pools are parsed: appends a pool "<name>:long_context" for every pool with a
 * long_context threshold, a key "POOL:KEY" of a pool with `keys:` included (the parent's
 * settings, the long-context token limits, the parent's request bucket (request_parent),
 * no combined limit, no key group, no upstream of its own). Returns 0, or -1 with `msg`
 * set (a name taken or too long, out of memory); what was appended stays counted, so
 * clearing frees it. */
int sl__long_context_expand(sl_config_t *c, char *msg, size_t n);

/* Whether r's prompt (input_tokens + cached_tokens) is above the long-context threshold
 * of r->pool (for a pool with `keys:`, its keys'). */
bool sl__long_context_is_long(const sl_config_t *c, const sl_request_t *r);

/* The name of pool `pool`'s long-context pool (owned by the configuration), or NULL. */
const char *sl__long_context_pool(const sl_config_t *c, const char *pool);

/* The pool a long-context pool `pool` belongs to, whose upstream and key its calls go
 * with (owned by the configuration); `pool` itself when it is no long-context pool. */
const char *sl__long_context_parent(const sl_config_t *c, const char *pool);

/* Points r->pool at its pool's long-context pool when sl__long_context_is_long; else
 * leaves it. A pool with `keys:` is left too: keys.c routes by size once it has picked
 * the key (the key's long-context pool). */
void sl__long_context_route(const sl_config_t *c, sl_request_t *r);

#endif
