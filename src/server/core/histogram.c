/* histogram.c - Prometheus histograms: counted per bound, written as cumulative buckets. */
#include "server.h"

#include <assert.h>
#include <math.h>

#include <event2/buffer.h>

void sl__hist_observe(sl_hist_t *h, const double *bounds, size_t n, double v)
{
    assert(n <= SL_HIST_MAX_BOUNDS && "a histogram has at most SL_HIST_MAX_BOUNDS bounds");
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void sl__hist_write(struct evbuffer *out, const char *metric, const char *key, const char *name,
                    const sl_hist_t *h, const double *bounds, size_t n)
{
    uint64_t cum = 0;
    for (size_t i = 0; i <= n; i++) {
        cum += h->counts[i];
        evbuffer_add_printf(out, "%s_bucket{%s=\"", metric, key);
        sl__prom_label(out, name);
        if (i < n)
            evbuffer_add_printf(out, "\",le=\"%g\"} %llu\n", bounds[i], (unsigned long long)cum);
        else
            evbuffer_add_printf(out, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    evbuffer_add_printf(out, "%s_sum{%s=\"", metric, key);
    sl__prom_label(out, name);
    if (isinf(h->sum))
        evbuffer_add_printf(out, h->sum > 0 ? "\"} +Inf\n" : "\"} -Inf\n");
    else if (isnan(h->sum))
        evbuffer_add_printf(out, "\"} NaN\n");
    else
        evbuffer_add_printf(out, "\"} %.17g\n", h->sum);
    evbuffer_add_printf(out, "%s_count{%s=\"", metric, key);
    sl__prom_label(out, name);
    evbuffer_add_printf(out, "\"} %llu\n", (unsigned long long)h->count);
}
