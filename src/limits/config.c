/* config.c - one limit's configuration: defaults, validation with errors naming `limits.NAME.FIELD` and the value, owned copies. */
#include "limits_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ALGORITHM[] = {"token_bucket", "leaky_bucket", "fixed_window",
                                        "sliding_window", "sliding_window_approx", "gcra",
                                        "concurrency"};
static const char *const PER[] = {"agent", "team", "global", "key"};
static const char *const ON_LIMIT[] = {"reject", "queue"};

const char *sl_limit_algorithm_name(sl_limit_algorithm_t a)
{
    return (unsigned)a < SL_LIMIT_ALGORITHM_COUNT ? ALGORITHM[a] : NULL;
}

const char *sl_limit_per_name(sl_limit_per_t p)
{
    return (unsigned)p <= SL_LIMIT_PER_KEY ? PER[p] : NULL;
}

const char *sl_limit_on_limit_name(sl_limit_on_limit_t o)
{
    return (unsigned)o <= SL_LIMIT_QUEUE ? ON_LIMIT[o] : NULL;
}

void sl_limit_config_init(sl_limit_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->algorithm = SL_LIMIT_TOKEN_BUCKET;
    cfg->period_s = 1;
    cfg->per = SL_LIMIT_PER_AGENT;
    cfg->on_limit = SL_LIMIT_REJECT;
    cfg->adaptive = (sl_limit_adaptive_t){.enabled = false, .decrease = 0.9, .increase = 1.1,
                                          .high_error = 0.10, .low_error = 0.02, .window = 100};
    cfg->ttl_s = 60;
    cfg->max_keys = 100000;
}

#define MAX_PERIOD_S (366.0 * 86400)
#define MAX_RATE 1e9
#define MAX_TIME_US 9007199254740992.0 /* 2^53 */

static bool whole(double v)
{
    return v == floor(v);
}

static bool uses_burst(sl_limit_algorithm_t a)
{
    return a == SL_LIMIT_TOKEN_BUCKET || a == SL_LIMIT_LEAKY_BUCKET || a == SL_LIMIT_GCRA;
}

static bool keeps_log(sl_limit_algorithm_t a)
{
    return a == SL_LIMIT_SLIDING_WINDOW || a == SL_LIMIT_CONCURRENCY;
}

static bool spaced(sl_limit_algorithm_t a)
{
    return a == SL_LIMIT_LEAKY_BUCKET || a == SL_LIMIT_GCRA;
}

#define BAD(...) (snprintf(err, n, __VA_ARGS__), SL_EINVAL)

/* A rate (the configured one, or an adaptive bound) the algorithm can run at. */
static int check_rate(const char *name, const char *field, double v, const sl_limit_config_t *c,
                      char *err, size_t n)
{
    if (!(v > 0) || v > MAX_RATE)
        return BAD("limits.%s.%s: %g, not in (0, %g]", name, field, v, MAX_RATE);
    if (!uses_burst(c->algorithm) && (!whole(v) || v < 1))
        return BAD("limits.%s.%s: %g, %s counts whole units: a whole number >= 1", name, field, v,
                   ALGORITHM[c->algorithm]);
    if (keeps_log(c->algorithm) && v > SL_LIMITS_LOG_MAX_RATE)
        return BAD("limits.%s.%s: %g, above %d, the most %s keeps a log for (use "
                   "sliding_window_approx or a shorter period)",
                   name, field, v, SL_LIMITS_LOG_MAX_RATE, ALGORITHM[c->algorithm]);
    if (spaced(c->algorithm) && c->period_s * 1e6 / v < 1)
        return BAD("limits.%s.%s: %g per %g s spaces hits under 1 µs apart", name, field, v,
                   c->period_s);
    return SL_OK;
}

static int check_adaptive(const char *name, const sl_limit_config_t *c, char *err, size_t n)
{
    const sl_limit_adaptive_t *a = &c->adaptive;
    int rc = check_rate(name, "adaptive.min_rate", a->min_rate, c, err, n);
    if (!rc) rc = check_rate(name, "adaptive.max_rate", a->max_rate, c, err, n);
    if (rc) return rc;
    if (a->min_rate > a->max_rate)
        return BAD("limits.%s.adaptive.min_rate: %g, above max_rate %g", name, a->min_rate, a->max_rate);
    if (c->rate < a->min_rate || c->rate > a->max_rate)
        return BAD("limits.%s.rate: %g, outside adaptive [min_rate %g, max_rate %g]", name, c->rate,
                   a->min_rate, a->max_rate);
    if (!(a->decrease > 0 && a->decrease < 1))
        return BAD("limits.%s.adaptive.decrease: %g, not in (0, 1)", name, a->decrease);
    if (!(a->increase > 1 && a->increase <= 100))
        return BAD("limits.%s.adaptive.increase: %g, not in (1, 100]", name, a->increase);
    if (!(a->high_error >= 0 && a->high_error <= 1))
        return BAD("limits.%s.adaptive.high_error: %g, not in [0, 1]", name, a->high_error);
    if (!(a->low_error >= 0 && a->low_error < a->high_error))
        return BAD("limits.%s.adaptive.low_error: %g, not in [0, high_error %g)", name, a->low_error,
                   a->high_error);
    if (a->window < 1 || a->window > SL_LIMITS_MAX_WINDOW)
        return BAD("limits.%s.adaptive.window: %lld, not in 1..%d", name, (long long)a->window,
                   SL_LIMITS_MAX_WINDOW);
    return SL_OK;
}

static int check_lists(const char *name, const sl_limit_config_t *c, char *err, size_t n)
{
    for (size_t i = 0; i < c->n_costs; i++) {
        const char *act = c->costs[i].action;
        if (!act || !*act || strlen(act) > SL_LIMITS_MAX_NAME)
            return BAD("limits.%s.costs: an action name must be 1..%d bytes", name, SL_LIMITS_MAX_NAME);
        if (c->costs[i].cost < 0 || c->costs[i].cost > SL_LIMITS_MAX_COST)
            return BAD("limits.%s.costs.%s: %lld, not in 0..%lld", name, act,
                       (long long)c->costs[i].cost, (long long)SL_LIMITS_MAX_COST);
        for (size_t j = 0; j < i; j++)
            if (strcmp(c->costs[j].action, act) == 0)
                return BAD("limits.%s.costs.%s: given twice", name, act);
    }
    for (size_t i = 0; i < c->n_parents; i++) {
        const char *p = c->parents[i];
        if (!p || !*p) return BAD("limits.%s.parents: an empty name", name);
        if (strcmp(p, name) == 0) return BAD("limits.%s.parents: \"%s\" makes a cycle", name, p);
        for (size_t j = 0; j < i; j++)
            if (strcmp(c->parents[j], p) == 0) return BAD("limits.%s.parents: \"%s\" given twice", name, p);
    }
    return SL_OK;
}

/* The longest time an answer of token_bucket, gcra and leaky_bucket holds is the burst
 * refilling at the slowest rate; under 2^53 µs every time stays an exact double (the Lua
 * port) and no product of the cores overflows. */
static int check_refill(const char *name, const sl_limit_config_t *c, char *err, size_t n)
{
    bool adaptive = c->adaptive.enabled && c->adaptive.min_rate < c->rate;
    double slowest = adaptive ? c->adaptive.min_rate : c->rate;
    double burst = c->burst > 0 ? c->burst : floor(c->rate);
    if (burst * (c->period_s * 1e6) / slowest <= MAX_TIME_US) return SL_OK;
    return BAD("limits.%s.burst: %g at %g%s per %g s refills in over 2^53 µs (285 years)", name,
               burst, slowest, adaptive ? " (adaptive.min_rate)" : "", c->period_s);
}

int sl__limit_validate(const char *name, const sl_limit_config_t *c, char *err, size_t n)
{
    if (!name || !*name || strlen(name) > SL_LIMITS_MAX_NAME)
        return BAD("limits: a limit name must be 1..%d bytes", SL_LIMITS_MAX_NAME);
    if (!sl_limit_algorithm_name(c->algorithm))
        return BAD("limits.%s.algorithm: unknown %d", name, (int)c->algorithm);
    if (!sl_limit_per_name(c->per)) return BAD("limits.%s.per: unknown %d", name, (int)c->per);
    if (!sl_limit_on_limit_name(c->on_limit))
        return BAD("limits.%s.on_limit: unknown %d", name, (int)c->on_limit);
    bool conc = c->algorithm == SL_LIMIT_CONCURRENCY;
    if (!(c->period_s > 0) || c->period_s > MAX_PERIOD_S || c->period_s * 1e6 < 1)
        return BAD("limits.%s.period_s: %g, not in [0.000001, %g]", name, c->period_s, MAX_PERIOD_S);
    int rc = check_rate(name, "rate", c->rate, c, err, n);
    if (rc) return rc;
    if (uses_burst(c->algorithm)) {
        if (c->burst != 0 && (!(c->burst >= 1) || !whole(c->burst) || c->burst > MAX_RATE))
            return BAD("limits.%s.burst: %g, not a whole number in 1..%g", name, c->burst, MAX_RATE);
        if (c->burst == 0 && c->rate < 1)
            return BAD("limits.%s.burst: needed when rate (%g) is under 1", name, c->rate);
    } else if (c->burst != 0) {
        return BAD("limits.%s.burst: %g, not used by %s", name, c->burst, ALGORITHM[c->algorithm]);
    }
    if (conc && (!(c->ttl_s > 0) || c->ttl_s > MAX_PERIOD_S || c->ttl_s * 1e6 < 1))
        return BAD("limits.%s.ttl_s: %g, not in [0.000001, %g]", name, c->ttl_s, MAX_PERIOD_S);
    if (c->max_keys < 1 || c->max_keys > 100000000)
        return BAD("limits.%s.max_keys: %lld, not in 1..100000000", name, (long long)c->max_keys);
    if (c->adaptive.enabled && (rc = check_adaptive(name, c, err, n))) return rc;
    if (uses_burst(c->algorithm) && (rc = check_refill(name, c, err, n))) return rc;
    return check_lists(name, c, err, n);
}

static char *dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static const sl__algorithm_t *const ALGO[] = {&sl__token_bucket, &sl__leaky_bucket,
                                              &sl__fixed_window, &sl__sliding_window,
                                              &sl__sliding_window_approx, &sl__gcra,
                                              &sl__concurrency};

/* A copy of a validated configuration; NULL when out of memory. */
sl__limit_t *sl__limit_new(const char *name, const sl_limit_config_t *cfg)
{
    sl__limit_t *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->cfg = *cfg;
    l->name = dup(name);
    l->costs = calloc(cfg->n_costs + 1, sizeof *l->costs);
    l->parent_names = calloc(cfg->n_parents + 1, sizeof *l->parent_names);
    bool ok = l->name && l->costs && l->parent_names;
    for (size_t i = 0; ok && i < cfg->n_costs; i++) {
        l->costs[i].cost = cfg->costs[i].cost;
        ok = (l->costs[i].action = dup(cfg->costs[i].action)) != NULL;
    }
    for (size_t i = 0; ok && i < cfg->n_parents; i++) ok = (l->parent_names[i] = dup(cfg->parents[i])) != NULL;
    if (!ok) {
        sl__limit_free(l);
        return NULL;
    }
    l->cfg.costs = l->costs;
    l->cfg.parents = (const char *const *)l->parent_names;
    l->algo = ALGO[cfg->algorithm];
    l->period_us = llround(cfg->period_s * 1e6);
    l->ttl_us = llround(cfg->ttl_s * 1e6);
    l->burst_units = cfg->burst > 0 ? (int64_t)cfg->burst : (int64_t)floor(cfg->rate);
    if (l->burst_units < 1) l->burst_units = 1;
    return l;
}

void sl__limit_free(sl__limit_t *l)
{
    if (!l) return;
    sl__kmap_free(&l->keys);
    for (size_t i = 0; l->costs && i < l->cfg.n_costs; i++) free((char *)l->costs[i].action);
    for (size_t i = 0; l->parent_names && i < l->cfg.n_parents; i++) free(l->parent_names[i]);
    free(l->costs);
    free(l->parent_names);
    free(l->name);
    free(l);
}
