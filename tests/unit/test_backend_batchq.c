/* test_backend_batchq.c - the backend's batch processing queues (sl_backend_batch_queue) on the memory backend, its state file, and on two redis backends sharing one Redis.
 *
 * The same steps run on every backend, so the memory backend's rules (batchq.c) and
 * sluice.lua's batch section (batch.lua) are held to one set of answers. Without
 * arguments: the memory backend and a restart from its state file. With
 * `--redis HOST:PORT`: two replicas A and B on that Redis (tests/redis.cmake starts one).
 */
#include "backend.h"
#include "redis.h"
#include "../integration/redis/redis_test.h"

#include <event2/event.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct answer {
    int rc; /* 99 until answered */
    bool counted;
    int64_t queued;
    char errmsg[200];
} answer_t;

static void on_answer(int rc, bool counted, int64_t queued, const char *errmsg, void *ud)
{
    answer_t *a = ud;
    a->rc = rc;
    a->counted = counted;
    a->queued = queued;
    snprintf(a->errmsg, sizeof a->errmsg, "%s", errmsg ? errmsg : "");
}

/* One call, answered (the memory backend at once, Redis within 5 s). */
static answer_t call(sl_backend_t *b, sl_batchq_op_t op, const char *pool, const char *id,
                     const char *new_id, int64_t requests, int64_t max_requests, double ttl_s)
{
    answer_t a = {.rc = 99};
    sl_batchq_call_t c = {op, pool, id, new_id, requests, max_requests, ttl_s};
    sl_backend_batch_queue(b, &c, on_answer, &a);
    for (int i = 0; i < 100 && a.rc == 99; i++) run_for(0.05);
    return a;
}

/* One call's answer against what is expected (the call is made once). */
#define EXPECT(call_, rc_, counted_, queued_)                                                  \
    do {                                                                                       \
        answer_t got_ = (call_);                                                               \
        CHECK(got_.rc == (rc_) && got_.counted == (counted_) && got_.queued == (queued_),      \
              "got rc %d counted %d queued %lld (%s), want rc %d counted %d queued %lld",      \
              got_.rc, got_.counted, (long long)got_.queued, got_.errmsg, rc_, counted_,       \
              (long long)(queued_));                                                           \
    } while (0)

/* Replicas `a` and `b` (the same backend on memory) share pool "pb"'s queue. */
static void test_creates_through_either_replica_count_against_one_bound(sl_backend_t *a,
                                                                         sl_backend_t *b)
{
    const double day = 90000;
    EXPECT(call(a, SL_BATCHQ_COUNT, "pb", NULL, NULL, 0, 0, 0), SL_OK, false, 0);
    EXPECT(call(a, SL_BATCHQ_ADD, "pb", "hold-a1", NULL, 3, 5, 60), SL_OK, true, 3);
    /* B's create does not fit beside A's: refused, nothing changed. */
    EXPECT(call(b, SL_BATCHQ_ADD, "pb", "hold-b1", NULL, 3, 5, 60), SL_OK, false, 3);
    EXPECT(call(b, SL_BATCHQ_COUNT, "pb", NULL, NULL, 0, 0, 0), SL_OK, false, 3);
    /* An id counted already is not counted twice. */
    EXPECT(call(b, SL_BATCHQ_ADD, "pb", "hold-a1", NULL, 1, 5, 60), SL_OK, false, 3);
    /* Another pool has its own queue. */
    EXPECT(call(b, SL_BATCHQ_ADD, "other", "hold-b2", NULL, 3, 5, 60), SL_OK, true, 3);
    /* The create answered: the hold becomes the batch, with the provider's count. */
    EXPECT(call(a, SL_BATCHQ_BIND, "pb", "hold-a1", "mb_1", 4, 0, day), SL_OK, true, 4);
    EXPECT(call(b, SL_BATCHQ_ADD, "pb", "hold-b3", NULL, 1, 5, 60), SL_OK, true, 5);
    EXPECT(call(b, SL_BATCHQ_ADD, "pb", "hold-b4", NULL, 0, 5, 60), SL_OK, true, 5);
    /* Both replicas see mb_1 end: it leaves the queue once. */
    EXPECT(call(b, SL_BATCHQ_RELEASE, "pb", "mb_1", NULL, 0, 0, 0), SL_OK, true, 1);
    EXPECT(call(a, SL_BATCHQ_RELEASE, "pb", "mb_1", NULL, 0, 0, 0), SL_OK, false, 1);
    /* A hold forgotten before its answer still counts the batch the provider has. */
    EXPECT(call(a, SL_BATCHQ_BIND, "pb", "hold-gone", "mb_2", 2, 0, day), SL_OK, true, 3);
    EXPECT(call(a, SL_BATCHQ_RELEASE, "pb", "hold-b3", NULL, 0, 0, 0), SL_OK, true, 2);
    EXPECT(call(a, SL_BATCHQ_RELEASE, "pb", "hold-b4", NULL, 0, 0, 0), SL_OK, true, 2);
    EXPECT(call(b, SL_BATCHQ_RELEASE, "pb", "mb_2", NULL, 0, 0, 0), SL_OK, true, 0);
    EXPECT(call(b, SL_BATCHQ_RELEASE, "other", "hold-b2", NULL, 0, 0, 0), SL_OK, true, 0);
}

static void test_bad_calls_name_the_field_and_change_nothing(sl_backend_t *a)
{
    answer_t r = call(a, SL_BATCHQ_ADD, "pb", "h", NULL, -1, 5, 60);
    CHECK(r.rc == SL_EINVAL && strstr(r.errmsg, "requests: -1"), "negative requests: %d %s",
          r.rc, r.errmsg);
    r = call(a, SL_BATCHQ_ADD, "", "h", NULL, 1, 5, 60);
    CHECK(r.rc == SL_EINVAL && strstr(r.errmsg, "pool"), "empty pool: %d %s", r.rc, r.errmsg);
    r = call(a, SL_BATCHQ_BIND, "pb", "h", NULL, 1, 0, 60);
    CHECK(r.rc == SL_EINVAL && strstr(r.errmsg, "new_id"), "bind without new_id: %d %s", r.rc,
          r.errmsg);
    r = call(a, SL_BATCHQ_ADD, "pb", "h", NULL, 1, 5, 0);
    CHECK(r.rc == SL_EINVAL && strstr(r.errmsg, "ttl_s"), "ttl 0: %d %s", r.rc, r.errmsg);
    EXPECT(call(a, SL_BATCHQ_COUNT, "pb", NULL, NULL, 0, 0, 0), SL_OK, false, 0);
}

/* What nobody sees end is forgotten after its ttl (memory stays bounded). */
static void test_an_entry_is_forgotten_after_its_ttl(sl_backend_t *a, sl_backend_t *b)
{
    /* The long-lived entry first: the short one's count is read in the call that adds it,
     * so no gap between two calls (a loaded machine's) can let it lapse before it is seen. */
    EXPECT(call(b, SL_BATCHQ_ADD, "pt", "hold-u", NULL, 3, 5, 60), SL_OK, true, 3);
    EXPECT(call(a, SL_BATCHQ_ADD, "pt", "hold-t", NULL, 2, 5, 0.5), SL_OK, true, 5);
    struct timespec pause = {0, 700 * 1000 * 1000};
    nanosleep(&pause, NULL);
    EXPECT(call(b, SL_BATCHQ_COUNT, "pt", NULL, NULL, 0, 0, 0), SL_OK, false, 3);
    EXPECT(call(a, SL_BATCHQ_RELEASE, "pt", "hold-u", NULL, 0, 0, 0), SL_OK, true, 0);
}

static void on_configured(int rc, double value, const char *errmsg, void *ud)
{
    (void)value, (void)errmsg;
    ((answer_t *)ud)->rc = rc;
}

static void configure(sl_backend_t *b)
{
    static char name[] = "pb";
    sl_named_pool_t pool = {.name = name};
    sl_pool_config_init(&pool.config);
    pool.config.rpm = 100;
    sl_backend_settings_t s = {.pools = &pool, .n_pools = 1};
    answer_t a = {.rc = 99};
    sl_backend_configure(b, &s, on_configured, &a);
    for (int i = 0; i < 100 && a.rc == 99; i++) run_for(0.05);
    CHECK(a.rc == SL_OK, "configure: rc %d", a.rc);
}

static sl_backend_t *memory_with_file(const char *path)
{
    sl_memory_options_t o;
    sl_memory_options_init(&o);
    o.state_file = path;
    o.fsync_interval_s = 0;
    char err[256];
    sl_backend_t *b = sl_backend_memory_open(base, NULL, &o, err, sizeof err);
    CHECK(b, "memory backend: %s", err);
    if (b) configure(b);
    return b;
}

/* The state file keeps the queue across a restart: journaled records, then a snapshot. */
static void test_a_restart_keeps_the_queue(void)
{
    char dir[] = "/tmp/sluice-batchq-XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp");
    char path[300];
    snprintf(path, sizeof path, "%s/state", dir);
    sl_backend_t *m = memory_with_file(path);
    if (!m) return;
    EXPECT(call(m, SL_BATCHQ_ADD, "pb", "hold-1", NULL, 3, 5, 60), SL_OK, true, 3);
    EXPECT(call(m, SL_BATCHQ_BIND, "pb", "hold-1", "mb_1", 3, 0, 90000), SL_OK, true, 3);
    EXPECT(call(m, SL_BATCHQ_ADD, "pb", "hold-2", NULL, 1, 5, 60), SL_OK, true, 4);
    EXPECT(call(m, SL_BATCHQ_RELEASE, "pb", "hold-2", NULL, 0, 0, 0), SL_OK, true, 3);
    sl_backend_free(m);
    m = memory_with_file(path); /* restored from the journal; writes a snapshot */
    if (!m) return;
    EXPECT(call(m, SL_BATCHQ_ADD, "pb", "hold-3", NULL, 3, 5, 60), SL_OK, false, 3);
    EXPECT(call(m, SL_BATCHQ_ADD, "pb", "hold-3", NULL, 2, 5, 60), SL_OK, true, 5);
    sl_backend_free(m);
    m = memory_with_file(path); /* restored from that snapshot and its journal */
    if (!m) return;
    EXPECT(call(m, SL_BATCHQ_COUNT, "pb", NULL, NULL, 0, 0, 0), SL_OK, false, 5);
    EXPECT(call(m, SL_BATCHQ_RELEASE, "pb", "mb_1", NULL, 0, 0, 0), SL_OK, true, 2);
    sl_backend_free(m);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "rm");
}

static sl_backend_t *replica(const char *host, int port, const char *id)
{
    sl_redis_options_t o;
    sl_redis_options_init(&o);
    snprintf(o.host, sizeof o.host, "%s", host);
    o.port = port;
    o.timeout_s = 2.0;
    o.tick_s = 0.2;
    o.replace_library = true;
    snprintf(o.replica_id, sizeof o.replica_id, "%s", id);
    char err[512];
    sl_backend_t *b = sl_backend_redis_new(base, &o, NULL, err, sizeof err);
    CHECK(b, "replica %s: %s", id, err);
    if (!b) return NULL;
    configure(b);
    for (int i = 0; i < 100 && !sl_backend_redis_available(b); i++) run_for(0.05);
    CHECK(sl_backend_redis_available(b), "replica %s not up", id);
    return b;
}

int main(int argc, char **argv)
{
    base = event_base_new();
    if (argc == 3 && !strcmp(argv[1], "--redis")) {
        char host[256];
        snprintf(host, sizeof host, "%s", argv[2]);
        char *colon = strrchr(host, ':');
        int port = colon ? atoi(colon + 1) : 6379;
        if (colon) *colon = '\0';
        sl_backend_t *a = replica(host, port, "batchq-a"), *b = replica(host, port, "batchq-b");
        if (a && b) {
            test_creates_through_either_replica_count_against_one_bound(a, b);
            test_bad_calls_name_the_field_and_change_nothing(a);
            test_an_entry_is_forgotten_after_its_ttl(a, b);
        }
        sl_backend_free(a);
        sl_backend_free(b);
    } else {
        sl_backend_t *m = sl_backend_memory_new(base, NULL);
        configure(m);
        test_creates_through_either_replica_count_against_one_bound(m, m);
        test_bad_calls_name_the_field_and_change_nothing(m);
        test_an_entry_is_forgotten_after_its_ttl(m, m);
        sl_backend_free(m);
        test_a_restart_keeps_the_queue();
    }
    event_base_free(base);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
