/* test_limits_set.c - the limit set: hierarchy all or nothing, peeks, costs, key eviction, request errors, and a seeded property run. */
#include "limits_harness.h"

#include <stdlib.h>

#include "test_main.h"

/* db.query per agent, under db.all per team, under global: three levels. */
static const char *HIER =
    "{\"db.query\": {\"algorithm\": \"token_bucket\", \"rate\": 1, \"period_s\": 1, \"burst\": 5,"
    "                \"per\": \"agent\", \"costs\": {\"read\": 1, \"write\": 3}, \"parents\": [\"db.all\"]},"
    " \"db.all\":   {\"algorithm\": \"fixed_window\", \"rate\": 8, \"period_s\": 60, \"per\": \"team\","
    "                \"parents\": [\"global\"]},"
    " \"global\":   {\"algorithm\": \"sliding_window\", \"rate\": 100, \"period_s\": 60, \"per\": \"global\"}}";

static sl_limit_result_t check_as(sl_limits_t *ls, const char *name, const char *agent,
                                  const char *team, const char *action, int64_t hits, double t_s)
{
    sl_limit_request_t req = {.agent = agent, .team = team, .action = action, .hits = hits};
    sl_limit_result_t r;
    int rc = sl_limits_check(ls, name, &req, AT(t_s), &r);
    if (rc) fail_msg("check failed: %s", sl_limits_errmsg(ls));
    return r;
}

static void test_check_lists_every_level_nearest_first(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(HIER);
    sl_limit_result_t r = check_as(ls, "db.query", "a1", "red", NULL, 1, 0);
    assert_true(r.allowed);
    assert_int_equal(r.n_checked, 3);
    assert_string_equal(r.checked[0].limit_name, "db.query");
    assert_string_equal(r.checked[0].key, "a1");
    assert_int_equal(r.checked[0].remaining, 4);
    assert_string_equal(r.checked[1].limit_name, "db.all");
    assert_string_equal(r.checked[1].key, "red");
    assert_int_equal(r.checked[1].remaining, 7);
    assert_string_equal(r.checked[2].limit_name, "global");
    assert_string_equal(r.checked[2].key, "*");
    assert_int_equal(r.checked[2].remaining, 99);
    /* The top fields are the most restrictive level's: the fewest remaining. */
    assert_int_equal(r.top, 0);
    assert_int_equal(r.remaining, 4);
    assert_int_equal(r.denied_by, -1);
    sl_limits_free(ls);
}

static void test_a_deny_at_a_parent_consumes_nothing_at_any_level(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(HIER);
    /* Two agents of team red use up db.all's 8 (a1: 5, a2: 3). */
    for (int i = 0; i < 5; i++) assert_true(check_as(ls, "db.query", "a1", "red", NULL, 1, 0).allowed);
    for (int i = 0; i < 3; i++) assert_true(check_as(ls, "db.query", "a2", "red", NULL, 1, 0).allowed);
    sl_limit_result_t before = check_as(ls, "db.query", "a2", "red", NULL, 0, 0);
    sl_limit_result_t r = check_as(ls, "db.query", "a2", "red", NULL, 1, 0);
    assert_false(r.allowed);
    assert_int_equal(r.denied_by, 1);
    assert_string_equal(r.checked[r.denied_by].limit_name, "db.all");
    assert_string_equal(r.checked[r.denied_by].key, "red");
    assert_int_equal(r.retry_after_us, US(60)); /* db.all's window ends */
    assert_int_equal(r.limit, 8);
    /* a2's own bucket and the global log were not touched. */
    sl_limit_result_t after = check_as(ls, "db.query", "a2", "red", NULL, 0, 0);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(after.checked[i].remaining, before.checked[i].remaining);
        assert_int_equal(after.checked[i].reset_after_us, before.checked[i].reset_after_us);
    }
    assert_int_equal(after.checked[0].remaining, 2);
    assert_int_equal(after.checked[2].remaining, 92);
    /* Another team is not held by red's window. */
    assert_true(check_as(ls, "db.query", "a3", "blue", NULL, 1, 0).allowed);
    sl_limits_free(ls);
}

static void test_the_longest_wait_names_the_denying_level(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(HIER);
    for (int i = 0; i < 3; i++) assert_true(check_as(ls, "db.query", "a2", "red", NULL, 1, 0).allowed);
    for (int i = 0; i < 5; i++) assert_true(check_as(ls, "db.query", "a1", "red", NULL, 1, 59.2).allowed);
    /* At 59.5 s both deny: a1's bucket for 0.7 s, db.all until its window ends in 0.5 s. */
    sl_limit_result_t r = check_as(ls, "db.query", "a1", "red", NULL, 1, 59.5);
    assert_false(r.allowed);
    assert_int_equal(r.checked[0].reason, SL_LIMIT_RATE);
    assert_int_equal(r.checked[1].reason, SL_LIMIT_RATE);
    assert_int_equal(r.retry_after_us, US(0.7));
    assert_int_equal(r.denied_by, 0);
    assert_int_equal(r.limit, 5);
    /* a3's bucket is full: only db.all denies, and names itself. */
    r = check_as(ls, "db.query", "a3", "red", NULL, 1, 59.5);
    assert_false(r.allowed);
    assert_int_equal(r.checked[0].reason, SL_LIMIT_ALLOWED);
    assert_int_equal(r.denied_by, 1);
    assert_int_equal(r.retry_after_us, US(0.5));
    assert_int_equal(r.limit, 8);
    assert_int_equal(r.remaining, 0);
    sl_limits_free(ls);
}

static void test_peek_with_zero_hits_changes_nothing(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(HIER);
    sl_limit_result_t r = check_as(ls, "db.query", "new", "red", NULL, 0, 0);
    assert_true(r.allowed);
    assert_int_equal(r.checked[0].remaining, 5);
    size_t keys = 99;
    assert_int_equal(sl_limits_config(ls, "db.query", NULL, &keys), SL_OK);
    assert_int_equal(keys, 0); /* a peek does not even create the key */
    for (int i = 0; i < 10; i++) check_as(ls, "db.query", "new", "red", NULL, 0, 0);
    r = check_as(ls, "db.query", "new", "red", NULL, 5, 0);
    assert_true(r.allowed);
    assert_int_equal(r.checked[0].remaining, 0);
    sl_limits_free(ls);
}

static void test_costs_apply_per_action_and_per_level(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(HIER);
    /* write costs 3 at db.query, 1 at the parents (they list no costs). */
    sl_limit_result_t r = check_as(ls, "db.query", "a1", "red", "write", 1, 0);
    assert_true(r.allowed);
    assert_int_equal(r.checked[0].cost, 3);
    assert_int_equal(r.checked[0].remaining, 2);
    assert_int_equal(r.checked[1].cost, 1);
    assert_int_equal(r.checked[1].remaining, 7);
    /* An action no level lists costs 1; hits multiply. */
    r = check_as(ls, "db.query", "a1", "red", "scan", 2, 0);
    assert_true(r.allowed);
    assert_int_equal(r.checked[0].remaining, 0);
    r = check_as(ls, "db.query", "a1", "red", "write", 1, 3);
    assert_true(r.allowed);
    r = check_as(ls, "db.query", "a1", "red", "write", 2, 100);
    assert_false(r.allowed); /* 6 > burst 5: never */
    assert_int_equal(r.retry_after_us, -1);
    assert_int_equal(r.checked[0].reason, SL_LIMIT_NEVER);
    sl_limits_free(ls);
}

static void test_when_says_when_a_queued_check_would_pass(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(HIER);
    sl_limit_request_t req = {.agent = "a1", .team = "red", .hits = 1};
    for (int i = 0; i < 5; i++) assert_true(check_as(ls, "db.query", "a1", "red", NULL, 1, 0).allowed);
    int64_t at = 0;
    assert_int_equal(sl_limits_when(ls, "db.query", &req, AT(0), &at), SL_OK);
    assert_int_equal(at, AT(1));
    assert_false(check_as(ls, "db.query", "a1", "red", NULL, 1, 1 - 1e-6).allowed);
    assert_true(check_as(ls, "db.query", "a1", "red", NULL, 1, 1).allowed);
    req.hits = 6;
    assert_int_equal(sl_limits_when(ls, "db.query", &req, AT(2), &at), SL_ECAPACITY);
    req.hits = 0;
    assert_int_equal(sl_limits_when(ls, "db.query", &req, AT(2), &at), SL_OK);
    assert_int_equal(at, AT(2));
    sl_limits_free(ls);
}

static void test_request_errors_name_the_field(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(
        "{\"k\": {\"rate\": 5, \"per\": \"key\"}, \"t\": {\"rate\": 5, \"per\": \"team\"}}");
    sl_limit_result_t r;
    sl_limit_request_t req = {.agent = "a", .hits = 1};
    assert_int_equal(sl_limits_check(ls, "k", &req, AT(0), &r), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "key: required by limit \"k\" (per: key)");
    assert_int_equal(sl_limits_check(ls, "t", &req, AT(0), &r), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "team: required by limit \"t\" (per: team)");
    assert_int_equal(sl_limits_check(ls, "nope", &req, AT(0), &r), SL_ENOTFOUND);
    assert_string_equal(sl_limits_errmsg(ls), "limit \"nope\": not configured");
    req.key = "x";
    req.hits = -1;
    assert_int_equal(sl_limits_check(ls, "k", &req, AT(0), &r), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "hits: -1 out of range (0..1000000000)");
    char longkey[300];
    memset(longkey, 'x', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    req.hits = 1;
    req.key = longkey;
    assert_int_equal(sl_limits_check(ls, "k", &req, AT(0), &r), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "key: longer than 256 bytes "
                                              "('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...', 299 bytes)");
    req.key = "x";
    assert_int_equal(sl_limits_release(ls, "k", &req, AT(0)), SL_EINVAL);
    assert_int_equal(sl_limits_report(ls, "k", &req, 1, 0, AT(0), NULL), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "limit \"k\": not adaptive");
    size_t keys = 9;
    assert_int_equal(sl_limits_config(ls, "k", NULL, &keys), SL_OK);
    assert_int_equal(keys, 0);
    sl_limits_free(ls);
}

static void test_keys_at_rest_are_forgotten_and_a_full_limit_denies_new_keys(void **state)
{
    (void)state;
    sl_limits_t *ls =
        harness_set("{\"x\": {\"rate\": 1, \"period_s\": 1, \"burst\": 2, \"max_keys\": 2}}");
    assert_true(harness_check(ls, "x", "a", 1, 0).allowed);
    assert_true(harness_check(ls, "x", "b", 2, 0.5).allowed);
    /* Full, nobody at rest: a is full again at 1 s, b at 2.5 s. */
    sl_limit_result_t r = harness_check(ls, "x", "c", 1, 0.6);
    assert_false(r.allowed);
    assert_int_equal(r.checked[0].reason, SL_LIMIT_MAX_KEYS);
    assert_int_equal(r.retry_after_us, US(0.4));
    sl_limit_request_t req = harness_req("c", 1);
    assert_int_equal(sl_limits_probe(ls, "x", &req, AT(0.6), &r), SL_OK);
    assert_int_equal(r.checked[0].reason, SL_LIMIT_MAX_KEYS);
    /* Peeks of a new key still answer, as a fresh key, and change nothing. */
    r = harness_check(ls, "x", "c", 0, 0.6);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 2);
    /* At 1 s a is at rest: it is forgotten and c gets its place. */
    r = harness_check(ls, "x", "c", 1, 1.0);
    assert_true(r.allowed);
    size_t keys = 0;
    assert_int_equal(sl_limits_config(ls, "x", NULL, &keys), SL_OK);
    assert_int_equal(keys, 2);
    /* A forgotten key answers as it would have. */
    r = harness_check(ls, "x", "a", 0, 1.0);
    assert_int_equal(r.remaining, 2);
    assert_int_equal(sl_limits_sweep(ls, AT(100)), 2);
    assert_int_equal(sl_limits_config(ls, "x", NULL, &keys), SL_OK);
    assert_int_equal(keys, 0);
    sl_limits_free(ls);
}

static void test_many_keys_stay_findable_through_growth_and_sweeps(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set("{\"x\": {\"algorithm\": \"fixed_window\", \"rate\": 3, \"period_s\": 10}}");
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "k%d", i);
        assert_true(harness_check(ls, "x", name, i % 3 + 1, i % 2 ? 5 : 15).allowed);
    }
    /* At 15 s the keys hit at 5 s are at rest; the others are not. */
    assert_int_equal(sl_limits_sweep(ls, AT(15)), 2500);
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "k%d", i);
        sl_limit_result_t r = harness_check(ls, "x", name, 0, 15);
        assert_int_equal(r.remaining, i % 2 ? 3 : 3 - (i % 3 + 1));
    }
    sl_limits_free(ls);
}

/* ---- a seeded property run: random checks on a random three-level hierarchy ---- */

#define AGENTS 4
#define STEPS 4000

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* What each level allowed, to check no level was overdrawn: (time, units). */
typedef struct taken {
    int64_t t_us, units;
    int64_t end_us; /* concurrency: when the hold ends (released or TTL) */
} taken_t;

typedef struct model {
    sl_limit_algorithm_t alg;
    double rate, period_s, burst, ttl_s;
    taken_t taken[AGENTS][STEPS];
    int n[AGENTS];
} model_t;

static const char *ALG[] = {"token_bucket", "leaky_bucket", "fixed_window", "sliding_window",
                            "sliding_window_approx", "gcra", "concurrency"};

static void limit_json(char *buf, size_t n, const char *name, const model_t *m, const char *per,
                       const char *parent)
{
    char extra[160] = "";
    if (m->alg == SL_LIMIT_CONCURRENCY) snprintf(extra, sizeof extra, ", \"ttl_s\": %g", m->ttl_s);
    else snprintf(extra, sizeof extra, ", \"period_s\": %g", m->period_s);
    if (m->alg == SL_LIMIT_TOKEN_BUCKET || m->alg == SL_LIMIT_LEAKY_BUCKET || m->alg == SL_LIMIT_GCRA)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", \"burst\": %g", m->burst);
    snprintf(buf, n, "\"%s\": {\"algorithm\": \"%s\", \"rate\": %g, \"per\": \"%s\"%s%s%s%s%s}", name,
             ALG[m->alg], m->rate, per, extra, parent ? ", \"parents\": [\"" : "",
             parent ? parent : "", parent ? "\"]" : "",
             strcmp(name, "leaf") == 0 ? ", \"costs\": {\"w\": 2}" : "");
}

/* The most units any interval [a, now] may hold, per the algorithm's definition. */
static void check_not_overdrawn(const model_t *m, int slot, int64_t now_us)
{
    const taken_t *tk = m->taken[slot];
    int n = m->n[slot];
    int64_t period_us = US(m->period_s);
    for (int i = 0; i < n; i++) {
        int64_t sum = 0;
        for (int j = i; j < n; j++) sum += tk[j].units;
        double allowed_max;
        switch (m->alg) {
        case SL_LIMIT_TOKEN_BUCKET:
        case SL_LIMIT_LEAKY_BUCKET:
        case SL_LIMIT_GCRA: {
            int64_t interval = (int64_t)((double)period_us / m->rate);
            allowed_max = m->burst + (double)(now_us - tk[i].t_us) / (double)interval + 1e-6;
            break;
        }
        case SL_LIMIT_SLIDING_WINDOW:
            /* Any period-long interval: only entries after now - period count. */
            if (tk[i].t_us + period_us <= now_us) continue;
            allowed_max = m->rate;
            break;
        case SL_LIMIT_FIXED_WINDOW:
            if (tk[i].t_us / period_us != now_us / period_us) continue;
            allowed_max = m->rate;
            break;
        case SL_LIMIT_SLIDING_WINDOW_APPROX:
            /* The estimate bounds a period to twice the rate at worst. */
            if (tk[i].t_us + period_us <= now_us) continue;
            allowed_max = 2 * m->rate;
            break;
        default: { /* concurrency: holds live at now */
            sum = 0;
            for (int j = 0; j < n; j++)
                if (tk[j].end_us > now_us) sum += tk[j].units;
            allowed_max = m->rate;
            i = n;
            break;
        }
        }
        if ((double)sum > allowed_max)
            fail_msg("%s slot %d overdrawn at %lld: %lld units since %lld, at most %g", ALG[m->alg],
                     slot, (long long)(now_us - T0_US), (long long)sum,
                     (long long)(tk[i < n ? i : 0].t_us - T0_US), allowed_max);
    }
}

static bool same_levels(const sl_limit_result_t *a, const sl_limit_result_t *b)
{
    if (a->n_checked != b->n_checked) return false;
    for (size_t i = 0; i < a->n_checked; i++)
        if (a->checked[i].remaining != b->checked[i].remaining ||
            a->checked[i].reset_after_us != b->checked[i].reset_after_us ||
            a->checked[i].retry_after_us != b->checked[i].retry_after_us)
            return false;
    return true;
}

static void random_model(model_t *m)
{
    memset(m, 0, sizeof *m);
    m->alg = (sl_limit_algorithm_t)(rnd() % SL_LIMIT_ALGORITHM_COUNT);
    m->rate = (double)(rnd() % 8 + 2);
    m->period_s = (double)(rnd() % 4 + 1);
    m->burst = (double)(rnd() % 5 + 1);
    m->ttl_s = (double)(rnd() % 3 + 1);
}

static void run_property(uint64_t seed)
{
    rng_state = seed;
    static model_t leaf, mid, top; /* per agent, per team (2 teams), global */
    random_model(&leaf);
    random_model(&mid);
    random_model(&top);
    char json[2048], a[600], b[600], c[600];
    limit_json(a, sizeof a, "leaf", &leaf, "agent", "mid");
    limit_json(b, sizeof b, "mid", &mid, "team", "top");
    limit_json(c, sizeof c, "top", &top, "global", NULL);
    snprintf(json, sizeof json, "{%s, %s, %s}", a, b, c);
    sl_limits_t *ls = harness_set(json);
    static const char *agents[AGENTS] = {"a0", "a1", "a2", "a3"};
    static const char *teams[AGENTS] = {"red", "red", "blue", "blue"};
    int64_t now = T0_US;
    model_t *models[3] = {&leaf, &mid, &top};
    for (int step = 0; step < STEPS; step++) {
        now += (int64_t)(rnd() % 400000);
        int ag = (int)(rnd() % AGENTS);
        int slots[3] = {ag, ag < 2 ? 0 : 1, 0};
        sl_limit_request_t req = {.agent = agents[ag], .team = teams[ag],
                                  .action = rnd() % 3 == 0 ? "w" : NULL,
                                  .hits = (int64_t)(rnd() % 4)};
        if (rnd() % 10 == 0) {
            /* Release one hold of every concurrency level, as a caller would. */
            for (int lv = 0; lv < 3; lv++) {
                model_t *m = models[lv];
                if (m->alg != SL_LIMIT_CONCURRENCY) continue;
                int rc = sl_limits_release(ls, lv == 0 ? "leaf" : lv == 1 ? "mid" : "top", &req, now);
                taken_t *oldest = NULL;
                for (int j = 0; j < m->n[slots[lv]]; j++)
                    if (m->taken[slots[lv]][j].end_us > now && m->taken[slots[lv]][j].units > 0) {
                        oldest = &m->taken[slots[lv]][j];
                        break;
                    }
                assert_int_equal(rc, oldest ? SL_OK : SL_ENOTFOUND);
                if (oldest) oldest->end_us = now;
            }
            continue;
        }
        sl_limit_result_t before, r, after;
        sl_limit_request_t peek = req;
        peek.hits = 0;
        assert_int_equal(sl_limits_check(ls, "leaf", &peek, now, &before), SL_OK);
        sl_limit_result_t probed;
        assert_int_equal(sl_limits_probe(ls, "leaf", &req, now, &probed), SL_OK);
        assert_int_equal(sl_limits_check(ls, "leaf", &req, now, &r), SL_OK);
        /* A probe answers what the check then did. */
        assert_int_equal(probed.allowed, r.allowed);
        assert_true(same_levels(&probed, &r));
        bool all = true;
        for (size_t i = 0; i < r.n_checked; i++) all = all && r.checked[i].reason == SL_LIMIT_ALLOWED;
        assert_int_equal(all, r.allowed);
        assert_int_equal(sl_limits_check(ls, "leaf", &peek, now, &after), SL_OK);
        if (!r.allowed || req.hits == 0) {
            /* Nothing consumed at any level. */
            if (!same_levels(&before, &after)) fail_msg("step %d: a deny or peek changed state", step);
            if (!r.allowed) {
                assert_true(r.denied_by >= 0);
                assert_int_not_equal(r.checked[r.denied_by].reason, SL_LIMIT_ALLOWED);
                /* Waiting retry_after is enough, when nothing else happens meanwhile. */
                if (r.retry_after_us >= 0) {
                    sl_limit_result_t later;
                    assert_int_equal(sl_limits_probe(ls, "leaf", &req, now + r.retry_after_us, &later), SL_OK);
                    if (!later.allowed) fail_msg("step %d: still denied after retry_after", step);
                }
            }
            continue;
        }
        for (int lv = 0; lv < 3; lv++) {
            model_t *m = models[lv];
            taken_t *t = &m->taken[slots[lv]][m->n[slots[lv]]++];
            t->t_us = now;
            t->units = r.checked[lv].cost;
            t->end_us = now + US(m->ttl_s);
            check_not_overdrawn(m, slots[lv], now);
        }
    }
    sl_limits_free(ls);
}

/* Adaptive levels of every algorithm under random reports: the rate stays in its bounds,
 * and denies, peeks and probes keep their promises whatever the rate did. */
static void run_adaptive_property(uint64_t seed)
{
    rng_state = seed;
    int alg = (int)(rnd() % SL_LIMIT_ALGORITHM_COUNT);
    bool conc = alg == SL_LIMIT_CONCURRENCY;
    bool burst = alg == SL_LIMIT_TOKEN_BUCKET || alg == SL_LIMIT_LEAKY_BUCKET || alg == SL_LIMIT_GCRA;
    char json[1024];
    snprintf(json, sizeof json,
             "{\"leaf\": {\"algorithm\": \"%s\", \"rate\": 8%s%s, \"parents\": [\"top\"],"
             " \"adaptive\": {\"min_rate\": 2, \"max_rate\": 40, \"window\": 20}},"
             " \"top\": {\"algorithm\": \"gcra\", \"rate\": 30, \"burst\": 6, \"per\": \"global\","
             " \"adaptive\": {\"min_rate\": 5, \"max_rate\": 60, \"window\": 50}}}",
             ALG[alg], conc ? ", \"ttl_s\": 2" : ", \"period_s\": 2", burst ? ", \"burst\": 4" : "");
    sl_limits_t *ls = harness_set(json);
    static const char *agents[3] = {"a0", "a1", "a2"};
    int64_t now = T0_US;
    for (int step = 0; step < 3000; step++) {
        now += (int64_t)(rnd() % 300000);
        sl_limit_request_t req = {.agent = agents[rnd() % 3], .hits = (int64_t)(rnd() % 3)};
        int op = (int)(rnd() % 10);
        if (op < 3) {
            const char *name = op == 0 ? "top" : "leaf";
            int64_t ok = (int64_t)(rnd() % 20), err = (int64_t)(rnd() % 6);
            double rate = 0;
            int rc = sl_limits_report(ls, name, &req, ok, err, now, &rate);
            if (ok + err == 0) {
                assert_int_equal(rc, SL_EINVAL);
                continue;
            }
            assert_int_equal(rc, SL_OK);
            assert_true(rate >= (op == 0 ? 5 : 2) && rate <= (op == 0 ? 60 : 40));
            continue;
        }
        if (op == 3 && conc) {
            int rc = sl_limits_release(ls, "leaf", &req, now);
            assert_true(rc == SL_OK || rc == SL_ENOTFOUND);
            continue;
        }
        sl_limit_result_t before, probed, r, after;
        sl_limit_request_t peek = req;
        peek.hits = 0;
        assert_int_equal(sl_limits_check(ls, "leaf", &peek, now, &before), SL_OK);
        assert_true(before.allowed);
        assert_int_equal(sl_limits_probe(ls, "leaf", &req, now, &probed), SL_OK);
        assert_int_equal(sl_limits_check(ls, "leaf", &req, now, &r), SL_OK);
        assert_int_equal(probed.allowed, r.allowed);
        assert_true(same_levels(&probed, &r));
        assert_int_equal(sl_limits_check(ls, "leaf", &peek, now, &after), SL_OK);
        for (size_t i = 0; i < r.n_checked; i++) assert_true(r.checked[i].remaining >= 0);
        if (r.allowed && req.hits > 0) continue;
        if (!same_levels(&before, &after)) fail_msg("seed %llx step %d: a deny or peek changed state",
                                                    (unsigned long long)seed, step);
        if (!r.allowed && r.retry_after_us >= 0) {
            sl_limit_result_t later;
            assert_int_equal(sl_limits_probe(ls, "leaf", &req, now + r.retry_after_us, &later), SL_OK);
            if (!later.allowed)
                fail_msg("seed %llx step %d (%s): still denied after retry_after", (unsigned long long)seed,
                         step, ALG[alg]);
        }
    }
    sl_limits_free(ls);
}

static void test_adaptive_levels_keep_the_promises_under_random_reports(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 35; seed++) run_adaptive_property(seed * 0xD1B54A32D192ED03ULL);
}

static void test_random_checks_never_overdraw_and_denies_change_nothing(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++) run_property(seed * 0x9E3779B97F4A7C15ULL);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_check_lists_every_level_nearest_first),
    cmocka_unit_test(test_a_deny_at_a_parent_consumes_nothing_at_any_level),
    cmocka_unit_test(test_the_longest_wait_names_the_denying_level),
    cmocka_unit_test(test_peek_with_zero_hits_changes_nothing),
    cmocka_unit_test(test_costs_apply_per_action_and_per_level),
    cmocka_unit_test(test_when_says_when_a_queued_check_would_pass),
    cmocka_unit_test(test_request_errors_name_the_field),
    cmocka_unit_test(test_keys_at_rest_are_forgotten_and_a_full_limit_denies_new_keys),
    cmocka_unit_test(test_many_keys_stay_findable_through_growth_and_sweeps),
    cmocka_unit_test(test_random_checks_never_overdraw_and_denies_change_nothing),
    cmocka_unit_test(test_adaptive_levels_keep_the_promises_under_random_reports))
