/* events.c - the redis backend's clock, its event queue, and what it knows of each pool.
 *
 * Design:
 *  - Events come back in every reply and are delivered from a libevent callback,
 *    never from inside a hiredis callback. Events published by other replicas arrive
 *    on a subscriber connection; those about tickets are delivered, so the replica
 *    holding a waiting request answers it.
 */
#include "redis_internal.h"
#include "../../common/grow.h"

/* ---- time ---- */

double sl__rb_now(sl_backend_t *b)
{
    return sl_backend_clock_now(&((rb_t *)b)->clock);
}

struct timeval sl__rb_tv_of(double s)
{
    if (s < 0) s = 0;
    if (s > 86400) s = 86400;
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - floor(s)) * 1e6)};
    return tv;
}

char *sl__rb_dup_or_null(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- events ---- */

static void forget_queued(rb_t *rb, uint64_t ticket)
{
    for (size_t i = 0; i < rb->n_queued; i++)
        if (rb->queued[i].id == ticket) {
            rb->queued[i] = rb->queued[--rb->n_queued];
            return;
        }
}

void sl__rb_remember_queued(rb_t *rb, uint64_t ticket, int pool)
{
    struct queued_ticket *q = sl_grow(rb->queued, rb->n_queued, &rb->cap_queued, sizeof *q, 64);
    if (!q) return; /* its waiter then waits out its time, as before */
    rb->queued = q;
    rb->queued[rb->n_queued].id = ticket;
    rb->queued[rb->n_queued].pool = pool;
    rb->n_queued++;
}

void sl__rb_queue_event(rb_t *rb, const sl_event_t *ev)
{
    if (ev->ticket && (ev->kind == SL_EV_GRANTED || ev->kind == SL_EV_TICKET_CANCELLED ||
                       ev->kind == SL_EV_TICKET_EXPIRED || ev->kind == SL_EV_TICKET_REJECTED))
        forget_queued(rb, ev->ticket);
    qevent_t *p = sl_grow(rb->events, rb->n_events, &rb->cap_events, sizeof *p, 64);
    if (!p) return; /* events are notifications; the state in Redis stays authoritative */
    rb->events = p;
    qevent_t *q = &rb->events[rb->n_events++];
    q->ev = *ev;
    q->ev.pool = q->pool = sl__rb_dup_or_null(ev->pool);
    q->ev.agent = q->agent = sl__rb_dup_or_null(ev->agent);
    q->ev.reason = q->reason = sl__rb_dup_or_null(ev->reason);
    q->ev.alert = q->alert = sl__rb_dup_or_null(ev->alert);
    event_active(rb->flush_ev, EV_TIMEOUT, 0);
}

void sl__rb_on_flush(evutil_socket_t fd, short what, void *ud)
{
    rb_t *rb = ud;
    (void)fd;
    (void)what;
    /* Handlers may start operations that queue further events: index, not pointer. */
    for (size_t i = 0; i < rb->n_events; i++) {
        sl_event_t ev = rb->events[i].ev;
        if (rb->base.event_cb) rb->base.event_cb(&ev, rb->base.event_ud);
    }
    for (size_t i = 0; i < rb->n_events; i++) {
        free(rb->events[i].pool);
        free(rb->events[i].agent);
        free(rb->events[i].reason);
        free(rb->events[i].alert);
    }
    rb->n_events = 0;
}


/* What the local engine spends is charged to Redis when it returns: grants less refunds. */
static void account_local(rb_t *rb, const sl_event_t *ev)
{
    rpool_t *p = ev->pool ? sl__rb_pool_by_name(rb, ev->pool) : NULL;
    if (!p) return;
    double in = 0, out = 0, req = 0;
    switch (ev->kind) {
    case SL_EV_GRANTED:
        in = (double)ev->input_tokens, out = (double)ev->output_tokens, req = 1;
        break;
    case SL_EV_SETTLED:
        in = -(double)ev->adjust_input_tokens, out = -(double)ev->adjust_output_tokens;
        break;
    case SL_EV_CANCELLED:
    case SL_EV_UNCLAIMED:
        in = -(double)ev->input_tokens, out = -(double)ev->output_tokens, req = -1;
        break;
    default:
        return;
    }
    p->spent[SL_BUCKET_INPUT] += in;
    p->spent[SL_BUCKET_OUTPUT] += out;
    p->spent[SL_BUCKET_REQUESTS] += req;
    p->spent[SL_BUCKET_TOKENS] += in + out;
}

void sl__rb_on_local_event(const sl_event_t *ev, void *ud)
{
    account_local(ud, ev);
    sl__rb_queue_event(ud, ev);
}

void sl__rb_note_margin(rb_t *rb, const sl_event_t *ev)
{
    rpool_t *p = ev->kind == SL_EV_MARGIN && ev->pool ? sl__rb_pool_by_name(rb, ev->pool) : NULL;
    if (p) p->margin = ev->margin;
}

void sl__rb_queue_reply_events(rb_t *rb, const sl__rreply_t *rep)
{
    sl_event_t ev;
    for (size_t i = 0; rep->events && i < rep->events->elements; i++) {
        if (!sl__rreply_event(rep, i, &ev)) continue;
        sl__rb_note_margin(rb, &ev);
        sl__rb_queue_event(rb, &ev);
    }
}

void sl__rb_set_alert(rb_t *rb, bool active)
{
    if (rb->alert_on == active) return;
    rb->alert_on = active;
    sl_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = SL_EV_ALERT;
    ev.now_s = sl__rb_now(&rb->base);
    ev.alert = "backend_unavailable";
    ev.active = active;
    sl__rb_queue_event(rb, &ev);
    sl__backend_log(active ? SL_BACKEND_LOG_WARN : SL_BACKEND_LOG_INFO, "redis %s:%d %s", rb->opt.host, rb->opt.port,
            active ? "unavailable" : "available again");
}

/* ---- pools ---- */

rpool_t *sl__rb_pool_by_name(rb_t *rb, const char *name)
{
    for (int i = 0; i < rb->n_pools; i++)
        if (strcmp(rb->pools[i].name, name) == 0) return &rb->pools[i];
    return NULL;
}

rpool_t *sl__rb_pool_by_id(rb_t *rb, uint64_t id)
{
    int no = sl__rid_pool(id);
    for (int i = 0; i < rb->n_pools; i++)
        if (rb->pools[i].no == no && no) return &rb->pools[i];
    return NULL;
}

void sl__rb_arm_wake(rb_t *rb)
{
    double at = INFINITY;
    for (int i = 0; i < rb->n_pools; i++)
        if (rb->pools[i].wake_s < at) at = rb->pools[i].wake_s;
    if (!isfinite(at) || !rb->up) {
        evtimer_del(rb->wake);
        return;
    }
    struct timeval tv = sl__rb_tv_of(at - (sl__rb_now(&rb->base) + rb->offset_s) + 0.001);
    evtimer_add(rb->wake, &tv);
}

/* The alert window during which the buckets refill from a cold start (sluice.lua's COLD_S). */
#define COLD_S 60.0

void sl__rb_update_lost_alert(rb_t *rb, rpool_t *p, double redis_now)
{
    bool active = p->lost_until_s > redis_now;
    if (active == p->lost_alert) return;
    p->lost_alert = active;
    sl_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = SL_EV_ALERT;
    ev.now_s = sl__rb_now(&rb->base);
    ev.pool = p->name;
    ev.alert = "backend_state_lost";
    ev.active = active;
    sl__rb_queue_event(rb, &ev);
}

/* Follows the pool's epoch: an epoch other than the one this replica knew means Redis
 * lost the pool's state (restarted empty, flushed, failed over to a copy that missed
 * writes). The library then starts cold and sets the alert window; a change this
 * replica sees first raises the alert here for as long. */
void sl__rb_note_state(rb_t *rb, rpool_t *p, const sl__rreply_t *rep)
{
    if (!p || !(rep->epoch > 0)) return;
    double redis_now = sl__rb_now(&rb->base) + rb->offset_s;
    if (rep->lost_until_s > p->lost_until_s) p->lost_until_s = rep->lost_until_s;
    if (p->epoch > 0 && rep->epoch != p->epoch) {
        sl__backend_log(SL_BACKEND_LOG_WARN,
                "redis: pool %s lost its state (epoch %.0f, now %.0f): cold start, "
                "alert backend_state_lost",
                p->name, p->epoch, rep->epoch);
        if (p->lost_until_s < redis_now + COLD_S) p->lost_until_s = redis_now + COLD_S;
        /* Its queue went with it: every ticket queued here before now has ended. */
        int idx = (int)(p - rb->pools);
        for (size_t i = rb->n_queued; i-- > 0;) {
            if (rb->queued[i].pool != idx) continue;
            sl_event_t ev;
            memset(&ev, 0, sizeof ev);
            ev.kind = SL_EV_TICKET_EXPIRED;
            ev.now_s = sl__rb_now(&rb->base);
            ev.pool = p->name;
            ev.ticket = rb->queued[i].id;
            sl__rb_queue_event(rb, &ev); /* and forgets it */
        }
    }
    p->epoch = rep->epoch;
    if (rep->next_n > p->next_n) p->next_n = rep->next_n;
    if (p->next_n > rb->max_next_n) rb->max_next_n = p->next_n;
    sl__rb_update_lost_alert(rb, p, redis_now);
}

/* What the pool's history looked like to this replica, for the library to compare:
 * `ep` (a pool gone from Redis is then `state_lost`, not unknown) and `hw`. */
void sl__rb_add_history(sl__rcmd_t *cmd, const rpool_t *p)
{
    if (!p || !(p->epoch > 0)) return;
    sl__rcmd_num(cmd, SL_FA(ep), p->epoch);
    sl__rcmd_num(cmd, SL_FA(hw), p->next_n);
}

void sl__rb_note_wake(rb_t *rb, const char *pool, const sl__rreply_t *rep)
{
    rpool_t *p = pool ? sl__rb_pool_by_name(rb, pool) : NULL;
    if (!p) return;
    p->wake_s = rep->wake_s;
    sl__rb_note_state(rb, p, rep);
    sl__rb_arm_wake(rb);
}
