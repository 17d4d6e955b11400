/* strat_common.h - no-op hooks and the full-jitter backoff shared by simple strategies. */
#ifndef SLUICE_SIM_STRAT_COMMON_H
#define SLUICE_SIM_STRAT_COMMON_H

#include "sim_internal.h"

int sl__sim_noop_init(sim_run_t *run, char *err, size_t errlen);
void sl__sim_noop_fini(sim_run_t *run);
void sl__sim_noop_agent(sim_run_t *run, sim_agent_t *a);
void sl__sim_noop_result(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r);
/* Full jitter, base 1 s, cap 120 s. */
double sl__sim_backoff_delay(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r);

#endif
