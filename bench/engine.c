/* engine.c - benchmark: engine request+settle pairs per second, and memory per queued request.
 *
 * Prints what it measures; never gates a test. Run pinned to one core:
 *   taskset -c 0 build/bench/bench_engine
 * Scenarios: request+settle pairs (grants) with 0, 1,000 and 100,000 requests queued
 * behind a head that does not fit (the grants jump ahead by finish tag, so every
 * request and every settle looks at the queue); request+cancel pairs that are
 * queued at each depth; bytes per queued request and per agent. */
#include "sluice/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"

static double now_s = 1796000000.0;

static void must(int rc, sl_engine_t *e, const char *what)
{
    if (rc == SL_OK) return;
    fprintf(stderr, "bench: %s failed: %s: %s\n", what, sl_strerror(rc), sl_engine_errmsg(e));
    exit(1);
}

/* An engine whose queue holds `depth` requests behind a head that cannot fit. */
static sl_engine_t *engine_with_queue(long depth)
{
    sl_engine_t *e = sl_engine_new(NULL);
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = 1000000000000LL; /* capacity 8.5e11, so the pairs never run dry */
    cfg.output_tpm = 1000000000000LL;
    cfg.max_queue_wait_s = 1e9;
    cfg.ticket_idle_s = 1e9;
    cfg.lease_ttl_s = 1e6;
    cfg.max_lease_ttl_s = 1e6;
    must(sl_engine_configure_pool(e, "default", &cfg, now_s), e, "configure");
    sl_request_t r;
    memset(&r, 0, sizeof r);
    sl_decision_t d;
    r.agent = "hog";
    r.input_tokens = 800000000000LL; /* leaves 5e10 */
    must(sl_engine_request(e, &r, now_s, &d), e, "hog");
    r.agent = "bulk";
    r.priority = "low";
    r.input_tokens = 400000000000LL; /* never fits while the bench runs */
    for (long i = 0; i < depth; i++) {
        must(sl_engine_request(e, &r, now_s, &d), e, "queue");
        if (d.status != SL_QUEUED) {
            fprintf(stderr, "bench: setup request was not queued\n");
            exit(1);
        }
    }
    return e;
}

static double pairs_per_s(long depth, long pairs, bool queued_pairs)
{
    sl_engine_t *e = engine_with_queue(depth);
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = queued_pairs ? "late" : "fast";
    r.priority = queued_pairs ? "low" : "high";
    r.input_tokens = queued_pairs ? 400000000000LL : 1000;
    r.output_tokens = 500;
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.input_tokens = 900;
    s.output_tokens = 300;
    s.retry_after_s = -1;
    sl_decision_t d;
    double t0 = wall_s();
    for (long i = 0; i < pairs; i++) {
        now_s += 1e-7;
        must(sl_engine_request(e, &r, now_s, &d), e, "request");
        if (queued_pairs) {
            if (d.status != SL_QUEUED) exit(2);
            must(sl_engine_ticket_cancel(e, d.ticket, now_s), e, "ticket cancel");
        } else {
            if (d.status != SL_GRANTED) exit(3);
            must(sl_engine_settle(e, d.lease, &s, now_s, NULL), e, "settle");
        }
    }
    double dt = wall_s() - t0;
    sl_engine_free(e);
    return (double)pairs / dt;
}

int main(void)
{
    printf("sluice engine benchmark (one thread; pin with taskset -c 0)\n");
    const long depths[] = {0, 1000, 100000};
    double grant_rate[3], queue_rate[3];
    for (int i = 0; i < 3; i++) {
        pairs_per_s(depths[i], 200000, false); /* warm-up */
        grant_rate[i] = pairs_per_s(depths[i], 2000000, false);
        queue_rate[i] = pairs_per_s(depths[i], 500000, true);
        printf("queued %6ld: request+settle %10.0f pairs/s (%6.1f ns/pair)   "
               "request(queued)+cancel %10.0f pairs/s (%6.1f ns/pair)\n",
               depths[i], grant_rate[i], 1e9 / grant_rate[i], queue_rate[i], 1e9 / queue_rate[i]);
    }
    printf("cost at 100,000 queued / cost at 1,000 queued: request+settle %.2fx, "
           "queued request+cancel %.2fx\n",
           grant_rate[1] / grant_rate[2], queue_rate[1] / queue_rate[2]);

    size_t before = heap_bytes();
    sl_engine_t *e = engine_with_queue(100000);
    size_t after = heap_bytes();
    printf("bytes per queued request: %.1f (100,000 queued, heap growth incl. maps and heaps)\n",
           (double)(after - before) / 100000.0);
    sl_engine_free(e);

    e = engine_with_queue(0);
    before = heap_bytes();
    char name[32];
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.input_tokens = 1;
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.retry_after_s = -1;
    sl_decision_t d;
    for (int i = 0; i < 100000; i++) {
        snprintf(name, sizeof name, "agent-%06d", i);
        r.agent = name;
        must(sl_engine_request(e, &r, now_s, &d), e, "agent request");
        must(sl_engine_settle(e, d.lease, &s, now_s, NULL), e, "agent settle");
    }
    /* Let the tombstones of those leases go, so only the agents remain. */
    now_s += 3600;
    must(sl_engine_advance(e, now_s), e, "advance");
    after = heap_bytes();
    printf("bytes per agent: %.1f (100,000 agents with one settled lease each)\n",
           (double)(after - before) / 100000.0);
    sl_engine_free(e);
    return 0;
}
