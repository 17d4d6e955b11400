/* limits_drive.h - one action-limit operation run on the C library or on limits.lua, answered in the backend-neutral record.
 *
 * The limits scenario runner (limits_runner.c, tests/conformance/limits/NAME.scn) and the
 * differential runner (limits_differential.c, random operations) drive both
 * implementations through these, so both compare the same fields. An operation runs at
 * LIMITS_T0_S + its `t_s` (microseconds, the library's unit), given to the library as
 * `now` and to limits.lua as the pinned time argument.
 */
#ifndef SL_CONFORMANCE_LIMITS_DRIVE_H
#define SL_CONFORMANCE_LIMITS_DRIVE_H

#include <jansson.h>

#include "limits/limits.h"
#include "scenario.h"

#define LIMITS_T0_S 1800000000LL /* aligned to every window the scenarios use */

/* Adds the limit of a `limit NAME field=value...` line (split in `tok`) to `limits`
 * (name -> object); -1 (after a message naming path:lineno) when a field is not
 * field=value. Lists: costs=a:1,b:5 parents=x,y; adaptive.FIELD=value. */
int limits_config_line(json_t *limits, const char *path, char **tok, int n, int lineno);

/* Runs `op` (check, peek, probe, when, release, report, info, keys, sweep) on the C
 * set `ls`, answering into `r` (zeroed by the caller). */
void limits_lib_op(sl_limits_t *ls, const op_t *op, result_t *r);

/* Connects to `nodes` (HOST:PORT[,HOST:PORT...], the masters of a Cluster) and resets
 * them (limits_redis_reset); -1 after a message when it cannot. */
int limits_redis_open(const char *nodes);
/* FLUSHALL and FUNCTION LOAD REPLACE of limits.lua on every node; -1 after a message. */
int limits_redis_reset(void);
/* Runs `op` on limits.lua, planned by the same set `ls`; keys and sweep are the memory
 * engine's own (an error). */
void limits_redis_op(sl_limits_t *ls, const op_t *op, result_t *r);
void limits_redis_close(void);


#endif
