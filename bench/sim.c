/* bench_sim: times the simulator on scenarios/scale-200.yaml (200 agents, two
 * simulated hours, every strategy) and prints the wall and CPU time. Goal: under
 * 10 s of wall time on one core (the simulator is single-threaded). */
#include <stdio.h>
#include <time.h>

#include "sim.h"

#ifndef SL_SOURCE_DIR
#define SL_SOURCE_DIR "."
#endif

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : SL_SOURCE_DIR "/scenarios/scale-200.yaml";
    sl_sim_scenario_t sc;
    char err[512];
    if (sl_sim_scenario_load(path, &sc, err, sizeof err) != 0) {
        fprintf(stderr, "bench_sim: %s\n", err);
        return 1;
    }
    sc.duration_s = 7200; /* two simulated hours, whatever the file says */
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    int64_t requests = 0;
    for (size_t i = 0; i < sl_sim_strategy_count(); i++) {
        sl_sim_result_t r;
        double t0 = clock_s(CLOCK_MONOTONIC);
        if (sl_sim_run(&sc, sl_sim_strategy_name(i), sc.seed, NULL, &r, err, sizeof err) != 0) {
            fprintf(stderr, "bench_sim: %s\n", err);
            return 1;
        }
        printf("  %-13s %8lld calls  %6.3f s wall  (makespan %.0f s, %lld/%lld tasks)\n",
               r.strategy, (long long)r.requests, clock_s(CLOCK_MONOTONIC) - t0, r.makespan_s,
               (long long)r.tasks_done, (long long)r.tasks_total);
        requests += r.requests;
        sl_sim_result_free(&r);
    }
    double wall = clock_s(CLOCK_MONOTONIC) - w0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("bench_sim: %s, %zu strategies, %lld calls: %.3f s wall, %.3f s CPU (goal < 10 s)\n",
           sc.name, sl_sim_strategy_count(), (long long)requests, wall, cpu);
    sl_sim_scenario_free(&sc);
    return 0;
}
