/* strat_naive.c - strategy "naive": send at once, retry a 429 after a fixed 1 s. */
#include "strat_common.h"

static void naive_want(sim_run_t *run, sim_agent_t *a)
{
    sl__sim_send(run, a);
}

static double naive_retry_delay(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    (void)run, (void)a, (void)r;
    return 1.0;
}

const sim_strategy_t sl__sim_naive = {
    .name = "naive",
    .want = naive_want,
    .retry_delay = naive_retry_delay,
};
