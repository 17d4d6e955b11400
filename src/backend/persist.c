/* persist.c - the memory backend's state file: a snapshot followed by a journal of changes
 * (writing it here, restoring what persist_read.c read and verified).
 *
 * Why a journal and not SQLite: sluiced answers ~50,000 lease API requests a second on
 * one core, and every grant and settle must be durable against kill -9 before it is
 * answered. The journal is the file's preallocated tail mapped MAP_SHARED: appending a
 * record is a memcpy into the kernel's page cache, which survives kill -9 (the pages
 * belong to the file, not to the process), with no system call per operation. SQLite
 * would add a transaction per operation on the event loop for the same guarantee.
 * Power failure is bounded by an fdatasync every `fsync_interval_s`, made by a thread so
 * the event loop never waits for the disk. The space is reserved with posix_fallocate
 * (a full disk is an error at snapshot time, never a SIGBUS on a store).
 *
 * The file (format 2, docs/server.md "Format 2" has the table): a 24-byte head (the
 * magic "SLSTATE2", the file's length as preallocated, an FNV-1a of both), then batches.
 * A batch sits at a multiple of 8: a commit word (u32 length n, u32 its complement), n
 * bytes of records, zeros to a multiple of 8. The first batch is the snapshot (an 'I'
 * record, every 'P', 'L', 'C' and 'U' record of the state, an 'S' record); each flush
 * appends one batch; a zero commit word ends the journal, and zeros follow up to the
 * length in the head. A record is a u32 length, a u64 FNV-1a checksum of its body, and
 * the body: a type byte and fields in this machine's byte order (the file is not moved
 * between architectures).
 *
 * All or nothing: the file is restored only when every byte up to the end verifies (the
 * head, the length, each commit word, each record, the padding, and no committed batch
 * after the end, which would be a hole); otherwise nothing of it is (a cold start, the
 * alert state_file_damaged, the file moved to PATH.damaged-<UTC time>), because the part
 * before a fault is a mix of before and after that overbooks. A torn last write is not
 * damage: a batch's records are copied first and its commit word stored last in one
 * aligned 8-byte store, so a kill -9 in between leaves a zero word, the end of the
 * journal, and that batch was never answered. Format 1 ("SLSTATE1": records from byte 8,
 * no head, no commit words) is read once, strictly, and rewritten by the first snapshot.
 *
 *   I  u64 reserved      ids up to this may have been issued
 *   P  pool state        str pool, f64 level[4], at, margin, clean_since, floor_since,
 *                        blocked_until, cold_until, u32 cold_raised; since record
 *                        version 2: f64 lease_mean_s, i64 lease_samples
 *   L  lease in flight   u64 id, ticket, str pool, agent, cache_key, model, i64 need[4],
 *                        cached, est, f64 weight, granted_at, waited_s, ttl_s,
 *                        expires_at, u8 penalty, claimed (written again when it changes);
 *                        since record version 3: f64 cache_ttl_s
 *   E  lease ended       u64 id
 *   C  calibration       str pool, model, f64 sample[64], i32 n, pos, i64 total; since
 *                        version 2: i64 out_sample[64], i32 out_n, out_pos
 *   U  agent suspended   str agent, role, reason, metric, f64 z, i64 count, f64 at
 *   V  agent released    str agent
 *   Q  batch counted     str pool, id, i64 requests, f64 expires_at (the batch queues)
 *   q  batch released    str pool, id
 *   S  end of snapshot
 *
 * Record version 2 appends fields to P and C: a reader takes them when the record holds
 * them, so a file of record version 1 (no appended fields) restores as before, with the
 * concurrency ETA's D and the learned output samples unknown. Record version 3 appends a
 * lease's cache lifetime to L (a ttl "1h" write settled after a restart still lives an
 * hour); an L without it restores with the pool's lifetime, as before. Prompt caches are not
 * kept (a restart finds them cold: the conservative side). L's cache_key is the lease's
 * cache identity, and an agent's own cache was always written as the agent's name, so a file
 * of any version restores into the one namespace of caches (docs/design.md "One namespace
 * of prompt caches"): a restored lease's settle writes the cache that name's calls read.
 *
 * Ids: the reservation is written (and fsynced) before ids reach it, 2^20 at a time,
 * so the next run's base, above the last reservation, repeats no id even after a
 * power failure. */
#include "persist_format.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#define ID_RESERVE     ((uint64_t)1 << 20)
#define JOURNAL_MIN    ((size_t)32 << 20) /* journal room after a snapshot, at least */
#define RETRY_EVERY_S  1.0

static void buf_need(buf_t *b, size_t more)
{
    if (b->failed || b->n + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more)
        cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void put(buf_t *b, const void *v, size_t n)
{
    buf_need(b, n);
    if (b->failed) return;
    memcpy(b->p + b->n, v, n);
    b->n += n;
}

static void put_u8(buf_t *b, uint8_t v)
{
    put(b, &v, 1);
}
static void put_u32(buf_t *b, uint32_t v)
{
    put(b, &v, sizeof v);
}
static void put_u64(buf_t *b, uint64_t v)
{
    put(b, &v, sizeof v);
}
static void put_i64(buf_t *b, int64_t v)
{
    put(b, &v, sizeof v);
}
static void put_f64(buf_t *b, double v)
{
    put(b, &v, sizeof v);
}
static void put_str(buf_t *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n >= STR_NULL) n = STR_NULL - 1; /* names are at most 128 bytes: never cut */
    uint16_t len = s ? (uint16_t)n : (uint16_t)STR_NULL;
    put(b, &len, sizeof len);
    if (s) put(b, s, n);
}

/* Starts a record: room for the head, then the type. */
static size_t rec_begin(buf_t *b, char type)
{
    size_t at = b->n;
    unsigned char head[HEAD_LEN] = {0};
    put(b, head, sizeof head);
    put_u8(b, (uint8_t)type);
    return at;
}

/* Fills in the head of the record started at `at`. */
static void rec_end(buf_t *b, size_t at)
{
    if (b->failed) return;
    uint32_t len = (uint32_t)(b->n - at - HEAD_LEN);
    uint64_t sum = fnv1a(b->p + at + HEAD_LEN, len);
    memcpy(b->p + at, &len, sizeof len);
    memcpy(b->p + at + sizeof len, &sum, sizeof sum);
}

static void *sync_main(void *arg);

/* The journal's room after a snapshot, at least (sl__persist_set_journal_min). */
static size_t journal_min = JOURNAL_MIN;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Nothing of a file that does not verify to its end is restored: the state it would give
 * back is a mix of before and after (leases forgotten, levels of an earlier moment), which
 * overbooks; a cold start cannot. Only the id floor of the records that did verify is
 * kept: ids stay above every id they reserved. */
static void forget_damaged(sl_persist_t *p)
{
    uint64_t id_floor = p->id_floor;
    sl__persist_loaded_free(p);
    p->id_floor = id_floor;
    p->latest_s = 0;
    p->was_v1 = false;
    p->found = SL_PERSIST_DAMAGED;
}

/* What data[0, len) holds (data NULL: no file), into p->found and the loaded state. */
static void take_bytes(sl_persist_t *p, const unsigned char *data, size_t len)
{
    if (!data) {
        p->found = SL_PERSIST_NONE;
    } else if (sl__persist_parse(p, data, len) == 0) {
        p->found = SL_PERSIST_LOADED;
    } else {
        forget_damaged(p);
    }
}

/* Moves a refused file to PATH.damaged-<UTC time> for a post-mortem. Returns 0, or -1
 * with `err` naming both paths. */
static int keep_aside(sl_persist_t *p, char *err, size_t errlen)
{
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    size_t n = strlen(p->path) + sizeof ".damaged-" + strlen(stamp);
    p->kept_path = malloc(n);
    if (!p->kept_path) {
        snprintf(err, errlen, "state_file: out of memory");
        return -1;
    }
    snprintf(p->kept_path, n, "%s.damaged-%s", p->path, stamp);
    if (rename(p->path, p->kept_path) != 0) {
        snprintf(err, errlen, "state_file: %s does not verify (%s) and cannot be moved to %s: %s",
                 p->path, p->damage, p->kept_path, strerror(errno));
        return -1;
    }
    sl_backend_sync_dir(p->path);
    return 0;
}

sl_persist_t *sl__persist_open(struct event_base *base, const char *path, double fsync_interval_s,
                               char *err, size_t errlen)
{
    sl_persist_t *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "state_file: out of memory");
        return NULL;
    }
    p->fd = -1;
    p->fsync_interval_s = fsync_interval_s;
    p->path = strdup(path);
    size_t n = strlen(path) + 8;
    p->tmp_path = malloc(n);
    if (!p->path || !p->tmp_path) {
        snprintf(err, errlen, "state_file: out of memory");
        goto fail;
    }
    snprintf(p->tmp_path, n, "%s.tmp", path);
    unsigned char *data;
    size_t len;
    if (sl__persist_slurp(path, &data, &len) < 0) {
        snprintf(err, errlen, "state_file: cannot read %s: %s", path, strerror(errno));
        goto fail;
    }
    take_bytes(p, data, len);
    if (p->found == SL_PERSIST_DAMAGED && keep_aside(p, err, errlen) < 0) {
        free(data);
        goto fail;
    }
    free(data);
    if (fsync_interval_s > 0) {
        if (pthread_mutex_init(&p->sync_mu, NULL) != 0 ||
            pthread_cond_init(&p->sync_cv, NULL) != 0 ||
            pthread_create(&p->sync_thread, NULL, sync_main, p) != 0) {
            snprintf(err, errlen, "state_file: cannot start the fsync thread");
            goto fail;
        }
        p->sync_started = true;
    }
    (void)base;
    return p;
fail:
    sl__persist_free(p);
    return NULL;
}

sl_persist_found_t sl__persist_found(const sl_persist_t *p)
{
    return p->found;
}

const char *sl__persist_damage(const sl_persist_t *p)
{
    return p->found == SL_PERSIST_DAMAGED ? p->damage : "";
}

const char *sl__persist_kept_path(const sl_persist_t *p)
{
    return p->kept_path;
}

bool sl__persist_was_v1(const sl_persist_t *p)
{
    return p->was_v1;
}

sl_persist_t *sl__persist_read_bytes(const unsigned char *data, size_t len)
{
    sl_persist_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fd = -1;
    p->broken = true;      /* no file: every flush finds nothing to write to... */
    p->retry_at = INFINITY; /* ...and never tries to write one */
    take_bytes(p, data, len);
    return p;
}

void sl__persist_set_journal_min(size_t bytes)
{
    journal_min = bytes < 64 ? 64 : bytes;
}

uint64_t sl__persist_id_floor(const sl_persist_t *p)
{
    return p->id_floor ? p->id_floor + 1 : 0;
}

double sl__persist_latest_s(const sl_persist_t *p)
{
    return p->latest_s;
}

bool sl__persist_restore_pool(sl_persist_t *p, sl_engine_t *e, const char *name, double now_s)
{
    for (size_t i = 0; i < p->n_pools; i++)
        if (strcmp(p->pools[i].name, name) == 0)
            return sl_engine_pool_restore(e, name, &p->pools[i].st, now_s) == SL_OK;
    return false;
}

static int cmp_lease(const void *a, const void *b)
{
    const loaded_lease_t *x = a, *y = b;
    if (x->st.id != y->st.id) return x->st.id < y->st.id ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Is `rc`, from restoring a record into an engine, a refusal of the record itself (not a
 * pool that is no longer configured, not the engine's memory running out)? */
static bool refused(int rc)
{
    return rc != SL_OK && rc != SL_ENOTFOUND && rc != SL_ENOMEM;
}

/* Notes that the engine refused a record (`what`, its message): returns false. */
static bool engine_refuses(sl_persist_t *p, const char *what, const sl_engine_t *e)
{
    sl__persist_damaged(p, "the engine refuses %s: %s", what, sl_engine_errmsg(e));
    return false;
}

/* Restores the leases in flight and the calibrations into `e`, counting leases taken and
 * not; stops at the first record `e` refuses when `strict` (returns false, the reason in
 * p->damage). What was read stays. */
static bool restore_leases_and_calibrations(sl_persist_t *p, sl_engine_t *e, double now_s,
                                            bool strict, size_t *n_ok, size_t *n_dropped)
{
    if (p->n_leases) qsort(p->leases, p->n_leases, sizeof *p->leases, cmp_lease);
    if (p->n_ended) qsort(p->ended, p->n_ended, sizeof *p->ended, cmp_u64);
    for (size_t i = 0; i < p->n_leases; i++) {
        const sl_lease_state_t *l = &p->leases[i].st;
        if (i + 1 < p->n_leases && p->leases[i + 1].st.id == l->id) continue; /* the last wins */
        if (p->n_ended && bsearch(&l->id, p->ended, p->n_ended, sizeof *p->ended, cmp_u64))
            continue;
        int rc = sl_engine_lease_restore(e, l, now_s);
        if (strict && refused(rc))
            return engine_refuses(p, "a lease", e);
        if (rc == SL_OK)
            (*n_ok)++;
        else
            (*n_dropped)++;
    }
    for (size_t i = 0; i < p->n_calibs; i++) {
        int rc = sl_engine_calibration_restore(e, p->calibs[i].pool, &p->calibs[i].st);
        if (strict && refused(rc))
            return engine_refuses(p, "a calibration", e);
    }
    return true;
}

void sl__persist_restore_rest(sl_persist_t *p, sl_engine_t *e, double now_s, size_t *restored,
                              size_t *dropped)
{
    size_t n_ok = 0, n_dropped = 0;
    restore_leases_and_calibrations(p, e, now_s, false, &n_ok, &n_dropped);
    sl__persist_loaded_free(p);
    if (restored) *restored = n_ok;
    if (dropped) *dropped = n_dropped;
}

bool sl__persist_trial(sl_persist_t *p, sl_engine_t *scratch, double now_s)
{
    if (p->found != SL_PERSIST_LOADED) return true;
    for (size_t i = 0; i < p->n_pools; i++) {
        int rc = sl_engine_pool_restore(scratch, p->pools[i].name, &p->pools[i].st, now_s);
        if (refused(rc))
            return engine_refuses(p, "a pool", scratch);
    }
    size_t n_ok = 0, n_dropped = 0;
    return restore_leases_and_calibrations(p, scratch, now_s, true, &n_ok, &n_dropped);
}

int sl__persist_refuse(sl_persist_t *p, const char *reason, char *err, size_t errlen)
{
    if (reason) sl__persist_damaged(p, "%s", reason);
    forget_damaged(p);
    return p->path ? keep_aside(p, err, errlen) : 0;
}

/* ---- writing ---------------------------------------------------------------------- */

static void write_pool(buf_t *b, const char *name, const sl_pool_state_t *st)
{
    size_t at = rec_begin(b, 'P');
    put_str(b, name);
    for (int k = 0; k < SL_BUCKET_COUNT; k++)
        put_f64(b, st->level[k]);
    put_f64(b, st->at);
    put_f64(b, st->margin);
    put_f64(b, st->clean_since);
    put_f64(b, st->floor_since);
    put_f64(b, st->blocked_until);
    put_f64(b, st->cold_until);
    put_u32(b, st->cold_raised);
    put_f64(b, st->lease_mean_s);
    put_i64(b, st->lease_samples);
    rec_end(b, at);
}

static void write_lease(buf_t *b, const sl_lease_state_t *l)
{
    size_t at = rec_begin(b, 'L');
    put_u64(b, l->id);
    put_u64(b, l->ticket);
    put_str(b, l->pool);
    put_str(b, l->agent);
    put_str(b, l->cache_key);
    put_str(b, l->model);
    for (int k = 0; k < SL_BUCKET_COUNT; k++)
        put_i64(b, l->need[k]);
    put_i64(b, l->cached_tokens);
    put_i64(b, l->est_prompt_tokens);
    put_f64(b, l->weight);
    put_f64(b, l->granted_at);
    put_f64(b, l->waited_s);
    put_f64(b, l->ttl_s);
    put_f64(b, l->expires_at);
    put_u8(b, l->cache_penalty);
    put_u8(b, l->claimed);
    put_f64(b, l->cache_ttl_s);
    rec_end(b, at);
}

static void write_calib(buf_t *b, const char *pool, const sl_calibration_state_t *c)
{
    size_t at = rec_begin(b, 'C');
    put_str(b, pool);
    put_str(b, c->model);
    for (int i = 0; i < SL_CALIBRATION_WINDOW; i++)
        put_f64(b, c->sample[i]);
    put_u32(b, (uint32_t)c->n);
    put_u32(b, (uint32_t)c->pos);
    put_i64(b, c->total);
    for (int i = 0; i < SL_CALIBRATION_WINDOW; i++)
        put_i64(b, c->out_sample[i]);
    put_u32(b, (uint32_t)c->out_n);
    put_u32(b, (uint32_t)c->out_pos);
    rec_end(b, at);
}

static void write_suspended(buf_t *b, const sl_suspension_t *s)
{
    size_t at = rec_begin(b, 'U');
    put_str(b, s->agent);
    put_str(b, s->role);
    put_str(b, s->reason);
    put_str(b, s->metric);
    put_f64(b, s->z);
    put_i64(b, s->count);
    put_f64(b, s->at_s);
    rec_end(b, at);
}

void sl__persist_bind_suspended(sl_persist_t *p, sl_suspended_set_t *set)
{
    sl_suspended_set_t loaded = p->susp_loaded;
    p->susp_loaded = *set;
    *set = loaded;
    sl__suspended_clear(&p->susp_loaded);
    p->susp = set;
}

void sl__persist_suspended(sl_persist_t *p, const sl_suspension_t *s)
{
    write_suspended(&p->out, s);
}

void sl__persist_released(sl_persist_t *p, const char *agent)
{
    size_t at = rec_begin(&p->out, 'V');
    put_str(&p->out, agent);
    rec_end(&p->out, at);
}

/* ---- the batch queues (Q, q): their own records, apart from the engine's ---- */

static void write_batch(buf_t *b, const char *pool, const char *id, int64_t requests,
                        double expires_at)
{
    size_t at = rec_begin(b, 'Q');
    put_str(b, pool);
    put_str(b, id);
    put_i64(b, requests);
    put_f64(b, expires_at);
    rec_end(b, at);
}

void sl__persist_bind_batchq(sl_persist_t *p, sl_batchq_set_t *set)
{
    sl_batchq_set_t loaded = p->batchq_loaded;
    p->batchq_loaded = *set;
    *set = loaded;
    sl__batchq_clear(&p->batchq_loaded);
    p->batchq = set;
}

void sl__persist_batch_put(sl_persist_t *p, const char *pool, const char *id, int64_t requests,
                           double expires_at)
{
    write_batch(&p->out, pool, id, requests, expires_at);
}

void sl__persist_batch_del(sl_persist_t *p, const char *pool, const char *id)
{
    size_t at = rec_begin(&p->out, 'q');
    put_str(&p->out, pool);
    put_str(&p->out, id);
    rec_end(&p->out, at);
}

static void write_reserve(buf_t *b, uint64_t reserved)
{
    size_t at = rec_begin(b, 'I');
    put_u64(b, reserved);
    rec_end(b, at);
}

void sl__persist_pool(sl_persist_t *p, const sl_engine_t *e, const char *pool)
{
    sl_pool_state_t st;
    if (sl_engine_pool_state(e, pool, &st) == SL_OK) write_pool(&p->out, pool, &st);
}

void sl__persist_lease(sl_persist_t *p, const sl_engine_t *e, uint64_t lease)
{
    sl_lease_state_t st;
    if (sl_engine_lease_state(e, lease, &st) == SL_OK) write_lease(&p->out, &st);
}

void sl__persist_lease_end(sl_persist_t *p, uint64_t lease)
{
    size_t at = rec_begin(&p->out, 'E');
    put_u64(&p->out, lease);
    rec_end(&p->out, at);
}

void sl__persist_calibration(sl_persist_t *p, const sl_engine_t *e, const char *pool,
                             const char *model)
{
    sl_calibration_state_t c;
    if (sl_engine_calibration_state(e, pool, model, &c) == SL_OK) write_calib(&p->out, pool, &c);
}

void sl__persist_mark_lost(sl_persist_t *p)
{
    p->lost = true;
}

static int write_all(int fd, const unsigned char *data, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        data += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The fsync thread: every fsync_interval_s, fdatasync the file if records were written.
 * It holds sync_mu while it syncs, so the loop never closes the fd under it. */
static void *sync_main(void *arg)
{
    sl_persist_t *p = arg;
    pthread_mutex_lock(&p->sync_mu);
    while (!p->sync_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double ns = (double)until.tv_nsec + fmod(p->fsync_interval_s, 1.0) * 1e9;
        until.tv_sec += (time_t)p->fsync_interval_s + (time_t)(ns / 1e9);
        until.tv_nsec = (long)fmod(ns, 1e9);
        pthread_cond_timedwait(&p->sync_cv, &p->sync_mu, &until);
        if (p->fd >= 0 && atomic_exchange(&p->dirty, false)) fdatasync(p->fd);
    }
    pthread_mutex_unlock(&p->sync_mu);
    return NULL;
}

static void sync_lock(sl_persist_t *p)
{
    if (p->sync_started) pthread_mutex_lock(&p->sync_mu);
}

static void sync_unlock(sl_persist_t *p)
{
    if (p->sync_started) pthread_mutex_unlock(&p->sync_mu);
}

typedef struct snap_ctx {
    buf_t *b;
    const sl_engine_t *e;
    const char *pool;
} snap_ctx_t;

static void snap_lease(const sl_lease_state_t *l, void *ud)
{
    write_lease(((snap_ctx_t *)ud)->b, l);
}

static void snap_calib(const sl_calibration_state_t *c, void *ud)
{
    snap_ctx_t *s = ud;
    write_calib(s->b, s->pool, c);
}

static void snap_pool(const sl_pool_info_t *info, void *ud)
{
    snap_ctx_t *s = ud;
    sl_pool_state_t st;
    if (sl_engine_pool_state(s->e, info->name, &st) != SL_OK) return;
    write_pool(s->b, info->name, &st);
    s->pool = info->name;
    sl_engine_calibration_state_foreach(s->e, info->name, snap_calib, s);
}

int sl_backend_sync_dir(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int sl__persist_snapshot(sl_persist_t *p, sl_engine_t *e, char *err, size_t errlen)
{
    buf_t b = {0};
    uint64_t reserved = sl_engine_next_id(e) - 1 + ID_RESERVE;
    static const unsigned char zeros[FILE_HEAD_LEN + COMMIT_LEN];
    put(&b, zeros, sizeof zeros); /* the file's head and the snapshot's commit word: below */
    write_reserve(&b, reserved);
    snap_ctx_t ctx = {.b = &b, .e = e};
    sl_engine_pool_foreach(e, snap_pool, &ctx);
    sl_engine_lease_foreach(e, snap_lease, &ctx);
    for (size_t i = 0; p->susp && i < p->susp->n; i++)
        write_suspended(&b, &p->susp->items[i]);
    for (size_t i = 0; p->batchq && i < p->batchq->n; i++) {
        const sl_batchq_entry_t *q = &p->batchq->items[i];
        write_batch(&b, q->pool, q->id, q->requests, q->expires_at);
    }
    size_t at = rec_begin(&b, 'S');
    rec_end(&b, at);
    size_t records = b.n - sizeof zeros;
    put(&b, zeros, align8(records) - records);
    int fd = -1, rc;
    unsigned char *map = MAP_FAILED;
    size_t room = align8(b.n * 4 > journal_min ? b.n * 4 : journal_min);
    size_t len = b.n + room;
    if (b.failed || records > UINT32_MAX) {
        errno = b.failed ? ENOMEM : EFBIG;
        goto fail;
    }
    uint64_t len64 = len, commit = commit_word((uint32_t)records);
    memcpy(b.p, MAGIC, MAGIC_LEN);
    memcpy(b.p + MAGIC_LEN, &len64, sizeof len64);
    uint64_t head_sum = fnv1a(b.p, MAGIC_LEN + sizeof len64);
    memcpy(b.p + MAGIC_LEN + sizeof len64, &head_sum, sizeof head_sum);
    memcpy(b.p + FILE_HEAD_LEN, &commit, sizeof commit);
    fd = open(p->tmp_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write_all(fd, b.p, b.n) < 0) goto fail;
    /* The journal's room is allocated now: a full disk fails here, not in a store. */
    if ((rc = posix_fallocate(fd, 0, (off_t)len)) != 0) {
        errno = rc;
        goto fail;
    }
    if (fdatasync(fd) < 0 || rename(p->tmp_path, p->path) < 0) goto fail;
    sl_backend_sync_dir(p->path);
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) goto fail;
    sync_lock(p);
    if (p->map) munmap(p->map, p->map_len);
    if (p->fd >= 0) close(p->fd);
    p->fd = fd;
    p->map = map;
    p->map_len = len;
    p->map_off = b.n;
    atomic_store(&p->dirty, false);
    sync_unlock(p);
    p->reserved = reserved;
    p->out.n = 0; /* the snapshot holds everything buffered */
    p->out.failed = false;
    p->lost = false;
    p->broken = false;
    p->was_v1 = false;
    free(b.p);
    return 0;
fail:;
    int saved = errno;
    if (fd >= 0) close(fd);
    unlink(p->tmp_path);
    free(b.p);
    snprintf(err, errlen, "state_file: cannot write %s: %s", p->path, strerror(saved));
    return -1;
}

/* A failed snapshot: said once, retried at most once a second; what is buffered is
 * dropped (the next snapshot holds it). */
static void snapshot_or_wait(sl_persist_t *p, sl_engine_t *e)
{
    char err[512];
    p->out.n = 0;
    p->out.failed = false;
    if (p->broken && mono_s() < p->retry_at) return;
    bool was_broken = p->broken;
    if (sl__persist_snapshot(p, e, err, sizeof err) < 0) {
        if (!was_broken) sl__backend_log(SL_BACKEND_LOG_ERROR, "%s (retrying every second)", err);
        p->broken = true;
        p->retry_at = mono_s() + RETRY_EVERY_S;
    } else if (was_broken) {
        sl__backend_log(SL_BACKEND_LOG_INFO, "state_file: %s written again", p->path);
    }
}

/* Is there room for a batch of `n` bytes of records and, after it, the zero commit word
 * that ends the journal? */
static bool batch_fits(const sl_persist_t *p, size_t n)
{
    return n <= UINT32_MAX && COMMIT_LEN + align8(n) + COMMIT_LEN <= p->map_len - p->map_off;
}

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && sizeof(unsigned long long) == sizeof(uint64_t),
               "the commit word is stored in one 8-byte store");

/* Appends one batch at map_off: its records first, then its commit word in one aligned
 * 8-byte store (map_off is always a multiple of 8). A kill -9 between the two leaves the
 * commit word zero, which a reader takes as the end of the journal: that batch was never
 * answered. The release order keeps the compiler from moving the copy after the word. */
static void commit_batch(sl_persist_t *p, const unsigned char *records, size_t n)
{
    memcpy(p->map + p->map_off + COMMIT_LEN, records, n);
    _Atomic unsigned long long *word = (_Atomic unsigned long long *)(void *)(p->map + p->map_off);
    atomic_store_explicit(word, commit_word((uint32_t)n), memory_order_release);
    p->map_off += COMMIT_LEN + align8(n);
}

void sl__persist_flush(sl_persist_t *p, sl_engine_t *e)
{
    if (p->broken || p->lost || p->out.failed || !p->map) {
        snapshot_or_wait(p, e);
        return;
    }
    uint64_t next = sl_engine_next_id(e);
    bool reserve = next - 1 + ID_RESERVE / 2 > p->reserved;
    if (reserve) {
        p->reserved = next - 1 + ID_RESERVE;
        write_reserve(&p->out, p->reserved);
    }
    if (p->out.n == 0) return;
    if (p->out.failed || !batch_fits(p, p->out.n)) {
        /* The journal's room is used up: a new snapshot, with fresh room, replaces it. */
        snapshot_or_wait(p, e);
        return;
    }
    commit_batch(p, p->out.p, p->out.n);
    p->out.n = 0;
    /* A reservation must reach the disk before its ids are used; so must every record
     * when the interval is 0. */
    if (reserve || p->fsync_interval_s <= 0)
        fdatasync(p->fd);
    else
        atomic_store(&p->dirty, true);
}

void sl__persist_free(sl_persist_t *p)
{
    if (!p) return;
    if (p->sync_started) {
        pthread_mutex_lock(&p->sync_mu);
        p->sync_stop = true;
        pthread_cond_signal(&p->sync_cv);
        pthread_mutex_unlock(&p->sync_mu);
        pthread_join(p->sync_thread, NULL);
        pthread_mutex_destroy(&p->sync_mu);
        pthread_cond_destroy(&p->sync_cv);
    }
    if (p->map && p->out.n && !p->out.failed && batch_fits(p, p->out.n))
        commit_batch(p, p->out.p, p->out.n);
    if (p->fd >= 0) fdatasync(p->fd);
    if (p->map) munmap(p->map, p->map_len);
    if (p->fd >= 0) close(p->fd);
    sl__persist_loaded_free(p);
    free(p->out.p);
    free(p->kept_path);
    free(p->path);
    free(p->tmp_path);
    free(p);
}
