/* Unit tests of request estimation: overheads, cache prefix, images, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "sluice/tokenizer.h"
#include "tokenizer_internal.h"
#include "tokenizer_harness.h"
#include "test_main.h"

/* A vocabulary of single bytes only: every character of ASCII text is one token,
 * which makes expected counts easy to read. */
static sl_tokenizer_t *bytes_vocab(void)
{
    char path[] = "/tmp/sl-test-est-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"pat_str\": \"\\\\p{L}+|\\\\p{N}+|\\\\s+|[^\\\\s\\\\p{L}\\\\p{N}]+\", "
               "\"special_tokens\": {}, \"bpe_ranks\": \"! 0");
    for (int b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        char enc[8];
        b64(&byte, 1, enc);
        fprintf(f, " %s", enc);
    }
    fprintf(f, "\"}\n");
    fclose(f);
    sl_tokenizer_t *tok = NULL;
    char err[256];
    assert_int_equal(sl_tokenizer_load(path, &tok, err, sizeof(err)), 0);
    unlink(path);
    return tok;
}

/* Estimates `body` from its text and from its parsed tree; both must agree. */
static sl_estimate_t estimate(sl_tokenizer_t *tok, sl_api_t api, const char *body)
{
    sl_estimate_t e, from_tree;
    char err[256] = "";
    int rc = sl_estimate_request(tok, api, body, strlen(body), &e, err, sizeof(err));
    if (rc != 0)
        fail_msg("unexpected error: %s", err);
    json_t *root = json_loads(body, 0, NULL);
    assert_non_null(root);
    rc = sl_estimate_json(tok, api, root, &from_tree, err, sizeof(err));
    json_decref(root);
    if (rc != 0)
        fail_msg("unexpected error from the parsed body: %s", err);
    assert_memory_equal(&e, &from_tree, sizeof(e));
    return e;
}

static void assert_api_error(sl_tokenizer_t *tok, sl_api_t api, const char *body,
                             const char *expected)
{
    sl_estimate_t e;
    char err[256] = "";
    assert_int_equal(sl_estimate_request(tok, api, body, strlen(body), &e, err, sizeof(err)),
                     SL_TOK_EREQUEST);
    if (strcmp(err, expected) != 0)
        fail_msg("error \"%s\", expected \"%s\"", err, expected);
}

static void assert_error(sl_tokenizer_t *tok, const char *body, const char *expected)
{
    assert_api_error(tok, SL_API_AUTO, body, expected);
}

static void test_anthropic_counts_text_plus_message_and_request_overheads(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    sl_estimate_t e = estimate(tok, SL_API_AUTO,
                               "{\"max_tokens\": 100, \"system\": \"abc\", \"messages\": ["
                               "{\"role\": \"user\", \"content\": \"hello\"},"
                               "{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"yo\"}]}]}");
    assert_int_equal(e.input_tokens, 3 + 3 + 5 + 3 + 2 + 4);
    assert_int_equal(e.cached_tokens, 0);
    assert_int_equal(e.output_tokens, 100);
    sl_tokenizer_free(tok);
}

static void test_cached_prefix_ends_at_last_cache_control_in_tools_system_messages_order(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    sl_estimate_t e = estimate(tok, SL_API_ANTHROPIC,
                               "{\"max_tokens\": 1, \"system\": [{\"type\": \"text\", \"text\": \"sys\","
                               " \"cache_control\": {\"type\": \"ephemeral\"}}], \"messages\": ["
                               "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"aaaa\","
                               " \"cache_control\": {\"type\": \"ephemeral\"}}, {\"type\": \"text\", \"text\": \"bb\"}]}]}");
    assert_int_equal(e.cached_tokens, 3 + 3 + 4);
    assert_int_equal(e.input_tokens, 2 + 4);
    sl_tokenizer_free(tok);
}

static void test_tools_add_the_tool_use_system_prompt(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    const char *fmt = "{\"max_tokens\": 1, %s \"tools\": [{\"name\": \"f\", \"input_schema\": {}}],"
                      " \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    char body[512];
    snprintf(body, sizeof(body), fmt, "");
    sl_estimate_t autoc = estimate(tok, SL_API_ANTHROPIC, body);
    snprintf(body, sizeof(body), fmt, "\"tool_choice\": {\"type\": \"any\"},");
    sl_estimate_t anyc = estimate(tok, SL_API_ANTHROPIC, body);
    assert_int_equal(autoc.input_tokens, 346 + 1 + 2 + 3 + 1 + 4);
    assert_int_equal(autoc.input_tokens - anyc.input_tokens, 346 - 313);
    sl_tokenizer_free(tok);
}

static int64_t image_tokens(sl_tokenizer_t *tok, const unsigned char *img, size_t n)
{
    char data[256], body[512];
    b64(img, n, data);
    snprintf(body, sizeof(body),
             "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"source\":"
             " {\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": \"%s\"}}]}]}", data);
    return estimate(tok, SL_API_ANTHROPIC, body).input_tokens - 3 - 4;
}

static void test_image_headers_give_width_times_height_over_750(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    /* PNG 1000 x 750 -> 1000 tokens. */
    unsigned char png[24] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13,
                             'I', 'H', 'D', 'R', 0, 0, 0x03, 0xe8, 0, 0, 0x02, 0xee};
    assert_int_equal(image_tokens(tok, png, sizeof(png)), 1000);
    /* GIF 300 x 200 -> 80. */
    unsigned char gif[10] = {'G', 'I', 'F', '8', '9', 'a', 0x2c, 0x01, 0xc8, 0x00};
    assert_int_equal(image_tokens(tok, gif, sizeof(gif)), 80);
    /* JPEG with an APP0 segment, then SOF0 150 x 100 -> 20. */
    unsigned char jpg[] = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0x00, 0x00, 0xff, 0xc0, 0x00, 0x11,
                           0x08, 0x00, 0x64, 0x00, 0x96, 0x03};
    assert_int_equal(image_tokens(tok, jpg, sizeof(jpg)), 20);
    /* WebP VP8X canvas 4000 x 3000: long edge fitted to 1568, capped at 1600. */
    unsigned char webp[30] = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P',
                              'V', 'P', '8', 'X', 10, 0, 0, 0, 0, 0, 0, 0,
                              0x9f, 0x0f, 0x00, 0xb7, 0x0b, 0x00};
    assert_int_equal(image_tokens(tok, webp, sizeof(webp)), 1600);
    /* Unrecognised bytes: the maximum. */
    unsigned char junk[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(image_tokens(tok, junk, sizeof(junk)), 1600);
    sl_tokenizer_free(tok);
}

static void test_openai_counts_roles_names_and_reply_without_cache(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    sl_estimate_t e = estimate(tok, SL_API_AUTO,
                               "{\"max_completion_tokens\": 7, \"messages\": ["
                               "{\"role\": \"system\", \"content\": \"ab\"},"
                               "{\"role\": \"user\", \"name\": \"jo\", \"content\": \"xyz\"}]}");
    assert_int_equal(e.input_tokens, (3 + 6 + 2) + (3 + 4 + 1 + 2 + 3) + 3);
    assert_int_equal(e.cached_tokens, 0);
    assert_int_equal(e.output_tokens, 7);
    sl_estimate_t low = estimate(tok, SL_API_OPENAI,
                                 "{\"max_tokens\": 3, \"messages\": [{\"role\": \"user\", \"content\": ["
                                 "{\"type\": \"image_url\", \"image_url\": {\"url\": \"https://x/y.png\","
                                 " \"detail\": \"low\"}}]}]}");
    assert_int_equal(low.input_tokens, 3 + 4 + 85 + 3);
    assert_int_equal(low.output_tokens, 3);
    sl_tokenizer_free(tok);
}

static void test_errors_name_the_field_and_the_value(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    assert_error(tok,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"},{\"role\": \"user\", \"content\": \"a\"},"
                 "{\"role\": \"user\", \"content\": \"a\"},{\"role\": \"user\", \"content\": [{\"type\": \"foo\"}]}]}",
                 "messages[3].content[0].type: unknown block type \"foo\"");
    assert_error(tok, "{\"messages\": [{\"role\": \"bot\", \"content\": \"a\"}]}",
                 "messages[0].role: unknown role \"bot\"");
    assert_error(tok, "{\"max_tokens\": \"ten\", \"messages\": []}",
                 "max_tokens: not a non-negative integer: \"ten\"");
    assert_error(tok, "{\"messages\": 5}", "messages: missing or not an array: 5");
    assert_error(tok, "[]", "body: not a JSON object: []");
    /* An array item that is not an object is named by its path, in every dialect. */
    assert_api_error(tok, SL_API_ANTHROPIC, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, 7]}",
                     "messages[1]: not an object: 7");
    assert_api_error(tok, SL_API_ANTHROPIC, "{\"tools\": [\"x\"], \"messages\": []}",
                     "tools[0]: not an object: \"x\"");
    assert_api_error(tok, SL_API_OPENAI, "{\"messages\": [true]}",
                     "messages[0]: not an object: true");
    assert_api_error(tok, SL_API_OPENAI,
                     "{\"messages\": [{\"role\": \"user\", \"content\": [\"hi\"]}]}",
                     "messages[0].content[0]: not an object: \"hi\"");
    assert_api_error(tok, SL_API_OPENAI_RESPONSES, "{\"input\": [{\"role\": \"user\", "
                     "\"content\": \"a\"}, null]}",
                     "input[1]: not an object: null");
    sl_tokenizer_free(tok);
}

/* What current clients send (Claude Code and friends) is counted, never refused. */
static void test_current_anthropic_shapes_are_counted_without_error(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    sl_estimate_t e = estimate(tok, SL_API_ANTHROPIC,
                               "{\"max_tokens\": 1, \"output_config\": {\"effort\": \"high\"},"
                               " \"context_management\": {\"edits\": []}, \"messages\": ["
                               "{\"role\": \"system\", \"content\": \"ab\"},"
                               "{\"role\": \"user\", \"content\": \"c\"}]}");
    assert_int_equal(e.input_tokens, 3 + 2 + 3 + 1 + 4);
    /* thinking with its signature: the thinking text counts, the signature does not */
    e = estimate(tok, SL_API_ANTHROPIC,
                 "{\"max_tokens\": 1, \"messages\": [{\"role\": \"assistant\", \"content\": ["
                 "{\"type\": \"thinking\", \"thinking\": \"hmm\", \"signature\": \"c2lnbmF0dXJl\"}]}]}");
    assert_int_equal(e.input_tokens, 3 + 3 + 4);
    /* server tool blocks: their JSON, keys sorted, cache_control left out */
    const char *json = "{\"id\":\"s\",\"input\":{},\"name\":\"w\",\"type\":\"server_tool_use\"}";
    e = estimate(tok, SL_API_ANTHROPIC,
                 "{\"max_tokens\": 1, \"messages\": [{\"role\": \"assistant\", \"content\": ["
                 "{\"type\": \"server_tool_use\", \"name\": \"w\", \"id\": \"s\", \"input\": {},"
                 " \"cache_control\": {\"type\": \"ephemeral\"}}]}]}");
    assert_int_equal(e.cached_tokens, 3 + (int64_t)strlen(json));
    assert_int_equal(e.input_tokens, 4);
    /* PDFs: pages of the largest image; url sources one page; inside tool results too */
    static const char pdf[] = "%PDF-1.4 1 0 obj << /Type /Pages >> 2 0 obj << /Type /Page >>"
                              " 3 0 obj <</Type/Page>>";
    char data[256], body[1024];
    b64((const unsigned char *)pdf, strlen(pdf), data);
    snprintf(body, sizeof(body),
             "{\"max_tokens\": 1, \"messages\": [{\"role\": \"user\", \"content\": ["
             "{\"type\": \"document\", \"source\": {\"type\": \"base64\", \"media_type\":"
             " \"application/pdf\", \"data\": \"%s\"}},"
             "{\"type\": \"document\", \"source\": {\"type\": \"url\", \"url\": \"https://x/a.pdf\"}},"
             "{\"type\": \"tool_result\", \"tool_use_id\": \"t\", \"content\": ["
             "{\"type\": \"image\", \"source\": {\"type\": \"url\", \"url\": \"https://x/a.png\"}}]}]}]}",
             data);
    e = estimate(tok, SL_API_ANTHROPIC, body);
    assert_int_equal(e.input_tokens, 3 + 2 * 1600 + 1600 + 1600 + 4);
    sl_tokenizer_free(tok);
}

static void test_responses_count_instructions_items_and_tools_as_chat(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = bytes_vocab();
    sl_estimate_t e = estimate(tok, SL_API_OPENAI_RESPONSES,
                               "{\"max_output_tokens\": 50, \"instructions\": \"be\", \"input\": \"hi\"}");
    assert_int_equal(e.input_tokens, (3 + 6 + 2) + (3 + 4 + 2) + 3);
    assert_int_equal(e.output_tokens, 50);
    e = estimate(tok, SL_API_OPENAI_RESPONSES,
                 "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"abc\"}]},"
                 "{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": \"ls\", \"arguments\": \"{}\"},"
                 "{\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": \"ok\"},"
                 "{\"type\": \"reasoning\", \"summary\": [{\"type\": \"summary_text\", \"text\": \"hm\"}]}]}");
    assert_int_equal(e.input_tokens, (3 + 4 + 3) + (3 + 9 + 2 + 2) + (3 + 4 + 2) + (3 + 9 + 2) + 3);
    assert_int_equal(e.output_tokens, 0);
    const char *tools = "[{\"type\":\"function\",\"name\":\"f\"}]";
    char body[256];
    snprintf(body, sizeof(body), "{\"tools\": %s, \"input\": \"x\"}", tools);
    e = estimate(tok, SL_API_OPENAI_RESPONSES, body);
    assert_int_equal(e.input_tokens, (int64_t)strlen(tools) + (3 + 4 + 1) + 3);
    sl_estimate_t out;
    char err[256] = "";
    const char *bad = "{\"input\": [{\"role\": \"robot\", \"content\": \"x\"}]}";
    assert_int_equal(sl_estimate_request(tok, SL_API_OPENAI_RESPONSES, bad, strlen(bad), &out, err,
                                         sizeof(err)),
                     SL_TOK_EREQUEST);
    assert_string_equal(err, "input[0].role: unknown role \"robot\"");
    sl_tokenizer_free(tok);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_anthropic_counts_text_plus_message_and_request_overheads),
    cmocka_unit_test(test_cached_prefix_ends_at_last_cache_control_in_tools_system_messages_order),
    cmocka_unit_test(test_tools_add_the_tool_use_system_prompt),
    cmocka_unit_test(test_image_headers_give_width_times_height_over_750),
    cmocka_unit_test(test_openai_counts_roles_names_and_reply_without_cache),
    cmocka_unit_test(test_errors_name_the_field_and_the_value),
    cmocka_unit_test(test_current_anthropic_shapes_are_counted_without_error),
    cmocka_unit_test(test_responses_count_instructions_items_and_tools_as_chat))
