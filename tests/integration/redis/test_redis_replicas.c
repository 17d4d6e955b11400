/* test_redis_replicas.c - several redis backends (replicas) on one Redis: shared quota, a killed replica, Redis failing.
 *
 * Run by with-redis.sh (SLUICE_REDIS_PORT, SLUICE_REDIS_PID, SLUICE_REDIS_DIR). The
 * replicas are backend instances on one event loop in this process (the daemon
 * wiring is not there yet), except the killed one, which is a forked process.
 *   load    - three replicas, 10,000 random requests of 1,000 input tokens: queued
 *             grants are claimed by whoever holds the ticket, leases are settled
 *             through a random replica, and the grants never exceed what one bucket
 *             allows (capacity + refill x elapsed time).
 *   kill    - a forked replica takes leases and is killed with SIGKILL mid-load: its
 *             leases are reaped without refund and nothing is overbooked.
 *   failure - Redis stops answering (SIGSTOP): fail-closed answers unavailable,
 *             fail-open decides locally and alerts; a settle accepted while down is
 *             replayed; SIGCONT recovers. Then Redis is killed and restarted empty:
 *             the library is reloaded and the pools configured again.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "redis.h"
#include "redis_test.h"
#include "redis/redis_proto.h"

#define SIZE_TOKENS 1000
#define INPUT_TPM 6000000 /* capacity 5,100,000, refill 85,000/s */

static sl_backend_t *replica(const char *id, sl_redis_fail_t fail)
{
    sl_redis_options_t o;
    sl_redis_options_init(&o);
    o.port = atoi(getenv("SLUICE_REDIS_PORT"));
    o.fail = fail;
    o.cold_start_full = true; /* these tests count grants from a full bucket */
    o.tick_s = 0.2;
    o.timeout_s = 2.0;
    snprintf(o.replica_id, sizeof o.replica_id, "%s", id);
    char err[512];
    sl_backend_t *b = sl_backend_redis_new(base, &o, NULL, err, sizeof err);
    if (!b) fprintf(stderr, "replica %s: %s\n", id, err);
    return b;
}

static void on_done(int rc, double value, const char *errmsg, void *ud)
{
    (void)value;
    (void)errmsg;
    if (ud) *(int *)ud = rc;
}

static void configure(sl_backend_t *b, double lease_ttl_s)
{
    static char name[] = "default";
    sl_named_pool_t pool = {.name = name};
    sl_pool_config_init(&pool.config);
    pool.config.input_tpm = INPUT_TPM;
    pool.config.lease_ttl_s = lease_ttl_s;
    sl_backend_settings_t s = {.pools = &pool, .n_pools = 1};
    int rc = 99;
    sl_backend_configure(b, &s, on_done, &rc);
    for (int i = 0; i < 50 && rc == 99; i++) run_for(0.05);
    CHECK(rc == SL_OK, "configure: rc %d", rc);
}

static void wait_up(sl_backend_t *b)
{
    for (int i = 0; i < 100 && !sl_backend_redis_available(b); i++) run_for(0.05);
    CHECK(sl_backend_redis_available(b), "backend not up");
}

typedef struct pool_snapshot {
    int rc;
    sl_pool_info_t info;
} pool_snapshot_t;

static void on_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud)
{
    pool_snapshot_t *s = ud;
    (void)errmsg;
    s->rc = rc;
    if (rc == SL_OK && n == 1) s->info = pools[0];
}

static sl_pool_info_t pool_info(sl_backend_t *b)
{
    pool_snapshot_t s = {.rc = 99};
    sl_backend_pools(b, "default", on_pools, &s);
    for (int i = 0; i < 100 && s.rc == 99; i++) run_for(0.02);
    CHECK(s.rc == SL_OK, "pools: rc %d", s.rc);
    return s.info;
}

/* ---- load ---- */

#define MAX_REPLICAS 3
static sl_backend_t *replicas[MAX_REPLICAS];
static int n_replicas;
static long granted, queued, rejected, settled, errors, claimed;
static long in_flight_requests;

typedef struct waiter {
    uint64_t ticket;
    int replica;
} waiter_t;
static waiter_t waiters[20000];
static int n_waiters;

static void settle_lease(uint64_t lease);

static void on_settled(int rc, const sl_settle_result_t *r, const char *errmsg, void *ud)
{
    (void)r;
    (void)ud;
    if (rc == SL_OK) settled++;
    else {
        errors++;
        fprintf(stderr, "settle: %s\n", errmsg);
    }
}

static void settle_lease(uint64_t lease)
{
    sl_settle_t s = {.input_tokens = SIZE_TOKENS, .retry_after_s = -1};
    /* through any replica: a lease granted by one is settled through another */
    sl_backend_settle(replicas[rand() % n_replicas], lease, &s, on_settled, NULL);
}

static void on_claim(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    (void)errmsg;
    (void)ud;
    if (rc == SL_OK && d->status == SL_GRANTED) {
        claimed++;
        settle_lease(d->lease);
    }
}

static void on_event(const sl_event_t *ev, void *ud)
{
    int me = (int)(intptr_t)ud;
    if (ev->kind != SL_EV_GRANTED || !ev->ticket) return;
    for (int i = 0; i < n_waiters; i++) {
        if (waiters[i].ticket == ev->ticket && waiters[i].replica == me) {
            waiters[i].ticket = 0; /* the holder answers it */
            sl_backend_ticket_poll(replicas[me], ev->ticket, on_claim, NULL);
            return;
        }
    }
}

static void on_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    int me = (int)(intptr_t)ud;
    in_flight_requests--;
    if (rc != SL_OK) {
        errors++;
        fprintf(stderr, "request: %s\n", errmsg);
        return;
    }
    if (d->status == SL_GRANTED) {
        granted++;
        settle_lease(d->lease);
    } else if (d->status == SL_QUEUED) {
        queued++;
        if (n_waiters < 20000) waiters[n_waiters++] = (waiter_t){d->ticket, me};
    } else {
        rejected++;
    }
}

static void issue(int n)
{
    static const char *roles[] = {"planner", "reviewer", "worker", "worker"};
    for (int i = 0; i < n; i++) {
        char agent[32];
        snprintf(agent, sizeof agent, "agent-%d", rand() % 40);
        sl_request_t r = {.agent = agent, .input_tokens = SIZE_TOKENS, .role = roles[rand() % 4]};
        int me = rand() % n_replicas;
        in_flight_requests++;
        sl_backend_request(replicas[me], &r, on_decision, (void *)(intptr_t)me);
    }
}

static double redis_time(void)
{
    redisContext *c = redisConnect("127.0.0.1", atoi(getenv("SLUICE_REDIS_PORT")));
    redisReply *r = redisCommand(c, "TIME");
    double t = strtod(r->element[0]->str, NULL) + strtod(r->element[1]->str, NULL) / 1e6;
    freeReplyObject(r);
    redisFree(c);
    return t;
}

/* Grants never exceed one bucket: capacity + refill since the pool was created. */
static void check_bound(sl_backend_t *b, double t0, const char *what)
{
    sl_pool_info_t info = pool_info(b);
    double elapsed = redis_time() - t0;
    double cap = INPUT_TPM * 0.85;
    double bound = cap + cap / 60.0 * elapsed;
    double taken = (double)info.granted_total * SIZE_TOKENS;
    printf("%s: %llu grants = %.0f tokens in %.2f s; one bucket allows %.0f (level %.0f)\n", what,
           (unsigned long long)info.granted_total, taken, elapsed, bound, info.level[0]);
    CHECK(taken <= bound + 1e-6, "%s: granted %.0f tokens, the bucket allows %.0f", what, taken, bound);
    CHECK(info.level[0] <= cap + 1e-6, "%s: level %.0f above capacity", what, info.level[0]);
}

static void test_load(void)
{
    n_replicas = 3;
    for (int i = 0; i < n_replicas; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        replicas[i] = replica(id, SL_REDIS_FAIL_CLOSED);
        if (!replicas[i]) exit(1);
        sl_backend_set_event_cb(replicas[i], on_event, (void *)(intptr_t)i);
        wait_up(replicas[i]);
    }
    double t0 = redis_time();
    for (int i = 0; i < n_replicas; i++) configure(replicas[i], 120);
    /* ~800 requests per second: what one Redis core sustains here with the settles */
    for (int round = 0; round < 500; round++) {
        issue(20);
        run_for(0.025);
    }
    while (in_flight_requests > 0) run_for(0.05);
    run_for(1.0); /* let queue heads come due and be claimed */
    printf("load: granted %ld directly, queued %ld (claimed %ld), rejected %ld, settled %ld, "
           "errors %ld\n", granted, queued, claimed, rejected, settled, errors);
    CHECK(granted + queued + rejected == 10000, "10,000 answers expected, got %ld",
          granted + queued + rejected);
    CHECK(errors == 0, "%ld errors", errors);
    CHECK(claimed > 0, "no queued request was granted and claimed across replicas");
    check_bound(replicas[0], t0, "load");
    for (int i = 0; i < n_replicas; i++) sl_backend_free(replicas[i]);
}

/* ---- kill -9 a replica ---- */

static void on_victim_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    (void)rc, (void)d, (void)errmsg, (void)ud; /* never settled: its agents crash with it */
}

static void child_replica(void)
{
    base = event_base_new();
    n_replicas = 1;
    replicas[0] = replica("victim", SL_REDIS_FAIL_CLOSED);
    if (!replicas[0]) _exit(1);
    wait_up(replicas[0]);
    configure(replicas[0], 3);
    /* takes leases and never settles them: as if its agents crashed with it */
    for (;;) {
        for (int i = 0; i < 4; i++) {
            sl_request_t r = {.agent = "victim-agent", .input_tokens = SIZE_TOKENS};
            sl_backend_request(replicas[0], &r, on_victim_decision, NULL);
        }
        run_for(0.01);
    }
}

static int reaped_seen;

static void on_kill_event(const sl_event_t *ev, void *ud)
{
    (void)ud;
    if (ev->kind == SL_EV_REAPED) reaped_seen++;
}

static void test_kill(void)
{
    n_replicas = 2;
    for (int i = 0; i < n_replicas; i++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", i);
        replicas[i] = replica(id, SL_REDIS_FAIL_CLOSED);
        if (!replicas[i]) exit(1);
        sl_backend_set_event_cb(replicas[i], on_kill_event, NULL);
        wait_up(replicas[i]);
    }
    double t0 = redis_time();
    for (int i = 0; i < n_replicas; i++) configure(replicas[i], 3);
    pid_t pid = fork();
    if (pid == 0) child_replica();
    for (int round = 0; round < 100; round++) {
        issue(8);
        run_for(0.02);
    }
    sl_pool_info_t before = pool_info(replicas[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("kill: replica killed with %lld leases in flight\n", (long long)before.leases_in_flight);
    CHECK(before.leases_in_flight > 0, "the killed replica held no leases");
    while (in_flight_requests > 0) run_for(0.05);
    run_for(4.0); /* lease_ttl 3 s: every lease of the dead replica expires */
    sl_pool_info_t after = pool_info(replicas[0]);
    printf("kill: %lld leases in flight after the TTL, %d reaped (no refund)\n",
           (long long)after.leases_in_flight, reaped_seen);
    CHECK(after.leases_in_flight == 0, "%lld leases left", (long long)after.leases_in_flight);
    CHECK(reaped_seen > 0, "no reaped lease reported");
    check_bound(replicas[0], t0, "kill");
    for (int i = 0; i < n_replicas; i++) sl_backend_free(replicas[i]);
}

/* ---- Redis failing ---- */

static int alert_active = -1;

static void on_alert(const sl_event_t *ev, void *ud)
{
    (void)ud;
    if (ev->kind == SL_EV_ALERT && ev->alert && strcmp(ev->alert, "backend_unavailable") == 0)
        alert_active = ev->active;
}

typedef struct answer {
    int rc;
    sl_decision_t d;
} answer_t;

static void on_answer(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    answer_t *a = ud;
    (void)errmsg;
    a->rc = rc;
    if (d) a->d = *d;
}

static answer_t ask(sl_backend_t *b, const char *agent)
{
    answer_t a = {.rc = 99};
    sl_request_t r = {.agent = agent, .input_tokens = SIZE_TOKENS};
    sl_backend_request(b, &r, on_answer, &a);
    for (int i = 0; i < 100 && a.rc == 99; i++) run_for(0.02);
    return a;
}

static void on_settle_rc(int rc, const sl_settle_result_t *r, const char *errmsg, void *ud)
{
    (void)r;
    (void)errmsg;
    *(int *)ud = rc;
}

static int settle_wait(sl_backend_t *b, uint64_t lease)
{
    int rc = 99;
    sl_settle_t s = {.input_tokens = SIZE_TOKENS, .retry_after_s = -1};
    sl_backend_settle(b, lease, &s, on_settle_rc, &rc);
    for (int i = 0; i < 100 && rc == 99; i++) run_for(0.02);
    return rc;
}

static int ping(sl_backend_t *b)
{
    int rc = 99;
    sl_backend_ping(b, on_done, &rc);
    for (int i = 0; i < 100 && rc == 99; i++) run_for(0.02);
    return rc;
}

static void restart_redis(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "kill -9 %s; sleep 0.3; redis-server %s/redis.conf --daemonize yes >/dev/null",
             getenv("SLUICE_REDIS_PID"), getenv("SLUICE_REDIS_DIR"));
    CHECK(system(cmd) == 0, "restarting redis failed");
}

static void test_failure(void)
{
    pid_t redis_pid = (pid_t)atoi(getenv("SLUICE_REDIS_PID"));
    sl_backend_t *closed = replica("closed", SL_REDIS_FAIL_CLOSED);
    sl_backend_t *open = replica("open", SL_REDIS_FAIL_OPEN);
    if (!closed || !open) exit(1);
    sl_backend_set_event_cb(open, on_alert, NULL);
    wait_up(closed);
    wait_up(open);
    configure(closed, 120);
    configure(open, 120);
    run_for(0.5); /* heartbeats: two replicas */
    CHECK(sl_backend_redis_replicas(open) == 2, "replicas %d", sl_backend_redis_replicas(open));
    answer_t before = ask(open, "a");
    CHECK(before.rc == SL_OK && before.d.status == SL_GRANTED, "grant before the outage");

    kill(redis_pid, SIGSTOP);
    answer_t c = ask(closed, "a");
    CHECK(c.rc == SL_REDIS_EUNAVAILABLE, "fail closed: rc %d", c.rc);
    answer_t o = ask(open, "a");
    /* The first ask meets the timeout; the local share starts empty and refills. */
    for (int i = 0; i < 30 && !(o.rc == SL_OK && o.d.status == SL_GRANTED); i++) {
        run_for(0.1);
        o = ask(open, "a");
    }
    CHECK(o.rc == SL_OK && o.d.status == SL_GRANTED && sl__rid_pool(o.d.lease) >= SL__RPOOL_LOCAL_MIN,
          "fail open: a local grant expected (rc %d)", o.rc);
    run_for(0.1);
    CHECK(alert_active == 1, "alert backend_unavailable not raised");
    CHECK(ping(open) != SL_OK && ping(closed) != SL_OK, "ping must fail while down");
    /* the local share is 1/2 of the limits: 2,550,000 tokens, then local rejections */
    sl_pool_info_t local = pool_info(open);
    CHECK(local.limit[0] == INPUT_TPM / 2, "local limit %lld", (long long)local.limit[0]);
    CHECK(settle_wait(open, o.d.lease) == SL_OK, "settling a local lease");
    CHECK(settle_wait(open, before.d.lease) == SL_OK, "settling a Redis lease while down");

    kill(redis_pid, SIGCONT);
    for (int i = 0; i < 60 && !(sl_backend_redis_available(open) && sl_backend_redis_available(closed)); i++)
        run_for(0.1);
    CHECK(ping(open) == SL_OK && ping(closed) == SL_OK, "ping after recovery");
    CHECK(alert_active == 0, "alert not cleared");
    run_for(0.3);
    /* the settle accepted while down was replayed exactly once */
    CHECK(settle_wait(closed, before.d.lease) == SL_EALREADY, "replayed settle: second settle must be already_settled");
    sl_pool_info_t info = pool_info(closed);
    printf("failure: after recovery %lld leases in flight in Redis\n", (long long)info.leases_in_flight);
    CHECK(info.leases_in_flight == 0, "in-doubt requests must be forgotten (%lld in flight)",
          (long long)info.leases_in_flight);
    answer_t after = ask(closed, "a");
    CHECK(after.rc == SL_OK && after.d.status == SL_GRANTED && sl__rid_pool(after.d.lease) < SL__RPOOL_LOCAL_MIN,
          "Redis decides again after recovery");

    /* Redis killed and restarted empty: the library is loaded and pools configured again. */
    restart_redis();
    for (int i = 0; i < 80 && !(sl_backend_redis_available(closed)); i++) run_for(0.1);
    run_for(0.5);
    answer_t again = ask(closed, "a");
    CHECK(again.rc == SL_OK && again.d.status == SL_GRANTED, "grant after a Redis restart (rc %d)",
          again.rc);
    sl_backend_free(closed);
    sl_backend_free(open);
}

int main(int argc, char **argv)
{
    if (!getenv("SLUICE_REDIS_PORT")) {
        fprintf(stderr, "run me through with-redis.sh\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    srand(12345);
    base = event_base_new();
    const char *mode = argc > 1 ? argv[1] : "load";
    if (strcmp(mode, "load") == 0) test_load();
    else if (strcmp(mode, "kill") == 0) test_kill();
    else if (strcmp(mode, "failure") == 0) test_failure();
    event_base_free(base);
    printf("%s: %s\n", mode, failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
