/* strat_common.h - the full-jitter backoff shared by simple strategies. */
#ifndef SLUICE_SIM_STRAT_COMMON_H
#define SLUICE_SIM_STRAT_COMMON_H

#include "sim_internal.h"

/* Full jitter, base 1 s, cap 120 s. */
double sl__sim_backoff_delay(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r);

#endif
