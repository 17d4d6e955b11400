/* bound.c - the critical-path bound: the makespan of the fleet's ideal run.
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
 */
#include <float.h>

#include "strat_common.h"

static void ideal_want(sim_run_t *run, sim_agent_t *a)
{
    sl__sim_send(run, a);
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
    .init = sl__sim_noop_init,
    .fini = sl__sim_noop_fini,
    .want = ideal_want,
    .timer = sl__sim_noop_agent,
    .give_up = sl__sim_noop_agent,
    .result = sl__sim_noop_result,
    .retry_delay = ideal_retry_delay,
};

double sl_sim_path_bound_s(const sl_sim_scenario_t *sc, uint64_t seed)
{
    sl_sim_scenario_t x = *sc; /* shares the groups, read-only */
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
    if (sl__sim_run_with(&x, &ideal, seed, NULL, &r, err, sizeof err) != 0) return -1;
    double path_s = r.tasks_done == r.tasks_total ? r.makespan_s : -1;
    sl_sim_result_free(&r);
    return path_s;
}
