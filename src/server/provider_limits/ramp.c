/* ramp.c - the slow start: a pool's input rate grows by a factor per minute after a cold start or an idle period.
 *
 * Why (docs/design.md "Slow start"): a provider with an acceleration limit refuses an
 * organisation whose usage rises too fast, e.g. a whole fleet starting at once after a
 * quiet night, although every bucket holds room. The ramp caps the input tokens a pool
 * admits per minute at R(t) = base x factor^(minutes since the pool went busy), base =
 * the floor, until R reaches the pool's own limit. The engine's buckets admit, over any
 * 60 s, at most their capacity at the window's start plus the refill during it. The
 * limit handed to the engine is L = c x R: in the first minute a window holds the full
 * bucket of the start, L0, plus the refill since, L0 (f^u - 1) / ln f after u minutes,
 * which stays under R = base f^u when c <= 1 for f >= e; later a window holds
 * L(t) x (1/f + (1 - 1/f) / ln f), under R when c <= 1 / that (0.82 for f = 2). So c is
 * the smaller of the two, and the margin takes its share off too: no window admits more
 * than R.
 *
 * A pool is busy while it has leases in flight or tickets queued; seen idle for
 * `ramp_idle_s` it is held at the floor again (armed), and the growth starts at the
 * tick that sees it busy (at most 0.5 s late, pacing.c, which only makes the ramp later). An
 * acceleration 429 met all the same (the floor was above the provider's) restarts the
 * ramp one minute's growth lower and lowers the pool's floor to that: learnt. With
 * `ramp: auto` (the default) a pool has no ramp until its first such 429: a provider
 * without an acceleration limit costs nothing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pacing.h"
#include "server.h"

bool sl__ramp_active(const sl_pool_ramp_t *r, const sl_pace_pool_t *pp)
{
    return r->mode == SL_RAMP_ON || (r->mode == SL_RAMP_AUTO && pp->learned);
}

/* The limit to hand the engine so that no 60 s window admits more than `rate_tpm`. */
static int64_t engine_cap(double rate_tpm, double f)
{
    double g = 1.0 / f + (1.0 - 1.0 / f) / log(f);
    double c = 1.0 / g < 1.0 ? 1.0 / g : 1.0;
    double cap = floor(rate_tpm * c);
    return cap < 1 ? 1 : (int64_t)cap;
}

void sl__ramp_arm(sl_pace_pool_t *pp, const sl_pool_ramp_t *r)
{
    pp->armed = true;
    pp->ramping = false;
    pp->ramp_base_tpm = pp->floor_tpm;
    pp->cap_tpm = engine_cap(pp->ramp_base_tpm, r->factor);
}

/* The input limit the ramp grows toward (the pool's own, without the ramp); 0 when
 * neither input nor combined tokens are limited. */
static int64_t target_tpm(const sl_pace_pool_t *pp)
{
    int64_t in = pp->configured[1], tok = pp->configured[3];
    if (pp->have_published) {
        if (pp->published[1] > 0 && (in == 0 || pp->published[1] < in)) in = pp->published[1];
        if (pp->published[3] > 0 && (tok == 0 || pp->published[3] < tok)) tok = pp->published[3];
    }
    return in > 0 ? in : tok;
}

typedef struct tick_ctx {
    sl_server_t *srv;
    double now_s;
} tick_ctx_t;

static bool ticking; /* one pools query at a time (a networked backend answers later) */

/* One pool's step; returns whether its cap changed. */
static bool step(sl_pace_pool_t *pp, const sl_pool_ramp_t *r, bool busy, double now)
{
    int64_t before = pp->cap_tpm;
    if (!sl__ramp_active(r, pp)) {
        pp->armed = pp->ramping = false;
        pp->cap_tpm = 0;
        return before != 0;
    }
    if (!busy) {
        if (pp->idle_since_s < 0) pp->idle_since_s = now;
        if (!pp->armed && now - pp->idle_since_s >= r->idle_s) sl__ramp_arm(pp, r);
        return pp->cap_tpm != before;
    }
    pp->idle_since_s = -1;
    if (pp->armed) {
        pp->armed = false;
        pp->ramping = true;
        pp->ramp_start_s = now;
    }
    if (!pp->ramping) return false;
    double rate = pp->ramp_base_tpm * pow(r->factor, (now - pp->ramp_start_s) / 60.0);
    int64_t cap = engine_cap(rate, r->factor);
    int64_t target = target_tpm(pp);
    if (cap >= (target > 0 ? target : INT64_C(1) << 50)) {
        pp->ramping = false;
        pp->cap_tpm = 0;
        fprintf(stderr, "sluiced: ramp: pool '%s' caught up with its limits after %.0f s\n",
                pp->name, now - pp->ramp_start_s);
    } else {
        pp->cap_tpm = cap;
    }
    /* A step of under 1% waits for the next: reconfiguring is not free. */
    return pp->cap_tpm == 0 || before == 0 || llabs(pp->cap_tpm - before) * 100 > before;
}

static void on_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg,
                     void *ud)
{
    tick_ctx_t *t = ud;
    sl_server_t *srv = t->srv;
    (void)errmsg;
    ticking = false;
    if (rc != SL_OK || !SL_PACING(srv)) return;
    bool changed = false;
    for (size_t i = 0; i < srv->config.settings.n_pools; i++) {
        const char *name = srv->config.settings.pools[i].name;
        sl_pace_pool_t *pp = sl__pace_pool(SL_PACING(srv), name);
        if (!pp) continue;
        bool busy = false;
        for (size_t j = 0; j < n; j++)
            if (!strcmp(pools[j].name, name))
                busy = pools[j].leases_in_flight > 0 || pools[j].queue_depth > 0;
        if (step(pp, &srv->config.bounds[i].ramp, busy, t->now_s)) changed = true;
    }
    if (changed) sl__pacing_apply(srv, &srv->config, true);
}

void sl__ramp_tick(sl_server_t *srv, double now_s)
{
    static tick_ctx_t ctx;
    if (ticking || !SL_PACING(srv)) return;
    bool any = false;
    for (size_t i = 0; i < srv->config.settings.n_pools && !any; i++) {
        const sl_pace_pool_t *pp = sl__pace_pool(SL_PACING(srv), srv->config.settings.pools[i].name);
        any = pp && (sl__ramp_active(&srv->config.bounds[i].ramp, pp) || pp->cap_tpm > 0);
    }
    if (!any) return;
    ticking = true;
    ctx.srv = srv;
    ctx.now_s = now_s;
    sl_backend_pools(srv->backend, NULL, on_pools, &ctx);
}

void sl__pacing_on_acceleration(sl_server_t *srv, const char *pool)
{
    sl_pace_pool_t *pp = SL_PACING(srv) ? sl__pace_pool(SL_PACING(srv), pool) : NULL;
    const sl_pool_bounds_t *b = sl_config_pool_bounds(&srv->config, pool);
    if (!pp || !b || b->ramp.mode == SL_RAMP_OFF) return;
    double f = b->ramp.factor;
    double now = sl_backend_now(srv->backend);
    /* The rate admitted when the provider refused: the ramp's, else the pool's limit. */
    double rate = pp->ramping ? pp->ramp_base_tpm * pow(f, (now - pp->ramp_start_s) / 60.0)
                  : pp->cap_tpm > 0 ? (double)pp->cap_tpm
                                    : (double)target_tpm(pp);
    double base = rate > 0 ? rate / f : pp->floor_tpm;
    if (base < 1000) base = 1000;
    pp->learned = true;
    if (base < pp->floor_tpm) pp->floor_tpm = base;
    pp->armed = false;
    pp->ramping = true;
    pp->ramp_start_s = now;
    pp->ramp_base_tpm = base;
    pp->idle_since_s = -1;
    pp->cap_tpm = engine_cap(base, f);
    fprintf(stderr,
            "sluiced: ramp: pool '%s' met an acceleration 429: ramping again from %.0f input "
            "tokens per minute (x%g per minute); its floor is now %.0f\n",
            pool, base, f, pp->floor_tpm);
    sl__pacing_apply(srv, &srv->config, true);
}
