/* report_bounds.c - what one settle report (or the proxy's provider headers) may do to a pool, checked before any backend sees it.
 *
 * An agent's settle is a report, and a report can lie: counts of 2^53 tokens, a
 * provider limit of 10^12 or of 1, a retry-after of a day. The engine (and the Redis
 * library that mirrors it) trusts what it is given, so the bounds live here, where
 * every backend's reports pass, and are written against the configuration:
 *   - counts above the pool's settle ceiling are refused (400, naming field and ceiling);
 *   - rate-limit headers resync a pool only from callers allowed to (admin, tokens with
 *     `resync: true`, every caller with auth off); another caller's are left out and its
 *     settle is applied without them (the answer counts them in `headers_ignored`): the
 *     headers are optional, the usage is not, and refusing the whole settle would leave
 *     the lease's reservation held until the reaper took it without refund;
 *   - a reported limit follows the one rule the proxy's own headers follow too
 *     (sl__bound_limit_headers): the configured limit is a ceiling unless the pool
 *     says `limits_from: provider`; a report lowers it at most to configured /
 *     max_resync_factor (and with `limits_from: provider` raises it at most to
 *     configured x max_resync_factor); a bucket configured as unlimited takes no limit
 *     from a report; a lease whose pool this replica does not know has its limit
 *     headers dropped (they cannot be bounded), its other headers kept (they only
 *     lower levels);
 *   - a reported retry_after is capped at max_retry_after_s, and holds the whole pool
 *     at most max_report_pool_block_s (60 s, what Claude Code itself waits out): a
 *     report is one agent's word, so beyond that it holds only that agent's own
 *     requests. The 60 s are per token and pool per max_retry_after_s window, not per
 *     report: one token's reports (several leases, fresh agent names) add at most 60 s
 *     of hold to a pool in a window opened by the first of them; past that, each holds
 *     only its own agent (state per replica, one entry per token and pool). Only the
 *     proxy's own upstream answers (whose retry-after does not pass here; their limit
 *     headers do) hold the pool for as long as the provider says.
 */
#include "server.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The configured limit a `*-limit` header would replace, or NULL for other headers
 * (anthropic-ratelimit-tokens-limit describes whichever limit binds and is never
 * adopted). `what` names the configuration key for messages. The header's bucket comes
 * from the engine's one table of rate-limit headers (sl_header_classify). */
static const int64_t *limit_of_header(const sl_pool_config_t *pc, const char *name,
                                      const char **what)
{
    static const struct {
        const char *key;
        size_t offset;
    } by_bucket[SL_BUCKET_COUNT] = {
        [SL_BUCKET_INPUT] = {"input_tpm", offsetof(sl_pool_config_t, input_tpm)},
        [SL_BUCKET_OUTPUT] = {"output_tpm", offsetof(sl_pool_config_t, output_tpm)},
        [SL_BUCKET_REQUESTS] = {"rpm", offsetof(sl_pool_config_t, rpm)},
        [SL_BUCKET_TOKENS] = {"tokens_tpm", offsetof(sl_pool_config_t, tokens_tpm)},
    };
    sl_header_kind_t h = sl_header_classify(name);
    if (!h.known || h.field != SL_HEADER_LIMIT || h.bucket < 0) return NULL;
    *what = by_bucket[h.bucket].key;
    return (const int64_t *)(const void *)((const char *)pc + by_bucket[h.bucket].offset);
}

/* Whether `name` is a `*-limit` header that resyncs a bucket (its row in the table). */
static bool is_bucket_limit(const char *name)
{
    sl_header_kind_t h = sl_header_classify(name);
    return h.known && h.field == SL_HEADER_LIMIT && h.bucket >= 0;
}

/* Clamps are logged at most once per 10 s: reports come at the agents' rate, and a
 * flood of them must not become a flood of log lines. */
static bool warn_now(const sl_server_t *srv)
{
    static double last_s = -1e300;
    double now = sl_backend_now(srv->backend);
    if (now - last_s < 10) return false;
    last_s = now;
    return true;
}

/* The one rule for a reported limit `v` of a bucket configured at `configured` (0:
 * unlimited): the value to adopt, or -1 to drop the header. The configured limit is a
 * ceiling unless the pool says `limits_from: provider`; below it the provider's own
 * answers lower freely, an agent's report (which can lie) down to configured / f; with
 * `limits_from: provider` the provider's answers raise freely, a report up to
 * configured x f. An unlimited bucket has no ceiling to keep: it takes the provider's
 * limit and no report's. */
static int64_t bound_limit(const sl_pool_bounds_t *b, int64_t configured, int64_t v,
                           bool from_provider)
{
    if (configured == 0) return from_provider ? v : -1;
    double f = b->max_resync_factor;
    int64_t lo = from_provider ? 1 : (int64_t)ceil((double)configured / f);
    double hi_d = !b->limits_from_provider ? (double)configured
                  : from_provider          ? (double)SL_TOKENS_MAX
                                           : floor((double)configured * f);
    int64_t hi = hi_d >= (double)SL_TOKENS_MAX ? SL_TOKENS_MAX : (int64_t)hi_d;
    if (lo < 1) lo = 1;
    return v < lo ? lo : v > hi ? hi : v;
}

size_t sl__bound_limit_headers(const sl_server_t *srv, const char *pool, bool from_provider,
                               const char **names, const char **values, size_t count,
                               char (*scratch)[24])
{
    const sl_config_t *c = &srv->config;
    const sl_pool_bounds_t *b = pool ? sl_config_pool_bounds(c, pool) : NULL;
    const sl_pool_config_t *pc = b ? sl_config_pool(c, pool) : NULL;
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        const char *what = NULL;
        const int64_t *configured = pc ? limit_of_header(pc, names[i], &what) : NULL;
        bool is_limit = pc ? configured != NULL : is_bucket_limit(names[i]);
        int64_t v;
        if (is_limit && !configured) continue; /* a pool not known here: cannot be bounded */
        if (is_limit && sl_header_parse_count(values[i], &v) && v != 0) {
            int64_t bounded = bound_limit(b, *configured, v, from_provider);
            if (bounded < 0) continue;
            if (bounded != v) {
                snprintf(scratch[kept], sizeof(scratch[kept]), "%" PRId64, bounded);
                if (warn_now(srv))
                    sl__log(SL_LOG_WARN,
                            "%s: %s %.32s for pool '%s' bounded to %s (configured "
                            "%s %" PRId64 ", limits_from %s, max_resync_factor %g; further "
                            "bounds for 10 s are not logged)",
                            from_provider ? "proxy" : "settle", names[i], values[i], pool,
                            scratch[kept], what, *configured,
                            b->limits_from_provider ? "provider" : "config",
                            b->max_resync_factor);
                names[kept] = names[i];
                values[kept] = scratch[kept];
                kept++;
                continue;
            }
        }
        names[kept] = names[i];
        values[kept] = values[i];
        kept++;
    }
    return kept;
}

/* Entries of report_holds at most: one per token and pool, so far more than any
 * configuration has; past it a report holds only its agent. */
#define MAX_REPORT_HOLDS 65536

/* One token's holds of one pool on its word, in its current window. */
typedef struct report_hold {
    double window_start; /* 0: none yet */
    double used_s;       /* hold time its reports added in the window */
    double held_until;   /* the end of the latest hold they set */
} report_hold_t;

/* How long, from now, a report asking `want_s` may hold pool `pool`: the reporting
 * token's reports may add at most max_pool_s of hold time per window of window_s
 * (the window opens at its first holding report). Records what it grants. */
static double pool_hold_s(const sl_call_t *call, const char *pool, double want_s,
                          double max_pool_s, double window_s)
{
    char key[320];
    snprintf(key, sizeof key, "%s\x1f%016" PRIx64, pool ? pool : "",
             call->admin ? 0 : sl__call_principal(call));
    double now = sl_backend_now(call->srv->backend);
    report_hold_t *h = sl__namemap_obtain(&call->srv->report_holds, key, sizeof *h,
                                          MAX_REPORT_HOLDS, NULL);
    if (!h) return 0;
    if (h->window_start == 0 || now - h->window_start >= window_s) {
        h->window_start = now;
        h->used_s = 0;
    }
    double from = h->held_until > now ? h->held_until : now;
    double added_s = now + want_s - from; /* what this report would add to the hold */
    if (added_s <= 0) return want_s;      /* within a hold already granted */
    double left_s = max_pool_s - h->used_s;
    if (left_s <= 0) return 0;
    if (added_s > left_s) added_s = left_s;
    h->used_s += added_s;
    h->held_until = from + added_s;
    return h->held_until - now;
}

static int check_counts(const sl_call_t *call, const char *pool, const sl_settle_t *s, char *msg,
                        size_t n)
{
    int64_t ceiling = sl_config_settle_ceiling(&call->srv->config, pool);
    const struct {
        const char *field;
        int64_t value;
    } counts[] = {
        {"input_tokens", s->input_tokens},
        {"output_tokens", s->output_tokens},
        {"cache_creation_input_tokens", s->cache_creation_input_tokens},
        {"cache_read_input_tokens", s->cache_read_input_tokens},
        {"cache_creation_1h_input_tokens", s->cache_creation_1h_input_tokens},
    };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        if (counts[i].value <= ceiling) continue;
        if (pool)
            snprintf(msg, n,
                     "%s: %" PRId64 " is above pool '%s''s settle ceiling "
                     "max_settle_tokens %" PRId64,
                     counts[i].field, counts[i].value, pool, ceiling);
        else
            snprintf(msg, n,
                     "%s: %" PRId64 " is above the settle ceiling max_settle_tokens %" PRId64,
                     counts[i].field, counts[i].value, ceiling);
        return -1;
    }
    return 0;
}

int sl__bound_settle(const sl_call_t *call, const char *pool, sl_settle_t *s, const char **names,
                     const char **values, char (*scratch)[24], size_t *ignored, int *status,
                     char *msg, size_t n)
{
    *ignored = 0;
    const sl_config_t *c = &call->srv->config;
    *status = 400;
    if (check_counts(call, pool, s, msg, n) < 0) return -1;

    const sl_pool_bounds_t *b = pool ? sl_config_pool_bounds(c, pool) : NULL;
    double max_retry_after_s = b ? b->max_retry_after_s : 300;
    double max_pool_block_s = b ? b->max_report_pool_block_s : 60;
    if (!b)
        for (size_t i = 0; c->bounds && i < c->settings.n_pools; i++) {
            if (c->bounds[i].max_retry_after_s > max_retry_after_s)
                max_retry_after_s = c->bounds[i].max_retry_after_s;
            if (c->bounds[i].max_report_pool_block_s > max_pool_block_s)
                max_pool_block_s = c->bounds[i].max_report_pool_block_s;
        }
    if (s->retry_after_s > max_retry_after_s) s->retry_after_s = max_retry_after_s;
    if (s->got_429 && s->retry_after_s > 0) {
        double pool_s =
            pool_hold_s(call, pool, s->retry_after_s, max_pool_block_s, max_retry_after_s);
        if (s->retry_after_s > pool_s) {
            s->agent_retry_after_s = s->retry_after_s;
            s->retry_after_s = pool_s;
        }
    }

    bool may_resync = call->admin || (call->token && call->token->resync);
    size_t allowed = 0;
    for (size_t i = 0; i < s->header_count; i++) {
        if (sl_header_is_ratelimit(names[i]) && !may_resync) {
            (*ignored)++;
            continue;
        }
        names[allowed] = names[i];
        values[allowed] = values[i];
        allowed++;
    }
    s->header_count = sl__bound_limit_headers(call->srv, pool, false, names, values, allowed,
                                              scratch);
    return 0;
}
