/* test_client_errors.c - the C client reads an error answer by sluiced's own table
 * (src/common/errors.def): every type the server writes maps back to the code it came
 * from, whatever status carried it; statuses the table does not name keep their meaning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

static int code_of(int status, const char *type)
{
    sl_client_options_t opts;
    sl_client_options_init(&opts);
    opts.url = "http://127.0.0.1:9";
    opts.agent = "errors-test";
    sl_client_t *c = NULL;
    char err[256];
    assert_int_equal(sl_client_new(&opts, &c, err, sizeof(err)), 0);
    sl__cl_http_answer_t a = {.status = status,
                              .body = type ? json_pack("{s:{s:s,s:s}}", "error", "type", type,
                                                       "message", "m")
                                           : NULL};
    int rc = sl__cl_http_error(c, &a, "test");
    json_decref(a.body);
    sl_client_free(c);
    return rc;
}

static void test_every_type_of_the_table_maps_back_to_its_code(void **state)
{
    (void)state;
#define SL_ERROR(rc, status, name, provider_status) assert_int_equal(code_of(status, name), rc);
#include "../../src/common/errors.def"
#include "test_main.h"
#undef SL_ERROR
}

static void test_a_413_is_capacity_or_body_size_by_its_type(void **state)
{
    (void)state;
    assert_int_equal(code_of(413, "exceeds_capacity"), SL_ECAPACITY);
    assert_int_equal(code_of(413, "body_too_large"), SL_ETOOBIG);
    assert_int_equal(code_of(422, "something_old"), SL_ECAPACITY); /* an older server */
}

static void test_statuses_the_table_does_not_name(void **state)
{
    (void)state;
    assert_int_equal(code_of(401, "unauthorized"), SL_EAUTH);
    assert_int_equal(code_of(403, "forbidden"), SL_EAUTH);
    assert_int_equal(code_of(409, "conflict"), SL_EEXIST); /* by the table, not the status */
    assert_int_equal(code_of(502, NULL), SL_EPROTO);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_every_type_of_the_table_maps_back_to_its_code),
    cmocka_unit_test(test_a_413_is_capacity_or_body_size_by_its_type),
    cmocka_unit_test(test_statuses_the_table_does_not_name))
