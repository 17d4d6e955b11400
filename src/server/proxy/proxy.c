/* proxy.c - the provider proxy: agents point their SDK's base URL here and every call gets a lease.
 *
 * One proxied call (px_t) goes through these phases:
 *
 *   identify  the agent's sluice token is the SDK's API key (x-api-key or Authorization:
 *             Bearer), or x-sluice-* headers where unauthenticated agents are allowed;
 *   estimate  the body with the tokenizer (uncached input, the cached prefix up to the
 *             last cache_control, output = max_tokens), naming the model so the engine
 *             calibrates;
 *   lease     sl_backend_request. GRANT forwards at once; QUEUED holds the request
 *             (a streaming one gets its event stream started and `ping` events so the
 *             client does not time out) until the backend's GRANTED event for the
 *             ticket; REJECT is a 429 in the provider's own error shape;
 *   forward   through upstream.c with the pool's real key in place of the agent's;
 *             streams are passed on event by event with backpressure (the upstream
 *             transfer pauses while the client's socket is backed up);
 *   settle    with the usage read from the body or the stream and the provider's
 *             rate-limit headers; a 429 as got_429 (spend cap told apart); a call the
 *             provider never saw is cancelled (full refund); a client that leaves
 *             mid-stream stops the upstream transfer and settles what was seen.
 *
 * count_tokens and the model list are passed through without a lease (the provider does
 * not rate-limit them); Anthropic's /api/hello is answered here. The Responses API is a
 * call like the others, with its own estimate and usage (proxy_responses.c). Which
 * paths are served: proxy_routes.c.
 *
 * The transport watches the client's socket in every phase, so a client that leaves is
 * noticed whether an answer is being written to it or not. The real key is only ever in the upstream
 * request's header list; nothing here logs headers or echoes upstream requests.
 */
#include "long_context.h"
#include "proxy_endpoints.h"
#include "upstream.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <sluice/tokenizer.h>

#define CLIENT_HIGH_WATER_BYTES (256u * 1024)       /* pause the provider above this */
#define RESPONSE_LIMIT_BYTES    (64u * 1024 * 1024) /* a buffered (non-stream) answer */
#define SSE_EVENT_LIMIT_BYTES   (16u * 1024 * 1024) /* one event longer than this is passed raw */
#define MAX_KEPT_HEADERS        48
#define LEASE_TTL_S             86400.0 /* capped by the pool's max_lease_ttl_s */
#define BATCH_RETRY_AFTER_S     60.0    /* a create over max_batch_requests: look again then */
/* How long the backend keeps a create's hold when its answer never comes (this process
 * died mid-call): longer than any create takes to be answered. */
#define BATCH_HOLD_TTL_S 3600.0
/* How long a batch stays counted when nobody sees it end: both providers end (expire) a
 * batch at the latest 24 h after its create; an hour more for the end to be processed. */
#define BATCH_WINDOW_S (25 * 3600.0)

struct sl_proxy {
    sl_server_t *srv;
    sl_upstream_t *up;
    sl_tokenizer_t *tok; /* NULL only with `estimator: bytes` */
    char *vocab_path;    /* where tok was loaded from */
    sl_idmap_t waiters; /* ticket -> px_t waiting on it */
    struct px *calls;   /* every call in progress */
    sl_batch_queue_t *batches; /* uploaded files' line counts (proxy_batches.c) */
    uint64_t hold_nonce;       /* makes this process's hold ids unique among replicas */
    uint64_t holds;            /* hold ids issued */
    sl__probes_t *probes;      /* pools heard from, cold probes running (proxy_probe.c) */
};

/* The feature's state on the server (its slot, features.def); NULL until it is made. */
static sl_proxy_t *proxy_of(const sl_server_t *srv)
{
    return srv->slot[SL_FEATURE_ID_proxy];
}

typedef enum px_phase {
    PX_START = 0, /* identifying, estimating, asking for the lease */
    PX_QUEUED,    /* waiting on a ticket */
    PX_UPSTREAM,  /* the provider is answering */
} px_phase_t;

/* Response headers kept for the client. */
typedef struct kept_headers {
    char *names[MAX_KEPT_HEADERS];
    char *values[MAX_KEPT_HEADERS];
    size_t n;
} kept_headers_t;

/* What the call claims (pointers into the request's headers): admitted by admit.c as
 * the lease API's body is. */
typedef struct identity {
    const char *role, *task, *priority;
    int64_t unblocks;
} identity_t;

typedef struct px {
    sl_proxy_t *proxy;
    sl_server_t *srv;
    sl_call_t *call; /* call->req: NULL once the client is gone or answered */
    sl_upstream_api_t api;
    bool unleased;     /* count_tokens, models: passed through without a lease */
    bool responses;    /* the OpenAI Responses API */
    bool embeddings;   /* OpenAI embeddings: input only (proxy_embeddings.c) */
    bool moderations;  /* OpenAI moderations: one request, no tokens */
    sl_batch_op_t batch_op; /* the batch APIs: one request on the batch pool */
    /* A create's hold in the backend's batch queue ("" none), and the pool it is in. */
    char batch_hold[48];
    char batch_pool[129];
    int64_t batch_requests; /* the create's requests */
    bool chained;      /* Responses with previous_response_id: the provider adds input */
    bool sse_through;  /* Responses: an event is being passed on part-way */
    const char *method; /* "POST", "GET" (model list, batch reads), "DELETE" (batch APIs) */
    bool stream;       /* the client asked for an event stream */
    bool client_usage; /* OpenAI: the client itself asked for include_usage */
    bool gone;         /* the client left while the backend was deciding */
    char agent[129];
    char pool[129];
    char model[129];
    char prefix_hash[65]; /* "" when the call has no cached prefix */
    double cache_ttl_s;   /* the prefix's lifetime (ttl "1h": 3600); 0 = the pool's */
    bool long_context;    /* leased from the pool's long-context pool (sl__admit routed it) */
    const char *limited_by; /* static: what bound the call when it was queued */
    char *body; /* what goes upstream (owned) */
    size_t body_len;
    char *url;
    char *ca_file;
    char **up_headers; /* "Name: value" lines for the provider, the key among them */
    size_t n_up_headers;
    size_t url_path_at;   /* where the path starts in url (after the upstream's base) */
    size_t key_header_at; /* up_headers from here on are the key's (keyed pools: rekey) */
    sl_estimate_t est;
    sl_proxy_output_t out; /* the body's output limit (proxy_output.c) */
    identity_t id;
    sl_cont_t *cont; /* proxy.continue_capped: the answer so far (proxy_continue.c) */
    uint64_t lease;
    uint64_t ticket;
    px_phase_t phase;
    bool sse_started; /* our own 200 event stream is open */
    bool streaming;   /* passing the provider's event stream on */
    bool paused;      /* the provider is paused for the client's sake */
    struct event *ping;
    struct event *wait_timer;
    sl_upstream_xfer_t *xfer;
    int status; /* the provider's HTTP status, 0 before headers */
    kept_headers_t pass;  /* for the client */
    double retry_after_s; /* < 0: none */
    struct evbuffer *resp; /* a buffered answer */
    struct evbuffer *sse;  /* bytes of an incomplete event */
    sl_usage_t usage;
    double sent_s;       /* monotonic: the request went to the provider (0: not yet) */
    double granted_s;    /* monotonic: the lease's grant reached the proxy (0: none) */
    double first_token_s; /* monotonic: a stream's first output event came (0: not yet) */
    struct px *prev, *next;
} px_t;

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void px_free(px_t *px);
static void px_forward(px_t *px);
static void continue_call(px_t *px);
static int cap_forwarded_output(px_t *px, int64_t reserved_tokens);
static int rekey_upstream(px_t *px);
static void px_client_gone(px_t *px);

/* ---- small helpers ------------------------------------------------------------------- */

static bool prefix_ci(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

static void kept_clear(kept_headers_t *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->names[i]);
        free(k->values[i]);
    }
    k->n = 0;
}

static void kept_add(kept_headers_t *k, const char *name, const char *value)
{
    if (k->n == MAX_KEPT_HEADERS) return;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return;
    }
    k->names[k->n] = n;
    k->values[k->n] = v;
    k->n++;
}

static const char *in_header(px_t *px, const char *name)
{
    return px->call->req ? sl_hreq_header(px->call->req, name) : NULL;
}

static const char *anthropic_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
        return "overloaded_error";
    case 504:
        return "timeout_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* The provider-shaped error body for `status` and `msg`. */
static json_t *error_json(sl_upstream_api_t api, int status, const char *msg)
{
    if (api == SL_UPSTREAM_OPENAI) {
        const char *type = status == 429   ? "requests"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
        const char *code = status == 429   ? "rate_limit_exceeded"
                           : status == 401 ? "invalid_api_key"
                           : status == 404 ? "not_found"
                                           : NULL;
        return json_pack("{s:{s:s,s:s,s:n,s:s?}}", "error", "message", msg, "type", type, "param",
                         "code", code);
    }
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                     anthropic_error_type(status), "message", msg);
}

/* ---- the client's connection -------------------------------------------------------- */

static void on_client_gone(sl_call_t *call)
{
    px_client_gone(call->owner);
}

static void on_client_drained(void *ud)
{
    px_t *px = ud;
    if (px->paused && px->xfer) {
        px->paused = false;
        sl_upstream_resume(px->xfer);
    }
}

static void unwatch_client(px_t *px)
{
    px->call->gone = NULL;
}

/* From now on a client that leaves ends the call (px_client_gone). */
static void watch_client(px_t *px)
{
    px->call->owner = px;
    sl__call_watch_close(px->call, on_client_gone);
    if (px->call->req) sl_hreq_on_drained(px->call->req, on_client_drained, px);
}

/* ---- answers -------------------------------------------------------------------------- */

static void add_pass_headers(px_t *px)
{
    for (size_t i = 0; i < px->pass.n; i++)
        sl_hreq_add_header(px->call->req, px->pass.names[i], px->pass.values[i]);
}

/* Sends a whole answer and frees the call. */
static void px_reply(px_t *px, int status, const char *content_type, const char *data, size_t len,
                     bool pass_headers)
{
    sl_hreq_t *req = px->call->req;
    if (req) {
        unwatch_client(px);
        if (pass_headers) add_pass_headers(px);
        px->call->req = NULL;
        sl_hreq_reply(req, status, content_type, data, len);
    }
    px_free(px);
}

/* Events go out as they arrive (no wait for a loop turn), and with TCP_NODELAY (set on
 * the listener) none waits for the previous one's ACK. */
static void send_chunk_text(px_t *px, const char *data, size_t len)
{
    if (px->call->req && len > 0) sl_hreq_send(px->call->req, data, len);
}

static void send_chunk(px_t *px, struct evbuffer *buf)
{
    size_t len = evbuffer_get_length(buf);
    if (len > 0) send_chunk_text(px, (const char *)evbuffer_pullup(buf, -1), len);
}

/* Ends our event stream and frees the call. */
static void px_end_stream(px_t *px)
{
    sl_hreq_t *req = px->call->req;
    if (req) {
        unwatch_client(px);
        px->call->req = NULL;
        sl_hreq_end(req);
    }
    px_free(px);
}

/* An error event inside an event stream that is already open, then its end. `body` is
 * a provider-shaped error object's JSON text. */
static void px_stream_error(px_t *px, const char *body, size_t len)
{
    char *event = px->responses ? sl__responses_error_event(body, len) : NULL;
    if (event) {
        body = event;
        len = strlen(event);
    }
    struct evbuffer *buf = evbuffer_new();
    if (buf) {
        if (px->api == SL_UPSTREAM_ANTHROPIC || px->responses)
            evbuffer_add_printf(buf, "event: error\n");
        evbuffer_add_printf(buf, "data: ");
        /* One line: JSON text has no raw newlines outside strings, but be sure. */
        for (size_t i = 0; i < len; i++)
            if (body[i] != '\n' && body[i] != '\r') evbuffer_add(buf, body + i, 1);
        evbuffer_add_printf(buf, "\n\n");
        send_chunk(px, buf);
        evbuffer_free(buf);
    }
    free(event);
    px_end_stream(px);
}

/* Answers an error in the provider's shape (inside the stream when one is open). */
static void px_error(px_t *px, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void px_error(px_t *px, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *j = error_json(px->api, status, msg);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    const char *text = s ? s : "{}";
    if (px->sse_started || px->streaming)
        px_stream_error(px, text, strlen(text));
    else
        px_reply(px, status, "application/json", text, strlen(text), false);
    free(s);
}

static void set_retry_headers(px_t *px, double retry_after_s)
{
    if (!px->call->req || px->sse_started || px->streaming) return;
    if (!(retry_after_s >= 0)) retry_after_s = 1;
    char v[32];
    snprintf(v, sizeof(v), "%lld", (long long)ceil(retry_after_s));
    sl_hreq_add_header(px->call->req, "retry-after", v);
    snprintf(v, sizeof(v), "%lld", (long long)ceil(retry_after_s * 1000));
    sl_hreq_add_header(px->call->req, "retry-after-ms", v);
}

/* A REJECT: 429 in the provider's shape with retry-after, naming what binds. */
static void px_reject(px_t *px, const char *reason, const char *limited_by, double retry_after_s)
{
    set_retry_headers(px, retry_after_s);
    px_error(px, 429,
             "sluice: pool '%s' has no capacity for agent '%s' within proxy.max_hold_s %.0f s "
             "(%s; limited by %s, which frees in %.1f s); retry after %.1f s",
             px->pool, px->agent, SL_PROXY_CONF(&px->srv->config)->max_hold_s,
             reason ? reason : "queue_wait_exceeds_max", limited_by ? limited_by : "the pool",
             retry_after_s > 0 ? retry_after_s : 0.0, retry_after_s > 0 ? retry_after_s : 0.0);
}

/* A refusal of admit.c in the provider's shape (429s with retry-after). */
static void px_refuse(px_t *px, const sl_refusal_t *ref)
{
    if (ref->status == 429) set_retry_headers(px, ref->retry_after_s);
    if (!strcmp(ref->type, "too_many_agents"))
        px_error(px, 429, "sluice: agent '%s' is refused (too_many_agents): %s", px->agent,
                 ref->message);
    else
        px_error(px, ref->status, "sluice: %s", ref->message);
}

/* ---- settling --------------------------------------------------------------------------- */

static void on_settled(int rc, const sl_settle_result_t *r, const char *errmsg, void *ud)
{
    uint64_t lease = (uint64_t)(uintptr_t)ud;
    (void)r;
    if (rc != SL_OK)
        sl__log(SL_LOG_WARN, "proxy: settle of l_%" PRIu64 " failed: %s", lease,
                errmsg ? errmsg : sl_strerror(rc));
}

static void on_cancelled(int rc, double value, const char *errmsg, void *ud)
{
    uint64_t lease = (uint64_t)(uintptr_t)ud;
    (void)value;
    if (rc != SL_OK && rc != SL_EALREADY)
        sl__log(SL_LOG_WARN, "proxy: cancel of l_%" PRIu64 " failed: %s", lease,
                errmsg ? errmsg : sl_strerror(rc));
}

static void cancel_lease(px_t *px)
{
    if (!px->lease) return;
    uint64_t lease = px->lease;
    px->lease = 0;
    sl_backend_cancel(px->srv->backend, lease, on_cancelled, (void *)(uintptr_t)lease);
}

/* Settles the lease with what is known. `provider_saw_it`: the request reached the
 * provider (or may have); when false the lease is cancelled instead. */
static void settle(px_t *px, bool provider_saw_it)
{
    if (!px->lease) return;
    if (!provider_saw_it && px->status == 0) {
        cancel_lease(px);
        return;
    }
    uint64_t lease = px->lease;
    px->lease = 0;
    sl_settle_t s = {.retry_after_s = -1};
    const char *rl_names[MAX_KEPT_HEADERS], *rl_values[MAX_KEPT_HEADERS];
    char rl_scratch[MAX_KEPT_HEADERS][24];
    size_t rl_n = 0;
    size_t body_len = px->status == 429 && px->resp ? evbuffer_get_length(px->resp) : 0;
    if (body_len && sl__is_acceleration_429((const char *)evbuffer_pullup(px->resp, -1),
                                            body_len)) {
        /* Not a full bucket: the ramp learns from it (provider_limits/, over the bus), no
         * margin cut, no hold. */
        s.failed = true;
        sl_bus_event_t accel = {.kind = SL_BUS_ACCELERATION, .acceleration = {px->pool}};
        sl__bus_publish(px->srv, &accel);
    } else if (px->status == 429) {
        s.got_429 = true;
        /* Its rate-limit headers, which the provider wrote without this call: the engine
         * applies them after the refund and the cut (docs/design.md "Margin"). */
        if (!px->long_context) {
            for (size_t i = 0; i < px->pass.n && rl_n < MAX_KEPT_HEADERS; i++) {
                if (!sl_header_is_ratelimit(px->pass.names[i])) continue;
                rl_names[rl_n] = px->pass.names[i];
                rl_values[rl_n] = px->pass.values[i];
                rl_n++;
            }
            rl_n = sl__bound_limit_headers(px->srv, px->pool, true, rl_names, rl_values, rl_n,
                                           rl_scratch);
            s.header_names = rl_n ? rl_names : NULL;
            s.header_values = rl_n ? rl_values : NULL;
            s.header_count = rl_n;
        }
        s.retry_after_s = px->retry_after_s;
        size_t len = px->resp ? evbuffer_get_length(px->resp) : 0;
        const char *body = len ? (const char *)evbuffer_pullup(px->resp, -1) : "";
        s.spend_cap = sl__usage_is_spend_cap(px->api, body, len, px->retry_after_s >= 0);
        s.failed = true;
    } else if (px->status >= 400) {
        /* Refused or failed by the provider: nothing billed, nothing to learn. */
        s.failed = true;
    } else {
        const sl_usage_t *u = &px->usage;
        /* A call that broke off is charged what it used, but its usage is partial. */
        s.failed = !u->have_input || !u->have_output;
        if (u->have_input) {
            s.input_tokens = u->input_tokens;
            s.cache_creation_input_tokens = u->cache_creation_input_tokens;
            s.cache_read_input_tokens = u->cache_read_input_tokens;
            s.cache_creation_1h_input_tokens =
                u->cache_creation_1h_input_tokens <= u->cache_creation_input_tokens
                    ? u->cache_creation_1h_input_tokens
                    : u->cache_creation_input_tokens;
        } else {
            /* Never reported (the call broke off): assume the estimate was spent. */
            s.input_tokens = px->est.input_tokens;
            s.cache_read_input_tokens = px->est.cached_tokens;
        }
        s.output_tokens = u->have_output ? u->output_tokens : u->output_seen_tokens;
    }
    /* A batch's results are the usage of calls the provider made earlier, at the batch
     * price: charged to the agent on the batch pool, but no sample of any estimate. */
    if (px->batch_op == SL_BATCH_RESULTS || px->batch_op == SL_BATCH_FILE_CONTENT) s.failed = true;
    /* The provider billed what it reported, whatever sluice's settle answers. */
    sl_bus_event_t used = {.kind = SL_BUS_USAGE, .usage = {px->agent, px->pool, px->model, &s}};
    sl__bus_publish(px->srv, &used);
    if (px->call) sl__access_note(px->call, NULL, NULL, lease);
    /* No headers but a 429's: they resynced the pool when they arrived (resync_at_arrival). */
    sl_backend_settle(px->srv->backend, lease, &s, on_settled, (void *)(uintptr_t)lease);
}

/* ---- upstream callbacks ------------------------------------------------------------------ */

static bool pass_to_client(const char *name)
{
    return !strcmp(name, "content-type") || !strcmp(name, "retry-after") ||
           !strcmp(name, "retry-after-ms") || !strcmp(name, "x-should-retry") ||
           !strcmp(name, "request-id") || !strcmp(name, "x-request-id") ||
           prefix_ci(name, "anthropic-") || prefix_ci(name, "x-ratelimit-") ||
           prefix_ci(name, "openai-");
}

static void on_resynced(int rc, double value, const char *errmsg, void *ud)
{
    uint64_t lease = (uint64_t)(uintptr_t)ud;
    (void)value;
    /* Unavailable: a snapshot is worth nothing later, and the next call brings another. */
    if (rc != SL_OK && rc != SL_EUNAVAILABLE && rc != SL_ENOTFOUND)
        sl__log(SL_LOG_WARN, "proxy: resync from the headers of l_%" PRIu64 " failed: %s",
                lease, errmsg ? errmsg : sl_strerror(rc));
}

/* The provider wrote its rate-limit headers while it held this call's reservation
 * (Anthropic counts max_tokens until the call ends), with the other calls then in
 * flight; the pool holds the same reservations at this moment, and only until this
 * call's settle refunds. So the headers are compared now, when both sides describe the
 * same instant: applied at the settle, a snapshot from the stream's start would undo
 * the refunds and the refill of the stream's whole life (design.md, "Resync from
 * provider headers"). Limits are bounded first, by the rule reports share. */
static void resync_at_arrival(px_t *px, const char *const *names, const char *const *values,
                              size_t n)
{
    /* A long-context call's headers describe the standard limits, not the long-context
     * pool it leased from: they would resync the wrong buckets. */
    if (!px->lease || px->long_context) return;
    /* A 429's headers do not count the refused call: they go with its settle (settle()). */
    if (px->status == 429) return;
    const char *rl_names[MAX_KEPT_HEADERS], *rl_values[MAX_KEPT_HEADERS];
    char scratch[MAX_KEPT_HEADERS][24];
    size_t count = 0;
    for (size_t i = 0; i < n && count < MAX_KEPT_HEADERS; i++) {
        if (!sl_header_is_ratelimit(names[i])) continue; /* names are lower-case */
        rl_names[count] = names[i];
        rl_values[count] = values[i];
        count++;
    }
    count = sl__bound_limit_headers(px->srv, px->pool, true, rl_names, rl_values, count, scratch);
    if (count == 0) return;
    /* When the call was sent after its grant: only the leases granted before it can have
     * been taken first (design.md, "A later grant taken first"). From the grant's arrival
     * here, a little after the backend made it (less excused, never more). */
    double up_s = px->xfer ? sl_upstream_sent_after_s(px->xfer) : -1;
    double sent_after_s = up_s >= 0 && px->granted_s > 0 ? px->sent_s - px->granted_s + up_s : -1;
    sl_backend_resync(px->srv->backend, px->lease, sent_after_s, rl_names, rl_values, count,
                      on_resynced, (void *)(uintptr_t)px->lease);
}

static void on_up_headers(void *ud, int status, const char *const *names,
                          const char *const *values, size_t n)
{
    px_t *px = ud;
    px->status = status;
    sl__probes_answered(px->proxy->probes, px->pool);
    resync_at_arrival(px, names, values, n);
    for (size_t i = 0; i < n; i++) {
        if (pass_to_client(names[i])) kept_add(&px->pass, names[i], values[i]);
        if (!strcmp(names[i], "retry-after")) {
            char *end;
            double v = strtod(values[i], &end);
            if (end != values[i] && isfinite(v) && v >= 0) px->retry_after_s = v;
        }
    }
    if (px->ping) event_del(px->ping);
    if (!px->stream || status != 200 || px->unleased) return; /* buffered */
    px->streaming = true;
    if (px->sse_started || !px->call->req) return;
    add_pass_headers(px);
    if (!sl_hreq_has_header(px->call->req, "Cache-Control"))
        sl_hreq_add_header(px->call->req, "Cache-Control", "no-cache");
    sl_hreq_start(px->call->req, 200, "text/event-stream; charset=utf-8");
    if (px->cont) px->sse_started = true; /* the next parts go into this stream */
}

static size_t client_backlog(px_t *px)
{
    return px->call->req ? sl_hreq_backlog(px->call->req) : 0;
}

/* Moves every complete event from px->sse to `out`, reading usage on the way. */
static void take_events(px_t *px, struct evbuffer *out)
{
    if (px->responses && !px->cont) {
        sl__responses_take_events(px->sse, out, &px->sse_through, &px->usage);
        return;
    }
    for (;;) {
        struct evbuffer_ptr end = evbuffer_search(px->sse, "\n\n", 2, NULL);
        if (end.pos < 0) {
            if (evbuffer_get_length(px->sse) > SSE_EVENT_LIMIT_BYTES)
                evbuffer_add_buffer(out, px->sse); /* not SSE as we know it: pass it on */
            return;
        }
        size_t len = (size_t)end.pos + 2;
        const char *ev = (const char *)evbuffer_pullup(px->sse, (ev_ssize_t)len);
        bool drop = px->api == SL_UPSTREAM_OPENAI && !px->client_usage;
        bool pass = true;
        if (px->responses) /* continued (proxy_continue_openai.c): whole events */
            sl__responses_usage_from_event(ev, len - 2, &px->usage);
        else
            pass = sl__usage_from_event(px->api, ev, len - 2, drop, &px->usage);
        if (px->cont) { /* spliced with the other parts of the answer */
            sl__cont_event(px->cont, ev, len - 2, pass, out);
            evbuffer_drain(px->sse, len);
        } else if (pass) {
            evbuffer_remove_buffer(px->sse, out, len);
        } else {
            evbuffer_drain(px->sse, len);
        }
    }
}

static int on_up_body(void *ud, const char *data, size_t len)
{
    px_t *px = ud;
    if (!px->streaming) {
        if (!px->resp) px->resp = evbuffer_new();
        if (!px->resp || evbuffer_get_length(px->resp) + len > RESPONSE_LIMIT_BYTES) return -1;
        evbuffer_add(px->resp, data, len);
        return 1;
    }
    if (!px->call->req) return -1;
    if (client_backlog(px) > CLIENT_HIGH_WATER_BYTES) {
        px->paused = true; /* on_client_drained resumes */
        return 0;
    }
    struct evbuffer *out = evbuffer_new();
    if (!out) return -1;
    evbuffer_add(px->sse, data, len);
    take_events(px, out);
    if (px->first_token_s == 0 && px->usage.output_seen_tokens > 0) px->first_token_s = monotonic_s();
    send_chunk(px, out);
    evbuffer_free(out);
    return 1;
}

/* The backend's batch queue answered a bind or a release: nothing waits on it (a failure
 * leaves an entry that the backend forgets after its ttl). */
static void on_batch_queue_done(int rc, bool counted, int64_t queued, const char *errmsg,
                                void *ud)
{
    (void)rc, (void)counted, (void)queued, (void)errmsg, (void)ud;
}

static void batch_queue_call(px_t *px, sl_batchq_op_t op, const char *id, const char *new_id,
                             int64_t requests, double ttl_s)
{
    sl_batchq_call_t c = {.op = op, .pool = px->batch_pool, .id = id, .new_id = new_id,
                          .requests = requests, .ttl_s = ttl_s};
    sl_backend_batch_queue(px->srv->backend, &c, on_batch_queue_done, NULL);
}

/* A batch an answer shows ended leaves the queue (once, whichever replica sees it). */
static void on_batch_ended(const char *id, void *ud)
{
    px_t *px = ud;
    batch_queue_call(px, SL_BATCHQ_RELEASE, id, NULL, 0, 0);
}

/* The provider answered a batch call: the queue learns what the answer shows, and
 * Anthropic's results_url is pointed at the proxy. */
static void batch_answered(px_t *px)
{
    size_t len = px->resp ? evbuffer_get_length(px->resp) : 0;
    const char *body = len ? (const char *)evbuffer_pullup(px->resp, -1) : "";
    sl_batch_queue_t *q = px->proxy->batches;
    if (px->batch_hold[0]) {
        char id[SL_BATCHQ_ID_MAX + 1];
        int64_t requests = px->batch_requests;
        if (px->status == 200 && sl__batch_created(body, len, id, &requests))
            batch_queue_call(px, SL_BATCHQ_BIND, px->batch_hold, id, requests, BATCH_WINDOW_S);
        else
            batch_queue_call(px, SL_BATCHQ_RELEASE, px->batch_hold, NULL, 0, 0);
        px->batch_hold[0] = '\0';
    }
    if (px->status != 200) return;
    sl__batch_on_answer(q, px->api, px->batch_op, body, len, px->body, px->body_len,
                        in_header(px, "Content-Type"), on_batch_ended, px);
    const char *host = in_header(px, "Host");
    if (px->api != SL_UPSTREAM_ANTHROPIC || !host || px->batch_op == SL_BATCH_RESULTS) return;
    char base[320];
    snprintf(base, sizeof(base), "http://%.256s/anthropic", host);
    char *again = sl__batch_rewrite_results_url(body, len, base);
    if (again) {
        evbuffer_drain(px->resp, len);
        evbuffer_add(px->resp, again, strlen(again));
        free(again);
    }
}

static void on_up_done(void *ud, int result, bool request_sent, const char *errmsg)
{
    px_t *px = ud;
    px->xfer = NULL;
    if (px->sent_s > 0) {
        sl_bus_event_t up = {
            .kind = SL_BUS_UPSTREAM,
            .upstream = {px->pool, monotonic_s() - px->sent_s,
                         px->first_token_s > 0 ? px->first_token_s - px->sent_s : -1}};
        sl__bus_publish(px->srv, &up);
    }
    px->sent_s = px->first_token_s = 0;
    if (result == SL_UPSTREAM_OK && !px->streaming && px->resp && px->status == 200 &&
        px->responses)
        sl__responses_usage_from_body((const char *)evbuffer_pullup(px->resp, -1),
                                      evbuffer_get_length(px->resp), &px->usage);
    else if (result == SL_UPSTREAM_OK && !px->streaming && px->resp && px->status == 200 &&
             px->embeddings)
        sl__embeddings_usage_from_body((const char *)evbuffer_pullup(px->resp, -1),
                                       evbuffer_get_length(px->resp), &px->usage);
    else if (result == SL_UPSTREAM_OK && px->status == 200 && px->resp &&
             (px->batch_op == SL_BATCH_RESULTS || px->batch_op == SL_BATCH_FILE_CONTENT))
        sl__batch_results_usage(px->api, (const char *)evbuffer_pullup(px->resp, -1),
                                evbuffer_get_length(px->resp), &px->usage);
    else if (result == SL_UPSTREAM_OK && px->status == 200 && (px->moderations || px->batch_op))
        px->usage.have_input = px->usage.have_output = true; /* one request, no tokens */
    else if (result == SL_UPSTREAM_OK && !px->streaming && px->resp && px->status == 200)
        sl__usage_from_body(px->api, (const char *)evbuffer_pullup(px->resp, -1),
                            evbuffer_get_length(px->resp), &px->usage);
    settle(px, request_sent || px->status != 0);
    bool whole = result == SL_UPSTREAM_OK && px->status == 200;
    if (px->cont && whole && px->streaming && sl__cont_wants_more(px->cont)) {
        continue_call(px); /* cut at the cap: the next part goes on in this stream */
        return;
    }
    if (px->cont && whole && !px->streaming && px->resp) {
        int more = sl__cont_absorb(px->cont, (const char *)evbuffer_pullup(px->resp, -1),
                                   evbuffer_get_length(px->resp));
        if (more == 1) {
            continue_call(px);
            return;
        }
        char *joined = more == 0 ? sl__cont_answer(px->cont) : NULL;
        if (joined) {
            evbuffer_drain(px->resp, evbuffer_get_length(px->resp));
            evbuffer_add(px->resp, joined, strlen(joined));
            free(joined);
        }
    }
    if (px->streaming) {
        if (evbuffer_get_length(px->sse) > 0) {
            struct evbuffer *rest = evbuffer_new();
            if (rest) {
                evbuffer_add_buffer(rest, px->sse);
                send_chunk(px, rest);
                evbuffer_free(rest);
            }
        }
        if (result != SL_UPSTREAM_OK) {
            px_error(px, 502, "sluice: the provider's stream broke off: %s", errmsg);
            return;
        }
        px_end_stream(px);
        return;
    }
    if (result != SL_UPSTREAM_OK) {
        int status = result == SL_UPSTREAM_ETIMEOUT ? 504 : 502;
        px_error(px, status, "sluice: the provider could not be reached: %s", errmsg);
        return;
    }
    if (px->batch_op) batch_answered(px);
    size_t len = px->resp ? evbuffer_get_length(px->resp) : 0;
    const char *body = len ? (const char *)evbuffer_pullup(px->resp, -1) : "";
    if (px->sse_started) { /* our stream is open: the provider's error goes inside it */
        if (px->status == 200) {
            send_chunk_text(px, body, len);
            px_end_stream(px);
        } else {
            px_stream_error(px, body, len);
        }
        return;
    }
    px_reply(px, px->status, "application/json", body, len, true);
}

static const sl_upstream_cbs_t up_cbs = {on_up_headers, on_up_body, on_up_done};

/* ---- forwarding ---------------------------------------------------------------------------- */

static void px_forward(px_t *px)
{
    const sl_config_t *c = &px->srv->config;
    char err[256];
    px->phase = PX_UPSTREAM;
    if (px->wait_timer) event_del(px->wait_timer);
    sl_upstream_request_t rq = {
        .method = px->method,
        .url = px->url,
        .headers = (const char *const *)px->up_headers,
        .n_headers = px->n_up_headers,
        .body = px->body,
        .body_len = px->body_len,
        .ca_file = px->ca_file,
        .connect_timeout_s = SL_PROXY_CONF(c)->connect_timeout_s,
        .idle_timeout_s = SL_PROXY_CONF(c)->idle_timeout_s,
    };
    px->sent_s = monotonic_s();
    px->first_token_s = 0;
    px->xfer = sl_upstream_start(px->proxy->up, &rq, &up_cbs, px, err, sizeof(err));
    if (!px->xfer) {
        cancel_lease(px);
        px_error(px, 502, "sluice: %s", err);
    }
}

/* ---- waiting for a grant ------------------------------------------------------------------- */

static void on_ping(evutil_socket_t fd, short what, void *ud)
{
    px_t *px = ud;
    (void)fd;
    (void)what;
    static const char anthropic_ping[] = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    static const char openai_ping[] = ": ping\n\n";
    if (px->api == SL_UPSTREAM_ANTHROPIC)
        send_chunk_text(px, anthropic_ping, sizeof(anthropic_ping) - 1);
    else
        send_chunk_text(px, openai_ping, sizeof(openai_ping) - 1);
}

static void start_event_stream(px_t *px)
{
    sl_hreq_add_header(px->call->req, "Cache-Control", "no-cache");
    sl_hreq_start(px->call->req, 200, "text/event-stream; charset=utf-8");
    px->sse_started = true;
    on_ping(-1, 0, px); /* the first bytes now: the client's first-byte timer stops */
    double s = SL_PROXY_CONF(&px->srv->config)->ping_interval_s;
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - floor(s)) * 1e6)};
    px->ping = event_new(px->srv->base, -1, EV_PERSIST, on_ping, px);
    if (px->ping) event_add(px->ping, &tv);
}

static void stop_waiting(px_t *px)
{
    if (px->phase != PX_QUEUED) return;
    if (sl__idmap_get(&px->proxy->waiters, px->ticket) == px)
        sl__idmap_del(&px->proxy->waiters, px->ticket);
    if (px->wait_timer) event_del(px->wait_timer);
    px->phase = PX_START;
}

static void on_wait_timeout(evutil_socket_t fd, short what, void *ud)
{
    px_t *px = ud;
    (void)fd;
    (void)what;
    uint64_t ticket = px->ticket;
    stop_waiting(px);
    sl_backend_ticket_cancel(px->srv->backend, ticket, NULL, NULL);
    px_reject(px, "queue_wait_exceeds_max", px->limited_by, 1);
}

static void on_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud);

static void queue_call(px_t *px, uint64_t ticket)
{
    sl_server_t *srv = px->srv;
    if (sl__idmap_put(&px->proxy->waiters, ticket, px) < 0) {
        sl_backend_ticket_cancel(srv->backend, ticket, NULL, NULL);
        px_error(px, 503, "sluice: out of memory");
        return;
    }
    px->phase = PX_QUEUED;
    px->ticket = ticket;
    double s = SL_PROXY_CONF(&srv->config)->max_hold_s;
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - floor(s)) * 1e6)};
    if (!px->wait_timer) px->wait_timer = evtimer_new(srv->base, on_wait_timeout, px);
    if (px->wait_timer) evtimer_add(px->wait_timer, &tv);
    sl_backend_ticket_hold(srv->backend, ticket, true, NULL, NULL);
    if (px->stream && !px->sse_started) start_event_stream(px);
}

/* A call was queued: a cold pool, or a margin that could climb with nothing in flight,
 * waits for the provider's headers, so proxy_probe.c may ask for them. Not for a
 * long-context call (its headers describe the standard pool) nor a pool of several keys
 * (the key is picked at the grant). */
static void probe_if_waiting(px_t *px)
{
    const sl_pool_upstream_t *up = sl_config_pool_upstream(&px->srv->config, px->pool);
    if (px->long_context || !up || up->key_group || px->batch_op || !px->url ||
        !SL_PROXY_CONF(&px->srv->config)->probe)
        return;
    sl__probes_queued(px->proxy->probes, px->srv, px->proxy->up, px->pool, px->model, px->url,
                      (const char *const *)px->up_headers, px->n_up_headers, (int)px->api,
                      px->responses);
}

static void on_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    px_t *px = ud;
    if (px->gone) { /* the client left while the backend decided */
        if (rc == SL_OK && d->status == SL_GRANTED) {
            px->lease = d->lease;
            cancel_lease(px);
        } else if (rc == SL_OK && d->status == SL_QUEUED) {
            sl_backend_ticket_cancel(px->srv->backend, d->ticket, NULL, NULL);
        }
        px_free(px);
        return;
    }
    if (rc != SL_OK) {
        /* errors.def: as the lease API, but the provider's 400 for what can never fit;
         * Redis away is a 503 (fail: closed). */
        int status = sl__error_status(rc, SL_DIALECT_PROVIDER, NULL);
        px_error(px, status, "sluice: %s", errmsg && *errmsg ? errmsg : sl_strerror(rc));
        return;
    }
    if (px->phase == PX_START) { /* the request's answer, not a queued ticket's poll */
        sl_bus_event_t ev = {
            .kind = SL_BUS_DECISION,
            .decision = {.task = in_header(px, "x-sluice-task"), .d = d},
        };
        sl__bus_publish(px->srv, &ev);
    }
    switch (d->status) {
    case SL_GRANTED:
        px->lease = d->lease;
        px->granted_s = monotonic_s();
        if (rekey_upstream(px) < 0 || cap_forwarded_output(px, d->charged_output_tokens) < 0) {
            cancel_lease(px);
            px_error(px, 503, "sluice: out of memory");
            return;
        }
        px_forward(px);
        return;
    case SL_QUEUED:
        px->limited_by = d->limited_by;
        queue_call(px, d->ticket);
        probe_if_waiting(px);
        return;
    case SL_REJECTED:
        px_reject(px, d->reason, d->limited_by, d->retry_after_s);
        return;
    }
    px_error(px, 500, "sluice: unknown decision %d", (int)d->status);
}

/* Backend events about tickets proxied calls wait on. */
static void on_ticket_event(sl_proxy_t *proxy, const sl_event_t *ev)
{
    px_t *px = sl__idmap_get(&proxy->waiters, ev->ticket);
    if (!px) return;
    switch (ev->kind) {
    case SL_EV_GRANTED:
        stop_waiting(px);
        /* Another key of a pool of several keys may have granted it (one queue over the
         * keys): the call goes out with the key of the lease's pool (of a long-context
         * pool, the key it belongs to). */
        if (ev->pool)
            snprintf(px->pool, sizeof(px->pool), "%s",
                     sl__long_context_parent(&px->srv->config, ev->pool));
        /* The poll claims the lease (unclaimed grants are refunded after a while). */
        sl_backend_ticket_poll(px->srv->backend, ev->ticket, on_decision, px);
        break;
    case SL_EV_TICKET_REJECTED:
        stop_waiting(px);
        px_reject(px, ev->reason, px->limited_by, ev->retry_at - ev->now_s);
        break;
    case SL_EV_TICKET_CANCELLED:
    case SL_EV_TICKET_EXPIRED:
        stop_waiting(px);
        px_error(px, 503, "sluice: the queued request was dropped (%s)",
                 ev->kind == SL_EV_TICKET_EXPIRED ? "expired" : "cancelled");
        break;
    default:
        break;
    }
}

/* The proxy's share of the bus (proxy_feature.c): engine events about its tickets. */
void sl__proxy_on_event(sl_server_t *srv, const sl_bus_event_t *ev)
{
    if (ev->kind == SL_BUS_ENGINE && proxy_of(srv) && ev->engine->ticket)
        on_ticket_event(proxy_of(srv), ev->engine);
}

/* ---- the client leaving ---------------------------------------------------------------------- */

static void px_client_gone(px_t *px)
{
    switch (px->phase) {
    case PX_START:
        px->gone = true; /* on_decision cleans up */
        return;
    case PX_QUEUED: {
        uint64_t ticket = px->ticket;
        stop_waiting(px);
        /* The place goes; a grant that raced the close is refunded by the engine. */
        sl_backend_ticket_cancel(px->srv->backend, ticket, NULL, NULL);
        px_free(px);
        return;
    }
    case PX_UPSTREAM:
        if (px->xfer) {
            sl_upstream_cancel(px->xfer);
            px->xfer = NULL;
        }
        settle(px, true);
        px_free(px);
        return;
    }
}

/* ---- the call's lifetime ---------------------------------------------------------------------- */

static void px_free(px_t *px)
{
    sl_proxy_t *proxy = px->proxy;
    stop_waiting(px);
    if (px->xfer) sl_upstream_cancel(px->xfer);
    if (px->lease) cancel_lease(px); /* a path that forgot to settle: give it back */
    if (px->batch_hold[0]) batch_queue_call(px, SL_BATCHQ_RELEASE, px->batch_hold, NULL, 0, 0);
    sl__cont_free(px->cont);
    unwatch_client(px);
    if (px->wait_timer) event_free(px->wait_timer);
    if (px->ping) event_free(px->ping);
    if (px->prev)
        px->prev->next = px->next;
    else if (proxy->calls == px)
        proxy->calls = px->next;
    if (px->next) px->next->prev = px->prev;
    for (size_t i = 0; i < px->n_up_headers; i++) {
        /* One of them holds the provider key. */
        volatile char *h = px->up_headers[i];
        for (size_t k = 0; h[k]; k++)
            h[k] = '\0';
        free(px->up_headers[i]);
    }
    free(px->up_headers);
    kept_clear(&px->pass);
    if (px->resp) evbuffer_free(px->resp);
    if (px->sse) evbuffer_free(px->sse);
    free(px->body);
    free(px->url);
    free(px->ca_file);
    px->call->req = NULL; /* answered or gone by now */
    sl__call_free(px->call);
    free(px);
}

/* ---- identity ----------------------------------------------------------------------------------- */

/* The key the SDK sent: x-api-key, else Authorization: Bearer. */
static const char *presented_key(px_t *px)
{
    const char *k = in_header(px, "x-api-key");
    if (k && *k) return k;
    const char *a = in_header(px, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        a += 7;
        while (*a == ' ')
            a++;
        return a;
    }
    return NULL;
}

/* True when some pool of this endpoint's API lists the models it serves: the pool is
 * then picked from the request's model (route_by_model). */
static bool routes_by_model(const px_t *px)
{
    const sl_config_t *c = &px->srv->config;
    for (size_t i = 0; c->upstreams && i < c->settings.n_pools; i++)
        if (c->upstreams[i].api == px->api && c->upstreams[i].n_models > 0 &&
            !c->upstreams[i].batch)
            return true;
    return false;
}

/* The name a call takes pool i by: a key of a pool of several keys goes by its pool
 * (keys.c picks the key when the lease is asked for). */
static const char *routed_name(const sl_config_t *c, size_t i)
{
    return c->upstreams[i].key_group ? c->upstreams[i].key_group : c->settings.pools[i].name;
}

/* The batch pool of this endpoint's provider: the one x-sluice-pool names (checked by
 * identify), else the first of its pools with `batch: true`, or NULL. */
static const char *batch_pool(px_t *px)
{
    const char *h = in_header(px, "x-sluice-pool");
    if (h) return h;
    const sl_config_t *c = &px->srv->config;
    for (size_t i = 0; c->upstreams && i < c->settings.n_pools; i++)
        if (c->upstreams[i].api == px->api && c->upstreams[i].batch)
            return c->settings.pools[i].name;
    return NULL;
}

/* The pool for this call: the batch pool for the batch APIs, x-sluice-pool, the token's
 * only pool, "" when it is to be picked from the model once the body is read, or the first
 * pool (not a batch pool) whose provider speaks this endpoint's API. */
static const char *choose_pool(px_t *px)
{
    if (px->batch_op) return batch_pool(px);
    const char *h = in_header(px, "x-sluice-pool");
    if (h) return h;
    const sl_token_rule_t *t = px->call->token;
    if (t && t->n_pools == 1) return t->pools[0];
    if (routes_by_model(px)) return "";
    const sl_config_t *c = &px->srv->config;
    for (size_t i = 0; i < c->settings.n_pools; i++)
        if (c->upstreams && c->upstreams[i].api == px->api && !c->upstreams[i].batch)
            return routed_name(c, i);
    return NULL;
}

/* Picks px->pool from px->model: the first pool of this API (in the file's order) one
 * of whose `models` patterns matches and which the token may use, else
 * proxy.default_pool. Returns 0, or -1 after answering 400 or 403. */
static int route_by_model(px_t *px)
{
    const sl_config_t *c = &px->srv->config;
    const char *forbidden = NULL;
    for (size_t i = 0; i < c->settings.n_pools; i++) {
        const sl_pool_upstream_t *up = &c->upstreams[i];
        if (up->api != px->api || up->batch) continue; /* batch pools serve the batch APIs */
        for (size_t k = 0; k < up->n_models; k++) {
            if (fnmatch(up->models[k], px->model, 0) != 0) continue;
            const char *name = routed_name(c, i);
            if (!sl__token_may_use(px->call, NULL, name)) {
                if (!forbidden) forbidden = name;
                break;
            }
            snprintf(px->pool, sizeof(px->pool), "%s", name);
            return 0;
        }
    }
    if (forbidden) {
        px_error(px, 403, "sluice: model '%s' is served by pool '%s', which this token may not use",
                 px->model, forbidden);
        return -1;
    }
    const char *def = SL_PROXY_CONF(c)->default_pool;
    if (def && sl__token_may_use(px->call, NULL, def)) {
        snprintf(px->pool, sizeof(px->pool), "%s", def);
        return 0;
    }
    px_error(px, 400,
             "sluice: model '%s' is served by no pool: no pool's `models` matches it and "
             "proxy.default_pool is %s (or name a pool with x-sluice-pool)",
             px->model[0] ? px->model : "(none)", def ? "not allowed for this token" : "not set");
    return -1;
}

/* Fills px->agent and px->pool and `id`. Returns 0, or -1 after answering. */
static int identify(px_t *px, identity_t *id)
{
    const sl_config_t *c = &px->srv->config;
    sl_call_t *call = px->call;
    const char *agent = in_header(px, "x-sluice-agent");
    if (!sl_config_auth_enabled(c)) {
        call->admin = true;
    } else {
        const char *key = presented_key(px);
        if (key) sl__token_identify(call, key);
        if (!call->admin && !call->token) {
            if (SL_PROXY_CONF(c)->allow_unauthenticated && agent) {
                call->admin = true; /* identified by its headers, as the config allows */
            } else {
                px_error(px, 401,
                         key ? "sluice: the API key is not a sluice agent token"
                             : "sluice: an API key is needed (the agent's sluice token)");
                return -1;
            }
        }
    }
    if (!agent) {
        const sl_token_rule_t *t = call->token;
        if (t && t->agent_prefix) {
            px_error(px, 403,
                     "sluice: x-sluice-agent: this token stands for agents named '%s...'; name "
                     "the agent",
                     t->agent_prefix);
            return -1;
        }
        agent = t ? t->agent : "anonymous";
    }
    if (!sl__name_ok(agent, 128)) {
        px_error(px, 400, "sluice: x-sluice-agent: '%.64s' must be 1-128 of A-Z a-z 0-9 . _ : -",
                 agent);
        return -1;
    }
    id->role = in_header(px, "x-sluice-role");
    id->task = in_header(px, "x-sluice-task");
    id->priority = in_header(px, "x-sluice-priority");
    const char *ub = in_header(px, "x-sluice-unblocks");
    id->unblocks = 0;
    if (ub) { /* the header's syntax; its bound is admit.c's */
        char *end;
        errno = 0;
        long long v = strtoll(ub, &end, 10);
        if (errno || end == ub || *end || v < 0) {
            px_error(px, 400, "sluice: x-sluice-unblocks: '%.32s' is not an integer 0-%" PRId64
                     " (max_unblocks)", ub, sl__max_unblocks(call));
            return -1;
        }
        id->unblocks = v;
    }
    const char *pool = choose_pool(px);
    if (!pool && px->batch_op) {
        px_error(px, 404,
                 "sluice: %.256s is a batch endpoint, served with a batch pool: no pool of "
                 "provider %s has `batch: true` (see docs/proxy.md)",
                 sl_hreq_target(call->req), px->api == SL_UPSTREAM_OPENAI ? "openai" : "anthropic");
        return -1;
    }
    if (!pool) {
        px_error(px, 404, "sluice: no pool has an upstream with provider %s",
                 px->api == SL_UPSTREAM_OPENAI ? "openai" : "anthropic");
        return -1;
    }
    if (strlen(pool) > 128) {
        px_error(px, 400, "sluice: x-sluice-pool: the name is longer than 128 characters");
        return -1;
    }
    const sl_pool_upstream_t *bup = sl_config_pool_upstream(c, pool);
    if (px->batch_op && (!bup || !bup->batch || bup->api != px->api)) {
        px_error(px, 400, "sluice: x-sluice-pool: '%s' is not a batch pool of provider %s (a pool "
                          "with batch: true); the batch endpoints use only those",
                 pool, px->api == SL_UPSTREAM_OPENAI ? "openai" : "anthropic");
        return -1;
    }
    /* The claims that need no body nor the task graph, refused before either is read;
     * the rest (the role) when the lease is asked for (ask_lease). */
    sl_request_t claims = {.agent = agent, .pool = pool, .unblocks = id->unblocks,
                           .priority = id->priority};
    sl_refusal_t ref;
    if (sl__admit_claims(call, SL_DIALECT_PROVIDER, &claims, &ref) < 0) {
        px_refuse(px, &ref);
        return -1;
    }
    snprintf(px->agent, sizeof(px->agent), "%s", agent);
    snprintf(px->pool, sizeof(px->pool), "%s", pool);
    return 0;
}

/* ---- building the upstream request ---------------------------------------------------------------- */

static bool forward_request_header(const char *name)
{
    static const char *const dropped[] = {
        "host",           "content-length", "connection",   "keep-alive", "proxy-connection",
        "transfer-encoding", "te",          "trailer",      "upgrade",    "expect",
        "accept-encoding", "x-api-key",     "authorization", "proxy-authorization", "cookie",
    };
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
        if (!strcasecmp(name, dropped[i])) return false;
    return !prefix_ci(name, "x-sluice-");
}

static int add_up_header(px_t *px, const char *name, const char *value)
{
    char **grown = realloc(px->up_headers, (px->n_up_headers + 1) * sizeof(*grown));
    if (!grown) return -1;
    px->up_headers = grown;
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line) return -1;
    snprintf(line, n, "%s: %s", name, value);
    grown[px->n_up_headers++] = line;
    return 0;
}

/* The key's own headers: its secret as the provider takes it, then its workspace or
 * project headers. Marks where they start (rekey_upstream replaces them). */
static int add_key_headers(px_t *px, const sl_pool_upstream_t *up)
{
    px->key_header_at = px->n_up_headers;
    for (size_t i = 0; i < up->n_headers; i++) {
        const char *colon = strchr(up->headers[i], ':');
        char name[72];
        snprintf(name, sizeof(name), "%.*s", (int)(colon - up->headers[i]), up->headers[i]);
        if (add_up_header(px, name, colon + 2) < 0) return -1;
    }
    if (up->api == SL_UPSTREAM_OPENAI) {
        char *bearer = malloc(strlen(up->api_key) + 8);
        if (!bearer) return -1;
        sprintf(bearer, "Bearer %s", up->api_key);
        int rc = add_up_header(px, "Authorization", bearer);
        memset(bearer, 0, strlen(bearer));
        free(bearer);
        return rc;
    }
    return add_up_header(px, "x-api-key", up->api_key);
}

/* The provider's URL, headers (the pool's key in place of the agent's) and TLS settings. */
static int build_upstream(px_t *px, const sl_pool_upstream_t *up, const char *path,
                          const char *query)
{
    size_t n = strlen(up->url) + strlen(path) + (query ? strlen(query) + 1 : 0) + 1;
    px->url = malloc(n);
    if (!px->url) return -1;
    snprintf(px->url, n, "%s%s%s%s", up->url, path, query && *query ? "?" : "",
             query && *query ? query : "");
    px->url_path_at = strlen(up->url);
    if (up->ca_file && !(px->ca_file = strdup(up->ca_file))) return -1;
    for (size_t i = 0; i < sl_hreq_header_count(px->call->req); i++) {
        const char *name, *value;
        sl_hreq_header_at(px->call->req, i, &name, &value);
        if (forward_request_header(name) && add_up_header(px, name, value) < 0) return -1;
    }
    return add_key_headers(px, up);
}

/* A pool of several keys: the call goes with the key of the pool its lease came from
 * (px->pool, "POOL:KEY" once keys.c has chosen), in place of the group's first key's
 * URL and headers that build_upstream put there. Returns 0, or -1 when out of memory. */
static int rekey_upstream(px_t *px)
{
    const sl_pool_upstream_t *up = sl_config_pool_upstream(&px->srv->config, px->pool);
    if (!up || !up->key_group || !px->url) return 0;
    size_t n = strlen(up->url) + strlen(px->url + px->url_path_at) + 1;
    char *url = malloc(n);
    if (!url) return -1;
    snprintf(url, n, "%s%s", up->url, px->url + px->url_path_at);
    free(px->url);
    px->url = url;
    px->url_path_at = strlen(up->url);
    while (px->n_up_headers > px->key_header_at) {
        char *h = px->up_headers[--px->n_up_headers];
        memset(h, 0, strlen(h)); /* the key is a secret */
        free(h);
    }
    return add_key_headers(px, up);
}

/* ---- the request ---------------------------------------------------------------------------------- */

/* The vocabulary, or NULL when the configuration says `estimator: bytes`. */
static sl_tokenizer_t *tokenizer(sl_proxy_t *proxy)
{
    return SL_PROXY_CONF(&proxy->srv->config)->estimate_bytes ? NULL : proxy->tok;
}

int sl__proxy_estimator_ready(sl_server_t *srv, const sl_config_t *c, char *err, size_t errlen)
{
    sl_proxy_t *proxy = proxy_of(srv);
    if (SL_PROXY_CONF(c)->estimate_bytes || !proxy || proxy->tok) return 0;
    /* Never a silent downgrade: bytes / 4 can be off by a factor of two or more on code
     * and non-Latin text, so only the configuration may choose it. */
    const char *path = sl_tokenizer_default_path();
    char why[512];
    if (sl_tokenizer_load(NULL, &proxy->tok, why, sizeof(why)) != 0) {
        snprintf(err, errlen,
                 "proxy: tokenizer vocabulary: %s; install it there, point SLUICE_VOCAB at it, "
                 "or set `proxy.estimator: bytes` to estimate input as body bytes / 4",
                 why);
        return -1;
    }
    free(proxy->vocab_path);
    proxy->vocab_path = strdup(path);
    sl__log(SL_LOG_INFO, "proxy: estimating input with the tokenizer vocabulary %s", path);
    return 0;
}

void sl__proxy_metrics_render(const sl_server_t *srv, struct evbuffer *out)
{
    const sl_proxy_t *proxy = proxy_of(srv);
    bool bytes = SL_PROXY_CONF(&srv->config)->estimate_bytes || !proxy || !proxy->tok;
    evbuffer_add_printf(out,
                        "# HELP sluice_proxy_estimator_info How the proxy estimates input "
                        "tokens: the tokenizer and its vocabulary, or body bytes / 4.\n"
                        "# TYPE sluice_proxy_estimator_info gauge\n"
                        "sluice_proxy_estimator_info{estimator=\"%s\",vocabulary=\"",
                        bytes ? "bytes" : "tokenizer");
    if (!bytes && proxy->vocab_path) sl__prom_label(out, proxy->vocab_path);
    evbuffer_add_printf(out, "\"} 1\n");
}

/* Reads the body: size limit, JSON, stream flags, model; OpenAI streams get
 * include_usage. Returns the parsed body (caller decrefs), or NULL after answering. */
static json_t *read_body(px_t *px)
{
    const sl_config_t *c = &px->srv->config;
    size_t len;
    const char *in = sl_hreq_body(px->call->req, &len);
    if (len > SL_PROXY_CONF(c)->body_limit_bytes) {
        px_error(px, 413, "sluice: the body of %zu bytes is over the proxy's limit of %zu bytes",
                 len, SL_PROXY_CONF(c)->body_limit_bytes);
        return NULL;
    }
    px->body = malloc(len + 1);
    if (!px->body) {
        px_error(px, 503, "sluice: out of memory");
        return NULL;
    }
    memcpy(px->body, in, len);
    px->body[len] = '\0';
    px->body_len = len;
    json_error_t jerr;
    json_t *j = json_loadb(px->body, len, 0, &jerr);
    if (!json_is_object(j)) {
        json_decref(j);
        px_error(px, 400, "sluice: the body is not a JSON object (line %d column %d: %s)",
                 jerr.line, jerr.column, j ? "not an object" : jerr.text);
        return NULL;
    }
    px->stream = json_is_true(json_object_get(j, "stream"));
    const char *model = json_string_value(json_object_get(j, "model"));
    if (model && strlen(model) <= 128) snprintf(px->model, sizeof(px->model), "%s", model);
    px->chained = px->responses && json_is_string(json_object_get(j, "previous_response_id"));
    if (px->api == SL_UPSTREAM_OPENAI && !px->responses && px->stream) {
        json_t *so = json_object_get(j, "stream_options");
        px->client_usage = json_is_true(json_object_get(so, "include_usage"));
        if (!px->client_usage) {
            if (!json_is_object(so)) {
                so = json_object();
                json_object_set_new(j, "stream_options", so);
            }
            json_object_set_new(so, "include_usage", json_true());
            char *again = json_dumps(j, JSON_COMPACT);
            if (!again) {
                json_decref(j);
                px_error(px, 503, "sluice: out of memory");
                return NULL;
            }
            free(px->body);
            px->body = again;
            px->body_len = strlen(again);
        }
    }
    return j;
}

static void estimate(px_t *px, const json_t *j)
{
    char err[256];
    sl_tokenizer_t *tok = tokenizer(px->proxy);
    sl_api_t api = px->responses               ? SL_API_OPENAI_RESPONSES
                   : px->api == SL_UPSTREAM_OPENAI ? SL_API_OPENAI
                                                   : SL_API_ANTHROPIC;
    if (!tok || sl_estimate_json(tok, api, j, &px->est, err, sizeof(err)) != 0) {
        /* Let the provider judge the body; reserve by size, and say so: the answer
         * carries x-sluice-estimate: fallback, stderr the reason. */
        if (tok)
            sl__log(SL_LOG_WARN, "proxy: agent '%s': %s body estimated as bytes / 4: %s",
                    px->agent, px->responses ? "responses" : px->api == SL_UPSTREAM_OPENAI
                                                                 ? "chat completions"
                                                                 : "messages",
                    err);
        if (px->call->req) sl_hreq_add_header(px->call->req, "x-sluice-estimate", "fallback");
        px->est.input_tokens = (int64_t)(px->body_len / 4);
        px->est.cached_tokens = 0;
    }
    /* What the provider will hold: the body's limit times its choices (proxy_output.c). */
    px->est.output_tokens = sl__proxy_output_tokens(&px->out);
}

/* proxy.continue_capped applies to the call whose body is `j`: the client named its own
 * limit, asks one choice, and is not an OpenAI call asking for JSON. */
static bool continuable(const px_t *px, const json_t *j)
{
    return SL_PROXY_CONF(&px->srv->config)->continue_capped && px->out.per_choice_tokens > 0 &&
           px->out.choices == 1 &&
           (px->api != SL_UPSTREAM_OPENAI || sl__oai_cont_takes(j, px->responses));
}

/* The lease reserved less output than the call asks (output_reserve: learned, a share
 * cap): the body goes upstream with its limit lowered to the reservation, so the provider
 * never holds more than sluice reserved. Returns 0, or -1 when out of memory. */
static int cap_forwarded_output(px_t *px, int64_t reserved_tokens)
{
    int64_t asked = px->est.output_tokens;
    if (px->cont) sl__cont_round(px->cont, reserved_tokens < asked ? reserved_tokens : asked);
    if (!px->out.cappable || reserved_tokens >= asked) return 0;
    json_t *j = json_loadb(px->body, px->body_len, 0, NULL);
    /* proxy.continue_capped: an answer cut at the cap is continued (proxy_continue.c). */
    if (j && !px->cont && continuable(px, j)) {
        if (!(px->cont = sl__cont_new(px->api, px->responses, j, px->out.field,
                                      px->out.per_choice_tokens))) {
            json_decref(j);
            return -1;
        }
        sl__cont_round(px->cont, reserved_tokens);
    }
    int rc = j ? sl__proxy_output_cap(j, &px->out, reserved_tokens) : -1;
    char *again = rc == 1 ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (rc < 0 || (rc == 1 && !again)) return -1;
    if (rc == 0) return 0;
    free(px->body);
    px->body = again;
    px->body_len = strlen(again);
    if (px->call->req && !px->sse_started && !px->cont) {
        char v[32];
        snprintf(v, sizeof(v), "%" PRId64, reserved_tokens / px->out.choices);
        sl_hreq_add_header(px->call->req, "x-sluice-output-cap", v);
    }
    return 0;
}

/* The upstream of px->pool, or NULL after answering 404 or 400. */
static const sl_pool_upstream_t *pool_upstream(px_t *px)
{
    const sl_pool_upstream_t *up = sl_config_pool_upstream(&px->srv->config, px->pool);
    if (!up) {
        px_error(px, 404, "sluice: pool '%s' is not configured", px->pool);
        return NULL;
    }
    if (up->api != px->api || !up->url) {
        px_error(px, 400, "sluice: pool '%s' has no %s upstream", px->pool,
                 px->api == SL_UPSTREAM_OPENAI ? "openai" : "anthropic");
        return NULL;
    }
    return up;
}

static void ask_lease(px_t *px);

/* proxy.continue_capped: the part just settled was cut at its cap below the client's
 * own max_tokens. The next part is the client's body with the answer so far as an
 * assistant prefill and max_tokens = what the client's limit leaves: a call of its own,
 * estimated, leased (and capped) like the first, its events spliced into the answer. */
static void continue_call(px_t *px)
{
    int64_t left = 0;
    char *body = sl__cont_next_body(px->cont, &left);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    char err[256];
    if (!j || sl__proxy_output_read(px->api, px->responses, j, &px->out, err, sizeof(err)) < 0) {
        json_decref(j);
        free(body);
        px_error(px, 503, "sluice: out of memory continuing the answer");
        return;
    }
    free(px->body);
    px->body = body;
    px->body_len = strlen(body);
    px->status = 0;
    px->streaming = false;
    px->retry_after_s = -1;
    memset(&px->usage, 0, sizeof(px->usage));
    kept_clear(&px->pass);
    if (px->resp) evbuffer_drain(px->resp, evbuffer_get_length(px->resp));
    evbuffer_drain(px->sse, evbuffer_get_length(px->sse));
    estimate(px, j);
    json_decref(j);
    ask_lease(px);
}

/* The backend answered a create's hold: the lease is asked for when its requests fit the
 * processing-queue bound; over it, a 429 in the provider's shape with a retry-after. */
static void on_batch_held(int rc, bool counted, int64_t queued, const char *errmsg, void *ud)
{
    px_t *px = ud;
    if (rc != SL_OK || !counted) px->batch_hold[0] = '\0';
    if (px->gone) { /* the client left while the backend decided: px_free releases */
        px_free(px);
        return;
    }
    if (rc != SL_OK) {
        px_error(px, sl__error_status(rc, SL_DIALECT_PROVIDER, NULL), "sluice: %s",
                 errmsg && *errmsg ? errmsg : sl_strerror(rc));
        return;
    }
    if (!counted) {
        const sl_pool_upstream_t *up = sl_config_pool_upstream(&px->srv->config, px->batch_pool);
        set_retry_headers(px, BATCH_RETRY_AFTER_S);
        px_error(px, 429,
                 "sluice: batch pool '%s' has %" PRId64 " requests in the provider's "
                 "processing queue; %" PRId64 " more are over max_batch_requests %" PRId64
                 " (a batch leaves the count when a retrieve shows it ended); retry after "
                 "%.0f s",
                 px->batch_pool, queued, px->batch_requests, up ? up->max_batch_requests : 0,
                 BATCH_RETRY_AFTER_S);
        return;
    }
    ask_lease(px);
}

/* Holds a create's `requests` in the backend's queue of its batch pool (shared by every
 * replica) before the create goes to the provider; on_batch_held goes on. */
static void hold_batch(px_t *px, int64_t requests, int64_t max_requests)
{
    sl_proxy_t *proxy = px->proxy;
    snprintf(px->batch_hold, sizeof(px->batch_hold), "hold-%016" PRIx64 "-%" PRIu64,
             proxy->hold_nonce, ++proxy->holds);
    px->batch_requests = requests;
    sl_batchq_call_t c = {.op = SL_BATCHQ_ADD, .pool = px->batch_pool, .id = px->batch_hold,
                          .requests = requests, .max_requests = max_requests,
                          .ttl_s = BATCH_HOLD_TTL_S};
    sl_backend_batch_queue(px->srv->backend, &c, on_batch_held, px);
}

/* The batch APIs: the pool's key, one request and no tokens on the batch pool; a create
 * first holds its requests in the pool's processing-queue bound (max_batch_requests),
 * refused 429 with a retry-after when they do not fit. */
static void start_batch(px_t *px, const sl_pool_upstream_t *up, const char *path, const char *query)
{
    const sl_config_t *c = &px->srv->config;
    size_t len = 0;
    const char *in = sl_hreq_body(px->call->req, &len);
    const char *ctype = sl_hreq_header(px->call->req, "Content-Type");
    bool upload = px->batch_op == SL_BATCH_FILE_UPLOAD;
    /* The batch pool's name before a lease may make px->pool "POOL:KEY". */
    snprintf(px->batch_pool, sizeof(px->batch_pool), "%s", px->pool);
    if (len > SL_PROXY_CONF(c)->body_limit_bytes) {
        px_error(px, 413,
                 "sluice: the body of %zu bytes is over the proxy's limit of %zu bytes "
                 "(proxy.body_limit_bytes)",
                 len, SL_PROXY_CONF(c)->body_limit_bytes);
        return;
    }
    /* Only what the SDKs send: a page cannot send either without a CORS preflight. */
    if ((upload && (!ctype || strncasecmp(ctype, "multipart/form-data", 19) != 0)) ||
        (!upload && len > 0 && (!ctype || !sl__is_json_media_type(ctype)))) {
        px_error(px, 415, "sluice: Content-Type: '%.128s' is not accepted; %s takes %s",
                 ctype ? ctype : "(missing)", sl_hreq_target(px->call->req),
                 upload ? "multipart/form-data" : "application/json");
        return;
    }
    if (len > 0 && strcmp(px->method, "POST") == 0) {
        if (!(px->body = malloc(len + 1))) {
            px_error(px, 503, "sluice: out of memory");
            return;
        }
        memcpy(px->body, in, len);
        px->body[len] = '\0';
        px->body_len = len;
    }
    int64_t n = 0;
    if (px->batch_op == SL_BATCH_CREATE) {
        char err[256];
        json_t *j = px->body ? json_loadb(px->body, px->body_len, 0, NULL) : NULL;
        n = json_is_object(j) ? sl__batch_create_requests(px->proxy->batches, px->api, j, err,
                                                          sizeof(err))
                              : -1;
        if (!json_is_object(j)) snprintf(err, sizeof(err), "sluice: the body is not a JSON object");
        json_decref(j);
        if (n < 0) {
            px_error(px, 400, "%s", err);
            return;
        }
        if (n > up->max_batch_requests) {
            px_error(px, 400,
                     "sluice: a batch of %" PRId64 " requests never fits pool '%s' "
                     "(max_batch_requests %" PRId64 ")",
                     n, px->pool, up->max_batch_requests);
            return;
        }
    }
    if (build_upstream(px, up, path, query) < 0 || !(px->sse = evbuffer_new())) {
        px_error(px, 503, "sluice: out of memory");
        return;
    }
    watch_client(px);
    px->stream = false;
    if (px->batch_op == SL_BATCH_CREATE)
        hold_batch(px, n, up->max_batch_requests);
    else
        ask_lease(px);
}

static void start_call(px_t *px, const char *path, const char *query)
{
    const sl_config_t *c = &px->srv->config;
    size_t n_headers = sl_hreq_header_count(px->call->req);
    if (n_headers > SL_PROXY_CONF(c)->max_headers) {
        px_error(px, 431, "sluice: %zu request headers are more than the proxy's limit of %zu",
                 n_headers, SL_PROXY_CONF(c)->max_headers);
        return;
    }
    identity_t id;
    if (identify(px, &id) < 0) return;
    const sl_pool_upstream_t *up = NULL;
    if (px->pool[0] && !(up = pool_upstream(px))) return;
    px->id = id;
    if (px->batch_op) {
        start_batch(px, up, path, query);
        return;
    }
    if (!strcmp(px->method, "GET")) { /* the model list: no body, no lease */
        if (!up) { /* routed by model, and a list names none: the first pool of this API */
            for (size_t i = 0; i < c->settings.n_pools && !px->pool[0]; i++)
                if (c->upstreams && c->upstreams[i].api == px->api)
                    snprintf(px->pool, sizeof(px->pool), "%s", c->settings.pools[i].name);
            if (!(up = pool_upstream(px))) return;
        }
        if (build_upstream(px, up, path, query) < 0) {
            px_error(px, 503, "sluice: out of memory");
            return;
        }
        watch_client(px);
        px_forward(px);
        return;
    }
    /* What the SDKs send; a web page can only send it after a CORS preflight, so no page
     * spends the pool's key with a text/plain POST. */
    const char *ctype = sl_hreq_header(px->call->req, "Content-Type");
    if (!ctype || !sl__is_json_media_type(ctype)) {
        px_error(px, 415, "sluice: Content-Type: '%.128s' is not accepted; the proxy takes "
                          "application/json", ctype ? ctype : "(missing)");
        return;
    }
    json_t *j = read_body(px);
    if (!j) return;
    if (!up && (route_by_model(px) < 0 || !(up = pool_upstream(px)))) {
        json_decref(j);
        return;
    }
    if (build_upstream(px, up, path, query) < 0 || !(px->sse = evbuffer_new())) {
        json_decref(j);
        px_error(px, 503, "sluice: out of memory");
        return;
    }
    watch_client(px);
    if (px->unleased) { /* no lease: the provider does not rate-limit counting */
        json_decref(j);
        px->stream = false;
        px_forward(px);
        return;
    }
    char err[256];
    if (px->embeddings || px->moderations) { /* input only, or one request and no tokens */
        int64_t in = 0;
        int rc = px->embeddings
                     ? sl__embeddings_input_tokens(tokenizer(px->proxy), j, &in, err, sizeof(err))
                     : 0;
        json_decref(j);
        if (rc < 0) {
            px_error(px, 400, "%s", err);
            return;
        }
        px->stream = false;
        px->est.input_tokens = in;
        ask_lease(px);
        return;
    }
    if (sl__proxy_output_read(px->api, px->responses, j, &px->out, err, sizeof(err)) < 0) {
        json_decref(j);
        px_error(px, 400, "%s", err);
        return;
    }
    estimate(px, j);
    if (sl__prefix_hash(px->api, j, px->prefix_hash) <= 0) px->prefix_hash[0] = '\0';
    px->cache_ttl_s = sl__prefix_cache_ttl_s(px->api, j);
    json_decref(j);
    ask_lease(px);
}

/* Admits the call with its task's registered role (NULL: it names no task in the graph)
 * and asks the backend for the lease of px's estimate; on_decision goes on. */
static void request_lease(px_t *px, const char *task_role)
{
    const identity_t id = px->id;
    sl_request_t r = {
        .agent = px->agent,
        .pool = px->pool,
        .input_tokens = px->est.input_tokens,
        .cached_tokens = px->est.cached_tokens,
        .output_tokens = px->est.output_tokens,
        .role = id.role,
        .task = id.task,
        .unblocks = id.unblocks,
        .priority = id.priority,
        .ttl_s = LEASE_TTL_S,
        /* A chained Response is billed for stored items the estimate cannot see: no
         * model, so calibration does not learn that gap as the tokenizer's error. */
        .model = px->model[0] && !px->chained ? px->model : NULL,
        .cache_prefix_hash = px->prefix_hash[0] ? px->prefix_hash : NULL,
        .max_wait_s = SL_PROXY_CONF(&px->srv->config)->max_hold_s, /* hold, don't refuse */
        /* The body goes upstream with at most the output reserved (cap_forwarded_output). */
        .output_capped = px->out.cappable,
        .output_floor_tokens = px->out.floor_tokens, /* never reserved below what is sent */
        .cache_ttl_s = px->cache_ttl_s,
    };
    sl_refusal_t ref;
    sl__access_note(px->call, px->agent, px->pool, 0);
    const char *asked_pool = r.pool;
    if (sl__admit(px->call, SL_DIALECT_PROVIDER, &r, task_role, &ref) < 0) {
        px_refuse(px, &ref);
        return;
    }
    /* Routed to a long-context pool: here, or by keys.c once it has picked the key. */
    px->long_context = r.pool != asked_pool || sl__long_context_is_long(&px->srv->config, &r);
    sl__keys_request(px->srv, &r, px->pool, sizeof(px->pool), on_decision, px);
}

/* Asks for the lease; a call naming a task takes the task's registered role, decided by
 * the backend's request as on the lease API (admit.c). */
static void ask_lease(px_t *px)
{
    px->phase = PX_START;
    request_lease(px, NULL);
}

/* The endpoint a proxied request is counted as in sluice_proxy_requests_total: one of a
 * few static labels, whatever path the client sent. */
static const char *route_label(sl_upstream_api_t api, sl_proxy_kind_t kind)
{
    bool openai = api == SL_UPSTREAM_OPENAI;
    switch (kind) {
    case SL_PROXY_CALL:
        return openai ? "/openai/v1/chat/completions" : "/anthropic/v1/messages";
    case SL_PROXY_RESPONSES:
        return "/openai/v1/responses";
    case SL_PROXY_COUNT_TOKENS:
        return "/anthropic/v1/messages/count_tokens";
    case SL_PROXY_MODELS:
        return openai ? "/openai/v1/models" : "/anthropic/v1/models";
    case SL_PROXY_HELLO:
        return "/anthropic/api/hello";
    case SL_PROXY_EMBEDDINGS:
        return "/openai/v1/embeddings";
    case SL_PROXY_MODERATIONS:
        return "/openai/v1/moderations";
    case SL_PROXY_NONE:
        break;
    }
    return openai ? "/openai/other" : "/anthropic/other";
}

/* As route_label, for the batch and file endpoints (ids left out: one label each). */
static const char *batch_label(sl_upstream_api_t api, sl_batch_op_t op)
{
    if (op >= SL_BATCH_FILE_UPLOAD) return "/openai/v1/files";
    return api == SL_UPSTREAM_OPENAI ? "/openai/v1/batches" : "/anthropic/v1/messages/batches";
}

bool sl__proxy_route(sl_call_t *call, int n, char **seg, const char *query)
{
    (void)n; /* seg[0] picks the API; the raw path is routed (sl__proxy_resolve) */
    sl_upstream_api_t api;
    if (!strcmp(seg[0], "anthropic"))
        api = SL_UPSTREAM_ANTHROPIC;
    else if (!strcmp(seg[0], "openai"))
        api = SL_UPSTREAM_OPENAI;
    else
        return false;
    sl_server_t *srv = call->srv;
    px_t *px = calloc(1, sizeof(*px));
    if (!px) {
        sl__reply_error(call, 503, "out_of_memory", "proxy: out of memory");
        return true;
    }
    px->proxy = proxy_of(srv);
    px->srv = srv;
    px->call = call;
    px->api = api;
    px->retry_after_s = -1;
    px->next = proxy_of(srv)->calls;
    if (px->next) px->next->prev = px;
    proxy_of(srv)->calls = px;
    char path[320];
    size_t raw_len;
    const char *raw = sl_hreq_path(call->req, &raw_len); /* routed as it came: byte for byte */
    sl_proxy_kind_t kind = sl__proxy_resolve(api, raw, raw_len, path, sizeof(path));
    sl__access_begin(call, true);
    sl__access_route(call, route_label(api, kind));
    bool get = kind == SL_PROXY_MODELS || kind == SL_PROXY_HELLO; /* HEAD is a GET here */
    const char *allow = NULL;
    char id[257];
    if (kind == SL_PROXY_NONE)
        px->batch_op =
            sl__batch_resolve(api, raw, raw_len, call->method, path, sizeof(path), id, &allow);
    if (px->batch_op) sl__access_route(call, batch_label(api, px->batch_op));
    if (allow) { /* a batch path with another method */
        sl_hreq_add_header(call->req, "Allow", allow);
        px_error(px, 405, "sluice: %.256s allows %s only", sl_hreq_target(call->req), allow);
        return true;
    }
    if (px->batch_op) {
        px->method = sl__batch_method(px->batch_op);
        start_call(px, path, query);
        return true;
    }
    if (kind == SL_PROXY_NONE) {
        px_error(px, 404,
                 "sluice: %.256s is not an endpoint sluice proxies (it proxies %s; see "
                 "docs/proxy.md)",
                 sl_hreq_target(call->req),
                 api == SL_UPSTREAM_OPENAI
                     ? "POST /openai/v1/chat/completions, POST /openai/v1/responses, POST "
                       "/openai/v1/embeddings, POST /openai/v1/moderations, GET "
                       "/openai/v1/models, /openai/v1/files and /openai/v1/batches"
                     : "POST /anthropic/v1/messages, POST /anthropic/v1/messages/count_tokens, "
                       "/anthropic/v1/messages/batches and GET /anthropic/v1/models");
        return true;
    }
    if (call->method != (get ? SL_HTTP_GET : SL_HTTP_POST)) {
        sl_hreq_add_header(call->req, "Allow", get ? "GET, HEAD" : "POST");
        px_error(px, 405, "sluice: %.256s allows %s only", sl_hreq_target(call->req),
                 get ? "GET and HEAD" : "POST");
        return true;
    }
    if (kind == SL_PROXY_HELLO) { /* Claude Code's connectivity check: sluice is up */
        static const char hello[] = "{\"message\":\"hello\",\"server\":\"sluiced\"}";
        px_reply(px, 200, "application/json", hello, sizeof(hello) - 1, false);
        return true;
    }
    px->method = get ? "GET" : "POST";
    px->unleased = kind == SL_PROXY_COUNT_TOKENS || kind == SL_PROXY_MODELS;
    px->responses = kind == SL_PROXY_RESPONSES;
    px->embeddings = kind == SL_PROXY_EMBEDDINGS;
    px->moderations = kind == SL_PROXY_MODERATIONS;
    start_call(px, path, query);
    return true;
}

/* ---- setup and teardown ---------------------------------------------------------------------------- */

size_t sl__proxy_body_limit(const sl_config_t *c)
{
    return SL_PROXY_CONF(c)->body_limit_bytes;
}

sl_tokenizer_t *sl__proxy_tokenizer(sl_server_t *srv)
{
    return proxy_of(srv) ? tokenizer(proxy_of(srv)) : NULL;
}

int sl__proxy_init(sl_server_t *srv, char *err, size_t errlen)
{
    sl_proxy_t *proxy = calloc(1, sizeof(*proxy));
    if (!proxy) {
        snprintf(err, errlen, "proxy: out of memory");
        return -1;
    }
    proxy->srv = srv;
    proxy->up = sl_upstream_new(srv->base);
    if (!proxy->up) {
        free(proxy);
        snprintf(err, errlen, "proxy: libcurl cannot be initialised");
        return -1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    proxy->hold_nonce = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                        ((uint64_t)getpid() << 40);
    if (!(proxy->batches = sl__batch_queue_new())) {
        sl_upstream_free(proxy->up);
        free(proxy);
        snprintf(err, errlen, "proxy: out of memory");
        return -1;
    }
    proxy->probes = sl__probes_new(); /* NULL: no probe, as before */
    srv->slot[SL_FEATURE_ID_proxy] = proxy;
    if (sl__proxy_estimator_ready(srv, &srv->config, err, errlen) < 0) return -1;
    return 0;
}

size_t sl__proxy_in_flight(const sl_server_t *srv)
{
    size_t n = 0;
    for (const px_t *px = proxy_of(srv) ? proxy_of(srv)->calls : NULL; px; px = px->next)
        n += px->phase == PX_UPSTREAM;
    return n;
}

void sl__proxy_shutdown(sl_server_t *srv, bool drain)
{
    sl_proxy_t *proxy = proxy_of(srv);
    if (!proxy) return;
    px_t *kept = NULL; /* draining: calls the provider is answering go on */
    while (proxy->calls) {
        px_t *px = proxy->calls;
        if (drain && px->phase == PX_UPSTREAM) {
            proxy->calls = px->next;
            if (px->next) px->next->prev = NULL;
            px->next = kept;
            px->prev = NULL;
            if (kept) kept->prev = px;
            kept = px;
            continue;
        }
        if (px->phase == PX_START) { /* waiting on a networked backend: answered by it */
            px->gone = true;
            if (px->prev)
                px->prev->next = px->next;
            else
                proxy->calls = px->next;
            if (px->next) px->next->prev = px->prev;
            px->prev = px->next = NULL;
            continue;
        }
        if (px->phase == PX_QUEUED) {
            uint64_t ticket = px->ticket;
            stop_waiting(px);
            sl_backend_ticket_cancel(srv->backend, ticket, NULL, NULL);
        } else if (px->xfer) {
            sl_upstream_cancel(px->xfer);
            px->xfer = NULL;
            settle(px, true);
        }
        px_error(px, 503, "sluice: sluiced is shutting down; retry elsewhere");
    }
    proxy->calls = kept;
}

void sl__proxy_free(sl_server_t *srv)
{
    sl_proxy_t *proxy = proxy_of(srv);
    if (!proxy) return;
    sl__proxy_shutdown(srv, false);
    sl_upstream_free(proxy->up);
    sl__probes_free(proxy->probes);
    sl__batch_queue_free(proxy->batches);
    sl_tokenizer_free(proxy->tok);
    free(proxy->vocab_path);
    sl__idmap_free(&proxy->waiters);
    free(proxy);
    srv->slot[SL_FEATURE_ID_proxy] = NULL;
}
