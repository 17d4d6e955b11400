/* strat_sluice.c - strategies "sluice" and "sluice-equal": every call takes a lease
 * from the real engine (libsluice) first, resyncs the pool from the provider's
 * rate-limit headers when the answer starts, and settles it with the usage at its end.
 *
 * "sluice" is the whole design: role weights and the task graph (a planner's call
 * outranks the six workers waiting on it), loop decay through failure_signature,
 * the cache bump, the working set (a task's first call waits while the running tasks'
 * calls queue; each task names its own cache, so the engine tells a first call from
 * the rest), and a checkpoint before every wait, so neither a queued wait nor a 429
 * breaks the turn. Like libsluice-client's acquire that saves a checkpoint, it asks
 * to be held in the queue for an ETA up to SL_CHECKPOINTED_MAX_WAIT_S rather than be
 * rejected past the pool's max_queue_wait_s and sleep until retry_at while capacity
 * idles (issue 24 item 5). "sluice-equal" takes the same leases with every weight 1,
 * no task graph, no decay, no cache bump and no checkpoint: a wait longer than the
 * harness timeout, or a 429, costs the agent a re-plan as in the other strategies.
 *
 * The engine answers queued tickets later, through its event callback. The
 * callback must not call back into the engine, so it only records grants; they are
 * claimed (sl_engine_ticket) and sent after the engine call returns.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strat_common.h"
#include "../common/grow.h"

typedef struct pending {
    uint64_t ticket;
    double retry_at;  /* ticket rejected: come back then; 0 = granted */
} pending_t;

typedef struct sluice_state {
    sl_engine_t *e;
    bool equal;
    bool learned; /* "sluice-learned": output_reserve learned, calls name their group */
    pending_t *pending;
    size_t n_pending, cap_pending;
    bool draining;
    sim_run_t *run;
} sluice_state_t;

static const char *event_name(sl_event_kind_t k)
{
    static const char *const names[] = {
        [SL_EV_GRANTED] = "granted",
        [SL_EV_QUEUED] = "queued",
        [SL_EV_REJECTED] = "rejected",
        [SL_EV_SETTLED] = "settled",
        [SL_EV_CANCELLED] = "cancelled",
        [SL_EV_REAPED] = "reaped",
        [SL_EV_UNCLAIMED] = "unclaimed",
        [SL_EV_TICKET_CANCELLED] = "ticket_cancelled",
        [SL_EV_TICKET_EXPIRED] = "ticket_expired",
        [SL_EV_TICKET_REJECTED] = "ticket_rejected",
        [SL_EV_UPSTREAM_429] = "upstream_429",
        [SL_EV_MARGIN] = "margin",
        [SL_EV_ALERT] = "alert",
        [SL_EV_LIMIT_ADOPTED] = "limit_adopted",
        [SL_EV_RESYNC] = "resync",
    };
    return (size_t)k < sizeof names / sizeof names[0] && names[k] ? names[k] : "unknown";
}

/* One line in the shape of sluiced's event log (src/server/core/events.c). */
static void log_event(FILE *f, const sl_event_t *ev)
{
    fprintf(f, "{\"ts\":%.3f,\"event\":\"%s\"", ev->now_s, event_name(ev->kind));
    if (ev->pool) fprintf(f, ",\"pool\":\"%s\"", ev->pool);
    if (ev->agent) fprintf(f, ",\"agent\":\"%s\"", ev->agent);
    if (ev->lease) fprintf(f, ",\"lease\":\"l_%" PRIu64 "\"", ev->lease);
    if (ev->ticket) fprintf(f, ",\"ticket\":\"t_%" PRIu64 "\"", ev->ticket);
    switch (ev->kind) {
    case SL_EV_GRANTED:
    case SL_EV_QUEUED:
        fprintf(f, ",\"input_tokens\":%" PRId64 ",\"output_tokens\":%" PRId64 ",\"weight\":%.4f",
                ev->input_tokens, ev->output_tokens, ev->weight);
        if (ev->kind == SL_EV_GRANTED) fprintf(f, ",\"waited\":%.3f", ev->waited_s);
        else fprintf(f, ",\"eta\":%.3f", ev->eta_s);
        break;
    case SL_EV_REJECTED:
    case SL_EV_TICKET_REJECTED:
        fprintf(f, ",\"input_tokens\":%" PRId64 ",\"output_tokens\":%" PRId64
                   ",\"reason\":\"%s\",\"retry_at\":%.3f",
                ev->input_tokens, ev->output_tokens, ev->reason ? ev->reason : "", ev->retry_at);
        break;
    case SL_EV_SETTLED:
        fprintf(f, ",\"input_tokens\":%" PRId64 ",\"output_tokens\":%" PRId64
                   ",\"adjust_input_tokens\":%" PRId64 ",\"adjust_output_tokens\":%" PRId64
                   ",\"estimate_error\":%.4f",
                ev->input_tokens, ev->output_tokens, ev->adjust_input_tokens,
                ev->adjust_output_tokens, ev->estimate_error);
        break;
    case SL_EV_CANCELLED:
    case SL_EV_REAPED:
    case SL_EV_UNCLAIMED:
        fprintf(f, ",\"input_tokens\":%" PRId64 ",\"output_tokens\":%" PRId64, ev->input_tokens,
                ev->output_tokens);
        break;
    case SL_EV_UPSTREAM_429:
        fprintf(f, ",\"margin\":%.4f,\"kind\":\"%s\"", ev->margin, ev->reason ? ev->reason : "rate");
        break;
    case SL_EV_MARGIN:
        fprintf(f, ",\"margin\":%.4f", ev->margin);
        break;
    case SL_EV_ALERT:
        fprintf(f, ",\"alert\":\"%s\",\"active\":%s", ev->alert ? ev->alert : "",
                ev->active ? "true" : "false");
        break;
    case SL_EV_LIMIT_ADOPTED:
    case SL_EV_RESYNC:
        fprintf(f, ",\"bucket\":\"%s\",\"value\":%.1f", sl_bucket_name(ev->bucket), ev->value);
        break;
    default:
        break;
    }
    fputs("}\n", f);
}

static void push_pending(sluice_state_t *s, uint64_t ticket, double retry_at)
{
    pending_t *p = sl_grow(s->pending, s->n_pending, &s->cap_pending, sizeof *p, 64);
    if (!p) {
        sl__sim_fail(s->run, "out of memory");
        return;
    }
    s->pending = p;
    s->pending[s->n_pending++] = (pending_t){ticket, retry_at};
}

static void on_event(const sl_event_t *ev, void *ud)
{
    sluice_state_t *s = ud;
    if (s->run->events) log_event(s->run->events, ev);
    if (ev->kind == SL_EV_GRANTED && ev->ticket) push_pending(s, ev->ticket, 0);
    else if (ev->kind == SL_EV_TICKET_REJECTED || ev->kind == SL_EV_TICKET_EXPIRED)
        push_pending(s, ev->ticket, ev->retry_at > 0 ? ev->retry_at : ev->now_s);
}

static sim_agent_t *agent_by_ticket(sim_run_t *run, uint64_t ticket)
{
    for (int i = 0; i < run->n_agents; i++)
        if (run->agents[i].ticket == ticket) return &run->agents[i];
    return NULL;
}

/* A lease for a's call: with output_reserve learned the call goes to the provider with
 * max_tokens lowered to the output reserved, as the proxy forwards it (the provider holds
 * what it is sent, so a reservation below the figure sent would overbook it). */
static void grant(const sluice_state_t *s, sim_agent_t *a, const sl_decision_t *d)
{
    a->lease = d->lease;
    /* Another key than the one it queued on may have granted it (one queue over the
     * keys, keyqueue.c): the call goes to the provider of the lease's key. */
    const sim_run_t *run = s->run;
    sl_lease_state_t l;
    if (run->sc->n_keys > 0 && sl_engine_lease_state(s->e, d->lease, &l) == SL_OK) {
        const char *colon = strchr(l.pool, ':');
        for (int k = 0; colon && k < run->n_providers; k++)
            if (!strcmp(colon + 1, run->sc->keys[k].name)) a->key = k;
    }
    a->send_max_tokens = s->learned ? d->charged_output_tokens : 0;
}

/* Claims the tickets the engine granted from its queue and sends their calls. */
static void drain(sim_run_t *run)
{
    sluice_state_t *s = run->sdata;
    if (s->draining) return;
    s->draining = true;
    for (size_t i = 0; i < s->n_pending && !run->failed; i++) {
        pending_t p = s->pending[i];
        sim_agent_t *a = agent_by_ticket(run, p.ticket);
        if (!a || a->phase != PH_WANT) continue;
        a->ticket = 0;
        if (p.retry_at > 0) {
            sl__sim_timer(run, a, p.retry_at);
            continue;
        }
        sl_decision_t d;
        int rc = sl_engine_ticket(s->e, p.ticket, run->now_s, &d);
        if (rc != SL_OK || d.status != SL_GRANTED) {
            sl__sim_fail(run, "ticket t_%" PRIu64 " of %s: %s", p.ticket, a->name,
                         sl_engine_errmsg(s->e));
            break;
        }
        grant(s, a, &d);
        sl__sim_send(run, a);
    }
    s->n_pending = 0;
    s->draining = false;
}

static int put_task(sim_run_t *run, int ti, sl_task_state_t state)
{
    sluice_state_t *s = run->sdata;
    const sim_task_t *t = &run->tasks[ti];
    const char *deps[64];
    size_t n = 0;
    for (int i = 0; i < t->n_deps && n < 64; i++) deps[n++] = run->tasks[t->deps[i]].id;
    return sl_engine_task_put(s->e, t->id, run->agents[t->agent].g->role, deps, n, state);
}

/* The scenario's teams ("t0", "t1", ...) and their weights, in the engine's fair queue.
 * One team is the engine's default: nothing to tell it. */
static int put_teams(sim_run_t *run, sl_engine_t *e)
{
    const sl_sim_scenario_t *sc = run->sc;
    if (sc->teams < 2) return SL_OK;
    char team[32];
    int rc = SL_OK;
    for (int k = 0; rc == SL_OK && k < sc->teams; k++) {
        snprintf(team, sizeof team, "t%d", k);
        rc = sl_engine_set_team_weight(e, team, sc->team_weight ? sc->team_weight[k] : 1.0);
    }
    for (int i = 0; rc == SL_OK && i < run->n_agents; i++) {
        snprintf(team, sizeof team, "t%d", run->agents[i].team);
        rc = sl_engine_set_agent_team(e, run->agents[i].name, team);
    }
    return rc;
}

/* The engine pool of key k: "default" for a scenario of one key, else "default:NAME", as
 * sluiced names a pool of several keys (design.md, "A pool of several keys"). */
static const char *key_pool(const sim_run_t *run, int k, char *buf, size_t len)
{
    if (run->sc->n_keys == 0) return "default";
    snprintf(buf, len, "default:%s", run->sc->keys[k].name);
    return buf;
}

/* The key a's request should go to now, by the rule sluiced uses (sl_keys_pick), among
 * the keys not in `asked` (bit k: key k was asked already); -1 when none is left that
 * could hold it (with none asked yet: key 0, whose engine answers why). */
static int pick_key(sim_run_t *run, const sl_request_t *req, unsigned long long asked)
{
    sluice_state_t *s = run->sdata;
    if (run->n_providers < 2) return asked ? -1 : 0;
    sl_pool_info_t info[SL_SIM_KEYS_MAX];
    const sl_pool_info_t *keys[SL_SIM_KEYS_MAX];
    char name[80];
    sl_engine_advance(s->e, run->now_s);
    for (int k = 0; k < run->n_providers; k++)
        keys[k] = !(asked >> k & 1) &&
                          sl_engine_pool_info(s->e, key_pool(run, k, name, sizeof name), &info[k]) == SL_OK
                      ? &info[k]
                      : NULL;
    int best = sl_keys_pick(keys, (size_t)run->n_providers, req, run->now_s);
    return best < 0 && !asked ? 0 : best;
}

static int sluice_init_common(sim_run_t *run, bool equal, bool learned, char *err, size_t errlen)
{
    sluice_state_t *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->equal = equal;
    s->learned = learned;
    s->run = run;
    s->e = sl_engine_new(NULL);
    if (!s->e) goto oom;
    run->sdata = s;
    sl_engine_set_event_cb(s->e, on_event, s);
    const sl_provider_config_t *pc = &run->sc->provider;
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = pc->input_tpm;
    cfg.output_tpm = pc->output_tpm;
    cfg.rpm = pc->rpm;
    cfg.tokens_tpm = pc->tokens_tpm;
    cfg.cache_ttl_s = pc->cache_ttl_s;
    cfg.cache_reads_count = pc->cache_reads_count;
    if (equal) cfg.cache_bump = 1.0;
    cfg.output_reserve_learned = learned;
    cfg.margin_max = run->sc->margin_max;
    /* Its agents checkpoint before every wait, so a task's first call may wait parked
     * while the running tasks keep their caches warm (the working set, admit.c). */
    cfg.working_set = !equal;
    int rc = SL_OK;
    for (int k = 0; rc == SL_OK && k < run->n_providers; k++) {
        char name[80];
        if (run->sc->n_keys > 0) {
            cfg.input_tpm = run->sc->keys[k].input_tpm;
            cfg.output_tpm = run->sc->keys[k].output_tpm;
            cfg.rpm = run->sc->keys[k].rpm;
            cfg.tokens_tpm = run->sc->keys[k].tokens_tpm;
            /* One queue over the keys, as sluiced configures them (keyqueue.c). */
            cfg.key_group = run->sc->keys_per_key_queue ? 0 : 1;
        }
        rc = sl_engine_configure_pool(s->e, key_pool(run, k, name, sizeof name), &cfg, 0);
    }
    if (rc == SL_OK && equal) {
        rc = sl_engine_set_role(s->e, "planner", 1.0);
        if (rc == SL_OK) rc = sl_engine_set_role(s->e, "reviewer", 1.0);
    }
    for (int i = 0; rc == SL_OK && !equal && i < run->n_tasks; i++)
        rc = put_task(run, i, SL_TASK_WAITING);
    if (rc == SL_OK && !equal) rc = put_teams(run, s->e);
    if (rc != SL_OK) {
        snprintf(err, errlen, "engine: %s", sl_engine_errmsg(s->e));
        sl_engine_free(s->e);
        free(s);
        run->sdata = NULL;
        return -1;
    }
    return 0;
oom:
    free(s);
    snprintf(err, errlen, "out of memory");
    return -1;
}

static int sluice_init(sim_run_t *run, char *err, size_t errlen)
{
    return sluice_init_common(run, false, false, err, errlen);
}

static int sluice_learned_init(sim_run_t *run, char *err, size_t errlen)
{
    return sluice_init_common(run, false, true, err, errlen);
}

static int sluice_equal_init(sim_run_t *run, char *err, size_t errlen)
{
    return sluice_init_common(run, true, false, err, errlen);
}

static void sluice_fini(sim_run_t *run)
{
    sluice_state_t *s = run->sdata;
    if (!s) return;
    sl_engine_free(s->e);
    free(s->pending);
    free(s);
    run->sdata = NULL;
}

/* The agent's local count: its tokenizer is right within +-estimate_noise. */
static int64_t estimate(sim_run_t *run, sim_agent_t *a, int64_t tokens)
{
    double noise = run->sc->estimate_noise * (2.0 * sl_rng_uniform(&a->retry_rng) - 1.0);
    int64_t e = (int64_t)llround((double)tokens * (1.0 + noise));
    return e < 0 ? 0 : e;
}

static void sluice_want(sim_run_t *run, sim_agent_t *a)
{
    sluice_state_t *s = run->sdata;
    char cache_key[128];
    snprintf(cache_key, sizeof cache_key, "%s.k%d.e%" PRIu64, a->name, a->task_k, a->cache_epoch);
    int64_t in = estimate(run, a, a->call_tail), cached = estimate(run, a, a->call_prefix);
    if (a->call_prefix < run->sc->provider.cache_min_tokens) {
        in += cached; /* too short for the provider to cache */
        cached = 0;
    }
    sl_request_t req = {
        .agent = a->name,
        .input_tokens = in,
        .cached_tokens = cached,
        .output_tokens = a->g->max_tokens,
        .role = a->g->role,
        .task = s->equal ? NULL : run->tasks[a->task0 + a->task_k].id,
        .cache_key = cache_key,
        .ttl_s = 300,
        /* One "model" per agent group: the output distribution learned is the group's. */
        .model = s->learned ? a->g->name : NULL,
        .output_capped = s->learned, /* sent with max_tokens = the output reserved */
        /* Checkpointed, so held as the real client asks (0: sluice-equal, no checkpoint). */
        .max_wait_s = s->equal ? 0 : SL_CHECKPOINTED_MAX_WAIT_S,
    };
    char pool[80];
    /* The keys in the estimate's order: a key's reject for its wait or its agent's hold
     * asks the next (sl_keys_ask_next), as sluiced does; all rejecting, the least wait. */
    sl_decision_t d, best = {.status = SL_REJECTED, .retry_at = INFINITY};
    unsigned long long asked = 0;
    for (int k; (k = pick_key(run, &req, asked)) >= 0; asked |= 1ULL << k) {
        req.pool = key_pool(run, k, pool, sizeof pool);
        if (sl_engine_request(s->e, &req, run->now_s, &d) != SL_OK) {
            sl__sim_fail(run,
                         "%s: lease request (in %" PRId64 ", cached %" PRId64 ", out %" PRId64
                         "): %s",
                         a->name, in, cached, req.output_tokens, sl_engine_errmsg(s->e));
            return;
        }
        a->key = k;
        if (!sl_keys_ask_next(&d)) break;
        if (d.retry_at < best.retry_at) best = d;
        d = best;
    }
    if (d.status == SL_GRANTED) {
        grant(s, a, &d);
        sl__sim_send(run, a);
    } else if (d.status == SL_QUEUED) {
        a->ticket = d.ticket;
        sl_engine_ticket_hold(s->e, d.ticket, true, run->now_s);
    } else {
        sl__sim_timer(run, a, d.retry_at);
    }
    drain(run);
}

static void sluice_timer(sim_run_t *run, sim_agent_t *a)
{
    sluice_want(run, a);
}

static void sluice_give_up(sim_run_t *run, sim_agent_t *a)
{
    sluice_state_t *s = run->sdata;
    if (a->ticket) {
        sl_engine_ticket_cancel(s->e, a->ticket, run->now_s);
        a->ticket = 0;
    }
    drain(run);
}

/* The provider writes its rate-limit headers when its answer starts, while it holds this
 * call's max_tokens and the other calls then in flight; the pool holds the same
 * reservations now, and only until the settle refunds. So the pool resyncs here, as the
 * proxy does when the headers arrive (design.md, "Resync from provider headers"): the
 * same snapshot compared at the settle would take back the refunds and the refill of the
 * call's whole life. */
static void sluice_started(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    sluice_state_t *s = run->sdata;
    /* A 429's headers do not count the call: they go with its settle (sluice_result). */
    if (!a->lease || r->refusal != SL_PROVIDER_OK) return;
    sl_provider_header_t h[SL_PROVIDER_MAX_HEADERS];
    size_t nh = sl_provider_headers(run->providers[a->key], SL_PROVIDER_ANTHROPIC, r, run->now_s, h,
                                    SL_PROVIDER_MAX_HEADERS);
    const char *names[SL_PROVIDER_MAX_HEADERS], *values[SL_PROVIDER_MAX_HEADERS];
    for (size_t i = 0; i < nh; i++) {
        names[i] = h[i].name;
        values[i] = h[i].value;
    }
    if (nh > 0 && sl_engine_resync_lease(s->e, a->lease, names, values, nh, run->now_s, NULL) !=
                      SL_OK)
        sl__sim_fail(run, "%s: resync l_%" PRIu64 ": %s", a->name, a->lease,
                     sl_engine_errmsg(s->e));
}

/* The settle carries the usage only: the headers resynced the pool when they came, except
 * a 429's, which the provider wrote without the refused call: the engine applies them after
 * the refund and the cut (docs/design.md "Margin"), as sluiced's proxy sends them. */
static void sluice_result(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    sluice_state_t *s = run->sdata;
    if (!a->lease) return;
    sl_provider_header_t h[SL_PROVIDER_MAX_HEADERS];
    const char *names[SL_PROVIDER_MAX_HEADERS], *values[SL_PROVIDER_MAX_HEADERS];
    size_t nh = 0;
    if (r->refusal != SL_PROVIDER_OK)
        nh = sl_provider_headers(run->providers[a->key], SL_PROVIDER_ANTHROPIC, r, run->now_s, h,
                                 SL_PROVIDER_MAX_HEADERS);
    for (size_t i = 0; i < nh; i++) {
        names[i] = h[i].name;
        values[i] = h[i].value;
    }
    sl_settle_t st = {
        .input_tokens = r->input_tokens,
        .output_tokens = r->output_tokens,
        .cache_creation_input_tokens = r->cache_creation_input_tokens,
        .cache_read_input_tokens = r->cache_read_input_tokens,
        .got_429 = r->refusal != SL_PROVIDER_OK,
        .retry_after_s = r->retry_after_s,
        .spend_cap = r->refusal == SL_PROVIDER_SPEND_CAP,
        .failure_signature =
            !s->equal && a->fail_sig_pending && !a->recovering ? a->fail_sig : NULL,
        .header_names = nh ? names : NULL,
        .header_values = nh ? values : NULL,
        .header_count = nh,
    };
    sl_settle_result_t out;
    uint64_t lease = a->lease;
    a->lease = 0;
    int rc = sl_engine_settle(s->e, lease, &st, run->now_s, &out);
    if (rc != SL_OK && rc != SL_EEXPIRED)
        sl__sim_fail(run, "%s: settle l_%" PRIu64 ": %s", a->name, lease, sl_engine_errmsg(s->e));
    drain(run);
}

/* The fallback after a 429 on a granted lease: full jitter, base 1 s, cap 30 s,
 * and never sooner than the provider's retry-after. */
static double sluice_retry_delay(sim_run_t *run, sim_agent_t *a, const sl_provider_result_t *r)
{
    (void)run;
    double d = sl__sim_full_jitter(a, 1.0, 30.0);
    return r->retry_after_s > d ? r->retry_after_s : d;
}

static double sluice_next_wakeup(sim_run_t *run)
{
    sluice_state_t *s = run->sdata;
    return sl_engine_next_wakeup(s->e);
}

static void sluice_wakeup(sim_run_t *run)
{
    sluice_state_t *s = run->sdata;
    if (sl_engine_advance(s->e, run->now_s) != SL_OK) {
        sl__sim_fail(run, "engine advance: %s", sl_engine_errmsg(s->e));
        return;
    }
    drain(run);
    /* An engine that reports the same instant again would stall the clock. */
    if (sl_engine_next_wakeup(s->e) <= run->now_s)
        sl__sim_fail(run, "engine: next wakeup %.6f does not move past %.6f",
                     sl_engine_next_wakeup(s->e), run->now_s);
}

static void sluice_task_state(sim_run_t *run, int task, sl_task_state_t st)
{
    sluice_state_t *s = run->sdata;
    if (s->equal) return;
    if (put_task(run, task, st) != SL_OK)
        sl__sim_fail(run, "task %s: %s", run->tasks[task].id, sl_engine_errmsg(s->e));
}

/* The three sluice variants differ only in name, checkpointing and init. */
#define SLUICE_STRATEGY(name_, checkpoint_, init_)                                                 \
    {                                                                                              \
        .name = name_, .checkpoint = checkpoint_, .remote_wait = true, .init = init_,              \
        .fini = sluice_fini, .want = sluice_want, .timer = sluice_timer,                           \
        .give_up = sluice_give_up, .started = sluice_started, .result = sluice_result,             \
        .retry_delay = sluice_retry_delay, .next_wakeup = sluice_next_wakeup,                      \
        .wakeup = sluice_wakeup, .task_state = sluice_task_state,                                  \
    }

const sim_strategy_t sl__sim_sluice_equal =
    SLUICE_STRATEGY("sluice-equal", false, sluice_equal_init);

/* "sluice" with output_reserve: learned (docs/sim.md): the p95 of each group's real
 * outputs is reserved instead of max_tokens once 20 are known, and the call is sent with
 * max_tokens lowered to it (the proxy's capped forward): an answer longer than the
 * percentile is cut there and continued by another call (sim.c call_end, as the proxy
 * continues it), so the agent gets the whole answer. */
const sim_strategy_t sl__sim_sluice_learned =
    SLUICE_STRATEGY("sluice-learned", true, sluice_learned_init);

const sim_strategy_t sl__sim_sluice = SLUICE_STRATEGY("sluice", true, sluice_init);
