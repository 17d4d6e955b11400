/* test_engine_errors.c - bad input returns a documented code, names the field, changes nothing. */
#include "engine_harness.h"

#include <stdlib.h>

#include "test_main.h"

/* Sets up a pool with a lease, a queued ticket and some history, so "unchanged" means
 * something. */
static sl_engine_t *busy_engine(uint64_t *lease, uint64_t *ticket)
{
    sl_engine_t *e = harness_engine(60000, 20000, 100);
    *lease = harness_grant(e, "a", 40000, 1000, T0);
    sl_request_t r = harness_req("b", 30000, 1000);
    sl_decision_t d = harness_request_as(e, &r, T0, SL_QUEUED);
    *ticket = d.ticket;
    return e;
}

#define EXPECT_REFUSED(e, call, code, needle)                                                      \
    do {                                                                                           \
        harness_snapshot_t before_ = harness_snapshot(e);                                          \
        assert_int_equal((call), (code));                                                          \
        if ((needle)[0] && !strstr(sl_engine_errmsg(e), (needle)))                                 \
            fail_msg("message \"%s\" does not name \"%s\"", sl_engine_errmsg(e), (needle));        \
        assert_string_equal(before_.text, harness_snapshot(e).text);                               \
        harness_check(e);                                                                          \
    } while (0)

static void test_bad_token_counts_are_invalid_and_change_nothing(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    sl_decision_t d;
    sl_request_t r = harness_req("c", -1, 10);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "input_tokens -1");
    r = harness_req("c", 10, -5);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "output_tokens -5");
    r = harness_req("c", INT64_MAX, 10);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "input_tokens");
    r = harness_req("c", SL_TOKENS_MAX + 1, 10);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "2^53");
    r = harness_req("c", 10, 10);
    r.cached_tokens = INT64_MIN;
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "cached_tokens");
    r = harness_req("c", 10, 10);
    r.unblocks = -2;
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "unblocks -2");
    sl_settle_t s = harness_settle(-3, 0);
    EXPECT_REFUSED(e, sl_engine_settle(e, l, &s, T0, NULL), SL_EINVAL, "input_tokens -3");
    s = harness_settle(0, 0);
    s.cache_read_input_tokens = INT64_MAX;
    EXPECT_REFUSED(e, sl_engine_settle(e, l, &s, T0, NULL), SL_EINVAL, "cache_read_input_tokens");
    s = harness_settle(0, 0);
    s.retry_after_s = NAN;
    EXPECT_REFUSED(e, sl_engine_settle(e, l, &s, T0, NULL), SL_EINVAL, "retry_after");
    sl_engine_free(e);
}

static void test_bad_names_roles_and_priorities_are_invalid(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    sl_decision_t d;
    sl_request_t r = harness_req(NULL, 10, 10);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "agent");
    r = harness_req("has space", 10, 10);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "has space");
    r = harness_req("", 10, 10);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "agent");
    char *long_name = malloc(300);
    memset(long_name, 'x', 299);
    long_name[299] = '\0';
    r = harness_req(long_name, 10, 10);
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "1-128");
    r = harness_req("c", 10, 10);
    r.request_id = long_name;
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "request_id");
    r = harness_req("c", 10, 10);
    r.role = "wizard";
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "role \"wizard\"");
    r = harness_req("c", 10, 10);
    r.priority = "urgent";
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "priority \"urgent\"");
    r = harness_req("c", 10, 10);
    r.pool = "nope";
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_ENOTFOUND, "pool \"nope\"");
    r = harness_req("c", 10, 10);
    r.ttl_s = NAN;
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "ttl");
    r.ttl_s = -1;
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_EINVAL, "ttl");
    sl_settle_t s = harness_settle(1, 1);
    memset(long_name, 'y', 299);
    s.failure_signature = long_name;
    EXPECT_REFUSED(e, sl_engine_settle(e, l, &s, T0, NULL), SL_EINVAL, "failure_signature");
    free(long_name);
    sl_engine_free(e);
}

static void test_unknown_leases_and_tickets_are_not_found(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    sl_settle_t s = harness_settle(1, 1);
    sl_decision_t d;
    double exp;
    EXPECT_REFUSED(e, sl_engine_settle(e, 987654, &s, T0, NULL), SL_ENOTFOUND, "987654");
    EXPECT_REFUSED(e, sl_engine_cancel(e, 987654, T0), SL_ENOTFOUND, "987654");
    EXPECT_REFUSED(e, sl_engine_extend(e, 987654, 10, T0, &exp), SL_ENOTFOUND, "987654");
    EXPECT_REFUSED(e, sl_engine_ticket(e, 987654, T0, &d), SL_ENOTFOUND, "987654");
    EXPECT_REFUSED(e, sl_engine_ticket_cancel(e, 987654, T0), SL_ENOTFOUND, "987654");
    /* A lease id is not a ticket id and vice versa. */
    EXPECT_REFUSED(e, sl_engine_ticket(e, l, T0, &d), SL_ENOTFOUND, "");
    EXPECT_REFUSED(e, sl_engine_settle(e, t, &s, T0, NULL), SL_ENOTFOUND, "");
    sl_engine_free(e);
}

static void test_settle_twice_and_after_cancel_are_refused(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    sl_settle_t s = harness_settle(40000, 1000);
    assert_int_equal(sl_engine_settle(e, l, &s, T0, NULL), SL_OK);
    EXPECT_REFUSED(e, sl_engine_settle(e, l, &s, T0, NULL), SL_EALREADY, "already settled");
    EXPECT_REFUSED(e, sl_engine_cancel(e, l, T0), SL_EALREADY, "already settled");
    uint64_t l2 = harness_grant(e, "z", 1, 1, T0 + 30);
    assert_int_equal(sl_engine_cancel(e, l2, T0 + 30), SL_OK);
    EXPECT_REFUSED(e, sl_engine_settle(e, l2, &s, T0 + 30, NULL), SL_EALREADY, "cancelled");
    sl_engine_free(e);
}

static void test_time_going_backwards_is_refused(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    assert_int_equal(sl_engine_advance(e, T0 + 5), SL_OK);
    sl_request_t r = harness_req("c", 10, 10);
    sl_decision_t d;
    sl_settle_t s = harness_settle(1, 1);
    double exp;
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0 + 4, &d), SL_ETIME, "before");
    EXPECT_REFUSED(e, sl_engine_settle(e, l, &s, T0 + 4, NULL), SL_ETIME, "before");
    EXPECT_REFUSED(e, sl_engine_cancel(e, l, T0 + 4), SL_ETIME, "before");
    EXPECT_REFUSED(e, sl_engine_extend(e, l, 10, T0 + 4, &exp), SL_ETIME, "before");
    EXPECT_REFUSED(e, sl_engine_ticket(e, t, T0 + 4, &d), SL_ETIME, "before");
    EXPECT_REFUSED(e, sl_engine_advance(e, T0 + 4), SL_ETIME, "before");
    EXPECT_REFUSED(e, sl_engine_advance(e, NAN), SL_ETIME, "finite");
    EXPECT_REFUSED(e, sl_engine_request(e, &r, INFINITY, &d), SL_ETIME, "");
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "other", &cfg, T0), SL_ETIME, "before");
    sl_engine_free(e);
}

static void test_bad_pool_configuration_is_refused(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    sl_pool_config_t cfg;
    sl_pool_config_init(&cfg);
    cfg.input_tpm = -1;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default", &cfg, T0), SL_EINVAL, "input_tpm -1");
    sl_pool_config_init(&cfg);
    cfg.margin_start = NAN;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default", &cfg, T0), SL_EINVAL, "margin");
    sl_pool_config_init(&cfg);
    cfg.margin_floor = 0.9;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default", &cfg, T0), SL_EINVAL, "margin_floor");
    sl_pool_config_init(&cfg);
    cfg.lease_ttl_s = 0;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default", &cfg, T0), SL_EINVAL, "lease_ttl_s");
    sl_pool_config_init(&cfg);
    cfg.estimate_error_window = 0;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "x", &cfg, T0), SL_EINVAL,
                   "estimate_error_window");
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "bad name", &cfg, T0), SL_EINVAL, "bad name");
    /* request_parent: the parent's request bucket, so no rpm and a name PARENT:NAME */
    sl_pool_config_init(&cfg);
    cfg.request_parent = true;
    cfg.rpm = 10;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default:long", &cfg, T0), SL_EINVAL,
                   "request_parent");
    cfg.rpm = 0;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "nocolon", &cfg, T0), SL_EINVAL,
                   "request_parent");
    /* send_window_s: 0 to 60 seconds (docs/design.md "A later grant taken first") */
    sl_pool_config_init(&cfg);
    cfg.send_window_s = 61;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default", &cfg, T0), SL_EINVAL,
                   "send_window_s 61");
    cfg.send_window_s = -1;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default", &cfg, T0), SL_EINVAL,
                   "send_window_s -1");
    cfg.send_window_s = NAN;
    EXPECT_REFUSED(e, sl_engine_configure_pool(e, "default", &cfg, T0), SL_EINVAL,
                   "send_window_s");
    /* a resync's grant-to-send delay must be a number (negative: not known) */
    const char *names[] = {"anthropic-ratelimit-output-tokens-remaining"};
    const char *values[] = {"1000"};
    EXPECT_REFUSED(e, sl_engine_resync_lease_sent(e, l, NAN, names, values, 1, T0, NULL),
                   SL_EINVAL, "sent_after_s");
    EXPECT_REFUSED(e, sl_engine_set_role(e, "w", NAN), SL_EINVAL, "\"w\"");
    EXPECT_REFUSED(e, sl_engine_set_role(e, "w", 0), SL_EINVAL, "\"w\"");
    sl_engine_free(e);
}

/* Every lookup says what it did not find, never the previous call's message. */
static void test_lookups_set_their_own_message(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    sl_decision_t d;
    sl_request_t r = harness_req("c", 10, 10);
    r.pool = "secret-x";
    EXPECT_REFUSED(e, sl_engine_request(e, &r, T0, &d), SL_ENOTFOUND, "secret-x");
    sl_pool_info_t pi;
    EXPECT_REFUSED(e, sl_engine_pool_info(e, "nope", &pi), SL_ENOTFOUND, "nope");
    sl_engine_request(e, &r, T0, &d);
    sl_agent_info_t ai;
    EXPECT_REFUSED(e, sl_engine_agent_info(e, "nobody", &ai), SL_ENOTFOUND, "nobody");
    sl_engine_request(e, &r, T0, &d);
    EXPECT_REFUSED(e, sl_engine_calibration_foreach(e, "nowhere", NULL, NULL), SL_ENOTFOUND,
                   "nowhere");
    sl_engine_free(e);
}

static void test_reload_keeps_leases_and_tickets(void **state)
{
    (void)state;
    uint64_t l, t;
    sl_engine_t *e = busy_engine(&l, &t);
    sl_pool_config_t cfg = harness_pool(120000, 20000, 100);
    assert_int_equal(sl_engine_configure_pool(e, "default", &cfg, T0 + 1), SL_OK);
    harness_check(e);
    sl_settle_t s = harness_settle(40000, 1000);
    assert_int_equal(sl_engine_settle(e, l, &s, T0 + 2, NULL), SL_OK);
    harness_ticket_as(e, t, T0 + 30, SL_GRANTED);
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_bad_token_counts_are_invalid_and_change_nothing),
    cmocka_unit_test(test_bad_names_roles_and_priorities_are_invalid),
    cmocka_unit_test(test_unknown_leases_and_tickets_are_not_found),
    cmocka_unit_test(test_settle_twice_and_after_cancel_are_refused),
    cmocka_unit_test(test_time_going_backwards_is_refused),
    cmocka_unit_test(test_bad_pool_configuration_is_refused),
    cmocka_unit_test(test_reload_keeps_leases_and_tickets),
    cmocka_unit_test(test_lookups_set_their_own_message))
