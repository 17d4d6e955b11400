/* scale.c - a scenario scaled without editing its YAML: the provider's limits times a
 * factor, the fleet's demand times a whole number, and a duration to match
 * (`sluice sim --limits-scale F --demand-scale N --duration S`, docs/sim.md).
 *
 * Demand is scaled by repeating the fleet as teams: N times as many teams, each the
 * scenario's own fleet with its own task graph (a team's feature agents wait on its own
 * planner). That keeps every chain of the graph as it is, so the critical path stays
 * what it was and only the load on the key grows, which is what a sweep of "how does
 * the fleet do when the quota binds" needs. More tasks per agent would only lengthen
 * every chain (the load per second would stay the same), and more agents per group
 * would make every feature agent wait on N planners.
 */
#include <math.h>
#include <stdlib.h>

#include "sim.h"

static int64_t scaled(int64_t limit, double f)
{
    if (limit <= 0) return limit; /* 0: unlimited stays unlimited */
    int64_t v = (int64_t)llround((double)limit * f);
    return v < 1 ? 1 : v;
}

int sl_sim_scenario_scale(sl_sim_scenario_t *sc, double limits_scale, int demand_scale,
                          double duration_s, char *err, size_t errlen)
{
    if (!(isfinite(limits_scale) && limits_scale >= 1e-4 && limits_scale <= 1e4)) {
        snprintf(err, errlen, "--limits-scale: %g is not a number in [0.0001, 10000]",
                 limits_scale);
        return -1;
    }
    if (demand_scale < 1 || demand_scale > 1000) {
        snprintf(err, errlen, "--demand-scale: %d is not an integer in [1, 1000]", demand_scale);
        return -1;
    }
    if (duration_s != 0 && !(isfinite(duration_s) && duration_s >= 1 && duration_s <= 1e9)) {
        snprintf(err, errlen, "--duration: %g is not a number of seconds in [1, 1e9]", duration_s);
        return -1;
    }
    if ((int64_t)sc->teams * demand_scale > 100000) {
        snprintf(err, errlen, "--demand-scale: %d x %d teams is above 100000 teams", demand_scale,
                 sc->teams);
        return -1;
    }
    int teams = sc->teams * demand_scale;
    if (sc->team_weight && demand_scale > 1) {
        /* Copy k of the fleet gives its teams the weights the scenario gave them. */
        double *w = malloc((size_t)teams * sizeof *w);
        if (!w) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (int k = 0; k < teams; k++) w[k] = sc->team_weight[k % sc->teams];
        free(sc->team_weight);
        sc->team_weight = w;
        sc->n_team_weights = teams;
    }
    sl_provider_config_t *p = &sc->provider;
    p->input_tpm = scaled(p->input_tpm, limits_scale);
    p->output_tpm = scaled(p->output_tpm, limits_scale);
    p->rpm = scaled(p->rpm, limits_scale);
    p->tokens_tpm = scaled(p->tokens_tpm, limits_scale);
    p->outside_rpm *= limits_scale; /* the outside user keeps its share of the requests */
    for (int k = 0; k < sc->n_keys; k++) {
        sl_sim_key_t *key = &sc->keys[k];
        key->input_tpm = scaled(key->input_tpm, limits_scale);
        key->output_tpm = scaled(key->output_tpm, limits_scale);
        key->rpm = scaled(key->rpm, limits_scale);
        key->tokens_tpm = scaled(key->tokens_tpm, limits_scale);
    }
    /* The same work on a key F times smaller, or N times the work on the same key, takes
     * about N / F times as long: give the run that much time unless told otherwise. */
    double stretch = (double)demand_scale / limits_scale;
    sc->teams = teams;
    sc->limits_scale *= limits_scale;
    sc->demand_scale *= demand_scale;
    sc->duration_s = duration_s > 0 ? duration_s
                                    : sc->duration_s * (stretch > 1 ? stretch : 1);
    return 0;
}
