/* metrics.c - Prometheus text exposition (format 0.0.4) of pool state and event counters.
 *
 * Gauges and the engine's own totals come from a fresh pool snapshot per scrape;
 * settle outcomes and the two histograms are counted here from engine events.
 * Histogram buckets are cumulative, end in +Inf, and carry _sum and _count.
 */
#include "server.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

static const double wait_bounds_s[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                       1,     2.5,   5,    10,    30,   60,  120};
static const double error_bounds[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5};
#define N_WAIT (sizeof(wait_bounds_s) / sizeof(wait_bounds_s[0]))
#define N_ERR  (sizeof(error_bounds) / sizeof(error_bounds[0]))

enum outcome { OUT_SETTLED, OUT_CANCELLED, OUT_REAPED, OUT_UNCLAIMED, OUT_COUNT };
static const char *const outcome_names[OUT_COUNT] = {"settled", "cancelled", "reaped", "unclaimed"};

_Static_assert(N_WAIT <= SL_HIST_MAX_BOUNDS && N_ERR <= SL_HIST_MAX_BOUNDS, "bounds fit sl_hist_t");

typedef struct pool_metrics {
    char name[129];
    uint64_t outcomes[OUT_COUNT];
    sl_hist_t wait;
    sl_hist_t error;
    uint64_t margin_changes;
    bool state_lost; /* alert backend_state_lost raised (the backend lost the pool's state) */
} pool_metrics_t;

struct sl_metrics {
    pool_metrics_t *pools;
    size_t n_pools;
    uint64_t estimate_error_alerts; /* agents with the alert raised now */
    uint64_t anomaly_alerts;        /* agents flagged anomalous now (anomaly.c) */
    bool backend_unavailable;       /* the backend's alert is raised (redis down) */
    bool state_file_damaged;        /* this run started cold from a state file that did not
                                       verify (raised for the life of the process) */
};

sl_metrics_t *sl__metrics_new(void)
{
    return calloc(1, sizeof(sl_metrics_t));
}

void sl__metrics_free(sl_metrics_t *m)
{
    if (!m) return;
    free(m->pools);
    free(m);
}

static pool_metrics_t *pool_of(sl_metrics_t *m, const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < m->n_pools; i++)
        if (!strcmp(m->pools[i].name, name)) return &m->pools[i];
    pool_metrics_t *grown = realloc(m->pools, (m->n_pools + 1) * sizeof(*grown));
    if (!grown) return NULL;
    m->pools = grown;
    pool_metrics_t *p = &grown[m->n_pools++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    return p;
}

void sl__metrics_on_event(sl_metrics_t *m, const sl_event_t *ev)
{
    pool_metrics_t *p = pool_of(m, ev->pool);
    if (ev->kind == SL_EV_ALERT && ev->alert && !strcmp(ev->alert, "estimate_error")) {
        if (ev->active)
            m->estimate_error_alerts++;
        else if (m->estimate_error_alerts > 0)
            m->estimate_error_alerts--;
    }
    if (ev->kind == SL_EV_ALERT && ev->alert && !strcmp(ev->alert, "anomaly")) {
        if (ev->active)
            m->anomaly_alerts++;
        else if (m->anomaly_alerts > 0)
            m->anomaly_alerts--;
    }
    if (ev->kind == SL_EV_ALERT && ev->alert && !strcmp(ev->alert, "backend_unavailable"))
        m->backend_unavailable = ev->active;
    if (ev->kind == SL_EV_ALERT && ev->alert && !strcmp(ev->alert, "state_file_damaged"))
        m->state_file_damaged = ev->active;
    if (!p) return;
    if (ev->kind == SL_EV_ALERT && ev->alert && !strcmp(ev->alert, "backend_state_lost"))
        p->state_lost = ev->active;
    switch (ev->kind) {
    case SL_EV_GRANTED:
        sl__hist_observe(&p->wait, wait_bounds_s, N_WAIT, ev->waited_s > 0 ? ev->waited_s : 0);
        break;
    case SL_EV_SETTLED:
        p->outcomes[OUT_SETTLED]++;
        if (!ev->not_counted) sl__hist_observe(&p->error, error_bounds, N_ERR, ev->estimate_error);
        break;
    case SL_EV_CANCELLED:
        p->outcomes[OUT_CANCELLED]++;
        break;
    case SL_EV_REAPED:
        p->outcomes[OUT_REAPED]++;
        break;
    case SL_EV_UNCLAIMED:
        p->outcomes[OUT_UNCLAIMED]++;
        break;
    case SL_EV_MARGIN:
        p->margin_changes++;
        break;
    default:
        break;
    }
}

/* Label values are pool names (any bytes but NUL): escape \, " and newline. */
static void label(struct evbuffer *out, const char *s)
{
    sl__prom_label(out, s);
}

static void head(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void num(struct evbuffer *out, double v)
{
    if (isinf(v))
        evbuffer_add_printf(out, v > 0 ? "+Inf\n" : "-Inf\n");
    else if (isnan(v))
        evbuffer_add_printf(out, "NaN\n");
    else
        evbuffer_add_printf(out, "%.17g\n", v);
}

static void pool_sample(struct evbuffer *out, const char *metric, const char *pool, const char *k2,
                        const char *v2, double v)
{
    evbuffer_add_printf(out, "%s{pool=\"", metric);
    label(out, pool);
    if (k2) {
        evbuffer_add_printf(out, "\",%s=\"", k2);
        label(out, v2);
    }
    evbuffer_add(out, "\"} ", 3);
    num(out, v);
}

static const sl_hist_t empty_histogram;

void sl__metrics_render(const sl_metrics_t *m, const sl_pool_info_t *pools, size_t n_pools,
                        size_t n_waiters, struct evbuffer *out)
{
    head(out, "sluice_leases_total", "counter", "Lease requests by answer.");
    for (size_t i = 0; i < n_pools; i++) {
        pool_sample(out, "sluice_leases_total", pools[i].name, "result", "granted",
                    (double)pools[i].granted_total);
        pool_sample(out, "sluice_leases_total", pools[i].name, "result", "queued",
                    (double)pools[i].queued_total);
        pool_sample(out, "sluice_leases_total", pools[i].name, "result", "rejected",
                    (double)pools[i].rejected_total);
    }
    head(out, "sluice_bucket_level", "gauge", "Current bucket level (tokens or requests).");
    for (size_t i = 0; i < n_pools; i++)
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            if (pools[i].limit[b])
                pool_sample(out, "sluice_bucket_level", pools[i].name, "bucket",
                            sl_bucket_name((sl_bucket_t)b), pools[i].level[b]);
    head(out, "sluice_bucket_capacity", "gauge", "Bucket capacity: limit times margin.");
    for (size_t i = 0; i < n_pools; i++)
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            if (pools[i].limit[b])
                pool_sample(out, "sluice_bucket_capacity", pools[i].name, "bucket",
                            sl_bucket_name((sl_bucket_t)b), pools[i].capacity[b]);
    head(out, "sluice_margin_ratio", "gauge", "Share of the provider limit sluice hands out.");
    for (size_t i = 0; i < n_pools; i++)
        pool_sample(out, "sluice_margin_ratio", pools[i].name, NULL, NULL, pools[i].margin);
    head(out, "sluice_calibration_ratio", "gauge",
         "Learned ratio of billed to locally estimated prompt tokens, per model.");
    for (size_t i = 0; i < n_pools; i++)
        for (int k = 0; k < pools[i].n_calibration; k++)
            pool_sample(out, "sluice_calibration_ratio", pools[i].name, "model",
                        pools[i].calibration[k].model, pools[i].calibration[k].ratio);
    head(out, "sluice_queue_depth", "gauge", "Requests waiting in the pool's queue.");
    for (size_t i = 0; i < n_pools; i++)
        pool_sample(out, "sluice_queue_depth", pools[i].name, NULL, NULL,
                    (double)pools[i].queue_depth);
    head(out, "sluice_leases_in_flight", "gauge", "Leases granted and not yet ended.");
    for (size_t i = 0; i < n_pools; i++)
        pool_sample(out, "sluice_leases_in_flight", pools[i].name, NULL, NULL,
                    (double)pools[i].leases_in_flight);
    head(out, "sluice_upstream_429_total", "counter",
         "429s from the provider reported in settles.");
    for (size_t i = 0; i < n_pools; i++)
        pool_sample(out, "sluice_upstream_429_total", pools[i].name, NULL, NULL,
                    (double)pools[i].upstream_429_total);

    head(out, "sluice_settles_total", "counter", "Leases ended, by outcome.");
    for (size_t i = 0; i < n_pools; i++) {
        const pool_metrics_t *pm = NULL;
        for (size_t j = 0; j < m->n_pools; j++)
            if (!strcmp(m->pools[j].name, pools[i].name)) pm = &m->pools[j];
        for (int o = 0; o < OUT_COUNT; o++)
            pool_sample(out, "sluice_settles_total", pools[i].name, "outcome", outcome_names[o],
                        pm ? (double)pm->outcomes[o] : 0);
    }
    head(out, "sluice_lease_wait_seconds", "histogram", "Time from request to grant.");
    for (size_t i = 0; i < n_pools; i++) {
        const sl_hist_t *h = &empty_histogram;
        for (size_t j = 0; j < m->n_pools; j++)
            if (!strcmp(m->pools[j].name, pools[i].name)) h = &m->pools[j].wait;
        sl__hist_write(out, "sluice_lease_wait_seconds", "pool", pools[i].name, h, wait_bounds_s,
                       N_WAIT);
    }
    head(out, "sluice_estimate_error_ratio", "histogram",
         "Settled |actual - estimated| / actual input tokens.");
    for (size_t i = 0; i < n_pools; i++) {
        const sl_hist_t *h = &empty_histogram;
        for (size_t j = 0; j < m->n_pools; j++)
            if (!strcmp(m->pools[j].name, pools[i].name)) h = &m->pools[j].error;
        sl__hist_write(out, "sluice_estimate_error_ratio", "pool", pools[i].name, h, error_bounds,
                       N_ERR);
    }
    head(out, "sluice_alert", "gauge", "1 while an alert is raised.");
    for (size_t i = 0; i < n_pools; i++) {
        evbuffer_add_printf(out, "sluice_alert{name=\"margin_at_floor\",pool=\"");
        label(out, pools[i].name);
        evbuffer_add_printf(out, "\"} %d\n", pools[i].alert_margin_at_floor ? 1 : 0);
        evbuffer_add_printf(out, "sluice_alert{name=\"spend_cap\",pool=\"");
        label(out, pools[i].name);
        evbuffer_add_printf(out, "\"} %d\n", pools[i].alert_spend_cap ? 1 : 0);
        bool lost = false;
        for (size_t j = 0; j < m->n_pools; j++)
            if (!strcmp(m->pools[j].name, pools[i].name)) lost = m->pools[j].state_lost;
        evbuffer_add_printf(out, "sluice_alert{name=\"backend_state_lost\",pool=\"");
        label(out, pools[i].name);
        evbuffer_add_printf(out, "\"} %d\n", lost ? 1 : 0);
    }
    evbuffer_add_printf(out, "sluice_alert{name=\"estimate_error\",pool=\"\"} %d\n",
                        m->estimate_error_alerts > 0 ? 1 : 0);
    evbuffer_add_printf(out, "sluice_alert{name=\"anomaly\",pool=\"\"} %d\n",
                        m->anomaly_alerts > 0 ? 1 : 0);
    evbuffer_add_printf(out, "sluice_alert{name=\"backend_unavailable\",pool=\"\"} %d\n",
                        m->backend_unavailable ? 1 : 0);
    evbuffer_add_printf(out, "sluice_alert{name=\"state_file_damaged\",pool=\"\"} %d\n",
                        m->state_file_damaged ? 1 : 0);
    head(out, "sluice_long_poll_waiters", "gauge", "HTTP requests held open waiting for a grant.");
    evbuffer_add_printf(out, "sluice_long_poll_waiters %zu\n", n_waiters);
}
