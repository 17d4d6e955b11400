/* memory.c - the `memory` backend: the engine in-process, woken by one libevent timer.
 *
 * Every operation runs the engine synchronously and calls its completion callback
 * before returning. Engine events are copied into a queue while the engine runs and
 * delivered once the outermost operation has finished, so an event handler may call
 * back into the backend (answering a long-poll waiter polls its ticket). The one timer
 * is re-armed after every operation at sl_engine_next_wakeup(); when it fires the
 * engine advances, which reaps expired leases and drains queue heads whose ETA came.
 *
 * Time: CLOCK_MONOTONIC offset onto the realtime clock read once at start, so the
 * engine sees Unix seconds that never go backwards even when the wall clock is set.
 */
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

/* Event strings live in blocks that never move until every pending event is delivered. */
typedef struct str_block {
    struct str_block *next;
    size_t used, cap;
    char data[];
} str_block_t;

#define STR_BLOCK_BYTES 65536

typedef struct memory_backend {
    sl_backend_t base;
    struct event_base *evbase;
    struct event *timer;
    sl_engine_t *engine;
    sl_backend_clock_t clock;
    sl_event_t *pending;  /* events copied from the engine; strings in `strings` */
    str_block_t *strings; /* newest block first */
    size_t n_pending, cap_pending;
    sl_backend_settings_t applied; /* caps and team members of the last configure */
    int depth;     /* operations running (nested when a callback starts another) */
    bool flushing; /* delivering events */
} memory_backend_t;

static double mem_now(sl_backend_t *b)
{
    return sl_backend_clock_now(&((memory_backend_t *)b)->clock);
}

static char *dup_or_null(memory_backend_t *m, const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    str_block_t *b = m->strings;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > STR_BLOCK_BYTES ? n : STR_BLOCK_BYTES;
        b = malloc(sizeof(*b) + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = m->strings;
        m->strings = b;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    b->used += n;
    return p;
}

/* Drops every event string; keeps one block for the next burst. */
static void strings_reset(memory_backend_t *m)
{
    str_block_t *b = m->strings;
    if (!b) return;
    while (b->next) {
        str_block_t *next = b->next->next;
        free(b->next);
        b->next = next;
    }
    b->used = 0;
}

/* Engine event callback: runs inside an engine call, so it only copies. An event that
 * cannot be copied for lack of memory is dropped (events are notifications; the
 * engine's state stays authoritative). */
static void on_engine_event(const sl_event_t *ev, void *ud)
{
    memory_backend_t *m = ud;
    if (m->n_pending == m->cap_pending) {
        size_t cap = m->cap_pending ? m->cap_pending * 2 : 64;
        sl_event_t *p = realloc(m->pending, cap * sizeof(*p));
        if (!p) return;
        m->pending = p;
        m->cap_pending = cap;
    }
    sl_event_t *copy = &m->pending[m->n_pending];
    *copy = *ev;
    copy->pool = dup_or_null(m, ev->pool);
    copy->agent = dup_or_null(m, ev->agent);
    copy->reason = dup_or_null(m, ev->reason);
    copy->alert = dup_or_null(m, ev->alert);
    m->n_pending++;
}

static void timer_rearm(memory_backend_t *m)
{
    double wake = sl_engine_next_wakeup(m->engine);
    if (!isfinite(wake)) {
        evtimer_del(m->timer);
        return;
    }
    double delay_s = wake - mem_now(&m->base);
    if (delay_s < 0) delay_s = 0;
    /* Round up to the next millisecond so the timer never fires before the engine's
     * instant (which would only re-arm it at zero delay). */
    double ms = ceil(delay_s * 1000.0) + 1.0;
    if (ms > 86400000.0) ms = 86400000.0;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000.0),
                         .tv_usec = (suseconds_t)fmod(ms, 1000.0) * 1000};
    evtimer_add(m->timer, &tv);
}

/* Delivers queued events (only from the outermost operation), then re-arms the timer. */
static void op_end(memory_backend_t *m)
{
    m->depth--;
    if (m->depth == 0 && !m->flushing) {
        m->flushing = true;
        /* Handlers may start operations that queue further events: index, not pointer. */
        for (size_t i = 0; i < m->n_pending; i++) {
            sl_event_t ev = m->pending[i];
            if (m->base.event_cb) m->base.event_cb(&ev, m->base.event_ud);
        }
        m->n_pending = 0;
        strings_reset(m);
        m->flushing = false;
    }
    if (m->depth == 0) timer_rearm(m);
}

static void op_begin(memory_backend_t *m)
{
    m->depth++;
}

static void on_timer(evutil_socket_t fd, short what, void *ud)
{
    memory_backend_t *m = ud;
    (void)fd;
    (void)what;
    op_begin(m);
    sl_engine_advance(m->engine, mem_now(&m->base));
    op_end(m);
}

static void mem_free(sl_backend_t *b)
{
    memory_backend_t *m = (memory_backend_t *)b;
    while (m->strings) {
        str_block_t *next = m->strings->next;
        free(m->strings);
        m->strings = next;
    }
    free(m->pending);
    if (m->timer) event_free(m->timer);
    sl_engine_free(m->engine);
    sl_backend_settings_clear(&m->applied);
    free(m);
}

/* Keeps a copy of the caps holders and team members just applied. */
static void remember_applied(memory_backend_t *m, const sl_backend_settings_t *s)
{
    sl_backend_settings_clear(&m->applied);
    m->applied.caps = calloc(s->n_caps ? s->n_caps : 1, sizeof(*m->applied.caps));
    m->applied.members = calloc(s->n_members ? s->n_members : 1, sizeof(*m->applied.members));
    if (!m->applied.caps || !m->applied.members) return;
    for (size_t i = 0; i < s->n_caps; i++) {
        m->applied.caps[i].holder = strdup(s->caps[i].holder);
        m->applied.caps[i].team = s->caps[i].team;
        if (m->applied.caps[i].holder) m->applied.n_caps = i + 1;
    }
    for (size_t i = 0; i < s->n_members; i++) {
        m->applied.members[i].agent = strdup(s->members[i].agent);
        m->applied.members[i].team = NULL;
        if (m->applied.members[i].agent) m->applied.n_members = i + 1;
    }
}

static void mem_configure(sl_backend_t *b, const sl_backend_settings_t *s, sl_backend_done_cb cb,
                          void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    char err[512];
    long bad_pool;
    op_begin(m);
    /* Validate everything first so a bad reload changes nothing. */
    int rc = sl_backend_settings_validate(s, &bad_pool, err, sizeof(err));
    if (rc == SL_OK) {
        for (size_t i = 0; rc == SL_OK && i < s->n_roles; i++)
            rc = sl_engine_set_role(m->engine, s->roles[i].name, s->roles[i].value);
        for (size_t i = 0; rc == SL_OK && i < s->n_priorities; i++)
            rc = sl_engine_set_priority(m->engine, s->priorities[i].name, s->priorities[i].value);
        /* Caps and memberships the new settings no longer name are lifted. */
        for (size_t i = 0; rc == SL_OK && i < m->applied.n_caps; i++)
            rc = sl_engine_set_caps(m->engine, m->applied.caps[i].holder, m->applied.caps[i].team,
                                    NULL);
        for (size_t i = 0; rc == SL_OK && i < m->applied.n_members; i++)
            rc = sl_engine_set_agent_team(m->engine, m->applied.members[i].agent, NULL);
        for (size_t i = 0; rc == SL_OK && i < s->n_caps; i++)
            rc = sl_engine_set_caps(m->engine, s->caps[i].holder, s->caps[i].team,
                                    &s->caps[i].caps);
        for (size_t i = 0; rc == SL_OK && i < s->n_members; i++)
            rc = sl_engine_set_agent_team(m->engine, s->members[i].agent, s->members[i].team);
        if (rc == SL_OK) remember_applied(m, s);
        double now = mem_now(b);
        for (size_t i = 0; rc == SL_OK && i < s->n_pools; i++)
            rc = sl_engine_configure_pool(m->engine, s->pools[i].name, &s->pools[i].config, now);
        if (rc != SL_OK) snprintf(err, sizeof(err), "%s", sl_engine_errmsg(m->engine));
    }
    cb(rc, 0, rc == SL_OK ? NULL : err, ud);
    op_end(m);
}

static void mem_request(sl_backend_t *b, const sl_request_t *req, sl_backend_decision_cb cb,
                        void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    sl_decision_t d;
    op_begin(m);
    int rc = sl_engine_request(m->engine, req, mem_now(b), &d);
    cb(rc, rc == SL_OK ? &d : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    op_end(m);
}

static void mem_ticket_poll(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    sl_decision_t d;
    op_begin(m);
    int rc = sl_engine_ticket(m->engine, ticket, mem_now(b), &d);
    cb(rc, rc == SL_OK ? &d : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    op_end(m);
}

static void finish_done(memory_backend_t *m, int rc, double value, sl_backend_done_cb cb, void *ud)
{
    if (cb) cb(rc, value, rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    op_end(m);
}

static void mem_ticket_hold(sl_backend_t *b, uint64_t ticket, bool held, sl_backend_done_cb cb,
                            void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    op_begin(m);
    finish_done(m, sl_engine_ticket_hold(m->engine, ticket, held, mem_now(b)), 0, cb, ud);
}

static void mem_ticket_cancel(sl_backend_t *b, uint64_t ticket, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    op_begin(m);
    finish_done(m, sl_engine_ticket_cancel(m->engine, ticket, mem_now(b)), 0, cb, ud);
}

static void mem_settle(sl_backend_t *b, uint64_t lease, const sl_settle_t *s,
                       sl_backend_settle_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    sl_settle_result_t r;
    op_begin(m);
    int rc = sl_engine_settle(m->engine, lease, s, mem_now(b), &r);
    cb(rc, rc == SL_OK ? &r : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    op_end(m);
}

static void mem_cancel(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    op_begin(m);
    finish_done(m, sl_engine_cancel(m->engine, lease, mem_now(b)), 0, cb, ud);
}

static void mem_extend(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb,
                       void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    double expires_at = 0;
    op_begin(m);
    int rc = sl_engine_extend(m->engine, lease, ttl_s, mem_now(b), &expires_at);
    finish_done(m, rc, expires_at, cb, ud);
}

static void mem_task_put(sl_backend_t *b, const char *id, const char *role,
                         const char *const *depends_on, size_t n_depends, sl_task_state_t state,
                         sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    op_begin(m);
    finish_done(m, sl_engine_task_put(m->engine, id, role, depends_on, n_depends, state), 0, cb,
                ud);
}

static void mem_task_delete(sl_backend_t *b, const char *id, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    op_begin(m);
    finish_done(m, sl_engine_task_delete(m->engine, id), 0, cb, ud);
}

/* A growable array filled by the engine's foreach functions. */
typedef struct collect {
    void *items;
    size_t n, cap, size;
    bool failed;
} collect_t;

static void *collect_slot(collect_t *c)
{
    if (c->failed) return NULL;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        void *p = realloc(c->items, cap * c->size);
        if (!p) {
            c->failed = true;
            return NULL;
        }
        c->items = p;
        c->cap = cap;
    }
    return (char *)c->items + c->size * c->n++;
}

static void collect_task(const sl_task_info_t *t, void *ud)
{
    sl_task_info_t *slot = collect_slot(ud);
    if (slot) *slot = *t;
}

static void collect_pool(const sl_pool_info_t *p, void *ud)
{
    sl_pool_info_t *slot = collect_slot(ud);
    if (slot) *slot = *p;
}

static void collect_agent(const sl_agent_info_t *a, void *ud)
{
    sl_agent_info_t *slot = collect_slot(ud);
    if (slot) *slot = *a;
}

static void mem_tasks(sl_backend_t *b, sl_backend_tasks_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    collect_t c = {.size = sizeof(sl_task_info_t)};
    op_begin(m);
    sl_engine_task_foreach(m->engine, collect_task, &c);
    cb(c.failed ? SL_ENOMEM : SL_OK, c.items, c.n, ud);
    free(c.items);
    op_end(m);
}

static void mem_pools(sl_backend_t *b, const char *pool, sl_backend_pools_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    collect_t c = {.size = sizeof(sl_pool_info_t)};
    op_begin(m);
    sl_engine_advance(m->engine, mem_now(b)); /* fresh levels */
    if (pool) {
        sl_pool_info_t info;
        int rc = sl_engine_pool_info(m->engine, pool, &info);
        cb(rc, rc == SL_OK ? &info : NULL, rc == SL_OK ? 1 : 0,
           rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    } else {
        sl_engine_pool_foreach(m->engine, collect_pool, &c);
        cb(c.failed ? SL_ENOMEM : SL_OK, c.items, c.n, c.failed ? "out of memory" : NULL, ud);
    }
    free(c.items);
    op_end(m);
}

static void mem_agents(sl_backend_t *b, sl_backend_agents_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    collect_t c = {.size = sizeof(sl_agent_info_t)};
    op_begin(m);
    sl_engine_agent_foreach(m->engine, collect_agent, &c);
    cb(c.failed ? SL_ENOMEM : SL_OK, c.items, c.n, ud);
    free(c.items);
    op_end(m);
}

static void mem_ping(sl_backend_t *b, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    op_begin(m);
    cb(SL_OK, 0, NULL, ud);
    op_end(m);
}

static const sl_backend_ops_t memory_ops = {
    .name = "memory",
    .free = mem_free,
    .now = mem_now,
    .configure = mem_configure,
    .request = mem_request,
    .ticket_poll = mem_ticket_poll,
    .ticket_hold = mem_ticket_hold,
    .ticket_cancel = mem_ticket_cancel,
    .settle = mem_settle,
    .cancel = mem_cancel,
    .extend = mem_extend,
    .task_put = mem_task_put,
    .task_delete = mem_task_delete,
    .tasks = mem_tasks,
    .pools = mem_pools,
    .agents = mem_agents,
    .ping = mem_ping,
};

sl_backend_t *sl_backend_memory_new(struct event_base *base, const sl_engine_config_t *cfg)
{
    memory_backend_t *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->base.ops = &memory_ops;
    m->evbase = base;
    sl_backend_clock_init(&m->clock);
    m->engine = sl_engine_new(cfg);
    m->timer = evtimer_new(base, on_timer, m);
    if (!m->engine || !m->timer) {
        mem_free(&m->base);
        return NULL;
    }
    sl_engine_set_event_cb(m->engine, on_engine_event, m);
    return &m->base;
}
