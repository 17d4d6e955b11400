/* strat_backoff.c - strategy "backoff": send at once; after a 429 sleep a full-jitter
 * exponential backoff (base 1 s, cap 120 s), the retry policy most fleets start with.
 * Its pieces are shared with "semaphore" and "rpm-counter", which add a gate in
 * front of the same backoff. */
#include "strat_common.h"

double sl__sim_backoff_delay(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    (void)run, (void)r;
    return sl__sim_full_jitter(a, 1.0, 120.0);
}

static void backoff_want(sim_run_t *run, sim_agent_t *a)
{
    sl__sim_send(run, a);
}

const sim_strategy_t sl__sim_backoff = {
    .name = "backoff",
    .want = backoff_want,
    .retry_delay = sl__sim_backoff_delay,
};
