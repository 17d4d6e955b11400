/* margin.c - the AIMD safety margin: cut once per congestion event, recover slowly, climb
 * above the start only while the provider's headers vouch for it.
 *
 * Capacity is limit x margin. The margin starts at 0.85 (the other 15% absorbs
 * estimate error and traffic outside the coordinator) and drops 0.05 on a 429 reported
 * against a granted lease, never below 0.60. One congestion event cuts once, as TCP
 * cuts once per window of data in flight: a lease granted before the last cut was
 * decided at the old margin, so its 429 is that cut's event, not a new one (the
 * engine's id counter at the cut tells which leases came before it). Each clean
 * `recover_every_s` raises the margin 0.01 back to the start. Above the start the margin
 * is earned: a step up to `margin_max` needs an interval with no 429 in which some
 * provider `remaining` header showed at least the room the pool believes and none
 * showed less; one that shows less takes the margin back to the start (docs/design.md
 * "Margin"). It is kept in basis points so repeated steps never drift. A margin that
 * sits at the floor for `margin_floor_alert_s` means someone outside the coordinator
 * uses the key: alert `margin_at_floor`. */
#include "internal.h"

#include <math.h>

int sl__to_bp(double ratio)
{
    return (int)lround(ratio * 10000.0);
}

static void emit_margin(sl_engine_t *e, sl__pool_t *p, double now)
{
    sl_event_t ev;
    sl__event_init(&ev, SL_EV_MARGIN, now, p);
    ev.margin = sl__margin(p);
    sl__emit(e, &ev);
}

static void emit_floor_alert(sl_engine_t *e, sl__pool_t *p, double now, bool active)
{
    p->alert_floor = active;
    sl_event_t ev;
    sl__event_init(&ev, SL_EV_ALERT, now, p);
    ev.alert = "margin_at_floor";
    ev.active = active;
    ev.margin = sl__margin(p);
    sl__emit(e, &ev);
}

/* The length of the interval now running: recover_every_s back to the start; above it, at
 * most the share of one refill period (SL__CLIMB_PERIOD_S) that makes the whole climb from
 * the start to the ceiling last one period (5 s a step with the defaults: 0.01 a step,
 * 0.85 to 0.97). A provider header vouches for the whole bucket, and a period is the time
 * the provider's bucket takes to turn over: outside use at a steady rate has shown in the
 * headers (and taken the margin back to the start) before the climb is over. */
static double step_every_s(const sl__pool_t *p)
{
    double every_s = p->cfg.recover_every_s;
    if (p->margin_bp >= p->start_bp && p->max_bp > p->start_bp) {
        double climb_every_s =
            SL__CLIMB_PERIOD_S * (double)p->up_bp / (double)(p->max_bp - p->start_bp);
        if (every_s > climb_every_s) every_s = climb_every_s;
    }
    return every_s;
}

/* A step above the start moves `step_bp` of each bucket's reserve into its level, for the
 * buckets whose `remaining` header agreed during the interval: the header showed the
 * provider's room at least level + reserve (headers.c), and the step keeps level +
 * reserve where it was, so the pool claims no more than the provider vouched for. Without
 * it a step only raised the ceiling and the refill, and the reserve the start kept (15% of
 * a full bucket) stayed unused for a run of a few minutes (docs/design.md "Margin"). */
static void step_into_levels(sl__pool_t *p, int step_bp)
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (sl__limited(p, (sl_bucket_t)b) && (p->agreed_bits & (1u << b)))
            p->level[b] += (double)p->limit[b] * step_bp / 10000.0;
    sl__clamp_levels(p);
}

/* Whether the interval of recovery now running may take the margin up: below the start
 * always; at or above it only when a provider header agreed during it. */
static bool may_climb(const sl__pool_t *p)
{
    if (p->margin_bp >= p->max_bp) return false;
    return p->margin_bp < p->start_bp || p->agreed_at >= p->clean_since;
}

double sl__margin_next_step_at(const sl__pool_t *p)
{
    double at = INFINITY;
    if (may_climb(p)) at = p->clean_since + step_every_s(p);
    if (p->floor_since >= 0 && !p->alert_floor) {
        double alert_at = p->floor_since + p->cfg.margin_floor_alert_s;
        if (alert_at < at) at = alert_at;
    }
    return at;
}

void sl__margin_advance(sl_engine_t *e, sl__pool_t *p, double now)
{
    int start_bp = p->start_bp;
    int floor_bp = p->floor_bp;
    int up_bp = p->up_bp;
    double every_s;
    while (p->margin_bp < p->max_bp && p->clean_since + (every_s = step_every_s(p)) <= now) {
        double t = p->clean_since + every_s;
        if (p->margin_bp >= start_bp && !(p->agreed_at >= p->clean_since && p->agreed_at < t)) {
            /* Above the start an interval no header vouched for earns nothing: skip to the
             * one holding the last agreement, or to the last that ended by now. An
             * interval holds its start, not its end: a header read at the instant the
             * advance closed an interval counts for the next. */
            double k = p->agreed_at >= t ? floor((p->agreed_at - p->clean_since) / every_s)
                                         : floor((now - p->clean_since) / every_s);
            p->clean_since += (k >= 1 ? k : 1) * every_s;
            continue;
        }
        if (p->floor_since >= 0 && !p->alert_floor &&
            p->floor_since + p->cfg.margin_floor_alert_s <= t)
            emit_floor_alert(e, p, p->floor_since + p->cfg.margin_floor_alert_s, true);
        sl__refill(p, t); /* refill at the old capacity up to the step */
        int ceiling_bp = p->margin_bp < start_bp ? start_bp : p->max_bp;
        int old_bp = p->margin_bp;
        p->margin_bp = p->margin_bp + up_bp > ceiling_bp ? ceiling_bp : p->margin_bp + up_bp;
        if (old_bp >= start_bp) step_into_levels(p, p->margin_bp - old_bp);
        p->agreed_bits = 0;
        p->clean_since = t;
        if (p->margin_bp > floor_bp && p->floor_since >= 0) {
            p->floor_since = -1;
            if (p->alert_floor) emit_floor_alert(e, p, t, false);
        }
        emit_margin(e, p, t);
    }
    if (p->floor_since >= 0 && !p->alert_floor &&
        p->floor_since + p->cfg.margin_floor_alert_s <= now)
        emit_floor_alert(e, p, now, true);
}

bool sl__margin_cut(sl_engine_t *e, sl__pool_t *p, uint64_t lease_id, double now)
{
    if (lease_id < p->cut_id) return false; /* granted before the last cut: same event */
    p->cut_id = e->next_id;
    int floor_bp = p->floor_bp;
    int down_bp = p->down_bp;
    int old_bp = p->margin_bp;
    p->margin_bp = p->margin_bp - down_bp < floor_bp ? floor_bp : p->margin_bp - down_bp;
    p->clean_since = now;
    p->agreed_bits = 0;
    if (p->margin_bp <= floor_bp && p->floor_since < 0) p->floor_since = now;
    sl__clamp_levels(p);
    if (p->margin_bp != old_bp) {
        emit_margin(e, p, now);
        sl__pool_reject_unfit(e, p, now);
    }
    return true;
}

void sl__margin_headers(sl_engine_t *e, sl__pool_t *p, bool lowered, unsigned agreed_bits,
                        double now)
{
    if (!lowered) {
        if (agreed_bits) {
            p->agreed_at = now;
            p->agreed_bits |= agreed_bits;
        }
        return;
    }
    p->agreed_bits = 0;
    p->agreed_at = -INFINITY;
    if (p->margin_bp < p->start_bp) return; /* recovering from a 429: headers do not stop it */
    p->clean_since = now;                   /* the climb starts over */
    if (p->margin_bp == p->start_bp) return;
    p->margin_bp = p->start_bp;
    sl__clamp_levels(p);
    emit_margin(e, p, now);
}

double sl__margin_wait_for(const sl__pool_t *p, const sl__need_t *need, double now)
{
    int want_bp = p->margin_bp;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        int bp = (int)ceil((double)need->n[b] / (double)p->limit[b] * 10000.0 - 1e-9);
        if (bp > want_bp) want_bp = bp;
    }
    if (want_bp <= p->margin_bp) return 0;
    int up_bp = p->up_bp;
    int steps = (want_bp - p->margin_bp + up_bp - 1) / up_bp;
    double margin_wait_s =
        p->clean_since + p->cfg.recover_every_s - now + (steps - 1) * p->cfg.recover_every_s;
    if (margin_wait_s < 0) margin_wait_s = 0;
    /* Then the level must reach the need at the recovered capacity. */
    double refill_wait_s = 0;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!sl__limited(p, (sl_bucket_t)b)) continue;
        double rate_per_s = (double)p->limit[b] * (want_bp / 10000.0) / 60.0;
        double t = ((double)need->n[b] - p->level[b]) / rate_per_s;
        if (t > refill_wait_s) refill_wait_s = t;
    }
    return margin_wait_s > refill_wait_s ? margin_wait_s : refill_wait_s;
}
