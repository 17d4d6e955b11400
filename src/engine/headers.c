/* headers.c - resync a pool from the provider's rate-limit response headers.
 *
 * The provider knows the truth; the engine's buckets are a model of it. Anthropic
 * sends anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,
 * remaining,reset} (remaining rounded to the nearest thousand for tokens, reset in
 * RFC 3339); OpenAI sends x-ratelimit-{limit,remaining,reset}-{requests,tokens}
 * (reset as a duration such as 6m0s). Rules:
 *   - a limit that disagrees with the configuration is adopted (event LIMIT_ADOPTED);
 *   - a remaining value that shows less room than the pool believes lowers the
 *     level; headers never raise one. The provider's room R is compared with ours,
 *     level + (limit - capacity) (the margin is room we keep in reserve), after
 *     allowing +500 for Anthropic's rounding of token counts. Calls in flight were
 *     charged to our level when granted and the provider counts a call's input when
 *     it arrives, so both sides already include them. The headers of a lease's call are
 *     compared with the pool as it was right after that grant (the provider wrote them
 *     when it took the call), less the leases granted within send_window_s after it
 *     (grants.c), and lower the level by the difference (reference_level);
 *   - except in a cold-start window (sl_engine_pool_cold_start: the daemon could not
 *     know what was spent, so its buckets started empty): there the first remaining
 *     value of each bucket may also raise the level, to R - rounding - reserve, the
 *     room the provider vouches for; later values only lower again;
 *   - reset values are validated but only informative: refill is continuous;
 *   - before the remaining values are applied, the margin hears whether they agree
 *     with the pool (margin.c: the climb above the start needs them to).
 * Anthropic's tokens-* headers describe whichever token limit is most restrictive,
 * not a combined limit, so they are validated and otherwise ignored; OpenAI's
 * tokens-* headers are its combined limit and drive the `tokens` bucket. */
#include "internal.h"

#include <string.h>

/* The one table of the provider rate-limit headers sluice reads: name -> bucket and field.
 * The engine's resync, the Redis backend's request, the settle path's report bounds and
 * the proxy all classify through it (sl_header_classify, sl_header_is_ratelimit). */
#define ROW(name, anthropic, bucket, field) {name, {true, anthropic, bucket, field}}
/* Anthropic: PREFIX-{limit,remaining,reset}; OpenAI: x-ratelimit-{limit,remaining,reset}-NAME. */
#define ANTHROPIC(prefix, bucket)                                                                  \
    ROW(prefix "-limit", true, bucket, SL_HEADER_LIMIT),                                           \
        ROW(prefix "-remaining", true, bucket, SL_HEADER_REMAINING),                               \
        ROW(prefix "-reset", true, bucket, SL_HEADER_RESET)
#define OPENAI(name, bucket)                                                                       \
    ROW("x-ratelimit-limit-" name, false, bucket, SL_HEADER_LIMIT),                                \
        ROW("x-ratelimit-remaining-" name, false, bucket, SL_HEADER_REMAINING),                    \
        ROW("x-ratelimit-reset-" name, false, bucket, SL_HEADER_RESET)
static const struct header_row {
    const char *name;
    sl_header_kind_t kind;
} header_rows[] = {
    ANTHROPIC("anthropic-ratelimit-requests", SL_BUCKET_REQUESTS),
    ANTHROPIC("anthropic-ratelimit-input-tokens", SL_BUCKET_INPUT),
    ANTHROPIC("anthropic-ratelimit-output-tokens", SL_BUCKET_OUTPUT),
    /* The most restrictive token limit, whichever it is: validated, never applied. */
    ANTHROPIC("anthropic-ratelimit-tokens", -1),
    OPENAI("requests", SL_BUCKET_REQUESTS),
    OPENAI("tokens", SL_BUCKET_TOKENS),
};
#undef OPENAI
#undef ANTHROPIC
#undef ROW

bool sl_header_is_ratelimit(const char *name)
{
    return !strncmp(name, "anthropic-ratelimit-", 20) || !strncmp(name, "x-ratelimit-", 12);
}

sl_header_kind_t sl_header_classify(const char *name)
{
    if (sl_header_is_ratelimit(name))
        for (size_t i = 0; i < sizeof header_rows / sizeof header_rows[0]; i++)
            if (!strcmp(name, header_rows[i].name)) return header_rows[i].kind;
    return (sl_header_kind_t){.known = false, .bucket = -1};
}

bool sl_header_parse_count(const char *s, int64_t *out)
{
    int64_t v = 0;
    if (!*s) return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        v = v * 10 + (*s - '0');
        if (v > SL_TOKENS_MAX) return false;
    }
    *out = v;
    return true;
}

static void set_limit(sl__pool_t *p, int b, int64_t limit)
{
    p->limit[b] = limit;
    switch (b) {
    case SL_BUCKET_INPUT:
        p->cfg.input_tpm = limit;
        break;
    case SL_BUCKET_OUTPUT:
        p->cfg.output_tpm = limit;
        break;
    case SL_BUCKET_REQUESTS:
        p->cfg.rpm = limit;
        break;
    default:
        p->cfg.tokens_tpm = limit;
        break;
    }
}

/* Anthropic rounds remaining token counts to the nearest thousand; any other remaining
 * count is a whole number, the provider's fractional level rounded down, so up to 1 below
 * it. Without that 1, a nearly full requests bucket (level 399.6 of 400, sent as 399)
 * showed less room than a pool just as full and took the margin back to its start on
 * almost every call: on scale-200 at a tenth of its limits the margin never left 0.85. */
static double rounding_allowance(sl_header_kind_t h)
{
    return h.anthropic && h.bucket != SL_BUCKET_REQUESTS ? 500 : 1;
}

/* The level a `remaining` value `v` implies at today's margin: the provider's room, less
 * the reserve the margin keeps, allowing the rounding. A remaining header lowers the
 * level to it, and tells the margin it disagrees, when it is below the level. */
static double implied_level(const sl__pool_t *p, sl_header_kind_t h, int64_t v)
{
    double reserve = (double)p->limit[h.bucket] - sl__capacity(p, h.bucket);
    return (double)v + rounding_allowance(h) - reserve;
}

/* The lease whose call returned the headers, when it is this pool's and its grant's room is
 * known; else NULL (a pool resync, or a lease restored from a snapshot). */
static const sl__lease_t *lease_of(const sl_engine_t *e, const sl__pool_t *p, uint64_t lease_id)
{
    uint64_t v;
    if (!lease_id || !sl__u64map_get(&e->leases, lease_id, &v)) return NULL;
    const sl__lease_t *l = (const sl__lease_t *)(uintptr_t)v;
    return l->pool == p && l->room_known ? l : NULL;
}

/* The level a header is compared with: the one the pool had when the provider wrote it.
 * The provider takes a call's snapshot when it takes the call (Anthropic's remaining
 * output counts that call's max_tokens), and a non-streamed answer carries it at its end:
 * by then other calls' refunds and the refill raised our level, and the provider's
 * snapshot knows none of them. So a lease's header is compared with the pool's room right
 * after its grant (at today's margin), and lowers the level by the difference, which keeps
 * what came in since; a header of no lease is compared with the level now. The leases
 * granted within send_window_s after it may have been taken first and be in the snapshot:
 * their reservations are excused (grants.c). */
static double reference_level(const sl__pool_t *p, const sl__lease_t *l, sl_bucket_t b,
                              double sent_after_s)
{
    if (!l) return p->level[b];
    return l->room_at_grant[b] - ((double)p->limit[b] - sl__capacity(p, b)) -
           sl__grants_after(p, l, b, sent_after_s);
}

/* What the margin took back into its reserve since the lease's grant (a cut, or a margin
 * above the start sent back to it): it raised the room the pool believes without a token
 * coming in, and was never ours, so a header that lowers takes it too. Steps up move
 * reserve into the level and leave the room as it was: nothing. */
static double reserve_growth(const sl__pool_t *p, const sl__lease_t *l, sl_bucket_t b)
{
    if (!l) return 0;
    double growth = (double)p->limit[b] - sl__capacity(p, b) - l->reserve_at_grant[b];
    return growth > 0 ? growth : 0;
}

/* Tells the margin what this report's `remaining` headers say at today's margin, before
 * they are applied: does one show less room than the pool believes (it would lower a
 * level), or do they show at least as much? A cold-start window's first value of a
 * bucket raises rather than compares, and says neither. */
static void judge_margin(sl_engine_t *e, sl__pool_t *p, const char *const *names,
                         const char *const *values, size_t count, uint64_t lease_id,
                         double sent_after_s, bool refused, double now)
{
    const sl__lease_t *l = lease_of(e, p, lease_id);
    bool lowered = false;
    unsigned agreed_bits = 0;
    for (size_t i = 0; i < count; i++) {
        sl_header_kind_t h = sl_header_classify(names[i]);
        if (!h.known || h.bucket < 0 || h.field != SL_HEADER_REMAINING) continue;
        if (!sl__limited(p, h.bucket)) continue;
        if (now < p->cold_until && !(p->cold_raised & (1u << h.bucket))) continue;
        int64_t v = 0;
        sl_header_parse_count(values[i], &v);
        if (implied_level(p, h, v) < reference_level(p, l, h.bucket, sent_after_s))
            lowered = true;
        else
            agreed_bits |= 1u << h.bucket;
    }
    /* A refused call (a 429) vouches for nothing: the provider had no room for it. */
    sl__margin_headers(e, p, lowered, refused ? 0 : agreed_bits, lease_id, now);
}

int sl__resync(sl_engine_t *e, sl__pool_t *p, const char *const *names, const char *const *values,
               size_t count, uint64_t lease_id, double sent_after_s, bool refused, double now,
               bool apply, int *changed)
{
    int n_changed = 0;
    /* Validate everything first: a malformed header changes nothing. */
    for (size_t i = 0; i < count; i++) {
        sl_header_kind_t h = sl_header_classify(names[i]);
        if (!h.known) continue;
        int64_t v = 0;
        double t;
        bool reset = h.field == SL_HEADER_RESET;
        bool ok = reset ? (h.anthropic ? sl_parse_rfc3339(values[i], &t)
                                       : sl_parse_duration(values[i], &t)) == SL_OK
                        : sl_header_parse_count(values[i], &v);
        if (!ok)
            return sl__fail(e, SL_EINVAL, "header %s: \"%.64s\" is not a valid %s", names[i],
                            values[i],
                            reset ? (h.anthropic ? "RFC 3339 time" : "duration")
                                  : "non-negative integer");
    }
    if (!apply) return SL_OK;
    bool adopted = false;
    const sl__lease_t *l = lease_of(e, p, lease_id);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            judge_margin(e, p, names, values, count, lease_id, sent_after_s, refused, now);
        for (size_t i = 0; i < count; i++) {
            sl_header_kind_t h = sl_header_classify(names[i]);
            if (!h.known || h.bucket < 0) continue;
            int64_t v = 0;
            if (pass == 0 && h.field == SL_HEADER_LIMIT) {
                sl_header_parse_count(values[i], &v);
                if (v == 0 || v == p->limit[h.bucket]) continue;
                set_limit(p, h.bucket, v);
                /* A bucket limited only now starts full, unless the pool is cold. */
                if (p->level[h.bucket] == 0 && p->reserved[h.bucket] == 0 &&
                    !(now < p->cold_until))
                    p->level[h.bucket] = sl__capacity(p, (sl_bucket_t)h.bucket);
                sl__clamp_levels(p);
                adopted = true;
                n_changed++;
                sl_event_t ev;
                sl__event_init(&ev, SL_EV_LIMIT_ADOPTED, now, p);
                ev.bucket = (sl_bucket_t)h.bucket;
                ev.value = (double)v;
                sl__emit(e, &ev);
            } else if (pass == 1 && h.field == SL_HEADER_REMAINING && sl__limited(p, h.bucket)) {
                sl_header_parse_count(values[i], &v);
                double allowance = rounding_allowance(h);
                double reserve = (double)p->limit[h.bucket] - sl__capacity(p, h.bucket);
                double implied = implied_level(p, h, v);
                double ref = reference_level(p, l, (sl_bucket_t)h.bucket, sent_after_s);
                double level = p->level[h.bucket];
                unsigned bit = 1u << h.bucket;
                bool raise = false;
                if (now < p->cold_until && !(p->cold_raised & bit)) {
                    p->cold_raised |= bit;
                    double vouched = level + ((double)v - allowance - reserve - ref);
                    double cap = sl__capacity(p, h.bucket);
                    if (vouched > cap) vouched = cap;
                    raise = vouched > level;
                    if (raise) level = vouched;
                }
                if (!raise && implied >= ref) continue;
                if (!raise) {
                    /* Lowered by the room the pool believed in beyond the provider's at
                     * the grant, and never below the header taken at face value now (a
                     * clamp of the margin's may already have taken some of its growth). */
                    level -= ref - implied + reserve_growth(p, l, (sl_bucket_t)h.bucket);
                    if (level < implied) level = implied;
                    if (level >= p->level[h.bucket]) continue;
                }
                p->level[h.bucket] = level;
                n_changed++;
                sl_event_t ev;
                sl__event_init(&ev, SL_EV_RESYNC, now, p);
                ev.bucket = (sl_bucket_t)h.bucket;
                ev.value = level;
                sl__emit(e, &ev);
            }
        }
    }
    if (adopted) sl__pool_reject_unfit(e, p, now);
    if (changed) *changed = n_changed;
    return SL_OK;
}

int sl__resync_pool(sl_engine_t *e, sl__pool_t *p, uint64_t lease_id, double sent_after_s,
                    const char *const *names, const char *const *values, size_t count,
                    double now_s, int *changed)
{
    if (count && (!names || !values)) return sl__fail(e, SL_EINVAL, "headers missing");
    for (size_t i = 0; i < count; i++)
        if (!names[i] || !values[i]) return sl__fail(e, SL_EINVAL, "header %zu missing", i);
    if (!(now_s >= e->now))
        return sl__fail(e, SL_ETIME, "now %.6f is before the engine's time %.6f", now_s, e->now);
    int rc = sl__resync(e, p, names, values, count, lease_id, sent_after_s, false, now_s, false,
                        NULL);
    if (rc) return rc;
    sl_engine_advance(e, now_s);
    sl__resync(e, p, names, values, count, lease_id, sent_after_s, false, now_s, true, changed);
    sl__pool_drain(e, p, now_s);
    return SL_OK;
}

int sl_engine_resync(sl_engine_t *e, const char *pool, const char *const *names,
                     const char *const *values, size_t count, double now_s, int *changed)
{
    sl__pool_t *p = pool ? sl__pool_find(e, pool) : NULL;
    if (!p) return sl__fail(e, SL_ENOTFOUND, "pool \"%.140s\" not found", pool ? pool : "(null)");
    return sl__resync_pool(e, p, 0, -1, names, values, count, now_s, changed);
}
