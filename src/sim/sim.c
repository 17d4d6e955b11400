/* sim.c - the simulator's core: virtual clock, event heap, agents' loop, accounting.
 *
 * Time only moves by popping the earliest event from a heap (ties broken by the
 * order they were scheduled, so runs are reproducible) or by the strategy's own
 * wakeup (the engine's sl_engine_next_wakeup for the sluice strategies). An agent
 * is a small state machine of the real loop: read files -> call -> edit -> test
 * -> call ... When a call fails with a 429, or (without a checkpoint) a wait for
 * capacity outlasts the harness timeout, the turn is broken: the agent re-reads
 * the files, re-runs the tests and re-plans with several calls worth 5-20x the
 * failed call, on a fresh context (so a fresh prompt cache), then makes its call.
 * Failures during that recovery only delay it; they do not start another.
 */
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"
#include "../common/grow.h"

enum {
    EV_START,      /* the agent's next task may start */
    EV_PHASE_DONE, /* read / edit / test / recover step finished */
    EV_CALL_END,   /* an admitted call finished */
    EV_RETRY,      /* the sleep after a 429 is over */
    EV_TIMEOUT,    /* the harness gives up waiting */
    EV_STRAT,      /* a strategy timer */
};

static const sim_strategy_t *const strategies[] = {
    &sl__sim_naive, &sl__sim_sdk_retry, &sl__sim_backoff, &sl__sim_semaphore, &sl__sim_rpm,
    &sl__sim_sluice_equal, &sl__sim_sluice, &sl__sim_sluice_learned,
};

size_t sl_sim_strategy_count(void)
{
    return sizeof strategies / sizeof strategies[0];
}

const char *sl_sim_strategy_name(size_t i)
{
    return i < sl_sim_strategy_count() ? strategies[i]->name : NULL;
}

/* ---- event heap ------------------------------------------------------------ */

static bool ev_before(const sim_event_t *x, const sim_event_t *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static void heap_push(sim_run_t *run, double t, int kind, int agent, uint32_t gen)
{
    sim_event_t *h = sl_grow(run->heap, run->heap_n, &run->heap_cap, sizeof *h, 256);
    if (!h) {
        sl__sim_fail(run, "out of memory");
        return;
    }
    run->heap = h;
    sim_event_t ev = {.t = t, .seq = run->seq++, .kind = kind, .agent = agent, .gen = gen};
    size_t i = run->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!ev_before(&ev, &run->heap[parent])) break;
        run->heap[i] = run->heap[parent];
        i = parent;
    }
    run->heap[i] = ev;
}

static sim_event_t heap_pop(sim_run_t *run)
{
    sim_event_t top = run->heap[0];
    sim_event_t last = run->heap[--run->heap_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const sim_event_t *best = &last;
        if (l < run->heap_n && ev_before(&run->heap[l], best)) {
            m = l;
            best = &run->heap[l];
        }
        if (r < run->heap_n && ev_before(&run->heap[r], best)) m = r;
        if (m == i) break;
        run->heap[i] = run->heap[m];
        i = m;
    }
    if (run->heap_n) run->heap[i] = last;
    return top;
}

static void schedule(sim_run_t *run, sim_agent_t *a, double t, int kind)
{
    heap_push(run, t, kind, a->idx, a->gen);
}

void sl__sim_timer(sim_run_t *run, sim_agent_t *a, double t)
{
    schedule(run, a, t < run->now_s ? run->now_s : t, EV_STRAT);
}

void sl__sim_fail(sim_run_t *run, const char *fmt, ...)
{
    if (run->failed) return;
    run->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(run->err, sizeof run->err, fmt, ap);
    va_end(ap);
}

double sl__sim_full_jitter(sim_agent_t *a, double base_s, double cap_s)
{
    int n = a->attempts > 0 ? a->attempts - 1 : 0;
    double ceiling = n >= 30 ? cap_s : base_s * (double)(1u << n);
    if (ceiling > cap_s) ceiling = cap_s;
    return sl_rng_uniform(&a->retry_rng) * ceiling;
}

void sl__sim_log(sim_run_t *run, const char *event, const char *agent, const char *extra)
{
    if (!run->events) return;
    fprintf(run->events, "{\"ts\":%.3f,\"event\":\"%s\",\"pool\":\"default\"", run->now_s, event);
    if (agent) fprintf(run->events, ",\"agent\":\"%s\"", agent);
    fprintf(run->events, "%s}\n", extra ? extra : "");
}

/* ---- accounting ------------------------------------------------------------ */

static sl_sim_bin_t *bin_at(sim_run_t *run, double t)
{
    size_t i = (size_t)(t / SL_SIM_BIN_S);
    sl_sim_result_t *res = run->res;
    if (i >= res->n_bins) {
        if (i >= run->bins_cap) {
            size_t cap = run->bins_cap ? run->bins_cap : 256;
            while (cap <= i) cap *= 2;
            sl_sim_bin_t *b = realloc(res->bins, cap * sizeof *b);
            if (!b) {
                sl__sim_fail(run, "out of memory");
                static sl_sim_bin_t sink;
                return &sink;
            }
            res->bins = b;
            run->bins_cap = cap;
        }
        for (size_t j = res->n_bins; j <= i; j++) {
            memset(&res->bins[j], 0, sizeof res->bins[j]);
            res->bins[j].waiting = run->waiting;
        }
        res->n_bins = i + 1;
    }
    return &res->bins[i];
}

static void set_waiting(sim_run_t *run, int64_t delta)
{
    run->waiting += delta;
    bin_at(run, run->now_s)->waiting = run->waiting;
}

/* ---- the agent's loop ------------------------------------------------------ */

static double draw_spread(sl_rng_t *r, double mean, double spread)
{
    return mean * (1.0 + spread * (2.0 * sl_rng_uniform(r) - 1.0));
}

static int64_t draw_output(sl_rng_t *r, const sl_sim_group_t *g)
{
    int64_t o = (int64_t)llround((double)g->output_tokens * (0.5 + sl_rng_uniform(r)));
    if (o < 1) o = 1;
    return o > g->max_tokens ? g->max_tokens : o;
}

static void want_call(sim_run_t *run, sim_agent_t *a, bool fresh)
{
    a->phase = PH_WANT;
    set_waiting(run, +1);
    sl__sim_teams_waiting(run, a, +1);
    if (fresh) {
        a->want_since = run->now_s;
        /* A turn's first call: the work's rhythm, which sluice overlay sets the 429s against. */
        if (run->events) sl__sim_log(run, "turn", a->name, NULL);
    }
    if (run->strat->remote_wait && !run->strat->checkpoint && !a->recovering &&
        run->sc->harness_timeout_s > 0)
        schedule(run, a, run->now_s + run->sc->harness_timeout_s, EV_TIMEOUT);
    run->strat->want(run, a);
}

static void leave_want(sim_run_t *run, sim_agent_t *a)
{
    a->gen++;
    set_waiting(run, -1);
    sl__sim_teams_waiting(run, a, -1);
}

static void new_turn_call(sim_agent_t *a)
{
    a->call_prefix = a->g->prefix_tokens;
    a->call_tail = a->g->turn_tokens;
    a->call_output = draw_output(&a->work_rng, a->g);
}

static void start_task(sim_run_t *run, sim_agent_t *a)
{
    sim_task_t *t = &run->tasks[a->task0 + a->task_k];
    t->state = SL_TASK_RUNNING;
    t->ready_s = run->now_s;
    for (int i = 0; i < t->n_deps; i++) {
        sim_task_t *d = &run->tasks[t->deps[i]];
        if (d->agent != a->idx) d->waiting_dependents--;
    }
    if (run->strat->task_state) run->strat->task_state(run, a->task0 + a->task_k, SL_TASK_RUNNING);
    a->turn = 0;
    a->in_loop = false;
    a->cache_epoch++;
    a->phase = PH_READ;
    schedule(run, a, run->now_s + a->g->read_s, EV_PHASE_DONE);
}

static void finish_task(sim_run_t *run, sim_agent_t *a)
{
    int ti = a->task0 + a->task_k;
    sim_task_t *t = &run->tasks[ti];
    t->state = SL_TASK_DONE;
    t->done_s = run->now_s;
    run->task_times[run->tasks_done++] = t->done_s - t->ready_s;
    bin_at(run, run->now_s)->tasks_done++;
    if (run->events) {
        char extra[160];
        snprintf(extra, sizeof extra, ",\"task\":\"%s\",\"task_s\":%.3f", t->id,
                 t->done_s - t->ready_s);
        sl__sim_log(run, "task_done", a->name, extra);
    }
    if (run->strat->task_state) run->strat->task_state(run, ti, SL_TASK_DONE);
    for (int i = 0; i < t->n_dependents; i++) {
        sim_task_t *d = &run->tasks[t->dependents[i]];
        if (--d->deps_left == 0) {
            sim_agent_t *owner = &run->agents[d->agent];
            if (owner->phase == PH_BLOCKED && owner->task0 + owner->task_k == t->dependents[i])
                schedule(run, owner, run->now_s, EV_START);
        }
    }
    if (++a->task_k == a->g->tasks) {
        a->phase = PH_DONE;
        return;
    }
    a->phase = PH_BLOCKED;
    if (run->tasks[a->task0 + a->task_k].deps_left == 0) schedule(run, a, run->now_s, EV_START);
}

static void start_recovery(sim_run_t *run, sim_agent_t *a)
{
    run->res->replans++;
    a->recovering = true;
    a->saved_prefix = a->call_prefix;
    a->saved_tail = a->call_tail;
    a->saved_output = a->call_output;
    double k = run->sc->replan_min +
               (run->sc->replan_max - run->sc->replan_min) * sl_rng_uniform(&a->retry_rng);
    a->recovery_calls_left = (int)lround(k);
    if (a->recovery_calls_left < 1) a->recovery_calls_left = 1;
    a->cache_epoch++; /* the context is rebuilt: a new prompt, a cold cache */
    a->phase = PH_RECOVER_READ;
    if (run->events) {
        char extra[96];
        snprintf(extra, sizeof extra, ",\"calls\":%d", a->recovery_calls_left);
        sl__sim_log(run, "replan", a->name, extra);
    }
    schedule(run, a, run->now_s + a->g->read_s, EV_PHASE_DONE);
}

static void next_recovery_call(sim_run_t *run, sim_agent_t *a)
{
    a->call_prefix = a->saved_prefix;
    a->call_tail = a->saved_tail;
    a->call_output = draw_output(&a->retry_rng, a->g);
    want_call(run, a, false);
}

static void after_test(sim_run_t *run, sim_agent_t *a)
{
    const sl_sim_group_t *g = a->g;
    /* A loop of identical failures: the same test fails with the same diff. */
    bool fail = a->in_loop ? sl_rng_uniform(&a->work_rng) < run->sc->loop_continue
                           : sl_rng_uniform(&a->work_rng) < g->repeat_failure;
    if (fail) {
        if (!a->in_loop) a->loop_id++;
        a->in_loop = true;
        a->fail_sig_pending = true;
        snprintf(a->fail_sig, sizeof a->fail_sig, "%s:%d:%d", a->name, a->task_k, a->loop_id);
    } else {
        a->in_loop = false;
        a->fail_sig_pending = false;
        if (++a->turn >= g->turns) {
            finish_task(run, a);
            return;
        }
    }
    new_turn_call(a);
    want_call(run, a, true);
}

static void phase_done(sim_run_t *run, sim_agent_t *a)
{
    const sl_sim_group_t *g = a->g;
    switch (a->phase) {
    case PH_READ:
        new_turn_call(a);
        want_call(run, a, true);
        break;
    case PH_EDIT:
        a->phase = PH_TEST;
        schedule(run, a, run->now_s + draw_spread(&a->work_rng, g->test_s, g->test_spread),
                 EV_PHASE_DONE);
        break;
    case PH_TEST:
        after_test(run, a);
        break;
    case PH_RECOVER_READ:
        a->phase = PH_RECOVER_TEST;
        schedule(run, a, run->now_s + draw_spread(&a->retry_rng, g->test_s, g->test_spread),
                 EV_PHASE_DONE);
        break;
    case PH_RECOVER_TEST:
        next_recovery_call(run, a);
        break;
    default:
        break;
    }
}

static uint64_t cache_key(const sim_agent_t *a)
{
    uint64_t k = ((uint64_t)(uint32_t)a->idx << 40) ^ ((uint64_t)(uint32_t)a->task_k << 24) ^
                 a->cache_epoch;
    sl_rng_t r = {k};
    return sl_rng_next(&r);
}

void sl__sim_send(sim_run_t *run, sim_agent_t *a)
{
    if (a->phase != PH_WANT) return;
    bool all_backlogged = sl__sim_teams_all_backlogged(run); /* counting this agent */
    leave_want(run, a);
    sl_provider_call_t call = {
        .input_tokens = a->call_tail,
        .cached_prefix_tokens = a->call_prefix,
        .cache_key = cache_key(a),
        .max_tokens = a->send_max_tokens > 0 ? a->send_max_tokens : a->g->max_tokens,
        .output_tokens = a->call_output, /* the provider cuts it at max_tokens */
    };
    sl_provider_begin(run->providers[a->key], &call, run->now_s, &a->res);
    if (run->strat->started) run->strat->started(run, a, &a->res);
    sl_sim_bin_t *bin = bin_at(run, run->now_s);
    bin->requests++;
    run->res->requests++;
    const sl_provider_result_t *r = &a->res;
    if (r->refusal != SL_PROVIDER_OK) {
        bin->http_429++;
        run->res->http_429++;
        if (run->events) {
            char extra[96];
            snprintf(extra, sizeof extra, ",\"kind\":\"%s\",\"retry_after\":%.0f",
                     r->refusal == SL_PROVIDER_SPEND_CAP ? "spend_cap" : "rate", r->retry_after_s);
            sl__sim_log(run, "http_429", a->name, extra);
        }
        a->attempts++;
        if (run->strat->result) run->strat->result(run, a, r);
        double delay = run->strat->retry_delay(run, a, r);
        a->phase = PH_RETRY;
        sl__sim_teams_waiting(run, a, +1); /* still wants the call: its team is backlogged */
        schedule(run, a, run->now_s + delay, EV_RETRY);
        return;
    }
    bin->uncached_input_tokens += r->input_tokens + r->cache_creation_input_tokens;
    bin->output_tokens += r->output_tokens;
    sl__sim_teams_served(run, a,
                         r->input_tokens + r->cache_creation_input_tokens + r->output_tokens,
                         all_backlogged);
    run->res->uncached_input_tokens += r->input_tokens + r->cache_creation_input_tokens;
    run->res->output_tokens += r->output_tokens;
    if (r->cache_creation_input_tokens > 0) {
        /* The task's prefix written once more: its cache lapsed, or a broken turn rebuilt
         * the context, and the provider bills the same prefix again. */
        if (a->prefix_written_k == a->task_k) run->res->prefix_rewrites++;
        a->prefix_written_k = a->task_k;
    }
    run->res->tokens_usage_sum += r->input_tokens + r->cache_creation_input_tokens +
                                  r->cache_read_input_tokens + r->output_tokens;
    a->attempts = 0;
    /* Critical-path wait: agents blocked on this task waited as long as this turn's
     * call did, broken-turn recovery included. */
    if (!a->recovering) {
        const sim_task_t *t = &run->tasks[a->task0 + a->task_k];
        run->crit_wait_s += (run->now_s - a->want_since) * t->waiting_dependents;
    }
    a->phase = PH_CALL;
    schedule(run, a, run->now_s + r->duration_s, EV_CALL_END);
}

static void call_end(sim_run_t *run, sim_agent_t *a)
{
    sl_provider_end(run->providers[a->key], &a->res, run->now_s);
    if (run->strat->result) run->strat->result(run, a, &a->res);
    /* An answer the provider stopped at the max_tokens the strategy lowered (sluice-learned:
     * the proxy's capped forward) is continued, as the proxy does (docs/proxy.md): the
     * partial answer goes back as an assistant prefill, new uncached input after the cached
     * prefix, and the rest of the answer is asked for. Dropping the tail instead gave the
     * strategy shorter answers than any other meets and let it end before the tight bound. */
    if (a->send_max_tokens > 0 && !a->res.stream_error &&
        a->res.output_tokens >= a->send_max_tokens && a->res.output_tokens < a->call_output) {
        a->call_tail += a->res.output_tokens;
        a->call_output -= a->res.output_tokens;
        if (run->events) sl__sim_log(run, "continue", a->name, NULL);
        a->want_since = run->now_s; /* its wait counts from here, not from the cut call's */
        want_call(run, a, false);
        return;
    }
    if (a->recovering) {
        if (--a->recovery_calls_left > 0) {
            next_recovery_call(run, a);
            return;
        }
        /* Re-planned: now the call the turn was about to make. */
        a->recovering = false;
        a->call_prefix = a->saved_prefix;
        a->call_tail = a->saved_tail;
        a->call_output = a->saved_output;
        want_call(run, a, false);
        return;
    }
    a->fail_sig_pending = false;
    a->phase = PH_EDIT;
    schedule(run, a, run->now_s + a->g->edit_s, EV_PHASE_DONE);
}

static void handle(sim_run_t *run, const sim_event_t *ev)
{
    sim_agent_t *a = &run->agents[ev->agent];
    switch (ev->kind) {
    case EV_START:
        if (a->phase == PH_BLOCKED && run->tasks[a->task0 + a->task_k].deps_left == 0)
            start_task(run, a);
        break;
    case EV_PHASE_DONE:
        phase_done(run, a);
        break;
    case EV_CALL_END:
        call_end(run, a);
        break;
    case EV_RETRY:
        if (a->phase != PH_RETRY) break;
        sl__sim_teams_waiting(run, a, -1);
        if (!run->strat->checkpoint && !a->recovering && a->attempts > run->strat->retries_in_turn) {
            start_recovery(run, a);
        } else {
            /* The call again after its backoff: sluice overlay blames the 429 right after. */
            if (run->events) sl__sim_log(run, "retry", a->name, NULL);
            want_call(run, a, false);
        }
        break;
    case EV_TIMEOUT:
        if (a->phase != PH_WANT || ev->gen != a->gen) break;
        if (run->strat->give_up) run->strat->give_up(run, a);
        leave_want(run, a);
        if (run->events) sl__sim_log(run, "harness_timeout", a->name, NULL);
        start_recovery(run, a);
        break;
    case EV_STRAT:
        if (a->phase != PH_WANT || ev->gen != a->gen) break;
        if (run->strat->timer) run->strat->timer(run, a);
        break;
    default:
        break;
    }
}

/* ---- setup ----------------------------------------------------------------- */

static int find_group(const sl_sim_scenario_t *sc, const char *name)
{
    for (int i = 0; i < sc->n_groups; i++)
        if (strcmp(sc->groups[i].name, name) == 0) return i;
    return -1;
}

static int add_edge(sim_run_t *run, int from, int to)
{
    sim_task_t *t = &run->tasks[to], *d = &run->tasks[from];
    int *deps = realloc(t->deps, (size_t)(t->n_deps + 1) * sizeof *deps);
    if (!deps) return -1;
    t->deps = deps;
    t->deps[t->n_deps++] = from;
    t->deps_left++;
    int *dn = realloc(d->dependents, (size_t)(d->n_dependents + 1) * sizeof *dn);
    if (!dn) return -1;
    d->dependents = dn;
    d->dependents[d->n_dependents++] = to;
    if (d->agent != t->agent) {
        d->other_dependents++;
        d->waiting_dependents++;
    }
    return 0;
}

static int build_fleet(sim_run_t *run)
{
    const sl_sim_scenario_t *sc = run->sc;
    int n_agents = 0, n_tasks = 0;
    for (int g = 0; g < sc->n_groups; g++) {
        n_agents += sc->groups[g].count * sc->teams;
        n_tasks += sc->groups[g].count * sc->groups[g].tasks * sc->teams;
    }
    run->agents = calloc((size_t)n_agents, sizeof *run->agents);
    run->tasks = calloc((size_t)n_tasks, sizeof *run->tasks);
    run->task_times = calloc((size_t)n_tasks + 1, sizeof *run->task_times);
    /* first_agent[team][group] */
    int *first = calloc((size_t)(sc->teams * sc->n_groups), sizeof *first);
    if (!run->agents || !run->tasks || !run->task_times || !first) goto oom;
    int ai = 0, ti = 0;
    for (int team = 0; team < sc->teams; team++) {
        for (int g = 0; g < sc->n_groups; g++) {
            const sl_sim_group_t *grp = &sc->groups[g];
            first[team * sc->n_groups + g] = ai;
            for (int n = 0; n < grp->count; n++, ai++) {
                sim_agent_t *a = &run->agents[ai];
                a->idx = ai;
                a->g = grp;
                a->team = team;
                a->sem_next = -1;
                a->prefix_written_k = -1;
                if (sc->teams > 1) snprintf(a->name, sizeof a->name, "t%d.%s.%d", team, grp->name, n);
                else snprintf(a->name, sizeof a->name, "%s.%d", grp->name, n);
                /* Streams depend on the seed and the agent only, not the strategy. */
                sl_rng_seed(&a->work_rng, run->seed * 0x100000001b3ULL + (uint64_t)ai * 2 + 1);
                sl_rng_next(&a->work_rng);
                sl_rng_seed(&a->retry_rng, run->seed * 0xc2b2ae3d27d4eb4fULL + (uint64_t)ai * 2 + 2);
                sl_rng_next(&a->retry_rng);
                a->task0 = ti;
                for (int k = 0; k < grp->tasks; k++, ti++) {
                    sim_task_t *t = &run->tasks[ti];
                    t->agent = ai;
                    t->k = k;
                    snprintf(t->id, sizeof t->id, "%s.k%d", a->name, k);
                    if (k > 0 && add_edge(run, ti - 1, ti) != 0) goto oom;
                }
            }
        }
    }
    run->n_agents = n_agents;
    run->n_tasks = n_tasks;
    /* `after`: an agent's first task waits for the last task of every agent of
     * those groups in its team. */
    for (int i = 0; i < n_agents; i++) {
        sim_agent_t *a = &run->agents[i];
        for (int j = 0; j < a->g->n_after; j++) {
            int g = find_group(sc, a->g->after[j]);
            for (int n = 0; n < sc->groups[g].count; n++) {
                const sim_agent_t *up = &run->agents[first[a->team * sc->n_groups + g] + n];
                if (add_edge(run, up->task0 + up->g->tasks - 1, a->task0) != 0) goto oom;
            }
        }
    }
    free(first);
    return 0;
oom:
    free(first);
    return -1;
}

static void free_fleet(sim_run_t *run)
{
    for (int i = 0; i < run->n_tasks; i++) {
        free(run->tasks[i].deps);
        free(run->tasks[i].dependents);
    }
    free(run->tasks);
    free(run->agents);
    free(run->task_times);
    free(run->heap);
}

/* ---- results --------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double percentile(const double *sorted, int n, double q)
{
    if (n == 0) return 0;
    int rank = (int)ceil(q * n);
    if (rank < 1) rank = 1;
    return sorted[rank - 1];
}

/* The dominant period of the 429 series (sl_sim_dominant_period, period.c). */
static double wave_period(const sl_sim_bin_t *bins, size_t n)
{
    double *counts = malloc((n ? n : 1) * sizeof *counts);
    if (!counts) return -1;
    for (size_t i = 0; i < n; i++) counts[i] = (double)bins[i].http_429;
    double period_s = sl_sim_dominant_period(counts, n, SL_SIM_BIN_S).period_s;
    free(counts);
    return period_s;
}

/* The limit over every key: their sum, 0 (unlimited) when one key is unlimited. */
static int64_t summed(const sl_sim_scenario_t *sc, size_t offset)
{
    int64_t total = 0;
    for (int k = 0; k < sc->n_keys; k++) {
        int64_t v = *(const int64_t *)(const void *)((const char *)&sc->keys[k] + offset);
        if (v <= 0) return 0;
        total += v;
    }
    return total;
}

void sl__sim_limits(const sl_sim_scenario_t *sc, sl_provider_config_t *out)
{
    *out = sc->provider;
    if (sc->n_keys == 0) return;
    out->input_tpm = summed(sc, offsetof(sl_sim_key_t, input_tpm));
    out->output_tpm = summed(sc, offsetof(sl_sim_key_t, output_tpm));
    out->rpm = summed(sc, offsetof(sl_sim_key_t, rpm));
    out->tokens_tpm = summed(sc, offsetof(sl_sim_key_t, tokens_tpm));
}

static void finish_result(sim_run_t *run)
{
    sl_sim_result_t *res = run->res;
    res->n_keys = run->n_providers;
    for (int k = 0; k < run->n_providers; k++) {
        sl_provider_stats_t st;
        sl_provider_stats(run->providers[k], &st);
        res->tokens_billed += st.input_tokens + st.cache_creation_input_tokens +
                              st.cache_read_input_tokens + st.output_tokens;
        res->key_admitted[k] = (int64_t)st.admitted;
        res->key_429[k] = (int64_t)st.http_429;
    }
    res->rate_429 = res->requests ? (double)res->http_429 / (double)res->requests : 0;
    res->tasks_done = run->tasks_done;
    res->tasks_total = run->n_tasks;
    res->tokens_per_task = run->tasks_done ? (double)res->tokens_billed / run->tasks_done : 0;
    qsort(run->task_times, (size_t)run->tasks_done, sizeof(double), cmp_double);
    res->p50_task_s = percentile(run->task_times, run->tasks_done, 0.50);
    res->p95_task_s = percentile(run->task_times, run->tasks_done, 0.95);
    res->critical_path_wait_s = run->crit_wait_s;
    res->makespan_s = run->tasks_done == run->n_tasks ? run->now_s : run->sc->duration_s;
    /* Trim the series to the makespan. */
    size_t keep = (size_t)ceil(res->makespan_s / SL_SIM_BIN_S);
    if (keep < res->n_bins) res->n_bins = keep;
    sl_provider_config_t lim;
    sl__sim_limits(run->sc, &lim);
    double itpm = (double)lim.input_tpm, otpm = (double)lim.output_tpm;
    res->input_tpm_utilization =
        itpm > 0 && res->makespan_s > 0
            ? (double)res->uncached_input_tokens / (itpm / 60.0 * res->makespan_s)
            : 0;
    res->output_tpm_utilization =
        otpm > 0 && res->makespan_s > 0
            ? (double)res->output_tokens / (otpm / 60.0 * res->makespan_s)
            : 0;
    res->prefix_rewrites_per_task =
        run->n_tasks ? (double)res->prefix_rewrites / (double)run->n_tasks : 0;
    res->wave_period_s = wave_period(res->bins, res->n_bins);
}

static const sim_strategy_t *find_strategy(const char *name)
{
    for (size_t i = 0; i < sl_sim_strategy_count(); i++)
        if (strcmp(strategies[i]->name, name) == 0) return strategies[i];
    return NULL;
}

static void loop(sim_run_t *run)
{
    const double end = run->sc->duration_s;
    while (!run->failed && run->tasks_done < run->n_tasks) {
        double t_ev = run->heap_n ? run->heap[0].t : INFINITY;
        double t_wk = run->strat->next_wakeup ? run->strat->next_wakeup(run) : INFINITY;
        if (t_wk < run->now_s) t_wk = run->now_s;
        double t = t_ev < t_wk ? t_ev : t_wk;
        if (!(t <= end)) {
            run->now_s = end;
            break;
        }
        if (t_wk <= t_ev) {
            run->now_s = t_wk;
            run->strat->wakeup(run);
            continue;
        }
        sim_event_t ev = heap_pop(run);
        run->now_s = ev.t;
        handle(run, &ev);
    }
}

int sl_sim_run(const sl_sim_scenario_t *sc, const char *strategy, uint64_t seed, FILE *events,
               sl_sim_result_t *out, char *err, size_t errlen)
{
    const sim_strategy_t *st = find_strategy(strategy);
    if (!st) {
        memset(out, 0, sizeof *out);
        snprintf(err, errlen, "--strategy: unknown strategy \"%s\"", strategy);
        return -1;
    }
    return sl__sim_run_with(sc, st, seed, events, NULL, out, err, errlen);
}

int sl__sim_run_with(const sl_sim_scenario_t *sc, const sim_strategy_t *st, uint64_t seed,
                     FILE *events, void *ctx, sl_sim_result_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    snprintf(out->strategy, sizeof out->strategy, "%s", st->name);
    sim_run_t run = {.sc = sc, .strat = st, .seed = seed, .events = events, .ctx = ctx,
                     .res = out};
    int rc = -1;
    run.n_providers = sc->n_keys > 0 ? sc->n_keys : 1;
    for (int k = 0; k < run.n_providers; k++) {
        sl_provider_config_t pc = sc->provider;
        if (sc->n_keys > 0) {
            pc.input_tpm = sc->keys[k].input_tpm;
            pc.output_tpm = sc->keys[k].output_tpm;
            pc.rpm = sc->keys[k].rpm;
            pc.tokens_tpm = sc->keys[k].tokens_tpm;
        }
        pc.seed = (seed ^ 0x70726f7669646572ULL) + (uint64_t)k;
        char perr[200];
        run.providers[k] = sl_provider_new(&pc, 0, perr, sizeof perr);
        if (!run.providers[k]) {
            snprintf(err, errlen, "%s", perr);
            goto done;
        }
    }
    run.provider = run.providers[0];
    if (build_fleet(&run) != 0 || sl__sim_teams_init(&run) != 0) {
        snprintf(err, errlen, "out of memory building the fleet");
        goto done;
    }
    if (st->init && st->init(&run, err, errlen) != 0) goto done;
    sl_rng_t start_rng;
    sl_rng_seed(&start_rng, seed ^ 0x7374617274ULL);
    for (int i = 0; i < run.n_agents; i++) {
        sim_agent_t *a = &run.agents[i];
        a->phase = PH_BLOCKED;
        a->key = i % run.n_providers; /* without a coordinator: a fixed share of the fleet */
        double at = sl_rng_uniform(&start_rng) * sc->start_window_s;
        if (run.tasks[a->task0].deps_left == 0) schedule(&run, a, at, EV_START);
    }
    loop(&run);
    if (run.failed) {
        snprintf(err, errlen, "%s: %s", st->name, run.err);
    } else {
        finish_result(&run);
        rc = sl__sim_teams_finish(&run);
        if (rc != 0) snprintf(err, errlen, "out of memory");
    }
    if (st->fini) st->fini(&run);
done:
    for (int k = 0; k < run.n_providers; k++)
        sl_provider_free(run.providers[k]);
    sl__sim_teams_free(&run);
    free_fleet(&run);
    if (rc != 0) sl_sim_result_free(out);
    return rc;
}

void sl_sim_result_free(sl_sim_result_t *r)
{
    free(r->bins);
    r->bins = NULL;
    r->n_bins = 0;
    free(r->teams);
    r->teams = NULL;
    r->n_teams = 0;
}

double sl_sim_lower_bound_s(const sl_sim_scenario_t *sc)
{
    sl_provider_config_t lim;
    sl__sim_limits(sc, &lim); /* several keys: their summed input TPM */
    if (lim.input_tpm <= 0) return 0;
    double drift = sc->provider.drift, total = 0;
    for (int g = 0; g < sc->n_groups; g++) {
        const sl_sim_group_t *grp = &sc->groups[g];
        double prefix = (double)llround((double)grp->prefix_tokens * drift);
        double tail = (double)llround((double)grp->turn_tokens * drift);
        double per_task = prefix >= (double)sc->provider.cache_min_tokens
                              ? prefix + grp->turns * tail
                              : grp->turns * (prefix + tail);
        total += per_task * grp->tasks * grp->count * sc->teams;
    }
    /* The bucket starts full: a minute's worth is admitted at once, the rest at the
     * refill rate. */
    double after_first_bucket = total - (double)lim.input_tpm;
    return after_first_bucket > 0 ? after_first_bucket / ((double)lim.input_tpm / 60.0) : 0;
}
