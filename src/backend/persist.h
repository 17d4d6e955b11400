/* persist.h - the memory backend's state file: a snapshot followed by a journal of changes.
 *
 * What a restart must not forget (DESIGN.md "Backends", README "What survives what"):
 * each pool's levels with their time, margin and the margin's clocks, every lease in
 * flight, the calibrations, and how far ids were handed out. The file is a snapshot of
 * all of it followed by journal batches, one per backend operation made before the
 * operation is answered: a kill -9 loses nothing (the page cache has it). A file that does
 * not verify to its end (cut short, a flipped bit, a power failure that left batches not
 * yet fsynced in part on the disk) restores nothing: SL_PERSIST_DAMAGED, a cold start.
 * When the journal outgrows the snapshot a new snapshot is written beside it and renamed
 * over it.
 *
 * Borrowed pointers: the engine passed to every call must be the one the state belongs
 * to; strings are copied.
 */
#ifndef SL_PERSIST_H
#define SL_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/engine.h>

#include "backend.h"

struct event_base;

typedef struct sl_persist sl_persist_t;

/* What opening the file found. */
typedef enum sl_persist_found {
    SL_PERSIST_NONE = 0, /* no file: a first start */
    SL_PERSIST_LOADED,   /* the whole file verified: its state is what it holds */
    SL_PERSIST_DAMAGED,  /* a file that does not verify to its end, or is not a sluice state
                            file: nothing of it is restored (cold start), and it was moved
                            to sl__persist_kept_path() for inspection */
} sl_persist_found_t;

/* Opens the state file `path` and reads what it holds (nothing is written yet). The
 * fsync timer runs on `base`: every `fsync_interval_s` (0: after every write) the
 * journal is flushed to the disk. Returns NULL with `err` set when the file cannot be
 * read or moved aside (permissions, a directory), naming the path. */
sl_persist_t *sl__persist_open(struct event_base *base, const char *path, double fsync_interval_s,
                               char *err, size_t errlen);

/* Frees `p` after flushing and fsyncing what is buffered. NULL is allowed. */
void sl__persist_free(sl_persist_t *p);

/* What the file held (see sl_persist_found_t). */
sl_persist_found_t sl__persist_found(const sl_persist_t *p);

/* SL_PERSIST_DAMAGED: why the file was refused (the first fault found, with its byte
 * offset) and where it was moved (NULL for sl__persist_read_bytes()); "" and NULL
 * otherwise. Owned by p. */
const char *sl__persist_damage(const sl_persist_t *p);
const char *sl__persist_kept_path(const sl_persist_t *p);

/* The file was format 1 (SLSTATE1, read once): the first snapshot rewrites it. */
bool sl__persist_was_v1(const sl_persist_t *p);

/* Reads `data[0, len)` as sl__persist_open() reads a file, with no file behind it (for
 * tests and the fuzz target; `data` NULL is no file): found, restore and free as for an
 * opened file; flushes write nothing, and sl__persist_snapshot() must not be called on
 * it (there is no path). NULL when out of memory. */
sl_persist_t *sl__persist_read_bytes(const unsigned char *data, size_t len);

/* The journal's room after each snapshot, at least (default 32 MiB; tests make it small
 * so a whole file can be damaged byte by byte). Applies to snapshots written after. */
void sl__persist_set_journal_min(size_t bytes);

/* The lowest id base that cannot repeat an id the file's runs may have issued (every id
 * is at most the last reservation written); 0 when the file held none. */
uint64_t sl__persist_id_floor(const sl_persist_t *p);

/* The latest time the file's records mention (Unix seconds), or 0. */
double sl__persist_latest_s(const sl_persist_t *p);

/* Restores pool `name` (configured in `e` already) from the file at `now_s`. Returns
 * true when the file held it and it was restored. */
bool sl__persist_restore_pool(sl_persist_t *p, sl_engine_t *e, const char *name, double now_s);

/* Restores the leases in flight and the calibrations the file held for pools that
 * exist in `e`; `dropped` (may be NULL) receives how many leases named a pool that is
 * no longer configured or could not be restored. Frees what was read. */
void sl__persist_restore_rest(sl_persist_t *p, sl_engine_t *e, double now_s, size_t *restored,
                              size_t *dropped);

/* A trial of the whole restore into `scratch`, an engine configured with the pools the
 * daemon will have, leaving what was read in place: false (the reason in
 * sl__persist_damage()) when the engine refuses a record of a pool it has, so a file the
 * engine would take only in part is refused whole. True for a file not LOADED. */
bool sl__persist_trial(sl_persist_t *p, sl_engine_t *scratch, double now_s);

/* Declares a LOADED file damaged after all (its trial failed, or `reason`, when not NULL,
 * says why): forgets what was read but the id floor, and moves the file aside as
 * sl__persist_open() does. Returns 0, or -1 with `err` naming both paths. */
int sl__persist_refuse(sl_persist_t *p, const char *reason, char *err, size_t errlen);

/* Writes a complete snapshot of `e` to PATH.tmp, fsyncs it, renames it over PATH and
 * continues the journal there. Returns 0, or -1 with `err` naming the path and cause. */
int sl__persist_snapshot(sl_persist_t *p, sl_engine_t *e, char *err, size_t errlen);

/* Journal records, buffered until sl__persist_flush(). */
void sl__persist_pool(sl_persist_t *p, const sl_engine_t *e, const char *pool);
void sl__persist_lease(sl_persist_t *p, const sl_engine_t *e, uint64_t lease);
void sl__persist_lease_end(sl_persist_t *p, uint64_t lease);
void sl__persist_calibration(sl_persist_t *p, const sl_engine_t *e, const char *pool,
                             const char *model);

/* Suspensions (backend.h): `set` receives what the file held (its earlier contents are
 * dropped) and is the set every later snapshot writes; it must outlive `p`. */
struct sl_suspended_set;
void sl__persist_bind_suspended(sl_persist_t *p, struct sl_suspended_set *set);
/* Journal records of a suspension and a release, buffered until sl__persist_flush(). */
void sl__persist_suspended(sl_persist_t *p, const sl_suspension_t *s);
void sl__persist_released(sl_persist_t *p, const char *agent);

/* Batch queues (backend.h, sl_batchq_op_t): `set` receives what the file held (its earlier
 * contents are dropped) and is the set every later snapshot writes; it must outlive `p`. */
struct sl_batchq_set;
void sl__persist_bind_batchq(sl_persist_t *p, struct sl_batchq_set *set);
/* Journal records of an entry counted (or changed) and of one removed, buffered until
 * sl__persist_flush(). Expiry is not journaled: a reader drops what has expired. */
void sl__persist_batch_put(sl_persist_t *p, const char *pool, const char *id, int64_t requests,
                           double expires_at);
void sl__persist_batch_del(sl_persist_t *p, const char *pool, const char *id);

/* A record could not be made (out of memory): the next flush writes a snapshot. */
void sl__persist_mark_lost(sl_persist_t *p);

/* Writes the buffered records (one write), reserves ids ahead of sl_engine_next_id(),
 * and writes a new snapshot when the journal has outgrown the last one. A failed write
 * is reported on stderr once and retried as a snapshot at most once a second. */
void sl__persist_flush(sl_persist_t *p, sl_engine_t *e);

#endif /* SL_PERSIST_H */
