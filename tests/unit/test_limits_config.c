/* test_limits_config.c - a limit's configuration: defaults, and every refusal naming `limits.NAME.FIELD` and the value. */
#include "limits_harness.h"
#include "test_main.h"

static void refused(const char *json, int want_rc, const char *want_msg)
{
    char buf[512];
    int rc = 0;
    harness_refusal(json, &rc, buf, sizeof buf);
    if (rc != want_rc || strcmp(buf, want_msg) != 0)
        fail_msg("%s\n  want %s: %s\n  got  %s: %s", json, sl_strerror(want_rc), want_msg,
                 sl_strerror(rc), buf);
}

static void test_defaults_are_a_token_bucket_per_agent_with_burst_rate(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set("{\"x\": {\"rate\": 7}}");
    const sl_limit_config_t *cfg = NULL;
    size_t keys = 1;
    assert_int_equal(sl_limits_config(ls, "x", &cfg, &keys), SL_OK);
    assert_int_equal(cfg->algorithm, SL_LIMIT_TOKEN_BUCKET);
    assert_int_equal(cfg->per, SL_LIMIT_PER_AGENT);
    assert_int_equal(cfg->on_limit, SL_LIMIT_REJECT);
    assert_true(cfg->period_s == 1);
    assert_int_equal(cfg->max_keys, 100000);
    assert_false(cfg->adaptive.enabled);
    assert_int_equal(keys, 0);
    sl_limit_result_t r = harness_check(ls, "x", "a", 0, 0);
    assert_int_equal(r.limit, 7); /* burst defaults to rate */
    assert_int_equal(sl_limits_count(ls), 1);
    assert_string_equal(sl_limits_name_at(ls, 0), "x");
    assert_null(sl_limits_name_at(ls, 1));
    sl_limits_free(ls);
}

static void test_the_issue_example_is_accepted(void **state)
{
    (void)state;
    sl_limits_t *ls = harness_set(
        "{\"db.query\": {\"algorithm\": \"sliding_window\", \"rate\": 100, \"period_s\": 60,"
        " \"per\": \"agent\", \"costs\": {\"read\": 1, \"write\": 5}, \"parents\": [\"db.all\"],"
        " \"on_limit\": \"queue\", \"adaptive\": {\"min_rate\": 10, \"max_rate\": 500, \"decrease\": 0.9,"
        " \"increase\": 1.1, \"high_error\": 0.10, \"low_error\": 0.02, \"window\": 100}},"
        " \"db.all\": {\"algorithm\": \"gcra\", \"rate\": 1000, \"period_s\": 60, \"burst\": 20, \"per\": \"global\"}}");
    const sl_limit_config_t *cfg = NULL;
    assert_int_equal(sl_limits_config(ls, "db.query", &cfg, NULL), SL_OK);
    assert_int_equal(cfg->on_limit, SL_LIMIT_QUEUE);
    assert_int_equal(cfg->n_costs, 2);
    assert_int_equal(cfg->n_parents, 1);
    assert_string_equal(cfg->parents[0], "db.all");
    assert_true(cfg->adaptive.enabled && cfg->adaptive.window == 100);
    sl_limits_free(ls);
}

static void test_bad_fields_are_refused_naming_field_and_value(void **state)
{
    (void)state;
    refused("{\"db.query\": {\"algorithm\": \"foo\", \"rate\": 1}}", SL_EINVAL,
            "limits.db.query.algorithm: unknown \"foo\" (token_bucket | leaky_bucket | fixed_window | "
            "sliding_window | sliding_window_approx | gcra | concurrency)");
    refused("{\"x\": {\"rate\": 0}}", SL_EINVAL, "limits.x.rate: 0, not in (0, 1e+09]");
    refused("{\"x\": {\"rate\": -3}}", SL_EINVAL, "limits.x.rate: -3, not in (0, 1e+09]");
    refused("{\"x\": {\"rate\": \"ten\"}}", SL_EINVAL, "limits.x.rate: \"ten\", not a number");
    refused("{\"x\": {}}", SL_EINVAL, "limits.x.rate: required");
    refused("{\"x\": {\"rate\": 1, \"period_s\": 0}}", SL_EINVAL,
            "limits.x.period_s: 0, not in [0.000001, 3.16224e+07]");
    refused("{\"x\": {\"rate\": 5, \"burst\": 0.5}}", SL_EINVAL,
            "limits.x.burst: 0.5, not a whole number in 1..1e+09");
    refused("{\"x\": {\"rate\": 5, \"burst\": 0}}", SL_EINVAL,
            "limits.x.burst: 0, not a whole number in 1..1e+09");
    refused("{\"x\": {\"algorithm\": \"fixed_window\", \"rate\": 5, \"burst\": 2}}", SL_EINVAL,
            "limits.x.burst: 2, not used by fixed_window");
    refused("{\"x\": {\"algorithm\": \"fixed_window\", \"rate\": 2.5}}", SL_EINVAL,
            "limits.x.rate: 2.5, fixed_window counts whole units: a whole number >= 1");
    refused("{\"x\": {\"algorithm\": \"sliding_window\", \"rate\": 20000}}", SL_EINVAL,
            "limits.x.rate: 20000, above 10000, the most sliding_window keeps a log for (use "
            "sliding_window_approx or a shorter period)");
    refused("{\"x\": {\"algorithm\": \"gcra\", \"rate\": 2000000}}", SL_EINVAL,
            "limits.x.rate: 2e+06 per 1 s spaces hits under 1 µs apart");
    refused("{\"x\": {\"rate\": 1, \"per\": \"user\"}}", SL_EINVAL,
            "limits.x.per: unknown \"user\" (agent | team | global | key)");
    refused("{\"x\": {\"rate\": 1, \"on_limit\": \"wait\"}}", SL_EINVAL,
            "limits.x.on_limit: unknown \"wait\" (reject | queue)");
    refused("{\"x\": {\"rate\": 1, \"colour\": 1}}", SL_EINVAL,
            "limits.x.colour: unknown field (algorithm | rate | period_s | burst | per | costs | "
            "parents | on_limit | adaptive | ttl_s | max_keys)");
    refused("{\"x\": {\"rate\": 1, \"ttl_s\": 5}}", SL_EINVAL, "limits.x.ttl_s: not used by token_bucket");
    refused("{\"x\": {\"algorithm\": \"concurrency\", \"rate\": 4, \"period_s\": 5}}", SL_EINVAL,
            "limits.x.period_s: not used by concurrency");
    refused("{\"x\": {\"algorithm\": \"concurrency\", \"rate\": 4, \"ttl_s\": -1}}", SL_EINVAL,
            "limits.x.ttl_s: -1, not in [0.000001, 3.16224e+07]");
    refused("{\"x\": {\"rate\": 1, \"costs\": {\"write\": -2}}}", SL_EINVAL,
            "limits.x.costs.write: -2, not in 0..1000000000");
    refused("{\"x\": {\"rate\": 1, \"costs\": {\"write\": 1.5}}}", SL_EINVAL,
            "limits.x.costs.write: 1.5, not a whole number");
    refused("{\"x\": {\"rate\": 1, \"costs\": [1]}}", SL_EINVAL,
            "limits.x.costs: [1], not an object {action: cost}");
    refused("{\"x\": {\"rate\": 1, \"max_keys\": 0}}", SL_EINVAL,
            "limits.x.max_keys: 0, not in 1..100000000");
    refused("{\"x\": {\"rate\": 1, \"parents\": \"y\"}}", SL_EINVAL,
            "limits.x.parents: \"y\", not a list of names");
}

static void test_adaptive_bounds_are_checked(void **state)
{
    (void)state;
    refused("{\"x\": {\"rate\": 50, \"adaptive\": {\"min_rate\": 100, \"max_rate\": 10}}}", SL_EINVAL,
            "limits.x.adaptive.min_rate: 100, above max_rate 10");
    refused("{\"x\": {\"rate\": 5, \"adaptive\": {\"min_rate\": 10, \"max_rate\": 100}}}", SL_EINVAL,
            "limits.x.rate: 5, outside adaptive [min_rate 10, max_rate 100]");
    refused("{\"x\": {\"rate\": 50, \"adaptive\": {\"min_rate\": 10, \"max_rate\": 100, \"decrease\": 1.2}}}",
            SL_EINVAL, "limits.x.adaptive.decrease: 1.2, not in (0, 1)");
    refused("{\"x\": {\"rate\": 50, \"adaptive\": {\"min_rate\": 10, \"max_rate\": 100, \"increase\": 0.5}}}",
            SL_EINVAL, "limits.x.adaptive.increase: 0.5, not in (1, 100]");
    refused("{\"x\": {\"rate\": 50, \"adaptive\": {\"min_rate\": 10, \"max_rate\": 100, \"low_error\": 0.5}}}",
            SL_EINVAL, "limits.x.adaptive.low_error: 0.5, not in [0, high_error 0.1)");
    refused("{\"x\": {\"rate\": 50, \"adaptive\": {\"min_rate\": 10, \"max_rate\": 100, \"window\": 0}}}",
            SL_EINVAL, "limits.x.adaptive.window: 0, not in 1..65536");
    refused("{\"x\": {\"rate\": 50, \"adaptive\": {\"max_rate\": 100}}}", SL_EINVAL,
            "limits.x.adaptive.min_rate: required");
    refused("{\"x\": {\"rate\": 50, \"adaptive\": {\"min_rate\": 1, \"max_rate\": 100, \"speed\": 2}}}",
            SL_EINVAL,
            "limits.x.adaptive.speed: unknown field (min_rate | max_rate | decrease | increase | "
            "high_error | low_error | window)");
    refused("{\"x\": {\"algorithm\": \"sliding_window\", \"rate\": 50, \"adaptive\": {\"min_rate\": 1, "
            "\"max_rate\": 50000}}}",
            SL_EINVAL,
            "limits.x.adaptive.max_rate: 50000, above 10000, the most sliding_window keeps a log for "
            "(use sliding_window_approx or a shorter period)");
}

static void test_parents_must_exist_and_make_no_cycle(void **state)
{
    (void)state;
    refused("{\"x\": {\"rate\": 1, \"parents\": [\"nope\"]}}", SL_EINVAL,
            "limits.x.parents: unknown limit \"nope\"");
    refused("{\"x\": {\"rate\": 1, \"parents\": [\"x\"]}}", SL_EINVAL,
            "limits.x.parents: \"x\" makes a cycle");
    refused("{\"a\": {\"rate\": 1, \"parents\": [\"b\"]}, \"b\": {\"rate\": 1, \"parents\": [\"c\"]},"
            " \"c\": {\"rate\": 1, \"parents\": [\"a\"]}}",
            SL_EINVAL, "limits.c.parents: \"a\" makes a cycle");
    refused("{\"a\": {\"rate\": 1, \"parents\": [\"b\", \"b\"]}, \"b\": {\"rate\": 1}}", SL_EINVAL,
            "limits.a.parents: \"b\" given twice");
    /* A diamond is fine: the shared ancestor is checked once. */
    sl_limits_t *ls = harness_set(
        "{\"leaf\": {\"rate\": 9, \"parents\": [\"l\", \"r\"]}, \"l\": {\"rate\": 9, \"parents\": [\"top\"]},"
        " \"r\": {\"rate\": 9, \"parents\": [\"top\"]}, \"top\": {\"rate\": 9, \"per\": \"global\"}}");
    sl_limit_result_t r = harness_check(ls, "leaf", "a", 1, 0);
    assert_int_equal(r.n_checked, 4);
    assert_string_equal(r.checked[3].limit_name, "top");
    assert_int_equal(r.checked[3].remaining, 8);
    sl_limits_free(ls);
    /* Nine levels are too many. */
    char json[2048] = "{";
    for (int i = 0; i < 9; i++) {
        size_t n = strlen(json);
        if (i < 8) snprintf(json + n, sizeof json - n, "\"l%d\": {\"rate\": 1, \"parents\": [\"l%d\"]}, ", i, i + 1);
        else snprintf(json + n, sizeof json - n, "\"l%d\": {\"rate\": 1}}", i);
    }
    refused(json, SL_EINVAL, "limits.l0.parents: more than 8 levels with ancestors");
}

/* Every time an answer holds stays below 2^53 µs (about 285 years): the time a burst
 * takes to refill at the slowest rate, burst x period / rate, the longest of them. */
static void test_a_burst_refilling_in_over_2_53_us_is_refused(void **state)
{
    (void)state;
    refused("{\"x\": {\"algorithm\": \"gcra\", \"rate\": 1, \"period_s\": 31622400, \"burst\": 1000000000}}",
            SL_EINVAL,
            "limits.x.burst: 1e+09 at 1 per 3.16224e+07 s refills in over 2^53 µs (285 years)");
    refused("{\"x\": {\"rate\": 1e-06, \"period_s\": 3600, \"burst\": 10}}", SL_EINVAL,
            "limits.x.burst: 10 at 1e-06 per 3600 s refills in over 2^53 µs (285 years)");
    refused("{\"x\": {\"algorithm\": \"leaky_bucket\", \"rate\": 1000, \"period_s\": 86400, "
            "\"burst\": 1000000000, \"adaptive\": {\"min_rate\": 1, \"max_rate\": 1000}}}",
            SL_EINVAL,
            "limits.x.burst: 1e+09 at 1 (adaptive.min_rate) per 86400 s refills in over 2^53 µs "
            "(285 years)");
    /* The default burst (the rate) of the slowest rate and the longest period is fine. */
    sl_limits_t *ls = harness_set(
        "{\"x\": {\"algorithm\": \"gcra\", \"rate\": 1000000000, \"period_s\": 31622400},"
        " \"y\": {\"algorithm\": \"gcra\", \"rate\": 1, \"period_s\": 31622400, \"burst\": 280}}");
    sl_limit_result_t r = harness_check(ls, "y", "a", 280, 0);
    assert_true(r.allowed);
    assert_int_equal(r.reset_after_us, 280LL * 31622400 * 1000000);
    sl_limits_free(ls);
}

static void test_struct_path_refuses_what_json_refuses(void **state)
{
    (void)state;
    sl_limits_t *ls = sl_limits_new();
    sl_limit_config_t cfg;
    sl_limit_config_init(&cfg);
    cfg.rate = 10;
    assert_int_equal(sl_limits_add(ls, "a", &cfg), SL_OK);
    assert_int_equal(sl_limits_add(ls, "a", &cfg), SL_EEXIST);
    assert_string_equal(sl_limits_errmsg(ls), "limits.a: defined twice");
    cfg.algorithm = (sl_limit_algorithm_t)42;
    assert_int_equal(sl_limits_add(ls, "b", &cfg), SL_EINVAL);
    assert_string_equal(sl_limits_errmsg(ls), "limits.b.algorithm: unknown 42");
    /* Checks wait for the link. */
    sl_limit_request_t req = harness_req("x", 1);
    sl_limit_result_t r;
    assert_int_equal(sl_limits_check(ls, "a", &req, AT(0), &r), SL_EINVAL);
    assert_int_equal(sl_limits_link(ls), SL_OK);
    assert_int_equal(sl_limits_check(ls, "a", &req, AT(0), &r), SL_OK);
    assert_int_equal(sl_limits_link(ls), SL_EALREADY);
    cfg.algorithm = SL_LIMIT_GCRA;
    assert_int_equal(sl_limits_add(ls, "c", &cfg), SL_EALREADY);
    sl_limits_free(ls);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_defaults_are_a_token_bucket_per_agent_with_burst_rate),
    cmocka_unit_test(test_the_issue_example_is_accepted),
    cmocka_unit_test(test_bad_fields_are_refused_naming_field_and_value),
    cmocka_unit_test(test_adaptive_bounds_are_checked),
    cmocka_unit_test(test_parents_must_exist_and_make_no_cycle),
    cmocka_unit_test(test_a_burst_refilling_in_over_2_53_us_is_refused),
    cmocka_unit_test(test_struct_path_refuses_what_json_refuses))
