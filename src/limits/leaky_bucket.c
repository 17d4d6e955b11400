/* leaky_bucket.c - leaky bucket as a meter with a queue: `burst` units wait at most, drained one per period/rate.
 *
 * The bucket holds the units accepted but not yet drained; it leaks one unit every
 * T = period / rate. A hit of n units is accepted when the bucket has room for n
 * (backlog + n T <= burst T), and the answer says when the action may run: after the
 * backlog ahead of it drains (delay). This is the literature's leaky bucket as a
 * queue (outflow strictly spaced at T), checked as a meter: the state is one time,
 * when the drain will be free. Its acceptance is GCRA's; what differs is the
 * delay: GCRA lets a conforming hit go at once, the leaky bucket spaces them.
 * burst 1 is a strict meter: one action per T, nothing waits. */
#include "limits_internal.h"

static int64_t backlog_us(const sl__kstate_t *s, int64_t now_us)
{
    return s->fresh || s->t_us <= now_us ? 0 : s->t_us - now_us;
}

static void lb_probe(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                     sl__answer_t *a)
{
    int64_t t = sl__interval_us(l, s), room = t * l->burst_units;
    /* need > room exactly when units > burst: decided before n T (n up to 1e18) can
     * overflow (gcra.c). */
    bool never = units > l->burst_units;
    int64_t backlog = backlog_us(s, now_us), need = never ? room + 1 : t * units;
    a->limit = l->burst_units;
    if (!never && backlog + need <= room) {
        a->reason = SL_LIMIT_ALLOWED;
        a->retry_after_us = 0;
        a->delay_us = units > 0 ? backlog : 0;
        a->reset_after_us = backlog + need;
        a->remaining = (room - backlog - need) / t;
        return;
    }
    a->delay_us = 0;
    a->reset_after_us = backlog;
    a->remaining = (room - backlog) / t;
    if (need > room) {
        a->reason = SL_LIMIT_NEVER;
        a->retry_after_us = -1;
        return;
    }
    a->reason = SL_LIMIT_RATE;
    a->retry_after_us = backlog + need - room;
}

static int lb_reserve(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    (void)l, (void)s, (void)now_us;
    return SL_OK;
}

static void lb_commit(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us)
{
    s->t_us = now_us + backlog_us(s, now_us) + sl__interval_us(l, s) * units;
    s->fresh = false;
}

static bool lb_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    (void)l;
    return backlog_us(s, now_us) == 0;
}

/* The units still queued drain at the new interval. */
static void lb_rescale(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us)
{
    int64_t backlog = backlog_us(s, now_us);
    if (backlog == 0) return;
    double rate = s->rate;
    s->rate = old_rate;
    int64_t t_old = sl__interval_us(l, s);
    s->rate = rate;
    double queued = (double)backlog / (double)t_old;
    s->t_us = now_us + (int64_t)(queued * (double)sl__interval_us(l, s)); /* floor: never past the room */
}

const sl__algorithm_t sl__leaky_bucket = {lb_probe, lb_reserve, lb_commit, lb_at_rest, lb_rescale};
