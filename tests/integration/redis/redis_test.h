/* redis_test.h - what the Redis backend's C integration tests share: the event loop they
 * run on, CHECK (a failed condition is printed and counted, the test goes on) and
 * run_for. Header-only: each test is one program. */
#ifndef SL_TEST_REDIS_TEST_H
#define SL_TEST_REDIS_TEST_H

#include <math.h>
#include <stdio.h>

#include <event2/event.h>

/* The test's event loop (made by its main) and how many CHECKs failed. */
static struct event_base *base;
static int failures;

/* Counts and prints (file, line, the printf-style message) a condition that is false. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Runs the event loop for s seconds. */
static inline void run_for(double s)
{
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - floor(s)) * 1e6)};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

#endif
