/* concurrency.c - a counting semaphore per key: at most `rate` units held at once, each hold ended by release or by its TTL.
 *
 * A check that is allowed takes a hold of its units that ends ttl_s later unless
 * released first (a semaphore, with a TTL so a crashed holder cannot keep it
 * forever). Holds all live ttl_s, so the ring of end times is in order: a release ends
 * the oldest live hold (the one nearest its TTL) and expiry pops from the front. A
 * denied hit's retry_after counts on the TTLs alone: a release may come sooner. At
 * most `rate` holds of 16 bytes per key. */
#include "limits_internal.h"

static void cc_probe(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                     sl__answer_t *a)
{
    sl__log_probe(s, sl__whole_rate(l, s), 0, l->ttl_us, units, now_us, a);
}

static void prune(sl__kstate_t *s, int64_t now_us)
{
    while (s->ring.n > 0 && sl__ring_at(&s->ring, 0)->t_us <= now_us) sl__ring_pop(&s->ring);
}

static int cc_reserve(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us)
{
    (void)l;
    prune(s, now_us);
    return sl__ring_reserve(&s->ring, s->ring.n + 1);
}

static void cc_commit(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us)
{
    prune(s, now_us);
    int64_t end = now_us + l->ttl_us;
    if (s->ring.n > 0 && sl__ring_at(&s->ring, s->ring.n - 1)->t_us > end)
        end = sl__ring_at(&s->ring, s->ring.n - 1)->t_us; /* a clock that went back */
    if (units > 0) sl__ring_push(&s->ring, end, units, false);
    s->fresh = false;
}

static bool cc_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    (void)l;
    uint32_t n = 0;
    return s->fresh || s->ring.sum == sl__log_expired(s, 0, now_us, &n);
}

static void cc_rescale(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us)
{
    (void)l, (void)s, (void)old_rate, (void)now_us;
}

int sl__concurrency_release(sl__kstate_t *s, int64_t now_us)
{
    prune(s, now_us);
    if (s->ring.n == 0) return SL_ENOTFOUND;
    sl__ring_pop(&s->ring);
    return SL_OK;
}

int64_t sl__concurrency_held(const sl__kstate_t *s, int64_t now_us)
{
    uint32_t n = 0;
    return s->fresh ? 0 : s->ring.sum - sl__log_expired(s, 0, now_us, &n);
}

const sl__algorithm_t sl__concurrency = {cc_probe, cc_reserve, cc_commit, cc_at_rest, cc_rescale};
