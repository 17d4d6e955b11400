/* backend.c - dispatch of the backend interface, and settings validation shared by all backends. */
#include "backend.h"

#include <time.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sl_backend_free(sl_backend_t *b)
{
    if (b) b->ops->free(b);
}

static sl_backend_log_cb log_cb;

void sl_backend_set_log(sl_backend_log_cb cb)
{
    log_cb = cb;
}

void sl__backend_log(sl_backend_log_level_t level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (log_cb)
        log_cb(level, msg);
    else
        fprintf(stderr, "sluiced: %s\n", msg);
}

void sl_backend_set_event_cb(sl_backend_t *b, sl_backend_event_cb cb, void *ud)
{
    b->event_cb = cb;
    b->event_ud = ud;
}

void sl_backend_set_actor(sl_backend_t *b, const sl_backend_actor_t *actor)
{
    b->actor = actor ? *actor : (sl_backend_actor_t){NULL, NULL};
}

double sl_backend_now(sl_backend_t *b)
{
    return b->ops->now(b);
}

void sl_backend_configure(sl_backend_t *b, const sl_backend_settings_t *s, sl_backend_done_cb cb,
                          void *ud)
{
    b->ops->configure(b, s, cb, ud);
}

void sl_backend_request(sl_backend_t *b, const sl_request_t *req, sl_backend_decision_cb cb,
                        void *ud)
{
    b->ops->request(b, req, cb, ud);
}

void sl_backend_ticket_poll(sl_backend_t *b, uint64_t ticket, sl_backend_decision_cb cb, void *ud)
{
    b->ops->ticket_poll(b, ticket, cb, ud);
}

void sl_backend_ticket_hold(sl_backend_t *b, uint64_t ticket, bool held, sl_backend_done_cb cb,
                            void *ud)
{
    b->ops->ticket_hold(b, ticket, held, cb, ud);
}

void sl_backend_ticket_cancel(sl_backend_t *b, uint64_t ticket, sl_backend_done_cb cb, void *ud)
{
    b->ops->ticket_cancel(b, ticket, cb, ud);
}

void sl_backend_settle(sl_backend_t *b, uint64_t lease, const sl_settle_t *s,
                       sl_backend_settle_cb cb, void *ud)
{
    b->ops->settle(b, lease, s, cb, ud);
}

void sl_backend_cancel(sl_backend_t *b, uint64_t lease, sl_backend_done_cb cb, void *ud)
{
    b->ops->cancel(b, lease, cb, ud);
}

void sl_backend_extend(sl_backend_t *b, uint64_t lease, double ttl_s, sl_backend_done_cb cb,
                       void *ud)
{
    b->ops->extend(b, lease, ttl_s, cb, ud);
}

void sl_backend_resync(sl_backend_t *b, uint64_t lease, double sent_after_s,
                       const char *const *names, const char *const *values, size_t count,
                       sl_backend_done_cb cb, void *ud)
{
    b->ops->resync(b, lease, sent_after_s, names, values, count, cb, ud);
}

void sl_backend_task_put(sl_backend_t *b, const char *id, const char *role,
                         const char *const *depends_on, size_t n_depends, sl_task_state_t state,
                         sl_backend_done_cb cb, void *ud)
{
    b->ops->task_put(b, id, role, depends_on, n_depends, state, cb, ud);
}

void sl_backend_task_delete(sl_backend_t *b, const char *id, sl_backend_done_cb cb, void *ud)
{
    b->ops->task_delete(b, id, cb, ud);
}

void sl_backend_tasks(sl_backend_t *b, sl_backend_tasks_cb cb, void *ud)
{
    b->ops->tasks(b, cb, ud);
}

void sl_backend_pools(sl_backend_t *b, const char *pool, sl_backend_pools_cb cb, void *ud)
{
    b->ops->pools(b, pool, cb, ud);
}

void sl_backend_agents(sl_backend_t *b, sl_backend_agents_cb cb, void *ud)
{
    b->ops->agents(b, cb, ud);
}

void sl_backend_agent_forget(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud)
{
    b->ops->agent_forget(b, agent, cb, ud);
}

void sl_backend_ping(sl_backend_t *b, sl_backend_done_cb cb, void *ud)
{
    b->ops->ping(b, cb, ud);
}

void sl_backend_suspend(sl_backend_t *b, const sl_suspension_t *s, sl_backend_done_cb cb,
                        void *ud)
{
    b->ops->suspend(b, s, cb, ud);
}

void sl_backend_release(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud)
{
    b->ops->release(b, agent, cb, ud);
}

void sl_backend_suspensions(sl_backend_t *b, sl_backend_suspensions_cb cb, void *ud)
{
    b->ops->suspensions(b, cb, ud);
}

/* A batch queue call's fields, checked once here for every backend: NULL when valid,
 * else what is wrong (into `err`). */
static const char *batchq_invalid(const sl_batchq_call_t *c, char *err, size_t errlen)
{
    bool with_new = c->op == SL_BATCHQ_BIND;
    bool with_id = c->op != SL_BATCHQ_COUNT;
    bool counts = c->op == SL_BATCHQ_ADD || c->op == SL_BATCHQ_BIND;
    if (c->op < SL_BATCHQ_COUNT || c->op > SL_BATCHQ_RELEASE)
        snprintf(err, errlen, "op: %d is not a batch queue operation", (int)c->op);
    else if (!c->pool || !*c->pool || strlen(c->pool) > 128)
        snprintf(err, errlen, "pool: '%.140s' is not a pool name", c->pool ? c->pool : "");
    else if (with_id && (!c->id || !*c->id || strlen(c->id) > SL_BATCHQ_ID_MAX))
        snprintf(err, errlen, "id: '%.64s' is not 1 to %d bytes", c->id ? c->id : "",
                 SL_BATCHQ_ID_MAX);
    else if (with_new && (!c->new_id || !*c->new_id || strlen(c->new_id) > SL_BATCHQ_ID_MAX))
        snprintf(err, errlen, "new_id: '%.64s' is not 1 to %d bytes",
                 c->new_id ? c->new_id : "", SL_BATCHQ_ID_MAX);
    else if (counts && c->requests < 0)
        snprintf(err, errlen, "requests: %lld is negative", (long long)c->requests);
    else if (c->op == SL_BATCHQ_ADD && c->max_requests < 0)
        snprintf(err, errlen, "max_requests: %lld is negative", (long long)c->max_requests);
    else if (counts && !(c->ttl_s > 0 && c->ttl_s <= 30 * 86400.0))
        snprintf(err, errlen, "ttl_s: %g is not in (0, 30 days]", c->ttl_s);
    else
        return NULL;
    return err;
}

void sl_backend_batch_queue(sl_backend_t *b, const sl_batchq_call_t *c, sl_backend_batchq_cb cb,
                            void *ud)
{
    char err[200];
    if (batchq_invalid(c, err, sizeof err)) {
        cb(SL_EINVAL, false, 0, err, ud);
        return;
    }
    b->ops->batch_queue(b, c, cb, ud);
}

int sl_backend_settings_validate(const sl_backend_settings_t *s, long *bad_pool, char *err,
                                 size_t errlen)
{
    int rc = SL_OK;
    sl_engine_t *e = sl_engine_new(NULL);
    *bad_pool = -1;
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < s->n_roles; i++) {
        rc = sl_engine_set_role(e, s->roles[i].name, s->roles[i].value);
        if (rc != SL_OK) {
            snprintf(err, errlen, "roles.%s: %s", s->roles[i].name, sl_engine_errmsg(e));
            goto done;
        }
    }
    for (size_t i = 0; i < s->n_priorities; i++) {
        rc = sl_engine_set_priority(e, s->priorities[i].name, s->priorities[i].value);
        if (rc != SL_OK) {
            snprintf(err, errlen, "priorities.%s: %s", s->priorities[i].name, sl_engine_errmsg(e));
            goto done;
        }
    }
    for (size_t i = 0; i < s->n_caps; i++) {
        rc = sl_engine_set_caps(e, s->caps[i].holder, s->caps[i].team, &s->caps[i].caps);
        if (rc != SL_OK) {
            snprintf(err, errlen, "caps.%s.%s: %s", s->caps[i].team ? "teams" : "agents",
                     s->caps[i].holder, sl_engine_errmsg(e));
            goto done;
        }
        if (s->caps[i].team && s->caps[i].weight != 0 &&
            (rc = sl_engine_set_team_weight(e, s->caps[i].holder, s->caps[i].weight)) != SL_OK) {
            snprintf(err, errlen, "caps.teams.%s.weight: %s", s->caps[i].holder,
                     sl_engine_errmsg(e));
            goto done;
        }
    }
    for (size_t i = 0; i < s->n_members; i++) {
        rc = sl_engine_set_agent_team(e, s->members[i].agent, s->members[i].team);
        if (rc != SL_OK) {
            snprintf(err, errlen, "caps.teams.%s.members: %s", s->members[i].team,
                     sl_engine_errmsg(e));
            goto done;
        }
    }
    for (size_t i = 0; i < s->n_pools; i++) {
        rc = sl_engine_configure_pool(e, s->pools[i].name, &s->pools[i].config, 1.0);
        if (rc != SL_OK) {
            snprintf(err, errlen, "pools.%s: %s", s->pools[i].name, sl_engine_errmsg(e));
            *bad_pool = (long)i;
            goto done;
        }
    }
done:
    sl_engine_free(e);
    return rc;
}

bool sl_backend_settings_names_caps(const sl_backend_settings_t *s, const char *holder, bool team)
{
    for (size_t i = 0; s && i < s->n_caps; i++)
        if (s->caps[i].team == team && !strcmp(s->caps[i].holder, holder)) return true;
    return false;
}

void sl_backend_settings_clear(sl_backend_settings_t *s)
{
    for (size_t i = 0; i < s->n_pools; i++)
        free(s->pools[i].name);
    for (size_t i = 0; i < s->n_roles; i++)
        free(s->roles[i].name);
    for (size_t i = 0; i < s->n_priorities; i++)
        free(s->priorities[i].name);
    for (size_t i = 0; i < s->n_caps; i++)
        free(s->caps[i].holder);
    for (size_t i = 0; i < s->n_members; i++) {
        free(s->members[i].agent);
        free(s->members[i].team);
    }
    free(s->pools);
    free(s->roles);
    free(s->priorities);
    free(s->caps);
    free(s->members);
    s->pools = NULL;
    s->roles = s->priorities = NULL;
    s->caps = NULL;
    s->members = NULL;
    s->n_pools = s->n_roles = s->n_priorities = s->n_caps = s->n_members = 0;
}

static double clock_read_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sl_backend_clock_init(sl_backend_clock_t *c)
{
    c->start_real_s = clock_read_s(CLOCK_REALTIME);
    c->start_mono_s = clock_read_s(CLOCK_MONOTONIC);
    c->last_now_s = c->start_real_s;
}

double sl_backend_clock_now(sl_backend_clock_t *c)
{
    double now = c->start_real_s + (clock_read_s(CLOCK_MONOTONIC) - c->start_mono_s);
    if (now < c->last_now_s) now = c->last_now_s;
    c->last_now_s = now;
    return now;
}
