/* access.c - the access log (`access_log`) and the proxy's requests by path and status.
 *
 * A request that is logged or proxied gets a small record when it arrives; handlers
 * note on it what they learn (agent, pool, lease, the proxy's endpoint) and the
 * transport's finish hook writes the line and counts it, whatever way the request
 * ends (answered, streamed to its end, or the client gone: status 0). The record and
 * the call point at each other until the first of them goes, so neither outlives the
 * other's pointer. Only the path is logged, never the query: `GET /?token=...` (the
 * dashboard's login) would otherwise put the admin token in the log.
 */
#include "server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

/* (path, status) pairs counted; more are counted as path "other", status 0. */
#define MAX_PROXY_SERIES 256

typedef struct proxy_count {
    const char *path; /* static */
    int status;
    uint64_t n;
} proxy_count_t;

struct sl_access_log {
    FILE *file;    /* the access log, or NULL */
    bool owned;    /* file was opened here (not stderr) */
    proxy_count_t counts[MAX_PROXY_SERIES + 1];
    size_t n_counts;
};

struct sl_access {
    sl_server_t *srv;
    sl_call_t *call;   /* NULL once the call is freed */
    double started_s;  /* monotonic */
    const char *route; /* the proxy's endpoint (static), or NULL: not proxied */
    bool log;          /* a line goes to the access log */
    uint64_t lease;
    char agent[129];
    char pool[129];
};

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int sl__access_log_open(sl_server_t *srv, const char *path, char *err, size_t errlen)
{
    if (!srv->access && !(srv->access = calloc(1, sizeof(*srv->access)))) {
        snprintf(err, errlen, "access_log: out of memory");
        return -1;
    }
    FILE *f = NULL;
    bool owned = false;
    if (path && !strcmp(path, "stderr")) {
        f = stderr;
    } else if (path) {
        f = fopen(path, "a");
        if (!f) {
            snprintf(err, errlen, "access_log: cannot open '%s': %s", path, strerror(errno));
            return -1;
        }
        setvbuf(f, NULL, _IOLBF, 0);
        owned = true;
    }
    if (srv->access->owned) fclose(srv->access->file);
    srv->access->file = f;
    srv->access->owned = owned;
    return 0;
}

static const char *method_name(sl_http_method_t m)
{
    static const char *const names[] = {"OTHER", "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH",
                                        "OPTIONS"};
    return (size_t)m < sizeof(names) / sizeof(names[0]) ? names[m] : "OTHER";
}

static void count_proxied(sl_access_log_t *a, const char *route, int status)
{
    for (size_t i = 0; i < a->n_counts; i++)
        if (a->counts[i].status == status && !strcmp(a->counts[i].path, route)) {
            a->counts[i].n++;
            return;
        }
    if (a->n_counts >= MAX_PROXY_SERIES) { /* the last slot gathers the rest */
        route = "other";
        status = 0;
        for (size_t i = 0; i < a->n_counts; i++)
            if (a->counts[i].status == 0 && !strcmp(a->counts[i].path, route)) {
                a->counts[i].n++;
                return;
            }
    }
    a->counts[a->n_counts++] = (proxy_count_t){.path = route, .status = status, .n = 1};
}

static void write_line(sl_access_t *r, const sl_hreq_t *req, int status)
{
    size_t path_len;
    const char *path = sl_hreq_path(req, &path_len);
    char path_buf[512], status_buf[16], ms_buf[32], lease_buf[32];
    snprintf(path_buf, sizeof(path_buf), "%.*s", (int)(path_len < 511 ? path_len : 511), path);
    snprintf(status_buf, sizeof(status_buf), "%d", status);
    snprintf(ms_buf, sizeof(ms_buf), "%.3f", (monotonic_s() - r->started_s) * 1000);
    snprintf(lease_buf, sizeof(lease_buf), "l_%" PRIu64, r->lease);
    const sl_log_field_t fields[] = {
        {"method", method_name(sl_hreq_method(req)), false},
        {"path", path_buf, false},
        {"status", status_buf, true},
        {"agent", r->agent[0] ? r->agent : NULL, false},
        {"pool", r->pool[0] ? r->pool : NULL, false},
        {"duration_ms", ms_buf, true},
        {"lease", r->lease ? lease_buf : NULL, false},
    };
    sl__log_line(r->srv->access->file, SL_LOG_INFO, "access", fields,
                 sizeof(fields) / sizeof(fields[0]));
}

static void on_finished(void *ud, const sl_hreq_t *req, int status)
{
    sl_access_t *r = ud;
    if (r->call) {
        r->call->access = NULL;
        if (!r->agent[0] && r->call->token && r->call->token->agent)
            snprintf(r->agent, sizeof(r->agent), "%s", r->call->token->agent);
    }
    sl_access_log_t *a = r->srv->access;
    if (a && r->route) count_proxied(a, r->route, status);
    if (a && a->file && r->log) write_line(r, req, status);
    free(r);
}

void sl__access_begin(sl_call_t *call, bool proxied)
{
    sl_server_t *srv = call->srv;
    bool log = srv->access && srv->access->file;
    if (call->access || !call->req || (!log && !proxied)) return;
    sl_access_t *r = calloc(1, sizeof(*r));
    if (!r) return; /* the line and the count are lost, the request is served */
    r->srv = srv;
    r->call = call;
    r->started_s = monotonic_s();
    r->log = log;
    call->access = r;
    sl_hreq_on_finish(call->req, on_finished, r);
}

void sl__access_note(sl_call_t *call, const char *agent, const char *pool, uint64_t lease)
{
    sl_access_t *r = call->access;
    if (!r) return;
    if (agent && *agent) snprintf(r->agent, sizeof(r->agent), "%s", agent);
    if (pool && *pool) snprintf(r->pool, sizeof(r->pool), "%s", pool);
    if (lease) r->lease = lease;
}

void sl__access_route(sl_call_t *call, const char *route)
{
    if (call->access) call->access->route = route;
}

void sl__access_call_gone(sl_call_t *call)
{
    if (call->access) call->access->call = NULL;
    call->access = NULL;
}

void sl__access_metrics_render(const sl_server_t *srv, struct evbuffer *out)
{
    evbuffer_add_printf(out, "# HELP sluice_proxy_requests_total Proxied requests by endpoint "
                             "and the status answered (0: the client left first).\n"
                             "# TYPE sluice_proxy_requests_total counter\n");
    const sl_access_log_t *a = srv->access;
    for (size_t i = 0; a && i < a->n_counts; i++)
        evbuffer_add_printf(out, "sluice_proxy_requests_total{path=\"%s\",status=\"%d\"} %" PRIu64
                                 "\n",
                            a->counts[i].path, a->counts[i].status, a->counts[i].n);
}

void sl__access_log_free(sl_server_t *srv)
{
    if (!srv->access) return;
    if (srv->access->owned) fclose(srv->access->file);
    free(srv->access);
    srv->access = NULL;
}
