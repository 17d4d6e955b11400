/* watch_metrics.c - the throttle metrics: throttle rate, burst capacity use, time to reset,
 * adjustments, 429s against throttling.
 *
 * Counted per pool from engine events and per action limit from the checks' answers;
 * windows are fleet.window_s long (slidewin.c). Bucket levels are sampled once a second
 * (sl__watch_tick), each sample standing for the time since the one before it (at most
 * 5 s), which is what the band counters add up. Violations per agent are anomaly.c's
 * (sluice_agent_violations_total).
 */
#include "fleet.h"
#include "server.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

static const double retry_bounds_s[] = {0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};
#define N_RETRY          (sizeof(retry_bounds_s) / sizeof(retry_bounds_s[0]))
#define MAX_SAMPLE_GAP_S 5.0
#define WATCH_NAME_MAX   256 /* a limit's name may be 256 bytes (SL_LIMITS_MAX_NAME), a pool's 128 */

enum band { BAND_LOW, BAND_MID, BAND_HIGH, BAND_COUNT };
static const char *const band_names[BAND_COUNT] = {"below_10pct", "between", "above_90pct"};

_Static_assert(N_RETRY <= SL_HIST_MAX_BOUNDS, "bounds fit sl_hist_t");

typedef struct pool_watch {
    char name[WATCH_NAME_MAX + 1];
    sl_window_t requests, throttled, got_429;
    sl_hist_t retry_after;
    double margin; /* the latest margin seen; NAN before the first */
    uint64_t margin_up, margin_down;
    double band_s[SL_BUCKET_COUNT][BAND_COUNT];
} pool_watch_t;

typedef struct limit_watch {
    char name[WATCH_NAME_MAX + 1];
    sl_window_t checks, throttled;
    uint64_t delayed;
    sl_hist_t retry_after;
} limit_watch_t;

struct sl_watch {
    pool_watch_t *pools;
    size_t n_pools;
    limit_watch_t *limits;
    size_t n_limits;
    double sampled_at_s;
};

/* This file's part of the fleet's state (fleet.h, sl_fleet_house_t). */
SL_FLEET_PART(sl_watch_t, watch)

/* The entry named `name` in a growing array of `size`-byte entries starting with the name. */
static void *entry(void **arr, size_t *n, size_t size, const char *name)
{
    for (size_t i = 0; i < *n; i++) {
        char *e = (char *)*arr + i * size;
        if (!strcmp(e, name)) return e;
    }
    if (strlen(name) > WATCH_NAME_MAX) return NULL;
    char *grown = realloc(*arr, (*n + 1) * size);
    if (!grown) return NULL;
    *arr = grown;
    char *e = grown + (*n)++ * size;
    memset(e, 0, size);
    snprintf(e, WATCH_NAME_MAX + 1, "%s", name);
    return e;
}

static pool_watch_t *pool_of(sl_server_t *srv, const char *name)
{
    sl_watch_t *w = watch_of(srv);
    if (!w || !name) return NULL;
    size_t before = w->n_pools;
    pool_watch_t *p = entry((void **)&w->pools, &w->n_pools, sizeof(pool_watch_t), name);
    if (p && w->n_pools > before) p->margin = NAN;
    return p;
}

void sl__watch_on_event(sl_server_t *srv, const sl_event_t *ev)
{
    if (!ev->pool) return;
    double win = srv->config.fleet.window_s;
    bool request = (ev->kind == SL_EV_GRANTED && !ev->ticket) || ev->kind == SL_EV_QUEUED ||
                   ev->kind == SL_EV_REJECTED;
    if (!request && ev->kind != SL_EV_TICKET_REJECTED && ev->kind != SL_EV_MARGIN &&
        ev->kind != SL_EV_UPSTREAM_429)
        return;
    pool_watch_t *p = pool_of(srv, ev->pool);
    if (!p) return;
    if (request) sl__window_add(&p->requests, win, ev->now_s, 1);
    if (ev->kind == SL_EV_QUEUED || ev->kind == SL_EV_REJECTED)
        sl__window_add(&p->throttled, win, ev->now_s, 1);
    if (ev->kind == SL_EV_REJECTED || ev->kind == SL_EV_TICKET_REJECTED)
        sl__hist_observe(&p->retry_after, retry_bounds_s, N_RETRY,
                         ev->retry_at > ev->now_s ? ev->retry_at - ev->now_s : 0);
    if (ev->kind == SL_EV_UPSTREAM_429) sl__window_add(&p->got_429, win, ev->now_s, 1);
    if (ev->kind == SL_EV_MARGIN) {
        double before = p->margin;
        if (isnan(before)) {
            const sl_pool_config_t *c = sl_config_pool(&srv->config, ev->pool);
            before = c ? c->margin_start : ev->margin;
        }
        if (ev->margin > before) p->margin_up++;
        if (ev->margin < before) p->margin_down++;
        p->margin = ev->margin;
    }
}

void sl__watch_on_limit_check(sl_server_t *srv, const char *limit, bool allowed, bool delayed,
                              double retry_after_s)
{
    sl_watch_t *w = watch_of(srv);
    limit_watch_t *l =
        w && limit ? entry((void **)&w->limits, &w->n_limits, sizeof(*l), limit) : NULL;
    if (!l) return;
    double now = sl_backend_now(srv->backend), win = srv->config.fleet.window_s;
    sl__window_add(&l->checks, win, now, 1);
    if (!allowed || delayed) sl__window_add(&l->throttled, win, now, 1);
    if (delayed) l->delayed++;
    if (!allowed && retry_after_s >= 0)
        sl__hist_observe(&l->retry_after, retry_bounds_s, N_RETRY, retry_after_s);
}

/* ---- sampling --------------------------------------------------------------------- */

static void on_sample(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud)
{
    sl_server_t *srv = ud;
    sl_watch_t *w = watch_state(srv);
    (void)errmsg;
    if (rc != SL_OK || !w) return;
    double now = sl_backend_now(srv->backend);
    double dt = w->sampled_at_s > 0 ? fmin(now - w->sampled_at_s, MAX_SAMPLE_GAP_S) : 0;
    w->sampled_at_s = now;
    if (dt <= 0) return;
    for (size_t i = 0; i < n; i++) {
        pool_watch_t *p = pool_of(srv, pools[i].name);
        for (int b = 0; p && b < SL_BUCKET_COUNT; b++) {
            if (!pools[i].limit[b] || pools[i].capacity[b] <= 0) continue;
            double share = pools[i].level[b] / pools[i].capacity[b];
            p->band_s[b][share < 0.1 ? BAND_LOW : share > 0.9 ? BAND_HIGH : BAND_MID] += dt;
        }
    }
}

void sl__watch_tick(sl_server_t *srv)
{
    if (!watch_of(srv) || srv->shutting_down) return;
    sl_backend_pools(srv->backend, NULL, on_sample, srv);
}

/* ---- rendering -------------------------------------------------------------------- */

static void head(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void value(struct evbuffer *out, double v)
{
    if (isnan(v))
        evbuffer_add_printf(out, " NaN\n");
    else
        evbuffer_add_printf(out, " %.17g\n", v);
}

/* `metric{key="name"<more>}` then the value. */
static void sample(struct evbuffer *out, const char *metric, const char *key, const char *name,
                   const char *more, double v)
{
    evbuffer_add_printf(out, "%s{%s=\"", metric, key);
    sl__prom_label(out, name);
    evbuffer_add_printf(out, "\"%s}", more);
    value(out, v);
}

static double ratio(const sl_window_t *part, const sl_window_t *all, double win, double now)
{
    uint64_t n = sl__window_sum(all, win, now);
    return n ? (double)sl__window_sum(part, win, now) / (double)n : NAN;
}

/* Pearson's correlation of the window's per-slot 429s and throttled requests; 0 when
 * either does not vary (an idle pool, or one never throttled): no co-movement to see, and
 * a NaN would break every graph and aggregate taken over the series. */
static double correlation(const pool_watch_t *p, double win, double now)
{
    uint32_t a[SL_WINDOW_SLOTS], b[SL_WINDOW_SLOTS];
    sl__window_slots(&p->got_429, win, now, a);
    sl__window_slots(&p->throttled, win, now, b);
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (int i = 0; i < SL_WINDOW_SLOTS; i++) {
        ma += a[i];
        mb += b[i];
    }
    ma /= SL_WINDOW_SLOTS;
    mb /= SL_WINDOW_SLOTS;
    for (int i = 0; i < SL_WINDOW_SLOTS; i++) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : 0;
}

/* The pool's counts, or `none` for a pool nothing was counted for yet. */
static const pool_watch_t *view(const sl_watch_t *w, const char *name, const pool_watch_t *none)
{
    for (size_t i = 0; w && i < w->n_pools; i++)
        if (!strcmp(w->pools[i].name, name)) return &w->pools[i];
    return none;
}

static void render_pools(sl_server_t *srv, const sl_pool_info_t *pools, size_t n_pools,
                         struct evbuffer *out)
{
    double now = sl_backend_now(srv->backend), win = srv->config.fleet.window_s;
    const sl_watch_t *w = watch_state(srv);
    pool_watch_t none;
    memset(&none, 0, sizeof(none));
    head(out, "sluice_pool_throttle_ratio", "gauge",
         "Lease requests queued or rejected over all, in the window fleet.window_s.");
    for (size_t i = 0; i < n_pools; i++) {
        const pool_watch_t *p = view(w, pools[i].name, &none);
        sample(out, "sluice_pool_throttle_ratio", "pool", pools[i].name, "",
               ratio(&p->throttled, &p->requests, win, now));
    }
    head(out, "sluice_retry_after_seconds", "histogram",
         "retry_after of lease rejections (time to reset).");
    for (size_t i = 0; i < n_pools; i++)
        sl__hist_write(out, "sluice_retry_after_seconds", "pool", pools[i].name,
                       &view(w, pools[i].name, &none)->retry_after, retry_bounds_s, N_RETRY);
    head(out, "sluice_margin_adjustments_total", "counter", "Margin changes by direction.");
    for (size_t i = 0; i < n_pools; i++) {
        const pool_watch_t *p = view(w, pools[i].name, &none);
        sample(out, "sluice_margin_adjustments_total", "pool", pools[i].name, ",direction=\"up\"",
               (double)p->margin_up);
        sample(out, "sluice_margin_adjustments_total", "pool", pools[i].name, ",direction=\"down\"",
               (double)p->margin_down);
    }
    head(out, "sluice_bucket_utilisation_ratio", "gauge",
         "Share of a bucket's capacity in use now: 1 - level / capacity (above 1 in debt).");
    for (size_t i = 0; i < n_pools; i++)
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            if (!pools[i].limit[b] || pools[i].capacity[b] <= 0) continue;
            char more[48];
            snprintf(more, sizeof(more), ",bucket=\"%s\"", sl_bucket_name((sl_bucket_t)b));
            sample(out, "sluice_bucket_utilisation_ratio", "pool", pools[i].name, more,
                   1 - pools[i].level[b] / pools[i].capacity[b]);
        }
    head(out, "sluice_bucket_band_seconds_total", "counter",
         "Time a bucket's level spent below 10%, between, and above 90% of its capacity.");
    for (size_t i = 0; i < n_pools; i++) {
        const pool_watch_t *p = view(w, pools[i].name, &none);
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            if (!pools[i].limit[b] || pools[i].capacity[b] <= 0) continue;
            for (int k = 0; k < BAND_COUNT; k++) {
                char more[96];
                snprintf(more, sizeof(more), ",bucket=\"%s\",band=\"%s\"",
                         sl_bucket_name((sl_bucket_t)b), band_names[k]);
                sample(out, "sluice_bucket_band_seconds_total", "pool", pools[i].name, more,
                       p->band_s[b][k]);
            }
        }
    }
    head(out, "sluice_upstream_429_throttle_correlation", "gauge",
         "Pearson correlation of upstream 429s and throttled requests per slot of the window "
         "(0 when either is constant).");
    for (size_t i = 0; i < n_pools; i++)
        sample(out, "sluice_upstream_429_throttle_correlation", "pool", pools[i].name, "",
               correlation(view(w, pools[i].name, &none), win, now));
}

static void render_limits(sl_server_t *srv, struct evbuffer *out)
{
    double now = sl_backend_now(srv->backend), win = srv->config.fleet.window_s;
    const char *name;
    json_t *cfg;
    json_object_foreach(srv->config.limits, name, cfg) /* every configured limit has rows */
    {
        sl_watch_t *w = watch_of(srv);
        if (w) entry((void **)&w->limits, &w->n_limits, sizeof(limit_watch_t), name);
    }
    sl_watch_t *w = watch_state(srv);
    size_t n = w ? w->n_limits : 0;
    head(out, "sluice_limit_throttle_ratio", "gauge",
         "Action-limit checks denied or held before their answer over all, in the window.");
    for (size_t i = 0; i < n; i++)
        sample(out, "sluice_limit_throttle_ratio", "limit", w->limits[i].name, "",
               ratio(&w->limits[i].throttled, &w->limits[i].checks, win, now));
    head(out, "sluice_limit_checks_delayed_total", "counter",
         "Action-limit checks held (on_limit: queue) before their answer.");
    for (size_t i = 0; i < n; i++)
        sample(out, "sluice_limit_checks_delayed_total", "limit", w->limits[i].name, "",
               (double)w->limits[i].delayed);
    head(out, "sluice_limit_retry_after_seconds", "histogram",
         "retry_after of action-limit denials (time to reset).");
    for (size_t i = 0; i < n; i++)
        sl__hist_write(out, "sluice_limit_retry_after_seconds", "limit", w->limits[i].name,
                       &w->limits[i].retry_after, retry_bounds_s, N_RETRY);
}

void sl__watch_metrics_render(sl_server_t *srv, const sl_pool_info_t *pools, size_t n_pools,
                              struct evbuffer *out)
{
    render_pools(srv, pools, n_pools, out);
    render_limits(srv, out);
}

void sl__watch_free(sl_server_t *srv)
{
    if (!watch_state(srv)) return;
    free(watch_state(srv)->pools);
    free(watch_state(srv)->limits);
    free(watch_state(srv));
    sl__fleet_house_make(srv)->watch = NULL; /* the house exists: it held this part */
}
