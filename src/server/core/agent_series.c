/* agent_series.c - per-agent Prometheus series with bounded cardinality: the top N plus `other`.
 *
 * A 2,000-agent fleet with one series per agent and metric would be 2,000 series per
 * metric in every scrape and a new series for every agent name ever seen; Prometheus
 * pays for each. The N agents with the largest values keep their own series and the rest
 * are summed into `agent="other"`, so a metric never has more than N + 1 per-agent
 * series (N is fleet.metrics_top_agents). Who is in the top N can change between
 * scrapes: a counter's `other` may then go down, which rate() reads as a reset.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

static int by_value_desc(const void *a, const void *b)
{
    const sl_agent_value_t *x = a, *y = b;
    if (x->value != y->value) return x->value > y->value ? -1 : 1;
    return strcmp(x->agent, y->agent);
}

static void sample(struct evbuffer *out, const char *metric, const char *agent, const char *labels,
                   double v)
{
    evbuffer_add_printf(out, "%s{agent=\"", metric);
    sl__prom_label(out, agent);
    evbuffer_add_printf(out, "\"%s} %.17g\n", labels, v);
}

void sl__agent_series(struct evbuffer *out, const char *metric, const char *labels,
                      sl_agent_value_t *vals, size_t n, size_t top_n, bool other)
{
    if (n > 1) qsort(vals, n, sizeof(*vals), by_value_desc);
    double rest = 0;
    bool have_rest = false;
    for (size_t i = 0; i < n; i++) {
        if (i < top_n && vals[i].value != 0) {
            sample(out, metric, vals[i].agent, labels, vals[i].value);
        } else if (vals[i].value != 0) {
            rest += vals[i].value;
            have_rest = true;
        }
    }
    if (have_rest && other) sample(out, metric, "other", labels, rest);
}
