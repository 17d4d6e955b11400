/* provider.c - the provider model: buckets, admission, prompt cache, usage, latency.
 *
 * Why it is shaped this way: the simulator and the emulator must meet the same
 * provider, and the simulator runs hours of virtual time for hundreds of agents in
 * seconds, so one call is O(1) (a refill of four buckets and one cache lookup) and
 * nothing here allocates per call except when the cache table grows. Outside
 * traffic is played lazily: each refill first replays the outside arrivals that
 * fell before `now`, in order, each with its own refill, so a caller that polls
 * rarely sees the same provider as one that polls often.
 */
#include "provider.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provider_internal.h"

void sl_provider_config_init(sl_provider_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->cache_ttl_s = 300;
    cfg->cache_ttl_1h_s = 3600;
    cfg->cache_min_tokens = 1024;
    cfg->ttft_s = 0.6;
    cfg->output_tokens_per_s = 60;
    cfg->latency_spread = 0.2;
    cfg->default_output_tokens = 1000;
    cfg->drift = 1.0;
    cfg->seed = 1;
    cfg->accel_factor = 2.0;
    cfg->accel_floor_tpm = 10000;
}

static bool bad_time(double v)
{
    return !isfinite(v) || v < 0;
}

static bool validate(const sl_provider_config_t *c, char *err, size_t errlen)
{
    const char *field = NULL;
    double value = 0;
#define CHECK(cond, name, v)                                                                       \
    do {                                                                                           \
        if (!field && (cond)) {                                                                    \
            field = name;                                                                          \
            value = (double)(v);                                                                   \
        }                                                                                          \
    } while (0)
    CHECK(c->input_tpm < 0, "input_tpm", c->input_tpm);
    CHECK(c->output_tpm < 0, "output_tpm", c->output_tpm);
    CHECK(c->rpm < 0, "rpm", c->rpm);
    CHECK(c->tokens_tpm < 0, "tokens_tpm", c->tokens_tpm);
    CHECK(bad_time(c->cache_ttl_s), "cache_ttl_s", c->cache_ttl_s);
    CHECK(bad_time(c->cache_ttl_1h_s), "cache_ttl_1h_s", c->cache_ttl_1h_s);
    CHECK(c->long_context_threshold_tokens < 0, "long_context_threshold_tokens",
          c->long_context_threshold_tokens);
    CHECK(c->long_context_input_tpm < 0, "long_context_input_tpm", c->long_context_input_tpm);
    CHECK(c->long_context_output_tpm < 0, "long_context_output_tpm", c->long_context_output_tpm);
    CHECK(c->cache_min_tokens < 0, "cache_min_tokens", c->cache_min_tokens);
    CHECK(bad_time(c->ttft_s), "ttft_s", c->ttft_s);
    CHECK(bad_time(c->prefill_tokens_per_s), "prefill_tokens_per_s", c->prefill_tokens_per_s);
    CHECK(!isfinite(c->output_tokens_per_s) || c->output_tokens_per_s <= 0, "output_tokens_per_s",
          c->output_tokens_per_s);
    CHECK(!isfinite(c->latency_spread) || c->latency_spread < 0 || c->latency_spread >= 1,
          "latency_spread", c->latency_spread);
    CHECK(c->default_output_tokens < 1, "default_output_tokens", c->default_output_tokens);
    CHECK(!isfinite(c->drift) || c->drift <= 0 || c->drift > 100, "drift", c->drift);
    CHECK(!isfinite(c->outside_share) || c->outside_share < 0 || c->outside_share >= 1,
          "outside_share", c->outside_share);
    CHECK(bad_time(c->outside_rpm), "outside_rpm", c->outside_rpm);
    CHECK(c->spend_cap_tokens < 0, "spend_cap_tokens", c->spend_cap_tokens);
    CHECK(!isfinite(c->overload_rate) || c->overload_rate < 0 || c->overload_rate > 1,
          "overload_rate", c->overload_rate);
    CHECK(!isfinite(c->stream_error_rate) || c->stream_error_rate < 0 || c->stream_error_rate > 1,
          "stream_error_rate", c->stream_error_rate);
    CHECK(c->count_tokens_rpm < 0, "count_tokens_rpm", c->count_tokens_rpm);
    CHECK(bad_time(c->accel_idle_s), "accel_idle_s", c->accel_idle_s);
    CHECK(c->accel_idle_s > 0 && (!isfinite(c->accel_factor) || c->accel_factor <= 1 ||
                                  c->accel_factor > 1000),
          "accel_factor", c->accel_factor);
    CHECK(c->accel_idle_s > 0 && c->accel_floor_tpm < 1, "accel_floor_tpm", c->accel_floor_tpm);
#undef CHECK
    if (!field) return true;
    if (err && errlen) snprintf(err, errlen, "provider config: %s = %g is out of range", field, value);
    return false;
}

/* ---- buckets --------------------------------------------------------------- */

static void refill_to(sl_provider_t *p, double t)
{
    if (t <= p->now_s) return;
    double dt = t - p->now_s;
    for (int b = 0; b < SL__PB_COUNT; b++) {
        if (p->limit[b] <= 0) continue;
        double cap = (double)p->limit[b];
        p->level[b] += dt * cap / 60.0;
        if (p->level[b] > cap) p->level[b] = cap;
    }
    if (p->cfg.count_tokens_rpm > 0) {
        double cap = (double)p->cfg.count_tokens_rpm;
        p->count_tokens_level += dt * cap / 60.0;
        if (p->count_tokens_level > cap) p->count_tokens_level = cap;
    }
    p->now_s = t;
}

static double outside_rate_per_min(const sl_provider_config_t *c)
{
    if (c->outside_rpm > 0) return c->outside_rpm;
    if (c->rpm > 0) {
        double r = c->outside_share * (double)c->rpm;
        return r > 0.5 ? r : 0.5;
    }
    return 6.0;
}

static double draw_exp(sl_rng_t *r, double mean)
{
    return -log(1.0 - sl_rng_uniform(r)) * mean;
}

/* One outside request at p->now_s: it takes its share if everything fits, and says
 * whether it did (a refused one is a 429 to the outside client). */
static bool outside_arrival(sl_provider_t *p)
{
    double need[SL__PB_COUNT] = {0};
    double rate = outside_rate_per_min(&p->cfg);
    double share = p->cfg.outside_share;
    need[SL__PB_REQUESTS] = 1;
    need[SL__PB_INPUT] = share * (double)p->cfg.input_tpm / rate;
    need[SL__PB_OUTPUT] = share * (double)p->cfg.output_tpm / rate;
    need[SL__PB_TOKENS] = share * (double)p->cfg.tokens_tpm / rate;
    for (int b = 0; b < SL__PB_COUNT; b++) {
        if (p->limit[b] > 0 && p->level[b] < need[b]) {
            p->stats.outside_refused++;
            return false;
        }
    }
    for (int b = 0; b < SL__PB_COUNT; b++)
        if (p->limit[b] > 0) p->level[b] -= need[b];
    p->stats.outside_requests++;
    p->stats.outside_input_tokens += (int64_t)llround(need[SL__PB_INPUT]);
    p->stats.outside_output_tokens += (int64_t)llround(need[SL__PB_OUTPUT]);
    return true;
}

void sl__provider_advance(sl_provider_t *p, double now_s)
{
    if (!(now_s > p->now_s)) return;
    if (p->cfg.outside_share > 0) {
        double mean = 60.0 / outside_rate_per_min(&p->cfg);
        while (p->outside_next_s <= now_s) {
            refill_to(p, p->outside_next_s);
            /* The outside client is a script that retries a 429 a second later, so under
             * contention it competes for the key instead of giving its share up. */
            if (outside_arrival(p))
                p->outside_next_s += draw_exp(&p->outside_rng, mean);
            else
                p->outside_next_s += 1.0;
        }
    }
    refill_to(p, now_s);
}

sl_provider_t *sl_provider_new(const sl_provider_config_t *cfg, double now_s, char *err,
                               size_t errlen)
{
    if (!validate(cfg, err, errlen)) return NULL;
    if (!isfinite(now_s)) {
        if (err && errlen) snprintf(err, errlen, "provider: now_s is not finite");
        return NULL;
    }
    sl_provider_t *p = calloc(1, sizeof *p);
    if (!p) goto oom;
    p->cfg = *cfg;
    p->now_s = now_s;
    p->limit[SL__PB_REQUESTS] = cfg->rpm;
    p->limit[SL__PB_INPUT] = cfg->input_tpm;
    p->limit[SL__PB_OUTPUT] = cfg->output_tpm;
    p->limit[SL__PB_TOKENS] = cfg->tokens_tpm;
    p->limit[SL__PB_LC_INPUT] = cfg->long_context_input_tpm;
    p->limit[SL__PB_LC_OUTPUT] = cfg->long_context_output_tpm;
    for (int b = 0; b < SL__PB_COUNT; b++) p->level[b] = (double)p->limit[b];
    p->count_tokens_level = (double)cfg->count_tokens_rpm;
    sl_rng_seed(&p->rng, cfg->seed);
    /* A separate stream for outside traffic, so the caller's draws do not shift it. */
    sl_rng_seed(&p->outside_rng, cfg->seed ^ 0x6f75747369646521ULL);
    /* Faults have their own stream too: turning them on shifts no latency or length. */
    sl_rng_seed(&p->fault_rng, cfg->seed ^ 0x6661756c74732121ULL);
    if (cfg->outside_share > 0)
        p->outside_next_s = now_s + draw_exp(&p->outside_rng, 60.0 / outside_rate_per_min(cfg));
    if (sl__cache_init(&p->cache) != 0) goto oom;
    sl__accel_init(&p->accel);
    return p;
oom:
    free(p);
    if (err && errlen) snprintf(err, errlen, "provider: out of memory");
    return NULL;
}

void sl_provider_free(sl_provider_t *p)
{
    if (!p) return;
    sl__cache_free(&p->cache);
    free(p);
}

const sl_provider_config_t *sl_provider_config(const sl_provider_t *p)
{
    return &p->cfg;
}

void sl_provider_set_spend_capped(sl_provider_t *p, bool capped)
{
    p->spend_capped = capped;
}

int64_t sl_provider_count(const sl_provider_t *p, int64_t tokenizer_tokens)
{
    if (tokenizer_tokens <= 0) return 0;
    if (p->cfg.drift == 1.0) return tokenizer_tokens;
    return (int64_t)llround((double)tokenizer_tokens * p->cfg.drift);
}

/* ---- admission ------------------------------------------------------------- */

static double spread(sl_provider_t *p)
{
    return 1.0 + p->cfg.latency_spread * (2.0 * sl_rng_uniform(&p->rng) - 1.0);
}

static int64_t billed_total(const sl_provider_t *p)
{
    return p->stats.input_tokens + p->stats.cache_creation_input_tokens +
           p->stats.cache_read_input_tokens + p->stats.output_tokens;
}

static const sl_provider_limit_t limit_of_bucket[SL__PB_COUNT] = {
    [SL__PB_REQUESTS] = SL_PROVIDER_LIMIT_REQUESTS,
    [SL__PB_INPUT] = SL_PROVIDER_LIMIT_INPUT,
    [SL__PB_OUTPUT] = SL_PROVIDER_LIMIT_OUTPUT,
    [SL__PB_TOKENS] = SL_PROVIDER_LIMIT_TOKENS,
    [SL__PB_LC_INPUT] = SL_PROVIDER_LIMIT_LONG_CONTEXT_INPUT,
    [SL__PB_LC_OUTPUT] = SL_PROVIDER_LIMIT_LONG_CONTEXT_OUTPUT,
};

/* Seconds until every limited bucket holds `need` (a need above the limit waits
 * for a full bucket: the provider refuses it anyway, but says when to look again). */
static double wait_for(const sl_provider_t *p, const double need[SL__PB_COUNT])
{
    double wait = 0;
    for (int b = 0; b < SL__PB_COUNT; b++) {
        if (p->limit[b] <= 0) continue;
        double lim = (double)p->limit[b];
        double want = need[b] < lim ? need[b] : lim;
        if (p->level[b] >= want) continue;
        double w = (want - p->level[b]) / (lim / 60.0);
        if (w > wait) wait = w;
    }
    return wait;
}

static void refuse(sl_provider_t *p, sl_provider_result_t *out, sl_provider_refusal_t why)
{
    out->refusal = why;
    p->stats.requests++;
    if (why == SL_PROVIDER_INVALID) {
        out->http_status = 400;
        p->stats.invalid++;
        return;
    }
    if (why == SL_PROVIDER_OVERLOADED) {
        out->http_status = 529;
        p->stats.overloaded++;
        return;
    }
    out->http_status = 429;
    p->stats.http_429++;
    if (why == SL_PROVIDER_RATE_LIMITED) p->stats.http_429_rate++;
    else p->stats.http_429_spend_cap++;
}

/* Earlier breakpoints must be few, positive, increasing and below the last one. */
static bool earlier_valid(const sl_provider_call_t *call)
{
    if (call->earlier_count == 0) return true;
    if (call->earlier_count > SL_PROVIDER_MAX_BREAKPOINTS - 1) return false;
    int64_t prev = 0;
    for (size_t i = 0; i < call->earlier_count; i++) {
        int64_t t = call->earlier[i].prefix_tokens;
        if (t <= prev || t >= call->cached_prefix_tokens) return false;
        prev = t;
        /* Longer lifetimes come first: a 1-hour breakpoint after a 5-minute one is refused. */
        bool next_1h = i + 1 < call->earlier_count ? call->earlier[i + 1].ttl_1h : call->ttl_1h;
        if (next_1h && !call->earlier[i].ttl_1h) return false;
    }
    return true;
}

/* The lifetime of a breakpoint's entry. */
static double ttl_of(const sl_provider_t *p, bool ttl_1h)
{
    return ttl_1h ? p->cfg.cache_ttl_1h_s : p->cfg.cache_ttl_s;
}

/* Writes `key` (`tokens` long) to live until now + ttl, or refreshes it: a refresh
 * never shortens an entry (a 5-minute read of a 1-hour entry keeps its hour). */
static int cache_write(sl_provider_t *p, uint64_t key, int64_t tokens, double ttl, double now)
{
    sl__cache_entry_t *e = sl__cache_find(&p->cache, key, tokens, now);
    if (e) {
        if (now + ttl > e->expires_at) e->expires_at = now + ttl;
        return 0;
    }
    return sl__cache_put(&p->cache, key, tokens, now + ttl, now);
}

/* Of `creation` tokens written from `read` up to `prefix`: those up to the last 1-hour
 * breakpoint beyond the hit are 1-hour writes (Anthropic's "mixing TTLs" billing). */
static int64_t creation_1h(const sl_provider_t *p, const sl_provider_call_t *call, int64_t read,
                           int64_t prefix)
{
    if (call->ttl_1h) return prefix - read;
    int64_t last_1h = read;
    for (size_t i = 0; i < call->earlier_count; i++) {
        int64_t t = sl_provider_count(p, call->earlier[i].prefix_tokens);
        if (call->earlier[i].ttl_1h && t > last_1h && t < prefix) last_1h = t;
    }
    return last_1h - read;
}

/* The prefix tokens (as the provider counts them) of the longest earlier breakpoint
 * holding a live entry at `now`, or 0. Shorter than `prefix` by construction. */
static int64_t earlier_hit(sl_provider_t *p, const sl_provider_call_t *call, int64_t prefix,
                           double now)
{
    for (size_t i = call->earlier_count; i-- > 0;) {
        int64_t t = sl_provider_count(p, call->earlier[i].prefix_tokens);
        if (t >= prefix || t < p->cfg.cache_min_tokens) continue;
        if (sl__cache_find(&p->cache, call->earlier[i].cache_key, t, now)) return t;
    }
    return 0;
}

/* Writes (or refreshes) an entry at every earlier breakpoint long enough to cache:
 * the call processed their prefixes, which are now cached for their lifetime. */
static void write_earlier(sl_provider_t *p, const sl_provider_call_t *call, int64_t prefix,
                          double now)
{
    for (size_t i = 0; i < call->earlier_count; i++) {
        int64_t t = sl_provider_count(p, call->earlier[i].prefix_tokens);
        if (t >= prefix || t < p->cfg.cache_min_tokens) continue;
        if (cache_write(p, call->earlier[i].cache_key, t, ttl_of(p, call->earlier[i].ttl_1h),
                        now) != 0)
            return; /* no room: a later call misses there */
    }
}

void sl_provider_begin(sl_provider_t *p, const sl_provider_call_t *call, double now_s,
                       sl_provider_result_t *out)
{
    memset(out, 0, sizeof *out);
    out->retry_after_s = -1;
    sl__provider_advance(p, now_s);
    double now = p->now_s;

    if (call->input_tokens < 0 || call->cached_prefix_tokens < 0 || call->max_tokens < 1 ||
        call->input_tokens > SL_PROVIDER_TOKENS_MAX ||
        call->cached_prefix_tokens > SL_PROVIDER_TOKENS_MAX ||
        call->max_tokens > SL_PROVIDER_TOKENS_MAX || call->choices < 0 ||
        call->choices > SL_PROVIDER_MAX_CHOICES || !earlier_valid(call)) {
        refuse(p, out, SL_PROVIDER_INVALID);
        return;
    }
    /* Overload is the provider's capacity, not this key's: decided before any limit,
     * and nothing is counted (Anthropic's 529 comes before rate limiting and billing). */
    if (p->cfg.overload_rate > 0 && sl_rng_uniform(&p->fault_rng) < p->cfg.overload_rate) {
        refuse(p, out, SL_PROVIDER_OVERLOADED);
        return;
    }
    if (p->spend_capped ||
        (p->cfg.spend_cap_tokens > 0 && billed_total(p) >= p->cfg.spend_cap_tokens)) {
        refuse(p, out, SL_PROVIDER_SPEND_CAP);
        return;
    }

    /* What the provider bills, before knowing whether it admits the call. */
    int64_t in = sl_provider_count(p, call->input_tokens);
    int64_t prefix = sl_provider_count(p, call->cached_prefix_tokens);
    int64_t creation = 0, read = 0;
    sl__cache_entry_t *hit = NULL;
    if (prefix > 0 && prefix < p->cfg.cache_min_tokens) {
        in += prefix; /* too short to cache: plain input */
    } else if (prefix > 0) {
        hit = sl__cache_find(&p->cache, call->cache_key, prefix, now);
        if (hit) read = prefix;
        else read = earlier_hit(p, call, prefix, now);
        creation = prefix - read; /* from the longest hit up to the last breakpoint */
    }
    int64_t uncached = in + creation + (p->cfg.cache_reads_count ? read : 0);
    /* Long context: the whole prompt above the threshold (Anthropic: > 200k tokens). */
    bool lc = p->cfg.long_context_threshold_tokens > 0 &&
              in + prefix > p->cfg.long_context_threshold_tokens;

    int64_t choices = call->choices > 1 ? call->choices : 1;
    int64_t reserved_out = call->max_tokens * choices; /* at most 2^53 x 128: no overflow */
    double need[SL__PB_COUNT] = {0};
    need[SL__PB_REQUESTS] = 1;
    need[lc ? SL__PB_LC_INPUT : SL__PB_INPUT] = (double)uncached;
    need[lc ? SL__PB_LC_OUTPUT : SL__PB_OUTPUT] = (double)reserved_out;
    if (!lc) need[SL__PB_TOKENS] = (double)(uncached + reserved_out);
    double accel_wait_s = 0;
    if (sl__accel_refuses(p, uncached, now, &accel_wait_s)) {
        refuse(p, out, SL_PROVIDER_RATE_LIMITED);
        out->limit = SL_PROVIDER_LIMIT_ACCELERATION;
        out->retry_after_s = accel_wait_s;
        p->stats.http_429_acceleration++;
        return;
    }
    for (int b = 0; b < SL__PB_COUNT; b++) {
        bool lc_bucket = b == SL__PB_LC_INPUT || b == SL__PB_LC_OUTPUT;
        bool applies = b == SL__PB_REQUESTS || lc == lc_bucket;
        if (applies && p->limit[b] > 0 &&
            (p->level[b] < need[b] || need[b] > (double)p->limit[b])) {
            refuse(p, out, SL_PROVIDER_RATE_LIMITED);
            out->limit = limit_of_bucket[b];
            double w = ceil(wait_for(p, need) - 1e-9);
            out->retry_after_s = w < 1 ? 1 : w;
            return;
        }
    }

    for (int b = 0; b < SL__PB_COUNT; b++)
        if (p->limit[b] > 0) p->level[b] -= need[b];
    sl__accel_admit(p, uncached, now);
    if ((hit || creation > 0) &&
        cache_write(p, call->cache_key, prefix, ttl_of(p, call->ttl_1h), now) != 0) {
        /* No room to remember the prefix: the next call simply misses again. */
    }
    int64_t creation_1h_tokens = creation > 0 ? creation_1h(p, call, read, prefix) : 0;
    if (prefix >= p->cfg.cache_min_tokens) write_earlier(p, call, prefix, now);

    int64_t output = call->output_tokens;
    if (output < 0) output = (int64_t)llround((double)p->cfg.default_output_tokens * spread(p));
    if (output < 1) output = 1;
    if (output > call->max_tokens) output = call->max_tokens;
    /* A stream that breaks off does so after at least one token when it has two or
     * more (mid-stream), and is billed the output it sent. */
    bool broken = call->stream && p->cfg.stream_error_rate > 0 &&
                  sl_rng_uniform(&p->fault_rng) < p->cfg.stream_error_rate;
    if (broken) {
        int64_t cut = output >= 2 ? 1 + (int64_t)floor(sl_rng_uniform(&p->fault_rng) *
                                                       (double)(output - 1))
                                  : 0;
        output = cut;
        p->stats.stream_errors++;
    }

    out->refusal = SL_PROVIDER_OK;
    out->http_status = 200;
    out->input_tokens = in;
    out->cache_creation_input_tokens = creation;
    out->cache_read_input_tokens = read;
    out->cache_creation_1h_input_tokens = creation_1h_tokens;
    out->long_context = lc;
    out->output_tokens = output;
    out->choices = choices;
    out->reserved_output_tokens = reserved_out;
    out->stream_error = broken;
    double prefill = p->cfg.prefill_tokens_per_s > 0
                         ? (double)(in + creation) / p->cfg.prefill_tokens_per_s
                         : 0;
    out->ttft_s = (p->cfg.ttft_s + prefill) * spread(p);
    out->duration_s = out->ttft_s + (double)output / p->cfg.output_tokens_per_s * spread(p);

    p->stats.requests++;
    p->stats.admitted++;
    p->stats.input_tokens += in;
    p->stats.cache_creation_input_tokens += creation;
    p->stats.cache_read_input_tokens += read;
    p->stats.cache_creation_1h_input_tokens += creation_1h_tokens;
    if (lc) p->stats.long_context++;
    p->stats.output_tokens += output * choices;
}

void sl_provider_count_tokens(sl_provider_t *p, double now_s, sl_provider_result_t *out)
{
    memset(out, 0, sizeof *out);
    out->retry_after_s = -1;
    sl__provider_advance(p, now_s);
    p->stats.count_tokens++;
    if (p->cfg.count_tokens_rpm > 0) {
        if (p->count_tokens_level < 1) {
            double rate_per_s = (double)p->cfg.count_tokens_rpm / 60.0;
            double w = ceil((1 - p->count_tokens_level) / rate_per_s - 1e-9);
            out->refusal = SL_PROVIDER_RATE_LIMITED;
            out->http_status = 429;
            out->limit = SL_PROVIDER_LIMIT_COUNT_TOKENS;
            out->retry_after_s = w < 1 ? 1 : w;
            p->stats.count_tokens_429++;
            return;
        }
        p->count_tokens_level -= 1;
    }
    out->refusal = SL_PROVIDER_OK;
    out->http_status = 200;
}

int sl_provider_http_status(sl_provider_style_t style, const sl_provider_result_t *r)
{
    if (r->refusal == SL_PROVIDER_OVERLOADED && style == SL_PROVIDER_OPENAI) return 503;
    return r->http_status;
}

void sl_provider_end(sl_provider_t *p, const sl_provider_result_t *r, double now_s)
{
    if (r->refusal != SL_PROVIDER_OK) return;
    sl__provider_advance(p, now_s);
    double back =
        (double)(r->reserved_output_tokens - r->output_tokens * (r->choices > 1 ? r->choices : 1));
    if (back <= 0) return;
    const int bs[2] = {r->long_context ? SL__PB_LC_OUTPUT : SL__PB_OUTPUT, SL__PB_TOKENS};
    for (int i = 0; i < (r->long_context ? 1 : 2); i++) {
        int b = bs[i];
        if (p->limit[b] <= 0) continue;
        p->level[b] += back;
        if (p->level[b] > (double)p->limit[b]) p->level[b] = (double)p->limit[b];
    }
}

int sl_provider_set_limits(sl_provider_t *p, int64_t input_tpm, int64_t output_tpm, int64_t rpm,
                           int64_t tokens_tpm, double now_s)
{
    if (input_tpm < 0 || output_tpm < 0 || rpm < 0 || tokens_tpm < 0) return -1;
    sl__provider_advance(p, now_s);
    const int64_t next[SL__PB_COUNT] = {rpm, input_tpm, output_tpm, tokens_tpm};
    for (int b = 0; b < SL__PB_COUNT; b++) {
        if (p->limit[b] <= 0) p->level[b] = (double)next[b];
        p->limit[b] = next[b];
        if (p->level[b] > (double)next[b]) p->level[b] = (double)next[b];
    }
    p->cfg.input_tpm = input_tpm;
    p->cfg.output_tpm = output_tpm;
    p->cfg.rpm = rpm;
    p->cfg.tokens_tpm = tokens_tpm;
    return 0;
}

bool sl_provider_cache_warm(const sl_provider_t *p, uint64_t cache_key, double now_s)
{
    return sl__cache_peek(&p->cache, cache_key, now_s) != NULL;
}

void sl_provider_levels(sl_provider_t *p, double now_s, sl_provider_levels_t *out)
{
    sl__provider_advance(p, now_s);
    out->requests = p->limit[SL__PB_REQUESTS] > 0 ? p->level[SL__PB_REQUESTS] : 0;
    out->input_tokens = p->limit[SL__PB_INPUT] > 0 ? p->level[SL__PB_INPUT] : 0;
    out->output_tokens = p->limit[SL__PB_OUTPUT] > 0 ? p->level[SL__PB_OUTPUT] : 0;
    out->tokens = p->limit[SL__PB_TOKENS] > 0 ? p->level[SL__PB_TOKENS] : 0;
}

void sl_provider_stats(const sl_provider_t *p, sl_provider_stats_t *out)
{
    *out = p->stats;
    out->cache_entries = (int64_t)p->cache.count;
}

/* ---- PRNG -------------------------------------------------------------------- */

void sl_rng_seed(sl_rng_t *r, uint64_t seed)
{
    r->state = seed;
}

/* splitmix64: a Weyl sequence through a 64-bit finaliser; every seed gives a full
 * period of 2^64 and well-mixed outputs, which is all a simulation needs. */
uint64_t sl_rng_next(sl_rng_t *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double sl_rng_uniform(sl_rng_t *r)
{
    return (double)(sl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}
