/* test_engine_properties.c - randomized operations, with docs/design.md's invariants after every step.
 *
 * Over several seeds, 1,000,000 operations in all: requests (with caches, roles,
 * priorities, tasks, repeated request ids), settles with random estimate errors,
 * 429s, spend caps, headers and failure signatures, cancels, extends, ticket polls,
 * holds and cancels, reconfigurations, bad input, and time jumps small and large.
 * After every step: sl_engine_check() (levels within capacity, queue ordered with
 * correct sums, head not fitting, counts consistent), and from the events: a grant
 * never takes a level below zero (but by a need above the starting capacity), every ticket and every lease ends exactly once.
 */
#include "../conformance/seeded.h"
#include "engine_harness.h"

#include <math.h>
#include <stdlib.h>

#include "test_main.h"

#define MAX_IDS 4096

typedef struct idset {
    uint64_t ids[MAX_IDS];
    int n;
} idset_t;

static void idset_add(idset_t *s, uint64_t id)
{
    if (s->n < MAX_IDS) s->ids[s->n++] = id;
}

static bool idset_remove(idset_t *s, uint64_t id)
{
    for (int i = 0; i < s->n; i++) {
        if (s->ids[i] == id) {
            s->ids[i] = s->ids[--s->n];
            return true;
        }
    }
    return false;
}

/* What each queued ticket waits for (its queued event): a need above the starting
 * capacity is queued clamped to it, and its grant charges the rest below zero. */
typedef struct queued_needs {
    uint64_t ids[MAX_IDS];
    int64_t in[MAX_IDS], out[MAX_IDS];
    int n;
} queued_needs_t;

/* The need ticket `id` was queued with (0, 0 when not recorded); forgets it. */
static void queued_take(queued_needs_t *q, uint64_t id, int64_t *in, int64_t *out)
{
    *in = *out = 0;
    for (int i = 0; i < q->n; i++) {
        if (q->ids[i] == id) {
            *in = q->in[i];
            *out = q->out[i];
            q->n--;
            q->ids[i] = q->ids[q->n], q->in[i] = q->in[q->n], q->out[i] = q->out[q->n];
            return;
        }
    }
}

typedef struct world {
    queued_needs_t queued;
    sl_engine_t *e;
    uint64_t rng;
    double now;
    idset_t leases;  /* live, as told by events */
    idset_t tickets; /* queued, as told by events */
    uint64_t max_id_seen;
    long grants, settles, ended_tickets, ended_leases;
    char failure[256];
} world_t;

static void fail_world(world_t *w, const char *what, uint64_t id)
{
    if (!w->failure[0])
        snprintf(w->failure, sizeof w->failure, "%s (id %llu)", what, (unsigned long long)id);
}

static void on_event(const sl_event_t *ev, void *ud)
{
    world_t *w = ud;
    switch (ev->kind) {
    case SL_EV_GRANTED: {
        w->grants++;
        if (ev->ticket && !idset_remove(&w->tickets, ev->ticket))
            fail_world(w, "granted a ticket that was not queued", ev->ticket);
        if (ev->ticket) w->ended_tickets++;
        idset_add(&w->leases, ev->lease);
        sl_pool_info_t info;
        sl_engine_pool_info(w->e, ev->pool, &info);
        /* ... but by the need above the starting capacity, which waits for a full bucket
         * and is charged whole (lease.c fit_capacity): at a direct grant what is above
         * today's, from the queue what is above the need it was queued with */
        const double need[SL_BUCKET_COUNT] = {(double)ev->input_tokens, (double)ev->output_tokens,
                                              1, (double)(ev->input_tokens + ev->output_tokens)};
        int64_t q_in = 0, q_out = 0;
        if (ev->ticket) queued_take(&w->queued, ev->ticket, &q_in, &q_out);
        const double waited[SL_BUCKET_COUNT] = {(double)q_in, (double)q_out, 1,
                                                (double)(q_in + q_out)};
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            double start_cap = floor((double)info.limit[b] * info.config.margin_start);
            double fit = ev->ticket ? waited[b] : fmin(need[b], start_cap);
            if (info.limit[b] > 0 && info.level[b] < fit - need[b] - 1e-6) {
                fail_world(w, "a grant took a level below zero", ev->lease);
            }
        }
        if (info.config.concurrency > 0 && info.leases_in_flight > info.config.concurrency)
            fail_world(w, "a grant went past the concurrency limit", ev->lease);
        break;
    }
    case SL_EV_QUEUED:
        idset_add(&w->tickets, ev->ticket);
        if (w->queued.n < MAX_IDS) {
            w->queued.ids[w->queued.n] = ev->ticket;
            w->queued.in[w->queued.n] = ev->input_tokens;
            w->queued.out[w->queued.n++] = ev->output_tokens;
        }
        break;
    case SL_EV_SETTLED:
    case SL_EV_CANCELLED:
    case SL_EV_REAPED:
    case SL_EV_UNCLAIMED:
        if (!idset_remove(&w->leases, ev->lease)) fail_world(w, "a lease ended twice", ev->lease);
        w->ended_leases++;
        if (ev->kind == SL_EV_SETTLED) w->settles++;
        break;
    case SL_EV_TICKET_CANCELLED:
    case SL_EV_TICKET_EXPIRED:
    case SL_EV_TICKET_REJECTED:
        if (!idset_remove(&w->tickets, ev->ticket))
            fail_world(w, "a ticket ended twice", ev->ticket);
        w->ended_tickets++;
        break;
    default:
        break;
    }
}

static uint64_t pick(world_t *w, const idset_t *s)
{
    if (s->n == 0 || rnd(&w->rng) % 16 == 0) return rnd_range(&w->rng, 1, 1000000); /* often unknown */
    return s->ids[rnd(&w->rng) % (uint64_t)s->n];
}

static const char *const AGENTS[] = {"planner-1", "rev-1", "w1", "w2", "w3", "w4", "w5", "w6"};
static const char *const ROLES[] = {"planner", "reviewer", "worker", "worker",
                                    "worker",  "worker",   "worker", "worker"};
static const char *const PRIOS[] = {"high", "normal", "normal", "low"};
static const char *const SIGS[] = {NULL, "", "test_a:1", "test_a:1", "test_b:2"};

static void op_request(world_t *w)
{
    int a = (int)(rnd(&w->rng) % 8);
    sl_request_t r;
    memset(&r, 0, sizeof r);
    r.agent = AGENTS[a];
    r.role = ROLES[a];
    r.priority = PRIOS[rnd(&w->rng) % 4];
    int size = (int)(rnd(&w->rng) % 10);
    r.input_tokens = size == 0 ? rnd_range(&w->rng, 40000, 80000) : rnd_range(&w->rng, 0, 8000);
    r.cached_tokens = rnd(&w->rng) % 3 == 0 ? rnd_range(&w->rng, 0, 30000) : 0;
    r.output_tokens = rnd_range(&w->rng, 0, 4000);
    r.task = rnd(&w->rng) % 4 == 0 ? "plan" : NULL;
    if (r.task && rnd(&w->rng) % 2) r.role = NULL; /* the task's role (planner), else a refusal */
    r.unblocks = rnd_range(&w->rng, 0, 3);
    r.cache_key = rnd(&w->rng) % 8 == 0 ? "shared-prefix" : NULL;
    char task_cache[16]; /* a task's own cache: its first call meets the working set */
    if (!r.cache_key && rnd(&w->rng) % 3 == 0) {
        snprintf(task_cache, sizeof task_cache, "task%d", (int)(rnd(&w->rng) % 64));
        r.cache_key = task_cache;
    }
    r.ttl_s = rnd(&w->rng) % 5 == 0 ? rnd01(&w->rng) * 1000 : 0;
    char rid[32];
    if (rnd(&w->rng) % 4 == 0) {
        snprintf(rid, sizeof rid, "r%d", (int)(rnd(&w->rng) % 50));
        r.request_id = rid;
    }
    if (rnd(&w->rng) % 3 == 0) r.pool = "second";
    if (rnd(&w->rng) % 2 == 0) r.model = rnd(&w->rng) % 2 ? "claude-x" : "gpt-y";
    if (rnd(&w->rng) % 3 == 0) r.max_wait_s = rnd01(&w->rng) * 600; /* the proxy's hold */
    sl_decision_t d;
    int rc = sl_engine_request(w->e, &r, w->now, &d);
    bool contradicts = r.task && r.role && strcmp(r.role, "planner") != 0; /* plan's role */
    if (rc != SL_OK && rc != SL_ECAPACITY && !(contradicts && rc == SL_EINVAL))
        fail_world(w, sl_engine_errmsg(w->e), 0);
}

static void op_settle(world_t *w)
{
    uint64_t id = pick(w, &w->leases);
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.input_tokens = rnd_range(&w->rng, 0, 60000);
    s.output_tokens = rnd_range(&w->rng, 0, 4000);
    s.cache_creation_input_tokens = rnd(&w->rng) % 4 == 0 ? rnd_range(&w->rng, 0, 20000) : 0;
    s.cache_read_input_tokens = rnd(&w->rng) % 4 == 0 ? rnd_range(&w->rng, 0, 20000) : 0;
    s.retry_after_s = -1;
    s.got_429 = rnd(&w->rng) % 25 == 0;
    if (s.got_429 && rnd(&w->rng) % 2) s.retry_after_s = rnd01(&w->rng) * 10;
    s.spend_cap = s.got_429 && rnd(&w->rng) % 5 == 0;
    s.failure_signature = SIGS[rnd(&w->rng) % 5];
    const char *names[] = {"anthropic-ratelimit-input-tokens-remaining",
                           "anthropic-ratelimit-output-tokens-limit"};
    char rem[32];
    snprintf(rem, sizeof rem, "%d", (int)rnd_range(&w->rng, 0, 100000));
    const char *values[] = {rem, rnd(&w->rng) % 2 ? "40000" : "50000"};
    if (rnd(&w->rng) % 10 == 0) {
        s.header_names = names;
        s.header_values = values;
        s.header_count = 2;
    }
    int rc = sl_engine_settle(w->e, id, &s, w->now, NULL);
    if (rc == SL_OK || rc == SL_ENOTFOUND || rc == SL_EALREADY || rc == SL_EEXPIRED) return;
    fail_world(w, sl_engine_errmsg(w->e), id);
}

static void op_time(world_t *w)
{
    int kind = (int)(rnd(&w->rng) % 20);
    if (kind == 0)
        w->now += rnd01(&w->rng) * 300;
    else if (kind < 4) {
        double next = sl_engine_next_wakeup(w->e);
        if (isfinite(next) && next > w->now && next - w->now < 3600) w->now = next;
    } else
        w->now += rnd01(&w->rng) * 2;
    if (sl_engine_advance(w->e, w->now) != SL_OK) fail_world(w, sl_engine_errmsg(w->e), 0);
}

static void op_misc(world_t *w)
{
    sl_decision_t d;
    double exp;
    int rc = SL_OK;
    switch (rnd(&w->rng) % 9) {
    case 0:
        rc = sl_engine_cancel(w->e, pick(w, &w->leases), w->now);
        break;
    case 1:
        rc = sl_engine_extend(w->e, pick(w, &w->leases), rnd01(&w->rng) * 900 + 1, w->now, &exp);
        break;
    case 2:
        rc = sl_engine_ticket(w->e, pick(w, &w->tickets), w->now, &d);
        break;
    case 3:
        rc = sl_engine_ticket_cancel(w->e, pick(w, &w->tickets), w->now);
        break;
    case 4:
        rc = sl_engine_ticket_hold(w->e, pick(w, &w->tickets), rnd(&w->rng) % 2, w->now);
        break;
    case 5: {
        const char *deps[] = {"plan"};
        char id[8];
        snprintf(id, sizeof id, "t%d", (int)(rnd(&w->rng) % 8));
        rc = sl_engine_task_put(w->e, id, "worker", deps, 1, (sl_task_state_t)(rnd(&w->rng) % 3));
        break;
    }
    case 6: {
        sl_pool_config_t cfg = harness_config();
        cfg.input_tpm = rnd_range(&w->rng, 90000, 200000);
        cfg.output_tpm = rnd_range(&w->rng, 20000, 40000);
        cfg.rpm = rnd_range(&w->rng, 50, 200);
        cfg.concurrency = rnd(&w->rng) % 2 ? 0 : rnd_range(&w->rng, 3, 10);
        cfg.working_set = rnd(&w->rng) % 2;
        cfg.backfill = rnd(&w->rng) % 4 != 0;
        rc = sl_engine_configure_pool(w->e, "default", &cfg, w->now);
        break;
    }
    case 7: {
        /* Bad input changes nothing. */
        harness_snapshot_t before = harness_snapshot(w->e);
        sl_request_t r = harness_req("w1", -1, 10);
        if (sl_engine_request(w->e, &r, w->now, &d) != SL_EINVAL) fail_world(w, "accepted -1", 0);
        if (sl_engine_advance(w->e, w->now - 1) != SL_ETIME) fail_world(w, "time went back", 0);
        if (strcmp(before.text, harness_snapshot(w->e).text) != 0)
            fail_world(w, "a refused call changed the state", 0);
        break;
    }
    default: {
        const char *n[] = {"x-ratelimit-remaining-requests"};
        char v[16];
        snprintf(v, sizeof v, "%d", (int)rnd_range(&w->rng, 0, 200));
        const char *vals[] = {v};
        rc = sl_engine_resync(w->e, "second", n, vals, 1, w->now, NULL);
        break;
    }
    }
    if (rc != SL_OK && rc != SL_ENOTFOUND && rc != SL_EALREADY && rc != SL_EEXPIRED)
        fail_world(w, sl_engine_errmsg(w->e), 0);
}

static void run_seed(uint64_t seed, long ops)
{
    world_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    sl_engine_config_t ecfg;
    sl_engine_config_init(&ecfg);
    ecfg.tombstone_ttl_s = 60; /* keeps the maps small, so the full check stays cheap */
    w->e = sl_engine_new(&ecfg);
    w->rng = seed * 2654435761ULL + 1;
    w->now = T0;
    sl_engine_set_event_cb(w->e, on_event, w);
    sl_pool_config_t cfg = harness_pool(100000, 30000, 100);
    cfg.claim_timeout_s = 20;
    cfg.ticket_idle_s = 40;
    assert_int_equal(sl_engine_configure_pool(w->e, "default", &cfg, w->now), SL_OK);
    cfg.tokens_tpm = 150000;
    cfg.concurrency = 6;
    cfg.price_input_per_mtok = 3;
    cfg.price_output_per_mtok = 15;
    cfg.cache_reads_count = true;
    cfg.working_set = true;
    assert_int_equal(sl_engine_configure_pool(w->e, "second", &cfg, w->now), SL_OK);
    assert_int_equal(sl_engine_task_put(w->e, "plan", "planner", NULL, 0, SL_TASK_RUNNING), SL_OK);
    /* Caps on some agents and a team, so their buckets take part too. */
    sl_caps_t caps = {
        .max_share = 0.3, .max_rpm = 40, .max_concurrent = 3, .budget_usd_per_hour = 50};
    assert_int_equal(sl_engine_set_caps(w->e, "w1", false, &caps), SL_OK);
    sl_caps_t team = {.max_rpm = 60, .budget_usd_per_day = 100};
    assert_int_equal(sl_engine_set_caps(w->e, "workers", true, &team), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(w->e, "w2", "workers"), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(w->e, "w3", "workers"), SL_OK);
    /* Agents held back only by max_concurrent, so tickets park and wake (caps.c). */
    sl_caps_t solo = {.max_concurrent = 1};
    assert_int_equal(sl_engine_set_caps(w->e, "w4", false, &solo), SL_OK);
    sl_caps_t pair = {.max_concurrent = 2};
    assert_int_equal(sl_engine_set_caps(w->e, "pairs", true, &pair), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(w->e, "w5", "pairs"), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(w->e, "w6", "pairs"), SL_OK);
    /* Three queue teams (workers, ops, default), weighted: the hierarchical queue too. */
    assert_int_equal(sl_engine_set_team_weight(w->e, "workers", 2.5), SL_OK);
    assert_int_equal(sl_engine_set_team_weight(w->e, "ops", 0.5), SL_OK);
    assert_int_equal(sl_engine_set_agent_team(w->e, "w4", "ops"), SL_OK);
    for (long i = 0; i < ops; i++) {
        int op = (int)(rnd(&w->rng) % 10);
        if (op < 4)
            op_request(w);
        else if (op < 6)
            op_settle(w);
        else if (op < 8)
            op_time(w);
        else
            op_misc(w);
        if (sl_engine_check(w->e) != SL_OK)
            fail_msg("seed %llu op %ld: %s", (unsigned long long)seed, i, sl_engine_errmsg(w->e));
        if (w->failure[0])
            fail_msg("seed %llu op %ld: %s", (unsigned long long)seed, i, w->failure);
    }
    /* Let everything end: every lease and ticket ends exactly once. A held ticket
     * parked on a max_concurrent cap of 1 is granted only when the lease before it
     * ended (one per advance), so advance until nothing is left, a bounded number of
     * times. */
    for (int i = 0; i < 2 || (i < 256 && (w->leases.n || w->tickets.n)); i++) {
        w->now += 100000;
        assert_int_equal(sl_engine_advance(w->e, w->now), SL_OK);
    }
    harness_check(w->e);
    if (w->failure[0]) fail_msg("seed %llu at the end: %s", (unsigned long long)seed, w->failure);
    assert_int_equal(w->leases.n, 0);
    assert_int_equal(w->tickets.n, 0);
    print_message("seed %llu: %ld ops, %ld grants, %ld settles, %ld tickets ended, %ld leases "
                  "ended\n",
                  (unsigned long long)seed, ops, w->grants, w->settles, w->ended_tickets,
                  w->ended_leases);
    sl_engine_free(w->e);
    free(w);
}

static void test_invariants_hold_over_a_million_random_operations(void **state)
{
    (void)state;
    const long total = 1000000;
    const int seeds = 5;
    for (int s = 1; s <= seeds; s++)
        run_seed((uint64_t)s, total / seeds);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_invariants_hold_over_a_million_random_operations))
