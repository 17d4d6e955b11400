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

/* After the pools are parsed: appends a pool "<name>:long_context" for every pool with a
 * long_context threshold (the parent's settings, the long-context token limits, the
 * parent's request bucket (request_parent), no combined limit, no upstream of its own). Returns 0, or -1 with `msg` set (a name
 * taken, out of memory); what was appended stays counted, so clearing frees it. */
int sl__long_context_expand(sl_config_t *c, char *msg, size_t n);

/* Points r->pool at its pool's long-context pool when the request's prompt
 * (input_tokens + cached_tokens) is above that pool's threshold; else leaves it. */
void sl__long_context_route(const sl_config_t *c, sl_request_t *r);

#endif
