/* persist_format.h - the state file's format (docs/server.md "Format 2") and the state
 * shared by its reader (persist_read.c) and its writer (persist.c). Internal to the
 * memory backend. */
#ifndef SL_PERSIST_FORMAT_H
#define SL_PERSIST_FORMAT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "persist.h"
#include "batchq.h"
#include "suspended.h"

#define MAGIC         "SLSTATE2"
#define MAGIC_V1      "SLSTATE1" /* read once, rewritten as format 2 */
#define MAGIC_LEN     8
#define FILE_HEAD_LEN 24 /* magic, u64 file length, u64 FNV-1a of both */
#define COMMIT_LEN    8  /* u32 batch length, u32 its complement */
#define HEAD_LEN      12 /* a record's u32 length + u64 checksum */
#define RECORD_MAX    (1u << 20)
#define STR_NULL      0xffffu

/* A growable byte buffer. */
typedef struct buf {
    unsigned char *p;
    size_t n, cap;
    bool failed; /* out of memory: what it holds is incomplete */
} buf_t;

/* What the file held, until it is restored. */
typedef struct loaded_pool {
    char *name;
    sl_pool_state_t st;
} loaded_pool_t;

typedef struct loaded_lease {
    sl_lease_state_t st; /* strings owned */
    size_t seq;          /* position in the file: the last record of an id wins */
} loaded_lease_t;

typedef struct loaded_calib {
    char *pool;
    sl_calibration_state_t st; /* model owned */
} loaded_calib_t;

struct sl_persist {
    char *path;
    char *tmp_path;
    int fd;             /* the state file; -1 before the first snapshot */
    unsigned char *map; /* the whole file, MAP_SHARED */
    size_t map_len;
    size_t map_off; /* where the next record goes */
    double fsync_interval_s;
    pthread_t sync_thread; /* fdatasync every fsync_interval_s */
    bool sync_started;
    pthread_mutex_t sync_mu; /* guards fd against the thread's fdatasync, and stop */
    pthread_cond_t sync_cv;
    bool sync_stop;
    atomic_bool dirty; /* records written since the thread's last fdatasync */
    sl_persist_found_t found;
    char damage[200];  /* why the file was refused (SL_PERSIST_DAMAGED) */
    char *kept_path;   /* where a refused file was moved */
    bool was_v1;       /* the file was format 1: the first snapshot rewrites it */
    size_t n_records;  /* 'L' records read: the last of an id wins */
    buf_t out;         /* records not yet written */
    uint64_t reserved; /* ids up to this may be issued */
    uint64_t id_floor;
    double latest_s;
    bool lost;       /* a record could not be made: snapshot at the next flush */
    bool broken;     /* the last write failed */
    double retry_at; /* monotonic seconds of the next snapshot attempt when broken */
    loaded_pool_t *pools;
    size_t n_pools;
    loaded_lease_t *leases;
    size_t n_leases, cap_leases;
    uint64_t *ended;
    size_t n_ended, cap_ended;
    loaded_calib_t *calibs;
    size_t n_calibs;
    sl_suspended_set_t susp_loaded; /* the file's suspensions, until bound */
    const sl_suspended_set_t *susp; /* the live set snapshots write (borrowed) */
    sl_batchq_set_t batchq_loaded;    /* the file's batch queues, until bound */
    const sl_batchq_set_t *batchq;    /* the live set snapshots write (borrowed) */
};

/* FNV-1a, 64 bits: every record's checksum and the file head's. It catches every change
 * confined to one byte (each step is a bijection of the state). */
static inline uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static inline uint64_t commit_word(uint32_t len)
{
    return (uint64_t)len | ((uint64_t)(uint32_t)~len << 32);
}

static inline size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* Reads data[0, len), a whole state file, into p: 0 when all of it verified (p holds what
 * it says), -1 when it did not (p->damage says why; p may hold part of it: forget it). */
int sl__persist_parse(sl_persist_t *p, const unsigned char *data, size_t len);

/* Reads the whole file at `path`. Returns 0 (with *data NULL when there is no file, else
 * malloc'ed), or -1 with errno set. */
int sl__persist_slurp(const char *path, unsigned char **data, size_t *len);

/* Notes why a file was refused (the first reason only, printf-style). Returns -1. */
int sl__persist_damaged(sl_persist_t *p, const char *fmt, ...);

/* Frees what was read and not yet restored (pools, leases, ends, calibrations, the file's
 * suspensions). */
void sl__persist_loaded_free(sl_persist_t *p);

#endif /* SL_PERSIST_FORMAT_H */
