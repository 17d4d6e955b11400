/* sim_harness.h - what the simulator's unit tests share: assert_near, loading a shipped
 * scenario of scenarios/ and parsing one written in a test. */
#ifndef SL_TEST_SIM_HARNESS_H
#define SL_TEST_SIM_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

#ifndef SL_SOURCE_DIR
#define SL_SOURCE_DIR "."
#endif

/* Doubles equal within `eps`; prints both on failure (cmocka's own compares floats). */
#define assert_near(a, b, eps)                                                                     \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (eps))) fail_msg("%s = %.9f, expected %.9f", #a, a_, b_);           \
    } while (0)

/* Loads scenarios/<name> of the source tree into *sc; fails the test with the loader's
 * message when it does not load. */
static inline void load(const char *name, sl_sim_scenario_t *sc)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/scenarios/%s", SL_SOURCE_DIR, name);
    if (sl_sim_scenario_load(path, sc, err, sizeof err) != 0) fail_msg("%s", err);
}

/* Parses the YAML `text` into *sc; fails the test with the parser's message when it does
 * not parse. */
static inline void parse_or_fail(const char *text, sl_sim_scenario_t *sc)
{
    char err[512];
    if (sl_sim_scenario_parse(text, strlen(text), sc, err, sizeof err) != 0) fail_msg("%s", err);
}

#endif
