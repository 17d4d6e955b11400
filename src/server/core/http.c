/* http.c - sluiced's HTTP front: the route table, the checks before a handler runs (Host,
 * Content-Type, body), body limits, starting and stopping the listener.
 *
 * The transport (httpd.c) hands over every request to on_request(); it becomes an
 * sl_call_t (reply.c) that lives until it is answered; auth is auth.c's.
 *
 * Body limit: decided per request from its head, before its body is read (body_limit_for):
 * the lease API's `body_limit_bytes`, or the proxy's larger one on the proxy's paths when a
 * pool is proxied; the transport answers the 413 itself.
 *
 * Browsers: a web page may send any site's POSTs as text/plain or a form without asking,
 * and reach 127.0.0.1 under its own name (DNS rebinding). So the /v1 API's POSTs and PUTs
 * need `Content-Type: application/json` (which a page can only send after a CORS preflight
 * that is never granted), and with auth off a request naming another Host is refused 421.
 */
#include "server.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>

#define OUTER_BODY_LIMIT_BYTES (16u * 1024 * 1024)
#define HEAD_LIMIT_BYTES       (32u * 1024)
#define MAX_FIELDS             10000 /* the most `proxy.max_headers` allows; the head limit binds first */
#define FD_RESERVE             128 /* descriptors kept for the listener, Redis, logs, curl */
#define MAX_SEGMENTS           6
#define PATH_MAX_BYTES         2048

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
                /* Range first: casting a double outside json_int_t is undefined. */
                if (d >= -(double)SL_TOKENS_MAX && d <= (double)SL_TOKENS_MAX && d == floor(d))
                    json_object_set_new(v, k, json_integer((json_int_t)d));
            } else {
                ints_back(x);
            }
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) ints_back(x);
    }
}

/* POST /v1/estimate reads a provider request body: it takes as much as the proxy would. */
static size_t estimate_body_limit(const sl_config_t *c)
{
    size_t proxy = sl__proxy_body_limit(c);
    return proxy > c->body_limit_bytes ? proxy : c->body_limit_bytes;
}

/* Parses the request body into call->body (at most `limit` bytes). Returns 0, or -1
 * after answering. */
static int read_body(sl_call_t *call, bool required, size_t limit)
{
    size_t len;
    const char *data = sl_hreq_body(call->req, &len);
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

/* ---- what browsers cannot send ------------------------------------------------------ */

bool sl__is_json_media_type(const char *v)
{
    static const char json[] = "application/json";
    size_t n = sizeof(json) - 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (strncasecmp(v, json, n) != 0) return false;
    v += n;
    while (*v == ' ' || *v == '\t')
        v++;
    return *v == '\0' || *v == ';';
}

/* Returns 0 when a POST or PUT of the /v1 API says its body is JSON; otherwise it has been
 * answered 415. */
static int check_content_type(sl_call_t *call)
{
    const char *ct = sl_hreq_header(call->req, "Content-Type");
    if (ct && sl__is_json_media_type(ct)) return 0;
    if (ct)
        sl__reply_error(call, 415, "unsupported_media_type",
                        "Content-Type: '%.128s' is not accepted; the API takes "
                        "application/json",
                        ct);
    else
        sl__reply_error(call, 415, "unsupported_media_type",
                        "Content-Type: missing; the API takes application/json");
    return -1;
}

/* Splits a Host value into its name (brackets kept for IPv6) and port (-1: none). Returns
 * -1 when it is not NAME[:PORT]. */
static int split_host(const char *host, char *name, size_t cap, long *port)
{
    const char *end;
    if (host[0] == '[') {
        end = strchr(host, ']');
        if (!end) return -1;
        end++;
    } else {
        end = strchr(host, ':');
        if (!end) end = host + strlen(host);
    }
    size_t n = (size_t)(end - host);
    if (n == 0 || n >= cap) return -1;
    memcpy(name, host, n);
    name[n] = '\0';
    if (n > 1 && name[n - 1] == '.') name[n - 1] = '\0'; /* "localhost." is localhost */
    *port = -1;
    if (*end == '\0') return 0;
    if (*end != ':' || !end[1]) return -1;
    char *stop;
    errno = 0;
    *port = strtol(end + 1, &stop, 10);
    return errno || *stop || *port < 0 || *port > 65535 ? -1 : 0;
}

/* With auth off, the names a request may give in Host: the loopback names and the listen
 * address on our port, and `server.allowed_hosts` (a bare name there: any port). */
static bool host_allowed(const sl_server_t *srv, const char *host)
{
    const sl_config_t *c = &srv->config;
    char name[272], entry[272];
    long port, entry_port;
    if (split_host(host, name, sizeof(name), &port) < 0) return false;
    long ours = sl_httpd_port(srv->http);
    if (port < 0 || port == ours) {
        char listen[272];
        bool v6 = strchr(c->listen_host, ':') != NULL;
        snprintf(listen, sizeof(listen), "%s%s%s", v6 ? "[" : "", c->listen_host, v6 ? "]" : "");
        if (!strcasecmp(name, "localhost") || !strcmp(name, "127.0.0.1") ||
            !strcasecmp(name, "[::1]") || !strcasecmp(name, listen))
            return true;
    }
    for (size_t i = 0; i < c->server.n_allowed_hosts; i++) {
        if (split_host(c->server.allowed_hosts[i], entry, sizeof(entry), &entry_port) < 0) continue;
        if (!strcasecmp(name, entry) && (entry_port < 0 || entry_port == port)) return true;
    }
    return false;
}

/* Returns 0 when auth is on or the Host header names this server; otherwise it has been
 * answered 421. Requests without Host (HTTP/1.0 tools) come from no browser. */
static int check_host(sl_call_t *call)
{
    const sl_server_t *srv = call->srv;
    if (sl_config_auth_enabled(&srv->config)) return 0;
    const char *host = sl_hreq_header(call->req, "Host");
    if (!host || host_allowed(srv, host)) return 0;
    sl__reply_error(call, 421, "misdirected_request",
                    "Host: '%.200s' is not a name of this server; with auth off only localhost, "
                    "127.0.0.1, [::1] and the listen address on port %d, and "
                    "server.allowed_hosts, are served",
                    host, sl_httpd_port(srv->http));
    return -1;
}

/* ---- routing ---------------------------------------------------------------------- */

static void reply_method(sl_call_t *call, const char *allowed)
{
    sl_hreq_add_header(call->req, "Allow", allowed);
    sl__reply_error(call, 405, "method_not_allowed", "method: this path allows %s", allowed);
}

static void handle_healthz(sl_call_t *call)
{
    sl__reply_json(call, 200, json_pack("{s:s}", "status", "ok"));
}

/* Splits the path "/a/b/c" (path[0, len)) into segments: plain ones copied into
 * `segbuf` (room for len + max bytes), ones with %-escapes decoded by libevent into the
 * heap (heap[i] says which; the caller frees those). Returns the count, or -1 on a bad
 * path (an encoded NUL among them). */
static int split_path(const char *path, size_t len, char *segbuf, char **seg, bool *heap, int max)
{
    int n = 0;
    size_t i = 0;
    if (len == 0 || path[0] != '/') return -1;
    while (i < len) {
        while (i < len && path[i] == '/')
            i++;
        if (i == len) break;
        size_t e = i;
        while (e < len && path[e] != '/')
            e++;
        if (n == max) return -1;
        char raw[PATH_MAX_BYTES + 1];
        memcpy(raw, path + i, e - i);
        raw[e - i] = '\0';
        if (!memchr(raw, '%', e - i)) { /* nothing to decode: the bytes as they are */
            seg[n] = segbuf;
            memcpy(segbuf, raw, e - i + 1);
            segbuf += e - i + 1;
            heap[n++] = false;
        } else {
            size_t dlen = 0;
            seg[n] = evhttp_uridecode(raw, 0, &dlen);
            heap[n] = seg[n] != NULL;
            if (!seg[n] || strlen(seg[n]) != dlen) return -1;
            n++;
        }
        i = e;
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
static void r_estimate(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_estimate(c);
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
    (void)seg, (void)m;
    sl__handle_agents(c, q);
}
static void r_events(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__events_subscribe(c);
}
static void r_history(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m;
    sl__handle_history(c, q);
}
static void r_fleet(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_fleet(c);
}
static void r_usage(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m;
    sl__handle_usage(c, q);
}

static void r_agent_release(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)m, (void)q;
    sl__handle_agent_release(c, seg[2]);
}
static void r_agent_suspend(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)m, (void)q;
    sl__handle_agent_suspend(c, seg[2]);
}
static void r_reload(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)seg, (void)m, (void)q;
    sl__handle_reload(c);
}

static void r_limits(sl_call_t *c, char **seg, int m, const char *q)
{
    (void)m;
    sl__handle_limits(c, seg[2], seg[2] ? seg[3] : NULL, q);
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
    {2, {"v1", "estimate"}, "POST", r_estimate},
    {3, {"v1", "leases", "*"}, "DELETE", r_lease_cancel},
    {4, {"v1", "leases", "*", "settle"}, "POST", r_lease_action},
    {4, {"v1", "leases", "*", "extend"}, "POST", r_lease_action},
    {3, {"v1", "tickets", "*"}, "GET, DELETE", r_ticket},
    {2, {"v1", "tasks"}, "GET", r_tasks},
    {3, {"v1", "tasks", "*"}, "GET, PUT, DELETE", r_task},
    {2, {"v1", "pools"}, "GET", r_pools},
    {3, {"v1", "pools", "*"}, "GET", r_pool},
    {2, {"v1", "agents"}, "GET", r_agents},
    {4, {"v1", "agents", "*", "release"}, "POST", r_agent_release},
    {4, {"v1", "agents", "*", "suspend"}, "POST", r_agent_suspend},
    {2, {"v1", "fleet"}, "GET", r_fleet},
    {2, {"v1", "usage"}, "GET", r_usage},
    {2, {"v1", "history"}, "GET", r_history},
    {2, {"v1", "events"}, "GET", r_events},
    {3, {"v1", "admin", "reload"}, "POST", r_reload},
    {3, {"v1", "admin", "tokens"}, "GET, POST", sl__handle_tokens},
    {4, {"v1", "admin", "tokens", "*"}, "DELETE", sl__handle_tokens},
    {2, {"v1", "limits"}, "GET", r_limits},
    {3, {"v1", "limits", "*"}, "GET", r_limits},
    {4, {"v1", "limits", "*", "check"}, "POST", r_limits},
    {4, {"v1", "limits", "*", "release"}, "POST", r_limits},
    {4, {"v1", "limits", "*", "report"}, "POST", r_limits},
};

static const char *method_name(sl_http_method_t m)
{
    switch (m) {
    case SL_HTTP_GET:
    case SL_HTTP_HEAD:
        return "GET"; /* the transport sends no body for HEAD */
    case SL_HTTP_POST:
        return "POST";
    case SL_HTTP_PUT:
        return "PUT";
    case SL_HTTP_DELETE:
        return "DELETE";
    default:
        return "OTHER";
    }
}

static void route(sl_call_t *call, int n, char **seg, const char *query)
{
    int m = call->method;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *r = &routes[i];
        bool match = r->n == n;
        for (int k = 0; match && k < n; k++)
            match = !strcmp(r->seg[k], "*") || !strcmp(r->seg[k], seg[k]);
        if (!match) continue;
        if (!strstr(r->allow, method_name(call->method))) {
            reply_method(call, r->allow);
            return;
        }
        r->fn(call, seg, m, query);
        return;
    }
    sl__reply_error(call, 404, "not_found", "path: %s is not an endpoint of this API",
                    sl_hreq_target(call->req));
}

static bool method_has_body(sl_http_method_t m)
{
    return m == SL_HTTP_POST || m == SL_HTTP_PUT;
}

static void on_request(sl_hreq_t *req, void *arg)
{
    sl_server_t *srv = arg;
    char *seg[MAX_SEGMENTS] = {0};
    bool heap[MAX_SEGMENTS] = {false};
    char segbuf[PATH_MAX_BYTES + MAX_SEGMENTS];
    sl_call_t *call = sl__call_new(srv, req);
    if (!call) return; /* answered 503 */
    sl__access_begin(call, false);
    if (srv->shutting_down) {
        sl__reply_error(call, 503, "shutting_down", "server: sluiced is shutting down");
        return;
    }
    size_t path_len;
    const char *path = sl_hreq_path(req, &path_len);
    int n = path_len <= PATH_MAX_BYTES
                ? split_path(path, path_len, segbuf, seg, heap, MAX_SEGMENTS)
                : -1;
    const char *query = sl_hreq_query(req);
    if (check_host(call) < 0) {
        /* answered */
    } else if (n < 0) {
        sl__reply_error(call, 404, "not_found", "path: '%.256s' is not an endpoint of this API",
                        sl_hreq_target(req));
    } else if (n > 0 && sl__proxy_route(call, n, seg, query)) {
        /* the proxy authenticates and reads bodies itself */
    } else if (sl__dashboard_route(call, n, seg, query)) {
        /* the dashboard's page and files: it authenticates itself */
    } else if (!needs_auth(n, seg) || sl__dashboard_authenticate(call, n, seg) ||
               sl__authenticate(call) == 0) {
        /* Bodies are read for every method that carries one (DELETE bodies are ignored). */
        bool body_optional = (n == 3 && !strcmp(seg[1], "admin")) ||
                             (n == 4 && !strcmp(seg[1], "agents")); /* .../release, /suspend */
        bool api = n > 0 && !strcmp(seg[0], "v1");
        size_t limit = api && n == 2 && !strcmp(seg[1], "estimate")
                           ? estimate_body_limit(&srv->config)
                           : srv->config.body_limit_bytes;
        size_t body_len;
        sl_hreq_body(req, &body_len);
        /* `curl -X POST .../reload` sends neither a body nor a Content-Type. A web page's
         * fetch() may send the same without a CORS preflight (the Content-Type rule is what
         * keeps pages out), but a browser always adds Origin to it: only a request without
         * one is let through untyped. */
        bool untyped_ok = body_optional && body_len == 0 && !sl_hreq_header(req, "Origin");
        if (!method_has_body(call->method) ||
            ((!api || untyped_ok || check_content_type(call) == 0) &&
             read_body(call, !body_optional, limit) == 0))
            route(call, n, seg, query);
    }
    for (int i = 0; i < MAX_SEGMENTS; i++)
        if (heap[i]) free(seg[i]);
}

/* ---- start / stop ----------------------------------------------------------------- */

size_t sl__outer_body_limit(const sl_config_t *c)
{
    size_t proxy = sl__proxy_body_limit(c);
    return (proxy > c->body_limit_bytes ? proxy : c->body_limit_bytes) + OUTER_BODY_LIMIT_BYTES;
}

/* True when some pool is proxied to a provider speaking `api`. */
static bool proxies(const sl_config_t *c, sl_upstream_api_t api)
{
    for (size_t i = 0; c->upstreams && i < c->settings.n_pools; i++)
        if (c->upstreams[i].api == api) return true;
    return false;
}

/* The body limit of a request, from its head (the transport asks before reading the body):
 * the proxy's paths keep the proxy's limit when a pool is proxied there; everything else,
 * including a proxy path nobody proxies, has the lease API's. */
static size_t body_limit_for(sl_http_method_t method, const char *target, void *ud)
{
    const sl_config_t *c = &((const sl_server_t *)ud)->config;
    size_t path_off, path_len, query_off, query_len;
    (void)method;
    sl_http_split_target(target, strlen(target), &path_off, &path_len, &query_off, &query_len);
    const char *p = target + path_off, *end = p + path_len;
    while (p < end && *p == '/')
        p++;
    size_t n = 0;
    while (p + n < end && p[n] != '/')
        n++;
    sl_upstream_api_t api = n == 9 && !strncmp(p, "anthropic", 9) ? SL_UPSTREAM_ANTHROPIC
                            : n == 6 && !strncmp(p, "openai", 6)  ? SL_UPSTREAM_OPENAI
                                                                  : SL_UPSTREAM_NONE;
    if (api != SL_UPSTREAM_NONE && proxies(c, api)) return sl__proxy_body_limit(c);
    if (end - p == 11 && !strncmp(p, "v1/estimate", 11)) return estimate_body_limit(c);
    return c->body_limit_bytes;
}

sl_httpd_limits_t sl__listener_limits(const sl_config_t *c)
{
    const sl_listener_config_t *l = &c->server;
    sl_httpd_limits_t lim = {
        .max_connections = l->max_connections,
        .max_pending_output_bytes = l->max_pending_output_bytes,
        .write_timeout_s = l->write_timeout_s,
        .idle_timeout_s = l->idle_timeout_s,
        .head_timeout_s = l->head_timeout_s,
        .body_min_rate_bytes_per_s = l->body_min_rate_bytes_per_s,
    };
    /* A proxied call holds a second descriptor (its upstream), so with a proxy half of
     * what is left after the reserve goes to clients. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        size_t room = rl.rlim_cur > 2 * FD_RESERVE ? (size_t)rl.rlim_cur - FD_RESERVE
                                                   : (size_t)rl.rlim_cur / 2;
        if (proxies(c, SL_UPSTREAM_ANTHROPIC) || proxies(c, SL_UPSTREAM_OPENAI)) room /= 2;
        if (lim.max_connections > room) lim.max_connections = room;
    }
    return lim;
}

int sl__server_start(sl_server_t *srv, char *err, size_t errlen)
{
    sl_httpd_opts_t o = {
        .host = srv->config.listen_host,
        .port = srv->config.listen_port,
        .max_head_bytes = HEAD_LIMIT_BYTES,
        .max_fields = MAX_FIELDS,
        .max_body_bytes = sl__outer_body_limit(&srv->config),
        .body_limit_for = body_limit_for,
        .limits = sl__listener_limits(&srv->config),
        .on_request = on_request,
        .ud = srv,
    };
    if (sl__limits_apply(srv, err, errlen) < 0) return -1;
    srv->http = sl_httpd_new(srv->base, &o, err, errlen);
    if (!srv->http) return -1;
    return sl__proxy_init(srv, err, errlen);
}

void sl__server_shutdown(sl_server_t *srv)
{
    if (srv->shutting_down) return;
    srv->shutting_down = true;
    if (srv->http) sl_httpd_stop_accepting(srv->http);
    sl__waiters_shutdown(srv);
    sl__limits_shutdown(srv);
    sl__proxy_shutdown(srv, true);
    sl__events_close_streams(srv);
    sl__events_flush(srv);
}

void sl__server_stop(sl_server_t *srv)
{
    sl__proxy_shutdown(srv, false);
    sl_httpd_free(srv->http);
    sl__proxy_free(srv);
    sl__limits_free(srv);
    srv->http = NULL;
}
