/* slidewin.c - sliding-window counters: a ring of SL_WINDOW_SLOTS slots, advanced lazily.
 *
 * Nothing runs on a timer: a slot is cleared when a later write or read passes it, so a
 * window costs its 52 bytes and no work while nothing happens.
 */
#include "fleet.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static int64_t slot_of(double window_s, double now_s)
{
    assert(window_s > 0 && "a window is some seconds long");
    return (int64_t)floor(now_s / (window_s / SL_WINDOW_SLOTS));
}

/* The counts as they would be with the ring advanced to slot `now`. */
static void advanced(const sl_window_t *w, int64_t now, uint32_t out[SL_WINDOW_SLOTS])
{
    memset(out, 0, sizeof(uint32_t) * SL_WINDOW_SLOTS);
    for (int k = 0; k < SL_WINDOW_SLOTS; k++) {
        int64_t s = now - (SL_WINDOW_SLOTS - 1) + k; /* oldest first */
        if (s > w->slot || s <= w->slot - SL_WINDOW_SLOTS) continue;
        out[k] = w->counts[((s % SL_WINDOW_SLOTS) + SL_WINDOW_SLOTS) % SL_WINDOW_SLOTS];
    }
}

void sl__window_add(sl_window_t *w, double window_s, double now_s, uint32_t n)
{
    int64_t now = slot_of(window_s, now_s);
    if (now > w->slot) {
        int64_t gap = now - w->slot;
        for (int64_t s = w->slot + 1; gap < SL_WINDOW_SLOTS && s <= now; s++)
            w->counts[((s % SL_WINDOW_SLOTS) + SL_WINDOW_SLOTS) % SL_WINDOW_SLOTS] = 0;
        if (gap >= SL_WINDOW_SLOTS) memset(w->counts, 0, sizeof(w->counts));
        w->slot = now;
    } else if (now <= w->slot - SL_WINDOW_SLOTS) {
        return; /* older than the window (a clock step back): not counted */
    }
    uint32_t *c = &w->counts[((now % SL_WINDOW_SLOTS) + SL_WINDOW_SLOTS) % SL_WINDOW_SLOTS];
    *c = *c > UINT32_MAX - n ? UINT32_MAX : *c + n;
}

uint64_t sl__window_sum(const sl_window_t *w, double window_s, double now_s)
{
    uint32_t c[SL_WINDOW_SLOTS];
    int64_t now = slot_of(window_s, now_s);
    if (w->slot <= now - SL_WINDOW_SLOTS) return 0; /* nothing written within the window */
    advanced(w, now, c);
    uint64_t sum = 0;
    for (int k = 0; k < SL_WINDOW_SLOTS; k++)
        sum += c[k];
    return sum;
}

void sl__window_slots(const sl_window_t *w, double window_s, double now_s,
                      uint32_t out[SL_WINDOW_SLOTS])
{
    advanced(w, slot_of(window_s, now_s), out);
}

void sl__window_clear(sl_window_t *w)
{
    memset(w->counts, 0, sizeof(w->counts));
}
