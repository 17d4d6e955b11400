/* test_error_table.c - the one error->HTTP table (src/common/errors.def) for both dialects. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "server.h"
#include "test_main.h"

static void test_the_lease_api_answers_each_code_as_api_md_says(void **state)
{
    (void)state;
    static const struct {
        int rc, status;
        const char *type;
    } want[] = {
        {SL_EINVAL, 400, "invalid_request"},
        {SL_ENOTFOUND, 404, "not_found"},
        {SL_EALREADY, 409, "already_settled"},
        {SL_EEXPIRED, 410, "lease_expired"},
        {SL_ECAPACITY, 413, "exceeds_capacity"},
        {SL_EEXIST, 409, "conflict"},
        {SL_ENOMEM, 503, "out_of_memory"},
        {SL_EUNAVAILABLE, 503, "backend_unavailable"},
        {SL_ETIME, 500, "internal"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *type = NULL;
        assert_int_equal(sl__error_status(want[i].rc, SL_DIALECT_LEASE_API, &type), want[i].status);
        assert_string_equal(type, want[i].type);
    }
}

static void
test_the_proxy_differs_only_where_the_provider_says_400_for_what_never_fits(void **state)
{
    (void)state;
    for (int rc = SL_ECORRUPT; rc <= SL_OK; rc++) {
        int lease_api = sl__error_status(rc, SL_DIALECT_LEASE_API, NULL);
        int provider = sl__error_status(rc, SL_DIALECT_PROVIDER, NULL);
        if (rc == SL_ECAPACITY) {
            assert_int_equal(lease_api, 413);
            assert_int_equal(provider, 400); /* docs/proxy.md: invalid_request_error */
        } else {
            assert_int_equal(provider, lease_api);
        }
    }
}

SL_TEST_MAIN(
    cmocka_unit_test(test_the_lease_api_answers_each_code_as_api_md_says),
    cmocka_unit_test(
        test_the_proxy_differs_only_where_the_provider_says_400_for_what_never_fits))
