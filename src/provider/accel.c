/* accel.c - the acceleration limit: usage may not grow too fast after an idle period.
 *
 * Anthropic's rate-limits page warns that an organisation can meet 429s from
 * "acceleration limits" when its usage rises sharply, and advises ramping traffic up
 * gradually. The figures are not published, so the model is a parameterised one:
 * after `accel_idle_s` with no call (and from creation: a cold start), a ramp begins
 * at the first call. Its allowance is base x factor^(minutes since the ramp began),
 * base = max(accel_floor_tpm, uncached input admitted in the minute before). A call is
 * refused when the uncached input admitted in the last 60 s plus its own would exceed
 * the allowance. The ramp ends once the allowance reaches the input limit (or 2^50
 * when input is not limited): from then on the ordinary buckets bind. */
#include <math.h>

#include "provider_internal.h"

#define ACCEL_TOP 1.125899906842624e15 /* 2^50: "no limit binds" */

void sl__accel_init(sl__accel_t *a)
{
    for (int i = 0; i < SL__ACCEL_SLOTS; i++) a->slot_second[i] = -1;
    a->last_call_s = -INFINITY;
}

/* Uncached input admitted in the 60 whole seconds up to and including `now`'s. */
static double window_tokens(const sl__accel_t *a, double now)
{
    int64_t sec = (int64_t)floor(now);
    double sum = 0;
    for (int i = 0; i < SL__ACCEL_SLOTS; i++)
        if (a->slot_second[i] > sec - SL__ACCEL_SLOTS && a->slot_second[i] <= sec)
            sum += (double)a->slot_tokens[i];
    return sum;
}

static double ceiling_tpm(const sl_provider_t *p)
{
    return p->limit[SL__PB_INPUT] > 0 ? (double)p->limit[SL__PB_INPUT] : ACCEL_TOP;
}

static double allowance_at(const sl_provider_t *p, double now)
{
    const sl__accel_t *a = &p->accel;
    double minutes = (now - a->ramp_start_s) / 60.0;
    double x = a->ramp_base * pow(p->cfg.accel_factor, minutes);
    return x < ACCEL_TOP ? x : ACCEL_TOP;
}

double sl_provider_accel_allowance(const sl_provider_t *p, double now_s)
{
    if (p->cfg.accel_idle_s <= 0 || !p->accel.ramping) return -1;
    double x = allowance_at(p, now_s);
    return x >= ceiling_tpm(p) ? -1 : x;
}

bool sl__accel_refuses(sl_provider_t *p, int64_t tokens, double now, double *retry_after_s)
{
    if (p->cfg.accel_idle_s <= 0) return false;
    sl__accel_t *a = &p->accel;
    if (now - a->last_call_s >= p->cfg.accel_idle_s) {
        double recent = window_tokens(a, now);
        double floor_tpm = (double)p->cfg.accel_floor_tpm;
        a->ramping = true;
        a->ramp_start_s = now;
        a->ramp_base = recent > floor_tpm ? recent : floor_tpm;
    }
    a->last_call_s = now;
    if (!a->ramping) return false;
    double allowed = allowance_at(p, now);
    if (allowed >= ceiling_tpm(p)) {
        a->ramping = false;
        return false;
    }
    double want = window_tokens(a, now) + (double)tokens;
    if (want <= allowed) return false;
    /* When the allowance will have grown to what is wanted now (the window only
     * empties meanwhile, so this is a bound, never too early by the allowance). */
    double at = a->ramp_start_s + 60.0 * log(want / a->ramp_base) / log(p->cfg.accel_factor);
    double w = ceil(at - now - 1e-9);
    *retry_after_s = w < 1 ? 1 : w;
    return true;
}

void sl__accel_admit(sl_provider_t *p, int64_t tokens, double now)
{
    if (p->cfg.accel_idle_s <= 0 || tokens <= 0) return;
    sl__accel_t *a = &p->accel;
    int64_t sec = (int64_t)floor(now);
    int i = (int)(((sec % SL__ACCEL_SLOTS) + SL__ACCEL_SLOTS) % SL__ACCEL_SLOTS);
    if (a->slot_second[i] != sec) {
        a->slot_second[i] = sec;
        a->slot_tokens[i] = 0;
    }
    a->slot_tokens[i] += tokens;
}
