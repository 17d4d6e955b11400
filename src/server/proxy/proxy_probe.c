/* proxy_probe.c - a cold pool asks its provider where it stands (issue 24: one agent as fast as direct after a start).
 *
 * A pool started cold (`cold_start: empty`, the default: docs/server.md) holds nothing and
 * refills over a minute; during that minute the first rate-limit headers of each bucket
 * raise it to what the provider reports (docs/design.md "Restarts"). A call bigger than
 * what the refill has brought waits for those headers, and when it is the only call
 * nothing brings them: the first Claude Code call (max_tokens 128,000) through a freshly
 * started sluiced waited 45 s for the refill, 12.5x its time straight to the provider.
 *
 * So the first time a call is queued on a pool in its cold-start window from which no
 * answer has come back yet, the proxy sends that pool's provider the smallest call of the same API and model (one
 * token of output; 16 where the Responses API asks at least that) on a lease of its own,
 * agent `sluice-probe`, and applies its rate-limit headers as any call's
 * (sl_backend_resync with its lease): the cold window's first header raises each bucket
 * to what the provider reports, and the queued call is granted from it. The probe leases
 * like any call, so it waits for room as any call does: a few milliseconds of refill on
 * a cold pool, and it never passes the provider's limits. Once per pool per start; a
 * probe that gets no grant within PROBE_TRIES x PROBE_RETRY_S is given up (the pool then
 * refills as before). It costs the provider a few tokens.
 *
 * The same probe lets the margin climb while a call waits. Above its start the margin
 * climbs a step per answer whose headers vouch for the room (docs/design.md "Margin"),
 * and one agent whose call waits for the refill has no call in flight to bring one: two
 * calls of ~300k input on a 400k pool took 46.1 s through sluiced against 31.8 s
 * straight (1.45x), the margin at 0.86. So while a call is queued on a pool with none in
 * flight and a margin at or above its start and below its ceiling, the proxy probes again
 * after each probe whose answer earned a step, up to PROBE_ROUNDS: 0.85 to 0.97 in
 * twelve round trips (34.6 s, 1.09x). A header showing less room (someone else uses the
 * key) takes the margin back to its start, and the chain stops there. */
#include "proxy.h"

#include "../../common/grow.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>
#include <jansson.h>
#include <sluice/engine.h>

#define PROBE_AGENT "sluice-probe"
#define PROBE_TRIES 40       /* lease attempts before giving up */
#define PROBE_RETRY_S 0.05   /* between two attempts */
#define PROBE_INPUT_TOKENS 8 /* what the probe's one-word prompt is reserved at */
#define MAX_PROBE_HEADERS 32 /* rate-limit headers applied from one answer */
#define PROBE_RECHECKS 10    /* looks at a pool whose last lease is settling */
#define PROBE_ROUNDS 16      /* probes of one climb: from the start margin 0.85 to 0.97 is 12 */
#define MARGIN_EPS 1e-9

typedef struct probe {
    struct probe *next;
    sl_server_t *srv;
    sl_upstream_t *up;
    sl__probes_t *owner;
    char *pool, *model, *url, *body;
    char **headers; /* "Name: value" lines, the key among them */
    size_t n_headers;
    int api;        /* sl_upstream_api_t */
    bool responses; /* the Responses API */
    int tries;
    bool cold_ok;       /* the pool was not heard from: a cold window may be probed */
    int rounds;         /* probes sent */
    double last_margin; /* the pool's margin when the last probe was sent */
    uint64_t lease;
    int status;
    struct event *timer;   /* the next lease attempt */
    struct event *recheck; /* the next look at the pool (on_pool) */
    sl_upstream_xfer_t *xfer;
} probe_t;

struct sl__probes {
    char **seen; /* pools that answered or were probed since the start */
    size_t n_seen, cap_seen;
    probe_t *running;
};

sl__probes_t *sl__probes_new(void)
{
    return calloc(1, sizeof(sl__probes_t));
}

static void probe_free(probe_t *p)
{
    if (p->timer) event_free(p->timer);
    if (p->recheck) event_free(p->recheck);
    for (size_t i = 0; i < p->n_headers; i++) {
        volatile char *h = p->headers[i]; /* the key: not left in freed memory */
        for (size_t k = 0; h[k]; k++) h[k] = '\0';
        free(p->headers[i]);
    }
    free(p->headers);
    free(p->pool);
    free(p->model);
    free(p->url);
    free(p->body);
    free(p);
}

static void probe_unlink(probe_t *p)
{
    for (probe_t **at = &p->owner->running; *at; at = &(*at)->next) {
        if (*at == p) {
            *at = p->next;
            return;
        }
    }
}

void sl__probes_free(sl__probes_t *ps)
{
    if (!ps) return;
    while (ps->running) { /* the upstream client cancelled their transfers */
        probe_t *p = ps->running;
        ps->running = p->next;
        probe_free(p);
    }
    for (size_t i = 0; i < ps->n_seen; i++) free(ps->seen[i]);
    free(ps->seen);
    free(ps);
}

/* Whether `pool` answered or was probed; with `mark`, records it. */
static bool seen(sl__probes_t *ps, const char *pool, bool mark)
{
    for (size_t i = 0; i < ps->n_seen; i++)
        if (strcmp(ps->seen[i], pool) == 0) return true;
    if (!mark) return false;
    char *copy = strdup(pool);
    char **grown = copy ? sl_grow(ps->seen, ps->n_seen, &ps->cap_seen, sizeof *grown, 8) : NULL;
    if (!grown) {
        free(copy);
        return false;
    }
    ps->seen = grown;
    ps->seen[ps->n_seen++] = copy;
    return false;
}

void sl__probes_answered(sl__probes_t *ps, const char *pool)
{
    if (ps && pool) seen(ps, pool, true);
}

static void probe_done(probe_t *p)
{
    probe_unlink(p);
    probe_free(p);
}

static void on_settled(int rc, const sl_settle_result_t *r, const char *errmsg, void *ud)
{
    (void)r;
    if (rc != SL_OK)
        sl__log(SL_LOG_WARN, "proxy: settle of the probe's l_%" PRIu64 " failed: %s",
                (uint64_t)(uintptr_t)ud, errmsg ? errmsg : sl_strerror(rc));
}

static void on_resynced(int rc, double value, const char *errmsg, void *ud)
{
    (void)value;
    if (rc != SL_OK && rc != SL_EUNAVAILABLE && rc != SL_ENOTFOUND)
        sl__log(SL_LOG_WARN, "proxy: resync from the probe's l_%" PRIu64 " failed: %s",
                (uint64_t)(uintptr_t)ud, errmsg ? errmsg : sl_strerror(rc));
}

static void on_probe_headers(void *ud, int status, const char *const *names,
                             const char *const *values, size_t n)
{
    probe_t *p = ud;
    p->status = status;
    if (status != 200) return; /* a refusal's headers do not count it: the pool refills */
    const char *rl_names[MAX_PROBE_HEADERS], *rl_values[MAX_PROBE_HEADERS];
    char scratch[MAX_PROBE_HEADERS][24];
    size_t count = 0;
    for (size_t i = 0; i < n && count < MAX_PROBE_HEADERS; i++) {
        if (!sl_header_is_ratelimit(names[i])) continue;
        rl_names[count] = names[i];
        rl_values[count] = values[i];
        count++;
    }
    count = sl__bound_limit_headers(p->srv, p->pool, true, rl_names, rl_values, count, scratch);
    /* Sent as soon as granted: from the grant to the request reaching the provider. */
    double sent_after_s = p->xfer ? sl_upstream_sent_after_s(p->xfer) : -1;
    if (count)
        sl_backend_resync(p->srv->backend, p->lease, sent_after_s, rl_names, rl_values, count,
                          on_resynced, (void *)(uintptr_t)p->lease);
}

static int on_probe_body(void *ud, const char *data, size_t len)
{
    (void)ud;
    (void)data;
    (void)len;
    return 1; /* the answer itself is not wanted */
}

static void on_pool(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud);

static void on_probe_done(void *ud, int result, bool request_sent, const char *errmsg)
{
    probe_t *p = ud;
    p->xfer = NULL;
    if (result != SL_UPSTREAM_OK)
        sl__log(SL_LOG_WARN, "proxy: pool '%s': the probe failed: %s", p->pool, errmsg);
    /* Reserved at its estimate; what the provider counted of it is in its headers. */
    sl_settle_t s = {.retry_after_s = -1,
                     .input_tokens = PROBE_INPUT_TOKENS,
                     .output_tokens = 1,
                     .failed = !request_sent || p->status != 200};
    sl_backend_settle(p->srv->backend, p->lease, &s, on_settled, (void *)(uintptr_t)p->lease);
    p->rounds++;
    p->lease = 0;
    p->status = 0;
    p->tries = 0;
    if (s.failed) {
        probe_done(p);
        return;
    }
    sl_backend_pools(p->srv->backend, p->pool, on_pool, p); /* another round? */
}

static const sl_upstream_cbs_t probe_cbs = {on_probe_headers, on_probe_body, on_probe_done};

static void probe_send(probe_t *p)
{
    char err[256];
    sl_upstream_request_t rq = {
        .method = "POST",
        .url = p->url,
        .headers = (const char *const *)p->headers,
        .n_headers = p->n_headers,
        .body = p->body,
        .body_len = strlen(p->body),
        .ca_file = NULL,
        .connect_timeout_s = SL_PROXY_CONF(&p->srv->config)->connect_timeout_s,
        .idle_timeout_s = SL_PROXY_CONF(&p->srv->config)->idle_timeout_s,
    };
    const sl_pool_upstream_t *up = sl_config_pool_upstream(&p->srv->config, p->pool);
    if (up) rq.ca_file = up->ca_file;
    if (!(p->xfer = sl_upstream_start(p->up, &rq, &probe_cbs, p, err, sizeof(err)))) {
        sl__log(SL_LOG_WARN, "proxy: pool '%s': the probe cannot start: %s", p->pool, err);
        sl_backend_cancel(p->srv->backend, p->lease, NULL, NULL);
        probe_done(p);
    }
}

static void probe_ask(probe_t *p);

static void on_retry(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    probe_ask(ud);
}

static void on_probe_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    probe_t *p = ud;
    (void)errmsg;
    if (rc == SL_OK && d->status == SL_GRANTED) {
        p->lease = d->lease;
        probe_send(p);
        return;
    }
    if (rc == SL_OK && d->status == SL_QUEUED) /* not now: its place is not wanted */
        sl_backend_ticket_cancel(p->srv->backend, d->ticket, NULL, NULL);
    if (rc != SL_OK || ++p->tries >= PROBE_TRIES) {
        probe_done(p);
        return;
    }
    struct timeval tv = {0, (suseconds_t)(PROBE_RETRY_S * 1e6)};
    if (!p->timer) p->timer = evtimer_new(p->srv->base, on_retry, p);
    if (!p->timer || evtimer_add(p->timer, &tv) != 0) probe_done(p);
}

/* Whether pool `pi` wants a probe now: in its cold-start window, not heard from; or
 * climbing (the margin at or above its start, below its ceiling, and up since the last
 * probe) with a call queued and none in flight, so that no answer is coming to vouch for
 * the next step. */
static bool wanted(const probe_t *p, const sl_pool_info_t *pi, double now)
{
    if (p->rounds == 0 && p->cold_ok && pi->cold_until > now) return true;
    return p->rounds < PROBE_ROUNDS && pi->queue_depth > 0 && pi->leases_in_flight == 0 &&
           pi->margin >= pi->config.margin_start - MARGIN_EPS &&
           pi->margin < pi->config.margin_max - MARGIN_EPS &&
           (p->rounds == 0 || pi->margin > p->last_margin + MARGIN_EPS);
}

static void on_recheck(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    probe_t *p = ud;
    sl_backend_pools(p->srv->backend, p->pool, on_pool, p);
}

/* Whether the pool may want a first climbing probe once its one lease in flight is
 * settled: the agent's previous call, whose settle can reach a Redis backend after its
 * next call was queued. */
static bool settling(const probe_t *p, const sl_pool_info_t *pi)
{
    return p->rounds == 0 && pi->queue_depth > 0 && pi->leases_in_flight == 1 &&
           pi->margin >= pi->config.margin_start - MARGIN_EPS &&
           pi->margin < pi->config.margin_max - MARGIN_EPS;
}

/* The pool as the backend sees it: another probe, another look soon, or none. */
static void on_pool(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud)
{
    probe_t *p = ud;
    (void)errmsg;
    if (rc == SL_OK && n == 1 && wanted(p, &pools[0], sl_backend_now(p->srv->backend))) {
        p->last_margin = pools[0].margin;
        p->tries = 0;
        probe_ask(p);
        return;
    }
    if (rc == SL_OK && n == 1 && settling(p, &pools[0]) && ++p->tries < PROBE_RECHECKS) {
        struct timeval tv = {0, (suseconds_t)(PROBE_RETRY_S * 1e6)};
        if (!p->recheck) p->recheck = evtimer_new(p->srv->base, on_recheck, p);
        if (p->recheck && evtimer_add(p->recheck, &tv) == 0) return;
    }
    probe_done(p);
}

static void probe_ask(probe_t *p)
{
    sl_request_t r = {
        .agent = PROBE_AGENT,
        .pool = p->pool,
        .input_tokens = PROBE_INPUT_TOKENS,
        .output_tokens = p->responses ? 16 : 1,
        .ttl_s = 60,
        .model = p->model[0] ? p->model : NULL,
        .max_wait_s = 0,
    };
    sl_backend_request(p->srv->backend, &r, on_probe_decision, p);
}

/* The probe's body: the smallest call of `api` for `model`. */
static char *probe_body(int api, bool responses, const char *model)
{
    json_t *j = api == SL_UPSTREAM_ANTHROPIC
                    ? json_pack("{s:s, s:i, s:[{s:s, s:s}]}", "model", model, "max_tokens", 1,
                                "messages", "role", "user", "content", "Hi")
                : responses ? json_pack("{s:s, s:i, s:s}", "model", model, "max_output_tokens", 16,
                                        "input", "Hi")
                            : json_pack("{s:s, s:i, s:[{s:s, s:s}]}", "model", model,
                                        "max_completion_tokens", 1, "messages", "role", "user",
                                        "content", "Hi");
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

void sl__probes_queued(sl__probes_t *ps, sl_server_t *srv, sl_upstream_t *up, const char *pool,
                       const char *model, const char *url, const char *const *headers,
                       size_t n_headers, int api, bool responses)
{
    if (!ps || !pool || !url || !model || !model[0]) return;
    for (const probe_t *q = ps->running; q; q = q->next)
        if (strcmp(q->pool, pool) == 0) return; /* one at a time per pool */
    bool cold_ok = !seen(ps, pool, true);
    probe_t *p = calloc(1, sizeof *p);
    if (!p) return;
    p->cold_ok = cold_ok;
    p->srv = srv;
    p->up = up;
    p->owner = ps;
    p->api = api;
    p->responses = responses;
    p->pool = strdup(pool);
    p->model = strdup(model);
    p->url = strdup(url);
    p->body = probe_body(api, responses, model);
    p->headers = calloc(n_headers ? n_headers : 1, sizeof *p->headers);
    bool ok = p->pool && p->model && p->url && p->body && p->headers;
    for (size_t i = 0; ok && i < n_headers; i++) {
        /* Its own body: the client's length, encoding and streaming headers do not apply. */
        if (strncasecmp(headers[i], "content-length:", 15) == 0 ||
            strncasecmp(headers[i], "content-encoding:", 17) == 0 ||
            strncasecmp(headers[i], "transfer-encoding:", 18) == 0 ||
            strncasecmp(headers[i], "accept:", 7) == 0)
            continue;
        if (!(p->headers[p->n_headers] = strdup(headers[i]))) ok = false;
        else p->n_headers++;
    }
    if (!ok) {
        probe_free(p);
        return;
    }
    p->next = ps->running;
    ps->running = p;
    sl_backend_pools(srv->backend, pool, on_pool, p);
}
