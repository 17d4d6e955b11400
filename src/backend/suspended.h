/* suspended.h - a set of suspension records with owned strings, kept by the memory backend and its state file.
 *
 * Suspensions are rare (a runaway, an admin's decision), so the set is an array searched
 * linearly: a few hundred records cost nothing next to the request that asks.
 */
#ifndef SL_SUSPENDED_H
#define SL_SUSPENDED_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

typedef struct sl_suspended_set {
    sl_suspension_t *items; /* strings owned */
    size_t n, cap;
} sl_suspended_set_t;

/* Adds a copy of `s` unless its agent is in the set already (the first record stands).
 * Returns 1 when added, 0 when the agent was there, -1 out of memory (nothing changed). */
int sl__suspended_put(sl_suspended_set_t *set, const sl_suspension_t *s);

/* Removes the agent's record. Returns true when there was one. */
bool sl__suspended_del(sl_suspended_set_t *set, const char *agent);

/* Frees every record; the set is empty and reusable afterwards. */
void sl__suspended_clear(sl_suspended_set_t *set);

#endif /* SL_SUSPENDED_H */
