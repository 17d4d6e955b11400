/* test_prices.c - the built-in list prices (src/server/usage/prices.def): models the table
 * must tell apart get their own figures, not a wider family's (issue 27 item 3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "usage.h"

/* `model`'s built-in price (no `prices:` configured, no pool). */
static sl_price_t price_of(const char *model)
{
    static sl_server_t srv; /* zeroed: no configured prices */
    return sl__usage_price(&srv, model, NULL);
}

static void assert_price(const char *model, double in, double out, double read, double write)
{
    sl_price_t p = price_of(model);
    if (p.input != in || p.output != out || p.cache_read != read || p.cache_write != write)
        fail_msg("%s: %g/%g/%g/%g, expected %g/%g/%g/%g", model, p.input, p.output, p.cache_read,
                 p.cache_write, in, out, read, write);
}

static void test_newer_gpt_5_models_are_not_priced_as_gpt_5(void **state)
{
    (void)state;
    assert_price("gpt-5", 1.25, 10, 0.125, 1.25);
    assert_price("gpt-5.1-codex", 1.25, 10, 0.125, 1.25);
    assert_price("gpt-5.2", 1.75, 14, 0.175, 1.75);
    assert_price("gpt-5.3-codex", 1.75, 14, 0.175, 1.75);
    assert_price("gpt-5.4", 2.50, 15, 0.25, 2.50);
    assert_price("gpt-5.4-mini", 0.75, 4.50, 0.075, 0.75);
    assert_price("gpt-5.4-nano", 0.20, 1.25, 0.02, 0.20);
    assert_price("gpt-5.5", 5, 30, 0.50, 5);
    assert_price("gpt-5-mini-2025-08-07", 0.25, 2, 0.025, 0.25);
}

static void test_claude_sonnet_5_is_not_priced_as_sonnet_4(void **state)
{
    (void)state;
    assert_price("claude-sonnet-5", 2, 10, 0.20, 2.50);
    assert_price("claude-sonnet-4-5-20250929", 3, 15, 0.30, 3.75);
    assert_price("claude-opus-4-7", 5, 25, 0.50, 6.25);
    assert_price("claude-haiku-4-5-20251001", 1, 5, 0.10, 1.25);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_newer_gpt_5_models_are_not_priced_as_gpt_5),
        cmocka_unit_test(test_claude_sonnet_5_is_not_priced_as_sonnet_4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
