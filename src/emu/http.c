/* http.c - sluice-emu's HTTP front: listener (plain or TLS), routing, auth, bodies, answers.
 *
 * One evhttp server on the loop. Routing is by exact path (the query string is
 * ignored, as the providers ignore unknown parameters such as ?beta=true). The
 * provider endpoints check the key first, as the real APIs do: a wrong key is a 401
 * in the provider's error shape whatever the body holds, so tests can prove that a
 * proxy replaced the agent's key with the pool's.
 *
 * Answers carry the provider's rate-limit headers (anthropic-ratelimit-* on the
 * Anthropic endpoints, x-ratelimit-* on the OpenAI ones) and a request id header
 * (request-id / x-request-id). /v1/models is both providers' path: a request with
 * anthropic-version is answered in Anthropic's shape, any other in OpenAI's. */
#include "emu.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/keyvalq_struct.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

double sl__emu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The statuses the emulator answers: the reason phrase of each, and the counter of those
 * GET /_emu/stats reports (an offset in sl_emu_counters_t; NOT_COUNTED for the others). */
#define NOT_COUNTED SIZE_MAX
static const struct status_row {
    int status;
    const char *reason;
    size_t counter;
} statuses[] = {
    {200, "OK", NOT_COUNTED},
    {400, "Bad Request", offsetof(sl_emu_counters_t, http_400)},
    {401, "Unauthorized", offsetof(sl_emu_counters_t, http_401)},
    {404, "Not Found", offsetof(sl_emu_counters_t, http_404)},
    {405, "Method Not Allowed", NOT_COUNTED},
    {413, "Payload Too Large", NOT_COUNTED},
    {429, "Too Many Requests", offsetof(sl_emu_counters_t, http_429)},
    {500, "Internal Server Error", NOT_COUNTED},
    {503, "Service Unavailable", offsetof(sl_emu_counters_t, http_503)},
    {529, "Overloaded", offsetof(sl_emu_counters_t, http_529)},
};

static const struct status_row *status_row(int status)
{
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++)
        if (statuses[i].status == status) return &statuses[i];
    return NULL;
}

static const char *reason_phrase(int status)
{
    const struct status_row *row = status_row(status);
    return row ? row->reason : "Status";
}

static void count_status(sl_emu_t *emu, int status)
{
    const struct status_row *row = status_row(status);
    if (row && row->counter != NOT_COUNTED) {
        uint64_t *counter = (uint64_t *)((char *)&emu->n + row->counter);
        (*counter)++;
    }
}

/* ---- answers ------------------------------------------------------------------------ */

void sl__emu_send(struct evhttp_request *req, int status, const char *body, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    struct evbuffer *buf = evbuffer_new();
    if (buf) evbuffer_add(buf, body, len);
    evhttp_send_reply(req, status, reason_phrase(status), buf);
    if (buf) evbuffer_free(buf);
}

void sl__emu_send_json(struct evhttp_request *req, int status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        static const char oom[] = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                                  "\"message\":\"out of memory\"}}";
        sl__emu_send(req, 500, oom, sizeof oom - 1);
        return;
    }
    sl__emu_send(req, status, s, strlen(s));
    free(s);
}

void sl__emu_add_ratelimit_headers(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api,
                                   const sl_provider_result_t *r, double now_s)
{
    sl_provider_header_t hs[SL_PROVIDER_MAX_HEADERS];
    size_t n = sl_provider_headers(
        emu->provider, api == SL_EMU_OPENAI ? SL_PROVIDER_OPENAI : SL_PROVIDER_ANTHROPIC, r, now_s,
        hs, SL_PROVIDER_MAX_HEADERS);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    for (size_t i = 0; i < n; i++)
        evhttp_add_header(h, hs[i].name, hs[i].value);
}

void sl__emu_send_error(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, int status,
                        const char *type, const char *message, const char *param, const char *code)
{
    count_status(emu, status);
    sl__emu_add_ratelimit_headers(emu, req, api, NULL, sl__emu_now());
    json_t *body;
    if (api == SL_EMU_ANTHROPIC) {
        body = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message",
                         message);
    } else {
        body = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", message, "type", type,
                         "param", param ? json_string(param) : json_null(), "code",
                         code ? json_string(code) : json_null());
    }
    sl__emu_send_json(req, status, body);
}

void sl__emu_send_refusal(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api,
                          const sl_provider_result_t *r)
{
    sl_provider_style_t style = api == SL_EMU_OPENAI ? SL_PROVIDER_OPENAI : SL_PROVIDER_ANTHROPIC;
    char buf[1024];
    size_t n = sl_provider_error_body(emu->provider, style, r, buf, sizeof buf);
    int status = sl_provider_http_status(style, r);
    count_status(emu, status);
    sl__emu_send(req, status, buf, n < sizeof buf ? n : sizeof buf - 1);
}

void sl__emu_new_id(sl_emu_t *emu, const char *prefix, char *buf, size_t cap)
{
    static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t n = strlen(prefix);
    if (cap < n + 25) {
        if (cap) buf[0] = '\0';
        return;
    }
    memcpy(buf, prefix, n);
    for (size_t i = 0; i < 24; i++)
        buf[n + i] = alphabet[sl_rng_next(&emu->ids) % 62];
    buf[n + 24] = '\0';
}

/* ---- auth --------------------------------------------------------------------------- */

/* Constant-time comparison, so the emulator does not teach timing attacks by example. */
static bool key_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < na && i < nb; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* The key the client presented, or NULL. Anthropic: x-api-key (or a bearer token,
 * as the SDK's authToken option sends); OpenAI: Authorization: Bearer. */
static const char *presented_key(struct evhttp_request *req, sl_emu_api_t api)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    if (api == SL_EMU_ANTHROPIC) {
        const char *k = evhttp_find_header(h, "x-api-key");
        if (k) return k;
    }
    const char *auth = evhttp_find_header(h, "Authorization");
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        auth += 7;
        while (*auth == ' ')
            auth++;
        return auth;
    }
    return NULL;
}

/* Answers 401 and returns false when the key is missing or wrong. */
bool sl__emu_check_key(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api)
{
    const char *k = presented_key(req, api);
    bool ok = k && *k && (!emu->opt.api_key[0] || key_equal(k, emu->opt.api_key));
    if (ok) return true;
    if (api == SL_EMU_ANTHROPIC) {
        sl__emu_send_error(emu, req, api, 401, "authentication_error",
                           k && *k ? "invalid x-api-key" : "x-api-key header is required", NULL,
                           NULL);
    } else if (k && *k) {
        /* OpenAI shows the key's first and last characters only. */
        char shown[64];
        size_t n = strlen(k);
        if (n > 8)
            snprintf(shown, sizeof shown, "%.3s****%s", k, k + n - 4);
        else
            snprintf(shown, sizeof shown, "****");
        char msg[256];
        snprintf(msg, sizeof msg,
                 "Incorrect API key provided: %s. You can find your API key at "
                 "https://platform.openai.com/account/api-keys.",
                 shown);
        sl__emu_send_error(emu, req, api, 401, "invalid_request_error", msg, NULL,
                           "invalid_api_key");
    } else {
        sl__emu_send_error(emu, req, api, 401, "invalid_request_error",
                           "You didn't provide an API key. You need to provide your API key in "
                           "an Authorization header using Bearer auth (i.e. Authorization: "
                           "Bearer YOUR_KEY).",
                           NULL, NULL);
    }
    return false;
}

/* ---- routing ------------------------------------------------------------------------ */

/* Parses the body as one JSON object. Answers 400 and returns NULL otherwise. */
json_t *sl__emu_read_json(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, char **raw,
                          size_t *raw_len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    *raw = NULL;
    *raw_len = 0;
    if ((int64_t)n > emu->opt.max_body_bytes) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body of %zu bytes exceeds the limit of %lld bytes", n,
                 (long long)emu->opt.max_body_bytes);
        count_status(emu, 413);
        sl__emu_add_ratelimit_headers(emu, req, api, NULL, sl__emu_now());
        json_t *body = api == SL_EMU_ANTHROPIC
                           ? json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                       "request_too_large", "message", msg)
                           : json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", msg, "type",
                                       "invalid_request_error", "param", "code");
        sl__emu_send_json(req, 413, body);
        return NULL;
    }
    char *data = malloc(n + 1);
    if (!data) {
        sl__emu_send_error(emu, req, api, 500, "api_error", "out of memory", NULL, NULL);
        return NULL;
    }
    evbuffer_copyout(in, data, n);
    data[n] = '\0';
    json_error_t jerr;
    json_t *body = json_loadb(data, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!body || !json_is_object(body)) {
        char msg[300];
        if (!body)
            snprintf(msg, sizeof msg, "The request body is not valid JSON: %s (line %d, column %d)",
                     jerr.text, jerr.line, jerr.column);
        else
            snprintf(msg, sizeof msg, "The request body must be a JSON object");
        json_decref(body);
        free(data);
        sl__emu_send_error(emu, req, api, 400, "invalid_request_error", msg, NULL, NULL);
        return NULL;
    }
    *raw = data;
    *raw_len = n;
    return body;
}

typedef enum route {
    ROUTE_NONE = 0,
    ROUTE_MESSAGES,
    ROUTE_COUNT_TOKENS,
    ROUTE_CHAT,
    ROUTE_RESPONSES,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_STATS,
    ROUTE_HEALTH,
    ROUTE_SPEND_CAP,
} route_t;

static route_t find_route(const char *path, enum evhttp_cmd_type *method)
{
    static const struct {
        const char *path;
        route_t route;
        enum evhttp_cmd_type method;
    } routes[] = {
        {"/v1/messages", ROUTE_MESSAGES, EVHTTP_REQ_POST},
        {"/v1/messages/count_tokens", ROUTE_COUNT_TOKENS, EVHTTP_REQ_POST},
        {"/v1/chat/completions", ROUTE_CHAT, EVHTTP_REQ_POST},
        {"/v1/responses", ROUTE_RESPONSES, EVHTTP_REQ_POST},
        {"/v1/models", ROUTE_MODELS, EVHTTP_REQ_GET},
        {"/stats", ROUTE_STATS, EVHTTP_REQ_GET},
        {"/health", ROUTE_HEALTH, EVHTTP_REQ_GET},
        {"/emu/spend-cap", ROUTE_SPEND_CAP, EVHTTP_REQ_POST},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(path, routes[i].path) == 0) {
            *method = routes[i].method;
            return routes[i].route;
        }
    }
    if (strncmp(path, "/v1/models/", 11) == 0 && path[11] && !strchr(path + 11, '/')) {
        *method = EVHTTP_REQ_GET;
        return ROUTE_MODEL;
    }
    return ROUTE_NONE;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    sl_emu_t *emu = arg;
    emu->n.http_requests++;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path) path = "/";
    if (sl__emu_admin_route(emu, req, path)) return;
    enum evhttp_cmd_type want = EVHTTP_REQ_GET;
    route_t route = find_route(path, &want);
    sl_emu_api_t api = route == ROUTE_CHAT || route == ROUTE_RESPONSES ||
                               strncmp(path, "/v1/chat", 8) == 0 ||
                               strncmp(path, "/v1/responses", 13) == 0
                           ? SL_EMU_OPENAI
                           : SL_EMU_ANTHROPIC;
    /* /v1/models is both providers' path: Anthropic's SDKs send anthropic-version. */
    if ((route == ROUTE_MODELS || route == ROUTE_MODEL) &&
        !evhttp_find_header(evhttp_request_get_input_headers(req), "anthropic-version"))
        api = SL_EMU_OPENAI;
    if (route == ROUTE_NONE && sl__emu_batch_api(path) == SL_EMU_OPENAI) api = SL_EMU_OPENAI;
    char rid[48];
    sl__emu_new_id(emu, "req_", rid, sizeof rid);
    evhttp_add_header(evhttp_request_get_output_headers(req),
                      api == SL_EMU_OPENAI ? "x-request-id" : "request-id", rid);

    int extra = route == ROUTE_NONE ? sl__emu_batch_api(path) : -1;
    if (extra >= 0) { /* embeddings, moderations, the batch APIs, files (batches.c) */
        sl__emu_batch_request(emu, req, path);
        return;
    }
    if (route == ROUTE_NONE) {
        char msg[160];
        snprintf(msg, sizeof msg, "Not found: %.100s", path);
        sl__emu_send_error(emu, req, api, 404,
                           api == SL_EMU_ANTHROPIC ? "not_found_error" : "invalid_request_error",
                           msg, NULL, NULL);
        return;
    }
    if (evhttp_request_get_command(req) != want) {
        char msg[160];
        snprintf(msg, sizeof msg, "Method not allowed: %s takes %s", path,
                 want == EVHTTP_REQ_GET ? "GET" : "POST");
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          want == EVHTTP_REQ_GET ? "GET" : "POST");
        sl__emu_send_error(emu, req, api, 405, "invalid_request_error", msg, NULL, NULL);
        return;
    }
    if (route == ROUTE_STATS) {
        sl__emu_stats(emu, req);
        return;
    }
    if (route == ROUTE_HEALTH) {
        sl__emu_health(emu, req);
        return;
    }
    if (route != ROUTE_SPEND_CAP && !sl__emu_check_key(emu, req, api)) return;
    if (route == ROUTE_MODELS || route == ROUTE_MODEL) {
        char *id = route == ROUTE_MODEL ? evhttp_uridecode(path + 11, 0, NULL) : NULL;
        sl__emu_models(emu, req, api, id);
        free(id);
        return;
    }
    if (api == SL_EMU_ANTHROPIC && route != ROUTE_SPEND_CAP &&
        !evhttp_find_header(evhttp_request_get_input_headers(req), "anthropic-version")) {
        sl__emu_send_error(emu, req, api, 400, "invalid_request_error",
                           "anthropic-version: header is required", NULL, NULL);
        return;
    }
    char *raw = NULL;
    size_t raw_len = 0;
    json_t *body = sl__emu_read_json(emu, req, api, &raw, &raw_len);
    if (!body) return;
    switch (route) {
    case ROUTE_MESSAGES:
        sl__anthropic_messages(emu, req, body, raw, raw_len);
        break;
    case ROUTE_COUNT_TOKENS:
        sl__anthropic_count_tokens(emu, req, body, raw, raw_len);
        break;
    case ROUTE_CHAT:
        sl__openai_chat(emu, req, body, raw, raw_len);
        break;
    case ROUTE_RESPONSES:
        sl__openai_responses(emu, req, body);
        break;
    case ROUTE_SPEND_CAP:
        sl__emu_spend_cap(emu, req, body);
        break;
    default:
        break;
    }
    json_decref(body);
    free(raw);
}

/* ---- TLS ---------------------------------------------------------------------------- */

static struct bufferevent *tls_bevcb(struct event_base *base, void *arg)
{
    SSL *ssl = SSL_new((SSL_CTX *)arg);
    if (!ssl) return NULL;
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (bev) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

static int tls_setup(sl_emu_t *emu, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "TLS: cannot create a context");
        return -1;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, emu->opt.tls_cert) != 1) {
        snprintf(err, errlen, "--tls-cert: \"%s\": %s", emu->opt.tls_cert,
                 ERR_reason_error_string(ERR_get_error()));
        SSL_CTX_free(ctx);
        return -1;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, emu->opt.tls_key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen, "--tls-key: \"%s\": %s", emu->opt.tls_key,
                 ERR_reason_error_string(ERR_get_error()));
        SSL_CTX_free(ctx);
        return -1;
    }
    emu->ssl_ctx = ctx;
    evhttp_set_bevcb(emu->http, tls_bevcb, ctx);
    return 0;
}

/* ---- lifetime ----------------------------------------------------------------------- */

int sl__emu_start(sl_emu_t *emu, char *err, size_t errlen)
{
    emu->http = evhttp_new(emu->base);
    if (!emu->http) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* evhttp's own limit sits above ours so that a large body gets our JSON 413. */
    evhttp_set_max_body_size(emu->http, (ev_ssize_t)emu->opt.max_body_bytes + 1024 * 1024);
    evhttp_set_max_headers_size(emu->http, 64 * 1024);
    evhttp_set_allowed_methods(emu->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                              EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
                                              EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
    evhttp_set_gencb(emu->http, on_request, emu);
    if (emu->opt.tls_cert[0] && tls_setup(emu, err, errlen) < 0) return -1;
    emu->bound = evhttp_bind_socket_with_handle(emu->http, emu->opt.listen_host,
                                                (ev_uint16_t)emu->opt.listen_port);
    if (!emu->bound) {
        snprintf(err, errlen, "--listen: cannot bind %s:%d: %s", emu->opt.listen_host,
                 emu->opt.listen_port, strerror(errno));
        return -1;
    }
    /* A stream's events go out as they come due, each a small write after the headers:
     * with Nagle's algorithm each would wait for the ACK of the previous one, which the
     * client delays (40 ms on Linux). Accepted sockets inherit the option on Linux. */
    int one = 1;
    if (setsockopt(evhttp_bound_socket_get_fd(emu->bound), IPPROTO_TCP, TCP_NODELAY, &one,
                   sizeof one) < 0) {
        snprintf(err, errlen, "--listen: TCP_NODELAY: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int sl__emu_bound_port(const sl_emu_t *emu)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    evutil_socket_t fd = evhttp_bound_socket_get_fd(emu->bound);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) return emu->opt.listen_port;
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

void sl__emu_stop(sl_emu_t *emu)
{
    sl__emu_calls_shutdown(emu);
    sl__emu_batches_free(emu);
    if (emu->http) evhttp_free(emu->http);
    emu->http = NULL;
    if (emu->ssl_ctx) SSL_CTX_free((SSL_CTX *)emu->ssl_ctx);
    emu->ssl_ctx = NULL;
}
