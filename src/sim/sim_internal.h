/* sim_internal.h - the simulator's run state, agents and the strategy interface. */
#ifndef SLUICE_SIM_INTERNAL_H
#define SLUICE_SIM_INTERNAL_H

#include "sim.h"
#include "sluice/engine.h"

/* Where an agent is in its loop. */
typedef enum sim_phase {
    PH_BLOCKED = 0, /* its next task waits on other tasks */
    PH_READ,        /* reading files before the first call of a task */
    PH_WANT,        /* wants to send a call; the strategy decides when */
    PH_CALL,        /* a call is in flight */
    PH_EDIT,        /* applying the edit a call proposed */
    PH_TEST,        /* running the tests */
    PH_RETRY,       /* sleeping after a 429 */
    PH_RECOVER_READ, /* broken turn: re-reading files */
    PH_RECOVER_TEST, /* broken turn: re-running tests */
    PH_DONE,        /* every task finished */
} sim_phase_t;

typedef struct sim_agent {
    int idx;
    char name[96];
    const sl_sim_group_t *g;
    int team;
    sl_rng_t work_rng;   /* workload draws: same stream under every strategy */
    sl_rng_t retry_rng;  /* jitter, re-plan size and recovery outputs */
    int task0;           /* index of its first task in run->tasks */
    int task_k;          /* current task (0..g->tasks-1) */
    int turn;            /* calls of the current task that made progress */
    sim_phase_t phase;
    uint32_t gen;        /* bumped on leaving PH_WANT; stale timers are ignored */
    /* The call it is trying to make. */
    int64_t call_prefix, call_tail, call_output; /* true (tokenizer) counts */
    int64_t send_max_tokens; /* > 0: the max_tokens the strategy sends (a call capped to
                                its lease, as the proxy forwards it); 0: the group's */
    uint64_t cache_epoch; /* bumped when the context is rebuilt (broken turn) */
    int attempts;        /* 429s on the current call */
    double want_since;   /* first attempt of the current call */
    bool recovering;
    int recovery_calls_left;
    int64_t saved_prefix, saved_tail, saved_output; /* the turn call to resume */
    bool in_loop;        /* repeating an identical failure */
    int loop_id;
    bool fail_sig_pending; /* the next settle reports fail_sig */
    char fail_sig[128];
    sl_provider_result_t res;
    /* Strategy state. */
    uint64_t lease, ticket;
    bool sem_queued, sem_slot;
    bool rpm_reserved;
    int sem_next;        /* FIFO link of the semaphore queue (-1 = none) */
    int prefix_written_k; /* the task whose prefix it last wrote to the cache (-1: none) */
    int key;              /* the key (run->providers) its next call goes to: the strategy's
                             choice (sluice: sl_keys_pick), else its index mod the keys */
} sim_agent_t;

typedef struct sim_task {
    char id[128];
    int agent;
    int k;
    int *deps;            /* task indices */
    int n_deps;
    int deps_left;
    int *dependents;
    int n_dependents;
    int other_dependents; /* dependents run by other agents */
    int waiting_dependents; /* of those, not started yet */
    sl_task_state_t state;
    double ready_s, done_s;
} sim_task_t;

typedef struct sim_event {
    double t;
    uint64_t seq;
    int kind;
    int agent;
    uint32_t gen;
} sim_event_t;

typedef struct sim_run sim_run_t;

/* A strategy: how an agent gets to send a call and what it does after a 429.
 * Every hook gets the run; `now` is run->now_s. */
typedef struct sim_strategy {
    const char *name;
    bool checkpoint;      /* waits and 429s never break a turn */
    bool remote_wait;     /* waits are answers from a coordinator (QUEUED/REJECT) that the
                             harness times out on; local gates (a semaphore, a counter)
                             wait before the call starts, unseen by its timeout */
    int retries_in_turn;  /* 429s on one call retried within the turn before it breaks
                             (the SDKs' maxRetries); 0 = the first 429 breaks it */
    /* Optional (NULL: nothing to do, the same for the other hooks marked so): sets up the
     * strategy's state before the first agent starts; non-zero fails the run (err says why). */
    int (*init)(sim_run_t *run, char *err, size_t errlen);
    /* Optional: frees the strategy's state. */
    void (*fini)(sim_run_t *run);
    /* The agent (PH_WANT) wants to send its call: call sl__sim_send() now, or later
     * from a timer or a wakeup. */
    void (*want)(sim_run_t *run, sim_agent_t *a);
    /* Optional: a strategy timer scheduled with sl__sim_timer() fired while the agent still
     * waits. */
    void (*timer)(sim_run_t *run, sim_agent_t *a);
    /* Optional: the harness gave up waiting (no checkpoint): drop the agent's place. */
    void (*give_up)(sim_run_t *run, sim_agent_t *a);
    /* Optional: the provider's answer to a call starts (a 429's at once): its headers are
     * written now, while the call's max_tokens is still held upstream. Before result. */
    void (*started)(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r);
    /* Optional: a call's outcome: a 429 (at once) or the end of an admitted call. */
    void (*result)(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r);
    /* Seconds to sleep after a 429 before trying again. */
    double (*retry_delay)(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r);
    /* Optional: the strategy's own next wakeup (+INFINITY = none) and its handler. */
    double (*next_wakeup)(sim_run_t *run);
    void (*wakeup)(sim_run_t *run);
    /* Optional: a task changed state. */
    void (*task_state)(sim_run_t *run, int task, sl_task_state_t st);
} sim_strategy_t;

struct sim_run {
    const sl_sim_scenario_t *sc;
    const sim_strategy_t *strat;
    void *sdata;          /* the strategy's own state */
    void *ctx;            /* the caller's, for a strategy to report into (bound.c) */
    uint64_t seed;
    double now_s;
    sl_provider_t *provider; /* providers[0] */
    sl_provider_t *providers[SL_SIM_KEYS_MAX]; /* one per key of the scenario */
    int n_providers;
    sim_agent_t *agents;
    int n_agents;
    sim_task_t *tasks;
    int n_tasks;
    int tasks_done;
    sim_event_t *heap;
    size_t heap_n, heap_cap;
    uint64_t seq;
    FILE *events;
    bool failed;
    char err[256];
    /* Accounting. */
    sl_sim_result_t *res;
    size_t bins_cap;
    int64_t waiting;
    double *task_times;
    double crit_wait_s;
    /* Teams (teams.c). */
    int *team_waiting;     /* [teams]: its agents waiting to send a call */
    int teams_backlogged;  /* teams with an agent waiting */
    double all_since;      /* when every team became backlogged; < 0 = not now */
};

/* teams.c: the backlog and service of each team, for sl_sim_team_stat_t. */
int sl__sim_teams_init(sim_run_t *run);
void sl__sim_teams_free(sim_run_t *run);
/* Agent `a` starts (+1) or stops (-1) waiting to send a call. */
void sl__sim_teams_waiting(sim_run_t *run, const sim_agent_t *a, int delta);
/* Agent `a` sent a call the provider admitted, costing `tokens` (uncached input +
 * output); `all_backlogged` says whether every team was backlogged as it was sent. */
void sl__sim_teams_served(sim_run_t *run, const sim_agent_t *a, int64_t tokens,
                          bool all_backlogged);
bool sl__sim_teams_all_backlogged(const sim_run_t *run);
/* Fills run->res->teams at the end of the run; 0 or -1 (out of memory). */
int sl__sim_teams_finish(sim_run_t *run);

/* The scenario's limits over all its keys (each the keys' sum; 0 when one key is
 * unlimited), the provider section's other settings; the provider's with no `keys:`. */
void sl__sim_limits(const sl_sim_scenario_t *sc, sl_provider_config_t *out);

/* Sends the agent's current call to the provider now. */
void sl__sim_send(sim_run_t *run, sim_agent_t *a);
/* Schedules the strategy's timer for agent `a` at `t` (ignored if the agent stops waiting). */
void sl__sim_timer(sim_run_t *run, sim_agent_t *a, double t);
/* Stops the run with an error message. */
void sl__sim_fail(sim_run_t *run, const char *fmt, ...);
/* Full-jitter exponential backoff: U(0, min(cap, base * 2^(attempt-1))). */
double sl__sim_full_jitter(sim_agent_t *a, double base_s, double cap_s);
/* Writes one event-log line: {"ts":..,"event":..,"pool":"default","agent":..} plus
 * `extra` (already formatted ",\"k\":v" pairs, may be NULL). */
void sl__sim_log(sim_run_t *run, const char *event, const char *agent, const char *extra);

/* sl_sim_run() with a strategy given by its table rather than its name (also the
 * ones not in the report's list, such as the ideal run of bound.c), and `ctx` given to
 * the strategy as run->ctx. Same contract. */
/* One call of the ideal run, for the chain bound (chain.c): its task, its admission, its
 * time to first token past the shortest ttft plus its streaming, and its uncached input. */
typedef struct sim_call_rec {
    int task;
    double sent_s, stream_s;
    int64_t tokens;
} sim_call_rec_t;

/* The chain bound of an ideal run that has finished (chain.c, docs/sim.md "The chain
 * bound"): the largest over its calls of the call's chain + (the input of the calls with
 * a chain at least as long - input_tpm) / (input_tpm / 60). `calls` in admission order.
 * -1 when input_tpm is unlimited (<= 0) or out of memory. */
double sl__sim_chain_bound_s(const sim_run_t *run, const sim_call_rec_t *calls, size_t n_calls,
                             int64_t input_tpm);

int sl__sim_run_with(const sl_sim_scenario_t *sc, const sim_strategy_t *st, uint64_t seed,
                     FILE *events, void *ctx, sl_sim_result_t *out, char *err, size_t errlen);

extern const sim_strategy_t sl__sim_naive, sl__sim_sdk_retry, sl__sim_backoff, sl__sim_semaphore,
    sl__sim_rpm, sl__sim_sluice_equal, sl__sim_sluice, sl__sim_sluice_learned;

#endif
