/* test_fleet_helpers.c - unit tests for the fleet watch's helpers: name map, sliding window,
 * bounded per-agent series. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "fleet.h"
#include "server.h" /* sl__agent_series */
#include "test_main.h"

static void test_a_name_map_finds_every_live_name_after_many_deletions(void **state)
{
    (void)state;
    sl_namemap_t m = {0};
    static int vals[5000];
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "agent-%d", i);
        const char *key = sl__namemap_put(&m, name, &vals[i]);
        assert_non_null(key);
        assert_string_equal(key, name);
    }
    for (int i = 0; i < 5000; i += 3) { /* delete a third, leaving holes in probe runs */
        snprintf(name, sizeof(name), "agent-%d", i);
        assert_ptr_equal(sl__namemap_del(&m, name), &vals[i]);
        assert_null(sl__namemap_del(&m, name));
    }
    assert_int_equal(m.count, 5000 - 1667);
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "agent-%d", i);
        if (i % 3 == 0)
            assert_null(sl__namemap_get(&m, name));
        else
            assert_ptr_equal(sl__namemap_get(&m, name), &vals[i]);
    }
    assert_non_null(sl__namemap_put(&m, "agent-1", &vals[0])); /* replaces */
    assert_ptr_equal(sl__namemap_get(&m, "agent-1"), &vals[0]);
    assert_int_equal(m.count, 5000 - 1667);
    sl__namemap_free(&m);
}

static void test_a_window_forgets_counts_older_than_its_length(void **state)
{
    (void)state;
    sl_window_t w = {0};
    /* 60 s in 12 slots of 5 s */
    sl__window_add(&w, 60, 1000.0, 3);
    sl__window_add(&w, 60, 1004.0, 2);
    sl__window_add(&w, 60, 1030.0, 1);
    assert_int_equal(sl__window_sum(&w, 60, 1030.0), 6);
    assert_int_equal(sl__window_sum(&w, 60, 1059.0), 6); /* slot 1000-1005 still in */
    assert_int_equal(sl__window_sum(&w, 60, 1060.0), 1); /* it left */
    assert_int_equal(sl__window_sum(&w, 60, 1090.0), 0);
    assert_int_equal(sl__window_sum(&w, 60, 1030.0), 6); /* reading does not advance */
    sl__window_add(&w, 60, 5000.0, 4);                   /* a long gap clears everything */
    uint32_t slots[SL_WINDOW_SLOTS];
    sl__window_slots(&w, 60, 5000.0, slots);
    for (int i = 0; i < SL_WINDOW_SLOTS - 1; i++)
        assert_int_equal(slots[i], 0);
    assert_int_equal(slots[SL_WINDOW_SLOTS - 1], 4);
    sl__window_add(&w, 60, 4000.0, 9); /* older than the window: not counted */
    assert_int_equal(sl__window_sum(&w, 60, 5000.0), 4);
    sl__window_clear(&w);
    assert_int_equal(sl__window_sum(&w, 60, 5000.0), 0);
}

static void test_two_thousand_agents_give_at_most_n_plus_one_series(void **state)
{
    (void)state;
    enum { N = 2000, TOP = 20 };
    static char names[N][16];
    sl_agent_value_t v[N];
    double total = 0;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "a%d", i);
        v[i] = (sl_agent_value_t){names[i], (double)(i % 97)};
        total += v[i].value;
    }
    struct evbuffer *out = evbuffer_new();
    sl__agent_series(out, "m", ",x=\"1\"", v, N, TOP, true);
    size_t len = evbuffer_get_length(out);
    char *text = calloc(1, len + 1);
    evbuffer_remove(out, text, len);
    int lines = 0;
    double sum = 0, other = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        lines++;
        double x = atof(strrchr(line, ' ') + 1);
        sum += x;
        assert_non_null(strstr(line, ",x=\"1\"} "));
        if (strstr(line, "agent=\"other\""))
            other = x;
        else
            assert_true(x == 96); /* the top 20 are agents with the largest value */
    }
    assert_int_equal(lines, TOP + 1);
    assert_true(other > 0);
    assert_true(sum == total);
    free(text);
    evbuffer_free(out);
}

static void test_few_agents_have_no_other_series_and_zeros_are_left_out(void **state)
{
    (void)state;
    sl_agent_value_t v[3] = {{"b", 2}, {"a", 0}, {"c", 5}};
    struct evbuffer *out = evbuffer_new();
    sl__agent_series(out, "m", "", v, 3, 20, true);
    size_t len = evbuffer_get_length(out);
    char text[256] = {0};
    evbuffer_remove(out, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
    assert_string_equal(text, "m{agent=\"c\"} 5\nm{agent=\"b\"} 2\n");
    evbuffer_free(out);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_a_name_map_finds_every_live_name_after_many_deletions),
    cmocka_unit_test(test_a_window_forgets_counts_older_than_its_length),
    cmocka_unit_test(test_two_thousand_agents_give_at_most_n_plus_one_series),
    cmocka_unit_test(test_few_agents_have_no_other_series_and_zeros_are_left_out))
