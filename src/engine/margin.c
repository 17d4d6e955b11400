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
 * is earned: a step up to `margin_max` needs a provider `remaining` header that showed at
 * least the room the pool believes, returned by the call of a lease granted since the
 * margin last changed (one decided at the new margin: a step per round trip, as TCP adds
 * once per window acknowledged); one that shows less takes the margin back to the start
 * (docs/design.md "Margin"). It is kept in basis points so repeated steps never drift. A margin that
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

/* A step above the start moves `step_bp` of each bucket's reserve into its level, for the
 * buckets whose `remaining` header agreed (`bits`): the header showed the provider's room
 * at least level + reserve (headers.c), and the step keeps level + reserve where it was, so
 * the pool claims no more than the provider vouched for. Without it a step only raised the
 * ceiling and the refill, and the reserve the start kept (15% of a full bucket) stayed
 * unused for a run of a few minutes (docs/design.md "Margin"). */
static void step_into_levels(sl__pool_t *p, unsigned bits, int step_bp)
{
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (sl__limited(p, (sl_bucket_t)b) && (bits & (1u << b)))
            p->level[b] += (double)p->limit[b] * step_bp / 10000.0;
    sl__clamp_levels(p);
}

double sl__margin_next_step_at(const sl__pool_t *p)
{
    double at = INFINITY;
    if (p->margin_bp < p->start_bp) at = p->clean_since + p->cfg.recover_every_s;
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
    /* Below the start only: above it a step is earned by a header (sl__margin_headers). */
    while (p->margin_bp < start_bp && p->clean_since + p->cfg.recover_every_s <= now) {
        double t = p->clean_since + p->cfg.recover_every_s;
        if (p->floor_since >= 0 && !p->alert_floor &&
            p->floor_since + p->cfg.margin_floor_alert_s <= t)
            emit_floor_alert(e, p, p->floor_since + p->cfg.margin_floor_alert_s, true);
        sl__refill(p, t); /* refill at the old capacity up to the step */
        p->margin_bp = p->margin_bp + up_bp > start_bp ? start_bp : p->margin_bp + up_bp;
        p->climb_id = e->next_id;
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
    p->climb_id = e->next_id;
    int floor_bp = p->floor_bp;
    int down_bp = p->down_bp;
    int old_bp = p->margin_bp;
    p->margin_bp = p->margin_bp - down_bp < floor_bp ? floor_bp : p->margin_bp - down_bp;
    p->clean_since = now;
    if (p->margin_bp <= floor_bp && p->floor_since < 0) p->floor_since = now;
    sl__clamp_levels(p);
    if (p->margin_bp != old_bp) {
        emit_margin(e, p, now);
        sl__pool_reject_unfit(e, p, now);
    }
    return true;
}

void sl__margin_headers(sl_engine_t *e, sl__pool_t *p, bool lowered, unsigned agreed_bits,
                        uint64_t lease_id, double now)
{
    if (!lowered) {
        /* A step above the start, on the word of a lease decided at today's margin: the
         * reports of leases granted before the last change describe the old one, and a
         * fleet's calls in flight answer together (ten agreeing headers are one piece of
         * evidence, as their ten 429s are one congestion event). */
        if (!agreed_bits || lease_id == 0 || lease_id < p->climb_id ||
            p->margin_bp < p->start_bp || p->margin_bp >= p->max_bp)
            return;
        sl__refill(p, now); /* refill at the old capacity up to the step */
        int old_bp = p->margin_bp;
        p->margin_bp = old_bp + p->up_bp > p->max_bp ? p->max_bp : old_bp + p->up_bp;
        step_into_levels(p, agreed_bits, p->margin_bp - old_bp);
        p->climb_id = e->next_id;
        p->clean_since = now;
        emit_margin(e, p, now);
        return;
    }
    if (p->margin_bp < p->start_bp) return; /* recovering from a 429: headers do not stop it */
    p->climb_id = e->next_id; /* the climb starts over, from leases granted from now */
    p->clean_since = now;
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
