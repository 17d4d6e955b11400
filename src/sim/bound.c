/* bound.c - the lower bounds: the critical path (the makespan of the fleet's ideal run)
 * and, from the same run's totals, one bound per provider bucket.
 *
 * The token bound (sl_sim_lower_bound_s) says how long the key needs for the
 * fleet's tokens; it ignores that tasks wait on tasks. The path bound is the other
 * half of "no schedule can do better": the longest dependency chain of the task
 * graph when every model call is served the moment it is wanted.
 *
 * Why a run of the simulator rather than a longest-path formula: a chain's length
 * depends on draws (test times, output sizes, loops of identical failures, start
 * offsets) that the simulator takes from per-agent streams no strategy changes, and
 * on the provider's cache and prefill rules. Replaying exactly those draws under the
 * same event loop, instead of re-deriving them here, keeps the bound true to the
 * model by construction. The ideal run differs from a real one in three ways only:
 *   - the provider has no limits (so no 429, no wait, no broken turn) and no
 *     outside traffic;
 *   - the strategy sends every call at once;
 *   - every latency is the shortest the provider can draw: ttft, prefill and
 *     streaming times x (1 - latency_spread), with no spread left.
 * A real run meets the same calls with waits >= 0, latencies >= these and caches
 * no warmer (its gaps between calls are no shorter), so its makespan is never below
 * the ideal run's: the bound holds for every strategy and seed.
 *
 * The bucket bounds. A real run bills at least the ideal run's totals: the same calls
 * (the repeat-failure turns too: they come from the same per-agent draws) plus any
 * broken turns' calls, the same outputs, and prefixes written at least as often (its
 * gaps between calls are no shorter, and a rebuilt context writes its prefix anew). A
 * bucket of size C refilled at C/60 per second has admitted at most C + C/60 x t by
 * time t (outside traffic only takes more), so the run's last call is admitted no
 * sooner than (total - C) / (C/60). For the output bucket, which holds max_tokens from
 * a call's start to its end: every call admitted before the last one holds at least
 * its output then, and the last needs its max_tokens (>= its output), so the same
 * bound holds with the outputs. After its last call the run still needs that call's
 * first token, the edit and the test that ends its task: no less than the least such time
 * over the tasks of the ideal run (same test draw, the shortest latency). Prefill is left
 * out, because a rebuilt context may make a real call's cache warmer than the ideal one's,
 * and so is the output's streaming, because the last call of a task may be the
 * continuation of an answer cut at a lowered max_tokens (sluice-learned, sim.c call_end),
 * which streams only the rest of it.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "strat_common.h"

/* What the ideal strategy keeps per agent, and reports into run->ctx. */
typedef struct ideal_state {
    double *sent_at_s;  /* admission of the agent's last call */
    double *after_ttft_s;  /* its prefill and streaming time (all but the time to first token) */
    sim_call_rec_t *calls; /* every call, in admission order, for the chain bound */
    size_t n_calls, cap_calls;
    bool calls_oom;
} ideal_state_t;

typedef struct ideal_report {
    double least_finish_s; /* +INFINITY until a task is done */
    int64_t input_tpm;     /* the chain bound's bucket (the summed limit) */
    double chain_s;        /* chain.c; -1 unless computed */
} ideal_report_t;

static int ideal_init(sim_run_t *run, char *err, size_t errlen)
{
    ideal_state_t *s = calloc(1, sizeof *s);
    size_t n = run->n_agents > 0 ? (size_t)run->n_agents : 1;
    if (s) {
        s->sent_at_s = calloc(n, sizeof *s->sent_at_s);
        s->after_ttft_s = calloc(n, sizeof *s->after_ttft_s);
    }
    if (!s || !s->sent_at_s || !s->after_ttft_s) {
        if (s) free(s->sent_at_s), free(s->after_ttft_s);
        free(s);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    run->sdata = s;
    return 0;
}

static void ideal_fini(sim_run_t *run)
{
    ideal_state_t *s = run->sdata;
    if (!s) return;
    ideal_report_t *rep = run->ctx;
    if (!run->failed && !s->calls_oom)
        rep->chain_s = sl__sim_chain_bound_s(run, s->calls, s->n_calls, rep->input_tpm);
    free(s->calls);
    free(s->sent_at_s);
    free(s->after_ttft_s);
    free(s);
    run->sdata = NULL;
}

static void ideal_want(sim_run_t *run, sim_agent_t *a)
{
    ideal_state_t *s = run->sdata;
    s->sent_at_s[a->idx] = run->now_s;
    sl__sim_send(run, a);
}

static void ideal_result(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    /* No spread in the ideal run: the call lasts ttft + prefill + streaming exactly. */
    ideal_state_t *s = run->sdata;
    double after_ttft_s = r->duration_s - run->sc->provider.ttft_s;
    s->after_ttft_s[a->idx] = after_ttft_s > 0 ? after_ttft_s : 0;
    if (s->n_calls == s->cap_calls && !s->calls_oom) {
        size_t cap = s->cap_calls ? 2 * s->cap_calls : 1024;
        sim_call_rec_t *calls = realloc(s->calls, cap * sizeof *calls);
        if (calls) s->calls = calls, s->cap_calls = cap;
        else s->calls_oom = true;
    }
    if (s->calls_oom) return;
    s->calls[s->n_calls++] = (sim_call_rec_t){
        .task = a->task0 + a->task_k,
        .sent_s = s->sent_at_s[a->idx],
        .stream_s = r->duration_s - run->sc->provider.ttft_s,
        .tokens = r->input_tokens + r->cache_creation_input_tokens,
    };
}

static void ideal_task_state(sim_run_t *run, int task, sl_task_state_t st)
{
    if (st != SL_TASK_DONE) return;
    ideal_state_t *s = run->sdata;
    ideal_report_t *rep = run->ctx;
    int agent = run->tasks[task].agent;
    double finish_s = run->now_s - s->sent_at_s[agent] - s->after_ttft_s[agent];
    if (finish_s < rep->least_finish_s) rep->least_finish_s = finish_s;
}

static double ideal_retry_delay(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    /* Unreachable: an unlimited provider never refuses. */
    (void)a, (void)r;
    sl__sim_fail(run, "the ideal run met a 429");
    return 1.0;
}

static const sim_strategy_t ideal = {
    .name = "ideal",
    .checkpoint = true,
    .init = ideal_init,
    .fini = ideal_fini,
    .want = ideal_want,
    .result = ideal_result,
    .retry_delay = ideal_retry_delay,
    .task_state = ideal_task_state,
};

/* The last call a bucket of `limit` per minute admits, `total` in all, plus the least
 * finish; -1 when the bucket is unlimited. */
static double bucket_bound_s(double total, int64_t limit, double least_finish_s)
{
    if (limit <= 0) return -1;
    double after_first_bucket = total - (double)limit; /* the bucket starts full */
    double admit_s = after_first_bucket > 0 ? after_first_bucket / ((double)limit / 60.0) : 0;
    return admit_s + least_finish_s;
}

int sl_sim_bounds(const sl_sim_scenario_t *sc, uint64_t seed, sl_sim_bounds_t *out)
{
    sl_sim_scenario_t x = *sc; /* shares the groups, read-only */
    x.n_keys = 0;              /* one unlimited provider serves every call at once */
    sl_provider_config_t *p = &x.provider;
    double fastest = 1.0 - p->latency_spread;
    p->input_tpm = p->output_tpm = p->rpm = p->tokens_tpm = 0;
    p->spend_cap_tokens = 0;
    p->outside_share = 0;
    p->overload_rate = p->stream_error_rate = 0;
    p->ttft_s *= fastest;
    p->prefill_tokens_per_s /= fastest; /* 0 (free prefill) stays 0 */
    p->output_tokens_per_s /= fastest;
    p->latency_spread = 0;
    /* No deadline: the chain's whole length, even beyond the scenario's duration. */
    x.duration_s = DBL_MAX;
    sl_sim_result_t r;
    char err[256];
    sl_provider_config_t limits;
    sl__sim_limits(sc, &limits);
    const sl_provider_config_t *lim = &limits;
    ideal_report_t rep = {.least_finish_s = INFINITY, .input_tpm = lim->input_tpm, .chain_s = -1};
    if (sl__sim_run_with(&x, &ideal, seed, NULL, &rep, &r, err, sizeof err) != 0 ||
        r.tasks_done != r.tasks_total) {
        if (r.tasks_done != r.tasks_total) sl_sim_result_free(&r);
        *out = (sl_sim_bounds_t){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
        return -1;
    }
    /* Several keys admit at most the sum of their buckets: the bound of one bucket of
     * the summed limit holds for them together (`limits` above). */
    double least = isfinite(rep.least_finish_s) ? rep.least_finish_s : 0;
    int64_t in = r.uncached_input_tokens, o = r.output_tokens;
    *out = (sl_sim_bounds_t){
        .token_s = sl_sim_lower_bound_s(sc),
        .path_s = r.makespan_s,
        .least_finish_s = least,
        .input_s = bucket_bound_s((double)in, lim->input_tpm, least),
        .output_s = bucket_bound_s((double)o, lim->output_tpm, least),
        .rpm_s = bucket_bound_s((double)r.requests, lim->rpm, least),
        .tokens_s = bucket_bound_s((double)(in + o), lim->tokens_tpm, least),
        .ideal_uncached_input_tokens = in,
        .ideal_output_tokens = o,
        .ideal_requests = r.requests,
        .chain_s = rep.chain_s,
    };
    sl_sim_result_free(&r);
    out->combined_s = out->path_s > out->token_s ? out->path_s : out->token_s;
    double parts[] = {out->path_s, out->input_s, out->output_s, out->rpm_s, out->tokens_s};
    out->tight_s = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i] > out->tight_s) out->tight_s = parts[i];
    /* Both hold, so the larger does: where the path binds, the chain term is below it. */
    if (out->chain_s >= 0 && out->chain_s < out->tight_s) out->chain_s = out->tight_s;
    return 0;
}

double sl_sim_path_bound_s(const sl_sim_scenario_t *sc, uint64_t seed)
{
    sl_sim_bounds_t b;
    return sl_sim_bounds(sc, seed, &b) == 0 ? b.path_s : -1;
}
