/* teams.c - teams in the simulator: each team's share of what is served while every
 * team is backlogged, against its weight, and each team's p95 task time.
 *
 * A team is backlogged while one of its agents waits to send a call (PH_WANT, or
 * PH_RETRY: sleeping after a 429). While
 * every team is, each team's share of the tokens the provider admits (uncached input +
 * output: what its limits count) should follow its weight under the sluice strategies,
 * which put the scenario's teams and team_weights in the engine's hierarchical fair
 * queue; the other strategies know nothing of teams, so their shares follow the
 * agents' numbers and rhythms. Shares are measured at admission, the moment a call
 * takes its tokens from the provider's buckets. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

static double weight_of(const sl_sim_scenario_t *sc, int team)
{
    return sc->team_weight ? sc->team_weight[team] : 1.0;
}

int sl__sim_teams_init(sim_run_t *run)
{
    run->all_since = -1;
    run->teams_backlogged = 0;
    if (run->sc->teams < 2) return 0;
    run->team_waiting = calloc((size_t)run->sc->teams, sizeof *run->team_waiting);
    run->res->teams = calloc((size_t)run->sc->teams, sizeof *run->res->teams);
    if (!run->team_waiting || !run->res->teams) return -1;
    run->res->n_teams = run->sc->teams;
    return 0;
}

void sl__sim_teams_free(sim_run_t *run)
{
    free(run->team_waiting);
    run->team_waiting = NULL;
}

bool sl__sim_teams_all_backlogged(const sim_run_t *run)
{
    return run->team_waiting && run->teams_backlogged == run->sc->teams;
}

void sl__sim_teams_waiting(sim_run_t *run, const sim_agent_t *a, int delta)
{
    if (!run->team_waiting) return;
    bool was_all = sl__sim_teams_all_backlogged(run);
    int *w = &run->team_waiting[a->team];
    if (*w == 0 && delta > 0) run->teams_backlogged++;
    *w += delta;
    if (*w == 0 && delta < 0) run->teams_backlogged--;
    bool all = sl__sim_teams_all_backlogged(run);
    if (all && !was_all) run->all_since = run->now_s;
    if (!all && was_all) {
        run->res->all_backlogged_s += run->now_s - run->all_since;
        run->all_since = -1;
    }
}

void sl__sim_teams_served(sim_run_t *run, const sim_agent_t *a, int64_t tokens, bool all_backlogged)
{
    if (!run->res->teams || !all_backlogged) return;
    run->res->teams[a->team].tokens_backlogged += tokens;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int sl__sim_teams_finish(sim_run_t *run)
{
    sl_sim_result_t *res = run->res;
    if (!res->teams) return 0;
    if (run->all_since >= 0) res->all_backlogged_s += run->now_s - run->all_since;
    double *times = malloc((size_t)(run->n_tasks ? run->n_tasks : 1) * sizeof *times);
    if (!times) return -1;
    int64_t total = 0;
    double weights = 0;
    for (int k = 0; k < res->n_teams; k++) {
        total += res->teams[k].tokens_backlogged;
        weights += weight_of(run->sc, k);
    }
    for (int k = 0; k < res->n_teams; k++) {
        sl_sim_team_stat_t *t = &res->teams[k];
        t->weight = weight_of(run->sc, k);
        t->weight_share = t->weight / weights;
        t->share = total ? (double)t->tokens_backlogged / (double)total : 0;
        int n = 0;
        for (int i = 0; i < run->n_tasks; i++) {
            const sim_task_t *task = &run->tasks[i];
            if (task->state == SL_TASK_DONE && run->agents[task->agent].team == k)
                times[n++] = task->done_s - task->ready_s;
        }
        qsort(times, (size_t)n, sizeof *times, cmp_double);
        int rank = (int)ceil(0.95 * n); /* nearest rank, as the fleet's p95 */
        t->p95_task_s = n ? times[(rank < 1 ? 1 : rank) - 1] : 0;
        t->tasks_done = n;
    }
    free(times);
    return 0;
}

/* The team of the highest p95 task time, and the mean p95 of the others. */
static int worst_team(const sl_sim_result_t *s, double *others_p95_s)
{
    int worst = 0;
    for (int k = 1; k < s->n_teams; k++)
        if (s->teams[k].p95_task_s > s->teams[worst].p95_task_s) worst = k;
    double sum = 0;
    for (int k = 0; k < s->n_teams; k++)
        if (k != worst) sum += s->teams[k].p95_task_s;
    *others_p95_s = s->n_teams > 1 ? sum / (s->n_teams - 1) : 0;
    return worst;
}

void sl_sim_report_teams_table(FILE *out, const sl_sim_scenario_t *sc, const sl_sim_result_t *r,
                               size_t n)
{
    if (sc->teams < 2 || n == 0 || !r[0].teams) return;
    fprintf(out, "\nteams: share of tokens served while all %d teams were backlogged "
                 "(uncached input + output admitted)\n", sc->teams);
    fprintf(out, "%-13s %10s", "strategy", "all backl.");
    for (int k = 0; k < r[0].n_teams; k++) {
        char h[16];
        snprintf(h, sizeof h, "t%d", k);
        fprintf(out, " %6s", h);
    }
    fprintf(out, " %10s %10s\n", "worst p95", "others p95");
    fprintf(out, "%-13s %10s", "weights", "");
    for (int k = 0; k < r[0].n_teams; k++) fprintf(out, " %5.1f%%", 100.0 * r[0].teams[k].weight_share);
    fprintf(out, "\n");
    for (size_t i = 0; i < n; i++) {
        const sl_sim_result_t *s = &r[i];
        if (!s->teams) continue;
        fprintf(out, "%-13s %9.0fs", s->strategy, s->all_backlogged_s);
        for (int k = 0; k < s->n_teams; k++) fprintf(out, " %5.1f%%", 100.0 * s->teams[k].share);
        double others;
        int worst = worst_team(s, &others);
        char w[32];
        snprintf(w, sizeof w, "t%d %.0fs", worst, s->teams[worst].p95_task_s);
        fprintf(out, " %10s %9.0fs\n", w, others);
    }
    fprintf(out, "weights: each team's weight over the sum (the share it is owed while all are\n"
                 "backlogged). worst p95: the team of the highest p95 task time; others p95: the\n"
                 "mean p95 of the other teams.\n");
}

void sl_sim_report_teams_json(FILE *out, const sl_sim_result_t *s)
{
    if (!s->teams) return;
    fprintf(out, ",\"all_backlogged_s\":%.3f,\"teams\":[", s->all_backlogged_s);
    for (int k = 0; k < s->n_teams; k++) {
        const sl_sim_team_stat_t *t = &s->teams[k];
        fprintf(out,
                "%s{\"team\":\"t%d\",\"weight\":%.3f,\"weight_share\":%.6f,"
                "\"tokens_backlogged\":%lld,\"share\":%.6f,\"p95_task_s\":%.3f,"
                "\"tasks_done\":%lld}",
                k ? "," : "", k, t->weight, t->weight_share, (long long)t->tokens_backlogged,
                t->share, t->p95_task_s, (long long)t->tasks_done);
    }
    double others;
    int worst = worst_team(s, &others);
    fprintf(out, "],\"worst_team\":\"t%d\",\"worst_team_p95_s\":%.3f,\"other_teams_p95_s\":%.3f",
            worst, s->teams[worst].p95_task_s, others);
}
