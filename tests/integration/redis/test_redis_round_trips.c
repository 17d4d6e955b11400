/* test_redis_round_trips.c - the Redis commands one lease costs: a lease naming a task is one FCALL, the task's role read by the library itself.
 *
 * Run by with-redis.sh (SLUICE_REDIS_PORT). One redis backend on an event loop; the FCALLs
 * Redis ran are counted from INFO commandstats (reset with CONFIG RESETSTAT just before
 * the lease), so the count is the server's, not the client's idea of it. The backend
 * speaks to the library only in FCALLs (the old three were FCALLs too), so FCALLs are
 * its round trips; the other commands counted are those the function ran inside (HGET of
 * the graph among them), printed for the record. Before issue 26 a lease naming a task cost three
 * round trips (the daemon read the whole graph for the role, the backend asked the graph
 * for unblocks, then the request); now the request's FCALL declares the graph's key and
 * resolves both. The role checks travel with it: a role the token may not take is
 * refused by the same single call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis.h>

#include "redis.h"
#include "redis_test.h"

static void on_done(int rc, double value, const char *errmsg, void *ud)
{
    (void)value;
    (void)errmsg;
    *(int *)ud = rc;
}

typedef struct answer {
    int rc; /* 99 until answered */
    sl_decision_t d;
} answer_t;

static void on_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    answer_t *a = ud;
    (void)errmsg;
    a->rc = rc;
    if (d) a->d = *d;
}

/* Commands Redis ran since the last CONFIG RESETSTAT: FCALLs, and the others (but this
 * connection's INFO and CONFIG): those the functions ran. */
static void count_commands(redisContext *c, long *fcalls, long *others)
{
    *fcalls = *others = 0;
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        CHECK(false, "INFO commandstats failed");
        if (r) freeReplyObject(r);
        return;
    }
    for (char *line = strtok(r->str, "\r\n"); line; line = strtok(NULL, "\r\n")) {
        char name[64];
        long calls;
        if (sscanf(line, "cmdstat_%63[^:]:calls=%ld", name, &calls) != 2) continue;
        if (strcmp(name, "fcall") == 0) *fcalls += calls;
        else if (strcmp(name, "info") != 0 && strncmp(name, "config", 6) != 0) *others += calls;
    }
    freeReplyObject(r);
}

static void reset_stats(redisContext *c)
{
    redisReply *r = redisCommand(c, "CONFIG RESETSTAT");
    if (r) freeReplyObject(r);
}

static answer_t lease(sl_backend_t *b, const sl_request_t *req)
{
    answer_t a = {.rc = 99};
    sl_backend_request(b, req, on_decision, &a);
    for (int i = 0; i < 100 && a.rc == 99; i++) run_for(0.02);
    return a;
}

int main(void)
{
    int port = atoi(getenv("SLUICE_REDIS_PORT") ? getenv("SLUICE_REDIS_PORT") : "0");
    base = event_base_new();
    redisContext *stats = redisConnect("127.0.0.1", port);
    if (!base || !stats || stats->err) {
        fprintf(stderr, "FAIL: cannot reach redis on port %d\n", port);
        return 1;
    }
    sl_redis_options_t o;
    sl_redis_options_init(&o);
    o.port = port;
    o.tick_s = 60; /* no heartbeat inside the measured windows */
    snprintf(o.replica_id, sizeof o.replica_id, "rt");
    char err[512];
    sl_backend_t *b = sl_backend_redis_new(base, &o, NULL, err, sizeof err);
    CHECK(b != NULL, "backend: %s", err);
    if (!b) return 1;
    for (int i = 0; i < 100 && !sl_backend_redis_available(b); i++) run_for(0.05);
    CHECK(sl_backend_redis_available(b), "backend not up");

    static char name[] = "default";
    sl_named_pool_t pool = {.name = name};
    sl_pool_config_init(&pool.config);
    pool.config.input_tpm = 1000000;
    sl_backend_settings_t s = {.pools = &pool, .n_pools = 1};
    int rc = 99;
    sl_backend_configure(b, &s, on_done, &rc);
    for (int i = 0; i < 100 && rc == 99; i++) run_for(0.02);
    CHECK(rc == SL_OK, "configure: rc %d", rc);
    const char *deps[] = {"plan"};
    rc = 99;
    sl_backend_task_put(b, "plan", "planner", NULL, 0, SL_TASK_RUNNING, on_done, &rc);
    for (int i = 0; i < 100 && rc == 99; i++) run_for(0.02);
    CHECK(rc == SL_OK, "task plan: rc %d", rc);
    rc = 99;
    sl_backend_task_put(b, "w1", "worker", deps, 1, SL_TASK_WAITING, on_done, &rc);
    for (int i = 0; i < 100 && rc == 99; i++) run_for(0.02);
    CHECK(rc == SL_OK, "task w1: rc %d", rc);

    /* A lease naming a task: the planner's role and one unblocked task, one FCALL. */
    sl_request_t req = {.agent = "a", .input_tokens = 100, .output_tokens = 10, .task = "plan"};
    long fcalls, others;
    reset_stats(stats);
    answer_t a = lease(b, &req);
    count_commands(stats, &fcalls, &others);
    CHECK(a.rc == SL_OK && a.d.status == SL_GRANTED, "lease naming a task: rc %d", a.rc);
    CHECK(fabs(a.d.weight - 3 * 1.5) < 1e-9, "weight %g, want the planner's 3 x 1.5", a.d.weight);
    CHECK(fcalls == 1, "a lease naming a task: %ld FCALLs, want 1", fcalls);
    printf("a lease naming a task: %ld FCALL (%ld commands inside it)\n", fcalls, others);

    /* A token allowed only "worker" naming the planner's task: refused, in the same call. */
    const char *workers[] = {"worker"};
    sl_request_t refused = req;
    refused.agent = "b";
    refused.roles_allowed = workers;
    refused.n_roles_allowed = 1;
    reset_stats(stats);
    a = lease(b, &refused);
    count_commands(stats, &fcalls, &others);
    CHECK(a.rc == SL_EFORBIDDEN, "a role the token may not take: rc %d, want SL_EFORBIDDEN", a.rc);
    CHECK(fcalls == 1, "a refused lease: %ld FCALLs, want 1", fcalls);
    printf("a lease refused for the task's role: %ld FCALL (%ld commands inside it)\n", fcalls,
           others);

    /* A lease naming no task: one FCALL too. */
    sl_request_t plain = {.agent = "c", .input_tokens = 100, .output_tokens = 10};
    reset_stats(stats);
    a = lease(b, &plain);
    count_commands(stats, &fcalls, &others);
    CHECK(a.rc == SL_OK && fcalls == 1, "a lease naming no task: rc %d, %ld FCALLs", a.rc, fcalls);
    printf("a lease naming no task: %ld FCALL (%ld commands inside it)\n", fcalls, others);

    sl_backend_free(b);
    redisFree(stats);
    event_base_free(base);
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    else printf("ok\n");
    return failures ? 1 : 0;
}
