/* Unit tests of the output a proxied call asks the provider to hold, capping it, and the continued
 * answer's pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "cont_harness.h"
#include "proxy.h"
#include "test_main.h"

static sl_proxy_output_t read_ok(sl_upstream_api_t api, bool responses, const char *body)
{
    json_t *j = json_loads(body, 0, NULL);
    assert_non_null(j);
    sl_proxy_output_t o;
    char err[256];
    assert_int_equal(sl__proxy_output_read(api, responses, j, &o, err, sizeof(err)), 0);
    json_decref(j);
    return o;
}

static void test_each_dialect_names_its_own_limit_and_n_multiplies_it(void **state)
{
    (void)state;
    sl_proxy_output_t o = read_ok(SL_UPSTREAM_ANTHROPIC, false, "{\"max_tokens\":8192}");
    assert_string_equal(o.field, "max_tokens");
    assert_int_equal(sl__proxy_output_tokens(&o), 8192);
    assert_true(o.cappable);
    o = read_ok(SL_UPSTREAM_OPENAI, false, "{\"max_completion_tokens\":300,\"max_tokens\":9}");
    assert_string_equal(o.field, "max_completion_tokens");
    assert_int_equal(sl__proxy_output_tokens(&o), 300);
    o = read_ok(SL_UPSTREAM_OPENAI, false, "{\"max_tokens\":4000,\"n\":8}");
    assert_string_equal(o.field, "max_tokens");
    assert_int_equal(o.choices, 8);
    assert_int_equal(sl__proxy_output_tokens(&o), 32000);
    o = read_ok(SL_UPSTREAM_OPENAI, true, "{\"max_output_tokens\":700,\"n\":8}");
    assert_string_equal(o.field, "max_output_tokens");
    assert_int_equal(sl__proxy_output_tokens(&o), 700);  /* the Responses API has no n */
    o = read_ok(SL_UPSTREAM_OPENAI, false, "{\"n\":2}"); /* no limit named: 4096 a choice */
    assert_int_equal(sl__proxy_output_tokens(&o), 8192);
    /* The least it may be capped to: a token a choice, 16 on Responses. */
    assert_int_equal(o.floor_tokens, 2);
    o = read_ok(SL_UPSTREAM_OPENAI, true, "{\"max_output_tokens\":700}");
    assert_int_equal(o.floor_tokens, 16);
    o = read_ok(SL_UPSTREAM_ANTHROPIC, false, "{\"max_tokens\":8192}");
    assert_int_equal(o.floor_tokens, 1);
    /* Extended thinking: its budget must stay below max_tokens, so it is never lowered. */
    o = read_ok(SL_UPSTREAM_ANTHROPIC, false,
                "{\"max_tokens\":8192,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":4000}}");
    assert_false(o.cappable);
}

static void test_a_bad_n_is_refused_naming_it(void **state)
{
    (void)state;
    const char *bad[] = {"{\"n\":0}", "{\"n\":129}", "{\"n\":\"2\"}", "{\"n\":1.5}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        sl_proxy_output_t o;
        char err[256] = "";
        assert_int_equal(sl__proxy_output_read(SL_UPSTREAM_OPENAI, false, j, &o, err, sizeof(err)),
                         -1);
        assert_non_null(strstr(err, "n must be"));
        json_decref(j);
    }
}

static void test_capping_lowers_the_limit_per_choice_and_adds_one_when_none_is_named(void **state)
{
    (void)state;
    json_t *j = json_loads("{\"max_tokens\":4000,\"n\":4}", 0, NULL);
    sl_proxy_output_t o;
    char err[64];
    assert_int_equal(sl__proxy_output_read(SL_UPSTREAM_OPENAI, false, j, &o, err, sizeof(err)), 0);
    assert_int_equal(sl__proxy_output_cap(j, &o, 1000), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 250);
    assert_int_equal(sl__proxy_output_cap(j, &o, 16000), 0); /* never raised */
    json_decref(j);
    j = json_loads("{\"messages\":[]}", 0, NULL);
    assert_int_equal(sl__proxy_output_read(SL_UPSTREAM_OPENAI, false, j, &o, err, sizeof(err)), 0);
    assert_int_equal(sl__proxy_output_cap(j, &o, 900), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "max_completion_tokens")), 900);
    json_decref(j);
}

/* proxy.continue_capped: a part cut at its cap goes on from a prefill without trailing
 * white space, and the joined answer has the last stop reason and the summed output. */
static void test_a_cut_answer_continues_from_a_prefill_and_joins(void **state)
{
    (void)state;
    sl_cont_t *c = harness_cont(SL_UPSTREAM_ANTHROPIC, false,
                                "{\"model\":\"m\",\"max_tokens\":1000,\"messages\":[{\"role\":"
                                "\"user\",\"content\":\"hi\"}]}",
                                "max_tokens", 1000);
    static const char part1[] = "{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":"
                                "\"Hello \"}],\"stop_reason\":\"max_tokens\",\"usage\":"
                                "{\"input_tokens\":5,\"output_tokens\":80}}";
    assert_int_equal(harness_cont_part(c, 80, part1), 1);
    int64_t left = 0;
    json_t *nb = harness_cont_next(c, &left);
    assert_int_equal(left, 920);
    json_t *prefill = json_array_get(json_object_get(nb, "messages"), 1);
    assert_string_equal(json_string_value(json_object_get(prefill, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(prefill, "content"), 0), "text")),
                        "Hello"); /* the API refuses a prefill ending in white space */
    assert_int_equal(json_integer_value(json_object_get(nb, "max_tokens")), 920);
    json_decref(nb);
    static const char part2[] = "{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":"
                                "\" world.\"}],\"stop_reason\":\"end_turn\",\"usage\":"
                                "{\"input_tokens\":90,\"output_tokens\":3}}";
    assert_int_equal(harness_cont_part(c, 80, part2), 0);
    json_t *m = harness_cont_answer(c);
    assert_string_equal(json_string_value(json_object_get(m, "stop_reason")), "end_turn");
    json_t *content = json_object_get(m, "content");
    assert_int_equal(json_array_size(content), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "text")),
                        "Hello world.");
    json_t *usage = json_object_get(m, "usage");
    assert_int_equal(json_integer_value(json_object_get(usage, "output_tokens")), 83);
    assert_int_equal(json_integer_value(json_object_get(usage, "input_tokens")), 5);
    json_decref(m);
    sl__cont_free(c);
}

/* A stream cut inside a tool_use block: the client never sees the partial block. */
static void test_a_stream_cut_inside_a_tool_block_hides_it_and_goes_on(void **state)
{
    (void)state;
    sl_cont_t *c = harness_cont(SL_UPSTREAM_ANTHROPIC, false,
                                "{\"max_tokens\":1000,\"messages\":[{\"role\":\"user\","
                                "\"content\":\"hi\"}]}",
                                "max_tokens", 1000);
    sl__cont_round(c, 50);
    const char *events[] = {
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
        "\"delta\":{\"type\":\"text_delta\",\"text\":\"Reading.\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"
        "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"read\",\"input\":{}}}",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,"
        "\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"pa\"}}",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
        "\"max_tokens\"},\"usage\":{\"output_tokens\":50}}",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}",
    };
    char *text = harness_cont_feed(c, events, sizeof(events) / sizeof(events[0]), true);
    assert_true(sl__cont_wants_more(c));
    assert_non_null(strstr(text, "Reading."));
    assert_null(strstr(text, "tool_use")); /* the partial tool block never went out */
    assert_null(strstr(text, "message_stop"));
    free(text);
    sl__cont_free(c);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_each_dialect_names_its_own_limit_and_n_multiplies_it),
    cmocka_unit_test(test_a_bad_n_is_refused_naming_it),
    cmocka_unit_test(test_capping_lowers_the_limit_per_choice_and_adds_one_when_none_is_named),
    cmocka_unit_test(test_a_cut_answer_continues_from_a_prefill_and_joins),
    cmocka_unit_test(test_a_stream_cut_inside_a_tool_block_hides_it_and_goes_on))
