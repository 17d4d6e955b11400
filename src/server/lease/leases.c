/* leases.c - the lease API: ask, long-poll on tickets, settle, extend, cancel.
 *
 * Waiting: a request or ticket poll with `wait` > 0 whose answer is QUEUED becomes a
 * waiter keyed by its ticket. The ticket is held (it never idles out while someone
 * waits), a timer ends the wait, and the client's socket is watched: a client that
 * goes away cancels its ticket (refunding a grant it can no longer receive). Grants
 * come from engine events, never from polling: the backend's GRANTED event for the
 * ticket makes the waiter claim its lease and answer 200 at once.
 */
#include "lease.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define MSG_LEN 320

/* The shortest lease or extension: a lease must outlive the call that asked for it
 * (`"ttl": 1e-300` was reaped before its agent could use it). */
#define MIN_LEASE_TTL_S 1.0

int sl__parse_id(const char *s, char prefix, uint64_t *out)
{
    if (s[0] != prefix || s[1] != '_' || s[2] < '1' || s[2] > '9') return -1;
    uint64_t v = 0;
    for (const char *p = s + 2; *p; p++) {
        if (*p < '0' || *p > '9' || p - s > 21) return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static json_t *id_json(char prefix, uint64_t id)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%c_%" PRIu64, prefix, id);
    return json_string(buf);
}

json_t *sl__grant_json(const sl_decision_t *d, const char *pool)
{
    json_t *j =
        json_pack("{s:s,s:o,s:s,s:f,s:f,s:f,s:{s:I,s:I,s:I},s:f,s:b}", "status", "granted", "lease",
                  id_json('l', d->lease), "pool", pool ? pool : "", "expires_at", d->expires_at,
                  "ttl", d->ttl_s, "weight", d->weight, "charged", "input_tokens",
                  (json_int_t)d->charged_input_tokens, "output_tokens",
                  (json_int_t)d->charged_output_tokens, "requests", (json_int_t)d->charged_requests,
                  "waited", d->waited_s, "cache_penalty", d->cache_penalty);
    if (j && d->ticket) json_object_set_new(j, "ticket", id_json('t', d->ticket));
    if (j && d->replayed) json_object_set_new(j, "replayed", json_true());
    return j;
}

/* Adds the key of a pool of several keys (its name, never its secret). Returns `j`. */
static json_t *with_key(json_t *j, const char *key)
{
    if (j && key) json_object_set_new(j, "key", json_string(key));
    return j;
}

static json_t *queued_json(const sl_decision_t *d, const char *pool, const char *key)
{
    json_t *j = json_pack("{s:s,s:o,s:f,s:I,s:f,s:s}", "status", "queued", "ticket",
                          id_json('t', d->ticket), "eta", d->eta_s, "position",
                          (json_int_t)d->position, "weight", d->weight, "pool", pool ? pool : "");
    if (j) with_key(j, key);
    if (j && d->limited_by) json_object_set_new(j, "limited_by", json_string(d->limited_by));
    if (j && d->replayed) json_object_set_new(j, "replayed", json_true());
    return j;
}

/* The GRANT body written directly (the request path's hot spot); pools whose name would
 * need escaping, and numbers JSON cannot hold, go through jansson. */
static void reply_grant(sl_call_t *call, const sl_decision_t *d)
{
    sl_jbuf_t b = {.len = 0};
    const char *key = sl__key_name(&call->srv->config, call->pool);
    if (!sl__name_ok(call->pool, 128) || !isfinite(d->expires_at) || !isfinite(d->weight) ||
        !isfinite(d->waited_s) || !isfinite(d->ttl_s)) {
        sl__reply_json(call, 200, with_key(sl__grant_json(d, call->pool), key));
        return;
    }
    sl__jb_lit(&b, "{\"status\":\"granted\",\"lease\":\"l_");
    sl__jb_u64(&b, d->lease);
    sl__jb_lit(&b, "\",\"pool\":\"");
    sl__jb_lit(&b, call->pool);
    if (key) { /* a key name is POOL:KEY's tail: the pool name's characters, no escaping */
        sl__jb_lit(&b, "\",\"key\":\"");
        sl__jb_lit(&b, key);
    }
    sl__jb_key_seconds(&b, "\",\"expires_at\":", d->expires_at);
    sl__jb_key_seconds(&b, ",\"ttl\":", d->ttl_s);
    sl__jb_key_num(&b, ",\"weight\":", d->weight);
    sl__jb_key_i64(&b, ",\"charged\":{\"input_tokens\":", d->charged_input_tokens);
    sl__jb_key_i64(&b, ",\"output_tokens\":", d->charged_output_tokens);
    sl__jb_key_i64(&b, ",\"requests\":", d->charged_requests);
    sl__jb_key_seconds(&b, "},\"waited\":", d->waited_s);
    sl__jb_lit(&b, d->cache_penalty ? ",\"cache_penalty\":true" : ",\"cache_penalty\":false");
    if (d->ticket) {
        sl__jb_lit(&b, ",\"ticket\":\"t_");
        sl__jb_u64(&b, d->ticket);
        sl__jb_lit(&b, "\"");
    }
    if (d->replayed) sl__jb_lit(&b, ",\"replayed\":true");
    sl__jb_lit(&b, "}\n");
    if (b.overflow) {
        sl__reply_json(call, 200, with_key(sl__grant_json(d, call->pool), key));
        return;
    }
    sl__reply_text(call, 200, b.buf, b.len);
}

/* The lease's agent, pool and id for the access log; the model it named for usage. */
static void note_decision(sl_call_t *call, const sl_decision_t *d)
{
    const char *model = json_string_value(json_object_get(call->body, "model"));
    sl_owner_t *o = NULL;
    /* The lease's events come after this answer on the memory backend: the record is
     * made here when needed. A replayed grant may name a lease already ended: left alone. */
    if (model && d->status == SL_GRANTED && !d->replayed)
        o = sl__owner_obtain(&call->srv->lease_owner, d->lease);
    else if (model && d->status == SL_QUEUED && !d->replayed)
        o = sl__owner_obtain(&call->srv->ticket_owner, d->ticket);
    const char *agent = json_string_value(json_object_get(call->body, "agent"));
    if (o && !o->agent[0] && agent) { /* made here: its owner as the event will say */
        snprintf(o->agent, sizeof(o->agent), "%s", agent);
        snprintf(o->pool, sizeof(o->pool), "%s", call->pool);
    }
    if (o && model) snprintf(o->model, sizeof(o->model), "%s", model);
    sl__access_note(call, agent, call->pool, d->status == SL_GRANTED ? d->lease : 0);
}

static void answer_decision(sl_call_t *call, const sl_decision_t *d)
{
    if (!call->req && d->status == SL_GRANTED && !d->replayed) {
        /* The client left before this answer (a waiter between its grant and now, or a
         * request closed while a networked backend decided): the lease goes back. */
        sl_backend_cancel(call->srv->backend, d->lease, NULL, NULL);
        sl__call_free(call);
        return;
    }
    note_decision(call, d);
    switch (d->status) {
    case SL_GRANTED:
        reply_grant(call, d);
        return;
    case SL_QUEUED:
        sl__reply_json(call, 202,
                       queued_json(d, call->pool, sl__key_name(&call->srv->config, call->pool)));
        return;
    case SL_REJECTED:
        sl__reply_rejected_by(call, d->reason, d->limited_by, d->retry_after_s, d->retry_at);
        return;
    }
    sl__reply_error(call, 500, "internal", "backend: unknown decision status %d", (int)d->status);
}

/* ---- waiters ---------------------------------------------------------------------- */

/* The long-polls waiting on a ticket, in the lease API's slot (features.def); NULL until
 * the first one. */
static sl_lease_api_t *state_of(const sl_server_t *srv)
{
    return srv->slot[SL_FEATURE_ID_lease];
}

static void end_wait(sl_call_t *call, bool unhold)
{
    sl_server_t *srv = call->srv;
    if (call->mode != SL_CALL_WAITING) return;
    sl_lease_api_t *ls = state_of(srv); /* made when the wait began */
    if (sl__idmap_get(&ls->waiters, call->ticket) == call)
        sl__idmap_del(&ls->waiters, call->ticket);
    ls->n_waiters--;
    call->mode = SL_CALL_PLAIN;
    if (call->wait_timer) event_del(call->wait_timer);
    call->gone = NULL;
    if (unhold) sl_backend_ticket_hold(srv->backend, call->ticket, false, NULL, NULL);
}

static void on_poll_answer(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    if (rc != SL_OK) {
        sl__reply_engine_error(call, rc, errmsg);
        return;
    }
    answer_decision(call, d);
}

static void on_wait_timeout(evutil_socket_t fd, short what, void *ud)
{
    sl_call_t *call = ud;
    (void)fd;
    (void)what;
    uint64_t ticket = call->ticket;
    end_wait(call, true);
    sl_backend_ticket_poll(call->srv->backend, ticket, on_poll_answer, call);
}

static void on_waiter_gone(sl_call_t *call)
{
    sl_server_t *srv = call->srv;
    uint64_t ticket = call->ticket;
    end_wait(call, false);
    sl__call_drop(call);
    /* The place goes; a grant that raced the close is refunded by the engine. */
    sl_backend_ticket_cancel(srv->backend, ticket, NULL, NULL);
}

static void start_wait(sl_call_t *call, uint64_t ticket, double wait_s)
{
    sl_server_t *srv = call->srv;
    sl_lease_api_t *ls = sl__slot_make(srv, SL_FEATURE_ID_lease, sizeof(*ls));
    sl_call_t *earlier = ls ? sl__idmap_get(&ls->waiters, ticket) : NULL;
    if (earlier) {
        /* Two clients on one ticket: the newer waits, the older gets the state now. */
        end_wait(earlier, false);
        sl_backend_ticket_poll(srv->backend, ticket, on_poll_answer, earlier);
    }
    if (!ls || sl__idmap_put(&ls->waiters, ticket, call) < 0) {
        sl_backend_ticket_poll(srv->backend, ticket, on_poll_answer, call);
        return;
    }
    call->mode = SL_CALL_WAITING;
    call->ticket = ticket;
    call->started_s = sl_backend_now(srv->backend);
    ls->n_waiters++;
    if (!call->wait_timer) call->wait_timer = evtimer_new(srv->base, on_wait_timeout, call);
    struct timeval tv = {.tv_sec = (time_t)wait_s,
                         .tv_usec = (suseconds_t)((wait_s - floor(wait_s)) * 1e6)};
    if (!call->wait_timer || evtimer_add(call->wait_timer, &tv) < 0) {
        end_wait(call, false);
        sl_backend_ticket_poll(srv->backend, ticket, on_poll_answer, call);
        return;
    }
    sl__call_watch_close(call, on_waiter_gone);
    sl_backend_ticket_hold(srv->backend, ticket, true, NULL, NULL);
}

void sl__waiters_on_event(sl_server_t *srv, const sl_event_t *ev)
{
    if (!ev->ticket) return;
    sl_lease_api_t *ls = state_of(srv);
    sl_call_t *call = ls ? sl__idmap_get(&ls->waiters, ev->ticket) : NULL;
    if (!call) return;
    switch (ev->kind) {
    case SL_EV_GRANTED:
        end_wait(call, false);
        /* Claims the lease (an unclaimed grant would be refunded after claim_timeout_s). */
        sl_backend_ticket_poll(srv->backend, ev->ticket, on_poll_answer, call);
        break;
    case SL_EV_TICKET_REJECTED:
        end_wait(call, false);
        sl__reply_rejected(call, ev->reason, ev->retry_at - ev->now_s, ev->retry_at);
        break;
    case SL_EV_TICKET_CANCELLED:
        end_wait(call, false);
        sl__reply_error(call, 409, "already_settled", "ticket: t_%" PRIu64 " was cancelled",
                        ev->ticket);
        break;
    case SL_EV_TICKET_EXPIRED:
        end_wait(call, false);
        sl__reply_error(call, 404, "not_found", "ticket: t_%" PRIu64 " expired", ev->ticket);
        break;
    default:
        break;
    }
}

static void shutdown_waiter(uint64_t key, void *val, void *ud)
{
    sl_call_t *call = val;
    (void)key;
    (void)ud;
    end_wait(call, true);
    sl__reply_error(call, 503, "shutting_down",
                    "server: sluiced is shutting down; retry elsewhere");
}

size_t sl__waiters_count(const sl_server_t *srv)
{
    return state_of(srv) ? state_of(srv)->n_waiters : 0;
}

void sl__waiters_free(sl_server_t *srv)
{
    sl_lease_api_t *ls = state_of(srv);
    if (!ls) return;
    sl__idmap_free(&ls->waiters);
    free(ls);
    srv->slot[SL_FEATURE_ID_lease] = NULL;
}

void sl__waiters_shutdown(sl_server_t *srv)
{
    if (state_of(srv)) sl__idmap_foreach(&state_of(srv)->waiters, shutdown_waiter, NULL);
}

/* ---- POST /v1/leases -------------------------------------------------------------- */

static void on_lease_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    if (rc != SL_OK) {
        sl__reply_engine_error(call, rc, errmsg);
        return;
    }
    sl_bus_event_t ev = {
        .kind = SL_BUS_DECISION,
        .decision = {.task = json_string_value(json_object_get(call->body, "task")), .d = d},
    };
    sl__bus_publish(call->srv, &ev);
    if (!call->req && d->status == SL_QUEUED && !d->replayed) {
        /* Closed while a networked backend decided: nobody will wait on the place. */
        sl_backend_ticket_cancel(call->srv->backend, d->ticket, NULL, NULL);
        sl__call_free(call);
        return;
    }
    if (d->status == SL_QUEUED && call->wait_s > 0 && !call->srv->shutting_down) {
        start_wait(call, d->ticket, call->wait_s);
        return;
    }
    answer_decision(call, d);
}

static const char *const lease_fields[] = {
    "agent", "pool", "input_tokens", "cached_tokens", "output_tokens",
    "role",  "task", "unblocks",     "priority",      "cache_key",
    "wait",  "ttl",  "request_id",   "model",         "cache_prefix_hash",
    "max_wait", "cap_output", "cache_ttl_s", NULL};

/* Fills `r` and `wait_s` from the body. Returns 0, or -1 with `msg` naming the field. */
static int parse_lease_request(const json_t *b, sl_request_t *r, double *wait_s, char *msg,
                               size_t n)
{
    if (sl__json_check_fields(b, lease_fields, msg, n) < 0 ||
        sl__json_get_string(b, "agent", true, 128, true, &r->agent, msg, n) < 0 ||
        sl__json_get_string(b, "pool", false, 128, false, &r->pool, msg, n) < 0 ||
        sl__json_get_int(b, "input_tokens", true, &r->input_tokens, msg, n) < 0 ||
        sl__json_get_int(b, "cached_tokens", false, &r->cached_tokens, msg, n) < 0 ||
        sl__json_get_int(b, "output_tokens", true, &r->output_tokens, msg, n) < 0 ||
        sl__json_get_string(b, "role", false, 64, false, &r->role, msg, n) < 0 ||
        sl__json_get_string(b, "task", false, 128, false, &r->task, msg, n) < 0 ||
        sl__json_get_int(b, "unblocks", false, &r->unblocks, msg, n) < 0 ||
        sl__json_get_string(b, "priority", false, 64, false, &r->priority, msg, n) < 0 ||
        sl__json_get_string(b, "cache_key", false, 256, false, &r->cache_key, msg, n) < 0 ||
        sl__json_get_number(b, "wait", false, 0, false, wait_s, msg, n) < 0 ||
        sl__json_get_number(b, "max_wait", false, 0, true, &r->max_wait_s, msg, n) < 0 ||
        sl__json_get_number(b, "ttl", false, MIN_LEASE_TTL_S, false, &r->ttl_s, msg, n) < 0 ||
        sl__json_get_string(b, "request_id", false, 128, false, &r->request_id, msg, n) < 0 ||
        sl__json_get_string(b, "model", false, 128, false, &r->model, msg, n) < 0 ||
        sl__json_get_string(b, "cache_prefix_hash", false, 128, false, &r->cache_prefix_hash, msg,
                            n) < 0 ||
        sl__json_get_bool(b, "cap_output", &r->output_capped, msg, n) < 0 ||
        sl__json_get_number(b, "cache_ttl_s", false, 0, false, &r->cache_ttl_s, msg, n) < 0)
        return -1;
    return 0;
}

/* The longest ETA the request is queued for (sl_request_t.max_wait_s, 0: the pool's). A
 * client that can wait (one that saved a checkpoint) asks to be held rather than rejected
 * for an ETA up to its `max_wait`, at most the server's max_hold_s. It only ever extends
 * the pool's max_queue_wait_s: a request queued without it is queued with it, and one
 * that will give up sooner gives up its ticket, as it does today. */
static double held_wait_s(const sl_call_t *call, const sl_request_t *r)
{
    if (!(r->max_wait_s > 0)) return 0;
    double asked_s = fmin(r->max_wait_s, call->srv->config.max_hold_s);
    const sl_pool_config_t *pc = sl_config_pool(&call->srv->config, r->pool ? r->pool : "default");
    return pc && asked_s <= pc->max_queue_wait_s ? 0 : asked_s;
}

/* Answers a refusal in the lease API's shape: a 429 as a rejection (Retry-After, and for
 * the agents bound the `error` naming it), anything else as an error. */
static void reply_refusal(sl_call_t *call, const sl_refusal_t *ref)
{
    if (ref->status != 429) {
        sl__reply_error(call, ref->status, ref->type, "%s", ref->message);
        return;
    }
    double now = sl_backend_now(call->srv->backend);
    if (strcmp(ref->type, "too_many_agents") != 0) {
        sl__reply_rejected(call, ref->type, ref->retry_after_s, now + ref->retry_after_s);
        return;
    }
    if (call->req) {
        char h[32];
        snprintf(h, sizeof(h), "%.0f", ref->retry_after_s < 1 ? 1 : ref->retry_after_s);
        sl_hreq_add_header(call->req, "Retry-After", h);
    }
    sl__reply_json(call, 429,
                   json_pack("{s:s,s:s,s:f,s:f,s:{s:s,s:s}}", "status", "rejected", "reason",
                             ref->type, "retry_after", ref->retry_after_s, "retry_at",
                             now + ref->retry_after_s, "error", "type", ref->type, "message",
                             ref->message));
}

/* The request goes to the backend once its role is settled (the body's, or the task's).
 * `task_role` is the task's registered role, or NULL when the request names no known task. */
static void request_with_role(sl_call_t *call, sl_request_t *r, double wait_s,
                              const char *task_role)
{
    sl_refusal_t ref;
    if (sl__admit(call, SL_DIALECT_LEASE_API, r, task_role, &ref) < 0) {
        reply_refusal(call, &ref);
        return;
    }
    call->wait_s = fmin(wait_s, call->srv->config.max_wait_s);
    r->max_wait_s = held_wait_s(call, r);
    sl__keys_request(call->srv, r, call->pool, sizeof(call->pool), on_lease_decision, call);
}

void sl__handle_lease_post(sl_call_t *call)
{
    char msg[MSG_LEN];
    sl_request_t r = {0};
    double wait_s = 0;
    if (parse_lease_request(call->body, &r, &wait_s, msg, sizeof(msg)) < 0) {
        sl__reply_error(call, 400, "invalid_request", "%s", msg);
        return;
    }
    const char *pool = r.pool ? r.pool : "default";
    sl_refusal_t ref;
    r.pool = pool;
    if (sl__admit_claims(call, SL_DIALECT_LEASE_API, &r, &ref) < 0) {
        reply_refusal(call, &ref);
        return;
    }
    snprintf(call->pool, sizeof(call->pool), "%s", pool);
    /* A task in the graph decides the role (and unblocks): the backend's request does. */
    request_with_role(call, &r, wait_s, NULL);
}

/* ---- tickets ---------------------------------------------------------------------- */

/* Parses ?wait=S. Returns 0, or -1 after answering 400. */
static int query_wait(sl_call_t *call, const char *query, double *wait_s)
{
    struct evkeyvalq q;
    int rc = 0;
    *wait_s = 0;
    if (!query || !*query) return 0;
    if (evhttp_parse_query_str(query, &q) < 0) {
        sl__reply_error(call, 400, "invalid_request", "query: '%.64s' cannot be parsed", query);
        return -1;
    }
    const char *w = evhttp_find_header(&q, "wait");
    if (w) {
        char *end;
        errno = 0;
        double v = strtod(w, &end);
        if (errno || end == w || *end || !isfinite(v) || v < 0 || v > 1e9) {
            sl__reply_error(call, 400, "invalid_request", "wait: '%.64s' is not a number >= 0", w);
            rc = -1;
        } else {
            *wait_s = fmin(v, call->srv->config.max_wait_s);
        }
    }
    evhttp_clear_headers(&q);
    return rc;
}

/* Answers 403 when a non-admin token touches another agent's lease or ticket. The owner
 * known here (from this replica's events) is checked now; the caller is also passed to
 * the backend, which checks it against the owner in the shared state (another replica's
 * grant). */
static int check_owner(sl_call_t *call, const sl_owner_t *o, const char *what, const char *id)
{
    if (!o || sl__token_may_act_as(call, o->agent)) {
        const sl_token_rule_t *t = call->admin ? NULL : call->token;
        sl_backend_actor_t a = {t ? t->agent : NULL, t ? t->agent_prefix : NULL};
        sl_backend_set_actor(call->srv->backend, &a);
        return 0;
    }
    sl__reply_error(call, 403, "forbidden", "%s: %s belongs to another agent", what, id);
    return -1;
}

static void reply_forbidden(sl_call_t *call, char prefix, uint64_t id)
{
    sl__reply_error(call, 403, "forbidden", "%s: %c_%" PRIu64 " belongs to another agent",
                    prefix == 'l' ? "lease" : "ticket", prefix, id);
}

/* Ticket errors in wire ids ("t_7"); other codes keep the engine's message. */
static void reply_ticket_error(sl_call_t *call, int rc, const char *errmsg)
{
    if (rc == SL_BACKEND_EFORBIDDEN)
        reply_forbidden(call, 't', call->ticket);
    else if (rc == SL_ENOTFOUND)
        sl__reply_error(call, 404, "not_found", "ticket: t_%" PRIu64 " is not known", call->ticket);
    else if (rc == SL_EALREADY)
        sl__reply_error(call, 409, "already_settled",
                        "ticket: t_%" PRIu64 " is no longer queued (granted, cancelled or expired)",
                        call->ticket);
    else
        sl__reply_engine_error(call, rc, errmsg);
}

static void on_ticket_cancel(int rc, double value, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    (void)value;
    if (rc != SL_OK) {
        reply_ticket_error(call, rc, errmsg);
        return;
    }
    sl__reply_json(call, 200, json_pack("{s:s}", "status", "cancelled"));
}

static void on_ticket_poll(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    if (rc == SL_EALREADY) {
        const sl_owner_t *o = sl__idmap_get(&call->srv->ticket_owner, call->ticket);
        if (o && o->rejected) {
            double now = sl_backend_now(call->srv->backend);
            sl__reply_rejected(call, "queue_wait_exceeds_max", o->retry_at - now, o->retry_at);
        } else {
            sl__reply_error(call, 404, "not_found",
                            "ticket: t_%" PRIu64 " is no longer queued (cancelled or expired)",
                            call->ticket);
        }
        return;
    }
    if (rc != SL_OK) {
        reply_ticket_error(call, rc, errmsg);
        return;
    }
    if (d->status == SL_QUEUED && call->wait_s > 0 && !call->srv->shutting_down) {
        start_wait(call, d->ticket, call->wait_s);
        return;
    }
    answer_decision(call, d);
}

void sl__handle_ticket(sl_call_t *call, const char *id, int method, const char *query)
{
    uint64_t ticket;
    if (sl__parse_id(id, 't', &ticket) < 0) {
        sl__reply_error(call, 404, "not_found", "ticket: '%.64s' is not a ticket id", id);
        return;
    }
    const sl_owner_t *o = sl__idmap_get(&call->srv->ticket_owner, ticket);
    sl_backend_t *backend = call->srv->backend; /* the call may be freed by its answer */
    if (check_owner(call, o, "ticket", id) < 0) return;
    call->ticket = ticket;
    if (o) snprintf(call->pool, sizeof(call->pool), "%s", o->pool);
    if (method == SL_HTTP_DELETE) {
        sl_backend_ticket_cancel(call->srv->backend, ticket, on_ticket_cancel, call);
    } else if (query_wait(call, query, &call->wait_s) == 0) {
        sl_backend_ticket_poll(call->srv->backend, ticket, on_ticket_poll, call);
    }
    sl_backend_set_actor(backend, NULL);
}

/* ---- settle / extend / cancel ----------------------------------------------------- */

/* Lease errors in wire ids ("l_7"); other codes keep the engine's message. */
static void reply_lease_error(sl_call_t *call, int rc, const char *errmsg)
{
    uint64_t id = call->lease;
    switch (rc) {
    case SL_BACKEND_EFORBIDDEN:
        reply_forbidden(call, 'l', id);
        return;
    case SL_ENOTFOUND:
        sl__reply_error(call, 404, "not_found", "lease: l_%" PRIu64 " is not known", id);
        return;
    case SL_EALREADY:
        sl__reply_error(call, 409, "already_settled",
                        "lease: l_%" PRIu64 " was already settled or cancelled", id);
        return;
    case SL_EEXPIRED:
        sl__reply_error(call, 410, "lease_expired",
                        "lease: l_%" PRIu64 " expired and was reaped (no refund)", id);
        return;
    default:
        sl__reply_engine_error(call, rc, errmsg);
    }
}

#define HEADERS_IGNORED_REASON                                                                     \
    "this token may not resync pools from rate-limit headers (needs `resync: true` on the "      \
    "token, or the admin token); the usage was applied without them"

/* What a settle's usage is counted as, kept from before the settle (which forgets the
 * lease's owner) to its answer. */
typedef struct settle_note {
    sl_owner_t owner;
    sl_settle_t tokens; /* the counts only */
} settle_note_t;

static void on_settled(int rc, const sl_settle_result_t *r, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    settle_note_t *note = call->owner;
    call->owner = NULL;
    if (note && rc == SL_OK) {
        sl_bus_event_t used = {.kind = SL_BUS_USAGE,
                               .usage = {note->owner.agent, note->owner.pool,
                                         note->owner.model[0] ? note->owner.model : NULL,
                                         &note->tokens}};
        sl__bus_publish(call->srv, &used);
    }
    free(note);
    if (rc != SL_OK) {
        reply_lease_error(call, rc, errmsg);
        return;
    }
    sl_jbuf_t b = {.len = 0};
    sl__jb_key_i64(&b,
                   "{\"status\":\"settled\",\"adjust\":{\"input_tokens\":", r->adjust_input_tokens);
    sl__jb_key_i64(&b, ",\"output_tokens\":", r->adjust_output_tokens);
    sl__jb_key_num(&b, "},\"estimate_error\":", r->estimate_error);
    sl__jb_lit(&b, r->not_counted ? ",\"counted\":false" : ",\"counted\":true");
    if (call->headers_ignored) {
        sl__jb_key_i64(&b, ",\"headers_ignored\":{\"count\":", (int64_t)call->headers_ignored);
        sl__jb_lit(&b, ",\"reason\":\"" HEADERS_IGNORED_REASON "\"}");
    }
    sl__jb_lit(&b, "}\n");
    sl__reply_text(call, 200, b.buf, b.len);
}

static void on_extended(int rc, double expires_at, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    if (rc != SL_OK) {
        reply_lease_error(call, rc, errmsg);
        return;
    }
    sl__reply_json(call, 200,
                   json_pack("{s:s,s:f}", "status", "extended", "expires_at", expires_at));
}

static void on_cancelled(int rc, double value, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    (void)value;
    if (rc != SL_OK) {
        reply_lease_error(call, rc, errmsg);
        return;
    }
    sl__reply_json(call, 200, json_pack("{s:s}", "status", "cancelled"));
}

static const char *const settle_fields[] = {"input_tokens",
                                            "output_tokens",
                                            "cache_creation_input_tokens",
                                            "cache_read_input_tokens",
                                            "cache_creation_1h_input_tokens",
                                            "got_429",
                                            "retry_after",
                                            "headers",
                                            "failure_signature",
                                            "spend_cap",
                                            "failed",
                                            NULL};

#define MAX_HEADERS 64

static void handle_settle(sl_call_t *call, uint64_t lease)
{
    char msg[MSG_LEN];
    const json_t *b = call->body;
    sl_settle_t s = {.retry_after_s = -1};
    const char *names[MAX_HEADERS], *values[MAX_HEADERS];
    char clamped[MAX_HEADERS][24];
    int status = 400;
    char *lower = NULL;
    if (sl__json_check_fields(b, settle_fields, msg, sizeof(msg)) < 0 ||
        sl__json_get_int(b, "input_tokens", true, &s.input_tokens, msg, sizeof(msg)) < 0 ||
        sl__json_get_int(b, "output_tokens", true, &s.output_tokens, msg, sizeof(msg)) < 0 ||
        sl__json_get_int(b, "cache_creation_input_tokens", false, &s.cache_creation_input_tokens,
                         msg, sizeof(msg)) < 0 ||
        sl__json_get_int(b, "cache_read_input_tokens", false, &s.cache_read_input_tokens, msg,
                         sizeof(msg)) < 0 ||
        sl__json_get_int(b, "cache_creation_1h_input_tokens", false,
                         &s.cache_creation_1h_input_tokens, msg, sizeof(msg)) < 0 ||
        sl__json_get_bool(b, "got_429", &s.got_429, msg, sizeof(msg)) < 0 ||
        sl__json_get_bool(b, "spend_cap", &s.spend_cap, msg, sizeof(msg)) < 0 ||
        sl__json_get_bool(b, "failed", &s.failed, msg, sizeof(msg)) < 0 ||
        sl__json_get_number(b, "retry_after", false, 0, false, &s.retry_after_s, msg, sizeof(msg)) <
            0 ||
        sl__json_get_string(b, "failure_signature", false, 256, false, &s.failure_signature, msg,
                            sizeof(msg)) < 0)
        goto invalid;
    json_t *h = json_object_get(b, "headers");
    if (h && !json_is_null(h)) {
        if (!json_is_object(h)) {
            snprintf(msg, sizeof(msg), "headers must be an object of header name to string value");
            goto invalid;
        }
        if (json_object_size(h) > MAX_HEADERS) {
            snprintf(msg, sizeof(msg), "headers: %zu headers is more than %d", json_object_size(h),
                     MAX_HEADERS);
            goto invalid;
        }
        size_t total = 0;
        const char *k;
        json_t *v;
        json_object_foreach(h, k, v) total += strlen(k) + 1;
        lower = malloc(total ? total : 1);
        if (!lower) {
            sl__reply_error(call, 503, "out_of_memory", "headers: out of memory");
            return;
        }
        char *p = lower;
        json_object_foreach(h, k, v)
        {
            if (!json_is_string(v) || json_string_length(v) > 256 || strlen(k) > 128) {
                snprintf(msg, sizeof(msg),
                         "headers.%.64s must be a string of at most 256 characters", k);
                goto invalid;
            }
            size_t i;
            for (i = 0; k[i]; i++)
                p[i] = (char)tolower((unsigned char)k[i]);
            p[i] = '\0';
            names[s.header_count] = p;
            values[s.header_count] = json_string_value(v);
            s.header_count++;
            p += i + 1;
        }
        s.header_names = names;
        s.header_values = values;
    }
    const sl_owner_t *o = sl__idmap_get(&call->srv->lease_owner, lease);
    if (sl__bound_settle(call, o && o->pool[0] ? o->pool : NULL, &s, names, values, clamped,
                         &call->headers_ignored, &status, msg, sizeof(msg)) < 0)
        goto invalid;
    settle_note_t *note = o ? calloc(1, sizeof(*note)) : NULL; /* none: not counted */
    if (note) {
        note->owner = *o;
        note->tokens = (sl_settle_t){.input_tokens = s.input_tokens,
                                     .output_tokens = s.output_tokens,
                                     .cache_creation_input_tokens = s.cache_creation_input_tokens,
                                     .cache_read_input_tokens = s.cache_read_input_tokens};
    }
    call->owner = note;
    sl_backend_settle(call->srv->backend, lease, &s, on_settled, call);
    free(lower);
    return;
invalid:
    free(lower);
    sl__reply_error(call, status, status == 403 ? "forbidden" : "invalid_request", "%s", msg);
}

void sl__handle_lease_action(sl_call_t *call, const char *id, const char *action, int method)
{
    char msg[MSG_LEN];
    uint64_t lease;
    (void)method;
    if (sl__parse_id(id, 'l', &lease) < 0) {
        sl__reply_error(call, 404, "not_found", "lease: '%.64s' is not a lease id", id);
        return;
    }
    sl_backend_t *backend = call->srv->backend; /* the call may be freed by its answer */
    const sl_owner_t *owner = sl__idmap_get(&call->srv->lease_owner, lease);
    if (check_owner(call, owner, "lease", id) < 0) return;
    call->lease = lease;
    sl__access_note(call, owner ? owner->agent : NULL, owner ? owner->pool : NULL, lease);
    if (!action) {
        sl_backend_cancel(call->srv->backend, lease, on_cancelled, call);
    } else if (!strcmp(action, "settle")) {
        handle_settle(call, lease);
    } else {
        static const char *const extend_fields[] = {"ttl", NULL};
        double ttl_s = 0;
        if (sl__json_check_fields(call->body, extend_fields, msg, sizeof(msg)) < 0 ||
            sl__json_get_number(call->body, "ttl", true, MIN_LEASE_TTL_S, false, &ttl_s, msg,
                                sizeof(msg)) < 0) {
            sl_backend_set_actor(backend, NULL);
            sl__reply_error(call, 400, "invalid_request", "%s", msg);
            return;
        }
        sl_backend_extend(call->srv->backend, lease, ttl_s, on_extended, call);
    }
    sl_backend_set_actor(backend, NULL);
}
