/* fixed_window.c - fixed window: at most `rate` units per window [k P, (k+1) P), windows aligned to the clock's zero.
 *
 * One counter and one window index per key: the cheapest algorithm, and the coarsest.
 * The documented trade-off: a burst at the end of one window and another at the start
 * of the next are both allowed, so up to 2 x rate units pass within one period across a
 * boundary (sliding_window has no such boundary). */
#include "limits_internal.h"

static int64_t window_of(const sl__limit_t *l, int64_t now_us)
{
    return now_us / l->period_us; /* now_us >= 0 on every clock we are given */
}

static int64_t count_at(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    return !s->fresh && s->t_us == window_of(l, now_us) ? s->cur : 0;
}

static void fw_probe(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                     sl__answer_t *a)
{
    int64_t limit = sl__whole_rate(l, s), count = count_at(l, s, now_us);
    int64_t to_end = (window_of(l, now_us) + 1) * l->period_us - now_us;
    if (sl__answer_count(a, limit, count, units)) {
        a->reset_after_us = count + units > 0 ? to_end : 0;
        return;
    }
    a->reset_after_us = count > 0 ? to_end : 0;
    if (a->reason == SL_LIMIT_RATE) a->retry_after_us = to_end;
}

static int fw_reserve(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    (void)l, (void)s, (void)now_us;
    return SL_OK;
}

static void fw_commit(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us)
{
    int64_t k = window_of(l, now_us);
    if (s->fresh || s->t_us < k) {
        s->t_us = k;
        s->cur = 0;
    }
    s->cur += units;
    s->fresh = false;
}

static bool fw_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    return count_at(l, s, now_us) == 0;
}

static void fw_rescale(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us)
{
    (void)l, (void)s, (void)old_rate, (void)now_us; /* counts stay; the limit changes */
}

const sl__algorithm_t sl__fixed_window = {fw_probe, fw_reserve, fw_commit, fw_at_rest, fw_rescale};
