/* test_tokens.c - unit tests of agent tokens by SHA-256 (core/tokens.c): the index finds every
 * live token after removals that break probe runs, refuses one twice and holds no more than
 * it was made for; bound fields are checked and named; a token's own fields override its
 * tier's one by one; caps on an agent_prefix token are refused. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "test_main.h"

#define N_RULES 5000

static void test_the_index_finds_every_live_token_after_many_removals(void **state)
{
    (void)state;
    static sl_token_rule_t rules[N_RULES];
    sl_token_index_t *ix = sl__token_index_new(N_RULES);
    assert_non_null(ix);
    char secret[32];
    for (int i = 0; i < N_RULES; i++) {
        snprintf(secret, sizeof secret, "secret-%d", i);
        sl__token_sha256(secret, rules[i].meta.sha256);
        assert_int_equal(sl__token_index_add(ix, &rules[i], NULL), 0);
    }
    sl_token_rule_t *dup = NULL;
    assert_int_equal(sl__token_index_add(ix, &rules[7], &dup), -1);
    assert_ptr_equal(dup, &rules[7]);
    for (int i = 0; i < N_RULES; i += 3) /* a third out, leaving holes in probe runs */
        sl__token_index_remove(ix, &rules[i]);
    for (int i = 0; i < N_RULES; i++) {
        unsigned char sha[SL_TOKEN_SHA256_BYTES];
        snprintf(secret, sizeof secret, "secret-%d", i);
        sl__token_sha256(secret, sha);
        assert_ptr_equal(sl__token_index_find(ix, sha), i % 3 == 0 ? NULL : &rules[i]);
    }
    unsigned char other[SL_TOKEN_SHA256_BYTES];
    sl__token_sha256("not-a-token", other);
    assert_null(sl__token_index_find(ix, other));
    sl__token_index_free(ix);
}

static void test_the_index_holds_no_more_than_it_was_made_for(void **state)
{
    (void)state;
    sl_token_rule_t rules[3] = {0};
    sl_token_index_t *ix = sl__token_index_new(2);
    for (int i = 0; i < 3; i++)
        rules[i].meta.sha256[0] = (unsigned char)(i + 1);
    assert_int_equal(sl__token_index_add(ix, &rules[0], NULL), 0);
    assert_int_equal(sl__token_index_add(ix, &rules[1], NULL), 0);
    assert_int_equal(sl__token_index_add(ix, &rules[2], NULL), -2);
    sl__token_index_free(ix);
}

static void test_a_sha256_is_64_hex_digits(void **state)
{
    (void)state;
    unsigned char a[SL_TOKEN_SHA256_BYTES], b[SL_TOKEN_SHA256_BYTES];
    sl__token_sha256("abc", a);
    /* FIPS 180-2's example: SHA-256("abc") */
    assert_int_equal(sl__token_sha256_parse(
                         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", b),
                     0);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(sl__token_sha256_parse("ba78", b), -1);
    assert_int_equal(sl__token_sha256_parse(
                         "zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", b),
                     -1);
}

static void test_a_bad_bound_names_the_value_and_changes_nothing(void **state)
{
    (void)state;
    sl_token_bounds_t b = {0};
    char what[400];
    assert_int_equal(sl__token_bound_set(&b, "max_rpm", "12", NULL, 0, false, what, sizeof what),
                     0);
    assert_int_equal(sl__token_bound_set(&b, "max_rpm", "1.5", NULL, 0, false, what, sizeof what),
                     -1);
    assert_non_null(strstr(what, "'1.5'"));
    assert_int_equal(sl__token_bound_set(&b, "max_share", "2", NULL, 0, false, what, sizeof what),
                     -1);
    assert_non_null(strstr(what, "'2'"));
    assert_int_equal(sl__token_bound_set(&b, "colour", "red", NULL, 0, false, what, sizeof what),
                     -2);
    assert_non_null(strstr(what, "max_concurrent"));
    assert_int_equal(b.set, SL_TB_MAX_RPM);
    assert_int_equal(b.caps.max_rpm, 12);
    sl__token_bounds_clear(&b);
}

static void test_own_fields_override_the_tier_one_by_one(void **state)
{
    (void)state;
    char what[400];
    char *roles[] = {"worker"};
    sl_tier_t tier = {.name = "free"};
    sl__token_bound_set(&tier.bounds, "max_rpm", "60", NULL, 0, false, what, sizeof what);
    sl__token_bound_set(&tier.bounds, "max_concurrent", "2", NULL, 0, false, what, sizeof what);
    sl__token_bound_set(&tier.bounds, "roles", NULL, roles, 1, true, what, sizeof what);
    sl_token_config_t cfg = {.tiers = &tier, .n_tiers = 1};
    sl_token_rule_t r = {.agent = strdup("a1")};
    r.meta.tier = strdup("free");
    sl__token_bound_set(&r.meta.own, "max_rpm", "5", NULL, 0, false, what, sizeof what);
    assert_int_equal(sl__token_resolve(&r, &cfg, what, sizeof what), 0);
    assert_int_equal(r.meta.caps.max_rpm, 5);        /* its own */
    assert_int_equal(r.meta.caps.max_concurrent, 2); /* the tier's */
    assert_int_equal(r.n_roles, 1);
    assert_string_equal(r.roles[0], "worker");
    assert_int_equal(r.max_unblocks, 8); /* neither: the default */
    free(r.agent);
    r.agent = NULL;
    r.agent_prefix = strdup("ci-");
    assert_int_equal(sl__token_resolve(&r, &cfg, what, sizeof what), -1);
    assert_non_null(strstr(what, "ci-"));
    free(r.meta.tier);
    r.meta.tier = strdup("gold");
    assert_int_equal(sl__token_resolve(&r, &cfg, what, sizeof what), -1);
    assert_non_null(strstr(what, "'gold'"));
    assert_non_null(strstr(what, "free"));
    sl__token_rule_clear(&r);
    sl__token_bounds_clear(&tier.bounds);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_the_index_finds_every_live_token_after_many_removals),
    cmocka_unit_test(test_the_index_holds_no_more_than_it_was_made_for),
    cmocka_unit_test(test_a_sha256_is_64_hex_digits),
    cmocka_unit_test(test_a_bad_bound_names_the_value_and_changes_nothing),
    cmocka_unit_test(test_own_fields_override_the_tier_one_by_one))
