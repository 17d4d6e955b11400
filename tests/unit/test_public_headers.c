/* test_public_headers.c - every header of include/sluice/ included together, and both
 * libraries linked into one program: one vocabulary of codes and names. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "sluice/client.h"
#include "sluice/common.h"
#include "sluice/engine.h"
#include "sluice/tokenizer.h"
#include "test_main.h"

static const int every_code[] = {
    SL_EINVAL,   SL_ENOTFOUND, SL_EALREADY,  SL_EEXPIRED,     SL_ECAPACITY,
    SL_ETIME,    SL_ENOMEM,    SL_EEXIST,    SL_EUNAVAILABLE, SL_EARG,
    SL_EUNREACHABLE, SL_EMAXWAIT, SL_EREJECTED, SL_ECANCELED, SL_EPROTO,
    SL_EHTTP,    SL_EAUTH,     SL_ETOOBIG,   SL_EIO,          SL_ECORRUPT,
};
#define N_CODES (sizeof every_code / sizeof every_code[0])

static void test_every_code_is_negative_distinct_and_named(void **state)
{
    (void)state;
    assert_int_equal(SL_OK, 0);
    assert_string_equal(sl_strerror(SL_OK), "ok");
    for (size_t i = 0; i < N_CODES; i++) {
        assert_true(every_code[i] < 0);
        const char *name = sl_strerror(every_code[i]);
        assert_string_not_equal(name, "unknown_error");
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(every_code[i], every_code[j]);
            assert_string_not_equal(name, sl_strerror(every_code[j]));
        }
    }
    assert_string_equal(sl_strerror(12345), "unknown_error");
}

/* The engine's codes are sluiced's API error types (docs/api.md "Errors"); the client
 * maps the HTTP answers back onto them. */
static void test_engine_codes_are_named_by_their_api_error_type(void **state)
{
    (void)state;
    assert_string_equal(sl_strerror(SL_EINVAL), "invalid_request");
    assert_string_equal(sl_strerror(SL_ENOTFOUND), "not_found");
    assert_string_equal(sl_strerror(SL_EALREADY), "already_settled");
    assert_string_equal(sl_strerror(SL_EEXPIRED), "lease_expired");
    assert_string_equal(sl_strerror(SL_ECAPACITY), "exceeds_capacity");
    assert_string_equal(sl_strerror(SL_EUNAVAILABLE), "backend_unavailable");
    assert_string_equal(sl_strerror(SL_ETOOBIG), "body_too_large");
}

static void test_tokenizer_codes_are_codes_of_the_one_set(void **state)
{
    (void)state;
    assert_int_equal(SL_TOK_EINVAL, SL_EARG);
    assert_int_equal(SL_TOK_EIO, SL_EIO);
    assert_int_equal(SL_TOK_EFORMAT, SL_ECORRUPT);
    assert_int_equal(SL_TOK_ENOMEM, SL_ENOMEM);
    assert_int_equal(SL_TOK_EREQUEST, SL_EINVAL);
}

/* Both libraries in one program, each with its own settle result type. */
static void test_engine_and_client_work_in_one_program(void **state)
{
    (void)state;
    sl_engine_t *e = sl_engine_new(NULL);
    assert_non_null(e);
    sl_settle_t s;
    memset(&s, 0, sizeof s);
    s.retry_after_s = -1;
    sl_settle_result_t engine_result;
    assert_int_equal(sl_engine_settle(e, 42, &s, 1.0, &engine_result), SL_ENOTFOUND);

    sl_client_usage_t usage;
    sl_client_usage_init(&usage);
    assert_true(usage.retry_after_s < 0);
    sl_client_settle_result_t client_result;
    memset(&client_result, 0, sizeof client_result);
    assert_string_equal(sl_client_strerror(SL_ENOTFOUND),
                        "unknown pool, lease or ticket (not_found)");
    sl_engine_free(e);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_every_code_is_negative_distinct_and_named),
    cmocka_unit_test(test_engine_codes_are_named_by_their_api_error_type),
    cmocka_unit_test(test_tokenizer_codes_are_codes_of_the_one_set),
    cmocka_unit_test(test_engine_and_client_work_in_one_program))
