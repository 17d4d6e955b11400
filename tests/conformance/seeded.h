/* seeded.h - what the seeded random tests share: the xorshift64 draw behind the two
 * differential runners (differential.c, limits_differential.c) and the engine's property
 * test, the scenario line they write an operation into, and the runners' command line and
 * seed loop. Header-only: each test is one program. */
#ifndef SL_TESTS_SEEDED_H
#define SL_TESTS_SEEDED_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The next draw of the xorshift64 generator whose state is *rng (never 0: a seed s
 * starts it at s * 2654435761 + 1). The same seed draws the same sequence everywhere. */
static inline uint64_t rnd(uint64_t *rng)
{
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    return *rng;
}

/* A draw in [0, 1), 53 bits of it. */
static inline double rnd01(uint64_t *rng)
{
    return (double)(rnd(rng) >> 11) / (double)(1ULL << 53);
}

/* A draw in [lo, hi], both included (hi >= lo). */
static inline long rnd_range(uint64_t *rng, long lo, long hi)
{
    return lo + (long)(rnd(rng) % (uint64_t)(hi - lo + 1));
}

/* True once in n draws, about. */
static inline bool one_in(uint64_t *rng, int n)
{
    return rnd(rng) % (uint64_t)n == 0;
}

/* A scenario line being written; what does not fit is cut, the line stays terminated. */
typedef struct line {
    char s[1024];
    size_t n;
} line_t;

static inline void add(line_t *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void add(line_t *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(l->s + l->n, sizeof l->s - l->n, fmt, ap);
    va_end(ap);
    if (k > 0) l->n = l->n + (size_t)k < sizeof l->s ? l->n + (size_t)k : sizeof l->s - 1;
}

/* A differential runner's command line: [--states] --redis HOST:PORT [--seed N]
 * [--seeds K] [--ops N] [--dump DIR]. */
typedef struct seeded_args {
    char *redis;     /* HOST:PORT, required */
    uint64_t seed;   /* the first seed (1) */
    long seeds, ops; /* how many seeds (1), operations per seed (1000) */
    const char *dir; /* where a diverging run is written (".") */
    bool states;     /* --states, first, where the runner takes it */
} seeded_args_t;

/* Reads argv into *a; --states only when `with_states`. Returns 0, or 2 after printing
 * the usage line of `prog` when --redis is missing or a count is out of range. */
static inline int seeded_args(int argc, char **argv, const char *prog, bool with_states,
                              seeded_args_t *a)
{
    *a = (seeded_args_t){.seed = 1, .seeds = 1, .ops = 1000, .dir = "."};
    int i = 1;
    if (with_states && i < argc && strcmp(argv[i], "--states") == 0) a->states = true, i++;
    for (; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--redis") == 0)
            a->redis = argv[i + 1];
        else if (strcmp(argv[i], "--seed") == 0)
            a->seed = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--seeds") == 0)
            a->seeds = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--ops") == 0)
            a->ops = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--dump") == 0)
            a->dir = argv[i + 1];
    }
    if (a->redis && a->seeds >= 1 && a->ops >= 0) return 0;
    fprintf(stderr, "usage: %s %s--redis HOST:PORT [--seed N] [--seeds K] [--ops N] [--dump DIR]\n",
            prog, with_states ? "[--states] " : "");
    return 2;
}

/* Runs run_seed(ud, seed, a) for each of the a->seeds seeds from a->seed (0: every
 * answer matched), then prints how many diverged. Returns 1 when any did, else 0. */
static inline int seeded_run(const seeded_args_t *a,
                             int (*run_seed)(void *ud, uint64_t seed, const seeded_args_t *a),
                             void *ud)
{
    int failures = 0;
    for (long s = 0; s < a->seeds; s++)
        failures += run_seed(ud, a->seed + (uint64_t)s, a);
    printf("%ld seeds from %llu, %ld operations each: %d diverged\n", a->seeds,
           (unsigned long long)a->seed, a->ops, failures);
    return failures ? 1 : 0;
}

#endif
