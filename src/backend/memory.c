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
 *
 * Restarts (persist.h): with a state file, every operation's changes are journaled
 * with one write before its completion callback runs, from the events the engine
 * emitted during it (grants, ends, pool changes) and what the operation itself knows
 * (an extend, a claimed grant, the calibration a settle fed). A pool nothing is known
 * about starts cold (empty) unless `cold_start: full`.
 */
#include "backend.h"
#include "../common/grow.h"
#include "persist.h"
#include "batchq.h"
#include "suspended.h"

#include <stdio.h>

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
#define FILE_AHEAD_MAX_S 86400.0 /* a state file's times may run this far ahead, no more */

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
    sl_persist_t *persist;      /* NULL without a state file */
    size_t n_journaled;         /* pending events already journaled */
    sl_cold_start_t cold_start; /* for pools whose state is not known */
    bool configured;            /* the first configure (the restore) has run */
    sl_suspended_set_t suspended; /* suspensions; journaled with a state file */
    sl_batchq_set_t batchq;       /* the batch queues; journaled with a state file */
    sl_engine_config_t engine_cfg; /* for the scratch engine of the restore's trial */
} memory_backend_t;

static double mem_now(sl_backend_t *b)
{
    return sl_backend_clock_now(&((memory_backend_t *)b)->clock);
}

/* A copy of `s` in the backend's string blocks (freed together by strings_reset()), or
 * NULL for NULL or when out of memory. */
static char *arena_dup_or_null(memory_backend_t *m, const char *s)
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
    sl_event_t *p = sl_grow(m->pending, m->n_pending, &m->cap_pending, sizeof(*p), 64);
    if (!p) {
        if (m->persist) sl__persist_mark_lost(m->persist);
        return;
    }
    m->pending = p;
    sl_event_t *copy = &m->pending[m->n_pending];
    *copy = *ev;
    copy->pool = arena_dup_or_null(m, ev->pool);
    copy->agent = arena_dup_or_null(m, ev->agent);
    copy->reason = arena_dup_or_null(m, ev->reason);
    copy->alert = arena_dup_or_null(m, ev->alert);
    m->n_pending++;
}

/* Does an event of this kind change a pool's durable state (levels, margin, clocks)? */
static bool changes_pool(sl_event_kind_t kind)
{
    return kind != SL_EV_QUEUED && kind != SL_EV_REJECTED && kind != SL_EV_TICKET_CANCELLED &&
           kind != SL_EV_TICKET_EXPIRED && kind != SL_EV_TICKET_REJECTED;
}

static void journal_pool(const sl_pool_info_t *p, void *ud)
{
    memory_backend_t *m = ud;
    sl__persist_pool(m->persist, m->engine, p->name);
}

/* Journals the events not journaled yet (one record per lease granted or ended, one per
 * pool changed) and writes them: called after every engine call, before its answer. */
static void journal(memory_backend_t *m)
{
    if (!m->persist) return;
    const char *dirty[8];
    size_t n_dirty = 0;
    bool all = false;
    for (size_t i = m->n_journaled; i < m->n_pending; i++) {
        const sl_event_t *ev = &m->pending[i];
        if (ev->kind == SL_EV_GRANTED)
            sl__persist_lease(m->persist, m->engine, ev->lease);
        else if (ev->kind == SL_EV_SETTLED || ev->kind == SL_EV_CANCELLED ||
                 ev->kind == SL_EV_REAPED || ev->kind == SL_EV_UNCLAIMED)
            sl__persist_lease_end(m->persist, ev->lease);
        if (!ev->pool || !changes_pool(ev->kind) || all) continue;
        size_t j = 0;
        while (j < n_dirty && strcmp(dirty[j], ev->pool) != 0)
            j++;
        if (j < n_dirty) continue;
        if (n_dirty == sizeof dirty / sizeof dirty[0])
            all = true;
        else
            dirty[n_dirty++] = ev->pool;
    }
    m->n_journaled = m->n_pending;
    if (all) {
        sl_engine_pool_foreach(m->engine, journal_pool, m);
    } else {
        for (size_t j = 0; j < n_dirty; j++)
            sl__persist_pool(m->persist, m->engine, dirty[j]);
    }
    sl__persist_flush(m->persist, m->engine);
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
    journal(m);
    m->depth--;
    if (m->depth == 0 && !m->flushing) {
        m->flushing = true;
        /* Handlers may start operations that queue further events: index, not pointer. */
        for (size_t i = 0; i < m->n_pending; i++) {
            sl_event_t ev = m->pending[i];
            if (m->base.event_cb) m->base.event_cb(&ev, m->base.event_ud);
        }
        m->n_pending = 0;
        m->n_journaled = 0;
        strings_reset(m);
        m->flushing = false;
    }
    if (m->depth == 0) timer_rearm(m);
}

static void op_begin(memory_backend_t *m)
{
    m->depth++;
}

static double floor_ms(double now_s)
{
    return floor(now_s * 1000.0);
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
    sl__persist_free(m->persist);
    sl__suspended_clear(&m->suspended);
    sl__batchq_clear(&m->batchq);
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
        m->applied.caps[i].weight = s->caps[i].weight;
        if (m->applied.caps[i].holder) m->applied.n_caps = i + 1;
    }
    for (size_t i = 0; i < s->n_members; i++) {
        m->applied.members[i].agent = strdup(s->members[i].agent);
        m->applied.members[i].team = NULL;
        if (m->applied.members[i].agent) m->applied.n_members = i + 1;
    }
}

/* Says on stderr that the state file was refused, why, and where it is kept. */
static void say_damaged(const sl_persist_t *p)
{
    sl__backend_log(SL_BACKEND_LOG_ERROR,
            "state_file does not verify (%s): nothing of it restored, cold start; "
            "kept as %s (alert state_file_damaged)",
            sl__persist_damage(p), sl__persist_kept_path(p));
}

/* The first configure's restore, tried first on a scratch engine with the same pools: a
 * record the engine refuses (a checksum-clean file from a writer with a bug, say) makes the
 * whole file damaged rather than restored in part. Returns SL_OK, or SL_EINVAL with `err`
 * set when the file cannot be moved aside. */
static int trial_restore(memory_backend_t *m, const sl_backend_settings_t *s, double now,
                         char *err, size_t errlen)
{
    if (sl__persist_found(m->persist) != SL_PERSIST_LOADED) return SL_OK;
    sl_engine_t *t = sl_engine_new(&m->engine_cfg);
    bool whole = true; /* out of memory for the trial: the restore itself will say */
    if (t && sl_engine_set_id_base(t, sl_engine_next_id(m->engine) - 1) == SL_OK) {
        for (size_t i = 0; i < s->n_pools; i++)
            sl_engine_configure_pool(t, s->pools[i].name, &s->pools[i].config, now);
        whole = sl__persist_trial(m->persist, t, now);
    }
    sl_engine_free(t);
    if (whole) return SL_OK;
    if (sl__persist_refuse(m->persist, NULL, err, errlen) < 0) return SL_EINVAL;
    sl__suspended_clear(&m->suspended); /* the file's, bound at open: not restored either */
    sl__batchq_clear(&m->batchq);
    say_damaged(m->persist);
    return SL_OK;
}

/* A pool just created: restored from the state file, or started cold. A damaged file at
 * start says a run was there and spent from the provider's buckets: its pools start empty
 * even with `cold_start: full`, which is for pools nothing is known of. */
static int start_pool(memory_backend_t *m, const char *name, double now)
{
    if (m->persist && sl__persist_restore_pool(m->persist, m->engine, name, now)) return SL_OK;
    bool damaged = m->persist && !m->configured &&
                   sl__persist_found(m->persist) == SL_PERSIST_DAMAGED;
    if (m->cold_start == SL_COLD_START_FULL && !damaged) return SL_OK;
    return sl_engine_pool_cold_start(m->engine, name, SL_COLD_START_WINDOW_S, now);
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
            if (!sl_backend_settings_names_caps(s, m->applied.caps[i].holder,
                                                m->applied.caps[i].team))
                rc = sl_engine_set_caps(m->engine, m->applied.caps[i].holder,
                                        m->applied.caps[i].team, NULL);
        for (size_t i = 0; rc == SL_OK && i < m->applied.n_members; i++)
            rc = sl_engine_set_agent_team(m->engine, m->applied.members[i].agent, NULL);
        for (size_t i = 0; rc == SL_OK && i < m->applied.n_caps; i++)
            if (m->applied.caps[i].team)
                rc = sl_engine_set_team_weight(m->engine, m->applied.caps[i].holder, 1.0);
        for (size_t i = 0; rc == SL_OK && i < s->n_caps; i++) {
            rc = sl_engine_set_caps(m->engine, s->caps[i].holder, s->caps[i].team,
                                    &s->caps[i].caps);
            if (rc == SL_OK && s->caps[i].team && s->caps[i].weight != 0)
                rc = sl_engine_set_team_weight(m->engine, s->caps[i].holder, s->caps[i].weight);
        }
        for (size_t i = 0; rc == SL_OK && i < s->n_members; i++)
            rc = sl_engine_set_agent_team(m->engine, s->members[i].agent, s->members[i].team);
        if (rc == SL_OK) sl_engine_wake_parked(m->engine); /* a cap raised frees slots */
        if (rc == SL_OK) remember_applied(m, s);
        double now = mem_now(b);
        if (rc == SL_OK && m->persist && !m->configured)
            rc = trial_restore(m, s, now, err, sizeof(err));
        for (size_t i = 0; rc == SL_OK && i < s->n_pools; i++) {
            sl_pool_info_t info;
            bool known = sl_engine_pool_info(m->engine, s->pools[i].name, &info) == SL_OK;
            rc = sl_engine_configure_pool(m->engine, s->pools[i].name, &s->pools[i].config, now);
            if (rc == SL_OK && !known) rc = start_pool(m, s->pools[i].name, now);
        }
        if (rc != SL_OK) snprintf(err, sizeof(err), "%s", sl_engine_errmsg(m->engine));
        if (rc == SL_OK && m->persist && !m->configured) {
            /* The first configure: what the file held comes back, then a fresh snapshot
             * (with the new id reservation) must be on disk before anything is answered. */
            size_t restored = 0, dropped = 0;
            if (sl__persist_found(m->persist) == SL_PERSIST_DAMAGED) {
                /* Said once, at the start it concerns (event log, /v1/events, /metrics). */
                sl_event_t ev = {.kind = SL_EV_ALERT, .now_s = now, .alert = "state_file_damaged",
                                 .active = true, .reason = sl__persist_damage(m->persist)};
                on_engine_event(&ev, m);
            }
            sl__persist_restore_rest(m->persist, m->engine, now, &restored, &dropped);
            if (restored || dropped)
                sl__backend_log(SL_BACKEND_LOG_INFO, "state_file: %zu leases in flight restored%s", restored,
                        dropped ? " (some named pools no longer configured: dropped)" : "");
            if (sl__persist_snapshot(m->persist, m->engine, err, sizeof(err)) < 0) rc = SL_EINVAL;
        } else if (rc == SL_OK && m->persist) {
            sl_engine_pool_foreach(m->engine, journal_pool, m); /* levels were clamped */
        }
        if (rc == SL_OK) m->configured = true;
    }
    journal(m);
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
    journal(m);
    cb(rc, rc == SL_OK ? &d : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    op_end(m);
}

static void mem_ticket_poll(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    sl_decision_t d;
    op_begin(m);
    int rc = sl_engine_ticket(m->engine, ticket, mem_now(b), &d);
    if (rc == SL_OK && d.status == SL_GRANTED && m->persist)
        sl__persist_lease(m->persist, m->engine, d.lease); /* claimed: its TTL started */
    journal(m);
    cb(rc, rc == SL_OK ? &d : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    op_end(m);
}

static void finish_done(memory_backend_t *m, int rc, double value, sl_backend_done_cb cb, void *ud)
{
    journal(m);
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

/* Whether the caller of the operation being started (b->actor) may act on live lease
 * `lease`. The server checks the owners it saw granted; this catches the leases it did
 * not see: those restored from the state file after a restart. An unknown or ended
 * lease is left to the engine's own answer (404, 409, 410). */
static bool actor_owns(memory_backend_t *m, uint64_t lease)
{
    const sl_backend_actor_t *a = &m->base.actor;
    if (!a->agent && !a->agent_prefix) return true; /* admin, or auth off */
    sl_lease_state_t l;
    if (sl_engine_lease_state(m->engine, lease, &l) != SL_OK || !l.agent) return true;
    if (a->agent && strcmp(a->agent, l.agent) == 0) return true;
    return a->agent_prefix && strncmp(a->agent_prefix, l.agent, strlen(a->agent_prefix)) == 0;
}

static void mem_settle(sl_backend_t *b, uint64_t lease, const sl_settle_t *s,
                       sl_backend_settle_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    sl_settle_result_t r;
    if (!actor_owns(m, lease)) {
        cb(SL_BACKEND_EFORBIDDEN, NULL, "the lease belongs to another agent", ud);
        return;
    }
    op_begin(m);
    /* The lease's pool and model outlive it (the pool owns both strings). */
    sl_lease_state_t before;
    bool calibrated = m->persist && sl_engine_lease_state(m->engine, lease, &before) == SL_OK &&
                      before.model;
    int rc = sl_engine_settle(m->engine, lease, s, mem_now(b), &r);
    if (rc == SL_OK && calibrated)
        sl__persist_calibration(m->persist, m->engine, before.pool, before.model);
    if (rc == SL_OK && calibrated && before.outputs) /* its group's output samples */
        sl__persist_calibration(m->persist, m->engine, before.pool, before.outputs);
    journal(m);
    cb(rc, rc == SL_OK ? &r : NULL, rc == SL_OK ? NULL : sl_engine_errmsg(m->engine), ud);
    op_end(m);
}

static void mem_cancel(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    if (!actor_owns(m, lease)) {
        if (cb) cb(SL_BACKEND_EFORBIDDEN, 0, "the lease belongs to another agent", ud);
        return;
    }
    op_begin(m);
    finish_done(m, sl_engine_cancel(m->engine, lease, mem_now(b)), 0, cb, ud);
}

static void mem_extend(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb,
                       void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    double expires_at = 0;
    if (!actor_owns(m, lease)) {
        if (cb) cb(SL_BACKEND_EFORBIDDEN, 0, "the lease belongs to another agent", ud);
        return;
    }
    op_begin(m);
    int rc = sl_engine_extend(m->engine, lease, ttl_s, mem_now(b), &expires_at);
    if (rc == SL_OK && m->persist) sl__persist_lease(m->persist, m->engine, lease);
    finish_done(m, rc, expires_at, cb, ud);
}

static void mem_resync(sl_backend_t *b, uint64_t lease, double sent_after_s,
                       const char *const *names, const char *const *values, size_t count,
                       sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    sl_lease_state_t l;
    if (sl_engine_lease_state(m->engine, lease, &l) != SL_OK) {
        if (cb) cb(SL_ENOTFOUND, 0, "the lease is unknown or ended", ud);
        return;
    }
    op_begin(m);
    int rc = sl_engine_resync_lease_sent(m->engine, lease, sent_after_s, names, values, count,
                                         mem_now(b), NULL);
    finish_done(m, rc, 0, cb, ud);
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
    void *p = sl_grow(c->items, c->n, &c->cap, c->size, 16);
    if (!p) {
        c->failed = true;
        return NULL;
    }
    c->items = p;
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

/* Suspensions are journaled like any operation: durable against kill -9 when answered. */
static void mem_suspend(sl_backend_t *b, const sl_suspension_t *s, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    int added = sl__suspended_put(&m->suspended, s);
    if (added > 0 && m->persist) {
        sl__persist_suspended(m->persist, s);
        sl__persist_flush(m->persist, m->engine);
    }
    if (cb)
        cb(added < 0 ? SL_ENOMEM : SL_OK, added > 0 ? 1 : 0, added < 0 ? "out of memory" : NULL,
           ud);
}

static void mem_release(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    bool found = sl__suspended_del(&m->suspended, agent);
    if (found && m->persist) {
        sl__persist_released(m->persist, agent);
        sl__persist_flush(m->persist, m->engine);
    }
    if (cb) cb(found ? SL_OK : SL_ENOTFOUND, 0, found ? NULL : "agent: not suspended", ud);
}

static void mem_suspensions(sl_backend_t *b, sl_backend_suspensions_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    cb(SL_OK, m->suspended.items, m->suspended.n, NULL, ud);
}

/* The batch queues: journaled like any operation, what changed only (expiry is not). */
static void mem_batch_queue(sl_backend_t *b, const sl_batchq_call_t *c, sl_backend_batchq_cb cb,
                            void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    double now_s = mem_now(b);
    bool counted = false;
    int64_t queued = 0;
    int rc = sl__batchq_apply(&m->batchq, c, now_s, &counted, &queued);
    if (rc == SL_OK && counted && m->persist) {
        if (c->op == SL_BATCHQ_ADD || c->op == SL_BATCHQ_BIND)
            sl__persist_batch_put(m->persist, c->pool, c->op == SL_BATCHQ_BIND ? c->new_id : c->id,
                                  c->requests, now_s + c->ttl_s);
        if (c->op == SL_BATCHQ_RELEASE || (c->op == SL_BATCHQ_BIND && strcmp(c->id, c->new_id)))
            sl__persist_batch_del(m->persist, c->pool, c->id);
        sl__persist_flush(m->persist, m->engine);
    }
    if (rc != SL_OK)
        cb(rc, false, 0, "out of memory", ud);
    else
        cb(SL_OK, counted, queued, NULL, ud);
}

static void mem_agent_forget(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud)
{
    memory_backend_t *m = (memory_backend_t *)b;
    op_begin(m);
    int rc = sl_engine_agent_forget(m->engine, agent, mem_now(b));
    double value = rc == SL_OK ? 1 : rc == SL_EEXIST ? 0 : -1;
    finish_done(m, rc == SL_EEXIST || rc == SL_ENOTFOUND ? SL_OK : rc, value, cb, ud);
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
    .resync = mem_resync,
    .task_put = mem_task_put,
    .task_delete = mem_task_delete,
    .tasks = mem_tasks,
    .pools = mem_pools,
    .agents = mem_agents,
    .ping = mem_ping,
    .suspend = mem_suspend,
    .release = mem_release,
    .agent_forget = mem_agent_forget,
    .suspensions = mem_suspensions,
    .batch_queue = mem_batch_queue,
};

void sl_memory_options_init(sl_memory_options_t *o)
{
    o->state_file = NULL;
    o->fsync_interval_s = 1.0;
    o->cold_start = SL_COLD_START_EMPTY;
}

/* The id base of a run: above the start time in milliseconds x 1000 (a run would have to
 * issue 1,000 ids per millisecond on average to reach the next run's base), and above
 * every id the state file's runs reserved. */
static uint64_t id_base(double now_s, uint64_t floor)
{
    uint64_t base = (uint64_t)floor_ms(now_s) * 1000;
    if (floor > base) base = floor;
    return base > SL_ID_BASE_MAX ? SL_ID_BASE_MAX : base;
}

sl_backend_t *sl_backend_memory_open(struct event_base *base, const sl_engine_config_t *cfg,
                                     const sl_memory_options_t *opt, char *err, size_t errlen)
{
    sl_memory_options_t defaults;
    sl_memory_options_init(&defaults);
    if (!opt) opt = &defaults;
    memory_backend_t *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->base.ops = &memory_ops;
    m->evbase = base;
    m->cold_start = opt->cold_start;
    if (cfg)
        m->engine_cfg = *cfg;
    else
        sl_engine_config_init(&m->engine_cfg);
    sl_backend_clock_init(&m->clock);
    m->engine = sl_engine_new(cfg);
    m->timer = evtimer_new(base, on_timer, m);
    if (!m->engine || !m->timer) {
        snprintf(err, errlen, "out of memory");
        mem_free(&m->base);
        return NULL;
    }
    sl_engine_set_event_cb(m->engine, on_engine_event, m);
    uint64_t floor = 0;
    if (opt->state_file) {
        m->persist = sl__persist_open(base, opt->state_file, opt->fsync_interval_s, err, errlen);
        if (!m->persist) {
            mem_free(&m->base);
            return NULL;
        }
        /* Times in the file are never in the future of this run's clock (the wall clock
         * may have been set back), but a file whose times run more than a day ahead is
         * not believed: damaged. */
        double ahead_s = sl__persist_latest_s(m->persist) - sl_backend_clock_now(&m->clock);
        if (ahead_s > FILE_AHEAD_MAX_S) {
            char why[96];
            snprintf(why, sizeof why, "its times run %.0f s ahead of this clock", ahead_s);
            if (sl__persist_refuse(m->persist, why, err, errlen) < 0) {
                mem_free(&m->base);
                return NULL;
            }
        }
        floor = sl__persist_id_floor(m->persist);
        sl__persist_bind_suspended(m->persist, &m->suspended);
        sl__persist_bind_batchq(m->persist, &m->batchq);
        if (sl__persist_found(m->persist) == SL_PERSIST_DAMAGED)
            say_damaged(m->persist);
        else if (sl__persist_was_v1(m->persist))
            sl__backend_log(SL_BACKEND_LOG_INFO, "state_file: %s is format 1 (SLSTATE1): read once, "
                                 "rewritten as format 2", opt->state_file);
        double latest_s = sl__persist_latest_s(m->persist);
        double now_s = sl_backend_clock_now(&m->clock);
        if (latest_s > now_s) m->clock.start_real_s += latest_s - now_s;
    }
    sl_engine_set_id_base(m->engine, id_base(sl_backend_clock_now(&m->clock), floor));
    return &m->base;
}

sl_backend_t *sl_backend_memory_new(struct event_base *base, const sl_engine_config_t *cfg)
{
    sl_memory_options_t opt;
    sl_memory_options_init(&opt);
    opt.cold_start = SL_COLD_START_FULL;
    char err[256];
    return sl_backend_memory_open(base, cfg, &opt, err, sizeof err);
}
