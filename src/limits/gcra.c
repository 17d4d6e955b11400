/* gcra.c - the generic cell rate algorithm: one theoretical arrival time per key, answers as redis-cell's CL.THROTTLE.
 *
 * The emission interval T = period / rate is the nominal spacing of hits; the
 * tolerance tau = T x burst is how far ahead of schedule a key may run. The state is
 * the theoretical arrival time (TAT): when the key would be back on schedule. A hit
 * of n units moves it to max(TAT, now) + n T and is allowed when that is at most
 * now + tau. No refill process, one integer per key.
 *
 * The answers are CL.THROTTLE's (redis-cell), with limit = burst = max_burst + 1:
 * remaining = trunc((tau - (TAT' - now)) / T), reset_after = TAT' - now (TAT' the TAT
 * after the decision), and a denied hit's retry_after is when it would conform (-1
 * when n T exceeds tau: never). redis-cell answers whole seconds, rounded up when a
 * millisecond or more is left (sl_limits_cl_seconds); we answer the µs. */
#include "limits_internal.h"

static int64_t tat_of(const sl__kstate_t *s, int64_t now_us)
{
    return s->fresh || s->t_us < now_us ? now_us : s->t_us;
}

static void gcra_probe(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                       sl__answer_t *a)
{
    int64_t t = sl__interval_us(l, s), tau = t * l->burst_units;
    /* n T > tau exactly when n > burst: decided so, before n T (n up to 1e18) can
     * overflow; below it n T <= tau, which the configuration keeps under 2^53. */
    bool never = units > l->burst_units;
    int64_t tat = tat_of(s, now_us), increment = never ? 0 : t * units;
    int64_t new_tat = tat + increment, allow_at = new_tat - tau;
    int64_t ttl;
    a->limit = l->burst_units;
    a->delay_us = 0;
    if (never || now_us < allow_at) {
        a->reason = never ? SL_LIMIT_NEVER : SL_LIMIT_RATE;
        a->retry_after_us = never ? -1 : allow_at - now_us;
        ttl = tat - now_us;
    } else {
        a->reason = SL_LIMIT_ALLOWED;
        a->retry_after_us = 0;
        ttl = new_tat - now_us;
    }
    int64_t next = tau - ttl;
    a->remaining = next > -t ? next / t : 0;
    a->reset_after_us = ttl;
}

static int gcra_reserve(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    (void)l, (void)s, (void)now_us;
    return SL_OK;
}

static void gcra_commit(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us)
{
    s->t_us = tat_of(s, now_us) + sl__interval_us(l, s) * units;
    s->fresh = false;
}

static bool gcra_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    (void)l;
    return s->fresh || s->t_us <= now_us;
}

/* The units still owed, (TAT - now) / T_old, are spaced at the new interval. */
static void gcra_rescale(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us)
{
    if (s->fresh || s->t_us <= now_us) return;
    double rate = s->rate;
    s->rate = old_rate;
    int64_t t_old = sl__interval_us(l, s);
    s->rate = rate;
    double owed = (double)(s->t_us - now_us) / (double)t_old;
    s->t_us = now_us + (int64_t)(owed * (double)sl__interval_us(l, s)); /* floor: never past tau */
}

const sl__algorithm_t sl__gcra = {gcra_probe, gcra_reserve, gcra_commit, gcra_at_rest, gcra_rescale};

int64_t sl_limits_cl_seconds(int64_t us)
{
    if (us < 0) return -1;
    int64_t s = us / 1000000, rest_ms = (us % 1000000) / 1000;
    return rest_ms > 0 ? s + 1 : s;
}
