/* token_bucket.c - token bucket: capacity `burst`, refilled continuously at rate/period, a hit takes its cost.
 *
 * The bucket starts full. There is no boundary: at most burst units at once, then
 * rate per period on average, forever. Tokens are a double because the refill is
 * continuous (a fraction of a token accrues every µs); a check needs the whole cost
 * present. EPS absorbs the rounding of the refill so that a retry at exactly
 * now + retry_after is allowed. */
#include "limits_internal.h"

#include <math.h>

#define EPS 1e-9

static double refill_per_us(const sl__limit_t *l, const sl__kstate_t *s)
{
    return sl__rate(l, s) / (double)l->period_us;
}

static double level_at(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    double cap = (double)l->burst_units;
    if (s->fresh) return cap;
    double dt = now_us > s->t_us ? (double)(now_us - s->t_us) : 0;
    double level = s->level + dt * refill_per_us(l, s);
    return level > cap ? cap : level;
}

static void tb_probe(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                     sl__answer_t *a)
{
    double level = level_at(l, s, now_us), per_us = refill_per_us(l, s);
    double cap = (double)l->burst_units;
    a->limit = l->burst_units;
    a->delay_us = 0;
    if ((double)units <= level + EPS) {
        double after = level - (double)units;
        a->reason = SL_LIMIT_ALLOWED;
        a->remaining = (int64_t)floor(after + EPS);
        a->retry_after_us = 0;
        a->reset_after_us = sl__ceil_us((cap - after) / per_us);
        return;
    }
    a->remaining = (int64_t)floor(level + EPS);
    a->reset_after_us = sl__ceil_us((cap - level) / per_us);
    if (units > l->burst_units) {
        a->reason = SL_LIMIT_NEVER;
        a->retry_after_us = -1;
        return;
    }
    a->reason = SL_LIMIT_RATE;
    a->retry_after_us = sl__ceil_us(((double)units - level) / per_us);
}

static int tb_reserve(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    (void)l, (void)s, (void)now_us;
    return SL_OK;
}

static void tb_commit(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us)
{
    double level = level_at(l, s, now_us) - (double)units;
    s->level = level < 0 ? 0 : level; /* only EPS below zero */
    if (now_us > s->t_us || s->fresh) s->t_us = now_us;
    s->fresh = false;
}

static bool tb_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    return level_at(l, s, now_us) >= (double)l->burst_units - EPS;
}

static void tb_rescale(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us)
{
    /* Refill up to now at the old rate; the new one applies from now on. */
    double rate = s->rate;
    s->rate = old_rate;
    double level = level_at(l, s, now_us);
    s->rate = rate;
    if (!s->fresh) {
        s->level = level;
        if (now_us > s->t_us) s->t_us = now_us;
    }
}

const sl__algorithm_t sl__token_bucket = {tb_probe, tb_reserve, tb_commit, tb_at_rest, tb_rescale};
