/* test_prices.c - the built-in list prices (src/server/usage/prices.def): models the table
 * must tell apart get their own figures, not a wider family's (issue 27 item 3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "usage.h"
#include "test_main.h"

/* Each model with the figures it must get: the newer GPT-5.x and Claude Sonnet 5 their own,
 * not their wider family's (gpt-5*, claude-sonnet-4*), and the family's still its own. */
static const struct {
    const char *model;
    sl_price_t want; /* input, output, cache read, cache write */
} cases[] = {
    {"gpt-5", {1.25, 10, 0.125, 1.25}},
    {"gpt-5.1-codex", {1.25, 10, 0.125, 1.25}},
    {"gpt-5.2", {1.75, 14, 0.175, 1.75}},
    {"gpt-5.3-codex", {1.75, 14, 0.175, 1.75}},
    {"gpt-5.4", {2.50, 15, 0.25, 2.50}},
    {"gpt-5.4-mini", {0.75, 4.50, 0.075, 0.75}},
    {"gpt-5.4-nano", {0.20, 1.25, 0.02, 0.20}},
    {"gpt-5.5", {5, 30, 0.50, 5}},
    {"gpt-5-mini-2025-08-07", {0.25, 2, 0.025, 0.25}},
    {"claude-sonnet-5", {2, 10, 0.20, 2.50}},
    {"claude-sonnet-4-5-20250929", {3, 15, 0.30, 3.75}},
    {"claude-opus-4-7", {5, 25, 0.50, 6.25}},
    {"claude-haiku-4-5-20251001", {1, 5, 0.10, 1.25}},
};

static void test_each_model_gets_its_own_rows_figures(void **state)
{
    (void)state;
    static sl_server_t srv; /* zeroed: no configured `prices:`, no pool */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_price_t p = sl__usage_price(&srv, cases[i].model, NULL), w = cases[i].want;
        if (p.input != w.input || p.output != w.output || p.cache_read != w.cache_read ||
            p.cache_write != w.cache_write)
            fail_msg("%s: %g/%g/%g/%g, expected %g/%g/%g/%g", cases[i].model, p.input, p.output,
                     p.cache_read, p.cache_write, w.input, w.output, w.cache_read,
                     w.cache_write);
    }
}

SL_TEST_MAIN(
    cmocka_unit_test(test_each_model_gets_its_own_rows_figures))
