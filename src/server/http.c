/* http.c - sluiced's HTTP front: listener, routing, auth, body limits, answers, client-gone watch.
 *
 * One evhttp server on the event loop. Every request becomes an sl_call_t that lives
 * until it is answered; handlers answer through the backend's completion callbacks
 * and never touch the call after starting a backend operation (the callback may have
 * answered and freed it already).
 *
 * Body limit: libevent 2.1 answers bodies over evhttp's own limit with an HTML page,
 * so evhttp's limit is set well above ours and the JSON 413 is sent here; only bodies
 * beyond that outer limit get libevent's own 413.
 */
#include "server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>

#define OUTER_BODY_LIMIT_BYTES (16u * 1024 * 1024)
#define MAX_SEGMENTS           6

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 202:
        return "Accepted";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "Payload Too Large";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Status";
    }
}

/* ---- call lifetime ---------------------------------------------------------------- */

static void on_conn_closed(struct evhttp_connection *evcon, void *ud)
{
    sl_call_t *call = ud;
    (void)evcon;
    /* evhttp is freeing the connection and the request with it. */
    call->closecb_set = false;
    call->req = NULL;
    if (call->gone) call->gone(call);
}

static void set_closecb(sl_call_t *call)
{
    if (call->evcon && !call->closecb_set) {
        evhttp_connection_set_closecb(call->evcon, on_conn_closed, call);
        call->closecb_set = true;
    }
}

static void clear_closecb(sl_call_t *call)
{
    if (call->closecb_set && call->req) {
        evhttp_connection_set_closecb(call->evcon, NULL, NULL);
    }
    call->closecb_set = false;
}

void sl__call_free(sl_call_t *call)
{
    sl_server_t *srv = call->srv;
    clear_closecb(call);
    if (call->close_watch) event_free(call->close_watch);
    if (call->wait_timer) event_free(call->wait_timer);
    if (call->mode == SL_CALL_STREAM) {
        if (call->prev)
            call->prev->next = call->next;
        else if (srv->streams == call)
            srv->streams = call->next;
        if (call->next) call->next->prev = call->prev;
        srv->n_streams--;
    }
    json_decref(call->body);
    free(call);
}

void sl__call_drop(sl_call_t *call)
{
    struct evhttp_request *req = call->req;
    struct evhttp_connection *evcon = call->evcon;
    clear_closecb(call);
    call->req = NULL;
    sl__call_free(call);
    if (req && evcon) evhttp_connection_free(evcon);
}

static void on_close_watch(evutil_socket_t fd, short what, void *ud)
{
    sl_call_t *call = ud;
    if (!(what & EV_CLOSED)) {
        /* Polling fallback (no EV_CLOSED): peek; 0 bytes means the peer closed. */
        char c;
        ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return;
    }
    event_del(call->close_watch);
    if (call->gone) call->gone(call);
}

int sl__call_watch_close(sl_call_t *call, void (*gone)(sl_call_t *call))
{
    sl_server_t *srv = call->srv;
    /* Without EV_CLOSED: a periodic timeout on the fd, peeking each time (on_close_watch). */
    struct timeval quarter_s = {0, 250000};
    call->gone = gone;
    set_closecb(call);
    if (!call->evcon) return -1;
    if (!call->close_watch) {
        evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(call->evcon));
        if (fd < 0) return -1;
        short what = srv->early_close ? EV_CLOSED | EV_PERSIST : EV_PERSIST;
        call->close_watch = event_new(srv->base, fd, what, on_close_watch, call);
        if (!call->close_watch) return -1;
    }
    return event_add(call->close_watch, srv->early_close ? NULL : &quarter_s);
}

/* ---- answers ---------------------------------------------------------------------- */

void sl__write_now(struct evhttp_connection *evcon)
{
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return;
    struct evbuffer *out = bufferevent_get_output(bev);
    if (evbuffer_get_length(out) == 0) return;
    /* A socket bufferevent keeps its output's drain side frozen outside its own writes. */
    evbuffer_unfreeze(out, 1);
    int n = evbuffer_write(out, fd);
    evbuffer_freeze(out, 1);
    /* evhttp learns that the bytes left from the write callback (it may then free the
     * request, or the connection). A short write or an error is left to libevent. */
    if (n > 0 && evbuffer_get_length(out) == 0) bufferevent_trigger(bev, EV_WRITE, 0);
}

static void send_body(sl_call_t *call, int status, const char *content_type, const char *data,
                      size_t len)
{
    clear_closecb(call); /* the answer may end the connection: stop hearing about it */
    struct evbuffer *buf = evbuffer_new();
    struct evkeyvalq *h = evhttp_request_get_output_headers(call->req);
    evhttp_add_header(h, "Content-Type", content_type);
    if (buf) evbuffer_add(buf, data, len);
    evhttp_send_reply(call->req, status, reason_phrase(status), buf);
    if (buf) evbuffer_free(buf);
}

void sl__reply_json(sl_call_t *call, int status, json_t *body)
{
    struct evhttp_connection *evcon = call->req ? call->evcon : NULL;
    if (call->req) {
        char *s = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
        if (s) {
            size_t n = strlen(s);
            s[n] = '\n'; /* overwrite the NUL: the body is sent by length */
            send_body(call, status, "application/json", s, n + 1);
            free(s);
        } else {
            static const char oom[] =
                "{\"error\":{\"type\":\"internal\",\"message\":\"out of memory\"}}\n";
            send_body(call, 500, "application/json", oom, sizeof(oom) - 1);
        }
    }
    json_decref(body);
    sl__call_free(call);
    sl__write_now(evcon);
}

void sl__reply_text(sl_call_t *call, int status, const char *json, size_t len)
{
    struct evhttp_connection *evcon = call->req ? call->evcon : NULL;
    if (call->req) send_body(call, status, "application/json", json, len);
    sl__call_free(call);
    sl__write_now(evcon);
}

void sl__reply_error(sl_call_t *call, int status, const char *type, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sl__reply_json(call, status, json_pack("{s:{s:s,s:s}}", "error", "type", type, "message", msg));
}

void sl__reply_engine_error(sl_call_t *call, int rc, const char *errmsg)
{
    int status = 500;
    const char *type = "internal";
    switch (rc) {
    case SL_EINVAL:
        status = 400;
        type = "invalid_request";
        break;
    case SL_ENOTFOUND:
        status = 404;
        type = "not_found";
        break;
    case SL_EALREADY:
        status = 409;
        type = "already_settled";
        break;
    case SL_EEXPIRED:
        status = 410;
        type = "lease_expired";
        break;
    case SL_ECAPACITY:
        status = 422;
        type = "exceeds_capacity";
        break;
    case SL_EEXIST:
        status = 409;
        type = "conflict";
        break;
    case SL_ENOMEM:
        status = 503;
        type = "out_of_memory";
        break;
    case SL_EUNAVAILABLE: /* a networked backend is down and fails closed */
        status = 503;
        type = "backend_unavailable";
        if (call->req) /* the backend reconnects every tick */
            evhttp_add_header(evhttp_request_get_output_headers(call->req), "Retry-After", "1");
        break;
    default:
        break;
    }
    sl__reply_error(call, status, type, "%s", errmsg && *errmsg ? errmsg : sl_strerror(rc));
}

void sl__reply_rejected(sl_call_t *call, const char *reason, double retry_after_s, double retry_at)
{
    if (retry_after_s < 0) retry_after_s = 0;
    if (call->req) {
        char h[32];
        double secs = retry_after_s;
        long long whole = (long long)secs;
        if ((double)whole < secs) whole++;
        snprintf(h, sizeof(h), "%lld", whole);
        evhttp_add_header(evhttp_request_get_output_headers(call->req), "Retry-After", h);
    }
    sl__reply_json(call, 429,
                   json_pack("{s:s,s:s,s:f,s:f}", "status", "rejected", "reason",
                             reason ? reason : "queue_wait_exceeds_max", "retry_after",
                             retry_after_s, "retry_at", retry_at));
}

/* ---- auth ------------------------------------------------------------------------- */

static bool token_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < na && i < nb; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* Returns 0 when the call may go on; otherwise it has been answered. */
static int authenticate(sl_call_t *call)
{
    const sl_config_t *c = &call->srv->config;
    if (!sl_config_auth_enabled(c)) {
        call->admin = true;
        return 0;
    }
    const char *h =
        evhttp_find_header(evhttp_request_get_input_headers(call->req), "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
        sl__reply_error(
            call, 401, "unauthorized",
            "Authorization: a bearer token is required (Authorization: Bearer <token>)");
        return -1;
    }
    const char *tok = h + 7;
    while (*tok == ' ')
        tok++;
    if (c->admin_token && token_equal(tok, c->admin_token)) {
        call->admin = true;
        return 0;
    }
    for (size_t i = 0; i < c->n_tokens; i++) {
        if (token_equal(tok, c->tokens[i].token)) {
            call->token = &c->tokens[i];
            return 0;
        }
    }
    sl__reply_error(call, 401, "unauthorized", "Authorization: the bearer token is not known");
    return -1;
}

bool sl__token_may_act_as(const sl_call_t *call, const char *agent)
{
    if (call->admin) return true;
    const sl_token_rule_t *t = call->token;
    if (!t || !agent) return false;
    if (t->agent) return strcmp(t->agent, agent) == 0;
    return strncmp(t->agent_prefix, agent, strlen(t->agent_prefix)) == 0;
}

static bool in_list(char **list, size_t n, const char *s)
{
    if (n == 0) return true;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], s)) return true;
    return false;
}

bool sl__token_may_use(const sl_call_t *call, const char *role, const char *pool)
{
    if (call->admin) return true;
    const sl_token_rule_t *t = call->token;
    return t && (!role || in_list(t->roles, t->n_roles, role)) &&
           (!pool || in_list(t->pools, t->n_pools, pool));
}

/* ---- body ------------------------------------------------------------------------- */

/* Reparses a body whose integers overflowed with every number as a double, then turns
 * the integral ones back into integers, so the validator can say which field is over
 * 2^53 instead of "invalid JSON". */
static void ints_back(json_t *v)
{
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, x)
        {
            if (json_is_real(x)) {
                double d = json_real_value(x);
                if (d == (double)(json_int_t)d && d >= -(double)SL_TOKENS_MAX &&
                    d <= (double)SL_TOKENS_MAX)
                    json_object_set_new(v, k, json_integer((json_int_t)d));
            } else {
                ints_back(x);
            }
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) ints_back(x);
    }
}

/* Parses the request body into call->body. Returns 0, or -1 after answering. */
static int read_body(sl_call_t *call, bool required)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(call->req);
    size_t len = evbuffer_get_length(in);
    size_t limit = call->srv->config.body_limit_bytes;
    if (len > limit) {
        sl__reply_error(call, 413, "body_too_large",
                        "body: %zu bytes is over the limit of %zu bytes", len, limit);
        return -1;
    }
    if (len == 0) {
        if (!required) return 0;
        sl__reply_error(call, 400, "invalid_request", "body: a JSON object is required");
        return -1;
    }
    const char *data = (const char *)evbuffer_pullup(in, -1);
    json_error_t jerr;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j && strstr(jerr.text, "too big")) {
        j = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
        if (j) ints_back(j);
    }
    if (!j) {
        sl__reply_error(call, 400, "invalid_request", "body: invalid JSON at line %d column %d: %s",
                        jerr.line, jerr.column, jerr.text);
        return -1;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        sl__reply_error(call, 400, "invalid_request", "body: must be a JSON object");
        return -1;
    }
    call->body = j;
    return 0;
}

/* ---- routing ---------------------------------------------------------------------- */

static void reply_method(sl_call_t *call, const char *allowed)
{
    evhttp_add_header(evhttp_request_get_output_headers(call->req), "Allow", allowed);
    sl__reply_error(call, 405, "method_not_allowed", "method: this path allows %s", allowed);
}

static void handle_healthz(sl_call_t *call)
{
    sl__reply_json(call, 200, json_pack("{s:s}", "status", "ok"));
}

/* Splits "/a/b/c" into decoded segments. Returns the count, or -1 on a bad path. */
static int split_path(const char *path, char **seg, int max)
{
    int n = 0;
    const char *p = path;
    if (*p != '/') return -1;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n == max) return -1;
        char *raw = strndup(p, len);
        size_t dlen = 0;
        seg[n] = raw ? evhttp_uridecode(raw, 0, &dlen) : NULL;
        free(raw);
        if (!seg[n] || strlen(seg[n]) != dlen) {
            free(seg[n]);
            seg[n] = NULL;
            return -1;
        }
        n++;
        p += len;
    }
    return n;
}

static bool needs_auth(int n, char **seg)
{
    if (n == 1 &&
        (!strcmp(seg[0], "healthz") || !strcmp(seg[0], "readyz") || !strcmp(seg[0], "metrics")))
        return false;
    return true;
}

/* Adapters from the route table to the handlers. */
static void r_healthz(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    handle_healthz(c);
}
static void r_readyz(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_readyz(c);
}
static void r_metrics(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_metrics(c);
}
static void r_lease_post(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_lease_post(c);
}
static void r_lease_cancel(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)q;
    sl__handle_lease_action(c, seg[2], NULL, m);
}
static void r_lease_action(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)q;
    sl__handle_lease_action(c, seg[2], seg[3], m);
}
static void r_ticket(sl_call_t *c, char **seg, int m, const char *q)
{
    sl__handle_ticket(c, seg[2], m, q);
}
static void r_tasks(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)q;
    sl__handle_tasks(c, NULL, m);
}
static void r_task(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)q;
    sl__handle_tasks(c, seg[2], m);
}
static void r_pools(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_pools(c, NULL);
}
static void r_pool(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)m, (void)q;
    sl__handle_pools(c, seg[2]);
}
static void r_agents(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_agents(c);
}
static void r_events(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__events_subscribe(c);
}
static void r_reload(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_reload(c);
}

/* The endpoints: path segments ("*" matches any one), the methods allowed, the handler. */
static const struct route {
    int n;
    const char *seg[4];
    const char *allow;
    void (*fn)(sl_call_t *call, char **seg, int method, const char *query);
} routes[] = {
    {1, {"healthz"}, "GET", r_healthz},
    {1, {"readyz"}, "GET", r_readyz},
    {1, {"metrics"}, "GET", r_metrics},
    {2, {"v1", "leases"}, "POST", r_lease_post},
    {3, {"v1", "leases", "*"}, "DELETE", r_lease_cancel},
    {4, {"v1", "leases", "*", "settle"}, "POST", r_lease_action},
    {4, {"v1", "leases", "*", "extend"}, "POST", r_lease_action},
    {3, {"v1", "tickets", "*"}, "GET, DELETE", r_ticket},
    {2, {"v1", "tasks"}, "GET", r_tasks},
    {3, {"v1", "tasks", "*"}, "GET, PUT, DELETE", r_task},
    {2, {"v1", "pools"}, "GET", r_pools},
    {3, {"v1", "pools", "*"}, "GET", r_pool},
    {2, {"v1", "agents"}, "GET", r_agents},
    {2, {"v1", "events"}, "GET", r_events},
    {3, {"v1", "admin", "reload"}, "POST", r_reload},
};

static const char *method_name(int m)
{
    switch (m) {
    case EVHTTP_REQ_GET:
    case EVHTTP_REQ_HEAD:
        return "GET"; /* evhttp drops HEAD bodies itself */
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_PUT:
        return "PUT";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    default:
        return "OTHER";
    }
}

static void route(sl_call_t *call, int n, char **seg, const char *query)
{
    int m = evhttp_request_get_command(call->req);
    if (m == EVHTTP_REQ_HEAD) m = EVHTTP_REQ_GET;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *r = &routes[i];
        bool match = r->n == n;
        for (int k = 0; match && k < n; k++)
            match = !strcmp(r->seg[k], "*") || !strcmp(r->seg[k], seg[k]);
        if (!match) continue;
        if (!strstr(r->allow, method_name(m))) {
            reply_method(call, r->allow);
            return;
        }
        r->fn(call, seg, m, query);
        return;
    }
    sl__reply_error(call, 404, "not_found", "path: %s is not an endpoint of this API",
                    evhttp_request_get_uri(call->req));
}

static bool method_has_body(int m)
{
    return m == EVHTTP_REQ_POST || m == EVHTTP_REQ_PUT;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    sl_server_t *srv = arg;
    char *seg[MAX_SEGMENTS] = {0};
    int n = 0;
    sl_call_t *call = calloc(1, sizeof(*call));
    if (!call) {
        evhttp_send_error(req, 503, "out of memory");
        return;
    }
    call->srv = srv;
    call->req = req;
    call->evcon = evhttp_request_get_connection(req);
    if (srv->shutting_down) {
        sl__reply_error(call, 503, "shutting_down", "server: sluiced is shutting down");
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    n = path ? split_path(path, seg, MAX_SEGMENTS) : -1;
    if (n < 0) {
        sl__reply_error(call, 404, "not_found", "path: '%s' is not an endpoint of this API",
                        evhttp_request_get_uri(req));
        goto done;
    }
    if (n > 0 && sl__proxy_route(call, n, seg, uri ? evhttp_uri_get_query(uri) : NULL))
        goto done; /* the proxy authenticates and reads bodies itself */
    if (needs_auth(n, seg) && authenticate(call) < 0) goto done;
    int m = evhttp_request_get_command(req);
    /* Bodies are read for every method that carries one (DELETE bodies are ignored). */
    bool body_optional = n == 3 && !strcmp(seg[1], "admin");
    if (method_has_body(m) && read_body(call, !body_optional) < 0) goto done;
    route(call, n, seg, uri ? evhttp_uri_get_query(uri) : NULL);
done:
    for (int i = 0; i < MAX_SEGMENTS; i++)
        free(seg[i]);
}

/* ---- start / stop ----------------------------------------------------------------- */

size_t sl__outer_body_limit(const sl_config_t *c)
{
    size_t proxy = sl__proxy_body_limit(c);
    return (proxy > c->body_limit_bytes ? proxy : c->body_limit_bytes) + OUTER_BODY_LIMIT_BYTES;
}

int sl__server_start(sl_server_t *srv, char *err, size_t errlen)
{
    srv->early_close = (event_base_get_features(srv->base) & EV_FEATURE_EARLY_CLOSE) != 0;
    srv->http = evhttp_new(srv->base);
    if (!srv->http) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    evhttp_set_max_body_size(srv->http, (ev_ssize_t)sl__outer_body_limit(&srv->config));
    evhttp_set_max_headers_size(srv->http, 32 * 1024);
    evhttp_set_flags(srv->http, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_allowed_methods(srv->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                              EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
                                              EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
    evhttp_set_gencb(srv->http, on_request, srv);
    srv->bound = evhttp_bind_socket_with_handle(srv->http, srv->config.listen_host,
                                                (ev_uint16_t)srv->config.listen_port);
    if (!srv->bound) {
        snprintf(err, errlen, "listen: cannot bind %s:%d: %s", srv->config.listen_host,
                 srv->config.listen_port, strerror(errno));
        return -1;
    }
    /* Answers and proxied events are small writes that must not wait for the ACK of
     * the previous one (Nagle against the client's delayed ACK: 40 ms). Accepted
     * sockets inherit the option on Linux, so no call pays a setsockopt. */
    int one = 1;
    setsockopt(evhttp_bound_socket_get_fd(srv->bound), IPPROTO_TCP, TCP_NODELAY, &one,
               sizeof(one));
    return sl__proxy_init(srv, err, errlen);
}

void sl__server_shutdown(sl_server_t *srv)
{
    if (srv->shutting_down) return;
    srv->shutting_down = true;
    if (srv->bound) {
        evhttp_del_accept_socket(srv->http, srv->bound);
        srv->bound = NULL;
    }
    sl__waiters_shutdown(srv);
    sl__proxy_shutdown(srv);
    sl__events_close_streams(srv);
    sl__events_flush(srv);
}

void sl__server_stop(sl_server_t *srv)
{
    sl__proxy_shutdown(srv);
    if (srv->http) evhttp_free(srv->http);
    sl__proxy_free(srv);
    srv->http = NULL;
}
