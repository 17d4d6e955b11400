/* fleet.c - the fleet's four numbers, live: 429 rate, tokens per finished task, task time,
 * critical-path wait.
 *
 * sluiced learns the task graph from its writes (PUT/DELETE /v1/tasks/{task}) and which
 * lease or ticket works for which task from the lease requests that name a `task`; the
 * settles and the tickets' ends come as engine events. From those:
 *
 * - 429 rate: upstream 429s reported in settles over leases settled, both counted in
 *   the sliding window fleet.window_s (slidewin.c);
 * - tokens per finished task: input + output tokens settled on leases that named a
 *   task, summed over the tasks that reached `done`, over the number of such tasks;
 * - task time: from a task's write as `running` to its write as `done`, p50 and p95 over
 *   the latest 1024 finished tasks;
 * - critical-path wait: the time tasks in state `waiting` spent while one of the tasks
 *   they depend on had a lease request queued (a ticket in a pool's queue). Each waiting
 *   task counts on its own: two tasks waiting on one queued upstream accrue twice.
 *
 * The mirror is also brought in line with the backend's graph every 10 s
 * (sl__fleet_sync): with several sluiced replicas on one Redis, tasks written through
 * another replica appear, change state and go within 10 s, and their times are to that
 * resolution. Which lease works for which task each replica knows only for the requests
 * it served itself (the settles and 429s are every replica's).
 */
#include "fleet.h"
#include "server.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define TASK_TIMES 1024

typedef struct task_watch {
    sl_task_state_t state;
    char **deps;
    size_t n_deps;
    double running_at; /* when it was written running; 0: not running */
    int64_t tokens;    /* settled on its leases */
    uint32_t queued;   /* its tickets in a queue now */
    bool blocked;      /* waiting while an upstream task has a ticket queued */
    double wait_s;     /* critical-path wait accrued */
} task_watch_t;

struct sl_fleet {
    sl_namemap_t tasks;     /* id -> task_watch_t */
    sl_idmap_t ticket_task; /* ticket -> strdup'd task id, while queued */
    sl_idmap_t lease_task;  /* lease -> strdup'd task id, until it ends */
    sl_window_t settled, got_429;
    uint64_t settled_total, got_429_total;
    double task_s[TASK_TIMES];
    size_t n_task_s, next_task_s;
    uint64_t finished_total;
    int64_t finished_tokens;
    double wait_total_s, accrued_at_s;
    size_t n_blocked;
    bool synced; /* the backend's graph was read once */
};

/* This file's part of the fleet's state (fleet.h, sl_fleet_house_t). */
SL_FLEET_PART(sl_fleet_t, fleet)

/* ---- critical-path wait ----------------------------------------------------------- */

typedef struct accrue_ctx {
    sl_fleet_t *f;
    double dt;
    bool recheck;
} accrue_ctx_t;

static void accrue_one(const char *key, void *val, void *ud)
{
    accrue_ctx_t *c = ud;
    task_watch_t *t = val;
    (void)key;
    if (t->blocked) {
        t->wait_s += c->dt;
        c->f->wait_total_s += c->dt;
    }
    if (!c->recheck) return;
    bool blocked = false;
    for (size_t i = 0; t->state == SL_TASK_WAITING && !blocked && i < t->n_deps; i++) {
        const task_watch_t *up = sl__namemap_get(&c->f->tasks, t->deps[i]);
        blocked = up && up->queued > 0;
    }
    if (blocked != t->blocked) c->f->n_blocked += blocked ? 1 : (size_t)-1;
    t->blocked = blocked;
}

/* Adds the wait since the last call to every blocked task; with `recheck`, then
 * re-decides which tasks are blocked (after a change of queued tickets or of the graph). */
static void accrue(sl_fleet_t *f, double now_s, bool recheck)
{
    double dt = f->accrued_at_s > 0 && now_s > f->accrued_at_s ? now_s - f->accrued_at_s : 0;
    f->accrued_at_s = now_s;
    if (!f->n_blocked && !recheck) return;
    accrue_ctx_t c = {f, dt, recheck};
    sl__namemap_foreach(&f->tasks, accrue_one, &c);
}

static void ticket_ended(sl_fleet_t *f, uint64_t ticket, uint64_t lease, double now_s)
{
    char *task = sl__idmap_del(&f->ticket_task, ticket);
    if (!task) return;
    task_watch_t *t = sl__namemap_get(&f->tasks, task);
    if (t && t->queued > 0) t->queued--;
    if (lease && sl__idmap_put(&f->lease_task, lease, task) == 0)
        task = NULL; /* the lease now holds the name */
    free(task);
    if (t) accrue(f, now_s, true);
}

/* ---- events, decisions, task writes ----------------------------------------------- */

static void settled(sl_fleet_t *f, const sl_event_t *ev, double win)
{
    sl__window_add(&f->settled, win, ev->now_s, 1);
    f->settled_total++;
    char *task = sl__idmap_del(&f->lease_task, ev->lease);
    if (!task) return;
    task_watch_t *t = sl__namemap_get(&f->tasks, task);
    int64_t used = ev->input_tokens + ev->output_tokens;
    if (t) {
        t->tokens += used;
        if (t->state == SL_TASK_DONE) f->finished_tokens += used;
    }
    free(task);
}

void sl__fleet_on_event(sl_server_t *srv, const sl_event_t *ev)
{
    sl_fleet_t *f = fleet_of(srv);
    if (!f) return;
    double win = srv->config.fleet.window_s;
    switch (ev->kind) {
    case SL_EV_SETTLED:
        settled(f, ev, win);
        break;
    case SL_EV_UPSTREAM_429:
        sl__window_add(&f->got_429, win, ev->now_s, 1);
        f->got_429_total++;
        break;
    case SL_EV_GRANTED:
        if (ev->ticket) ticket_ended(f, ev->ticket, ev->lease, ev->now_s);
        break;
    case SL_EV_TICKET_CANCELLED:
    case SL_EV_TICKET_EXPIRED:
    case SL_EV_TICKET_REJECTED:
        ticket_ended(f, ev->ticket, 0, ev->now_s);
        break;
    case SL_EV_CANCELLED:
    case SL_EV_REAPED:
    case SL_EV_UNCLAIMED:
        free(sl__idmap_del(&f->lease_task, ev->lease));
        break;
    default:
        break;
    }
}

void sl__fleet_on_decision(sl_server_t *srv, const char *task, const sl_decision_t *d)
{
    sl_fleet_t *f = task ? fleet_of(srv) : NULL;
    if (!f || d->replayed) return;
    uint64_t id = d->status == SL_GRANTED ? d->lease : d->status == SL_QUEUED ? d->ticket : 0;
    char *name = id ? strdup(task) : NULL;
    if (!name) return;
    sl_idmap_t *map = d->status == SL_GRANTED ? &f->lease_task : &f->ticket_task;
    free(sl__idmap_del(map, id));
    if (sl__idmap_put(map, id, name) < 0) {
        free(name);
        return;
    }
    task_watch_t *t = sl__namemap_get(&f->tasks, task);
    if (d->status == SL_QUEUED && t) {
        t->queued++;
        accrue(f, sl_backend_now(srv->backend), true);
    }
}

static void task_free(task_watch_t *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n_deps; i++)
        free(t->deps[i]);
    free(t->deps);
    free(t);
}

static void finished(sl_fleet_t *f, task_watch_t *t, double now_s)
{
    f->finished_total++;
    f->finished_tokens += t->tokens;
    if (t->running_at > 0) {
        f->task_s[f->next_task_s] = now_s - t->running_at;
        f->next_task_s = (f->next_task_s + 1) % TASK_TIMES;
        if (f->n_task_s < TASK_TIMES) f->n_task_s++;
    }
    t->running_at = 0;
}

void sl__fleet_on_task_write(sl_server_t *srv, const char *id, bool put, sl_task_state_t state,
                             const char *const *deps, size_t n_deps)
{
    sl_fleet_t *f = fleet_of(srv);
    if (!f) return;
    double now = sl_backend_now(srv->backend);
    accrue(f, now, false);
    task_watch_t *t = sl__namemap_get(&f->tasks, id);
    if (!put) {
        if (t && t->blocked) f->n_blocked--;
        task_free(sl__namemap_del(&f->tasks, id));
        accrue(f, now, true);
        return;
    }
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t || !sl__namemap_put(&f->tasks, id, t)) {
            free(t);
            return;
        }
    }
    char **copy = n_deps ? calloc(n_deps, sizeof(*copy)) : NULL;
    size_t n = 0;
    for (; copy && n < n_deps && (copy[n] = strdup(deps[n])); n++)
        ;
    for (size_t i = 0; i < t->n_deps; i++)
        free(t->deps[i]);
    free(t->deps);
    t->deps = copy;
    t->n_deps = n;
    sl_task_state_t was = t->state;
    t->state = state;
    if (state == SL_TASK_RUNNING && t->running_at <= 0) t->running_at = now;
    if (state == SL_TASK_DONE && was != SL_TASK_DONE) finished(f, t, now);
    if (state != SL_TASK_DONE && was == SL_TASK_DONE) { /* reopened: no longer finished */
        f->finished_total--;
        f->finished_tokens -= t->tokens;
    }
    if (state == SL_TASK_WAITING) t->running_at = 0;
    accrue(f, now, true);
}

/* ---- the backend's graph ---------------------------------------------------------- */

static bool same_deps(const task_watch_t *w, const sl_task_info_t *t)
{
    if (w->n_deps != t->n_depends) return false;
    for (size_t i = 0; i < w->n_deps; i++)
        if (strcmp(w->deps[i], t->depends_on[i]) != 0) return false;
    return true;
}

typedef struct gone_ctx {
    const sl_namemap_t *graph;
    char **names;
    size_t n;
} gone_ctx_t;

static void note_gone(const char *key, void *val, void *ud)
{
    gone_ctx_t *c = ud;
    (void)val;
    if (!sl__namemap_get(c->graph, key) && (c->names[c->n] = strdup(key))) c->n++;
}

static void on_graph(int rc, const sl_task_info_t *t, size_t n, void *ud)
{
    sl_server_t *srv = ud;
    sl_fleet_t *f = rc == SL_OK ? fleet_of(srv) : NULL;
    if (!f) return;
    sl_namemap_t graph = {0};
    static int present;
    for (size_t i = 0; i < n; i++) {
        task_watch_t *w = sl__namemap_get(&f->tasks, t[i].id);
        sl__namemap_put(&graph, t[i].id, &present);
        if (w && w->state == t[i].state && same_deps(w, &t[i])) continue;
        sl__fleet_on_task_write(srv, t[i].id, true, t[i].state, t[i].depends_on, t[i].n_depends);
        /* A task first seen running at the first sync was started before this process:
         * its start is not known, so it gives no task time. */
        w = sl__namemap_get(&f->tasks, t[i].id);
        if (w && !f->synced && t[i].state == SL_TASK_RUNNING) w->running_at = 0;
    }
    gone_ctx_t c = {&graph, calloc(f->tasks.count + 1, sizeof(char *)), 0};
    if (c.names) sl__namemap_foreach(&f->tasks, note_gone, &c);
    for (size_t i = 0; i < c.n; i++) {
        sl__fleet_on_task_write(srv, c.names[i], false, SL_TASK_WAITING, NULL, 0);
        free(c.names[i]);
    }
    free(c.names);
    sl__namemap_free(&graph);
    f->synced = true;
}

void sl__fleet_sync(sl_server_t *srv)
{
    if (!fleet_of(srv) || srv->shutting_down) return;
    sl_backend_tasks(srv->backend, on_graph, srv);
}

/* ---- views ------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank quantile `q` of the task times (NAN when there is none). */
static void task_quantiles(const sl_fleet_t *f, double *p50, double *p95)
{
    double sorted[TASK_TIMES];
    *p50 = *p95 = NAN;
    if (!f || !f->n_task_s) return;
    memcpy(sorted, f->task_s, f->n_task_s * sizeof(double));
    qsort(sorted, f->n_task_s, sizeof(double), cmp_double);
    size_t n = f->n_task_s;
    *p50 = sorted[(size_t)ceil(0.50 * (double)n) - 1];
    *p95 = sorted[(size_t)ceil(0.95 * (double)n) - 1];
}

typedef struct states_ctx {
    uint64_t n[3];
} states_ctx_t;

static void count_state(const char *key, void *val, void *ud)
{
    (void)key;
    ((states_ctx_t *)ud)->n[((task_watch_t *)val)->state]++;
}

typedef struct numbers {
    uint64_t settled, got_429;
    double rate_429;        /* NAN: no settle in the window */
    double tokens_per_task; /* NAN: no finished task */
    double p50, p95;
    states_ctx_t states;
} numbers_t;

static numbers_t numbers_now(sl_server_t *srv)
{
    numbers_t n = {0};
    sl_fleet_t *f = fleet_of(srv);
    double now = sl_backend_now(srv->backend), win = srv->config.fleet.window_s;
    n.rate_429 = n.tokens_per_task = NAN;
    task_quantiles(f, &n.p50, &n.p95);
    if (!f) return n;
    accrue(f, now, false);
    n.settled = sl__window_sum(&f->settled, win, now);
    n.got_429 = sl__window_sum(&f->got_429, win, now);
    if (n.settled) n.rate_429 = (double)n.got_429 / (double)n.settled;
    if (f->finished_total)
        n.tokens_per_task = (double)f->finished_tokens / (double)f->finished_total;
    sl__namemap_foreach(&f->tasks, count_state, &n.states);
    return n;
}

static json_t *num_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

void sl__handle_fleet(sl_call_t *call)
{
    sl_server_t *srv = call->srv;
    numbers_t n = numbers_now(srv);
    const sl_fleet_t *f = fleet_state(srv);
    json_t *j = json_pack(
        "{s:f,s:{s:o,s:I,s:I,s:I,s:I},s:{s:o,s:I,s:I},s:{s:o,s:o,s:I},s:{s:f,s:I},"
        "s:{s:I,s:I,s:I}}",
        "window_s", srv->config.fleet.window_s, "upstream_429", "rate", num_or_null(n.rate_429),
        "count", (json_int_t)n.got_429, "settled", (json_int_t)n.settled, "count_total",
        (json_int_t)(f ? f->got_429_total : 0), "settled_total",
        (json_int_t)(f ? f->settled_total : 0), "tokens_per_finished_task", "tokens",
        num_or_null(n.tokens_per_task), "finished_tasks", (json_int_t)(f ? f->finished_total : 0),
        "finished_task_tokens", (json_int_t)(f ? f->finished_tokens : 0), "task_time_s", "p50",
        num_or_null(n.p50), "p95", num_or_null(n.p95), "samples", (json_int_t)(f ? f->n_task_s : 0),
        "critical_path_wait", "total_s", f ? f->wait_total_s : 0.0, "blocked_tasks",
        (json_int_t)(f ? f->n_blocked : 0), "tasks", "waiting",
        (json_int_t)n.states.n[SL_TASK_WAITING], "running", (json_int_t)n.states.n[SL_TASK_RUNNING],
        "done", (json_int_t)n.states.n[SL_TASK_DONE]);
    if (j) json_object_set_new(j, "anomalies", sl__anomaly_json(call));
    sl__reply_json(call, 200, j);
}

static void gauge(struct evbuffer *out, const char *name, const char *type, const char *help,
                  const char *labels, double v)
{
    if (help) evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    if (isnan(v))
        evbuffer_add_printf(out, "%s%s NaN\n", name, labels);
    else
        evbuffer_add_printf(out, "%s%s %.17g\n", name, labels, v);
}

void sl__fleet_metrics_render(sl_server_t *srv, struct evbuffer *out)
{
    numbers_t n = numbers_now(srv);
    const sl_fleet_t *f = fleet_state(srv);
    gauge(out, "sluice_fleet_upstream_429_ratio", "gauge",
          "Upstream 429s over settled leases in the window fleet.window_s (NaN: no settle).", "",
          n.rate_429);
    gauge(out, "sluice_fleet_tokens_per_finished_task", "gauge",
          "Tokens settled on leases naming a task, per task done (NaN: none done).", "",
          n.tokens_per_task);
    gauge(out, "sluice_fleet_finished_tasks_total", "counter", "Tasks written done.", "",
          f ? (double)f->finished_total : 0);
    double sum_s = 0;
    for (size_t i = 0; f && i < f->n_task_s; i++)
        sum_s += f->task_s[i];
    gauge(out, "sluice_fleet_task_seconds", "summary",
          "Task time from running to done, latest 1024 finished tasks (NaN: none).",
          "{quantile=\"0.5\"}", n.p50);
    gauge(out, "sluice_fleet_task_seconds", NULL, NULL, "{quantile=\"0.95\"}", n.p95);
    gauge(out, "sluice_fleet_task_seconds_sum", NULL, NULL, "", sum_s);
    gauge(out, "sluice_fleet_task_seconds_count", NULL, NULL, "", f ? (double)f->n_task_s : 0);
    gauge(out, "sluice_fleet_critical_path_wait_seconds_total", "counter",
          "Time waiting tasks spent while a task they depend on had a queued lease request.", "",
          f ? f->wait_total_s : 0);
    gauge(out, "sluice_fleet_blocked_tasks", "gauge",
          "Waiting tasks whose upstream task has a lease request queued now.", "",
          f ? (double)f->n_blocked : 0);
    static const char *const st[3] = {"{state=\"waiting\"}", "{state=\"running\"}",
                                      "{state=\"done\"}"};
    for (int s = 0; s < 3; s++)
        gauge(out, "sluice_fleet_tasks", "gauge", s ? NULL : "Tasks in the graph by state.", st[s],
              (double)n.states.n[s]);
}

static void free_task(const char *key, void *val, void *ud)
{
    (void)key, (void)ud;
    task_free(val);
}

static void free_name(uint64_t key, void *val, void *ud)
{
    (void)key, (void)ud;
    free(val);
}

void sl__fleet_free(sl_server_t *srv)
{
    sl_fleet_t *f = fleet_state(srv);
    if (!f) return;
    sl__namemap_foreach(&f->tasks, free_task, NULL);
    sl__namemap_free(&f->tasks);
    sl__idmap_foreach(&f->ticket_task, free_name, NULL);
    sl__idmap_foreach(&f->lease_task, free_name, NULL);
    sl__idmap_free(&f->ticket_task);
    sl__idmap_free(&f->lease_task);
    free(f);
    sl__fleet_house_make(srv)->fleet = NULL; /* the house exists: it held this part */
}
