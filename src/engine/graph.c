/* graph.c - the task graph: who waits on whom, so a request's weight follows the critical path.
 *
 * A planner whose output unblocks six workers is worth more per token than a leaf:
 * if both wait 30 s, the planner's wait delays seven agents. A lease naming a task
 * gets unblocks = the number of tasks in state waiting that list it in depends_on.
 *
 * Its depth (the remaining chain) orders the tasks the working set has not admitted yet
 * (admit.c): 1 + the longest remaining chain among those waiting dependants, so a task
 * that four more must follow one after another starts before a leaf. Counted in tasks,
 * not in estimated time: measured in `sluice sim` (docs/sim.md), the count did better
 * than each task's expected duration from the scenario itself. Computed for the whole
 * graph at once, by rounds of relaxation over its edges (round k knows every chain of
 * at most k tasks; a value that never stops growing is a cycle, capped), and kept until
 * the graph is written again: O(rounds x edges) per write, nothing per request. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static void task_free(sl__task_t *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n_deps; i++)
        free(t->deps[i]);
    free(t->deps);
    free(t->id);
    free(t);
}

int sl_engine_task_put(sl_engine_t *e, const char *id, const char *role,
                       const char *const *depends_on, size_t n_depends, sl_task_state_t state)
{
    if (!id || !sl__valid_name(id, SL__NAME_MAX))
        return sl__fail(e, SL_EINVAL, "task id \"%.140s\" must be 1-128 of [A-Za-z0-9._:-]",
                        id ? id : "(null)");
    if (role && !sl__role_find(e, role))
        return sl__fail(e, SL_EINVAL, "role \"%.64s\" is not configured", role);
    if (state != SL_TASK_WAITING && state != SL_TASK_RUNNING && state != SL_TASK_DONE)
        return sl__fail(e, SL_EINVAL, "state %d must be waiting, running or done", (int)state);
    if (n_depends > 1024)
        return sl__fail(e, SL_EINVAL, "depends_on has %zu entries; at most 1024", n_depends);
    if (n_depends && !depends_on) return sl__fail(e, SL_EINVAL, "depends_on missing");
    for (size_t i = 0; i < n_depends; i++) {
        if (!depends_on[i] || !sl__valid_name(depends_on[i], SL__NAME_MAX))
            return sl__fail(e, SL_EINVAL, "depends_on[%zu] \"%.140s\" is not a valid task id", i,
                            depends_on[i] ? depends_on[i] : "(null)");
        if (strcmp(depends_on[i], id) == 0)
            return sl__fail(e, SL_EINVAL, "depends_on[%zu]: task \"%s\" cannot depend on itself", i,
                            id);
    }
    sl__task_t *t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    t->id = sl__dup_str(id);
    t->deps = n_depends ? calloc(n_depends, sizeof *t->deps) : NULL;
    if (!t->id || (n_depends && !t->deps)) goto nomem;
    for (size_t i = 0; i < n_depends; i++) {
        t->deps[i] = sl__dup_str(depends_on[i]);
        if (!t->deps[i]) goto nomem;
        t->n_deps = i + 1;
    }
    memcpy(t->role, role ? role : "worker", strlen(role ? role : "worker") + 1);
    t->state = state;
    if (sl__strmap_reserve(&e->tasks, 1) != 0) goto nomem;
    sl__task_t *old = sl__strmap_del(&e->tasks, id);
    task_free(old);
    sl__strmap_put(&e->tasks, t->id, t);
    e->graph_gen++;
    return SL_OK;
nomem:
    task_free(t);
    return sl__fail(e, SL_ENOMEM, "out of memory storing task \"%s\"", id);
}

int sl_engine_task_delete(sl_engine_t *e, const char *id)
{
    sl__task_t *t = id ? sl__strmap_del(&e->tasks, id) : NULL;
    if (!t) return sl__fail(e, SL_ENOTFOUND, "task \"%.140s\" not found", id ? id : "(null)");
    task_free(t);
    e->graph_gen++;
    return SL_OK;
}

int64_t sl_engine_task_unblocks(const sl_engine_t *e, const char *id)
{
    int64_t n = 0;
    for (size_t i = 0; i < e->tasks.cap; i++) {
        if (!e->tasks.slots[i].hash) continue;
        const sl__task_t *t = e->tasks.slots[i].val;
        if (t->state != SL_TASK_WAITING) continue;
        for (size_t j = 0; j < t->n_deps; j++) {
            if (strcmp(t->deps[j], id) == 0) {
                n++;
                break;
            }
        }
    }
    return n;
}

/* One round: every waiting task raises each of its dependencies to 1 + its own depth of the
 * round before. Returns whether some depth grew. */
static bool depth_round(sl_engine_t *e)
{
    for (size_t i = 0; i < e->tasks.cap; i++)
        if (e->tasks.slots[i].hash) {
            sl__task_t *t = e->tasks.slots[i].val;
            t->depth_next = t->depth;
        }
    for (size_t i = 0; i < e->tasks.cap; i++) {
        if (!e->tasks.slots[i].hash) continue;
        const sl__task_t *d = e->tasks.slots[i].val;
        if (d->state != SL_TASK_WAITING) continue;
        int64_t via = d->depth + 1 > SL__GRAPH_DEPTH_MAX ? SL__GRAPH_DEPTH_MAX : d->depth + 1;
        for (size_t j = 0; j < d->n_deps; j++) {
            sl__task_t *t = sl__strmap_get(&e->tasks, d->deps[j]);
            if (t && t->depth_next < via) t->depth_next = via;
        }
    }
    bool grew = false;
    for (size_t i = 0; i < e->tasks.cap; i++)
        if (e->tasks.slots[i].hash) {
            sl__task_t *t = e->tasks.slots[i].val;
            grew |= t->depth_next != t->depth;
            t->depth = t->depth_next;
        }
    return grew;
}

int64_t sl_engine_task_depth(sl_engine_t *e, const char *id)
{
    const sl__task_t *task = id ? sl__strmap_get(&e->tasks, id) : NULL;
    if (!task) return -1;
    if (e->depth_gen != e->graph_gen) {
        for (size_t i = 0; i < e->tasks.cap; i++)
            if (e->tasks.slots[i].hash) ((sl__task_t *)e->tasks.slots[i].val)->depth = 1;
        for (int round = 0; round < SL__GRAPH_DEPTH_MAX && depth_round(e); round++) {}
        e->depth_gen = e->graph_gen;
    }
    return task->depth;
}

void sl_engine_task_foreach(const sl_engine_t *e, void (*fn)(const sl_task_info_t *t, void *ud),
                            void *ud)
{
    for (size_t i = 0; i < e->tasks.cap; i++) {
        if (!e->tasks.slots[i].hash) continue;
        const sl__task_t *t = e->tasks.slots[i].val;
        sl_task_info_t info = {
            .id = t->id,
            .role = t->role,
            .state = t->state,
            .depends_on = (const char *const *)t->deps,
            .n_depends = t->n_deps,
            .unblocks = sl_engine_task_unblocks(e, t->id),
        };
        fn(&info, ud);
    }
}
