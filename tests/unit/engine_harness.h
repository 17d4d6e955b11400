/* engine_harness.h - shared helpers for the engine's unit tests: pools, requests, snapshots. */
#ifndef SL_TEST_ENGINE_HARNESS_H
#define SL_TEST_ENGINE_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sluice/engine.h"

/* Time zero of every test: an arbitrary Unix time. */
#define T0 1796000000.0

/* The pool defaults (sl_pool_config_init), to change before harness_engine_config. */
static inline sl_pool_config_t harness_config(void)
{
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    return cfg;
}

/* The pool defaults with the given per-minute limits. */
static inline sl_pool_config_t harness_pool(int64_t input_tpm, int64_t output_tpm, int64_t rpm)
{
    sl_pool_config_t cfg = harness_config();
    cfg.input_tpm = input_tpm;
    cfg.output_tpm = output_tpm;
    cfg.rpm = rpm;
    return cfg;
}

/* An engine whose pool "default" is configured with `cfg` at T0. */
static inline sl_engine_t *harness_engine_config(const sl_pool_config_t *cfg)
{
    sl_engine_t *e = sl_engine_new(NULL);
    assert_non_null(e);
    assert_int_equal(sl_engine_configure_pool(e, "default", cfg, T0), SL_OK);
    return e;
}

/* A pool "default" with the given per-minute limits and default settings. */
static inline sl_engine_t *harness_engine(int64_t input_tpm, int64_t output_tpm, int64_t rpm)
{
    sl_pool_config_t cfg = harness_pool(input_tpm, output_tpm, rpm);
    /* These tests play the clients too and never poll tickets; test_lease.c covers
     * unclaimed grants and idle tickets with the defaults. */
    cfg.claim_timeout_s = 1e6;
    cfg.ticket_idle_s = 1e6;
    return harness_engine_config(&cfg);
}

static inline sl_request_t harness_req(const char *agent, int64_t in, int64_t out)
{
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = agent;
    r.input_tokens = in;
    r.output_tokens = out;
    return r;
}

static inline sl_settle_t harness_settle(int64_t in, int64_t out)
{
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.input_tokens = in;
    s.output_tokens = out;
    s.retry_after_s = -1;
    return s;
}

static inline void harness_check(sl_engine_t *e)
{
    int rc = sl_engine_check(e);
    if (rc != SL_OK) fail_msg("invariant broken: %s", sl_engine_errmsg(e));
}

/* The end of a test: the engine's invariants hold one last time, then it is freed. */
static inline void harness_end(sl_engine_t *e)
{
    harness_check(e);
    sl_engine_free(e);
}

static inline double harness_level(sl_engine_t *e, sl_bucket_t b)
{
    sl_pool_info_t info;
    assert_int_equal(sl_engine_pool_info(e, "default", &info), SL_OK);
    return info.level[b];
}

static inline double harness_margin(sl_engine_t *e)
{
    sl_pool_info_t info;
    assert_int_equal(sl_engine_pool_info(e, "default", &info), SL_OK);
    return info.margin;
}

/* Requests and expects an immediate grant; returns the lease id. */
static inline uint64_t harness_grant(sl_engine_t *e, const char *agent, int64_t in, int64_t out,
                                     double now)
{
    sl_request_t r = harness_req(agent, in, out);
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, &r, now, &d), SL_OK);
    assert_int_equal(d.status, SL_GRANTED);
    harness_check(e);
    return d.lease;
}

/* Grants `agent` (in, out) at `now` and settles that lease as a 429 with no retry-after at
 * the same time: the margin steps down. */
static inline void harness_grant_429(sl_engine_t *e, const char *agent, int64_t in, int64_t out,
                                     double now)
{
    uint64_t l = harness_grant(e, agent, in, out, now);
    sl_settle_t s = harness_settle(in, out);
    s.got_429 = true;
    assert_int_equal(sl_engine_settle(e, l, &s, now, NULL), SL_OK);
    harness_check(e);
}

/* Requests `r` at `now`, expects SL_OK and a decision of `status`; returns the decision. */
static inline sl_decision_t harness_request_as(sl_engine_t *e, const sl_request_t *r, double now,
                                               sl_status_t status)
{
    sl_decision_t d;
    assert_int_equal(sl_engine_request(e, r, now, &d), SL_OK);
    assert_int_equal(d.status, status);
    return d;
}

/* Polls `ticket` at `now`, expects SL_OK and a decision of `status`; returns the decision. */
static inline sl_decision_t harness_ticket_as(sl_engine_t *e, uint64_t ticket, double now,
                                              sl_status_t status)
{
    sl_decision_t d;
    assert_int_equal(sl_engine_ticket(e, ticket, now, &d), SL_OK);
    assert_int_equal(d.status, status);
    return d;
}

/* A comparable picture of every pool, to show a refused call changed nothing. */
typedef struct harness_snapshot {
    char text[4096];
} harness_snapshot_t;

static inline void harness_snap_pool(const sl_pool_info_t *p, void *ud)
{
    harness_snapshot_t *s = ud;
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof s->text - n,
             "%s m=%.6f L=%.6f,%.6f,%.6f,%.6f q=%lld f=%lld g=%llu q=%llu r=%llu 429=%llu|",
             p->name, p->margin, p->level[0], p->level[1], p->level[2], p->level[3],
             (long long)p->queue_depth, (long long)p->leases_in_flight,
             (unsigned long long)p->granted_total, (unsigned long long)p->queued_total,
             (unsigned long long)p->rejected_total, (unsigned long long)p->upstream_429_total);
}

static inline void harness_snap_agent(const sl_agent_info_t *a, void *ud)
{
    harness_snapshot_t *s = ud;
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof s->text - n, "%s w=%.6f r=%lld l=%lld q=%lld in=%lld|", a->name,
             a->weight, (long long)a->repeats, (long long)a->leases, (long long)a->queued,
             (long long)a->tokens_in);
}

static inline harness_snapshot_t harness_snapshot(const sl_engine_t *e)
{
    harness_snapshot_t s;
    s.text[0] = '\0';
    sl_engine_pool_foreach(e, harness_snap_pool, &s);
    sl_engine_agent_foreach(e, harness_snap_agent, &s);
    return s;
}

#endif
