/* config_json.c - a limit's fields from a jansson object, every error naming `limits.NAME.FIELD` and the value. */
#include "limits_internal.h"
#include "limits_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define fail sl__limits_fail

/* The value as JSON, shortened, for messages. */
static void show(const json_t *v, char *buf, size_t n)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, n, "%.60s%s", s ? s : "?", s && strlen(s) > 60 ? "..." : "");
    free(s);
}

/* Finds `word` in `names` (count n); writes the choices "a | b | c" to `choices`. */
static int pick(const char *word, const char *(*name_of)(int), int n, char *choices, size_t cn)
{
    choices[0] = '\0';
    int found = -1;
    for (int i = 0; i < n; i++) {
        const char *nm = name_of(i);
        if (strcmp(nm, word) == 0) found = i;
        size_t len = strlen(choices);
        snprintf(choices + len, cn - len, "%s%s", i ? " | " : "", nm);
    }
    return found;
}

static const char *algo_name(int i) { return sl_limit_algorithm_name((sl_limit_algorithm_t)i); }
static const char *per_name(int i) { return sl_limit_per_name((sl_limit_per_t)i); }
static const char *on_limit_name(int i) { return sl_limit_on_limit_name((sl_limit_on_limit_t)i); }

typedef struct ctx {
    sl_limits_t *ls;
    const char *name;
    char val[80];
} ctx_t;

static int enum_field(ctx_t *c, const char *field, const json_t *v, const char *(*name_of)(int),
                      int n, int *out)
{
    char choices[256];
    show(v, c->val, sizeof c->val);
    if (!json_is_string(v))
        return fail(c->ls, SL_EINVAL, "limits.%s.%s: %s, not a string", c->name, field, c->val);
    int i = pick(json_string_value(v), name_of, n, choices, sizeof choices);
    if (i < 0)
        return fail(c->ls, SL_EINVAL, "limits.%s.%s: unknown %s (%s)", c->name, field, c->val, choices);
    *out = i;
    return SL_OK;
}

static int num_field(ctx_t *c, const char *field, const json_t *v, double *out)
{
    show(v, c->val, sizeof c->val);
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return fail(c->ls, SL_EINVAL, "limits.%s.%s: %s, not a number", c->name, field, c->val);
    *out = json_number_value(v);
    return SL_OK;
}

static int int_field(ctx_t *c, const char *field, const json_t *v, int64_t *out)
{
    show(v, c->val, sizeof c->val);
    if (!json_is_integer(v))
        return fail(c->ls, SL_EINVAL, "limits.%s.%s: %s, not a whole number", c->name, field, c->val);
    *out = (int64_t)json_integer_value(v);
    return SL_OK;
}

static int adaptive_field(ctx_t *c, const json_t *obj, sl_limit_adaptive_t *a)
{
    show(obj, c->val, sizeof c->val);
    if (!json_is_object(obj))
        return fail(c->ls, SL_EINVAL, "limits.%s.adaptive: %s, not an object", c->name, c->val);
    a->enabled = true;
    bool have_min = false, have_max = false;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        char field[64];
        snprintf(field, sizeof field, "adaptive.%.40s", k);
        int rc;
        if (strcmp(k, "min_rate") == 0) rc = num_field(c, field, v, &a->min_rate), have_min = true;
        else if (strcmp(k, "max_rate") == 0) rc = num_field(c, field, v, &a->max_rate), have_max = true;
        else if (strcmp(k, "decrease") == 0) rc = num_field(c, field, v, &a->decrease);
        else if (strcmp(k, "increase") == 0) rc = num_field(c, field, v, &a->increase);
        else if (strcmp(k, "high_error") == 0) rc = num_field(c, field, v, &a->high_error);
        else if (strcmp(k, "low_error") == 0) rc = num_field(c, field, v, &a->low_error);
        else if (strcmp(k, "window") == 0) rc = int_field(c, field, v, &a->window);
        else
            rc = fail(c->ls, SL_EINVAL,
                      "limits.%s.%s: unknown field (min_rate | max_rate | decrease | increase | "
                      "high_error | low_error | window)",
                      c->name, field);
        if (rc) return rc;
    }
    if (!have_min || !have_max)
        return fail(c->ls, SL_EINVAL, "limits.%s.adaptive.%s: required", c->name,
                    have_min ? "max_rate" : "min_rate");
    return SL_OK;
}

/* Arrays the config borrows until sl_limits_add copies them. */
typedef struct lists {
    sl_limit_cost_t costs[64];
    const char *parents[SL_LIMITS_MAX_LEVELS];
} lists_t;

static int costs_field(ctx_t *c, const json_t *obj, sl_limit_config_t *cfg, lists_t *lists)
{
    show(obj, c->val, sizeof c->val);
    if (!json_is_object(obj))
        return fail(c->ls, SL_EINVAL, "limits.%s.costs: %s, not an object {action: cost}", c->name, c->val);
    if (json_object_size(obj) > 64)
        return fail(c->ls, SL_EINVAL, "limits.%s.costs: %zu actions, more than 64", c->name,
                    json_object_size(obj));
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        char field[300];
        snprintf(field, sizeof field, "costs.%.256s", k);
        sl_limit_cost_t *e = &lists->costs[cfg->n_costs++];
        e->action = k;
        int rc = int_field(c, field, v, &e->cost);
        if (rc) return rc;
    }
    cfg->costs = lists->costs;
    return SL_OK;
}

static int parents_field(ctx_t *c, const json_t *arr, sl_limit_config_t *cfg, lists_t *lists)
{
    show(arr, c->val, sizeof c->val);
    if (!json_is_array(arr))
        return fail(c->ls, SL_EINVAL, "limits.%s.parents: %s, not a list of names", c->name, c->val);
    if (json_array_size(arr) > SL_LIMITS_MAX_LEVELS - 1)
        return fail(c->ls, SL_EINVAL, "limits.%s.parents: %zu names, more than %d", c->name,
                    json_array_size(arr), SL_LIMITS_MAX_LEVELS - 1);
    size_t i;
    const json_t *v;
    json_array_foreach((json_t *)arr, i, v) {
        show(v, c->val, sizeof c->val);
        if (!json_is_string(v))
            return fail(c->ls, SL_EINVAL, "limits.%s.parents[%zu]: %s, not a name", c->name, i, c->val);
        lists->parents[cfg->n_parents++] = json_string_value(v);
    }
    cfg->parents = lists->parents;
    return SL_OK;
}

int sl_limits_add_json(sl_limits_t *ls, const char *name, const json_t *obj)
{
    ctx_t c = {.ls = ls, .name = name ? name : ""};
    sl_limit_config_t cfg;
    lists_t lists;
    sl_limit_config_init(&cfg);
    show(obj, c.val, sizeof c.val);
    if (!json_is_object(obj))
        return fail(ls, SL_EINVAL, "limits.%s: %s, not an object", c.name, c.val);
    const json_t *alg = json_object_get(obj, "algorithm");
    int a = SL_LIMIT_TOKEN_BUCKET, rc;
    if (alg && (rc = enum_field(&c, "algorithm", alg, algo_name, SL_LIMIT_ALGORITHM_COUNT, &a))) return rc;
    cfg.algorithm = (sl_limit_algorithm_t)a;
    bool conc = cfg.algorithm == SL_LIMIT_CONCURRENCY, have_rate = false;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        int e = 0;
        rc = SL_OK;
        if (strcmp(k, "algorithm") == 0) continue;
        if (strcmp(k, "rate") == 0) rc = num_field(&c, k, v, &cfg.rate), have_rate = true;
        else if (strcmp(k, "period_s") == 0 && !conc) rc = num_field(&c, k, v, &cfg.period_s);
        else if (strcmp(k, "burst") == 0) {
            /* 0 is the struct's "default"; written out it is a mistake. */
            if (!(rc = num_field(&c, k, v, &cfg.burst)) && cfg.burst == 0)
                rc = fail(ls, SL_EINVAL, "limits.%s.burst: 0, not a whole number in 1..1e+09", c.name);
        }
        else if (strcmp(k, "ttl_s") == 0 && conc) rc = num_field(&c, k, v, &cfg.ttl_s);
        else if (strcmp(k, "max_keys") == 0) rc = int_field(&c, k, v, &cfg.max_keys);
        else if (strcmp(k, "per") == 0) {
            if (!(rc = enum_field(&c, k, v, per_name, SL_LIMIT_PER_KEY + 1, &e))) cfg.per = (sl_limit_per_t)e;
        } else if (strcmp(k, "on_limit") == 0) {
            if (!(rc = enum_field(&c, k, v, on_limit_name, SL_LIMIT_QUEUE + 1, &e)))
                cfg.on_limit = (sl_limit_on_limit_t)e;
        } else if (strcmp(k, "costs") == 0) rc = costs_field(&c, v, &cfg, &lists);
        else if (strcmp(k, "parents") == 0) rc = parents_field(&c, v, &cfg, &lists);
        else if (strcmp(k, "adaptive") == 0) rc = adaptive_field(&c, v, &cfg.adaptive);
        else if (strcmp(k, "period_s") == 0 || strcmp(k, "ttl_s") == 0)
            rc = fail(ls, SL_EINVAL, "limits.%s.%s: not used by %s", c.name, k,
                      sl_limit_algorithm_name(cfg.algorithm));
        else
            rc = fail(ls, SL_EINVAL,
                      "limits.%s.%.64s: unknown field (algorithm | rate | period_s | burst | per | "
                      "costs | parents | on_limit | adaptive | ttl_s | max_keys)",
                      c.name, k);
        if (rc) return rc;
    }
    if (!have_rate) return fail(ls, SL_EINVAL, "limits.%s.rate: required", c.name);
    return sl_limits_add(ls, name, &cfg);
}

int sl_limits_add_all_json(sl_limits_t *ls, const json_t *limits)
{
    if (!json_is_object(limits)) return fail(ls, SL_EINVAL, "limits: not a map of name -> limit");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)limits, k, v) {
        int rc = sl_limits_add_json(ls, k, v);
        if (rc) return rc;
    }
    return sl_limits_link(ls);
}
