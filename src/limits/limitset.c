/* limitset.c - the limit set: named limits, hierarchical checks all or nothing, release, report, sweep.
 *
 * A check runs in two phases, as the engine's grants do (sl__grant): first every
 * level (the limit, then its ancestors) is probed, which changes nothing; only when
 * all allow, and hits > 0, are the missing keys inserted and the logs grown (the
 * only steps that can fail, undone on failure), and then every level commits, which
 * cannot fail. So a deny, a peek and an error all leave the set exactly as it was.
 *
 * Memory: a limit tracks at most max_keys keys. A key whose state is at rest (it
 * answers exactly as a fresh key) may be forgotten; when a new key finds the limit
 * full, the limit is swept once, and if nothing was at rest the new key is denied
 * (reason max_keys) until the earliest tracked key comes to rest. */
#include "limits_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sl_limits {
    sl__limit_t **limits;
    size_t n, cap;
    bool linked;
    sl_limit_adapt_cb adapt_cb;
    void *adapt_user;
    char err[512];
};

int sl__limits_fail(sl_limits_t *ls, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ls->err, sizeof ls->err, fmt, ap);
    va_end(ap);
    return rc;
}

#define fail sl__limits_fail

double sl__rate(const sl__limit_t *l, const sl__kstate_t *s)
{
    return s->rate > 0 ? s->rate : l->cfg.rate;
}

bool sl__answer_count(sl__answer_t *a, int64_t limit, int64_t count, int64_t units)
{
    a->limit = limit;
    a->delay_us = 0;
    if (count + units <= limit) {
        a->reason = SL_LIMIT_ALLOWED;
        a->retry_after_us = 0;
        a->remaining = limit - count - units;
        return true;
    }
    a->remaining = limit > count ? limit - count : 0;
    a->reason = units > limit ? SL_LIMIT_NEVER : SL_LIMIT_RATE;
    a->retry_after_us = -1;
    return false;
}

int64_t sl__whole_rate(const sl__limit_t *l, const sl__kstate_t *s)
{
    int64_t r = (int64_t)floor(sl__rate(l, s));
    return r < 1 ? 1 : r;
}

int64_t sl__interval_us(const sl__limit_t *l, const sl__kstate_t *s)
{
    int64_t t = (int64_t)((double)l->period_us / sl__rate(l, s));
    return t < 1 ? 1 : t;
}

int64_t sl__ceil_us(double us)
{
    if (!(us > 0)) return 0;
    double c = ceil(us - 1e-6); /* a rounding error of a nanosecond is not a whole µs */
    return c < 0 ? 0 : (int64_t)c;
}

sl_limits_t *sl_limits_new(void)
{
    return calloc(1, sizeof(sl_limits_t));
}

void sl_limits_free(sl_limits_t *ls)
{
    if (!ls) return;
    for (size_t i = 0; i < ls->n; i++) sl__limit_free(ls->limits[i]);
    free(ls->limits);
    free(ls);
}

const char *sl_limits_errmsg(const sl_limits_t *ls)
{
    return ls->err;
}

static sl__limit_t *find(const sl_limits_t *ls, const char *name)
{
    for (size_t i = 0; i < ls->n; i++)
        if (strcmp(ls->limits[i]->name, name) == 0) return ls->limits[i];
    return NULL;
}

int sl_limits_add(sl_limits_t *ls, const char *name, const sl_limit_config_t *cfg)
{
    ls->err[0] = '\0';
    if (ls->linked) return fail(ls, SL_EALREADY, "limits: the set is linked; add before sl_limits_link");
    int rc = sl__limit_validate(name, cfg, ls->err, sizeof ls->err);
    if (rc) return rc;
    if (find(ls, name)) return fail(ls, SL_EEXIST, "limits.%s: defined twice", name);
    if (ls->n == ls->cap) {
        size_t cap = ls->cap ? ls->cap * 2 : 8;
        sl__limit_t **v = realloc(ls->limits, cap * sizeof *v);
        if (!v) return fail(ls, SL_ENOMEM, "limits.%s: out of memory", name);
        ls->limits = v;
        ls->cap = cap;
    }
    sl__limit_t *l = sl__limit_new(name, cfg);
    if (!l) return fail(ls, SL_ENOMEM, "limits.%s: out of memory", name);
    ls->limits[ls->n++] = l;
    return SL_OK;
}

/* Depth-first: 0 unvisited, 1 on the path, 2 done. Reports the first cycle. */
static int visit(sl_limits_t *ls, sl__limit_t *l, char *mark, size_t idx)
{
    mark[idx] = 1;
    for (size_t p = 0; p < l->cfg.n_parents; p++) {
        sl__limit_t *parent = find(ls, l->parent_names[p]);
        if (!parent)
            return fail(ls, SL_EINVAL, "limits.%s.parents: unknown limit \"%s\"", l->name,
                        l->parent_names[p]);
        size_t j = 0;
        while (ls->limits[j] != parent) j++;
        if (mark[j] == 1)
            return fail(ls, SL_EINVAL, "limits.%s.parents: \"%s\" makes a cycle", l->name,
                        parent->name);
        if (mark[j] == 0) {
            int rc = visit(ls, parent, mark, j);
            if (rc) return rc;
        }
    }
    mark[idx] = 2;
    return SL_OK;
}

/* Breadth-first from l: itself, its parents, theirs; each limit once. */
static int closure(sl_limits_t *ls, sl__limit_t *l)
{
    l->levels[0] = l;
    l->n_levels = 1;
    for (size_t i = 0; i < l->n_levels; i++) {
        sl__limit_t *at = l->levels[i];
        for (size_t p = 0; p < at->cfg.n_parents; p++) {
            sl__limit_t *parent = find(ls, at->parent_names[p]);
            bool seen = false;
            for (size_t j = 0; j < l->n_levels; j++) seen = seen || l->levels[j] == parent;
            if (seen) continue;
            if (l->n_levels == SL_LIMITS_MAX_LEVELS)
                return fail(ls, SL_EINVAL, "limits.%s.parents: more than %d levels with ancestors",
                            l->name, SL_LIMITS_MAX_LEVELS);
            l->levels[l->n_levels++] = parent;
        }
    }
    return SL_OK;
}

int sl_limits_link(sl_limits_t *ls)
{
    ls->err[0] = '\0';
    if (ls->linked) return fail(ls, SL_EALREADY, "limits: already linked");
    char *mark = calloc(ls->n + 1, 1);
    if (!mark) return fail(ls, SL_ENOMEM, "limits: out of memory");
    int rc = SL_OK;
    for (size_t i = 0; i < ls->n && !rc; i++)
        if (mark[i] == 0) rc = visit(ls, ls->limits[i], mark, i);
    free(mark);
    for (size_t i = 0; i < ls->n && !rc; i++) rc = closure(ls, ls->limits[i]);
    if (!rc) ls->linked = true;
    return rc;
}

void sl_limits_set_adapt_cb(sl_limits_t *ls, sl_limit_adapt_cb cb, void *user)
{
    ls->adapt_cb = cb;
    ls->adapt_user = user;
}

int sl_limits_move_state(sl_limits_t *dst, sl_limits_t *src, const char *name)
{
    sl__limit_t *to = find(dst, name), *from = find(src, name);
    if (!to || !from) return SL_ENOTFOUND;
    sl__kmap_free(&to->keys);
    to->keys = from->keys;
    to->no_rest_until_us = from->no_rest_until_us;
    memset(&from->keys, 0, sizeof from->keys);
    from->no_rest_until_us = 0;
    return SL_OK;
}

size_t sl_limits_count(const sl_limits_t *ls)
{
    return ls->n;
}

const char *sl_limits_name_at(const sl_limits_t *ls, size_t i)
{
    return i < ls->n ? ls->limits[i]->name : NULL;
}

int sl_limits_config(const sl_limits_t *ls, const char *name, const sl_limit_config_t **cfg,
                     size_t *keys)
{
    const sl__limit_t *l = find(ls, name);
    if (!l) return SL_ENOTFOUND;
    if (cfg) *cfg = &l->cfg;
    if (keys) *keys = l->keys.len;
    return SL_OK;
}

/* ---- one level of a check ---- */

typedef struct level {
    sl__limit_t *l;
    const char *key;
    sl__knode_t *node;
    int64_t now_us; /* the call's time, or the later one the key already saw */
    int64_t units;
    bool inserted;
    sl__answer_t a;
} level_t;

static const sl__kstate_t FRESH = {.fresh = true};

static int check_name(sl_limits_t *ls, const char *field, const char *s)
{
    size_t n = strlen(s);
    if (n == 0) return fail(ls, SL_EINVAL, "%s: empty", field);
    if (n > SL_LIMITS_MAX_NAME) /* the value's start and its length: it may be huge */
        return fail(ls, SL_EINVAL, "%s: longer than %d bytes ('%.32s...', %zu bytes)", field,
                    SL_LIMITS_MAX_NAME, s, n);
    return SL_OK;
}

static int key_of(sl_limits_t *ls, const sl__limit_t *l, const sl_limit_request_t *req,
                  const char **key)
{
    static const char *const FIELD[] = {"agent", "team", NULL, "key"};
    const char *v = l->cfg.per == SL_LIMIT_PER_AGENT  ? req->agent
                    : l->cfg.per == SL_LIMIT_PER_TEAM ? req->team
                    : l->cfg.per == SL_LIMIT_PER_KEY  ? req->key
                                                      : "*";
    if (!v)
        return fail(ls, SL_EINVAL, "%s: required by limit \"%s\" (per: %s)", FIELD[l->cfg.per],
                    l->name, sl_limit_per_name(l->cfg.per));
    *key = v;
    return l->cfg.per == SL_LIMIT_PER_GLOBAL ? SL_OK : check_name(ls, FIELD[l->cfg.per], v);
}

static int64_t cost_of(const sl__limit_t *l, const char *action)
{
    if (action)
        for (size_t i = 0; i < l->cfg.n_costs; i++)
            if (strcmp(l->costs[i].action, action) == 0) return l->costs[i].cost;
    return 1;
}

static bool key_at_rest(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us)
{
    if (l->cfg.adaptive.enabled && s->rate > 0 && s->rate != l->cfg.rate) return false;
    return l->algo->at_rest(l, s, now_us);
}

/* Forgets every at-rest key of one limit; when none was, notes when the first could be. */
static size_t sweep_limit(sl__limit_t *l, int64_t now_us)
{
    size_t freed = 0;
    int64_t soonest = INT64_MAX;
    for (size_t i = 0; i < l->keys.cap;) {
        sl__knode_t *node = l->keys.slots[i].val;
        if (!node) {
            i++;
            continue;
        }
        if (key_at_rest(l, &node->state, now_us)) {
            sl__kmap_remove_at(&l->keys, i); /* a later node may now sit at i */
            freed++;
            continue;
        }
        if (!l->cfg.adaptive.enabled || node->state.rate <= 0 || node->state.rate == l->cfg.rate) {
            sl__answer_t a;
            l->algo->probe(l, &node->state, 0, now_us, &a);
            int64_t at = now_us + (a.reset_after_us > 0 ? a.reset_after_us : 1);
            if (at < soonest) soonest = at;
        }
        i++;
    }
    l->no_rest_until_us = freed ? 0 : soonest;
    return freed;
}

size_t sl_limits_sweep(sl_limits_t *ls, int64_t now_us)
{
    size_t freed = 0;
    for (size_t i = 0; i < ls->n; i++) freed += sweep_limit(ls->limits[i], now_us);
    return freed;
}

/* Can a new key get state in l now? Sweeps once when full. */
static bool has_room(sl__limit_t *l, int64_t now_us)
{
    if ((int64_t)l->keys.len < l->cfg.max_keys) return true;
    if (now_us >= l->no_rest_until_us) sweep_limit(l, now_us);
    return (int64_t)l->keys.len < l->cfg.max_keys;
}

static int64_t effective_now(const sl__knode_t *node, int64_t now_us)
{
    return node && node->state.seen_us > now_us ? node->state.seen_us : now_us;
}

static void saw(sl__kstate_t *s, int64_t now_us)
{
    if (now_us > s->seen_us) s->seen_us = now_us;
}

static int resolve(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                   int64_t now_us, level_t *lv, size_t *n)
{
    ls->err[0] = '\0';
    if (!ls->linked) return fail(ls, SL_EINVAL, "limits: not linked (sl_limits_link)");
    sl__limit_t *l = find(ls, name);
    if (!l) return fail(ls, SL_ENOTFOUND, "limit \"%s\": not configured", name);
    if (req->hits < 0 || req->hits > SL_LIMITS_MAX_HITS)
        return fail(ls, SL_EINVAL, "hits: %lld out of range (0..%lld)", (long long)req->hits,
                    (long long)SL_LIMITS_MAX_HITS);
    if (req->action) {
        int rc = check_name(ls, "action", req->action);
        if (rc) return rc;
    }
    *n = l->n_levels;
    for (size_t i = 0; i < l->n_levels; i++) {
        memset(&lv[i], 0, sizeof lv[i]);
        lv[i].l = l->levels[i];
        int rc = key_of(ls, lv[i].l, req, &lv[i].key);
        if (rc) return rc;
        lv[i].node = sl__kmap_find(&lv[i].l->keys, lv[i].key);
        lv[i].now_us = effective_now(lv[i].node, now_us);
        lv[i].units = req->hits * cost_of(lv[i].l, req->action);
    }
    return SL_OK;
}

static void fill_level(const level_t *lv, sl_limit_level_t *out)
{
    const sl__kstate_t *s = lv->node ? &lv->node->state : &FRESH;
    out->limit_name = lv->l->name;
    out->key = lv->key;
    out->reason = lv->a.reason;
    out->limit = lv->a.limit;
    out->remaining = lv->a.remaining;
    out->retry_after_us = lv->a.retry_after_us;
    out->reset_after_us = lv->a.reset_after_us;
    out->delay_us = lv->a.delay_us;
    out->cost = lv->units;
    out->rate = sl__rate(lv->l, s);
}

/* Is level a more restrictive than b (denied: longer retry, -1 longest; else fewer left)? */
static bool tighter(const sl_limit_level_t *a, const sl_limit_level_t *b, bool denied)
{
    if (denied) {
        if (b->retry_after_us < 0) return false;
        return a->retry_after_us < 0 || a->retry_after_us > b->retry_after_us;
    }
    return a->remaining < b->remaining;
}

static void assemble(level_t *lv, size_t n, sl_limit_result_t *out)
{
    memset(out, 0, sizeof *out);
    out->allowed = true;
    out->n_checked = n;
    for (size_t i = 0; i < n; i++) {
        fill_level(&lv[i], &out->checked[i]);
        if (lv[i].a.reason != SL_LIMIT_ALLOWED) out->allowed = false;
        if (lv[i].a.delay_us > out->delay_us) out->delay_us = lv[i].a.delay_us;
    }
    size_t top = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (!out->allowed && out->checked[i].reason == SL_LIMIT_ALLOWED) continue;
        if (top == SIZE_MAX || tighter(&out->checked[i], &out->checked[top], !out->allowed)) top = i;
    }
    const sl_limit_level_t *t = &out->checked[top];
    out->top = top;
    out->denied_by = out->allowed ? -1 : (int)top;
    out->limit = t->limit;
    out->remaining = t->remaining;
    out->retry_after_us = t->retry_after_us;
    out->reset_after_us = t->reset_after_us;
    if (!out->allowed) out->delay_us = 0; /* nothing will run */
}

/* Probes every level; `taking` (hits > 0) also needs room for new keys. */
static void probe_levels(level_t *lv, size_t n, bool taking)
{
    for (size_t i = 0; i < n; i++) {
        sl__limit_t *l = lv[i].l;
        const sl__kstate_t *s = lv[i].node ? &lv[i].node->state : &FRESH;
        int64_t now_us = lv[i].now_us;
        l->algo->probe(l, s, lv[i].units, now_us, &lv[i].a);
        if (lv[i].units == 0 && lv[i].a.reason != SL_LIMIT_ALLOWED) {
            /* Nothing asked, nothing to refuse: a level above a rate that adapted down. */
            lv[i].a.reason = SL_LIMIT_ALLOWED;
            lv[i].a.retry_after_us = 0;
        }
        if (taking && !lv[i].node && lv[i].units > 0 && lv[i].a.reason == SL_LIMIT_ALLOWED &&
            !has_room(l, now_us)) {
            lv[i].a.reason = SL_LIMIT_MAX_KEYS;
            lv[i].a.retry_after_us =
                l->no_rest_until_us == INT64_MAX ? -1 : l->no_rest_until_us - now_us;
        }
    }
}

static void undo_inserts(level_t *lv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!lv[i].inserted) continue;
        sl__kmap_remove_at(&lv[i].l->keys, sl__kmap_slot_of(&lv[i].l->keys, lv[i].node));
        lv[i].node = NULL;
        lv[i].inserted = false;
    }
}

/* Inserts missing keys and grows logs; undoes the inserts when one step fails. */
static int reserve_levels(sl_limits_t *ls, level_t *lv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (lv[i].units == 0) continue;
        sl__limit_t *l = lv[i].l;
        if (!lv[i].node) {
            lv[i].node = sl__kmap_insert(&l->keys, lv[i].key);
            if (!lv[i].node) goto nomem;
            lv[i].inserted = true;
        }
        if (l->algo->reserve(l, &lv[i].node->state, lv[i].now_us) != SL_OK) goto nomem;
    }
    return SL_OK;
nomem:
    undo_inserts(lv, n);
    return fail(ls, SL_ENOMEM, "limits: out of memory");
}

static int run_check(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                     int64_t now_us, sl_limit_result_t *out, bool commit)
{
    level_t lv[SL_LIMITS_MAX_LEVELS];
    size_t n = 0;
    int rc = resolve(ls, name, req, now_us, lv, &n);
    if (rc) return rc;
    /* A probe asks for room too (a sweep forgets only keys that answer as fresh ones),
     * so it answers what the check would. */
    probe_levels(lv, n, req->hits > 0);
    assemble(lv, n, out);
    if (!out->allowed || !commit || req->hits == 0) return SL_OK;
    rc = reserve_levels(ls, lv, n);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        if (lv[i].units == 0) continue;
        lv[i].l->algo->commit(lv[i].l, &lv[i].node->state, lv[i].units, lv[i].now_us);
        saw(&lv[i].node->state, lv[i].now_us);
    }
    return SL_OK;
}

int sl_limits_check(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                    int64_t now_us, sl_limit_result_t *out)
{
    return run_check(ls, name, req, now_us, out, true);
}

int sl_limits_probe(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                    int64_t now_us, sl_limit_result_t *out)
{
    return run_check(ls, name, req, now_us, out, false);
}

int sl_limits_when(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                   int64_t now_us, int64_t *at_us)
{
    sl_limit_result_t r;
    int rc = run_check(ls, name, req, now_us, &r, false);
    if (rc) return rc;
    if (r.allowed) {
        *at_us = now_us;
        return SL_OK;
    }
    if (r.retry_after_us < 0)
        return fail(ls, SL_ECAPACITY, "hits: %lld x cost %lld exceeds limit \"%s\" (%lld)",
                    (long long)req->hits,
                    (long long)(req->hits ? r.checked[r.top].cost / req->hits : 0),
                    r.checked[r.top].limit_name, (long long)r.checked[r.top].limit);
    *at_us = now_us + r.retry_after_us;
    return SL_OK;
}

/* The limit `name` alone, at the request's key. */
static int one_level(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                     int64_t now_us, level_t *lv);

int sl__limits_levels(sl_limits_t *ls, const char *name, const sl_limit_request_t *req, bool one,
                      sl__limit_t **lim, const char **keys, int64_t *units, size_t *n)
{
    level_t lv[SL_LIMITS_MAX_LEVELS];
    int rc = one ? one_level(ls, name, req, 0, lv) : resolve(ls, name, req, 0, lv, n);
    if (rc) return rc;
    if (one) *n = 1;
    for (size_t i = 0; i < *n; i++) {
        lim[i] = lv[i].l;
        keys[i] = lv[i].key;
        units[i] = one ? 0 : lv[i].units;
    }
    return SL_OK;
}

sl__limit_t *sl__limits_at(const sl_limits_t *ls, size_t i)
{
    return i < ls->n ? ls->limits[i] : NULL;
}

sl__limit_t *sl__limits_find(const sl_limits_t *ls, const char *name)
{
    return find(ls, name);
}

/* The limit `name` alone, at the request's key. */
static int one_level(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                     int64_t now_us, level_t *lv)
{
    ls->err[0] = '\0';
    memset(lv, 0, sizeof *lv);
    lv->l = find(ls, name);
    if (!lv->l) return fail(ls, SL_ENOTFOUND, "limit \"%s\": not configured", name);
    int rc = key_of(ls, lv->l, req, &lv->key);
    if (rc) return rc;
    lv->node = sl__kmap_find(&lv->l->keys, lv->key);
    lv->now_us = effective_now(lv->node, now_us);
    return SL_OK;
}

int sl__limits_release_ok(sl_limits_t *ls, const sl__limit_t *l)
{
    if (l->cfg.algorithm == SL_LIMIT_CONCURRENCY) return SL_OK;
    return fail(ls, SL_EINVAL, "limit \"%s\": algorithm %s has nothing to release", l->name,
                sl_limit_algorithm_name(l->cfg.algorithm));
}

int sl__limits_report_ok(sl_limits_t *ls, const sl__limit_t *l, int64_t successes, int64_t errors)
{
    if (!l->cfg.adaptive.enabled) return fail(ls, SL_EINVAL, "limit \"%s\": not adaptive", l->name);
    if (successes < 0 || successes > SL_LIMITS_MAX_HITS)
        return fail(ls, SL_EINVAL, "successes: %lld out of range (0..%lld)", (long long)successes,
                    (long long)SL_LIMITS_MAX_HITS);
    if (errors < 0 || errors > SL_LIMITS_MAX_HITS)
        return fail(ls, SL_EINVAL, "errors: %lld out of range (0..%lld)", (long long)errors,
                    (long long)SL_LIMITS_MAX_HITS);
    if (successes + errors == 0 || successes + errors > SL_LIMITS_MAX_HITS)
        return fail(ls, SL_EINVAL, "successes + errors: %lld, not in 1..%lld",
                    (long long)(successes + errors), (long long)SL_LIMITS_MAX_HITS);
    return SL_OK;
}

int sl_limits_release(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                      int64_t now_us)
{
    level_t lv;
    int rc = one_level(ls, name, req, now_us, &lv);
    if (rc) return rc;
    rc = sl__limits_release_ok(ls, lv.l);
    if (rc) return rc;
    if (!lv.node || sl__concurrency_release(&lv.node->state, lv.now_us) != SL_OK)
        return fail(ls, SL_ENOTFOUND, "limit \"%s\" key \"%s\": no live hold", name, lv.key);
    saw(&lv.node->state, lv.now_us);
    return SL_OK;
}

int sl_limits_report(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                     int64_t successes, int64_t errors, int64_t now_us, double *rate_out)
{
    level_t lv;
    int rc = one_level(ls, name, req, now_us, &lv);
    if (rc) return rc;
    sl__limit_t *l = lv.l;
    rc = sl__limits_report_ok(ls, l, successes, errors);
    if (rc) return rc;
    if (!lv.node) {
        if (!has_room(l, now_us))
            return fail(ls, SL_ECAPACITY, "limit \"%s\": %lld keys tracked (max_keys), none at rest",
                        name, (long long)l->cfg.max_keys);
        lv.node = sl__kmap_insert(&l->keys, lv.key);
        if (!lv.node) return fail(ls, SL_ENOMEM, "limits: out of memory");
        lv.inserted = true;
    }
    sl__kstate_t *s = &lv.node->state;
    if (sl__adaptive_reserve(l, s) != SL_OK) {
        undo_inserts(&lv, 1);
        return fail(ls, SL_ENOMEM, "limits: out of memory");
    }
    double old_rate = sl__rate(l, s), er = 0;
    double new_rate = sl__adaptive_report(l, s, successes, errors, &er);
    if (new_rate != old_rate) {
        s->rate = new_rate;
        l->algo->rescale(l, s, old_rate, lv.now_us);
        if (ls->adapt_cb) {
            sl_limit_adapt_event_t ev = {.limit = l->name, .key = lv.key, .old_rate = old_rate,
                                         .new_rate = new_rate, .error_rate = er,
                                         .window_outcomes = s->outcomes.n};
            ls->adapt_cb(&ev, ls->adapt_user);
        }
    } else if (s->rate <= 0) {
        s->rate = old_rate;
    }
    saw(s, lv.now_us);
    if (rate_out) *rate_out = new_rate;
    return SL_OK;
}

int sl_limits_key_info(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                       int64_t now_us, sl_limit_key_info_t *info)
{
    level_t lv;
    int rc = one_level(ls, name, req, now_us, &lv);
    if (rc) return rc;
    const sl__kstate_t *s = lv.node ? &lv.node->state : &FRESH;
    lv.l->algo->probe(lv.l, s, 0, lv.now_us, &lv.a);
    memset(info, 0, sizeof *info);
    info->tracked = lv.node != NULL;
    fill_level(&lv, &info->level);
    if (lv.l->cfg.algorithm == SL_LIMIT_CONCURRENCY) info->held = sl__concurrency_held(s, lv.now_us);
    return SL_OK;
}

const char *sl_limit_reason_name(sl_limit_reason_t r)
{
    switch (r) {
    case SL_LIMIT_ALLOWED:
        return "allowed";
    case SL_LIMIT_RATE:
        return "rate";
    case SL_LIMIT_NEVER:
        return "never";
    case SL_LIMIT_MAX_KEYS:
        return "max_keys";
    }
    return "unknown";
}
