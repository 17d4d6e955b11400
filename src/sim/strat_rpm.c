/* strat_rpm.c - strategy "rpm-counter": one shared requests-per-minute bucket (the
 * provider's RPM, refilled continuously) that every call takes from before it is
 * sent, plus full-jitter backoff after a 429. It counts requests, not tokens: a
 * 2k-token call and an 80k-token call cost the same 1. */
#include <stdlib.h>

#include "strat_common.h"

typedef struct rpm {
    double level, limit, at_s;
} rpm_t;

static int rpm_init(sim_run_t *run, char *err, size_t errlen)
{
    rpm_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->limit = (double)run->sc->provider.rpm;
    s->level = s->limit;
    run->sdata = s;
    return 0;
}

static void rpm_fini(sim_run_t *run)
{
    free(run->sdata);
    run->sdata = NULL;
}

static void refill(rpm_t *s, double now)
{
    s->level += (now - s->at_s) * s->limit / 60.0;
    if (s->level > s->limit) s->level = s->limit;
    s->at_s = now;
}

static void rpm_want(sim_run_t *run, sim_agent_t *a)
{
    rpm_t *s = run->sdata;
    if (s->limit <= 0) {
        sl__sim_send(run, a);
        return;
    }
    refill(s, run->now_s);
    /* Take the request now (possibly into debt) and send when the debt is paid. */
    s->level -= 1;
    a->rpm_reserved = true;
    if (s->level >= 0) {
        a->rpm_reserved = false;
        sl__sim_send(run, a);
        return;
    }
    sl__sim_timer(run, a, run->now_s + -s->level / (s->limit / 60.0));
}

static void rpm_timer(sim_run_t *run, sim_agent_t *a)
{
    a->rpm_reserved = false;
    sl__sim_send(run, a);
}

static void rpm_give_up(sim_run_t *run, sim_agent_t *a)
{
    rpm_t *s = run->sdata;
    if (!a->rpm_reserved) return;
    refill(s, run->now_s);
    s->level += 1;
    if (s->level > s->limit) s->level = s->limit;
    a->rpm_reserved = false;
}

const sim_strategy_t sl__sim_rpm = {
    .name = "rpm-counter",
    .init = rpm_init,
    .fini = rpm_fini,
    .want = rpm_want,
    .timer = rpm_timer,
    .give_up = rpm_give_up,
    .retry_delay = sl__sim_backoff_delay,
};
