/* Unit tests of the tokenizer: merges, special tokens, UTF-8 repair, NFKC, loading. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice/tokenizer.h"
#include "tokenizer_internal.h"
#include "tokenizer_harness.h"
#include "test_main.h"

/* Writes a claude.json-shaped vocabulary: every byte (ranks 10..265), then the
 * given multi-byte tokens with ranks 299, 300, ... Returns a malloc'd path. */
static char *write_vocab(const char *const *extra, size_t n_extra, const char *specials_json)
{
    char *path = strdup("/tmp/sl-test-vocab-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"explicit_n_vocab\": 300, \"pat_str\": \"%s\", \"special_tokens\": %s, "
               "\"bpe_ranks\": \"! 10",
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\\\p{L}+| ?\\\\p{N}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+|"
            "\\\\s+(?!\\\\S)|\\\\s+",
            specials_json);
    char enc[64];
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        b64(&c, 1, enc);
        fprintf(f, " %s", enc);
    }
    fprintf(f, "\\n! 299");
    for (size_t i = 0; i < n_extra; i++) {
        b64((const unsigned char *)extra[i], strlen(extra[i]), enc);
        fprintf(f, " %s", enc);
    }
    fprintf(f, "\"}\n");
    fclose(f);
    return path;
}

static const char *const toy_tokens[] = {"bc", "ab", "abcd", "\xef\xbf", "\xef\xbf\xbd", "fi",
                                          "aa", "aaaa"};

static sl_tokenizer_t *toy(void)
{
    char *path = write_vocab(toy_tokens, sizeof(toy_tokens) / sizeof(toy_tokens[0]),
                             "{\"<EOT>\": 0, \"<META>\": 1}");
    sl_tokenizer_t *tok = NULL;
    char err[256];
    assert_int_equal(sl_tokenizer_load(path, &tok, err, sizeof(err)), 0);
    unlink(path);
    free(path);
    return tok;
}

static int64_t count(sl_tokenizer_t *tok, const char *s, size_t n)
{
    int64_t t = -1;
    assert_int_equal(sl_tokenizer_count(tok, s, n, &t), 0);
    return t;
}

#define COUNT(tok, lit) count(tok, lit, sizeof(lit) - 1)

static void test_empty_text_is_zero_tokens(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = toy();
    assert_int_equal(count(tok, "", 0), 0);
    sl_tokenizer_free(tok);
}

static void test_piece_in_vocabulary_is_one_token_even_if_merges_cannot_reach_it(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = toy();
    /* "abcd": bc (299) merges first, then neither "abc" nor "bcd" is a token. */
    assert_int_equal(COUNT(tok, "abcd"), 1);
    assert_int_equal(COUNT(tok, "abcda"), 4); /* a, bc, d, a */
    sl_tokenizer_free(tok);
}

static void test_lowest_rank_pair_merges_first(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = toy();
    /* "abc": bc (299) beats ab (300): a + bc. */
    assert_int_equal(COUNT(tok, "abc"), 2);
    /* "aaaaa": aa merges leftmost first: aa aa a, then aaaa: 2 tokens. */
    assert_int_equal(COUNT(tok, "aaaaa"), 2);
    sl_tokenizer_free(tok);
}

static void test_special_tokens_count_as_one_and_split_the_text(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = toy();
    assert_int_equal(COUNT(tok, "<EOT>"), 1);
    assert_int_equal(COUNT(tok, "ab<EOT>ab<META>"), 4);
    assert_int_equal(sl_tokenizer_special_count(tok), 2);
    sl_tokenizer_free(tok);
}

static void test_invalid_utf8_counts_as_node_replacement_characters(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = toy();
    /* C0 80: two replacements; ED A0 80 (a surrogate): three; E2 82 + 'x': one. */
    assert_int_equal(COUNT(tok, "\xc0\x80"), COUNT(tok, "\xef\xbf\xbd\xef\xbf\xbd"));
    assert_int_equal(COUNT(tok, "\xed\xa0\x80"),
                     COUNT(tok, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
    assert_int_equal(COUNT(tok, "\xe2\x82x"), COUNT(tok, "\xef\xbf\xbdx"));
    sl_tokenizer_free(tok);
}

static void test_utf8_repair_matches_node_byte_for_byte(void **state)
{
    (void)state;
    /* node: Buffer.from(these bytes).toString('utf8') gives
     * FEFF 41 FFFD FFFD FFFD 41 FFFD FFFD FFFD FFFD FFFD FFFD FFFD FFFD. */
    static const unsigned char in[] = {0xef, 0xbb, 0xbf, 0x41, 0xc0, 0x80, 0xe2, 0x82, 0x41, 0xed,
                                       0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80, 0xf0, 0x9f, 0x98};
    sl__buf_t out = {0};
    assert_int_equal(sl__utf8_sanitize(in, sizeof(in), &out), 0);
    char expected[64] = "\xef\xbb\xbf" "A";
    for (int i = 0; i < 3; i++)
        strcat(expected, "\xef\xbf\xbd");
    strcat(expected, "A");
    for (int i = 0; i < 8; i++)
        strcat(expected, "\xef\xbf\xbd");
    assert_int_equal(out.n, strlen(expected));
    assert_memory_equal(out.p, expected, out.n);
    assert_int_equal(sl__utf8_valid_prefix(in, sizeof(in)), 4);
    sl__buf_free(&out);
}

static void assert_nfkc(const char *in, const char *expected)
{
    sl__buf_t out = {0};
    assert_int_equal(sl__nfkc((const unsigned char *)in, strlen(in), &out), 0);
    assert_int_equal(out.n, strlen(expected));
    assert_memory_equal(out.p, expected, out.n);
    sl__buf_free(&out);
}

static void test_nfkc_composes_decomposes_and_keeps_ascii(void **state)
{
    (void)state;
    assert_nfkc("plain ascii", "plain ascii");
    assert_nfkc("caf" "e\xcc\x81" "!", "caf\xc3\xa9!");     /* e + U+0301 -> é */
    assert_nfkc("\xef\xac\x81nance", "finance");            /* U+FB01 ligature */
    assert_nfkc("\xef\xbc\xa1\xe2\x84\xab", "A\xc3\x85");   /* fullwidth A, angstrom */
    assert_nfkc("x\xe2\x81\xb5y", "x5y");                   /* superscript five */
    sl_tokenizer_t *tok = toy();
    assert_int_equal(COUNT(tok, "\xef\xac\x81"), 1);        /* becomes "fi", a token */
    sl_tokenizer_free(tok);
}

static void test_nul_bytes_are_ordinary_characters(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = toy();
    assert_int_equal(COUNT(tok, "a\0b"), 3);
    sl_tokenizer_free(tok);
}

static void check_heap_equals_scan(const sl__vocab_t *v, const char *alphabet, unsigned seed)
{
    size_t na = strlen(alphabet);
    unsigned char piece[256];
    for (int round = 0; round < 2000; round++) {
        seed = seed * 1103515245u + 12345u;
        size_t n = 2 + (seed >> 8) % 255;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            piece[i] = (unsigned char)alphabet[(seed >> 8) % na];
        }
        assert_int_equal(sl__bpe_count_scan(v, piece, n), sl__bpe_count_heap(v, piece, n));
    }
}

static void test_heap_merge_agrees_with_tiktoken_scan(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = toy();
    check_heap_equals_scan(sl__tokenizer_vocab(tok), "abcdaa", 1);
    sl_tokenizer_free(tok);
}

static void test_load_reports_missing_file_and_bad_format(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = (sl_tokenizer_t *)1;
    char err[256];
    assert_int_equal(sl_tokenizer_load("/nonexistent/claude.json", &tok, err, sizeof(err)),
                     SL_TOK_EIO);
    assert_null(tok);
    assert_non_null(strstr(err, "/nonexistent/claude.json"));

    char path[] = "/tmp/sl-test-bad-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fputs("{\"pat_str\": \"x\", \"bpe_ranks\": \"! 0 YQ==\"}", f);
    fclose(f);
    assert_int_equal(sl_tokenizer_load(path, &tok, err, sizeof(err)), SL_TOK_EFORMAT);
    assert_non_null(strstr(err, "byte 0x00 is not a token"));

    f = fopen(path, "w");
    fputs("{\"pat_str\": \"x\"}", f);
    fclose(f);
    assert_int_equal(sl_tokenizer_load(path, &tok, err, sizeof(err)), SL_TOK_EFORMAT);
    assert_non_null(strstr(err, "bpe_ranks"));

    f = fopen(path, "w");
    fputs("{\"pat_str\": ", f);
    fclose(f);
    assert_int_equal(sl_tokenizer_load(path, &tok, err, sizeof(err)), SL_TOK_EFORMAT);
    unlink(path);
}

/* With the real vocabulary (data/claude.json or $SLUICE_VOCAB): counts node gave for
 * @anthropic-ai/tokenizer 0.0.4's countTokens(). Skipped when it is not fetched. */
static sl_tokenizer_t *real(void)
{
    sl_tokenizer_t *tok = NULL;
    char err[512];
    if (sl_tokenizer_load(NULL, &tok, err, sizeof(err)) != 0)
        return NULL;
    return tok;
}

static void test_real_vocabulary_counts_equal_node(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = real();
    if (!tok) /* make test fetches it (scripts/setup.d): missing is a failure */
        fail_msg("the vocabulary data/claude.json is missing: run make setup");
    static const struct {
        const char *text;
        int64_t tokens;
    } cases[] = {
        {"hello world!", 3}, {"\xe2\x84\xa2", 1}, {"\xcf\xb0", 1}, {"<EOT>", 1},
        {"\xef\xbc\x9c" "EOT\xef\xbc\x9e", 1}, {"a<EOT>b", 3}, {"x  <EOT>  y", 5},
        {"   \n\n  x", 3}, {"\xef\xbc\xa8\xef\xbd\x85\xef\xbd\x8c\xef\xbd\x8c\xef\xbd\x8f", 1},
        {"\xef\xac\x81nance", 1}, {"e\xcc\x81te", 2}, {"\xe1\xa0\x8e x\xe1\xa0\x8e", 7},
        {"\xe4\xb8\xad\xe6\x96\x87\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88", 4},
        {"it's they're I'll", 6}, {"\t\t\tint x = 42;\n", 8}, {"1234567890", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(count(tok, cases[i].text, strlen(cases[i].text)), cases[i].tokens);
    assert_int_equal(count(tok, "\0\0a", 3), 2);
    sl_tokenizer_free(tok);
}

static void test_real_vocabulary_heap_agrees_with_scan(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = real();
    if (!tok) /* make test fetches it (scripts/setup.d): missing is a failure */
        fail_msg("the vocabulary data/claude.json is missing: run make setup");
    check_heap_equals_scan(sl__tokenizer_vocab(tok), "etaoinshrdlu ", 7);
    check_heap_equals_scan(sl__tokenizer_vocab(tok), "ab ", 11);
    sl_tokenizer_free(tok);
}

static void test_real_vocabulary_counts_a_1mb_word(void **state)
{
    (void)state;
    sl_tokenizer_t *tok = real();
    if (!tok) /* make test fetches it (scripts/setup.d): missing is a failure */
        fail_msg("the vocabulary data/claude.json is missing: run make setup");
    size_t n = 1000000;
    char *word = malloc(n);
    memset(word, 'a', n);
    /* node gives 4000 for 64,000 a's (16 per token); a 1 MB word is too slow for it. */
    assert_int_equal(count(tok, word, 64000), 4000);
    assert_int_equal(count(tok, word, n), 62500);
    free(word);
    sl_tokenizer_free(tok);
}

SL_TEST_MAIN(
    cmocka_unit_test(test_empty_text_is_zero_tokens),
    cmocka_unit_test(test_piece_in_vocabulary_is_one_token_even_if_merges_cannot_reach_it),
    cmocka_unit_test(test_lowest_rank_pair_merges_first),
    cmocka_unit_test(test_special_tokens_count_as_one_and_split_the_text),
    cmocka_unit_test(test_invalid_utf8_counts_as_node_replacement_characters),
    cmocka_unit_test(test_utf8_repair_matches_node_byte_for_byte),
    cmocka_unit_test(test_nfkc_composes_decomposes_and_keeps_ascii),
    cmocka_unit_test(test_nul_bytes_are_ordinary_characters),
    cmocka_unit_test(test_heap_merge_agrees_with_tiktoken_scan),
    cmocka_unit_test(test_load_reports_missing_file_and_bad_format),
    cmocka_unit_test(test_real_vocabulary_counts_equal_node),
    cmocka_unit_test(test_real_vocabulary_heap_agrees_with_scan),
    cmocka_unit_test(test_real_vocabulary_counts_a_1mb_word))
