/* Unit tests of capped-and-continued OpenAI answers (proxy_continue_openai.c): the next part's
 * body, the joined answer, the spliced Chat Completions stream and the summed usage. */
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

static const char CHAT[] = "{\"model\":\"m\",\"max_completion_tokens\":1000,"
                           "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

static sl_cont_t *cont(bool responses, const char *body, const char *field, int64_t max)
{
    return harness_cont(SL_UPSTREAM_OPENAI, responses, body, field, max);
}

/* A whole Chat Completion of `text` with `finish`, `prompt` and `completion` tokens. */
static char *chat_part(const char *id, const char *text, const char *finish, int prompt,
                       int completion)
{
    json_t *m = json_pack("{s:s,s:s,s:[{s:i,s:{s:s,s:s,s:n},s:s}],s:{s:i,s:i,s:i,s:{s:i},s:{s:i}}}",
                          "id", id, "object", "chat.completion", "choices", "index", 0, "message",
                          "role", "assistant", "content", text, "refusal", "finish_reason", finish,
                          "usage", "prompt_tokens", prompt, "completion_tokens", completion,
                          "total_tokens", prompt + completion, "prompt_tokens_details",
                          "cached_tokens", 0, "completion_tokens_details", "reasoning_tokens", 0);
    char *s = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return s;
}

/* Opens a round capped at `cap_tokens` and feeds it chat_part(...); as harness_cont_part. */
static int chat_round(sl_cont_t *c, int64_t cap_tokens, const char *id, const char *text,
                      const char *finish, int prompt, int completion)
{
    char *part = chat_part(id, text, finish, prompt, completion);
    int rc = harness_cont_part(c, cap_tokens, part);
    free(part);
    return rc;
}

/* The tokens the client's limit leaves the next part (whose body is dropped). */
static int64_t next_left(sl_cont_t *c)
{
    int64_t left = 0;
    json_decref(harness_cont_next(c, &left));
    return left;
}

static json_int_t int_at(json_t *j, const char *a, const char *b)
{
    json_t *v = json_object_get(j, a);
    return json_integer_value(b ? json_object_get(v, b) : v);
}

static void test_usage_sum_adds_every_count_and_the_nested_details(void **state)
{
    (void)state;
    json_t *into = json_loads("{\"prompt_tokens\":10,\"prompt_tokens_details\":"
                              "{\"cached_tokens\":4}}",
                              0, NULL);
    json_t *part =
        json_loads("{\"prompt_tokens\":12,\"completion_tokens\":7,\"prompt_tokens_details\":"
                   "{\"cached_tokens\":5},\"completion_tokens_details\":"
                   "{\"reasoning_tokens\":3},\"note\":\"x\"}",
                   0, NULL);
    sl__usage_sum(into, part);
    assert_int_equal(int_at(into, "prompt_tokens", NULL), 22);
    assert_int_equal(int_at(into, "completion_tokens", NULL), 7);
    assert_int_equal(int_at(into, "prompt_tokens_details", "cached_tokens"), 9);
    assert_int_equal(int_at(into, "completion_tokens_details", "reasoning_tokens"), 3);
    assert_string_equal(json_string_value(json_object_get(into, "note")), "x");
    json_decref(into);
    json_decref(part);
}

/* A whole completion cut at its cap goes on with its text as an assistant message and the
 * client's field set to what its limit leaves; the answer joins the text, takes the last
 * finish_reason and sums the usage. */
static void test_a_cut_completion_goes_on_as_an_assistant_message_and_joins(void **state)
{
    (void)state;
    sl_cont_t *c = cont(false, CHAT, "max_completion_tokens", 1000);
    assert_int_equal(chat_round(c, 80, "chatcmpl-1", "Alpha beta ", "length", 10, 80), 1);
    int64_t left = 0;
    json_t *nb = harness_cont_next(c, &left);
    assert_int_equal(left, 920);
    assert_int_equal(int_at(nb, "max_completion_tokens", NULL), 920);
    json_t *msgs = json_object_get(nb, "messages");
    assert_int_equal(json_array_size(msgs), 2);
    json_t *said = json_array_get(msgs, 1);
    assert_string_equal(json_string_value(json_object_get(said, "role")), "assistant");
    /* No prefill to refuse white space: the text goes back exactly as it came. */
    assert_string_equal(json_string_value(json_object_get(said, "content")), "Alpha beta ");
    assert_int_equal(chat_round(c, 160, "chatcmpl-2", "gamma.", "stop", 14, 3), 0);
    json_t *m = harness_cont_answer(c);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "chatcmpl-1");
    json_t *choice = json_array_get(json_object_get(m, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "stop");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(choice, "message"), "content")),
        "Alpha beta gamma.");
    assert_int_equal(int_at(m, "usage", "prompt_tokens"), 24);
    assert_int_equal(int_at(m, "usage", "completion_tokens"), 83);
    assert_int_equal(int_at(m, "usage", "total_tokens"), 107);
    json_decref(m);
    json_decref(nb);
    sl__cont_free(c);
}

/* Cut at the client's own limit, or below the cap (a context-length stop): as it came. */
static void test_a_completion_cut_at_the_clients_limit_ends_as_cut(void **state)
{
    (void)state;
    sl_cont_t *c = cont(false, CHAT, "max_completion_tokens", 100);
    assert_int_equal(chat_round(c, 80, "chatcmpl-1", "Alpha", "length", 10, 80), 1);
    assert_int_equal(next_left(c), 20);
    /* 100 of 100: the client's own */
    assert_int_equal(chat_round(c, 20, "chatcmpl-2", " beta", "length", 12, 20), 0);
    json_t *m = harness_cont_answer(c);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(m, "choices"), 0),
                                          "finish_reason")),
        "length");
    assert_int_equal(int_at(m, "usage", "completion_tokens"), 100);
    json_decref(m);
    sl__cont_free(c);
    c = cont(false, CHAT, "max_completion_tokens", 1000);
    /* below the cap */
    assert_int_equal(chat_round(c, 80, "chatcmpl-3", "Alpha", "length", 10, 30), 0);
    sl__cont_free(c);
}

/* A tool call or a refusal is nothing an assistant text can carry: the answer ends as cut. */
static void test_a_completion_that_wrote_a_tool_call_is_not_continued(void **state)
{
    (void)state;
    sl_cont_t *c = cont(false, CHAT, "max_completion_tokens", 1000);
    static const char part[] =
        "{\"id\":\"x\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
        "\"Reading.\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
        "{\"name\":\"read\",\"arguments\":\"{\\\"pa\"}}]},\"finish_reason\":\"length\"}],"
        "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":80}}";
    assert_int_equal(harness_cont_part(c, 80, part), 0);
    sl__cont_free(c);
}

/* Moves a streamed continuation on to its next part, as the proxy does: the next body
 * (dropped here), then a round capped at `cap_tokens`. */
static void next_round(sl_cont_t *c, int64_t cap_tokens)
{
    next_left(c);
    sl__cont_round(c, cap_tokens);
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

#define CHUNK(id, choice) "data: {\"id\":\"" id "\",\"created\":1,\"choices\":[" choice "]}"
#define USAGE(id, p, c)                                                                            \
    "data: {\"id\":\"" id "\",\"created\":1,\"choices\":[],\"usage\":{\"prompt_tokens\":" #p       \
    ",\"completion_tokens\":" #c ",\"total_tokens\":" #p "}}"

/* Two streamed parts become one stream: the second's opening chunk dropped, its chunks under
 * the first id, the first part's finish, usage chunk and [DONE] dropped, one usage chunk
 * with the sum. */
static void test_a_cut_stream_is_spliced_with_one_finish_and_the_summed_usage(void **state)
{
    (void)state;
    sl_cont_t *c = cont(false, CHAT, "max_completion_tokens", 1000);
    sl__cont_round(c, 80);
    const char *part1[] = {
        CHUNK("a", "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                   "\"finish_reason\":null}"),
        CHUNK("a", "{\"index\":0,\"delta\":{\"content\":\"Alpha \"},\"finish_reason\":null}"),
        CHUNK("a", "{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}"),
        USAGE("a", 10, 80),
        "data: [DONE]",
    };
    char *got1 = harness_cont_feed(c, part1, 5, true);
    assert_true(sl__cont_wants_more(c));
    assert_int_equal(count(got1, "finish_reason\":\"length"), 0);
    assert_int_equal(count(got1, "[DONE]"), 0);
    assert_int_equal(count(got1, "usage"), 0);
    assert_int_equal(count(got1, "Alpha "), 1);
    next_round(c, 160);
    const char *part2[] = {
        CHUNK("b", "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\","
                   "\"refusal\":null},\"finish_reason\":null}"),
        CHUNK("b", "{\"index\":0,\"delta\":{\"content\":\"omega.\"},\"finish_reason\":null}"),
        CHUNK("b", "{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}"),
        USAGE("b", 14, 3),
        "data: [DONE]",
    };
    char *got2 = harness_cont_feed(c, part2, 5, true);
    assert_false(sl__cont_wants_more(c));
    assert_int_equal(count(got2, "\"id\":\"b\""), 0); /* all under the first part's id */
    assert_int_equal(count(got2, "\"role\""), 0);     /* the second opening dropped */
    assert_int_equal(count(got2, "omega."), 1);
    assert_int_equal(count(got2, "finish_reason\":\"stop"), 1);
    assert_non_null(strstr(got2, "\"prompt_tokens\":24"));
    assert_non_null(strstr(got2, "\"completion_tokens\":83"));
    assert_true(strstr(got2, "finish_reason\":\"stop") < strstr(got2, "\"usage\""));
    assert_true(strstr(got2, "\"usage\"") < strstr(got2, "[DONE]"));
    free(got1);
    free(got2);
    sl__cont_free(c);
}

/* The usage chunk sluice asked for (the client did not) decides, but never reaches it; a
 * part that wrote a tool call ends as cut, its finish passed on. */
static void test_a_stream_with_a_tool_call_ends_as_cut_without_the_unasked_usage(void **state)
{
    (void)state;
    sl_cont_t *c = cont(false, CHAT, "max_completion_tokens", 1000);
    sl__cont_round(c, 80);
    const char *part[] = {
        CHUNK("a", "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hm\"},"
                   "\"finish_reason\":null}"),
        CHUNK("a", "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
                   "{\"arguments\":\"{\"}}]},\"finish_reason\":null}"),
        CHUNK("a", "{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}"),
        USAGE("a", 10, 80),
        "data: [DONE]",
    };
    char *got = harness_cont_feed(c, part, 5, false);
    assert_false(sl__cont_wants_more(c));
    assert_int_equal(count(got, "finish_reason\":\"length"), 1);
    assert_int_equal(count(got, "usage"), 0);
    assert_int_equal(count(got, "[DONE]"), 1);
    free(got);
    sl__cont_free(c);
}

/* A Response cut at max_output_tokens goes on from an input item; a string input becomes
 * a user message first. The answer is the last Response (its id), the text joined into
 * its message, the usage summed, max_output_tokens the client's. */
static void test_a_cut_response_goes_on_and_joins_into_the_last(void **state)
{
    (void)state;
    sl_cont_t *c = cont(true, "{\"model\":\"m\",\"input\":\"hi\",\"max_output_tokens\":500}",
                        "max_output_tokens", 500);
    static const char r1[] =
        "{\"id\":\"resp_1\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":"
        "\"max_output_tokens\"},\"max_output_tokens\":80,\"output\":[{\"type\":\"reasoning\","
        "\"id\":\"rs_1\"},{\"type\":\"message\",\"id\":\"msg_1\",\"content\":[{\"type\":"
        "\"output_text\",\"text\":\"Alpha "
        "\"}]}],\"usage\":{\"input_tokens\":8,\"output_tokens\":80,"
        "\"output_tokens_details\":{\"reasoning_tokens\":20},\"total_tokens\":88}}";
    assert_int_equal(harness_cont_part(c, 80, r1), 1);
    int64_t left = 0;
    json_t *nb = harness_cont_next(c, &left);
    assert_int_equal(int_at(nb, "max_output_tokens", NULL), 420);
    json_t *input = json_object_get(nb, "input");
    assert_int_equal(json_array_size(input), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(input, 0), "content")),
                        "hi");
    assert_string_equal(json_string_value(json_object_get(json_array_get(input, 1), "content")),
                        "Alpha ");
    static const char r2[] =
        "{\"id\":\"resp_2\",\"status\":\"completed\",\"incomplete_details\":null,"
        "\"max_output_tokens\":420,\"output\":[{\"type\":\"message\",\"id\":\"msg_2\",\"content\":"
        "[{\"type\":\"output_text\",\"text\":\"omega.\"}]}],\"usage\":{\"input_tokens\":12,"
        "\"output_tokens\":3,\"output_tokens_details\":{\"reasoning_tokens\":0},"
        "\"total_tokens\":15}}";
    assert_int_equal(harness_cont_part(c, 160, r2), 0);
    json_t *r = harness_cont_answer(c);
    assert_string_equal(json_string_value(json_object_get(r, "id")), "resp_2");
    assert_string_equal(json_string_value(json_object_get(r, "status")), "completed");
    assert_int_equal(int_at(r, "max_output_tokens", NULL), 500);
    json_t *out = json_object_get(r, "output");
    assert_int_equal(json_array_size(out), 2); /* the first part's reasoning, then the message */
    json_t *msg = json_array_get(out, 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(msg, "content"), 0), "text")),
                        "Alpha omega.");
    assert_int_equal(int_at(r, "usage", "input_tokens"), 20);
    assert_int_equal(int_at(r, "usage", "output_tokens"), 83);
    assert_int_equal(int_at(r, "usage", "total_tokens"), 103);
    json_decref(r);
    json_decref(nb);
    sl__cont_free(c);
}

#define REV(type, json) "event: " type "\ndata: {\"type\":\"" type "\"," json "}"

/* A Responses stream: the second part's message continues the first's (its item id and
 * output_index, no second opening), the closing events come once with the whole text,
 * the sequence numbers run on, the last event has the first id and the summed usage. */
static void test_a_cut_responses_stream_is_spliced_into_one_message(void **state)
{
    (void)state;
    sl_cont_t *c = cont(true, "{\"model\":\"m\",\"input\":\"hi\",\"max_output_tokens\":500}",
                        "max_output_tokens", 500);
    sl__cont_round(c, 80);
    const char *part1[] = {
        REV("response.created", "\"response\":{\"id\":\"resp_1\",\"max_output_tokens\":80},"
                                "\"sequence_number\":0"),
        REV("response.output_item.added", "\"output_index\":0,\"item\":{\"id\":\"msg_1\","
                                          "\"type\":\"message\",\"content\":[]}"),
        REV("response.output_text.delta",
            "\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Alpha \""),
        REV("response.output_text.done",
            "\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"text\":\"Alpha \""),
        REV("response.incomplete",
            "\"response\":{\"id\":\"resp_1\",\"status\":\"incomplete\",\"incomplete_details\":"
            "{\"reason\":\"max_output_tokens\"},\"output\":[{\"id\":\"msg_1\",\"type\":"
            "\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"Alpha \"}]}],"
            "\"usage\":{\"input_tokens\":8,\"output_tokens\":80,\"total_tokens\":88}}"),
    };
    char *got1 = harness_cont_feed(c, part1, 5, true);
    assert_true(sl__cont_wants_more(c));
    assert_non_null(strstr(got1, "\"max_output_tokens\":500")); /* the client's, in created */
    assert_int_equal(count(got1, "output_text.done"), 0);
    assert_int_equal(count(got1, "response.incomplete"), 0);
    assert_non_null(strstr(got1, "\"sequence_number\":2"));
    next_round(c, 160);
    const char *part2[] = {
        REV("response.created", "\"response\":{\"id\":\"resp_2\"},\"sequence_number\":0"),
        REV("response.output_item.added", "\"output_index\":0,\"item\":{\"id\":\"msg_2\","
                                          "\"type\":\"message\",\"content\":[]}"),
        REV("response.output_text.delta",
            "\"item_id\":\"msg_2\",\"output_index\":0,\"content_index\":0,\"delta\":\"omega.\""),
        REV("response.output_text.done",
            "\"item_id\":\"msg_2\",\"output_index\":0,\"content_index\":0,\"text\":\"omega.\""),
        REV("response.completed",
            "\"response\":{\"id\":\"resp_2\",\"status\":\"completed\",\"output\":[{\"id\":"
            "\"msg_2\",\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":"
            "\"omega.\"}]}],\"usage\":{\"input_tokens\":12,\"output_tokens\":3,"
            "\"total_tokens\":15}}"),
    };
    char *got2 = harness_cont_feed(c, part2, 5, true);
    assert_false(sl__cont_wants_more(c));
    assert_int_equal(count(got2, "response.created"), 0);
    assert_int_equal(count(got2, "output_item.added"), 0);
    assert_int_equal(count(got2, "msg_2"), 0);
    assert_int_equal(count(got2, "resp_2"), 0);
    assert_non_null(strstr(got2, "\"delta\":\"omega.\",\"sequence_number\":3"));
    assert_non_null(strstr(got2, "\"text\":\"Alpha omega.\",\"sequence_number\":4"));
    assert_non_null(strstr(got2, "\"input_tokens\":20"));
    assert_non_null(strstr(got2, "\"output_tokens\":83"));
    assert_non_null(strstr(got2, "\"sequence_number\":5"));
    free(got1);
    free(got2);
    sl__cont_free(c);
}

/* A call asking for JSON is not continued: a second message would be a second document. */
static void test_a_call_asking_for_json_is_not_continued(void **state)
{
    (void)state;
    const char *bodies[] = {
        "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}",
        "{\"response_format\":{\"type\":\"json_object\"}}",
        "{\"text\":{\"format\":{\"type\":\"json_schema\"}}}",
    };
    for (size_t i = 0; i < 3; i++) {
        json_t *j = json_loads(bodies[i], 0, NULL);
        assert_false(sl__oai_cont_takes(j, i == 2));
        json_decref(j);
    }
    json_t *text = json_loads("{\"response_format\":{\"type\":\"text\"}}", 0, NULL);
    assert_true(sl__oai_cont_takes(text, false));
    json_decref(text);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_usage_sum_adds_every_count_and_the_nested_details),
    cmocka_unit_test(test_a_cut_completion_goes_on_as_an_assistant_message_and_joins),
    cmocka_unit_test(test_a_completion_cut_at_the_clients_limit_ends_as_cut),
    cmocka_unit_test(test_a_completion_that_wrote_a_tool_call_is_not_continued),
    cmocka_unit_test(test_a_cut_stream_is_spliced_with_one_finish_and_the_summed_usage),
    cmocka_unit_test(test_a_stream_with_a_tool_call_ends_as_cut_without_the_unasked_usage),
    cmocka_unit_test(test_a_cut_response_goes_on_and_joins_into_the_last),
    cmocka_unit_test(test_a_call_asking_for_json_is_not_continued),
    cmocka_unit_test(test_a_cut_responses_stream_is_spliced_into_one_message))
