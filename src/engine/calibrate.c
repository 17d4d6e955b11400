/* calibrate.c - learn, per pool and model, how far local token estimates are from what
 * the provider bills, and correct later estimates by it.
 *
 * A local tokenizer is close but not exact (a newer model's tokenizer, per-message
 * overheads), and every other part of the design depends on the estimate. The ratio
 * actual/estimated prompt tokens is taken from settles of leases that named a model;
 * the median of the last 64 is robust to the odd failed call (0 tokens) or a huge
 * outlier, which a running mean is not. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sl__calib_t *sl__calib_get(sl__pool_t *p, const char *model, bool create)
{
    sl__calib_t *c = sl__strmap_get(&p->calibs, model);
    if (c || !create) return c;
    c = sl__strmap_make(&p->calibs, model, sizeof *c, offsetof(sl__calib_t, model));
    if (c) c->ratio = 1.0;
    return c;
}

double sl__calib_ratio(const sl__calib_t *c)
{
    return c ? c->ratio : 1.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void sl__calib_record(sl__calib_t *c, int64_t estimated_tokens, int64_t actual_tokens)
{
    if (!c || estimated_tokens < SL__CALIB_MIN_TOKENS) return;
    double r = (double)actual_tokens / (double)estimated_tokens;
    if (r < 0.2) r = 0.2;
    if (r > 5) r = 5;
    c->sample[c->pos] = r;
    c->pos = (c->pos + 1) % SL__CALIB_WINDOW;
    if (c->n < SL__CALIB_WINDOW) c->n++;
    c->total++;
    sl__calib_update_ratio(c);
}

void sl__calib_update_ratio(sl__calib_t *c)
{
    if (c->n < SL__CALIB_MIN_SAMPLES) {
        c->ratio = 1.0;
        return;
    }
    double sorted[SL__CALIB_WINDOW];
    memcpy(sorted, c->sample, (size_t)c->n * sizeof *sorted);
    qsort(sorted, (size_t)c->n, sizeof *sorted, cmp_double);
    c->ratio = c->n % 2 ? sorted[c->n / 2] : (sorted[c->n / 2 - 1] + sorted[c->n / 2]) / 2;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* max_tokens is a loose upper bound: most calls end far below it. With
 * output_reserve_learned, calls whose max_tokens is capped to the reservation (the
 * proxy's, a lease client's cap_output) reserve the 95th percentile of what this model's
 * calls of the same agent group really produced (nearest rank over the last 64). The
 * group is the request's role: a planner writes plans, a worker code, a reviewer a
 * verdict, and one percentile over all of them would cut the long writers one answer
 * in twenty and reserve the short ones far above what they write.
 *
 * A capped answer that stopped at the cap is censored: its real length is unknown, only
 * that it was at least the cap. Recording the cap itself would let the percentile only
 * ever fall (every cap is the percentile of its time, so no sample could exceed it, and
 * the sample noise would ratchet it down); recording twice the cap lets it climb back
 * when more than 5% of the calls are cut off, doubling at most per window. */
void sl__calib_record_output(sl__calib_t *c, int64_t output_tokens, int64_t reserved_tokens)
{
    if (!c) return;
    if (reserved_tokens > 0 && output_tokens == reserved_tokens)
        output_tokens = reserved_tokens > SL_TOKENS_MAX / 2 ? SL_TOKENS_MAX : 2 * reserved_tokens;
    c->out_sample[c->out_pos] = output_tokens;
    c->out_pos = (c->out_pos + 1) % SL__CALIB_WINDOW;
    if (c->out_n < SL__CALIB_WINDOW) c->out_n++;
    sl__calib_update_output(c);
}

sl__calib_t *sl__calib_outputs(sl__pool_t *p, const char *model, const char *group, bool create)
{
    char key[SL__NAME_MAX + SL__CLASS_MAX + 2];
    snprintf(key, sizeof key, "%s\x1f%s", model, group ? group : "worker");
    return sl__calib_get(p, key, create);
}

bool sl__calib_is_outputs(const sl__calib_t *c)
{
    return strchr(c->model, '\x1f') != NULL;
}

void sl__calib_update_output(sl__calib_t *c)
{
    c->out_p95 = 0;
    if (c->out_n < SL__OUTPUT_MIN_SAMPLES) return;
    int64_t sorted[SL__CALIB_WINDOW];
    memcpy(sorted, c->out_sample, (size_t)c->out_n * sizeof *sorted);
    qsort(sorted, (size_t)c->out_n, sizeof *sorted, cmp_i64);
    int rank = (95 * c->out_n + 99) / 100; /* ceil(0.95 n), 1-based */
    c->out_p95 = sorted[rank - 1] > 1 ? sorted[rank - 1] : 1;
}

int sl_engine_calibration_foreach(const sl_engine_t *e, const char *pool,
                                  void (*fn)(const sl_calibration_info_t *c, void *ud), void *ud)
{
    const sl__pool_t *p = pool ? sl__pool_find(e, pool) : NULL;
    if (!p) return sl__fail(e, SL_ENOTFOUND, "pool \"%.140s\" not found", pool ? pool : "(null)");
    for (size_t i = 0; i < p->calibs.cap; i++) {
        if (!p->calibs.slots[i].hash) continue;
        const sl__calib_t *c = p->calibs.slots[i].val;
        if (sl__calib_is_outputs(c)) continue; /* no model's ratio: a group's outputs */
        sl_calibration_info_t info = {.model = c->model, .ratio = c->ratio, .samples = c->total};
        fn(&info, ud);
    }
    return SL_OK;
}
