/* Unit tests of checkpoints: round trip, one changed file among many, atomic writes. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice/client.h"
#include "test_main.h"

#define N_FILES 64

static char dir[256];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void file_path(char *out, size_t n, int i)
{
    snprintf(out, n, "%s/src_%02d.c", dir, i);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sl-test-checkpoint-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    for (int i = 0; i < N_FILES; i++) {
        char p[300], text[64];
        file_path(p, sizeof(p), i);
        snprintf(text, sizeof(text), "int f%d(void) { return %d; }\n", i, i);
        write_file(p, text);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[600];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
    return 0;
}

static sl_checkpoint_t *make_checkpoint(void)
{
    sl_checkpoint_t *cp = sl_checkpoint_new("fix the flaky parser test");
    assert_non_null(cp);
    assert_int_equal(sl_checkpoint_set_step(cp, "3/5: patch tokenizer.c"), 0);
    for (int i = 0; i < N_FILES; i++) {
        char p[300];
        file_path(p, sizeof(p), i);
        assert_int_equal(sl_checkpoint_add_file(cp, p), 0);
    }
    assert_int_equal(sl_checkpoint_add_decision(cp, "keep the old API", "two callers outside"), 0);
    assert_int_equal(sl_checkpoint_add_decision(cp, "no new dependency", "PCRE2 is enough"), 0);
    assert_int_equal(sl_checkpoint_set_next_call(
                         cp, "{\"messages\": [{\"role\": \"user\", \"content\": \"go\"}],"
                             " \"tools\": {\"cwd\": \"/repo\"}}"),
                     0);
    assert_int_equal(sl_checkpoint_set_request_id(cp, "0123456789abcdef"), 0);
    return cp;
}

static void test_round_trip_keeps_every_field(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/agent.checkpoint", dir);
    sl_checkpoint_t *cp = make_checkpoint();
    assert_int_equal(sl_checkpoint_save(cp, path), 0);
    assert_true(sl_checkpoint_saved_at(cp) > 1e9);

    sl_checkpoint_t *back;
    size_t changed = 99;
    assert_int_equal(sl_checkpoint_resume(path, &back, &changed, NULL, 0), 0);
    assert_int_equal(changed, 0);
    assert_string_equal(sl_checkpoint_goal(back), "fix the flaky parser test");
    assert_string_equal(sl_checkpoint_step(back), "3/5: patch tokenizer.c");
    assert_string_equal(sl_checkpoint_request_id(back), "0123456789abcdef");
    assert_string_equal(sl_checkpoint_next_call(back), sl_checkpoint_next_call(cp));
    assert_int_equal(sl_checkpoint_file_count(back), N_FILES);
    assert_int_equal(sl_checkpoint_decision_count(back), 2);
    assert_string_equal(sl_checkpoint_decision(back, 1), "no new dependency");
    assert_string_equal(sl_checkpoint_decision_reason(back, 1), "PCRE2 is enough");
    for (size_t i = 0; i < N_FILES; i++) {
        assert_string_equal(sl_checkpoint_file_sha256(back, i), sl_checkpoint_file_sha256(cp, i));
        assert_int_equal(sl_checkpoint_file_state(back, i), SL_FILE_SAME);
    }
    assert_true(sl_checkpoint_saved_at(back) == sl_checkpoint_saved_at(cp));
    sl_checkpoint_free(cp);
    sl_checkpoint_free(back);
}

static void test_resume_names_exactly_the_one_changed_file(void **state)
{
    (void)state;
    char path[300], victim[300];
    snprintf(path, sizeof(path), "%s/agent.checkpoint", dir);
    sl_checkpoint_t *cp = make_checkpoint();
    assert_int_equal(sl_checkpoint_save(cp, path), 0);
    sl_checkpoint_free(cp);

    file_path(victim, sizeof(victim), 37);
    write_file(victim, "int f37(void) { return -37; }\n"); /* same length, other bytes */

    sl_checkpoint_t *back;
    size_t changed = 0;
    assert_int_equal(sl_checkpoint_resume(path, &back, &changed, NULL, 0), 0);
    assert_int_equal(changed, 1);
    for (size_t i = 0; i < N_FILES; i++)
        assert_int_equal(sl_checkpoint_file_state(back, i),
                         i == 37 ? SL_FILE_CHANGED : SL_FILE_SAME);
    assert_string_equal(sl_checkpoint_file_path(back, 37), victim);

    char gone[300];
    file_path(gone, sizeof(gone), 5);
    unlink(gone);
    assert_int_equal(sl_checkpoint_verify(back), 2);
    assert_int_equal(sl_checkpoint_file_state(back, 5), SL_FILE_MISSING);
    sl_checkpoint_free(back);
}

static void test_save_leaves_no_temporary_file(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof(path), "%s/agent.checkpoint", dir);
    sl_checkpoint_t *cp = sl_checkpoint_new("goal");
    for (int k = 0; k < 5; k++)
        assert_int_equal(sl_checkpoint_save(cp, path), 0);
    sl_checkpoint_free(cp);
    DIR *d = opendir(dir);
    struct dirent *e;
    int temporaries = 0;
    while ((e = readdir(d)))
        temporaries += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    assert_int_equal(temporaries, 0);
}

static void test_bad_input_is_refused_with_a_code(void **state)
{
    (void)state;
    sl_checkpoint_t *cp = sl_checkpoint_new("goal");
    assert_int_equal(sl_checkpoint_add_decision(cp, "x", "two\nlines"), SL_EARG);
    assert_int_equal(sl_checkpoint_set_step(cp, "a\nb"), SL_EARG);
    assert_int_equal(sl_checkpoint_set_next_call(cp, "{not json"), SL_EARG);
    assert_int_equal(sl_checkpoint_add_file(cp, "/nonexistent/sluice/file"), SL_EIO);
    assert_non_null(strstr(sl_checkpoint_errmsg(cp), "/nonexistent/sluice/file"));
    assert_int_equal(sl_checkpoint_save(cp, "/nonexistent-dir/x.checkpoint"), SL_EIO);
    sl_checkpoint_free(cp);

    char path[300], err[300];
    snprintf(path, sizeof(path), "%s/corrupt.checkpoint", dir);
    write_file(path, "{\"goal\": \"no version\"}");
    sl_checkpoint_t *back = NULL;
    assert_int_equal(sl_checkpoint_load(path, &back, err, sizeof(err)), SL_ECORRUPT);
    assert_null(back);
    assert_non_null(strstr(err, "corrupt.checkpoint"));
    write_file(path, "not json at all");
    assert_int_equal(sl_checkpoint_load(path, &back, err, sizeof(err)), SL_ECORRUPT);
    assert_int_equal(sl_checkpoint_load("/nonexistent/x", &back, err, sizeof(err)), SL_EIO);
}

static void test_sha256_matches_a_known_digest(void **state)
{
    (void)state;
    char path[300], hex[65];
    snprintf(path, sizeof(path), "%s/abc.txt", dir);
    write_file(path, "abc");
    assert_int_equal(sl_sha256_file(path, hex, NULL, 0), 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

SL_TEST_MAIN(
    cmocka_unit_test_setup_teardown(test_round_trip_keeps_every_field, setup, teardown),
    cmocka_unit_test_setup_teardown(test_resume_names_exactly_the_one_changed_file, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(test_save_leaves_no_temporary_file, setup, teardown),
    cmocka_unit_test_setup_teardown(test_bad_input_is_refused_with_a_code, setup, teardown),
    cmocka_unit_test_setup_teardown(test_sha256_matches_a_known_digest, setup, teardown))
