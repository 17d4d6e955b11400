/* events.c - engine events fanned out: owners, metrics, the JSON-lines log, SSE subscribers,
 * then the features over the bus.
 *
 * The backend's one event callback is sl__events_on_backend_event, set by main.c and never
 * replaced: every event the backend reports keeps the lease and ticket owner tables (the
 * engine has no lookup by id) and the metrics, becomes one JSON object (a line in the event
 * log, flushed within 250 ms, and an SSE message on /v1/events), and then goes on the bus
 * (features.c) to every feature that subscribes: the fleet's watch, the waiters of the
 * lease API and of the proxy.
 *
 * Streams are what a client can make sluiced hold by asking, so they are bounded
 * (events.max_streams in all, events.max_streams_per_token per agent token: 429 past
 * either), and the fan-out never waits for a subscriber: each event is formatted once,
 * then appended to each subscriber's connection buffer (a copy, no system call while that
 * connection is backed up: httpd.c). A subscriber whose unread events pass
 * events.stream_buffer_bytes is disconnected; it reconnects and reads GET /v1/pools for
 * what it missed. The decision path's cost per event is one memcpy per subscriber.
 */
#include "server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define TICKET_MEMORY_S      120.0

static const char *kind_name(sl_event_kind_t k)
{
    switch (k) {
    case SL_EV_GRANTED:
        return "granted";
    case SL_EV_QUEUED:
        return "queued";
    case SL_EV_REJECTED:
        return "rejected";
    case SL_EV_SETTLED:
        return "settled";
    case SL_EV_CANCELLED:
        return "cancelled";
    case SL_EV_REAPED:
        return "reaped";
    case SL_EV_UNCLAIMED:
        return "unclaimed";
    case SL_EV_TICKET_CANCELLED:
        return "ticket_cancelled";
    case SL_EV_TICKET_EXPIRED:
        return "ticket_expired";
    case SL_EV_TICKET_REJECTED:
        return "ticket_rejected";
    case SL_EV_UPSTREAM_429:
        return "upstream_429";
    case SL_EV_MARGIN:
        return "margin";
    case SL_EV_ALERT:
        return "alert";
    case SL_EV_LIMIT_ADOPTED:
        return "limit_adopted";
    case SL_EV_RESYNC:
        return "resync";
    }
    return "unknown";
}

static void set_id(json_t *j, const char *key, char prefix, uint64_t id)
{
    char buf[32];
    if (!id) return;
    snprintf(buf, sizeof(buf), "%c_%" PRIu64, prefix, id);
    json_object_set_new(j, key, json_string(buf));
}

static void set_tokens(json_t *j, const sl_event_t *ev)
{
    json_object_set_new(j, "input_tokens", json_integer(ev->input_tokens));
    json_object_set_new(j, "output_tokens", json_integer(ev->output_tokens));
}

json_t *sl__event_json(const sl_event_t *ev)
{
    json_t *j = json_pack("{s:f,s:s}", "ts", ev->now_s, "event", kind_name(ev->kind));
    if (!j) return NULL;
    if (ev->pool) json_object_set_new(j, "pool", json_string(ev->pool));
    if (ev->agent) json_object_set_new(j, "agent", json_string(ev->agent));
    set_id(j, "lease", 'l', ev->lease);
    set_id(j, "ticket", 't', ev->ticket);
    switch (ev->kind) {
    case SL_EV_GRANTED:
        set_tokens(j, ev);
        json_object_set_new(j, "weight", json_real(ev->weight));
        json_object_set_new(j, "waited", json_real(ev->waited_s));
        break;
    case SL_EV_QUEUED:
        set_tokens(j, ev);
        json_object_set_new(j, "weight", json_real(ev->weight));
        json_object_set_new(j, "eta", json_real(ev->eta_s));
        break;
    case SL_EV_REJECTED:
    case SL_EV_TICKET_REJECTED:
        set_tokens(j, ev);
        json_object_set_new(j, "reason", json_string(ev->reason ? ev->reason : ""));
        json_object_set_new(j, "retry_at", json_real(ev->retry_at));
        break;
    case SL_EV_SETTLED:
        set_tokens(j, ev);
        json_object_set_new(j, "adjust_input_tokens", json_integer(ev->adjust_input_tokens));
        json_object_set_new(j, "adjust_output_tokens", json_integer(ev->adjust_output_tokens));
        json_object_set_new(j, "estimate_error", json_real(ev->estimate_error));
        json_object_set_new(j, "counted", json_boolean(!ev->not_counted));
        break;
    case SL_EV_CANCELLED:
    case SL_EV_REAPED:
    case SL_EV_UNCLAIMED:
        set_tokens(j, ev);
        break;
    case SL_EV_UPSTREAM_429:
        json_object_set_new(j, "margin", json_real(ev->margin));
        json_object_set_new(j, "kind", json_string(ev->reason ? ev->reason : "rate"));
        break;
    case SL_EV_MARGIN:
        json_object_set_new(j, "margin", json_real(ev->margin));
        break;
    case SL_EV_ALERT:
        json_object_set_new(j, "alert", json_string(ev->alert ? ev->alert : ""));
        json_object_set_new(j, "active", json_boolean(ev->active));
        if (ev->reason) json_object_set_new(j, "detail", json_string(ev->reason)); /* why */
        break;
    case SL_EV_LIMIT_ADOPTED:
    case SL_EV_RESYNC:
        json_object_set_new(j, "bucket", json_string(sl_bucket_name(ev->bucket)));
        json_object_set_new(j, "value", json_real(ev->value));
        break;
    default:
        break;
    }
    return j;
}

/* ---- owners ----------------------------------------------------------------------- */

sl_owner_t *sl__owner_obtain(sl_idmap_t *map, uint64_t id)
{
    sl_owner_t *o = sl__idmap_get(map, id);
    if (!o) {
        o = calloc(1, sizeof(*o));
        if (!o || sl__idmap_put(map, id, o) < 0) {
            free(o);
            return NULL;
        }
    }
    return o;
}

static void owner_set(sl_idmap_t *map, uint64_t id, const sl_event_t *ev)
{
    sl_owner_t *o = sl__owner_obtain(map, id);
    if (!o) return;
    snprintf(o->agent, sizeof(o->agent), "%s", ev->agent ? ev->agent : "");
    snprintf(o->pool, sizeof(o->pool), "%s", ev->pool ? ev->pool : "");
}

static void ticket_ended(sl_server_t *srv, const sl_event_t *ev, bool rejected)
{
    sl_owner_t *o = sl__idmap_get(&srv->ticket_owner, ev->ticket);
    if (!o) return;
    o->ended = true;
    o->ended_at_s = ev->now_s;
    o->rejected = rejected;
    o->retry_at = ev->retry_at;
}

/* A queued ticket was granted: the lease keeps the model its request named, and the
 * ticket names the lease's pool (another key of a pool of several keys may have granted
 * it: its poll then answers that key). */
static void ticket_granted(sl_server_t *srv, const sl_event_t *ev)
{
    sl_owner_t *t = sl__idmap_get(&srv->ticket_owner, ev->ticket);
    sl_owner_t *l = sl__idmap_get(&srv->lease_owner, ev->lease);
    if (t && l) snprintf(l->model, sizeof(l->model), "%s", t->model);
    if (t && ev->pool) {
        sl__keys_note_grant(srv, t->pool, ev->pool);
        snprintf(t->pool, sizeof(t->pool), "%s", ev->pool);
    }
    ticket_ended(srv, ev, false);
}

static void track_owners(sl_server_t *srv, const sl_event_t *ev)
{
    switch (ev->kind) {
    case SL_EV_GRANTED:
        /* Kept with auth off too: a settle is bounded by its lease's pool. */
        owner_set(&srv->lease_owner, ev->lease, ev);
        if (ev->ticket) ticket_granted(srv, ev);
        break;
    case SL_EV_QUEUED:
        owner_set(&srv->ticket_owner, ev->ticket, ev);
        break;
    case SL_EV_SETTLED:
    case SL_EV_CANCELLED:
    case SL_EV_REAPED:
    case SL_EV_UNCLAIMED:
        free(sl__idmap_del(&srv->lease_owner, ev->lease));
        break;
    case SL_EV_TICKET_CANCELLED:
    case SL_EV_TICKET_EXPIRED:
        ticket_ended(srv, ev, false);
        break;
    case SL_EV_TICKET_REJECTED:
        ticket_ended(srv, ev, true);
        break;
    default:
        break;
    }
}

typedef struct forget_ctx {
    sl_server_t *srv;
    double now_s;
} forget_ctx_t;

static void forget_one(uint64_t id, void *val, void *ud)
{
    forget_ctx_t *c = ud;
    sl_owner_t *o = val;
    if (o->ended && c->now_s - o->ended_at_s > TICKET_MEMORY_S)
        free(sl__idmap_del(&c->srv->ticket_owner, id));
}

void sl__owners_forget_old(sl_server_t *srv)
{
    forget_ctx_t c = {srv, sl_backend_now(srv->backend)};
    sl__idmap_foreach(&srv->ticket_owner, forget_one, &c);
}

/* ---- log and streams -------------------------------------------------------------- */

int sl__events_open_log(sl_server_t *srv, char *err, size_t errlen)
{
    if (srv->event_log) {
        fclose(srv->event_log);
        srv->event_log = NULL;
    }
    if (!srv->config.event_log) return 0;
    srv->event_log = fopen(srv->config.event_log, "a");
    if (!srv->event_log) {
        snprintf(err, errlen, "event_log: cannot open '%s': %s", srv->config.event_log,
                 strerror(errno));
        return -1;
    }
    return 0;
}

void sl__events_flush(sl_server_t *srv)
{
    if (srv->event_log && srv->event_log_dirty) fflush(srv->event_log);
    srv->event_log_dirty = false;
}

static void stream_gone(sl_call_t *call)
{
    sl__call_drop(call);
}

static void stream_send(sl_call_t *call, const char *data, size_t len)
{
    if (!call->req) return;
    if (sl_hreq_backlog(call->req) + len > (size_t)call->srv->config.events.stream_buffer_bytes) {
        call->srv->streams_dropped++;
        sl__call_drop(call); /* a subscriber that does not read is let go */
        return;
    }
    sl_hreq_send(call->req, data, len);
}

/* True when subscriber `c` may see `ev`: pool-wide events (margin, alerts, resync) are
 * what GET /v1/pools shows every caller; an agent's events only its own token sees (an
 * event about a lease or ticket whose agent a backend did not say counts as someone's). */
static bool stream_sees(const sl_call_t *c, const sl_event_t *ev)
{
    if (c->stream_all) return true;
    if (!ev->agent) return !ev->lease && !ev->ticket;
    if (c->stream_prefix) return !strncmp(ev->agent, c->stream_agent, strlen(c->stream_agent));
    return !strcmp(ev->agent, c->stream_agent);
}

/* Answers 429 naming the bound when `call` may not open one more stream. The admin
 * token and auth off answer to the total only: they are the operator. */
static bool stream_refused(sl_call_t *call)
{
    sl_server_t *srv = call->srv;
    const sl_events_config_t *cfg = &srv->config.events;
    uint64_t who = sl__call_principal(call);
    int64_t mine = 0;
    for (const sl_call_t *c = srv->streams; who && c; c = c->next)
        mine += c->stream_principal == who;
    const char *bound = NULL;
    int64_t limit = 0, have = 0;
    if (who && mine >= cfg->max_streams_per_token) {
        bound = "events.max_streams_per_token";
        limit = cfg->max_streams_per_token;
        have = mine;
    } else if ((int64_t)srv->n_streams >= cfg->max_streams) {
        bound = "events.max_streams";
        limit = cfg->max_streams;
        have = (int64_t)srv->n_streams;
    }
    if (!bound) return false;
    if (call->req) sl_hreq_add_header(call->req, "Retry-After", "5");
    sl__reply_error(call, 429, "too_many_streams",
                    "%s is %lld and %lld event streams are open%s: close one first", bound,
                    (long long)limit, (long long)have, who ? " for this token" : "");
    return true;
}

void sl__events_subscribe(sl_call_t *call)
{
    sl_server_t *srv = call->srv;
    const sl_token_rule_t *t = call->token;
    if (stream_refused(call)) return;
    call->stream_principal = sl__call_principal(call);
    const char *who = t ? (t->agent ? t->agent : t->agent_prefix) : "";
    call->stream_all = call->admin || (t && t->agent_prefix && !t->agent_prefix[0]);
    call->stream_prefix = t && !t->agent;
    /* A name longer than any agent's matches none: it is left empty rather than cut. */
    if (strlen(who) < sizeof(call->stream_agent))
        snprintf(call->stream_agent, sizeof(call->stream_agent), "%s", who);
    if (call->stream_prefix && !call->stream_agent[0]) call->stream_prefix = false;
    sl_hreq_add_header(call->req, "Cache-Control", "no-cache");
    sl_hreq_start(call->req, 200, "text/event-stream");
    call->mode = SL_CALL_STREAM;
    call->next = srv->streams;
    if (srv->streams) srv->streams->prev = call;
    srv->streams = call;
    srv->n_streams++;
    static const char hello[] = ": sluice events\n\n";
    stream_send(call, hello, sizeof(hello) - 1);
    sl__call_watch_close(call, stream_gone);
}

void sl__events_ping_streams(sl_server_t *srv)
{
    static const char ping[] = ": ping\n\n";
    for (sl_call_t *c = srv->streams, *next; c; c = next) {
        next = c->next;
        stream_send(c, ping, sizeof(ping) - 1);
    }
}

void sl__events_metrics_render(const sl_server_t *srv, struct evbuffer *out)
{
    evbuffer_add_printf(out,
                        "# HELP sluice_event_streams Open /v1/events subscribers.\n"
                        "# TYPE sluice_event_streams gauge\nsluice_event_streams %zu\n"
                        "# HELP sluice_event_streams_dropped_total Subscribers disconnected for "
                        "leaving events.stream_buffer_bytes unread.\n"
                        "# TYPE sluice_event_streams_dropped_total counter\n"
                        "sluice_event_streams_dropped_total %llu\n",
                        srv->n_streams, (unsigned long long)srv->streams_dropped);
}

void sl__events_close_streams(sl_server_t *srv)
{
    while (srv->streams) {
        sl_call_t *c = srv->streams;
        if (c->req) {
            sl_hreq_t *req = c->req;
            c->req = NULL;
            sl_hreq_on_gone(req, NULL, NULL);
            sl_hreq_end(req);
        }
        sl__call_free(c);
    }
}

void sl__events_on_backend_event(const sl_event_t *ev, void *ud)
{
    sl_server_t *srv = ud;
    track_owners(srv, ev);
    sl__metrics_on_event(srv->metrics, ev);
    if (srv->event_log || srv->streams) {
        json_t *j = sl__event_json(ev);
        char *line = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
        if (line && srv->event_log) {
            fputs(line, srv->event_log);
            fputc('\n', srv->event_log);
            srv->event_log_dirty = true;
        }
        if (line && srv->streams) {
            struct evbuffer *msg = evbuffer_new();
            if (msg) {
                evbuffer_add_printf(msg, "event: %s\ndata: %s\n\n", kind_name(ev->kind), line);
                size_t len = evbuffer_get_length(msg);
                const char *data = (const char *)evbuffer_pullup(msg, -1);
                for (sl_call_t *c = srv->streams, *next; c; c = next) {
                    next = c->next;
                    if (stream_sees(c, ev)) stream_send(c, data, len);
                }
                evbuffer_free(msg);
            }
        }
        free(line);
        json_decref(j);
    }
    /* Then the features (the fleet's watch, the lease API's and the proxy's waiters, ...),
     * in features.def's order. */
    sl_bus_event_t bus = {.kind = SL_BUS_ENGINE, .engine = ev};
    sl__bus_publish(srv, &bus);
}

void sl__events_publish(sl_server_t *srv, const char *event, json_t *j)
{
    sl__events_publish_about(srv, event, NULL, j);
}

void sl__events_publish_about(sl_server_t *srv, const char *event, const char *agent, json_t *j)
{
    sl_event_t about = {.agent = agent};
    if (j && (srv->event_log || srv->streams)) {
        char *line = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15));
        if (line && srv->event_log) {
            fputs(line, srv->event_log);
            fputc('\n', srv->event_log);
            srv->event_log_dirty = true;
        }
        struct evbuffer *msg = line && srv->streams ? evbuffer_new() : NULL;
        if (msg) {
            evbuffer_add_printf(msg, "event: %s\ndata: %s\n\n", event, line);
            size_t len = evbuffer_get_length(msg);
            const char *data = (const char *)evbuffer_pullup(msg, -1);
            for (sl_call_t *c = srv->streams, *next; c; c = next) {
                next = c->next;
                if (!agent || stream_sees(c, &about)) stream_send(c, data, len);
            }
            evbuffer_free(msg);
        }
        free(line);
    }
    json_decref(j);
}
