/* Fail-open mode: leases from a local token bucket holding this agent's share of the pool.
 *
 * When sluiced is unreachable the fleet must keep working without it, but without the
 * coordinator every agent is back to discovering the limit alone. So each client hands
 * itself at most its share (the pool's limits / fleet_size unless configured) from
 * buckets that refill continuously like sluiced's, backs off with full jitter after a
 * 429, and probes sluiced every ~5 s to return to coordinated mode.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "../common/grow.h"

static void refill(sl__cl_local_bucket_t *b, double now_s)
{
    double dt = now_s - b->last_refill_s;
    if (dt > 0) {
        for (int i = 0; i < SL__CL_LB_COUNT; i++) {
            double limit = b->limit_per_min[i];
            if (limit > 0) b->level[i] = fmin(limit, b->level[i] + dt * limit / 60.0);
        }
    }
    if (now_s > b->last_refill_s) b->last_refill_s = now_s;
}

void sl__cl_local_bucket_init(sl__cl_local_bucket_t *b,
                              const int64_t limits_per_min[SL__CL_LB_COUNT], double now_s)
{
    for (int i = 0; i < SL__CL_LB_COUNT; i++) {
        b->limit_per_min[i] = limits_per_min[i] > 0 ? (double)limits_per_min[i] : 0;
        b->level[i] = b->limit_per_min[i];
    }
    b->last_refill_s = now_s;
}

void sl__cl_local_bucket_set_limits(sl__cl_local_bucket_t *b,
                                    const int64_t limits_per_min[SL__CL_LB_COUNT], double now_s)
{
    refill(b, now_s);
    for (int i = 0; i < SL__CL_LB_COUNT; i++) {
        double limit = limits_per_min[i] > 0 ? (double)limits_per_min[i] : 0;
        if (b->limit_per_min[i] == 0 && limit > 0)
            b->level[i] = limit; /* newly limited: start full, like a new pool */
        b->limit_per_min[i] = limit;
        if (limit > 0 && b->level[i] > limit) b->level[i] = limit;
    }
}

double sl__cl_local_bucket_take(sl__cl_local_bucket_t *b, const int64_t need[SL__CL_LB_COUNT],
                                double now_s)
{
    refill(b, now_s);
    double wait_s = 0;
    for (int i = 0; i < SL__CL_LB_COUNT; i++) {
        double limit = b->limit_per_min[i];
        if (limit <= 0 || need[i] <= 0) continue;
        if ((double)need[i] > limit) return -1;
        double missing = (double)need[i] - b->level[i];
        if (missing > 0) wait_s = fmax(wait_s, missing / (limit / 60.0));
    }
    if (wait_s > 0) return wait_s;
    for (int i = 0; i < SL__CL_LB_COUNT; i++)
        if (b->limit_per_min[i] > 0) b->level[i] -= (double)need[i];
    return 0;
}

void sl__cl_local_bucket_adjust(sl__cl_local_bucket_t *b, const int64_t delta[SL__CL_LB_COUNT],
                                double now_s)
{
    refill(b, now_s);
    for (int i = 0; i < SL__CL_LB_COUNT; i++) {
        double limit = b->limit_per_min[i];
        if (limit > 0) b->level[i] = fmin(limit, b->level[i] + (double)delta[i]);
    }
}

static void local_limits(const sl_client_t *c, int64_t limits[SL__CL_LB_COUNT])
{
    const int64_t configured[SL__CL_LB_COUNT] = {c->opts.local_input_tpm, c->opts.local_output_tpm,
                                                 c->opts.local_rpm};
    for (int i = 0; i < SL__CL_LB_COUNT; i++) {
        if (configured[i] > 0)
            limits[i] = configured[i];
        else if (c->limits_known && c->pool_limits[i] > 0)
            limits[i] = c->pool_limits[i] / c->opts.fleet_size > 0
                            ? c->pool_limits[i] / c->opts.fleet_size
                            : 1;
        else
            limits[i] = 0;
    }
}

static int remember_local_lease(sl_client_t *c, uint64_t id, int64_t in, int64_t out)
{
    sl__cl_local_lease_t *p = sl_grow(c->local_leases, c->n_local_leases, &c->cap_local_leases, sizeof(*p), 8);
    if (!p) return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    c->local_leases = p;
    c->local_leases[c->n_local_leases++] = (sl__cl_local_lease_t){id, in, out};
    return 0;
}

/* Removes the local lease named by `lease` into *found; returns 0 or SL_ENOTFOUND. */
static int forget_local_lease(sl_client_t *c, const sl_lease_t *lease, sl__cl_local_lease_t *found)
{
    memset(found, 0, sizeof(*found));
    if (strncmp(lease->id, "local-", 6) != 0)
        return sl__cl_fail(c, SL_ENOTFOUND, "lease \"%s\" is not a local lease", lease->id);
    uint64_t id = strtoull(lease->id + 6, NULL, 10);
    for (size_t i = 0; i < c->n_local_leases; i++) {
        if (c->local_leases[i].id == id) {
            *found = c->local_leases[i];
            c->local_leases[i] = c->local_leases[--c->n_local_leases];
            return 0;
        }
    }
    return sl__cl_fail(c, SL_EALREADY, "local lease \"%s\" is unknown or ended before", lease->id);
}

int sl__cl_local_acquire(sl_client_t *c, sl__cl_acq_t *acq)
{
    const sl_acquire_req_t *req = acq->req;
    sl_lease_t *lease = acq->lease;
    int64_t limits[SL__CL_LB_COUNT];
    local_limits(c, limits);
    double now_s = sl__cl_now_mono_s();
    if (!c->local_ready) {
        sl__cl_local_bucket_init(&c->local, limits, now_s);
        c->local_ready = 1;
    } else {
        sl__cl_local_bucket_set_limits(&c->local, limits, now_s);
    }
    /* The provider bills a cold cache as input: charge the cached prefix when this
     * agent's last settle is older than the cache TTL. */
    int cold = c->last_settle_s == 0 || now_s - c->last_settle_s > c->opts.cache_ttl_s;
    int64_t need[SL__CL_LB_COUNT] = {req->input_tokens + (cold ? req->cached_tokens : 0),
                                     req->output_tokens, 1};
    for (;;) {
        now_s = sl__cl_now_mono_s();
        if (now_s >= c->next_probe_s && sl_client_probe(c) == 0) return 1;
        double wait_s = sl__cl_local_bucket_take(&c->local, need, now_s);
        if (wait_s == 0) break;
        if (wait_s < 0)
            return sl__cl_fail(c, SL_ECAPACITY,
                               "input_tokens %lld + output_tokens %lld can never fit this "
                               "agent's local share (limits per minute: input %lld, output %lld)",
                               (long long)need[0], (long long)need[1], (long long)limits[0],
                               (long long)limits[1]);
        double left_s = sl__cl_wait_left_s(acq);
        if (wait_s > left_s) {
            lease->status = SL_LEASE_QUEUED;
            lease->eta_s = wait_s;
            return sl__cl_fail(c, SL_EMAXWAIT,
                               "local share refills in %.1f s, beyond max_wait_s %.1f", wait_s,
                               req->max_wait_s);
        }
        int rc = sl__cl_before_wait(c, acq, SL_WAIT_LOCAL, wait_s, 0, NULL);
        if (rc < 0) return rc;
        double until_probe_s = c->next_probe_s - sl__cl_now_mono_s();
        sl__cl_sleep_s(fmin(wait_s, fmax(until_probe_s, 0.01)));
    }
    uint64_t id = c->next_local_id++;
    int rc = remember_local_lease(c, id, need[0], need[1]);
    if (rc < 0) {
        int64_t back[SL__CL_LB_COUNT] = {need[0], need[1], 1};
        sl__cl_local_bucket_adjust(&c->local, back, sl__cl_now_mono_s());
        return rc;
    }
    lease->status = SL_LEASE_GRANTED;
    lease->local = 1;
    snprintf(lease->id, sizeof(lease->id), "local-%llu", (unsigned long long)id);
    lease->ttl_s = req->ttl_s > 0 ? req->ttl_s : 120;
    lease->expires_at = sl__cl_now_unix_s() + lease->ttl_s;
    lease->weight = 1;
    lease->charged_input_tokens = need[0];
    lease->charged_output_tokens = need[1];
    lease->cache_penalty = cold && req->cached_tokens > 0;
    return 0;
}

int sl__cl_local_settle(sl_client_t *c, const sl_lease_t *lease, const sl_client_usage_t *usage,
                        sl_client_settle_result_t *result)
{
    sl__cl_local_lease_t l;
    int rc = forget_local_lease(c, lease, &l);
    if (rc < 0) return rc;
    int64_t actual_in = usage->input_tokens + usage->cache_creation_input_tokens;
    int64_t delta[SL__CL_LB_COUNT] = {l.reserved_in - actual_in,
                                      l.reserved_out - usage->output_tokens, 0};
    sl__cl_local_bucket_adjust(&c->local, delta, sl__cl_now_mono_s());
    result->adjust_input_tokens = delta[0];
    result->adjust_output_tokens = delta[1];
    result->estimate_error =
        fabs((double)(actual_in - l.reserved_in)) / (double)(actual_in > 1 ? actual_in : 1);
    result->settled_locally = 1;
    return 0;
}

int sl__cl_local_cancel(sl_client_t *c, const sl_lease_t *lease)
{
    sl__cl_local_lease_t l;
    int rc = forget_local_lease(c, lease, &l);
    if (rc < 0) return rc;
    int64_t back[SL__CL_LB_COUNT] = {l.reserved_in, l.reserved_out, 1};
    sl__cl_local_bucket_adjust(&c->local, back, sl__cl_now_mono_s());
    return 0;
}
