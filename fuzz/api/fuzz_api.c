/* fuzz_api.c - libFuzzer target for the lease API's JSON handlers (lease, settle, extend, tasks,
 * tickets, agents' suspension and release).
 *
 * The input is a script, one request per line: `TOKEN METHOD PATH BODY`, where TOKEN is
 * `a` (admin), `w` (a worker token for agents "w-*", role worker only), `r` (agent r1,
 * allowed to resync), `t` (agents "t-*": t-a and t-b in team red, t-c in team blue) or
 * `-` (none), and `$L` / `$T` in PATH stand for the last lease /
 * ticket id answered. The requests go through sluiced's own front (http.c: routing, auth.c,
 * body parsing) to the handlers and a memory backend; the target links the whole of
 * sluiced_core (proxy, dashboard, Redis backend included), and only the transport is
 * replaced, by the stand-ins below. Each input starts from a fresh backend.
 *
 * The transport is replaced because requests are handed to on_request() directly, without
 * sockets. Every function of httpd.h is defined here, so the linker never takes httpd.o
 * from the library; were one missing, httpd.o would come in and the link would fail on
 * the duplicates, which is the cue to add its stand-in here.
 *
 * Beyond memory errors and undefined behaviour, every answer is checked: a known status,
 * a JSON body, an error body of the documented shape for every non-2xx answer; a refused
 * request (4xx other than 429) leaves every pool's limits and margin as they were; no
 * adopted limit ever leaves [configured / factor, configured x factor]; no weight is
 * beyond what the weight formula gives for the configured ceilings.
 */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "fleet.h"
#include "lease.h"
#include "server.h"
#include "limits_redis.h"
#include "proxy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINES 32
/* Weight ceiling: planner 3 x (1 + 0.5 x (max_unblocks + tasks)) x high 4 x bump 1.5. */
#define MAX_TASKS 64

static const char config_text[] = "pools:\n"
                                  "  default:\n"
                                  "    input_tpm: 60000\n"
                                  "    output_tpm: 20000\n"
                                  "    rpm: 100\n"
                                  "    max_queue_wait_s: 600\n"
                                  "  small:\n"
                                  "    input_tpm: 3000\n"
                                  "    tokens_tpm: 5000\n"
                                  "    concurrency: 2\n"
                                  "    max_settle_tokens: 4000\n"
                                  "    max_resync_factor: 1.5\n"
                                  "    max_retry_after_s: 30\n"
                                  "auth:\n"
                                  "  admin_token: admin-token-1\n"
                                  "  tokens:\n"
                                  "    - token: worker-token-1\n"
                                  "      agent_prefix: w-\n"
                                  "      roles: [worker]\n"
                                  "    - token: resync-token-1\n"
                                  "      agent: r1\n"
                                  "      resync: true\n"
                                  "      priorities: [high, normal, low]\n"
                                  "    - token: team-token-1\n"
                                  "      agent_prefix: t-\n"
                                  "caps:\n"
                                  "  agents:\n"
                                  "    w-cap:\n"
                                  "      max_concurrent: 1\n"
                                  "  teams:\n"
                                  "    red:\n"
                                  "      weight: 3\n"
                                  "      members: [t-a, t-b, w-a]\n"
                                  "    blue:\n"
                                  "      weight: 0.5\n"
                                  "      max_concurrent: 2\n"
                                  "      members: [t-c]\n"
                                  "limits:\n"
                                  "  calls:\n"
                                  "    rate: 5\n"
                                  "  byteam:\n"
                                  "    rate: 5\n"
                                  "    per: team\n"
                                  "    parents: [calls]\n"
                                  "  keyed:\n"
                                  "    rate: 3\n"
                                  "    per: key\n"
                                  "    on_limit: queue\n"
                                  "  conc:\n"
                                  "    algorithm: concurrency\n"
                                  "    rate: 2\n"
                                  "    per: key\n"
                                  "fleet:\n"
                                  "  anomaly_min_agents: 3\n"
                                  "  anomaly_min_count: 2\n"
                                  "  suspend_anomalous: true\n"
                                  "  metrics_top_agents: 3\n";

static sl_config_t config; /* loaded once; every input's server borrows it */
static struct event_base *base;

/* ---- the transport, replaced ------------------------------------------------------------ */

struct sl_hreq {
    sl_http_method_t method;
    char *target;
    size_t path_len;
    const char *query;
    const char *auth;
    const char *body;
    size_t body_len;
    void (*gone)(void *ud);
    void *gone_ud;
    bool finished;
    bool streaming;
    int status;
    void (*on_finish)(void *ud, const sl_hreq_t *r, int status); /* the access log's hook */
    void *on_finish_ud;
};

/* The request is finished: its finish hook runs once, as the real transport's does. */
static void finish(sl_hreq_t *r)
{
    r->finished = true;
    void (*cb)(void *, const sl_hreq_t *, int) = r->on_finish;
    r->on_finish = NULL;
    if (cb) cb(r->on_finish_ud, r, r->status);
}

struct sl_httpd {
    void (*on_request)(sl_hreq_t *req, void *ud);
    void *ud;
};

static struct sl_httpd the_httpd;

sl_httpd_t *sl_httpd_new(struct event_base *b, const sl_httpd_opts_t *opts, char *err,
                         size_t errlen)
{
    (void)b, (void)err, (void)errlen;
    the_httpd.on_request = opts->on_request;
    the_httpd.ud = opts->ud;
    return &the_httpd;
}
int sl_httpd_port(const sl_httpd_t *d)
{
    (void)d;
    return 0;
}
void sl_httpd_set_max_body(sl_httpd_t *d, size_t max_body_bytes)
{
    (void)d, (void)max_body_bytes;
}
void sl_httpd_stop_accepting(sl_httpd_t *d)
{
    (void)d;
}
void sl_httpd_free(sl_httpd_t *d)
{
    (void)d;
}
sl_http_method_t sl_hreq_method(const sl_hreq_t *r)
{
    return r->method;
}
const char *sl_hreq_target(const sl_hreq_t *r)
{
    return r->target;
}
const char *sl_hreq_path(const sl_hreq_t *r, size_t *len)
{
    *len = r->path_len;
    return r->target;
}
const char *sl_hreq_query(const sl_hreq_t *r)
{
    return r->query;
}
/* Every request says it is JSON (the transport's Content-Type rule is not what this
 * target explores); some carry a bearer token. */
const char *sl_hreq_header(const sl_hreq_t *r, const char *name)
{
    if (!strcasecmp(name, "content-type")) return "application/json";
    return !strcasecmp(name, "authorization") ? r->auth : NULL;
}
size_t sl_hreq_header_count(const sl_hreq_t *r)
{
    return r->auth ? 2 : 1;
}
void sl_hreq_header_at(const sl_hreq_t *r, size_t i, const char **name, const char **value)
{
    *name = i == 0 ? "content-type" : "authorization";
    *value = i == 0 ? "application/json" : r->auth;
}
const char *sl_hreq_body(const sl_hreq_t *r, size_t *len)
{
    *len = r->body_len;
    return r->body;
}
void sl_hreq_on_gone(sl_hreq_t *r, void (*gone)(void *ud), void *ud)
{
    r->gone = gone;
    r->gone_ud = ud;
}
int sl_hreq_add_header(sl_hreq_t *r, const char *name, const char *value)
{
    (void)r, (void)name, (void)value;
    return 0;
}
bool sl_hreq_has_header(const sl_hreq_t *r, const char *name)
{
    (void)r, (void)name;
    return false;
}

static uint64_t last_lease, last_ticket;
static char who; /* the token of the request being answered: a, w, r, t or - */

/* An agent token sees only its own agents' anomalies (GET /v1/fleet). */
static void check_anomalies(const json_t *j)
{
    const char *own = who == 'w' ? "w-" : who == 't' ? "t-" : who == 'r' ? "r1" : NULL;
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(j, "anomalies"), i, a) {
        const char *agent = json_string_value(json_object_get(a, "agent"));
        if (own && (!agent || strncmp(agent, own, strlen(own)) != 0 ||
                    (who == 'r' && strcmp(agent, "r1") != 0))) {
            fprintf(stderr, "token %c shown the anomaly of %s\n", who, agent ? agent : "?");
            abort();
        }
    }
}

static void check_answer(int status, const char *body, size_t len)
{
    static const int known[] = {200, 202, 400, 401, 403, 404, 405, 409, 410, 413, 422, 429, 503};
    bool ok = false;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        ok |= status == known[i];
    if (!ok) {
        fprintf(stderr, "unexpected status %d: %.*s\n", status, (int)len, body);
        abort();
    }
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    if (!j || !json_is_object(j)) {
        fprintf(stderr, "answer %d is not a JSON object: %.*s\n", status, (int)len, body);
        abort();
    }
    if (status >= 400 && status != 429) {
        json_t *e = json_object_get(j, "error");
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        if (!type || !msg || !*type || !*msg) {
            fprintf(stderr, "error answer %d without type and message: %.*s\n", status, (int)len,
                    body);
            abort();
        }
    }
    json_t *w = json_object_get(j, "weight");
    double max_weight = 3 * (1 + 0.5 * (double)(config.max_unblocks + MAX_TASKS)) * 4 * 1.5;
    if (w && !(json_number_value(w) <= max_weight)) {
        fprintf(stderr, "weight %g above %g: %.*s\n", json_number_value(w), max_weight, (int)len,
                body);
        abort();
    }
    check_anomalies(j);
    const char *lease = json_string_value(json_object_get(j, "lease"));
    const char *ticket = json_string_value(json_object_get(j, "ticket"));
    if (lease) sl__parse_id(lease, 'l', &last_lease);
    if (ticket) sl__parse_id(ticket, 't', &last_ticket);
    json_decref(j);
}

/* Every line of a Prometheus text answer is a comment, or `name{label="value",...} number`
 * with `\\`, `\"` and `\n` the only escapes and no raw newline in a value. */
static void check_metrics(const char *body, size_t len)
{
    const char *p = body, *end = body + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p)), *line = p;
        if (!eol) eol = end;
        bool ok = true;
        if (*p != '#') {
            size_t n = 0;
            while (p < eol && (isalnum((unsigned char)*p) || *p == '_' || *p == ':'))
                p++, n++;
            ok = n > 0;
            if (ok && p < eol && *p == '{') {
                p++;
                while (ok && p < eol && *p != '}') {
                    while (p < eol && (isalnum((unsigned char)*p) || *p == '_')) p++;
                    ok = p + 1 < eol && p[0] == '=' && p[1] == '"';
                    for (p += 2; ok && p < eol && *p != '"'; p++)
                        if (*p == '\\') ok = ++p < eol && (*p == '\\' || *p == '"' || *p == 'n');
                    ok = ok && p < eol;
                    if (ok) p++;
                    if (ok && p < eol && *p == ',') p++;
                }
                ok = ok && p < eol && *p == '}';
                p++;
            }
            ok = ok && p < eol && *p == ' ';
            if (ok) {
                char num[64];
                size_t k = (size_t)(eol - p - 1);
                ok = k > 0 && k < sizeof(num);
                if (ok) {
                    memcpy(num, p + 1, k);
                    num[k] = '\0';
                    char *e;
                    (void)strtod(num, &e);
                    ok = *e == '\0';
                }
            }
        }
        if (!ok) {
            fprintf(stderr, "bad metrics line: %.*s\n", (int)(eol - line), line);
            abort();
        }
        p = eol + 1;
    }
}

void sl_hreq_reply(sl_hreq_t *r, int status, const char *content_type, const void *body, size_t len)
{
    /* /metrics answers Prometheus text, and the dashboard (/ and /dashboard/...) its files,
     * its login page (401) and its redirects (303, 304); every other answer is JSON. */
    bool dashboard = (r->path_len == 1 && r->target[0] == '/') ||
                     (r->path_len > 11 && !strncmp(r->target, "/dashboard/", 11));
    if (content_type && strstr(content_type, "json")) {
        check_answer(status, body, len);
    } else if (r->path_len == 8 && !strncmp(r->target, "/metrics", 8)) {
        check_metrics(body, len);
    } else if (status != 200 && !(dashboard && (status == 303 || status == 304 || status == 401))) {
        fprintf(stderr, "non-JSON answer with status %d\n", status);
        abort();
    }
    r->status = status;
    finish(r);
}
void sl_hreq_start(sl_hreq_t *r, int status, const char *content_type)
{
    (void)content_type;
    r->status = status;
    r->streaming = true;
}
void sl_hreq_send(sl_hreq_t *r, const void *data, size_t len)
{
    (void)r, (void)data, (void)len;
}
void sl_hreq_end(sl_hreq_t *r)
{
    finish(r);
}
size_t sl_hreq_backlog(const sl_hreq_t *r)
{
    (void)r;
    return 0;
}
void sl_hreq_on_drained(sl_hreq_t *r, void (*drained)(void *ud), void *ud)
{
    (void)r, (void)drained, (void)ud;
}
void sl_hreq_abort(sl_hreq_t *r)
{
    finish(r);
}

void sl_hreq_on_finish(sl_hreq_t *r, void (*finished)(void *ud, const sl_hreq_t *r, int status),
                       void *ud)
{
    r->on_finish = finished;
    r->on_finish_ud = ud;
}

void sl_hreq_watch(sl_hreq_t *r)
{
    (void)r;
}
bool sl_httpd_is_loopback(const sl_httpd_t *d)
{
    (void)d;
    return true;
}
void sl_httpd_set_limits(sl_httpd_t *d, const sl_httpd_limits_t *limits)
{
    (void)d, (void)limits;
}

/* ---- the harness ------------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char path[] = "/tmp/fuzz_api_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, config_text, sizeof(config_text) - 1) < 0) abort();
    close(fd);
    char err[512];
    if (sl_config_defaults(&config) < 0 || sl_config_load(path, &config, err, sizeof(err)) < 0) {
        fprintf(stderr, "fuzz_api: config: %s\n", err);
        abort();
    }
    unlink(path);
    /* The lease API is fuzzed here, not the proxy: no vocabulary to load for every input. */
    SL_PROXY_CONF(&config)->estimate_bytes = true;
    base = event_base_new();
    if (!base) abort();
    return 0;
}

typedef struct snapshot {
    size_t n;
    int64_t limit[8][SL_BUCKET_COUNT];
    double margin[8];
} snapshot_t;

static void on_snapshot(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud)
{
    snapshot_t *s = ud;
    (void)errmsg;
    if (rc != SL_OK) abort();
    s->n = n < 8 ? n : 8;
    for (size_t i = 0; i < s->n; i++) {
        memcpy(s->limit[i], pools[i].limit, sizeof(s->limit[i]));
        s->margin[i] = pools[i].margin;
        /* Every adopted limit stays within the factor of the configured one. */
        const sl_pool_config_t *pc = sl_config_pool(&config, pools[i].name);
        const sl_pool_bounds_t *b = sl_config_pool_bounds(&config, pools[i].name);
        const int64_t configured[SL_BUCKET_COUNT] = {pc->input_tpm, pc->output_tpm, pc->rpm,
                                                     pc->tokens_tpm};
        for (int k = 0; k < SL_BUCKET_COUNT; k++) {
            double lo = configured[k] / b->max_resync_factor,
                   hi = configured[k] * b->max_resync_factor;
            if (pools[i].limit[k] < floor(lo) || pools[i].limit[k] > ceil(hi)) {
                fprintf(stderr, "pool %s: %s limit %lld outside [%g, %g]\n", pools[i].name,
                        sl_bucket_name((sl_bucket_t)k), (long long)pools[i].limit[k], lo, hi);
                abort();
            }
        }
    }
}

static void snapshot(sl_server_t *srv, snapshot_t *s)
{
    memset(s, 0, sizeof(*s));
    sl_backend_pools(srv->backend, NULL, on_snapshot, s);
}

static void on_configured(int rc, double value, const char *errmsg, void *ud)
{
    (void)value, (void)ud;
    if (rc != SL_OK) {
        fprintf(stderr, "fuzz_api: configure: %s\n", errmsg ? errmsg : "?");
        abort();
    }
}

static sl_http_method_t parse_method(const char *m)
{
    static const struct {
        const char *name;
        sl_http_method_t m;
    } ms[] = {{"GET", SL_HTTP_GET}, {"HEAD", SL_HTTP_HEAD},     {"POST", SL_HTTP_POST},
              {"PUT", SL_HTTP_PUT}, {"DELETE", SL_HTTP_DELETE}, {"PATCH", SL_HTTP_PATCH}};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        if (!strcmp(m, ms[i].name)) return ms[i].m;
    return SL_HTTP_OTHER;
}

/* PATH with $L and $T replaced; the caller frees it. */
static char *expand_path(const char *p)
{
    size_t cap = strlen(p) * 2 + 64, n = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (; *p && n + 32 < cap; p++) {
        if (p[0] == '$' && (p[1] == 'L' || p[1] == 'T')) {
            n += (size_t)snprintf(out + n, cap - n, "%c_%llu", p[1] == 'L' ? 'l' : 't',
                                  (unsigned long long)(p[1] == 'L' ? last_lease : last_ticket));
            p++;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    sl_server_t srv;
    memset(&srv, 0, sizeof(srv));
    srv.base = base;
    srv.config = config;
    srv.metrics = sl__metrics_new();
    srv.backend = sl_backend_memory_new(base, &config.engine);
    if (!srv.metrics || !srv.backend) abort();
    sl_backend_set_event_cb(srv.backend, sl__events_on_backend_event, &srv);
    sl_backend_configure(srv.backend, &config.settings, on_configured, NULL);
    char err[256];
    if (sl__server_start(&srv, err, sizeof(err)) < 0) abort();
    last_lease = last_ticket = 0;

    sl_hreq_t reqs[MAX_LINES];
    char *targets[MAX_LINES];
    int n_reqs = 0;
    for (char *line = text, *next; line && n_reqs < MAX_LINES; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *sp1 = strchr(line, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp1 || !sp2) continue;
        *sp1 = *sp2 = '\0';
        char *path = sp2 + 1, *body = strchr(path, ' ');
        if (body) *body++ = '\0';
        sl_hreq_t *r = &reqs[n_reqs];
        memset(r, 0, sizeof(*r));
        r->method = parse_method(sp1 + 1);
        targets[n_reqs] = r->target = expand_path(path);
        if (!r->target) break;
        char *q = strchr(r->target, '?');
        r->path_len = q ? (size_t)(q - r->target) : strlen(r->target);
        r->query = q ? q + 1 : NULL;
        r->auth = line[0] == 'a'   ? "Bearer admin-token-1"
                  : line[0] == 'w' ? "Bearer worker-token-1"
                  : line[0] == 'r' ? "Bearer resync-token-1"
                  : line[0] == 't' ? "Bearer team-token-1"
                                   : NULL;
        who = line[0];
        r->body = body ? body : "";
        r->body_len = strlen(r->body);
        n_reqs++;

        snapshot_t before, after;
        snapshot(&srv, &before);
        the_httpd.on_request(r, the_httpd.ud);
        sl__anomaly_tick(&srv); /* as the once-a-second timer would: flags, suspends */
        snapshot(&srv, &after);
        if (r->finished && r->status >= 400 && r->status != 429 &&
            (before.n != after.n || memcmp(before.limit, after.limit, sizeof(before.limit)) ||
             memcmp(before.margin, after.margin, sizeof(before.margin)))) {
            fprintf(stderr, "refused request %d changed a pool's limits or margin\n", r->status);
            abort();
        }
    }
    /* Clients of unanswered calls (waiters, event streams) leave. */
    for (int i = 0; i < n_reqs; i++)
        if (!reqs[i].finished) {
            if (reqs[i].gone) reqs[i].gone(reqs[i].gone_ud);
            reqs[i].status = 0; /* no answer: the client left */
            finish(&reqs[i]);
        }
    sl__waiters_shutdown(&srv);
    sl__events_close_streams(&srv);
    sl__server_stop(&srv);
    sl__server_free_state(&srv);
    for (int i = 0; i < n_reqs; i++)
        free(targets[i]);
    free(text);
    return 0;
}
