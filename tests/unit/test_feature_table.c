/* test_feature_table.c - the feature table (src/server/core/features.def) and the event bus:
 * each line a feature named as its folder, no two routes answering one path, the
 * backend's one event callback left to the core once every feature started (and no timer
 * of a feature's own: housekeeping runs on the core's tick), and a
 * settle published on the bus counted by usage. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "server.h"

static void test_each_line_of_features_def_is_the_feature_of_its_name(void **state)
{
    (void)state;
    static const char *const names[] = {
#define SL_FEATURE(name, summary) #name,
#include "features.def"
#include "test_main.h"
#undef SL_FEATURE
    };
    assert_int_equal(sizeof(names) / sizeof(names[0]), SL_FEATURE_COUNT);
    for (size_t i = 0; i < SL_FEATURE_COUNT; i++) {
        assert_non_null(sl__features[i]);
        assert_string_equal(sl__features[i]->name, names[i]);
        assert_true(sl__features[i]->routes != NULL || sl__features[i]->n_routes == 0);
    }
}

/* Two patterns of one length that could both match some path: every segment equal, or
 * "*" on either side. */
static bool overlap(const sl_route_t *a, const sl_route_t *b)
{
    if (a->n != b->n) return false;
    for (int k = 0; k < a->n; k++)
        if (strcmp(a->seg[k], "*") && strcmp(b->seg[k], "*") && strcmp(a->seg[k], b->seg[k]))
            return false;
    return true;
}

static void test_no_two_feature_routes_answer_the_same_path(void **state)
{
    (void)state;
    for (size_t f = 0; f < SL_FEATURE_COUNT; f++)
        for (size_t i = 0; i < sl__features[f]->n_routes; i++) {
            const sl_route_t *r = &sl__features[f]->routes[i];
            assert_true(r->n >= 1 && r->n <= 4);
            assert_non_null(r->fn);
            assert_non_null(r->allow);
            for (size_t g = f; g < SL_FEATURE_COUNT; g++)
                for (size_t j = g == f ? i + 1 : 0; j < sl__features[g]->n_routes; j++)
                    if (overlap(r, &sl__features[g]->routes[j]))
                        fail_msg("%s's route %zu and %s's route %zu match the same paths",
                                 sl__features[f]->name, i, sl__features[g]->name, j);
        }
}

static void on_configured(int rc, double value, const char *errmsg, void *ud)
{
    (void)value, (void)errmsg, (void)ud;
    assert_int_equal(rc, SL_OK);
}

/* The proxy used to put its own callback in the backend's one slot at start (passing
 * events on to the core's): every feature now hears events over the bus instead. */
static void test_starting_every_feature_leaves_the_backend_event_callback_the_cores(void **state)
{
    (void)state;
    static sl_server_t srv;
    char err[512];
    memset(&srv, 0, sizeof(srv));
    assert_int_equal(sl_config_defaults(&srv.config), 0);
    free(srv.config.listen_host);
    srv.config.listen_host = strdup("127.0.0.1");
    srv.config.listen_port = 0;
    srv.base = event_base_new();
    srv.metrics = sl__metrics_new();
    srv.backend = sl_backend_memory_new(srv.base, &srv.config.engine);
    assert_non_null(srv.base);
    assert_non_null(srv.backend);
    sl_backend_set_event_cb(srv.backend, sl__events_on_backend_event, &srv);
    sl_backend_configure(srv.backend, &srv.config.settings, on_configured, NULL);
    /* The features' housekeeping (the provider limits' refresh and the ramp) runs on the
     * core's tick: taking the settings adds no timer of a feature's own to the loop. */
    int before = event_base_get_num_events(srv.base, EVENT_BASE_COUNT_ADDED);
    assert_int_equal(sl__features_settings_start(&srv, err, sizeof(err)), 0);
    assert_int_equal(event_base_get_num_events(srv.base, EVENT_BASE_COUNT_ADDED), before);
    assert_non_null(sl__features[SL_FEATURE_ID_provider_limits]->tick);
    sl__features_tick(&srv, 2); /* a ramp tick with nothing to ramp changes nothing */
    assert_int_equal(sl__server_start(&srv, err, sizeof(err)), 0);
    assert_ptr_equal(srv.backend->event_cb, sl__events_on_backend_event);
    assert_ptr_equal(srv.backend->event_ud, &srv);
    sl__server_stop(&srv);
    sl__server_free_state(&srv);
    sl_config_clear(&srv.config);
    event_base_free(srv.base);
}

/* The lease API and the proxy no longer call usage: a settle they publish is what it counts. */
static void test_a_settle_on_the_bus_is_counted_by_usage(void **state)
{
    (void)state;
    static sl_server_t srv;
    memset(&srv, 0, sizeof(srv));
    assert_int_equal(sl_config_defaults(&srv.config), 0);
    assert_null(srv.slot[SL_FEATURE_ID_usage]);
    sl_settle_t s = {.input_tokens = 100, .output_tokens = 20, .retry_after_s = -1};
    sl_bus_event_t ev = {.kind = SL_BUS_USAGE, .usage = {"a1", "default", "claude-x", &s}};
    sl__bus_publish(&srv, &ev);
    assert_non_null(srv.slot[SL_FEATURE_ID_usage]); /* usage.h's state, made by the count */
    sl__features_free(&srv);
    assert_null(srv.slot[SL_FEATURE_ID_usage]);
    sl_config_clear(&srv.config);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_each_line_of_features_def_is_the_feature_of_its_name),
    cmocka_unit_test(test_no_two_feature_routes_answer_the_same_path),
    cmocka_unit_test(test_starting_every_feature_leaves_the_backend_event_callback_the_cores),
    cmocka_unit_test(test_a_settle_on_the_bus_is_counted_by_usage))
