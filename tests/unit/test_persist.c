/* test_persist.c - the memory backend's state file: a snapshot and its journal read back
 * into a fresh engine, a record torn by a power failure, a file that is not ours, and the
 * id reservation that keeps ids from repeating. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "persist.h"
#include "suspended.h"

#define T0 1796000000.0

static sl_engine_t *engine(void)
{
    sl_engine_t *e = sl_engine_new(NULL);
    assert_non_null(e);
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 600000;
    assert_int_equal(sl_engine_configure_pool(e, "default", &cfg, T0), SL_OK);
    return e;
}

static uint64_t grant(sl_engine_t *e, int64_t in)
{
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = "a";
    r.input_tokens = in;
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, T0, &d), SL_OK);
    assert_int_equal(d.status, SL_GRANTED);
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
    char p[160];
    snprintf(p, sizeof p, "%s.bad", f->path);
    unlink(p);
    snprintf(p, sizeof p, "%s.tmp", f->path);
    unlink(p);
    unlink(f->path);
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

/* The offset of the last nonzero byte: the end of the journal in the preallocated file. */
static off_t journal_end(const char *path)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    off_t last = -1, off = 0;
    int c;
    while ((c = fgetc(fp)) != EOF) {
        if (c) last = off;
        off++;
    }
    fclose(fp);
    return last;
}

static void test_a_torn_last_record_ends_the_journal_there(void **state)
{
    fixture_t *f = *state;
    uint64_t ids[2];
    write_state(f, ids);
    /* The last record (the pool after the settle) fails its checksum, as after a power
     * failure in the middle of the page; the one before it (the first lease's end) stands. */
    off_t end = journal_end(f->path);
    assert_true(end > 0);
    int fd = open(f->path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, end), 1);
    byte ^= 0xff;
    assert_int_equal(pwrite(fd, &byte, 1, end), 1);
    close(fd);
    size_t restored = 0;
    sl_engine_t *e = read_state(f, &restored);
    assert_int_equal(restored, 1);
    /* The level of the record before the torn one: both leases charged, no refund yet. */
    assert_true(fabs(level(e) - (510000 - 3000)) < 1e-6);
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
    assert_int_equal(sl__persist_found(p), SL_PERSIST_UNREADABLE);
    assert_int_equal(sl__persist_id_floor(p), 0);
    sl__persist_free(p);
    char bad[160];
    snprintf(bad, sizeof bad, "%s.bad", f->path);
    struct stat sb;
    assert_int_equal(stat(bad, &sb), 0);
    assert_int_not_equal(stat(f->path, &sb), 0);
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
    assert_int_equal(sl_engine_calibration_state(e, "default", "m", &c), SL_OK);
    assert_int_equal(c.out_n, 1);
    assert_int_equal(c.out_sample[0], 42);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_snapshot_and_journal_come_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_torn_last_record_ends_the_journal_there, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_file_that_is_not_ours_is_moved_aside, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ids_are_reserved_ahead_of_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_version_1_file_still_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_durations_and_output_samples_come_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_suspensions_come_back_in_journal_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_an_unreadable_path_is_an_error_naming_it, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
