/* strat_sdk.c - strategy "sdk-retry": what the official SDKs do by default. Send at
 * once; after a 429 wait the provider's retry-after (Anthropic's TypeScript SDK
 * honours any positive value; without one, 0.5 s x 2^n capped at 8 s, minus up to
 * 25% jitter) and retry, twice (maxRetries 2); a third 429 reaches the harness at once
 * and breaks the turn. The other retry strategies break the turn at the first 429,
 * after their delay. During a broken turn's recovery every 429 is retried after its
 * retry-after. */
#include "strat_common.h"

static void sdk_want(sim_run_t *run, sim_agent_t *a)
{
    sl__sim_send(run, a);
}

static double sdk_retry_delay(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    /* The retries are spent: the SDK throws at once and the turn breaks now. */
    if (!a->recovering && a->attempts > run->strat->retries_in_turn) return 0;
    if (r->retry_after_s > 0) return r->retry_after_s;
    int n = a->attempts > 0 ? a->attempts - 1 : 0;
    double s = n >= 4 ? 8.0 : 0.5 * (double)(1u << n);
    if (s > 8.0) s = 8.0;
    return s * (1.0 - 0.25 * sl_rng_uniform(&a->retry_rng));
}

const sim_strategy_t sl__sim_sdk_retry = {
    .name = "sdk-retry",
    .retries_in_turn = 2,
    .want = sdk_want,
    .retry_delay = sdk_retry_delay,
};
