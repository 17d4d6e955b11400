/* chain.c - the chain bound: the input a call still has work after must fit the bucket early.
 *
 * The input bucket bound (bound.c) asks when the *last* call can be admitted and adds the
 * least finish of any task. When the bucket and the task graph bind together, most of the
 * input belongs to calls that still have a long chain of work after them (the rest of
 * their task at its unloaded pace, then the tasks that wait on it), and those calls must
 * be admitted long before the end. For every theta >= 0:
 *
 *     makespan >= theta + (B(theta) - C) / (C / 60)
 *
 * where B(theta) is the uncached input of the ideal run's calls whose chain after their
 * admission is at least theta, and C the input TPM (the bucket starts full).
 *
 * Why it holds. Take a call c of the ideal run with chain ch(c): from c's admission, the
 * time its task still needs (every later call's time to first token at its shortest, the
 * edits, the tests, the same draws) plus the longest run of tasks that must follow it one
 * after another (each at that same pace, from its read to its last test). Left out: each
 * call's prefill and output streaming, because a real call may find a warmer cache after
 * a rebuilt context, and `sluice-learned` may end an answer at its cap. A real run makes c
 * too (the same per-agent draws) and then needs at least ch(c) more, so c is admitted by
 * makespan - ch(c). Its calls with ch >= theta are therefore all admitted by makespan -
 * theta, and they bill at least B(theta): per task they are its first calls (a chain only
 * shrinks along a task), each bills the same tail as in the ideal run, the task's first
 * call writes its prefix, and a prefix the ideal run writes again after its cache lapsed
 * is written again in a real run too (its gaps are no shorter) or was written by a broken
 * turn's recovery call just before, whose chain is longer still. A bucket admits at most
 * C + C/60 x t by time t, so B(theta) <= C + C/60 x (makespan - theta).
 *
 * At the smallest theta it is the input bound with the shortest chain for the least
 * finish; at the largest, the longest chain. The maximum over the calls is the term
 * returned here; bound.c reports the larger of it and the tight bound. */
#include <math.h>
#include <stdlib.h>

#include "sim_internal.h"

typedef struct chain_rec {
    double ch_s;
    int64_t tokens;
} chain_rec_t;

static int by_chain_desc(const void *pa, const void *pb)
{
    const chain_rec_t *a = pa, *b = pb;
    return a->ch_s < b->ch_s ? 1 : a->ch_s > b->ch_s ? -1 : 0;
}

/* The longest run of tasks that must follow task `t`, each at its unloaded pace:
 * memo[t] < 0 until computed. The graph has no cycle (scenario.c checks `after`). */
static double after_s(const sim_run_t *run, const double *dur_s, double *memo, int t)
{
    if (memo[t] >= 0) return memo[t];
    double best = 0;
    const sim_task_t *task = &run->tasks[t];
    for (int i = 0; i < task->n_dependents; i++) {
        int d = task->dependents[i];
        double v = dur_s[d] + after_s(run, dur_s, memo, d);
        if (v > best) best = v;
    }
    memo[t] = best;
    return best;
}

double sl__sim_chain_bound_s(const sim_run_t *run, const sim_call_rec_t *calls, size_t n_calls,
                             int64_t input_tpm)
{
    if (input_tpm <= 0 || run->n_tasks <= 0) return -1;
    size_t nt = (size_t)run->n_tasks;
    double *stream_s = calloc(nt, sizeof *stream_s); /* per task: sum of its calls' */
    double *dur_s = calloc(nt, sizeof *dur_s);
    double *memo = malloc(nt * sizeof *memo);
    double *seen_s = calloc(nt, sizeof *seen_s); /* streaming of its calls so far */
    chain_rec_t *recs = calloc(n_calls ? n_calls : 1, sizeof *recs);
    double bound = -1;
    if (!stream_s || !dur_s || !memo || !seen_s || !recs) goto done;
    for (size_t i = 0; i < n_calls; i++)
        stream_s[calls[i].task] += calls[i].stream_s;
    for (size_t t = 0; t < nt; t++) {
        const sim_task_t *task = &run->tasks[t];
        dur_s[t] = task->done_s - task->ready_s - stream_s[t];
        memo[t] = -1;
    }
    /* Calls come in admission order: a call's own streaming and its task's later calls'
     * are the task's total less what its earlier calls streamed. */
    for (size_t i = 0; i < n_calls; i++) {
        int t = calls[i].task;
        double rest_stream_s = stream_s[t] - seen_s[t];
        seen_s[t] += calls[i].stream_s;
        recs[i].ch_s = run->tasks[t].done_s - calls[i].sent_s - rest_stream_s +
                       after_s(run, dur_s, memo, t);
        recs[i].tokens = calls[i].tokens;
    }
    qsort(recs, n_calls, sizeof *recs, by_chain_desc);
    double rate_per_s = (double)input_tpm / 60.0, cum = 0;
    bound = 0;
    for (size_t i = 0; i < n_calls; i++) {
        cum += (double)recs[i].tokens;
        double over = cum - (double)input_tpm; /* the bucket starts full */
        double v = recs[i].ch_s + (over > 0 ? over / rate_per_s : 0);
        if (v > bound) bound = v;
    }
done:
    free(stream_s);
    free(dur_s);
    free(memo);
    free(seen_s);
    free(recs);
    return bound;
}
