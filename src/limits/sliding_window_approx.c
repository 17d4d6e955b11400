/* sliding_window_approx.c - the two-window weighted counter: this window's count plus the previous one's, weighted by its overlap.
 *
 * Windows are aligned as fixed_window's. At offset f (0..1) into window k the estimate
 * of the last period is prev x (1 - f) + cur: it assumes the previous window's hits
 * were spread evenly. Two counters per key; no 2x boundary burst (the estimate is
 * continuous across the boundary), but not exact: a burst late in the previous
 * window is under-counted early in this one, by up to its (1 - f) share. The estimate
 * only falls as time passes, so the retry time is found in closed form. */
#include "limits_internal.h"

#include <math.h>

#define EPS 1e-9

typedef struct counts {
    int64_t k, cur, prev, off_us;
} counts_t;

static counts_t counts_at(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    counts_t c = {.k = now_us / l->period_us};
    c.off_us = now_us - c.k * l->period_us;
    if (s->fresh) return c;
    if (s->t_us == c.k) {
        c.cur = s->cur;
        c.prev = s->prev;
    } else if (s->t_us == c.k - 1) {
        c.prev = s->cur;
    }
    return c;
}

static double estimate(const sl__limit_t *l, const counts_t *c)
{
    double p = (double)l->period_us;
    return (double)c->prev * (p - (double)c->off_us) / p + (double)c->cur;
}

/* The earliest offset into a window where prev x (1 - f) <= room, in µs. */
static int64_t offset_for(const sl__limit_t *l, int64_t prev, double room)
{
    if (prev <= 0 || (double)prev <= room) return 0;
    double p = (double)l->period_us;
    return sl__ceil_us(p - room * p / (double)prev);
}

static void swa_probe(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                      sl__answer_t *a)
{
    int64_t limit = sl__whole_rate(l, s);
    counts_t c = counts_at(l, s, now_us);
    double est = estimate(l, &c);
    int64_t next_start = (c.k + 1) * l->period_us;
    a->limit = limit;
    a->delay_us = 0;
    if (est + (double)units <= (double)limit + EPS) {
        a->reason = SL_LIMIT_ALLOWED;
        a->retry_after_us = 0;
        a->remaining = (int64_t)floor((double)limit - est - (double)units + EPS);
        int64_t cur = c.cur + units;
        a->reset_after_us = cur > 0 ? next_start + l->period_us - now_us
                            : c.prev > 0 ? next_start - now_us : 0;
        return;
    }
    double left = (double)limit - est;
    a->remaining = left > 0 ? (int64_t)floor(left + EPS) : 0;
    a->reset_after_us = c.cur > 0 ? next_start + l->period_us - now_us
                        : c.prev > 0 ? next_start - now_us : 0;
    if (units > limit) {
        a->reason = SL_LIMIT_NEVER;
        a->retry_after_us = -1;
        return;
    }
    a->reason = SL_LIMIT_RATE;
    if (c.cur + units <= limit) {
        /* Later in this window, as the previous one's weight falls. */
        int64_t at = c.k * l->period_us + offset_for(l, c.prev, (double)(limit - c.cur - units));
        a->retry_after_us = at > now_us ? at - now_us : 1;
    } else {
        /* In the next window, where this one is the previous. */
        int64_t at = next_start + offset_for(l, c.cur, (double)(limit - units));
        a->retry_after_us = at - now_us;
    }
}

static int swa_reserve(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    (void)l, (void)s, (void)now_us;
    return SL_OK;
}

static void swa_commit(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us)
{
    counts_t c = counts_at(l, s, now_us);
    s->t_us = c.k;
    s->prev = c.prev;
    s->cur = c.cur + units;
    s->fresh = false;
}

static bool swa_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    counts_t c = counts_at(l, s, now_us);
    return c.cur == 0 && c.prev == 0;
}

static void swa_rescale(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us)
{
    (void)l, (void)s, (void)old_rate, (void)now_us;
}

const sl__algorithm_t sl__sliding_window_approx = {swa_probe, swa_reserve, swa_commit, swa_at_rest,
                                                   swa_rescale};
