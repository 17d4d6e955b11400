/* usage.c - chargeback and latency: tokens and cost per agent, team and model, and the
 * provider's latency and time to first token per pool (docs/observe.md "Chargeback").
 *
 * A call is counted once, where it is settled on this replica (the lease API's settle,
 * the proxy's own settle), with the tokens the settle reports; several replicas' counters
 * add up in Prometheus. A lease that is reaped or cancelled was never reported used and
 * is not counted. Cardinality is bounded everywhere: agents by the top-N series of
 * /metrics (fleet.metrics_top_agents, the rest `other`) and SL_USAGE_MAX_AGENTS totals,
 * teams by the configuration (agents outside every team are `default`), model names by
 * SL_USAGE_MAX_MODELS (a client names its model: past the bound, `other`).
 */
#include "usage.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

/* Bounds in seconds: a whole answer takes up to minutes; its first token, seconds. */
static const double latency_bounds_s[] = {0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600};
static const double first_token_bounds_s[] = {0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60};
#define N_LATENCY (sizeof(latency_bounds_s) / sizeof(latency_bounds_s[0]))
#define N_FIRST (sizeof(first_token_bounds_s) / sizeof(first_token_bounds_s[0]))
_Static_assert(N_LATENCY <= SL_HIST_MAX_BOUNDS && N_FIRST <= SL_HIST_MAX_BOUNDS,
               "bounds fit sl_hist_t");

struct pool_latency {
    char name[129];
    sl_hist_t latency;
    sl_hist_t first_token;
};

double sl__usage_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sl_usage_state_t *state_of(sl_server_t *srv)
{
    return sl__slot_make(srv, SL_FEATURE_ID_usage, sizeof(sl_usage_state_t));
}

void sl__usage_counts_add(sl_usage_counts_t *into, const sl_usage_counts_t *c)
{
    into->input_tokens += c->input_tokens;
    into->output_tokens += c->output_tokens;
    into->cache_read_tokens += c->cache_read_tokens;
    into->cache_write_tokens += c->cache_write_tokens;
    into->cost_usd += c->cost_usd;
    into->calls += c->calls;
}

/* Adds `c` under `name` in `m`, or under "other" once `m` holds `max` names. */
static void add_named(sl_namemap_t *m, const char *name, size_t max, const sl_usage_counts_t *c)
{
    const char *stored;
    sl_usage_counts_t *t = sl__namemap_obtain(m, name, sizeof(*t), max, &stored);
    if (!t) t = sl__namemap_obtain(m, "other", sizeof(*t), max + 1, &stored);
    if (t) sl__usage_counts_add(t, c);
}

const char *sl__usage_team(const sl_server_t *srv, const char *agent)
{
    const sl_backend_settings_t *s = &srv->config.settings;
    for (size_t i = 0; agent && i < s->n_members; i++)
        if (!strcmp(s->members[i].agent, agent)) return s->members[i].team;
    return "default";
}

/* The model's name as counted: kept while fewer than SL_USAGE_MAX_MODELS are known. */
static const char *model_label(const sl_usage_state_t *u, const char *model)
{
    if (!model || !*model) return "unknown";
    if (sl__namemap_get(&u->by_model, model) || u->by_model.count < SL_USAGE_MAX_MODELS)
        return model;
    return "other";
}

void sl__usage_record(sl_server_t *srv, const char *agent, const char *pool, const char *model,
                      const sl_settle_t *s)
{
    sl_usage_state_t *u = state_of(srv);
    if (!u) return;
    sl_usage_counts_t c = {
        .input_tokens = s->input_tokens,
        .output_tokens = s->output_tokens,
        .cache_read_tokens = s->cache_read_input_tokens,
        .cache_write_tokens = s->cache_creation_input_tokens,
        .calls = 1,
    };
    sl_price_t price = sl__usage_price(srv, model, pool);
    c.cost_usd = sl__usage_cost(&price, &c);
    double now = sl__usage_now_s();
    if (u->started_s == 0) u->started_s = now;
    if (!agent || !*agent) agent = "unknown";
    const char *team = sl__usage_team(srv, agent);
    const char *label = model_label(u, model);
    add_named(&u->by_agent, agent, SL_USAGE_MAX_AGENTS, &c);
    add_named(&u->by_team, team, SL_USAGE_MAX_TEAMS, &c);
    add_named(&u->by_model, label, SL_USAGE_MAX_MODELS, &c);
    char key[3 * 130];
    snprintf(key, sizeof(key), "%s\x1f%s\x1f%s", agent, team, label);
    sl__usage_rollup_add(u, key, &c, now);
}

static pool_latency_t *pool_of(sl_usage_state_t *u, const char *pool)
{
    for (size_t i = 0; i < u->n_pools; i++)
        if (!strcmp(u->pools[i].name, pool)) return &u->pools[i];
    pool_latency_t *grown = realloc(u->pools, (u->n_pools + 1) * sizeof(*grown));
    if (!grown) return NULL;
    u->pools = grown;
    pool_latency_t *p = &grown[u->n_pools++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", pool);
    return p;
}

void sl__usage_latency(sl_server_t *srv, const char *pool, double upstream_s, double first_token_s)
{
    sl_usage_state_t *u = state_of(srv);
    /* Pools come from the configuration (the proxy only calls configured upstreams). */
    pool_latency_t *p = u && pool && *pool ? pool_of(u, pool) : NULL;
    if (!p) return;
    if (upstream_s >= 0) sl__hist_observe(&p->latency, latency_bounds_s, N_LATENCY, upstream_s);
    if (first_token_s >= 0)
        sl__hist_observe(&p->first_token, first_token_bounds_s, N_FIRST, first_token_s);
}

/* ---- /metrics ------------------------------------------------------------------------------ */

static const char *const kind_names[] = {"input", "output", "cache_read", "cache_write"};

static int64_t kind_tokens(const sl_usage_counts_t *c, int k)
{
    return k == 0 ? c->input_tokens
           : k == 1 ? c->output_tokens
           : k == 2 ? c->cache_read_tokens
                    : c->cache_write_tokens;
}

typedef struct gather {
    sl_agent_value_t *vals;
    const sl_usage_counts_t **counts;
    size_t n;
} gather_t;

static void gather_one(const char *key, void *val, void *ud)
{
    gather_t *g = ud;
    g->vals[g->n].agent = key;
    g->counts[g->n] = val;
    g->n++;
}

static void head(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One dimension's token and cost counters: `label`="name" per entry; agents through the
 * top-N series (top_n, the rest `other`), teams and models whole (bounded already). */
static void render_dimension(const sl_namemap_t *m, const char *dim, bool top, size_t top_n,
                             struct evbuffer *out)
{
    char tokens_metric[64], cost_metric[64];
    snprintf(tokens_metric, sizeof(tokens_metric), "sluice_%s_tokens_total", dim);
    snprintf(cost_metric, sizeof(cost_metric), "sluice_%s_cost_usd_total", dim);
    gather_t g = {.n = 0};
    size_t n = m->count;
    g.vals = calloc(n ? n : 1, sizeof(*g.vals));
    g.counts = calloc(n ? n : 1, sizeof(*g.counts));
    head(out, tokens_metric, "counter", "Tokens settled, by kind (input: uncached).");
    head(out, cost_metric, "counter", "Cost of the tokens settled at the list prices, USD.");
    if (!g.vals || !g.counts) goto done;
    sl__namemap_foreach(m, gather_one, &g);
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < g.n; i++) g.vals[i].value = (double)kind_tokens(g.counts[i], k);
        char labels[32];
        snprintf(labels, sizeof(labels), ",kind=\"%s\"", kind_names[k]);
        if (top) {
            /* sl__agent_series sorts vals: the counts array no longer lines up after it. */
            sl_agent_value_t *copy = malloc((g.n ? g.n : 1) * sizeof(*copy));
            if (!copy) continue;
            memcpy(copy, g.vals, g.n * sizeof(*copy));
            sl__agent_series(out, tokens_metric, labels, copy, g.n, top_n, true);
            free(copy);
            continue;
        }
        for (size_t i = 0; i < g.n; i++) {
            evbuffer_add_printf(out, "%s{%s=\"", tokens_metric, dim);
            sl__prom_label(out, g.vals[i].agent);
            evbuffer_add_printf(out, "\"%s} %.17g\n", labels, g.vals[i].value);
        }
    }
    for (size_t i = 0; i < g.n; i++) g.vals[i].value = g.counts[i]->cost_usd;
    if (top) {
        sl__agent_series(out, cost_metric, "", g.vals, g.n, top_n, true);
    } else {
        for (size_t i = 0; i < g.n; i++) {
            evbuffer_add_printf(out, "%s{%s=\"", cost_metric, dim);
            sl__prom_label(out, g.vals[i].agent);
            evbuffer_add_printf(out, "\"} %.17g\n", g.vals[i].value);
        }
    }
done:
    free(g.vals);
    free(g.counts);
}

/* The latency of configured pool `name`, or empty histograms when it has none yet. */
static const pool_latency_t *latency_view(const sl_usage_state_t *u, const char *name)
{
    static const pool_latency_t none;
    for (size_t i = 0; u && i < u->n_pools; i++)
        if (!strcmp(u->pools[i].name, name)) return &u->pools[i];
    return &none;
}

void sl__usage_metrics_render(sl_server_t *srv, struct evbuffer *out, bool name_agents)
{
    static const sl_namemap_t none;
    const sl_backend_settings_t *pools = &srv->config.settings;
    const sl_usage_state_t *u = SL_USAGE_STATE(srv);
    size_t top_n = name_agents ? (size_t)srv->config.metrics_top_agents : 0;
    render_dimension(u ? &u->by_agent : &none, "agent", true, top_n, out);
    render_dimension(u ? &u->by_team : &none, "team", false, 0, out);
    render_dimension(u ? &u->by_model : &none, "model", false, 0, out);
    head(out, "sluice_upstream_latency_seconds", "histogram",
         "Proxied calls: from sending the request to the provider to the answer's last byte.");
    for (size_t i = 0; i < pools->n_pools; i++) /* every pool has rows, as the lease waits */
        sl__hist_write(out, "sluice_upstream_latency_seconds", "pool", pools->pools[i].name,
                       &latency_view(u, pools->pools[i].name)->latency, latency_bounds_s,
                       N_LATENCY);
    head(out, "sluice_upstream_time_to_first_token_seconds", "histogram",
         "Proxied streams: from sending the request to the provider to its first output event "
         "(a content delta or chunk).");
    for (size_t i = 0; i < pools->n_pools; i++)
        sl__hist_write(out, "sluice_upstream_time_to_first_token_seconds", "pool",
                       pools->pools[i].name, &latency_view(u, pools->pools[i].name)->first_token,
                       first_token_bounds_s, N_FIRST);
}

void sl__usage_free(sl_server_t *srv)
{
    sl_usage_state_t *u = SL_USAGE_STATE(srv);
    if (!u) return;
    sl__namemap_free_all(&u->by_agent);
    sl__namemap_free_all(&u->by_team);
    sl__namemap_free_all(&u->by_model);
    sl__usage_rollup_free(u);
    free(u->pools);
    free(u);
    srv->slot[SL_FEATURE_ID_usage] = NULL;
}
