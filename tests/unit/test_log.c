/* test_log.c - unit tests for sluiced's log lines (src/server/core/log.c): one line per
 * event whatever the message holds, valid JSON in the json format, times in RFC 3339 UTC. */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "test_main.h"

/* The one line sl__log_line wrote for `msg` and `fields`, in `format`. */
static char *line_of(sl_log_format_t format, sl_log_level_t level, const char *msg,
                     const sl_log_field_t *fields, size_t n)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    sl__log_set_format(format);
    sl__log_line(f, level, msg, fields, n);
    sl__log_set_format(SL_LOG_TEXT);
    long len = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)len + 1);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    assert_int_equal(text[len - 1], '\n');
    assert_ptr_equal(strchr(text, '\n'), text + len - 1); /* one line */
    return text;
}

static void test_a_json_line_reads_back_whatever_the_message_holds(void **state)
{
    (void)state;
    const char *msg = "reload refused: \"quoted\", a\nnewline, a tab\t, a \\ and \x01";
    const sl_log_field_t fields[] = {{"path", "/v1/leases/\"x\"", false},
                                     {"status", "404", true},
                                     {"agent", NULL, false},
                                     {"pool", "caf\xc3\xa9", false}};
    char *text = line_of(SL_LOG_JSON, SL_LOG_WARN, msg, fields, 4);
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    if (!j) fail_msg("not JSON (%s): %s", err.text, text);
    assert_string_equal(json_string_value(json_object_get(j, "level")), "warn");
    assert_string_equal(json_string_value(json_object_get(j, "msg")), msg);
    json_t *f = json_object_get(j, "fields");
    assert_string_equal(json_string_value(json_object_get(f, "path")), "/v1/leases/\"x\"");
    assert_int_equal(json_integer_value(json_object_get(f, "status")), 404);
    assert_null(json_object_get(f, "agent")); /* a NULL value is left out */
    assert_string_equal(json_string_value(json_object_get(f, "pool")), "caf\xc3\xa9");
    const char *t = json_string_value(json_object_get(j, "time"));
    assert_int_equal(strlen(t), 24); /* 2026-12-07T09:11:02.123Z */
    assert_int_equal(t[10], 'T');
    assert_int_equal(t[23], 'Z');
    json_decref(j);
    free(text);
}

static void test_invalid_utf8_is_replaced_so_the_line_stays_json(void **state)
{
    (void)state;
    char *text = line_of(SL_LOG_JSON, SL_LOG_ERROR, "agent 'bad\xff\xfe' refused", NULL, 0);
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "agent 'bad?" "?' refused");
    json_decref(j);
    free(text);
}

static void test_a_text_line_is_one_line_with_time_level_and_quoted_fields(void **state)
{
    (void)state;
    const sl_log_field_t fields[] = {{"method", "GET", false}, {"agent", "two words", false}};
    char *text = line_of(SL_LOG_TEXT, SL_LOG_INFO, "access\nsecond line", fields, 2);
    const char *rest = text + 24; /* after the time */
    assert_string_equal(rest, " info sluiced: access second line method=GET agent=\"two words\"\n");
    free(text);
}

static void test_time_is_rfc3339_utc_with_milliseconds(void **state)
{
    (void)state;
    char t[32];
    sl__log_time(1796635086.4079, t);
    assert_string_equal(t, "2026-12-07T09:18:06.407Z");
    sl__log_time(0, t);
    assert_string_equal(t, "1970-01-01T00:00:00.000Z");
}

static void test_log_format_names_are_text_and_json(void **state)
{
    (void)state;
    sl_log_format_t f;
    assert_int_equal(sl__log_format_parse("json", &f), 0);
    assert_int_equal(f, SL_LOG_JSON);
    assert_int_equal(sl__log_format_parse("text", &f), 0);
    assert_int_equal(f, SL_LOG_TEXT);
    assert_int_equal(sl__log_format_parse("JSON", &f), -1);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_a_json_line_reads_back_whatever_the_message_holds),
    cmocka_unit_test(test_invalid_utf8_is_replaced_so_the_line_stays_json),
    cmocka_unit_test(test_a_text_line_is_one_line_with_time_level_and_quoted_fields),
    cmocka_unit_test(test_time_is_rfc3339_utc_with_milliseconds),
    cmocka_unit_test(test_log_format_names_are_text_and_json))
