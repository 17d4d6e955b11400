/* team.c - teams' weights, and each pool's team queues (the outer level of queue.c).
 *
 * A team's weight is its share of a pool against the other backlogged teams; an
 * agent outside every team is in the team "default" (weight 1 unless configured).
 * Nothing is reserved for a team: its queue exists once one of its agents asked the
 * pool, and an idle team's queue is empty, so its share goes to the others. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sl__team_t *team_get(sl_engine_t *e, const char *name, bool create)
{
    sl__team_t *t = sl__strmap_get(&e->teams, name);
    if (t || !create) return t;
    t = sl__strmap_make(&e->teams, name, sizeof *t, offsetof(sl__team_t, name));
    if (t) t->weight = 1.0;
    return t;
}

int sl_engine_set_team_weight(sl_engine_t *e, const char *team, double weight)
{
    if (!team || !sl__valid_name(team, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "team \"%.140s\" must be 1-128 of [A-Za-z0-9._:-]",
                        team ? team : "(null)");
    if (!isfinite(weight) || weight < SL__TEAM_WEIGHT_MIN || weight > SL__TEAM_WEIGHT_MAX)
        return sl__fail(e, SL_EINVAL, "team \"%s\": weight %g must be a finite number in [%g, %g]",
                        team, weight, SL__TEAM_WEIGHT_MIN, SL__TEAM_WEIGHT_MAX);
    sl__team_t *t = team_get(e, team, true);
    if (!t) return sl__fail(e, SL_ENOMEM, "out of memory setting the weight of team \"%s\"", team);
    t->weight = weight;
    /* Queued tickets' outer tags moved: a head that fits may lead now. */
    for (size_t i = 0; i < e->n_pools; i++)
        sl__pool_drain(e, e->pools[i], e->now);
    return SL_OK;
}

double sl_engine_team_weight(const sl_engine_t *e, const char *team)
{
    const sl__team_t *t = team ? sl__strmap_get(&e->teams, team) : NULL;
    return t ? t->weight : 1.0;
}

sl__pteam_t *sl__pteam_get(sl_engine_t *e, sl__pool_t *p, const char *name, bool create)
{
    for (size_t i = 0; i < p->n_teams; i++)
        if (strcmp(p->teams[i]->team->name, name) == 0) return p->teams[i];
    if (!create) return NULL;
    const sl__team_t *t = team_get(e, name, true);
    if (!t) return NULL;
    sl__pteam_t **grown = realloc(p->teams, (p->n_teams + 1) * sizeof *grown);
    if (!grown) return NULL;
    p->teams = grown;
    sl__pteam_t *pt = calloc(1, sizeof *pt);
    if (!pt) return NULL;
    pt->team = t;
    pt->order = (uint32_t)p->n_teams;
    p->teams[p->n_teams++] = pt;
    return pt;
}

void sl__teams_free_pool(sl__pool_t *p)
{
    for (size_t i = 0; i < p->n_teams; i++)
        free(p->teams[i]);
    free(p->teams);
    p->teams = NULL;
    p->n_teams = 0;
}
