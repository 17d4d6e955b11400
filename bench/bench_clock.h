/* bench_clock.h - what the C benchmarks measure with: wall and CPU time in seconds, and
 * the heap in use. Header-only: each benchmark is one program. */
#ifndef SL_BENCH_CLOCK_H
#define SL_BENCH_CLOCK_H

#include <malloc.h>
#include <stddef.h>
#include <time.h>

/* Monotonic wall-clock seconds (from an arbitrary start). */
static inline double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* This process's CPU seconds (user and system). */
static inline double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Bytes of heap in use (glibc's mallinfo2). */
static inline size_t heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks;
}

#endif
