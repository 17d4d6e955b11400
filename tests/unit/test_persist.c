/* test_persist.c - the memory backend's state file: a snapshot and its journal read back
 * into a fresh engine; a damaged file (cut at every byte, each bit flipped) restores all or
 * nothing; a batch a kill -9 left uncommitted; a file that is not ours; format 1 read once;
 * and the id reservation that keeps ids from repeating. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "engine_harness.h"
#include "persist.h"
#include "suspended.h"
#include "test_main.h"

static sl_engine_t *engine(void)
{
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = 600000;
    return harness_engine_config(&cfg);
}

static uint64_t grant(sl_engine_t *e, int64_t in)
{
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = "a";
    r.input_tokens = in;
    sl_decision_t d = harness_request_as(e, &r, T0, SL_GRANTED);
    return d.lease;
}

typedef struct fixture {
    char dir[64];
    char path[128];
    struct event_base *base;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/sluice-persist-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    snprintf(f->path, sizeof f->path, "%s/state", f->dir);
    f->base = event_base_new();
    *state = f;
    return f->base ? 0 : -1;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    DIR *d = opendir(f->dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s", f->dir, de->d_name);
        if (de->d_name[0] != '.') unlink(p);
    }
    if (d) closedir(d);
    rmdir(f->dir);
    event_base_free(f->base);
    free(f);
    return 0;
}

static sl_persist_t *open_ok(fixture_t *f)
{
    char err[512];
    sl_persist_t *p = sl__persist_open(f->base, f->path, 1.0, err, sizeof err);
    if (!p) fail_msg("%s", err);
    return p;
}

/* Writes a snapshot with one lease (1,000 tokens), then journals a second (2,000) and
 * the end of the first. Returns the two ids. */
static void write_state(fixture_t *f, uint64_t ids[2])
{
    sl_persist_t *p = open_ok(f);
    assert_int_equal(sl__persist_found(p), SL_PERSIST_NONE);
    sl_engine_t *e = engine();
    ids[0] = grant(e, 1000);
    char err[512];
    assert_int_equal(sl__persist_snapshot(p, e, err, sizeof err), 0);
    ids[1] = grant(e, 2000);
    sl__persist_lease(p, e, ids[1]);
    sl__persist_pool(p, e, "default");
    sl__persist_flush(p, e);
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.input_tokens = 400; /* 600 go back */
    s.retry_after_s = -1;
    assert_int_equal(sl_engine_settle(e, ids[0], &s, T0, NULL), SL_OK);
    sl__persist_lease_end(p, ids[0]);
    sl__persist_pool(p, e, "default");
    sl__persist_flush(p, e);
    sl__persist_free(p);
    sl_engine_free(e);
}

/* Reads the file into a fresh engine; returns it with the number of leases restored. */
static sl_engine_t *read_state(fixture_t *f, size_t *restored)
{
    sl_persist_t *p = open_ok(f);
    assert_int_equal(sl__persist_found(p), SL_PERSIST_LOADED);
    sl_engine_t *e = engine();
    assert_true(sl__persist_id_floor(p) > 0);
    assert_int_equal(sl_engine_set_id_base(e, sl__persist_id_floor(p)), SL_OK);
    assert_true(sl__persist_restore_pool(p, e, "default", T0));
    sl__persist_restore_rest(p, e, T0, restored, NULL);
    sl__persist_free(p);
    assert_int_equal(sl_engine_check(e), SL_OK);
    return e;
}

static double level(sl_engine_t *e)
{
    sl_pool_info_t info;
    assert_int_equal(sl_engine_pool_info(e, "default", &info), SL_OK);
    return info.level[SL_BUCKET_INPUT];
}

static void test_snapshot_and_journal_come_back(void **state)
{
    fixture_t *f = *state;
    uint64_t ids[2];
    write_state(f, ids);
    size_t restored = 0;
    sl_engine_t *e = read_state(f, &restored);
    assert_int_equal(restored, 1);
    sl_lease_state_t l;
    assert_int_equal(sl_engine_lease_state(e, ids[1], &l), SL_OK);
    assert_int_equal(l.need[SL_BUCKET_INPUT], 2000);
    assert_int_equal(sl_engine_lease_state(e, ids[0], &l), SL_ENOTFOUND);
    assert_true(fabs(level(e) - (510000 - 3000 + 600)) < 1e-6); /* with the settle's refund */
    assert_true(sl_engine_next_id(e) > ids[1]);
    sl_engine_free(e);
}

/* The whole file. */
static unsigned char *slurp_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *data = malloc((size_t)n + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return data;
}

/* The offset of the zero commit word that ends the journal: the batches walked by their
 * commit words from the end of the file's 24-byte head (docs/server.md "Format 2"). */
static size_t journal_end(const unsigned char *data, size_t len)
{
    size_t off = 24;
    for (;;) {
        assert_true(off + 8 <= len);
        uint64_t w;
        memcpy(&w, data + off, sizeof w);
        if (w == 0) return off;
        off += 8 + (((size_t)(uint32_t)w + 7) & ~(size_t)7);
    }
}

/* What a reading of data[0, len) restores into a fresh engine, reduced to a number that
 * changes with any lease or level: -1 when the reading found the file damaged, after
 * checking that nothing of it is restored then. */
static double restored_state(const unsigned char *data, size_t len)
{
    sl_persist_t *p = sl__persist_read_bytes(data, len);
    assert_non_null(p);
    sl_engine_t *e = engine();
    assert_int_equal(sl_engine_set_id_base(e, sl__persist_id_floor(p) + (1u << 30)), SL_OK);
    bool pool = sl__persist_restore_pool(p, e, "default", T0);
    size_t restored = 0, dropped = 0;
    sl__persist_restore_rest(p, e, T0, &restored, &dropped);
    double fingerprint = -1;
    if (sl__persist_found(p) == SL_PERSIST_DAMAGED) {
        assert_false(pool);
        assert_int_equal(restored + dropped, 0);
        assert_true(strlen(sl__persist_damage(p)) > 0);
    } else {
        assert_int_equal(sl__persist_found(p), SL_PERSIST_LOADED);
        assert_true(pool);
        fingerprint = level(e) * 1000 + (double)restored;
    }
    sl__persist_free(p);
    sl_engine_free(e);
    return fingerprint;
}

/* The case, shrunk: nine leases held (each journaled in its own batch, as a
 * daemon answers them one by one), two ended; then the file is cut at every byte and
 * every bit of it is flipped in turn. Each damaged copy must restore exactly the whole
 * state or nothing (a cold start) — never some of the leases with some level. */
static void test_every_cut_and_every_bit_flip_restores_all_or_nothing(void **state)
{
    fixture_t *f = *state;
    sl__persist_set_journal_min(8192);
    sl_persist_t *p = open_ok(f);
    sl_engine_t *e = engine();
    char err[512];
    assert_int_equal(sl__persist_snapshot(p, e, err, sizeof err), 0);
    uint64_t ids[9];
    for (int i = 0; i < 9; i++) {
        ids[i] = grant(e, 1000 * (i + 1));
        sl__persist_lease(p, e, ids[i]);
        sl__persist_pool(p, e, "default");
        sl__persist_flush(p, e);
    }
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sl_engine_cancel(e, ids[i], T0), SL_OK);
        sl__persist_lease_end(p, ids[i]);
        sl__persist_pool(p, e, "default");
        sl__persist_flush(p, e);
    }
    sl__persist_free(p);
    sl_engine_free(e);
    sl__persist_set_journal_min(32u << 20);

    size_t len;
    unsigned char *data = slurp_file(f->path, &len);
    size_t end = journal_end(data, len) + 8;
    assert_true(len <= 16384);
    double whole = restored_state(data, len);
    assert_true(whole >= 0);
    assert_true(fmod(whole, 1000) == 7); /* seven leases in flight */
    size_t loaded = 0;
    for (size_t cut = 0; cut < len; cut++)
        if (restored_state(data, cut) != -1) fail_msg("cut at %zu of %zu restored", cut, len);
    size_t span = end + 64 < len ? end + 64 : len; /* the batches and the zeros after them */
    for (size_t bit = 0; bit < span * 8; bit++) {
        data[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        double got = restored_state(data, len);
        data[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        if (got != -1 && got != whole)
            fail_msg("bit %zu flipped restored part of the state (%g, not %g)", bit, got, whole);
        loaded += got != -1;
    }
    /* Only bits past the end of the journal (never committed) leave the state whole. */
    assert_true(loaded <= (span - end) * 8);
    free(data);
}

/* A kill -9 after a batch's records were copied into the file but before its commit word
 * was stored: the reader takes the zero word as the end (the batch was never answered),
 * restores everything committed before it, and does not call that damage. */
static void test_a_batch_never_committed_is_the_end_not_damage(void **state)
{
    fixture_t *f = *state;
    uint64_t ids[2];
    write_state(f, ids);
    size_t len;
    unsigned char *data = slurp_file(f->path, &len);
    size_t end = journal_end(data, len);
    double whole = restored_state(data, len);
    assert_true(whole >= 0);
    /* Half a batch of records after the zero commit word: any bytes, here a copy of the
     * journal's first batch's records. */
    memcpy(data + end + 8, data + 32, 100);
    assert_true(restored_state(data, len) == whole);
    /* But the same bytes with a valid commit word after a zero one: a hole, not a tail. */
    uint64_t commit;
    memcpy(&commit, data + 24, sizeof commit);
    memcpy(data + end + 8, data + 24, (size_t)(uint32_t)commit + 8);
    assert_true(restored_state(data, len) == -1);
    free(data);
}

static void test_a_flipped_byte_in_the_last_record_restores_nothing_and_keeps_the_file(
    void **state)
{
    fixture_t *f = *state;
    uint64_t ids[2];
    write_state(f, ids);
    size_t len;
    unsigned char *data = slurp_file(f->path, &len);
    off_t last = (off_t)journal_end(data, len) - 9; /* in the last batch's last record... */
    while (last > 0 && data[last] == 0) /* ...its last nonzero byte (padding is zero) */
        last--;
    free(data);
    int fd = open(f->path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, last), 1);
    byte ^= 0xff;
    assert_int_equal(pwrite(fd, &byte, 1, last), 1);
    close(fd);
    sl_persist_t *p = open_ok(f);
    assert_int_equal(sl__persist_found(p), SL_PERSIST_DAMAGED);
    assert_non_null(strstr(sl__persist_damage(p), "checksum"));
    const char *kept = sl__persist_kept_path(p);
    assert_non_null(kept);
    assert_non_null(strstr(kept, ".damaged-"));
    struct stat sb;
    assert_int_equal(stat(kept, &sb), 0);
    assert_int_not_equal(stat(f->path, &sb), 0);
    sl_engine_t *e = engine();
    assert_false(sl__persist_restore_pool(p, e, "default", T0));
    size_t restored = 1;
    sl__persist_restore_rest(p, e, T0, &restored, NULL);
    assert_int_equal(restored, 0);
    assert_true(sl__persist_id_floor(p) > ids[1]); /* ids still never repeat */
    sl__persist_free(p);
    sl_engine_free(e);
}

static void test_a_file_that_is_not_ours_is_moved_aside(void **state)
{
    fixture_t *f = *state;
    FILE *fp = fopen(f->path, "wb");
    assert_non_null(fp);
    fputs("hello\n", fp);
    fclose(fp);
    sl_persist_t *p = open_ok(f);
    assert_int_equal(sl__persist_found(p), SL_PERSIST_DAMAGED);
    assert_non_null(strstr(sl__persist_damage(p), "not a sluice state file"));
    assert_int_equal(sl__persist_id_floor(p), 0);
    struct stat sb;
    assert_int_equal(stat(sl__persist_kept_path(p), &sb), 0);
    assert_int_not_equal(stat(f->path, &sb), 0);
    sl__persist_free(p);
}

/* ---- a file written by record version 1 (before D and the output samples) ---- */

typedef struct rec {
    unsigned char b[1024];
    size_t n;
} rec_t;

static void rec_put(rec_t *r, const void *v, size_t n)
{
    memcpy(r->b + r->n, v, n);
    r->n += n;
}

static void rec_f64(rec_t *r, double v)
{
    rec_put(r, &v, sizeof v);
}

static void rec_str(rec_t *r, const char *s)
{
    uint16_t n = (uint16_t)strlen(s);
    rec_put(r, &n, sizeof n);
    rec_put(r, s, n);
}

/* Appends the record (u32 length, u64 FNV-1a of the body, the body) to fp. */
static void rec_write(FILE *fp, const rec_t *r)
{
    uint32_t len = (uint32_t)r->n;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < r->n; i++) {
        h ^= r->b[i];
        h *= 0x100000001b3ULL;
    }
    fwrite(&len, sizeof len, 1, fp);
    fwrite(&h, sizeof h, 1, fp);
    fwrite(r->b, 1, r->n, fp);
}

static void test_a_version_1_file_still_loads(void **state)
{
    fixture_t *f = *state;
    FILE *fp = fopen(f->path, "wb");
    assert_non_null(fp);
    fputs("SLSTATE1", fp);
    rec_t r = {.n = 0};
    rec_put(&r, "I", 1);
    uint64_t reserved = 1 << 20;
    rec_put(&r, &reserved, sizeof reserved);
    rec_write(fp, &r);
    r.n = 0; /* P without lease_mean_s and lease_samples */
    rec_put(&r, "P", 1);
    rec_str(&r, "default");
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        rec_f64(&r, b == SL_BUCKET_INPUT ? 1000 : 0);
    rec_f64(&r, T0);         /* at */
    rec_f64(&r, 0.80);       /* margin */
    rec_f64(&r, T0);         /* clean_since */
    rec_f64(&r, -1);         /* floor_since */
    rec_f64(&r, -INFINITY);  /* blocked_until */
    rec_f64(&r, 0);          /* cold_until */
    uint32_t zero = 0;
    rec_put(&r, &zero, sizeof zero);
    rec_write(fp, &r);
    r.n = 0; /* C without the output samples */
    rec_put(&r, "C", 1);
    rec_str(&r, "default");
    rec_str(&r, "m");
    for (int i = 0; i < SL_CALIBRATION_WINDOW; i++)
        rec_f64(&r, i < 5 ? 2.0 : 0);
    uint32_t n = 5, pos = 5;
    int64_t total = 5;
    rec_put(&r, &n, sizeof n);
    rec_put(&r, &pos, sizeof pos);
    rec_put(&r, &total, sizeof total);
    rec_write(fp, &r);
    r.n = 0;
    rec_put(&r, "S", 1);
    rec_write(fp, &r);
    fclose(fp);

    size_t restored = 0;
    sl_engine_t *e = read_state(f, &restored);
    assert_true(fabs(level(e) - 1000) < 1e-6);
    sl_pool_state_t st;
    assert_int_equal(sl_engine_pool_state(e, "default", &st), SL_OK);
    assert_true(fabs(st.margin - 0.80) < 1e-9);
    assert_int_equal(st.lease_samples, 0); /* D unknown */
    sl_calibration_state_t c;
    assert_int_equal(sl_engine_calibration_state(e, "default", "m", &c), SL_OK);
    assert_int_equal(c.n, 5);
    assert_int_equal(c.out_n, 0);
    sl_engine_free(e);
}

static void test_lease_durations_and_output_samples_come_back(void **state)
{
    fixture_t *f = *state;
    sl_persist_t *p = open_ok(f);
    sl_engine_t *e = engine();
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = "a";
    r.input_tokens = 100;
    r.output_tokens = 50;
    r.model = "m";
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.input_tokens = 100;
    s.output_tokens = 42;
    s.retry_after_s = -1;
    assert_int_equal(sl_engine_settle(e, d.lease, &s, T0 + 7, NULL), SL_OK);
    char err[512];
    assert_int_equal(sl__persist_snapshot(p, e, err, sizeof err), 0);
    sl__persist_free(p);
    sl_engine_free(e);

    size_t restored = 0;
    e = read_state(f, &restored);
    sl_pool_state_t st;
    assert_int_equal(sl_engine_pool_state(e, "default", &st), SL_OK);
    assert_int_equal(st.lease_samples, 1);
    assert_true(fabs(st.lease_mean_s - 7) < 1e-9);
    sl_calibration_state_t c;
    /* Output samples are kept per model and agent group (the role): "m" US "worker". */
    assert_int_equal(sl_engine_calibration_state(e, "default", "m\x1fworker", &c), SL_OK);
    assert_int_equal(c.out_n, 1);
    assert_int_equal(c.out_sample[0], 42);
    sl_engine_free(e);
}

/* A call of 100 input tokens over a 10,000-token cached prefix, by `agent` through
 * `cache_key` (NULL: its own cache), at `now`; returns the decision, granted. */
static sl_decision_t cached_call(sl_engine_t *e, const char *agent, const char *cache_key,
                                 double now)
{
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = agent;
    r.cache_key = cache_key;
    r.input_tokens = 100;
    r.cached_tokens = 10000;
    return harness_request_as(e, &r, now, SL_GRANTED);
}

/* One namespace of prompt caches across a restart: a restored lease of b naming
 * cache_key=a writes the cache a's own calls read, and c's own restored lease writes the
 * cache d reads through cache_key=c. a has a record of its own after the restart (its
 * restored lease), so the cache it reads is not found by accident of a missing record. */
static void test_restored_leases_write_caches_by_name_whoever_named_them(void **state)
{
    fixture_t *f = *state;
    sl_persist_t *p = open_ok(f);
    sl_engine_t *e = engine();
    uint64_t via_b = cached_call(e, "b", "a", T0).lease;
    uint64_t own_a = harness_grant(e, "a", 10, 0, T0);
    uint64_t own_c = cached_call(e, "c", NULL, T0).lease;
    char err[512];
    assert_int_equal(sl__persist_snapshot(p, e, err, sizeof err), 0);
    sl__persist_free(p);
    sl_engine_free(e);

    size_t restored = 0;
    e = read_state(f, &restored);
    assert_int_equal(restored, 3);
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.input_tokens = 100;
    s.cache_creation_input_tokens = 10000;
    s.retry_after_s = -1;
    assert_int_equal(sl_engine_settle(e, via_b, &s, T0 + 1, NULL), SL_OK);
    assert_int_equal(sl_engine_settle(e, own_c, &s, T0 + 1, NULL), SL_OK);
    assert_int_equal(sl_engine_cancel(e, own_a, T0 + 1), SL_OK);
    sl_decision_t d = cached_call(e, "a", NULL, T0 + 2);
    assert_false(d.cache_penalty);
    assert_int_equal(d.charged_input_tokens, 100);
    d = cached_call(e, "d", "c", T0 + 2);
    assert_false(d.cache_penalty);
    assert_int_equal(d.charged_input_tokens, 100);
    assert_int_equal(sl_engine_check(e), SL_OK);
    sl_engine_free(e);
}

static void test_ids_are_reserved_ahead_of_use(void **state)
{
    fixture_t *f = *state;
    sl_persist_t *p = open_ok(f);
    sl_engine_t *e = engine();
    char err[512];
    assert_int_equal(sl__persist_snapshot(p, e, err, sizeof err), 0);
    /* Many ids issued with nothing journaled about them (tickets, say): the reservation
     * written as they go still covers them. */
    assert_int_equal(sl_engine_set_id_base(e, 3u << 20), SL_OK);
    sl__persist_flush(p, e);
    uint64_t last = grant(e, 1);
    sl__persist_free(p);
    sl_engine_free(e);
    p = open_ok(f);
    assert_true(sl__persist_id_floor(p) > last);
    sl__persist_free(p);
}

/* Suspensions: one in the snapshot, one journaled after it, the first released in the
 * journal; a restart finds exactly the second, and a new snapshot keeps it. */
static void test_suspensions_come_back_in_journal_order(void **state)
{
    fixture_t *f = *state;
    char err[512];
    sl_suspended_set_t set = {0};
    sl_persist_t *p = open_ok(f);
    sl__persist_bind_suspended(p, &set);
    sl_engine_t *e = engine();
    sl_suspension_t a = {"runaway", "worker", "anomaly", "requests", 7.5, 80, T0};
    sl_suspension_t b = {"looper", "", "admin", "", 0, 0, T0 + 1};
    assert_int_equal(sl__suspended_put(&set, &a), 1);
    assert_int_equal(sl__suspended_put(&set, &a), 0); /* the first record stands */
    assert_int_equal(sl__persist_snapshot(p, e, err, sizeof err), 0);
    assert_int_equal(sl__suspended_put(&set, &b), 1);
    sl__persist_suspended(p, &b);
    assert_true(sl__suspended_del(&set, "runaway"));
    sl__persist_released(p, "runaway");
    sl__persist_flush(p, e);
    sl__persist_free(p);

    for (int round = 0; round < 2; round++) { /* read, snapshot again, read again */
        sl_suspended_set_t back = {0};
        p = open_ok(f);
        sl__persist_bind_suspended(p, &back);
        assert_int_equal(back.n, 1);
        assert_string_equal(back.items[0].agent, "looper");
        assert_string_equal(back.items[0].reason, "admin");
        assert_true(back.items[0].at_s == T0 + 1);
        assert_int_equal(sl__persist_snapshot(p, e, err, sizeof err), 0);
        sl__persist_free(p);
        sl__suspended_clear(&back);
    }
    sl__suspended_clear(&set);
    sl_engine_free(e);
}

static void test_an_unreadable_path_is_an_error_naming_it(void **state)
{
    fixture_t *f = *state;
    char err[512] = "";
    sl_persist_t *p = sl__persist_open(f->base, f->dir, 1.0, err, sizeof err); /* a directory */
    assert_null(p);
    assert_non_null(strstr(err, f->dir));
}

SL_TEST_MAIN(
    cmocka_unit_test_setup_teardown(test_snapshot_and_journal_come_back, setup, teardown),
    cmocka_unit_test_setup_teardown(test_every_cut_and_every_bit_flip_restores_all_or_nothing,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_a_batch_never_committed_is_the_end_not_damage, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(
        test_a_flipped_byte_in_the_last_record_restores_nothing_and_keeps_the_file, setup,
        teardown),
    cmocka_unit_test_setup_teardown(test_a_file_that_is_not_ours_is_moved_aside, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_ids_are_reserved_ahead_of_use, setup, teardown),
    cmocka_unit_test_setup_teardown(test_a_version_1_file_still_loads, setup, teardown),
    cmocka_unit_test_setup_teardown(test_lease_durations_and_output_samples_come_back, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_restored_leases_write_caches_by_name_whoever_named_them,
                                    setup, teardown),
    cmocka_unit_test_setup_teardown(test_suspensions_come_back_in_journal_order, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_an_unreadable_path_is_an_error_naming_it, setup,
                                    teardown))
