/* fuzz_scenario.c - libFuzzer target for the simulator's scenario parser (sl_sim_scenario_parse).
 *
 * Beyond memory errors and leaks (a key given twice, a list cut short), every answer is
 * checked against the parser's contract (docs/sim.md): a refusal says why, in a message
 * that is not empty; an accepted scenario has at least one group, unique group names,
 * `after` naming earlier groups only, every count and weight within its documented
 * bounds, and one weight per team (the unnamed ones 1).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_scenario: accepted a scenario with %s\n", what);
        abort();
    }
}

static void check_accepted(const sl_sim_scenario_t *sc)
{
    check(sc->n_groups > 0 && sc->groups, "no group");
    check(sc->teams >= 1 && sc->teams <= 10000, "teams out of [1, 10000]");
    check(isfinite(sc->duration_s) && sc->duration_s >= 1, "a bad duration_s");
    check(sc->replan_min <= sc->replan_max, "replan_max below replan_min");
    check(sc->n_team_weights <= sc->teams, "more weights than teams");
    for (int k = 0; sc->team_weight && k < sc->teams; k++)
        check(isfinite(sc->team_weight[k]) && sc->team_weight[k] >= 0.001 &&
                  sc->team_weight[k] <= 1000,
              "a team weight out of [0.001, 1000]");
    for (int i = 0; i < sc->n_groups; i++) {
        const sl_sim_group_t *g = &sc->groups[i];
        check(g->name[0] && memchr(g->name, '\0', sizeof g->name), "a group without a name");
        check(g->count >= 0 && g->count <= 100000, "a count out of range");
        check(g->output_tokens <= g->max_tokens, "output_tokens above max_tokens");
        check(g->n_after >= 0 && g->n_after <= SL_SIM_AFTER_MAX, "too many `after`");
        for (int j = 0; j < i; j++)
            check(strcmp(sc->groups[j].name, g->name) != 0, "a group name used twice");
        for (int a = 0; a < g->n_after; a++) {
            bool earlier = false;
            for (int j = 0; j < i && !earlier; j++)
                earlier = !strcmp(sc->groups[j].name, g->after[a]);
            check(earlier, "`after` naming no earlier group");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_sim_scenario_t sc;
    char err[256];
    err[0] = '\0';
    if (sl_sim_scenario_parse((const char *)data, size, &sc, err, sizeof err) == 0) {
        check_accepted(&sc);
        sl_sim_scenario_free(&sc);
    } else if (!err[0]) {
        fprintf(stderr, "fuzz_scenario: a refusal without a message\n");
        abort();
    }
    return 0;
}
