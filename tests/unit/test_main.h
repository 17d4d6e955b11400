/* test_main.h - the main() of every unit test: its cmocka tests, run as one group.
 *
 *     SL_TEST_MAIN(cmocka_unit_test(test_one), cmocka_unit_test(test_two))
 *
 * expands to the whole of main(); the exit status is the number of tests that failed. */
#ifndef SL_TEST_MAIN_H
#define SL_TEST_MAIN_H

#define SL_TEST_MAIN(...)                                                                          \
    int main(void)                                                                                 \
    {                                                                                              \
        const struct CMUnitTest tests[] = {__VA_ARGS__};                                           \
        return cmocka_run_group_tests(tests, NULL, NULL);                                          \
    }

#endif
