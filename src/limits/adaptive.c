/* adaptive.c - AIMD of a key's rate on its reported error rate (additive increase, multiplicative decrease, per key).
 *
 * A key remembers its last `window` outcomes (one bit each, 1 = error) and its
 * current rate, which starts at the configured `rate`. Each report appends its
 * outcomes and then adjusts once, on the error rate over the window: above
 * high_error the rate multiplies by `decrease`, below low_error by `increase`,
 * clamped to [min_rate, max_rate]; in between it stays. A report of one outcome is
 * exactly the seed's record_result. The errors of one report are spread evenly
 * among its successes, so which of them later leave the window does not depend on
 * how a caller batched them. */
#include "limits_internal.h"

#include <stdlib.h>

static bool bit_get(const sl__outcomes_t *o, int64_t i)
{
    return (o->bits[i >> 3] >> (i & 7)) & 1;
}

static void bit_set(sl__outcomes_t *o, int64_t i, bool v)
{
    if (v) o->bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    else o->bits[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

int sl__adaptive_reserve(const sl__limit_t *l, sl__kstate_t *s)
{
    if (s->outcomes.bits) return SL_OK;
    s->outcomes.bits = calloc((size_t)(l->cfg.adaptive.window + 7) / 8, 1);
    return s->outcomes.bits ? SL_OK : SL_ENOMEM;
}

static void push(const sl__limit_t *l, sl__outcomes_t *o, bool error)
{
    int64_t w = l->cfg.adaptive.window;
    if (o->n == w) {
        if (bit_get(o, o->head)) o->errors--;
        bit_set(o, o->head, error);
        o->head = (o->head + 1) % w;
    } else {
        bit_set(o, (o->head + o->n) % w, error);
        o->n++;
    }
    if (error) o->errors++;
}

double sl__adaptive_report(const sl__limit_t *l, sl__kstate_t *s, int64_t successes,
                           int64_t errors, double *error_rate)
{
    const sl_limit_adaptive_t *ad = &l->cfg.adaptive;
    int64_t total = successes + errors, w = ad->window;
    /* Only the last `window` outcomes can matter; older ones would be pushed out. */
    int64_t skip = total > w ? total - w : 0;
    for (int64_t i = skip; i < total; i++) {
        bool error = (i + 1) * errors / total > i * errors / total;
        push(l, &s->outcomes, error);
    }
    double er = (double)s->outcomes.errors / (double)s->outcomes.n;
    double rate = sl__rate(l, s);
    if (er > ad->high_error) rate *= ad->decrease;
    else if (er < ad->low_error) rate *= ad->increase;
    if (rate < ad->min_rate) rate = ad->min_rate;
    if (rate > ad->max_rate) rate = ad->max_rate;
    *error_rate = er;
    return rate;
}

void sl__adaptive_free(sl__kstate_t *s)
{
    free(s->outcomes.bits);
    s->outcomes.bits = NULL;
}
