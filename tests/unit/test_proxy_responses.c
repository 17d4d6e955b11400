/* Unit tests of the proxy's Responses usage, its stream pass-through, and its path table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "proxy.h"
#include "test_main.h"

static void test_usage_settles_cached_input_as_cache_reads_and_reasoning_as_output(void **state)
{
    (void)state;
    static const char body[] =
        "{\"id\":\"resp_1\",\"output\":[{\"type\":\"message\",\"content\":[{\"text\":"
        "\"usage\"}]}],\"usage\":{\"input_tokens\":1000,\"input_tokens_details\":"
        "{\"cached_tokens\":600},\"output_tokens\":300,\"output_tokens_details\":"
        "{\"reasoning_tokens\":200},\"total_tokens\":1300}}";
    sl_usage_t u = {0};
    sl__responses_usage_from_body(body, sizeof(body) - 1, &u);
    assert_true(u.have_input && u.have_output);
    assert_int_equal(u.input_tokens, 400);
    assert_int_equal(u.cache_read_input_tokens, 600);
    assert_int_equal(u.output_tokens, 300);
}

static void test_stream_usage_comes_from_the_last_event_only(void **state)
{
    (void)state;
    sl_usage_t u = {0};
    static const char created[] = "event: response.created\ndata: {\"type\":\"response.created\","
                                  "\"response\":{\"usage\":null}}";
    sl__responses_usage_from_event(created, sizeof(created) - 1, &u);
    assert_false(u.have_input);
    static const char delta[] = "event: response.output_text.delta\ndata: {\"delta\":\"hi\"}";
    sl__responses_usage_from_event(delta, sizeof(delta) - 1, &u);
    sl__responses_usage_from_event(delta, sizeof(delta) - 1, &u);
    assert_int_equal(u.output_seen_tokens, 2);
    static const char done[] =
        "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":"
        "{\"output\":[],\"usage\":{\"input_tokens\":50,\"output_tokens\":16}}}";
    sl__responses_usage_from_event(done, sizeof(done) - 1, &u);
    assert_true(u.have_input && u.have_output);
    assert_int_equal(u.input_tokens, 50);
    assert_int_equal(u.output_tokens, 16);
}

/* Feeds `text` in pieces of `step` bytes; returns what came out after each piece. */
static size_t feed(struct evbuffer *in, struct evbuffer *out, bool *through, sl_usage_t *u,
                   const char *text, size_t step, size_t *out_after_first)
{
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) {
        evbuffer_add(in, text + i, i + step < n ? step : n - i);
        sl__responses_take_events(in, out, through, u);
        if (i == 0 && out_after_first) *out_after_first = evbuffer_get_length(out);
    }
    return evbuffer_get_length(out);
}

static void test_events_without_usage_pass_on_part_way_and_the_last_is_held_whole(void **state)
{
    (void)state;
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    bool through = false;
    sl_usage_t u = {0};
    char big[4096];
    memset(big, 'x', sizeof(big));
    big[sizeof(big) - 1] = '\0';
    char ev[8192];
    snprintf(ev, sizeof(ev), "event: response.output_text.done\ndata: {\"text\":\"%s\"}\n\n", big);
    size_t first = 0;
    /* 100-byte pieces: the event's first line is in the first one, so bytes flow at once */
    size_t total = feed(in, out, &through, &u, ev, 100, &first);
    assert_true(first > 0 && first <= 100);
    assert_int_equal(total, strlen(ev));
    assert_false(through);
    /* the last event: nothing comes out until it is whole, then its usage is read */
    static const char last[] = "event: response.completed\ndata: {\"response\":{\"usage\":"
                               "{\"input_tokens\":7,\"output_tokens\":9}}}\n\n";
    evbuffer_drain(out, evbuffer_get_length(out));
    evbuffer_add(in, last, sizeof(last) - 2); /* all but the final '\n' */
    sl__responses_take_events(in, out, &through, &u);
    assert_int_equal(evbuffer_get_length(out), 0);
    evbuffer_add(in, "\n", 1);
    sl__responses_take_events(in, out, &through, &u);
    assert_int_equal(evbuffer_get_length(out), sizeof(last) - 1);
    assert_int_equal(u.output_tokens, 9);
    /* an event end split between pieces ("\n" | "\n") is still found */
    evbuffer_drain(out, evbuffer_get_length(out));
    static const char two[] = "event: response.output_text.delta\ndata: {}\n\nevent: response."
                              "output_text.delta\ndata: {}\n\n";
    size_t cut = strlen("event: response.output_text.delta\ndata: {}\n");
    evbuffer_add(in, two, cut);
    sl__responses_take_events(in, out, &through, &u);
    assert_true(through);
    evbuffer_add(in, two + cut, sizeof(two) - 1 - cut);
    sl__responses_take_events(in, out, &through, &u);
    assert_false(through);
    assert_int_equal(evbuffer_get_length(out), sizeof(two) - 1);
    assert_int_equal(evbuffer_get_length(in), 0);
    evbuffer_free(in);
    evbuffer_free(out);
}

static sl_proxy_kind_t resolve(sl_upstream_api_t api, const char *path, char *up, size_t n)
{
    return sl__proxy_resolve(api, path, strlen(path), up, n);
}

static void test_paths_with_and_without_v1_resolve_to_the_providers_path(void **state)
{
    (void)state;
    char up[128];
    assert_int_equal(resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/messages", up, sizeof(up)),
                     SL_PROXY_CALL);
    assert_string_equal(up, "/v1/messages");
    assert_int_equal(
        resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/v1/messages/count_tokens", up, sizeof(up)),
        SL_PROXY_COUNT_TOKENS);
    assert_int_equal(resolve(SL_UPSTREAM_OPENAI, "/openai/responses", up, sizeof(up)),
                     SL_PROXY_RESPONSES);
    assert_string_equal(up, "/v1/responses");
    assert_int_equal(resolve(SL_UPSTREAM_OPENAI, "/openai/v1/models/gpt-4.1", up, sizeof(up)),
                     SL_PROXY_MODELS);
    assert_string_equal(up, "/v1/models/gpt-4.1");
    assert_int_equal(resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/api/hello", up, sizeof(up)),
                     SL_PROXY_HELLO);
    assert_int_equal(resolve(SL_UPSTREAM_OPENAI, "/openai/v1/responses/resp_1", up, sizeof(up)),
                     SL_PROXY_NONE);
    assert_int_equal(resolve(SL_UPSTREAM_OPENAI, "/openai/v1/models/a b", up, sizeof(up)),
                     SL_PROXY_NONE);
    assert_int_equal(
        resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/v1/chat/completions", up, sizeof(up)),
        SL_PROXY_NONE);
    assert_int_equal(resolve(SL_UPSTREAM_OPENAI, "/openai/v1/v1/responses", up, sizeof(up)),
                     SL_PROXY_NONE);
}

static void test_dot_segments_and_odd_spellings_are_not_routed(void **state)
{
    (void)state;
    static const char *const refused[] = {
        "/openai/v1/models/..", "/openai/v1/models/.", "/openai/v1/models/%2e%2e",
        "/openai/v1/models/%2E", "/openai/v1/models/.%2E", "/openai/v1/models/a%2Fb",
        "/openai/v1/models/a%5cb", "/openai/v1/models/a\\b", "/openai/v1/models/",
        "/openai//v1/models", "/openai/v1//models", "/openai/v1/models//x", "/openai/v1/%6dodels",
        "/openai/v1/models/%", "/openai/v1/models/%4", "/openai/v1/models/%zz", "/openai/v1",
        "/openai/v1/", "/openai", "/openai/v1/models/x/..", "/openai/v1/models%2Fx",
    };
    char up[300];
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (resolve(SL_UPSTREAM_OPENAI, refused[i], up, sizeof(up)) != SL_PROXY_NONE)
            fail_msg("%s was routed to %s", refused[i], up);
    assert_int_equal(resolve(SL_UPSTREAM_ANTHROPIC, "/anthropic/v1/models/%2E%2E", up, sizeof(up)),
                     SL_PROXY_NONE);
    assert_int_equal(resolve(SL_UPSTREAM_OPENAI, "/openai/v1/models/ft%3Agpt-4.1%3Aacme", up,
                             sizeof(up)),
                     SL_PROXY_MODELS);
    assert_string_equal(up, "/v1/models/ft:gpt-4.1:acme");
    assert_int_equal(resolve(SL_UPSTREAM_OPENAI, "/openai/models/...", up, sizeof(up)),
                     SL_PROXY_MODELS); /* three dots are a name, not a dot segment */
    assert_string_equal(up, "/v1/models/...");
}

SL_TEST_MAIN(
    cmocka_unit_test(test_usage_settles_cached_input_as_cache_reads_and_reasoning_as_output),
    cmocka_unit_test(test_stream_usage_comes_from_the_last_event_only),
    cmocka_unit_test(test_events_without_usage_pass_on_part_way_and_the_last_is_held_whole),
    cmocka_unit_test(test_paths_with_and_without_v1_resolve_to_the_providers_path),
    cmocka_unit_test(test_dot_segments_and_odd_spellings_are_not_routed))
