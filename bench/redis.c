/* bench/redis.c - lease-then-settle round trips per second: memory backend vs redis backend (1 and 2 replicas).
 *
 * Usage: bench_redis PORT [SECONDS]  (a redis-server on 127.0.0.1:PORT; bench/redis.sh starts one).
 * Keeps 32 lease-then-settle loops in flight, spread over the replicas, on one event loop,
 * for SECONDS (default 3) per configuration, and prints round trips per second and ratios.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "bench_clock.h"
#include "backend.h"
#include "redis.h"

#define LOOPS 32

static struct event_base *base;
static sl_backend_t *backends[2];
static int n_backends;
static long done_trips, errors;
static int stopping;
static double t_end;

static void start_trip(int i);

/* The memory backend answers before returning: start the next trip from the loop, not
 * from inside the callback, so the stack does not grow. */
static void on_next(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    start_trip((int)(intptr_t)ud);
}

static void next_trip(int i)
{
    /* a zero timeout, not an active event: the loop checks its exit between passes */
    struct timeval zero = {0, 0};
    event_base_once(base, -1, EV_TIMEOUT, on_next, (void *)(intptr_t)i, &zero);
}

static void on_settled(int rc, const sl_settle_result_t *r, const char *errmsg, void *ud)
{
    (void)r;
    (void)errmsg;
    if (rc == SL_OK) done_trips++;
    else errors++;
    if (!stopping && wall_s() >= t_end) {
        stopping = 1;
        event_base_loopbreak(base);
    }
    if (!stopping) next_trip((int)(intptr_t)ud);
}

static void on_granted(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    int i = (int)(intptr_t)ud;
    if (rc != SL_OK || d->status != SL_GRANTED) {
        errors++;
        if (errors < 3) fprintf(stderr, "bench: %s\n", errmsg ? errmsg : "not granted");
        if (!stopping) next_trip(i);
        return;
    }
    sl_settle_t s = {.input_tokens = 100, .output_tokens = 10, .retry_after_s = -1};
    /* settled through the other replica when there are two */
    sl_backend_settle(backends[(i + 1) % n_backends], d->lease, &s, on_settled, ud);
}

static void start_trip(int i)
{
    char agent[16];
    snprintf(agent, sizeof agent, "bench-%d", i);
    sl_request_t r = {.agent = agent, .input_tokens = 100, .output_tokens = 10};
    sl_backend_request(backends[i % n_backends], &r, on_granted, (void *)(intptr_t)i);
}

static void on_done(int rc, double v, const char *errmsg, void *ud)
{
    (void)v;
    (void)ud;
    if (rc) fprintf(stderr, "configure: %s\n", errmsg);
}

static double run(double seconds)
{
    static char name[] = "default";
    sl_named_pool_t pool = {.name = name};
    sl_pool_config_init(&pool.config);
    pool.config.input_tpm = (int64_t)1 << 50; /* never the limit: measure the round trip */
    pool.config.output_tpm = (int64_t)1 << 50;
    sl_backend_settings_t s = {.pools = &pool, .n_pools = 1};
    for (int i = 0; i < n_backends; i++) sl_backend_configure(backends[i], &s, on_done, NULL);
    struct timeval settle_tv = {0, 300000};
    event_base_loopexit(base, &settle_tv);
    event_base_dispatch(base);
    done_trips = errors = 0;
    stopping = 0;
    double t0 = wall_s();
    t_end = t0 + seconds;
    for (int i = 0; i < LOOPS; i++) start_trip(i);
    event_base_dispatch(base);
    double rate = done_trips / (wall_s() - t0);
    struct timeval drain = {0, 500000};
    event_base_loopexit(base, &drain);
    event_base_dispatch(base);
    return rate;
}

static sl_backend_t *redis_replica(int port, const char *id)
{
    sl_redis_options_t o;
    sl_redis_options_init(&o);
    o.port = port;
    o.timeout_s = 5;
    snprintf(o.replica_id, sizeof o.replica_id, "%s", id);
    char err[512];
    sl_backend_t *b = sl_backend_redis_new(base, &o, NULL, err, sizeof err);
    if (!b) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    struct timeval tv = {0, 300000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_redis PORT [SECONDS]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    double seconds = argc > 2 ? atof(argv[2]) : 3;
    base = event_base_new();

    backends[0] = sl_backend_memory_new(base, NULL);
    n_backends = 1;
    double mem = run(seconds);
    sl_backend_free(backends[0]);
    printf("memory backend:           %9.0f lease+settle round trips/s\n", mem);

    backends[0] = redis_replica(port, "bench-a");
    n_backends = 1;
    double one = run(seconds);
    long err1 = errors;
    backends[1] = redis_replica(port, "bench-b");
    n_backends = 2;
    double two = run(seconds);
    long err2 = errors;
    sl_backend_free(backends[0]);
    sl_backend_free(backends[1]);
    printf("redis, one replica:       %9.0f round trips/s (%.4f of memory, %ld errors)\n", one,
           one / mem, err1);
    printf("redis, two replicas:      %9.0f round trips/s (%.4f of memory, %.2f of one replica, "
           "%ld errors)\n", two, two / mem, two / one, err2);
    printf("(%d loops in flight; two replicas share one event loop and one Redis here)\n", LOOPS);
    event_base_free(base);
    return 0;
}
