/* grants.c - a pool's grant history: what was granted when, so a header can excuse the leases
 * granted just after the one whose call it came from (docs/design.md, "A later grant taken
 * first").
 *
 * A header of lease a's call is compared with the room the pool believed in right after a's
 * grant (headers.c). A lease b granted after a, whose call the provider took before a's, is
 * in the provider's snapshot and not in that room: the shortfall would lower the level by
 * b's reservation, and once b has settled take its refund back. b can only be taken first
 * if it was granted before a's call was sent, which is at most send_window_s after a's
 * grant: so the reservations granted in that window after a's grant are excused, and no
 * others (excusing everything since would blind a slow answer's header to outside traffic
 * for its whole duration).
 *
 * The history is a running sum of the reservations granted (per bucket) with marks of when:
 * grants less than send_window_s / SL__GRANT_MARK_SPLIT apart share a mark, and the last
 * SL__GRANT_MARKS marks are kept, so memory is bounded and the history covers at least
 * (SL__GRANT_MARKS - 1) / SL__GRANT_MARK_SPLIT windows whatever the grant rate (a mark starts
 * at least a split after the one before). The sum at the end
 * of a's window is read at the last mark that ended in it: the grants of a mark that straddles
 * the window's end are not excused, and a history that no longer reaches back to the window's
 * end excuses nothing (lowering more never overbooks). sluice.lua's GH ports this file. */
#include "internal.h"

#include <math.h>
#include <string.h>

void sl__grants_record(sl__pool_t *p, sl__lease_t *l, const int64_t *need, double now)
{
    sl__grants_t *g = &p->grants;
    double split_s = p->cfg.send_window_s / SL__GRANT_MARK_SPLIT;
    /* No window, no marks to keep: the sum alone (a header excuses nothing). */
    if (p->cfg.send_window_s > 0 && !(now - g->open_from < split_s)) {
        if (g->open_at > -INFINITY) {
            /* The open mark closes: into the ring, over its oldest when full. */
            int at = (g->head + g->n) % SL__GRANT_MARKS;
            if (g->n == SL__GRANT_MARKS) g->head = (g->head + 1) % SL__GRANT_MARKS;
            else g->n++;
            g->closed[at].at = g->open_at;
            memcpy(g->closed[at].cum, g->cum, sizeof g->cum);
        }
        g->open_from = now;
    }
    g->open_at = now;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        g->cum[b] += (double)need[b];
        l->cum_at_grant[b] = g->cum[b];
    }
}

double sl__grants_after(const sl__pool_t *p, const sl__lease_t *l, sl_bucket_t b,
                        double sent_after_s)
{
    const sl__grants_t *g = &p->grants;
    double window_s = p->cfg.send_window_s;
    if (sent_after_s >= 0 && sent_after_s < window_s) window_s = sent_after_s;
    if (!(window_s > 0)) return 0;
    double window_end = l->granted_at + window_s;
    double cum_then = g->cum[b];
    if (g->open_at > window_end) {
        /* Granted since the window ended: the last mark that ended in it, if still kept. */
        int i = g->n - 1;
        while (i >= 0 && g->closed[(g->head + i) % SL__GRANT_MARKS].at > window_end) i--;
        if (i < 0) return 0;
        cum_then = g->closed[(g->head + i) % SL__GRANT_MARKS].cum[b];
    }
    double after = cum_then - l->cum_at_grant[b];
    return after > 0 ? after : 0;
}
