/* bucket.c - token buckets: continuous refill at capacity/60 per second, debt allowed.
 *
 * There is no minute boundary: a reset at :00 would be another synchronised burst.
 * A level may go negative (a settle that under-estimated by 30k tokens shows as
 * debt at once, so the next grants wait), but a grant never takes a level below
 * zero: it needs the whole need to be there. */
#include "internal.h"

#include <math.h>

bool sl__limited(const sl__pool_t *p, sl_bucket_t b)
{
    return p->limit[b] > 0;
}

double sl__capacity(const sl__pool_t *p, sl_bucket_t b)
{
    return (double)p->limit[b] * sl__margin(p);
}

void sl__refill(sl__pool_t *p, double now)
{
    double dt_s = now - p->last_refill;
    if (dt_s <= 0) return;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        double cap = sl__capacity(p, (sl_bucket_t)b);
        double level = p->level[b] + cap / 60.0 * dt_s;
        p->level[b] = level > cap ? cap : level;
    }
    p->last_refill = now;
}

void sl__clamp_levels(sl__pool_t *p)
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        double cap = sl__capacity(p, (sl_bucket_t)b);
        if (p->level[b] > cap) p->level[b] = cap;
    }
}

bool sl__fits(const sl__pool_t *p, const sl__need_t *need, double now)
{
    if (p->blocked_until > now) return false;
    if (p->cfg.concurrency > 0 && p->in_flight >= p->cfg.concurrency) return false;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (sl__limited(p, (sl_bucket_t)b) && p->level[b] < (double)need->n[b]) return false;
    }
    const sl__pool_t *q = sl__req_parent(p); /* its requests are its parent's (reqparent.c) */
    if (q && sl__req_parent_level(q, now) < (double)need->n[SL_BUCKET_REQUESTS]) return false;
    return true;
}

void sl__need_as_sums(const sl__need_t *need, double out[SL_BUCKET_COUNT])
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        out[b] = (double)need->n[b];
}

double sl__eta_for(const sl__pool_t *p, const double prefix[SL_BUCKET_COUNT], int64_t ahead,
                   double now, const char **limited_by)
{
    double eta_s = p->blocked_until > now ? p->blocked_until - now : 0;
    const char *why = eta_s > 0 ? "retry_after" : NULL;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        double deficit = prefix[b] - p->level[b];
        if (deficit <= 0) continue;
        double rate_per_s = sl__capacity(p, (sl_bucket_t)b) / 60.0;
        double t_s = deficit / rate_per_s;
        if (t_s > eta_s) {
            eta_s = t_s;
            why = sl_bucket_name((sl_bucket_t)b);
        }
    }
    const sl__pool_t *q = sl__req_parent(p); /* its requests refill at its parent's rate */
    double deficit = q ? prefix[SL_BUCKET_REQUESTS] - sl__req_parent_level(q, now) : 0;
    if (deficit > 0) {
        double t_s = deficit / (sl__capacity(q, SL_BUCKET_REQUESTS) / 60.0);
        if (t_s > eta_s) {
            eta_s = t_s;
            why = sl_bucket_name(SL_BUCKET_REQUESTS);
        }
    }
    int64_t releases = ahead + 1 - (p->cfg.concurrency - p->in_flight);
    if (p->cfg.concurrency > 0 && releases > 0) {
        const sl__hnode_t *top = sl__heap_top(&p->lease_heap);
        double t_s =
            sl__release_eta(p, releases, p->cfg.concurrency, top ? top->at : INFINITY, now);
        if (isfinite(t_s) && t_s >= eta_s) {
            eta_s = t_s;
            why = "concurrency";
        }
    }
    if (limited_by) *limited_by = why;
    return eta_s;
}

/* Leases end at a rate of slots / mean duration while the slots are busy, so the k-th
 * release is expected k x mean / slots from now, and the first by the earliest expiry at
 * the latest. Before any lease was settled the mean is the pool's prior
 * (lease_duration_prior_s): a fresh daemon's semaphore then queues like a warm one
 * instead of answering every request beyond the free slots with the lease TTL, which is
 * above the wait limit by default (issue 25 item 12). A prior of 0 leaves only the
 * expiry bound. */
double sl__release_eta(const sl__pool_t *p, int64_t releases, int64_t slots, double earliest_expiry,
                       double now)
{
    double bound_s = earliest_expiry - now > 0 ? earliest_expiry - now : 0;
    double mean_s = p->lease_samples > 0 ? p->lease_mean_s : p->cfg.lease_duration_prior_s;
    if (slots <= 0 || (p->lease_samples == 0 && mean_s <= 0)) return bound_s;
    double eta_s = (double)releases * mean_s / (double)slots;
    return releases == 1 && bound_s < eta_s ? bound_s : eta_s;
}

#define LEASE_MEAN_ALPHA 0.2 /* weight of the newest duration in the moving average */

void sl__record_lease_duration(sl__pool_t *p, double duration_s)
{
    if (!(duration_s >= 0) || !isfinite(duration_s)) return;
    p->lease_mean_s = p->lease_samples == 0
                          ? duration_s
                          : p->lease_mean_s + LEASE_MEAN_ALPHA * (duration_s - p->lease_mean_s);
    p->lease_samples++;
}

/* Only the buckets a max_tokens reservation is in: input is an estimate of what is billed,
 * and a request is kept whole. */
static bool refundable(sl_bucket_t b) { return b == SL_BUCKET_OUTPUT || b == SL_BUCKET_TOKENS; }

void sl__record_refund(sl__pool_t *p, const int64_t reserved[SL_BUCKET_COUNT],
                       const int64_t charged[SL_BUCKET_COUNT])
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!refundable((sl_bucket_t)b) || reserved[b] <= 0) continue;
        double share = (double)(reserved[b] - charged[b]) / (double)reserved[b];
        if (share < 0) share = 0;
        p->refund_share[b] = p->refund_samples == 0
                                 ? share
                                 : p->refund_share[b] + LEASE_MEAN_ALPHA * (share - p->refund_share[b]);
    }
    p->refund_samples++;
}

/* Ahead of a queued request, a lease reserves max_tokens and gives back what its answer
 * did not use when it settles, so the refill it waits for is what they keep, not what
 * they reserve: counted whole, 40 calls of 8,192 reserved and ~200 used made a 40,000
 * output TPM pool answer an ETA of 9 minutes for a wait of seconds, refused past the
 * proxy's hold (docs/design.md "The queue's ETA counts what the calls ahead keep"). */
void sl__queue_eta_sums(const sl__pool_t *p, const double ahead[SL_BUCKET_COUNT],
                        const int64_t own[SL_BUCKET_COUNT], double out[SL_BUCKET_COUNT])
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        double keep = refundable((sl_bucket_t)b) ? 1.0 - p->refund_share[b] : 1.0;
        out[b] = ahead[b] * keep + (double)own[b];
    }
}

void sl__adjust(sl__pool_t *p, sl_bucket_t b, int64_t delta_tokens)
{
    if (!sl__limited(p, b)) return;
    double cap = sl__capacity(p, b);
    double level = p->level[b] + (double)delta_tokens;
    p->level[b] = level > cap ? cap : level;
}
