/* persist.c - what the state file costs per operation: grant + settle pairs through the
 * engine on one core, without and with the journal records the memory backend writes for
 * them (a lease record and a pool record per grant, an end and a pool record per settle,
 * one flush each), in CPU time of this process. Prints both and the difference.
 *
 * usage: bench_persist [PAIRS] [STATE_FILE]   (defaults: 1000000, /tmp/sluice-bench-state) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "bench_clock.h"
#include "persist.h"

/* CPU microseconds per grant + settle pair; with a state file when `path` is not NULL. */
static double run(long pairs, const char *path, struct event_base *base)
{
    char err[512];
    sl_engine_t *e = sl_engine_new(NULL);
    sl_pool_config_t c;
    sl_pool_config_init(&c);
    c.input_tpm = c.output_tpm = 100000000000LL;
    c.rpm = 1000000000;
    const double now = 1796000000.0;
    if (!e || sl_engine_configure_pool(e, "default", &c, now) != SL_OK) return -1;
    sl_persist_t *p = NULL;
    if (path) {
        unlink(path);
        p = sl__persist_open(base, path, 1.0, err, sizeof err);
        if (!p || sl__persist_snapshot(p, e, err, sizeof err) < 0) {
            fprintf(stderr, "bench_persist: %s\n", err);
            exit(1);
        }
    }
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = "bench-1";
    r.input_tokens = 100;
    r.output_tokens = 10;
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.input_tokens = 90;
    s.output_tokens = 8;
    s.retry_after_s = -1;
    double t0 = cpu_s();
    for (long i = 0; i < pairs; i++) {
        sl_decision_t d;
        if (sl_engine_request(e, &r, now, &d) != SL_OK || d.status != SL_GRANTED) return -1;
        if (p) {
            sl__persist_lease(p, e, d.lease);
            sl__persist_pool(p, e, "default");
            sl__persist_flush(p, e);
        }
        sl_engine_settle(e, d.lease, &s, now, NULL);
        if (p) {
            sl__persist_lease_end(p, d.lease);
            sl__persist_pool(p, e, "default");
            sl__persist_flush(p, e);
        }
    }
    double us = (cpu_s() - t0) / (double)pairs * 1e6;
    sl__persist_free(p);
    sl_engine_free(e);
    if (path) unlink(path);
    return us;
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 1000000;
    const char *path = argc > 2 ? argv[2] : "/tmp/sluice-bench-state";
    struct event_base *base = event_base_new();
    if (pairs <= 0 || !base) return 2;
    for (int round = 0; round < 3; round++) {
        double without = run(pairs, NULL, base);
        double with = run(pairs, path, base);
        printf("round %d: %ld grant+settle pairs: %.3f us CPU per pair without the state file, "
               "%.3f us with it (+%.3f us per pair, +%.3f us per HTTP request)\n",
               round + 1, pairs, without, with, with - without, (with - without) / 2);
    }
    event_base_free(base);
    return 0;
}
