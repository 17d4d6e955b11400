/* overlay_analysis.c - do the 429s follow the turns or the earlier 429s? Shares, chance, periods, verdict.
 *
 * The seed's test: if the 429 waves line up with the agents' turns (the work), no
 * backoff setting fixes them; if they line up with earlier 429s (the retries), a
 * better retry policy does. Both shares are counted in one pass so that each 429 has
 * one cause: a turn start is one call, whose first attempt gets at most one 429, so a
 * turn explains at most one 429 (the earliest after it); what is left within the
 * window after a retry (the agent's next call after its 429, when the log says when it
 * was made: one retry explains one 429 too) or after an earlier 429 is the retries'. The
 * retry matters when backoff is longer than the window: a 429 3-11 s after the one before
 * is no 429 "right after a 429", but it is right after the retry that waited those 3-11 s. Per agent when every point names one
 * (an event log, the simulator), else fleet-wide (two bare timestamp files), where a
 * wave of 429s also sits right after other 429s, which is why the turn match comes
 * first. A share means something only against what random times would get: the part
 * of the span the windows cover; a dense series of turns covers it all, and then its
 * share is no evidence, whatever its size.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "overlay.h"
#include "sim.h"

void sl_overlay_options_init(sl_overlay_options_t *o)
{
    o->window_s = 5.0;
    o->bin_s = 5.0;
    o->min_429s = 10;
    o->fleet = false;
}

static int by_time(const void *x, const void *y)
{
    const sl_overlay_point_t *a = x, *b = y;
    return a->t_s < b->t_s ? -1 : a->t_s > b->t_s;
}

static int by_agent_then_time(const void *x, const void *y)
{
    const sl_overlay_point_t *a = x, *b = y;
    int c = strcmp(a->agent, b->agent);
    return c ? c : by_time(x, y);
}

static void sort_points(sl_overlay_series_t *s, bool by_agent)
{
    if (s->n) qsort(s->p, s->n, sizeof *s->p, by_agent ? by_agent_then_time : by_time);
}

static bool all_named(const sl_overlay_series_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (!s->p[i].agent[0]) return false;
    return true;
}

/* The length covered by the union of [t, t + w] over sorted t[i] (all within the span),
 * cut at the span's `end`. */
static double covered_s(const sl_overlay_point_t *p, size_t n, double w, double end)
{
    double sum = 0, lo = 0, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double a = p[i].t_s, b = a + w > end ? end : a + w;
        if (a > hi) {
            if (hi > lo) sum += hi - lo;
            lo = a;
        }
        if (b > hi) hi = b;
    }
    if (hi > lo) sum += hi - lo;
    return sum;
}

/* The same-agent run of s starting at index i: [i, *end). */
static size_t run_end(const sl_overlay_series_t *s, size_t i, bool per_agent)
{
    size_t j = i + 1;
    if (!per_agent) return s->n;
    while (j < s->n && !strcmp(s->p[j].agent, s->p[i].agent)) j++;
    return j;
}

/* The earliest unclaimed point of p[*k..n) within [t - w, t]: claims it and returns true.
 * Points before t - w are passed over for good (the 429s come in time order). */
static bool claim(const sl_overlay_point_t *p, size_t n, size_t *k, double t, double w)
{
    while (*k < n && p[*k].t_s < t - w) ++*k;
    if (*k < n && p[*k].t_s <= t) {
        ++*k;
        return true;
    }
    return false;
}

/* Classifies the 429s e[0..ne) against the turns u[0..nu) and the retries q[0..nq) of one
 * agent (or the fleet): a turn, else a retry, each one call that explains one 429, else an
 * earlier 429 within the window. */
static void match_group(const sl_overlay_point_t *e, size_t ne, const sl_overlay_point_t *u,
                        size_t nu, const sl_overlay_point_t *q, size_t nq, double w,
                        sl_overlay_result_t *r)
{
    size_t k = 0, kq = 0; /* the earliest turn / retry not yet matched nor out of reach */
    for (size_t i = 0; i < ne; i++) {
        double t = e[i].t_s;
        if (claim(u, nu, &k, t, w)) {
            r->after_turn++;
            continue;
        }
        if (claim(q, nq, &kq, t, w)) {
            r->after_retry++;
            continue;
        }
        size_t j = i;
        while (j > 0 && e[j - 1].t_s >= t) j--;
        if (j > 0 && t - e[j - 1].t_s <= w) r->after_429++;
        else r->neither++;
    }
}

/* The part of the span covered by the windows after a[0..na) and b[0..nb) together (each
 * sorted by time): what random times would get for "after a 429 or a retry". */
static double covered_both_s(const sl_overlay_point_t *a, size_t na, const sl_overlay_point_t *b,
                             size_t nb, double w, double end)
{
    if (!nb) return covered_s(a, na, w, end);
    sl_overlay_point_t *m = malloc((na + nb) * sizeof *m);
    if (!m) return covered_s(a, na, w, end); /* out of memory: the 429s' part alone */
    size_t i = 0, j = 0, n = 0;
    while (i < na || j < nb)
        m[n++] = j == nb || (i < na && a[i].t_s <= b[j].t_s) ? a[i++] : b[j++];
    double c = covered_s(m, n, w, end);
    free(m);
    return c;
}

/* The [*from, *to) run of `s` of `agent` (both sorted by agent), from *from on; all of s
 * when not per agent. */
static void agent_run(const sl_overlay_series_t *s, bool per_agent, const char *agent,
                      size_t *from, size_t *to)
{
    if (!per_agent) {
        *from = 0;
        *to = s->n;
        return;
    }
    while (*from < s->n && strcmp(s->p[*from].agent, agent) < 0) ++*from;
    *to = *from;
    while (*to < s->n && !strcmp(s->p[*to].agent, agent)) ++*to;
}

static int period_of(const sl_overlay_series_t *s, const sl_overlay_options_t *opt,
                     const sl_overlay_result_t *r, sl_sim_period_t *out)
{
    size_t n = (size_t)floor((r->end_s - r->start_s) / opt->bin_s) + 1;
    double *counts = calloc(n, sizeof *counts);
    if (!counts) return -1;
    for (size_t i = 0; i < s->n; i++) {
        size_t b = (size_t)floor((s->p[i].t_s - r->start_s) / opt->bin_s);
        counts[b < n ? b : n - 1] += 1;
    }
    *out = sl_sim_dominant_period(counts, n, opt->bin_s);
    free(counts);
    return 0;
}

static bool convincing(double share, double chance, double other)
{
    return share >= 0.5 && share >= 1.5 * chance && share > other;
}

int sl_overlay_analyse(sl_overlay_series_t *errs, sl_overlay_series_t *turns,
                       sl_overlay_series_t *retries, const sl_overlay_options_t *opt,
                       sl_overlay_result_t *r)
{
    sl_overlay_series_t none = {0};
    if (!retries) retries = &none;
    memset(r, 0, sizeof *r);
    r->n_429 = errs->n;
    r->n_turns = turns->n;
    r->n_retries = retries->n;
    r->per_agent = !opt->fleet && errs->n && turns->n && all_named(errs) && all_named(turns) &&
                   all_named(retries);
    r->period_429_s = r->period_turn_s = -1;
    r->start_s = INFINITY;
    r->end_s = -INFINITY;
    for (int k = 0; k < 3; k++) {
        const sl_overlay_series_t *s = k == 0 ? errs : k == 1 ? turns : retries;
        for (size_t i = 0; i < s->n; i++) {
            if (s->p[i].t_s < r->start_s) r->start_s = s->p[i].t_s;
            if (s->p[i].t_s > r->end_s) r->end_s = s->p[i].t_s;
        }
    }
    if (!errs->n && !turns->n && !retries->n) r->start_s = r->end_s = 0;
    double span_s = r->end_s - r->start_s;
    sort_points(errs, r->per_agent);
    sort_points(turns, r->per_agent);
    sort_points(retries, r->per_agent);

    double chance_turn = 0, chance_429 = 0;
    size_t u0 = 0, u1 = 0, q0 = 0, q1 = 0;
    for (size_t i = 0; i < errs->n;) {
        size_t end = run_end(errs, i, r->per_agent);
        /* This 429 run's agent's turns and retries (every series is sorted by agent). */
        if (r->per_agent) u0 = u1, q0 = q1;
        agent_run(turns, r->per_agent, errs->p[i].agent, &u0, &u1);
        agent_run(retries, r->per_agent, errs->p[i].agent, &q0, &q1);
        match_group(errs->p + i, end - i, turns->p + u0, u1 - u0, retries->p + q0, q1 - q0,
                    opt->window_s, r);
        if (span_s > 0) {
            double n = (double)(end - i);
            chance_turn += n * covered_s(turns->p + u0, u1 - u0, opt->window_s, r->end_s) /
                           span_s;
            chance_429 += n *
                          covered_both_s(errs->p + i, end - i, retries->p + q0, q1 - q0,
                                         opt->window_s, r->end_s) /
                          span_s;
        }
        i = end;
    }
    if (r->n_429) {
        r->share_turn = (double)r->after_turn / (double)r->n_429;
        r->share_429 = (double)(r->after_429 + r->after_retry) / (double)r->n_429;
        r->chance_turn = chance_turn / (double)r->n_429;
        r->chance_429 = chance_429 / (double)r->n_429;
    }

    /* Periods on the time order, whatever the grouping above. */
    sort_points(errs, false);
    sort_points(turns, false);
    sl_sim_period_t p;
    if (period_of(errs, opt, r, &p) != 0) return -1;
    r->period_429_s = p.period_s;
    r->peak_429 = p.peak;
    r->min_lag_s = p.min_lag_s;
    r->max_lag_s = p.max_lag_s;
    if (period_of(turns, opt, r, &p) != 0) return -1;
    r->period_turn_s = p.period_s;
    r->peak_turn = p.peak;

    r->verdict = SL_OVERLAY_NO_PATTERN;
    if (r->n_429 >= (size_t)opt->min_429s) {
        if (convincing(r->share_turn, r->chance_turn, r->share_429))
            r->verdict = SL_OVERLAY_WORK;
        else if (convincing(r->share_429, r->chance_429, r->share_turn))
            r->verdict = SL_OVERLAY_RETRIES;
    }
    return 0;
}
