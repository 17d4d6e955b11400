/* sliding_window.c - the exact sliding window: a log of the hits of the last period; at most `rate` units in any period.
 *
 * An entry (time, units) counts while now < time + period. The log is pruned when a
 * check commits, so after every commit it holds only live entries: at most `rate`
 * of them (each at least one unit; hits at one µs merge), 16 bytes each, in a ring
 * whose capacity is a power of two: under 32 x rate bytes per key (rate <=
 * SL_LIMITS_LOG_MAX_RATE). There is no
 * boundary to game: any period-long interval holds at most rate units. A denied
 * hit's retry time is when enough of the oldest entries have left the window. */
#include "limits_internal.h"

static void sw_probe(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                     sl__answer_t *a)
{
    sl__log_probe(s, sl__whole_rate(l, s), l->period_us, l->period_us, units, now_us, a);
}

static void prune(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    while (s->ring.n > 0 && sl__ring_at(&s->ring, 0)->t_us + l->period_us <= now_us)
        sl__ring_pop(&s->ring);
}

static int sw_reserve(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    prune(l, s, now_us); /* dropping dead entries changes no answer */
    return sl__ring_reserve(&s->ring, s->ring.n + 1);
}

static void sw_commit(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us)
{
    prune(l, s, now_us);
    int64_t t = s->ring.n > 0 && sl__ring_at(&s->ring, s->ring.n - 1)->t_us > now_us
                    ? sl__ring_at(&s->ring, s->ring.n - 1)->t_us /* a clock that went back */
                    : now_us;
    if (units > 0) sl__ring_push(&s->ring, t, units, true);
    s->fresh = false;
}

static bool sw_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    uint32_t n = 0;
    return s->fresh || s->ring.sum == sl__log_expired(s, l->period_us, now_us, &n);
}

static void sw_rescale(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us)
{
    (void)l, (void)s, (void)old_rate, (void)now_us;
}

const sl__algorithm_t sl__sliding_window = {sw_probe, sw_reserve, sw_commit, sw_at_rest, sw_rescale};
