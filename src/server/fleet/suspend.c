/* suspend.c - suspended agents: durable, fleet-wide, refused 429 `suspended` until an admin releases them.
 *
 * The backend keeps the records (backend.h, sl_suspension_t): the memory backend in its
 * state file (a restart, even kill -9, keeps them), the redis backend in one Redis hash
 * that every replica reads. This file holds each replica's copy of that set, which is
 * what a lease request or a limit check is refused on (no round trip on the hot path),
 * and keeps it in step with the backend's:
 *
 *   - A change made here (an anomaly suspends, an admin suspends or releases) is applied
 *     to the copy and written to the backend. A release and an admin's suspension are
 *     answered when the backend has them (a refused write changes nothing); an anomaly's
 *     suspension applies at once and its write is retried every sync until it lands.
 *   - Every housekeeping tick (0.25 s, main.c) the backend's set is read and the
 *     copy follows it: an agent another replica suspended is suspended here, one another
 *     replica released is released here (its anomaly windows emptied, its flag cleared).
 *     So a change on one replica holds on every other within 0.25 s plus one Redis round
 *     trip (at most the backend's timeout_ms, 500 ms by default).
 *
 * Redis losing its state (restarted empty, flushed) is told apart from every agent being
 * released (redis/suspend.c, the marker): the replicas then write back the suspensions
 * they hold, so a runaway stays suspended through that too.
 *
 * Races between a sync and this replica's own writes: a read started before a write
 * landed may not show it. Each sync is numbered; when a write is acknowledged the
 * record notes the number of the last sync started (guard_seq), and syncs up to that
 * number are ignored for that agent. A record whose write has not landed yet is never
 * released by a sync.
 *
 * Anomaly detection stays per replica (anomaly.c: each judges the traffic it serves);
 * only its verdict, the suspension, is shared.
 */
#include "fleet.h"
#include "server.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define MAX_RECORDS 100000 /* agents this replica keeps a suspension record of */
#define AGENT_MAX   128    /* an agent name's length, as the lease API's `agent` */

typedef struct susp {
    const char *agent; /* the map's key */
    char role[65];
    char reason[16]; /* "anomaly" or "admin" */
    char metric[16]; /* anomaly's metric, "" for admin */
    double z, at_s;
    int64_t count;
    bool active;        /* suspended as far as this replica knows */
    bool stored;        /* the backend holds the record (or its release) */
    bool writing;       /* a write is in flight */
    uint64_t guard_seq; /* syncs numbered up to this may predate this replica's last write */
    uint64_t seen_seq;  /* the last sync whose answer listed the agent */
} susp_t;

struct sl_suspend {
    sl_namemap_t agents; /* name -> susp_t, kept after a release (the guard) */
    size_t n_active;
    uint64_t sync_seq; /* syncs started */
    bool syncing;
    uint64_t suspensions_total, releases_total, refusals_total;
};

/* This file's part of the fleet's state (fleet.h, sl_fleet_house_t). */
SL_FLEET_PART(sl_suspend_t, suspend)

static susp_t *find(const sl_server_t *srv, const char *agent)
{
    return suspend_state(srv) && agent ? sl__namemap_get(&suspend_state(srv)->agents, agent) : NULL;
}

static susp_t *record_of(sl_server_t *srv, const char *agent)
{
    sl_suspend_t *s = suspend_of(srv);
    if (!s || !agent || !*agent) return NULL;
    const char *made = NULL;
    susp_t *r = sl__namemap_obtain(&s->agents, agent, sizeof(*r), MAX_RECORDS, &made);
    if (made) r->agent = made;
    return r;
}

static void fill(susp_t *r, const sl_suspension_t *s)
{
    snprintf(r->role, sizeof(r->role), "%s", s->role ? s->role : "");
    snprintf(r->reason, sizeof(r->reason), "%s", s->reason ? s->reason : "");
    snprintf(r->metric, sizeof(r->metric), "%s", s->metric ? s->metric : "");
    r->z = s->z;
    r->count = s->count;
    r->at_s = s->at_s;
}

static sl_suspension_t record_view(const susp_t *r)
{
    return (sl_suspension_t){r->agent, r->role, r->reason, r->metric, r->z, r->count, r->at_s};
}

/* The event stream and the event log say when this replica starts or stops refusing. */
static void publish(sl_server_t *srv, const susp_t *r, bool active)
{
    json_t *j = json_pack("{s:f,s:s,s:s,s:b,s:s,s:f}", "ts", sl_backend_now(srv->backend),
                          "event", "suspension", "agent", r->agent, "active", active, "reason",
                          r->reason, "suspended_at", r->at_s);
    sl__events_publish_about(srv, "suspension", r->agent, j);
}

static void activate(sl_server_t *srv, susp_t *r)
{
    if (r->active) return;
    r->active = true;
    suspend_state(srv)->n_active++;
    publish(srv, r, true);
}

static void deactivate(sl_server_t *srv, susp_t *r)
{
    if (!r->active) return;
    r->active = false;
    suspend_state(srv)->n_active--;
    sl__anomaly_forget(srv, r->agent); /* the burst that flagged it must not flag it again */
    publish(srv, r, false);
}

/* ---- writes ----------------------------------------------------------------------- */

typedef struct write_ctx {
    sl_server_t *srv;
    char agent[AGENT_MAX + 1];
    sl_call_t *call; /* the admin's request, or NULL for an anomaly's suspension */
} write_ctx_t;

static write_ctx_t *write_ctx(sl_server_t *srv, const char *agent, sl_call_t *call)
{
    write_ctx_t *w = calloc(1, sizeof(*w));
    if (!w) return NULL;
    w->srv = srv;
    snprintf(w->agent, sizeof(w->agent), "%s", agent);
    w->call = call;
    return w;
}

static json_t *record_json(const susp_t *r)
{
    json_t *j = json_pack("{s:s,s:s,s:f}", "reason", r->reason, "role", r->role, "suspended_at",
                          r->at_s);
    if (j && !strcmp(r->reason, "anomaly")) {
        json_object_set_new(j, "metric", json_string(r->metric));
        json_object_set_new(j, "z", json_real(r->z));
        json_object_set_new(j, "count", json_integer((json_int_t)r->count));
    }
    return j;
}

static void on_suspend_written(int rc, double value, const char *errmsg, void *ud)
{
    write_ctx_t *w = ud;
    sl_server_t *srv = w->srv;
    susp_t *r = find(srv, w->agent);
    (void)value;
    if (r) r->writing = false;
    if (rc == SL_OK && r) {
        r->stored = true;
        r->guard_seq = suspend_state(srv)->sync_seq;
        if (w->call) {
            /* value 0: another replica's record stood; the next sync brings its fields */
            if (!r->active) suspend_state(srv)->suspensions_total++;
            activate(srv, r);
            json_t *j = record_json(r);
            json_object_set_new(j, "status", json_string("suspended"));
            json_object_set_new(j, "agent", json_string(r->agent));
            sl__reply_json(w->call, 200, j);
        }
    } else if (w->call) {
        sl__reply_engine_error(w->call, rc == SL_OK ? SL_ENOMEM : rc, errmsg);
    }
    free(w);
}

static void write_suspension(sl_server_t *srv, susp_t *r, sl_call_t *call)
{
    write_ctx_t *w = write_ctx(srv, r->agent, call);
    if (!w) {
        if (call) sl__reply_error(call, 503, "internal", "out of memory");
        return;
    }
    r->writing = true;
    sl_suspension_t s = record_view(r);
    sl_backend_suspend(srv->backend, &s, on_suspend_written, w);
}

void sl__suspend_by_anomaly(sl_server_t *srv, const char *agent, const char *role,
                            const char *metric, double z, uint64_t count, double at_s)
{
    susp_t *r = record_of(srv, agent);
    if (!r || r->active) return;
    sl_suspension_t s = {agent, role, "anomaly", metric, z, (int64_t)count, at_s};
    fill(r, &s);
    r->stored = false;
    suspend_state(srv)->suspensions_total++;
    activate(srv, r);
    write_suspension(srv, r, NULL);
}

bool sl__suspend_refuses(sl_server_t *srv, const char *agent)
{
    if (!suspend_state(srv) || !suspend_state(srv)->n_active)
        return false; /* the hot path's usual case */
    susp_t *r = find(srv, agent);
    if (!r || !r->active) return false;
    suspend_state(srv)->refusals_total++;
    return true;
}

bool sl__suspend_active(const sl_server_t *srv, const char *agent)
{
    const susp_t *r = find(srv, agent);
    return r && r->active;
}

/* ---- sync ------------------------------------------------------------------------- */

typedef struct sync_ctx {
    sl_server_t *srv;
    uint64_t seq;
} sync_ctx_t;

/* After a sync's list is applied: an active record the list did not name was released
 * elsewhere (unless this replica wrote it after the sync started, or has not stored it). */
static void release_unlisted(const char *key, void *val, void *ud)
{
    sync_ctx_t *c = ud;
    susp_t *r = val;
    (void)key;
    if (!r->active) return;
    if (!r->stored) {
        if (!r->writing) write_suspension(c->srv, r, NULL); /* an earlier write failed: again */
        return;
    }
    if (r->seen_seq != c->seq && r->guard_seq < c->seq) deactivate(c->srv, r);
}

/* The store lost its records: what this replica holds is written back. */
static void write_back(const char *key, void *val, void *ud)
{
    sl_server_t *srv = ud;
    susp_t *r = val;
    (void)key;
    if (!r->active) return;
    r->stored = false;
    if (!r->writing) write_suspension(srv, r, NULL);
}

static void on_synced(int rc, const sl_suspension_t *list, size_t n, const char *errmsg, void *ud)
{
    sync_ctx_t *c = ud;
    sl_server_t *srv = c->srv;
    suspend_state(srv)->syncing = false;
    if (rc == SL_ENOTFOUND) {
        sl__log(SL_LOG_WARN, "%s: writing back the %zu this replica holds", errmsg,
                suspend_state(srv)->n_active);
        sl__namemap_foreach(&suspend_state(srv)->agents, write_back, srv);
    }
    if (rc != SL_OK) { /* the backend is away: keep what is known, retry next tick */
        free(c);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        susp_t *r = record_of(srv, list[i].agent);
        if (!r) continue;
        r->seen_seq = c->seq;
        if (r->guard_seq >= c->seq || r->writing) continue;
        fill(r, &list[i]); /* the backend's record stands (the first one written) */
        r->stored = true;
        activate(srv, r);
    }
    sl__namemap_foreach(&suspend_state(srv)->agents, release_unlisted, c);
    free(c);
}

void sl__suspend_sync(sl_server_t *srv)
{
    sl_suspend_t *s = suspend_of(srv);
    if (!s || s->syncing) return;
    sync_ctx_t *c = malloc(sizeof(*c));
    if (!c) return;
    c->srv = srv;
    c->seq = ++s->sync_seq;
    s->syncing = true;
    sl_backend_suspensions(srv->backend, on_synced, c);
}

/* ---- admin routes ----------------------------------------------------------------- */

static bool admin_agent_ok(sl_call_t *call, const char *verb, const char *agent)
{
    if (!call->admin) {
        sl__reply_error(call, 403, "forbidden", "%s: needs the admin token", verb);
        return false;
    }
    if (!sl__name_ok(agent, AGENT_MAX)) {
        sl__reply_error(call, 400, "invalid_request",
                        "agent: '%.64s' is not an agent name (1-%d of A-Z a-z 0-9 . _ : -)", agent,
                        AGENT_MAX);
        return false;
    }
    return true;
}

void sl__handle_agent_suspend(sl_call_t *call, const char *agent)
{
    sl_server_t *srv = call->srv;
    if (!admin_agent_ok(call, "suspend", agent)) return;
    susp_t *r = find(srv, agent);
    if (r && r->active && r->stored) {
        json_t *j = record_json(r);
        json_object_set_new(j, "status", json_string("suspended"));
        json_object_set_new(j, "agent", json_string(r->agent));
        sl__reply_json(call, 200, j);
        return;
    }
    if (!r) r = record_of(srv, agent);
    if (!r) {
        sl__reply_error(call, 503, "internal", "suspend: too many agents or out of memory");
        return;
    }
    if (!r->active) {
        sl_suspension_t s = {agent, sl__anomaly_role(srv, agent), "admin", "", 0, 0,
                             sl_backend_now(srv->backend)};
        fill(r, &s);
    }
    /* Refused from when the backend has it: a write the backend refuses changes nothing. */
    write_suspension(srv, r, call);
}

static void on_release_written(int rc, double value, const char *errmsg, void *ud)
{
    write_ctx_t *w = ud;
    sl_server_t *srv = w->srv;
    susp_t *r = find(srv, w->agent);
    (void)value;
    /* Not found: another replica released it first, or its write never landed. */
    bool was = r && r->active;
    if (rc != SL_OK && !(rc == SL_ENOTFOUND && was)) {
        if (rc == SL_ENOTFOUND)
            sl__reply_error(w->call, 404, "not_found", "agent: '%.128s' is not suspended",
                            w->agent);
        else
            sl__reply_engine_error(w->call, rc, errmsg);
        free(w);
        return;
    }
    double t = sl_backend_now(srv->backend);
    double since_s = r ? t - r->at_s : 0;
    if (r) {
        r->stored = true;
        r->guard_seq = suspend_state(srv)->sync_seq;
        deactivate(srv, r);
    }
    suspend_state(srv)->releases_total++;
    sl__reply_json(w->call, 200,
                   json_pack("{s:s,s:s,s:f}", "status", "released", "agent", w->agent,
                             "suspended_s", since_s));
    free(w);
}

void sl__handle_agent_release(sl_call_t *call, const char *agent)
{
    sl_server_t *srv = call->srv;
    if (!admin_agent_ok(call, "release", agent)) return;
    if (!suspend_of(srv)) {
        sl__reply_error(call, 503, "internal", "out of memory");
        return;
    }
    write_ctx_t *w = write_ctx(srv, agent, call);
    if (!w) {
        sl__reply_error(call, 503, "internal", "out of memory");
        return;
    }
    sl_backend_release(srv->backend, agent, on_release_written, w);
}

/* ---- views ------------------------------------------------------------------------ */

void sl__suspend_annotate(sl_server_t *srv, const char *agent, json_t *obj)
{
    const susp_t *r = find(srv, agent);
    bool on = r && r->active;
    json_object_set_new(obj, "suspended", json_boolean(on));
    json_object_set_new(obj, "suspension", on ? record_json(r) : json_null());
}

/* What the listings below append to: a call's answer, and how many agents it held. */
typedef struct list_ctx {
    sl_call_t *call;
    json_t *arr;
} list_ctx_t;

static void list_one(const char *key, void *val, void *ud)
{
    const susp_t *r = val;
    list_ctx_t *c = ud;
    if (!r->active || sl__anomaly_flagged(c->call->srv, key)) return;
    if (!c->call->admin && !sl__token_may_act_as(c->call, key)) return;
    json_array_append_new(c->arr, json_pack("{s:s,s:s,s:n,s:b,s:o}", "agent", key, "role",
                                            r->role, "anomaly", "suspended", true, "suspension",
                                            record_json(r)));
}

void sl__suspend_list_unflagged(sl_call_t *call, json_t *arr)
{
    list_ctx_t c = {call, arr};
    if (suspend_state(call->srv))
        sl__namemap_foreach(&suspend_state(call->srv)->agents, list_one, &c);
}

typedef struct unlisted_ctx {
    sl_call_t *call;
    json_t *arr;
    bool (*listed)(const char *agent, void *ud);
    void *listed_ud;
} unlisted_ctx_t;

static void unlisted_one(const char *key, void *val, void *ud)
{
    unlisted_ctx_t *c = ud;
    const susp_t *r = val;
    if (!r->active || c->listed(key, c->listed_ud)) return;
    if (!c->call->admin && !sl__token_may_act_as(c->call, key)) return;
    json_t *j = json_pack("{s:s,s:s,s:f,s:i,s:f,s:b,s:i,s:i,s:i,s:i,s:i,s:s}", "name", key, "role",
                          r->role, "weight", 0.0, "repeats", 0, "estimate_error", 0.0,
                          "estimate_error_alert", false, "leases", 0, "queued", 0, "tokens_in", 0,
                          "tokens_out", 0, "got_429", 0, "state", "idle");
    if (!j) return;
    sl__anomaly_annotate(c->call->srv, key, j);
    json_array_append_new(c->arr, j);
}

void sl__suspend_add_unlisted(sl_call_t *call, json_t *arr,
                              bool (*listed)(const char *agent, void *ud), void *ud)
{
    unlisted_ctx_t c = {call, arr, listed, ud};
    if (suspend_state(call->srv) && suspend_state(call->srv)->n_active)
        sl__namemap_foreach(&suspend_state(call->srv)->agents, unlisted_one, &c);
}

json_t *sl__suspend_record_json(const sl_server_t *srv, const char *agent)
{
    const susp_t *r = find(srv, agent);
    return r && r->active ? record_json(r) : json_null();
}

void sl__suspend_metrics_render(sl_server_t *srv, struct evbuffer *out)
{
    const sl_suspend_t *s = suspend_state(srv);
    evbuffer_add_printf(
        out,
        "# HELP sluice_agents_suspended Agents suspended now (by any replica).\n"
        "# TYPE sluice_agents_suspended gauge\nsluice_agents_suspended %zu\n"
        "# HELP sluice_agent_suspensions_total Suspensions made and releases answered by this "
        "replica, and requests it refused.\n"
        "# TYPE sluice_agent_suspensions_total counter\n"
        "sluice_agent_suspensions_total{event=\"suspended\"} %llu\n"
        "sluice_agent_suspensions_total{event=\"released\"} %llu\n"
        "sluice_agent_suspensions_total{event=\"refused\"} %llu\n",
        s ? s->n_active : 0, (unsigned long long)(s ? s->suspensions_total : 0),
        (unsigned long long)(s ? s->releases_total : 0),
        (unsigned long long)(s ? s->refusals_total : 0));
}

void sl__suspend_free(sl_server_t *srv)
{
    if (!suspend_state(srv)) return;
    sl__namemap_free_all(&suspend_state(srv)->agents);
    free(suspend_state(srv));
    sl__fleet_house_make(srv)->suspend = NULL; /* the house exists: it held this part */
}
