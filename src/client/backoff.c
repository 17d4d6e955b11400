/* Fallback backoff: full-jitter exponential delays after a provider 429 (docs/design.md,
 * "Agents: waiting, checkpoints, backoff").
 *
 * The coordinator makes 429s rare; when one still happens (a bad estimate, traffic
 * outside sluice), the agent waits u * min(cap, base * 2^n) with u uniform in [0, 1),
 * and never less than the provider's retry-after. Full jitter spreads a fleet's
 * retries over the whole window instead of stacking them at its edge.
 */
#include <math.h>

#include "internal.h"

double sl_backoff_delay_s(unsigned attempt, double base_s, double cap_s, double retry_after_s,
                          double u01)
{
    if (!isfinite(base_s) || base_s < 0) base_s = 0;
    if (!isfinite(cap_s) || cap_s < 0) cap_s = 0;
    if (!isfinite(u01) || u01 < 0) u01 = 0;
    if (u01 >= 1) u01 = nextafter(1.0, 0.0);
    /* 2^attempt overflows to +inf for big attempts; min() with the cap handles it. */
    double ceiling_s = attempt >= 1024 ? cap_s : fmin(cap_s, base_s * ldexp(1.0, (int)attempt));
    double delay_s = u01 * ceiling_s;
    if (isfinite(retry_after_s) && retry_after_s > delay_s) delay_s = retry_after_s;
    return delay_s;
}

double sl__cl_note_429(sl_client_t *c, int got_429, double retry_after_s)
{
    if (!got_429) {
        c->consecutive_429 = 0;
        return 0;
    }
    double delay_s =
        sl_backoff_delay_s(c->consecutive_429, c->opts.backoff_base_s, c->opts.backoff_cap_s,
                           retry_after_s, sl__cl_rand01(&c->rng));
    if (c->consecutive_429 < 64) c->consecutive_429++;
    double until_s = sl__cl_now_mono_s() + delay_s;
    if (until_s > c->backoff_until_s) c->backoff_until_s = until_s;
    return delay_s;
}
