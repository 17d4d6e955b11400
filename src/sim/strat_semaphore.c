/* strat_semaphore.c - strategy "semaphore": at most 5 calls in flight across the
 * fleet (a FIFO of waiting agents), plus full-jitter backoff after a 429. It bounds
 * concurrency, not tokens: five 80k-token calls still overrun input TPM. */
#include <stdlib.h>

#include "strat_common.h"

#define SEM_SLOTS 5

typedef struct sem {
    int in_use;
    int head, tail; /* FIFO through sim_agent_t.sem_next; -1 = empty */
} sem_t;

static int sem_init(sim_run_t *run, char *err, size_t errlen)
{
    sem_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->head = s->tail = -1;
    run->sdata = s;
    return 0;
}

static void sem_fini(sim_run_t *run)
{
    free(run->sdata);
    run->sdata = NULL;
}

/* Hands a free slot to the first waiting agent; it sends from a timer at `now`
 * so that no call is made from inside another agent's result. */
static void sem_release(sim_run_t *run)
{
    sem_t *s = run->sdata;
    s->in_use--;
    while (s->head >= 0 && s->in_use < SEM_SLOTS) {
        sim_agent_t *b = &run->agents[s->head];
        s->head = b->sem_next;
        if (s->head < 0) s->tail = -1;
        b->sem_next = -1;
        b->sem_queued = false;
        b->sem_slot = true;
        s->in_use++;
        sl__sim_timer(run, b, run->now_s);
    }
}

static void sem_want(sim_run_t *run, sim_agent_t *a)
{
    sem_t *s = run->sdata;
    if (s->in_use < SEM_SLOTS && s->head < 0) {
        s->in_use++;
        a->sem_slot = true;
        sl__sim_send(run, a);
        return;
    }
    a->sem_queued = true;
    a->sem_next = -1;
    if (s->tail >= 0) run->agents[s->tail].sem_next = a->idx;
    else s->head = a->idx;
    s->tail = a->idx;
}

static void sem_timer(sim_run_t *run, sim_agent_t *a)
{
    if (a->sem_slot) sl__sim_send(run, a);
}

static void sem_give_up(sim_run_t *run, sim_agent_t *a)
{
    sem_t *s = run->sdata;
    if (a->sem_slot) {
        a->sem_slot = false;
        sem_release(run);
        return;
    }
    if (!a->sem_queued) return;
    int prev = -1;
    for (int i = s->head; i >= 0; prev = i, i = run->agents[i].sem_next) {
        if (i != a->idx) continue;
        if (prev >= 0) run->agents[prev].sem_next = a->sem_next;
        else s->head = a->sem_next;
        if (s->tail == a->idx) s->tail = prev;
        break;
    }
    a->sem_queued = false;
    a->sem_next = -1;
}

static void sem_result(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    (void)r;
    if (!a->sem_slot) return;
    a->sem_slot = false;
    sem_release(run);
}

const sim_strategy_t sl__sim_semaphore = {
    .name = "semaphore",
    .init = sem_init,
    .fini = sem_fini,
    .want = sem_want,
    .timer = sem_timer,
    .give_up = sem_give_up,
    .result = sem_result,
    .retry_delay = sl__sim_backoff_delay,
};
