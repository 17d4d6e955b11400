/* history.c - the last hour the dashboard draws, kept by sluiced so a page opened during
 * an incident shows the hour before it (GET /v1/history, and inlined into GET /).
 *
 * Three bounded rings, filled whether or not a page is open:
 *  - per pool, a sample every HISTORY_SAMPLE_S of each bucket's level, capacity and
 *    limit, the margin, the leases in flight and the queue's depth (HISTORY_SAMPLES: one
 *    hour); at most HISTORY_MAX_POOLS pools are sampled (the first in the backend's order);
 *  - HISTORY_BINS bins of HISTORY_BIN_S seconds counting grants, upstream 429s and
 *    sluice's own refusals (the page's "429s over turns"), an hour of them;
 *  - the last HISTORY_EVENTS events, each a copy of the engine's event with its strings
 *    (cut to their field's size: a display, not a record), written as JSON by the event
 *    log's own writer (sl__event_json) when asked. The high-rate kinds (resync, margin)
 *    are kept in a ring of their own so they never push the others out, and counted per
 *    kind; GET /v1/history folds them to those counts unless `fold=none`.
 * The decision path pays a struct copy per event; JSON is written only when a page asks.
 */
#include "server.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/keyvalq_struct.h>
#include <event2/http.h>

#define HISTORY_SAMPLE_S  5.0
#define HISTORY_SAMPLES   720 /* one hour of samples */
#define HISTORY_MAX_POOLS 32
#define HISTORY_BIN_S     2.0
#define HISTORY_BINS      1800 /* one hour of bins */
#define HISTORY_EVENTS    256

typedef struct sample {
    double t;
    double margin;
    int64_t inflight, depth;
    double level[SL_BUCKET_COUNT], capacity[SL_BUCKET_COUNT];
    int64_t limit[SL_BUCKET_COUNT];
} sample_t;

typedef struct pool_ring {
    char name[129]; /* pool names are at most 128 bytes */
    sample_t s[HISTORY_SAMPLES];
    size_t head, n; /* the oldest sample is s[(head + HISTORY_SAMPLES - n) % ...] */
} pool_ring_t;

typedef struct bin {
    int64_t key; /* floor(t / HISTORY_BIN_S); a stale key is an empty bin */
    uint32_t grants, upstream_429, refused;
} bin_t;

/* One event, its strings copied. */
typedef struct kept_event {
    uint64_t seq;
    sl_event_t ev;
    char pool[64], agent[128], reason[64], alert[48];
} kept_event_t;

typedef struct event_ring {
    kept_event_t e[HISTORY_EVENTS];
    size_t head, n;
} event_ring_t;

struct sl_history {
    pool_ring_t *pools[HISTORY_MAX_POOLS];
    size_t n_pools;
    bin_t bins[HISTORY_BINS];
    event_ring_t events, folded;       /* folded: resync and margin */
    uint64_t seq;                      /* of the last event kept */
    uint64_t folded_count[2];          /* resync, margin: since the start */
    double next_sample_t;
    bool sampling;                     /* a pools request is out */
};

static sl_history_t *history(sl_server_t *srv)
{
    if (!srv->history) srv->history = calloc(1, sizeof(*srv->history));
    return srv->history;
}

void sl__history_free(sl_server_t *srv)
{
    sl_history_t *h = srv->history;
    if (!h) return;
    for (size_t i = 0; i < h->n_pools; i++)
        free(h->pools[i]);
    free(h);
    srv->history = NULL;
}

/* ---- events ----------------------------------------------------------------------- */

static bool folded_kind(sl_event_kind_t k)
{
    return k == SL_EV_RESYNC || k == SL_EV_MARGIN;
}

static void copy_str(char *dst, size_t cap, const char **field)
{
    if (!*field) return;
    snprintf(dst, cap, "%s", *field);
    *field = dst;
}

void sl__history_on_event(sl_server_t *srv, const sl_event_t *ev)
{
    sl_history_t *h = history(srv);
    if (!h) return;
    double t = ev->now_s;
    int64_t key = (int64_t)floor(t / HISTORY_BIN_S);
    bin_t *b = &h->bins[((key % HISTORY_BINS) + HISTORY_BINS) % HISTORY_BINS];
    if (b->key != key) *b = (bin_t){.key = key};
    switch (ev->kind) {
    case SL_EV_GRANTED:
        b->grants++;
        break;
    case SL_EV_UPSTREAM_429:
        b->upstream_429++;
        break;
    case SL_EV_REJECTED:
    case SL_EV_TICKET_REJECTED:
        b->refused++;
        break;
    default:
        break;
    }
    bool fold = folded_kind(ev->kind);
    if (fold) h->folded_count[ev->kind == SL_EV_MARGIN]++;
    event_ring_t *r = fold ? &h->folded : &h->events;
    kept_event_t *k = &r->e[r->head];
    r->head = (r->head + 1) % HISTORY_EVENTS;
    if (r->n < HISTORY_EVENTS) r->n++;
    k->seq = ++h->seq;
    k->ev = *ev;
    copy_str(k->pool, sizeof(k->pool), &k->ev.pool);
    copy_str(k->agent, sizeof(k->agent), &k->ev.agent);
    copy_str(k->reason, sizeof(k->reason), &k->ev.reason);
    copy_str(k->alert, sizeof(k->alert), &k->ev.alert);
}

/* ---- samples ---------------------------------------------------------------------- */

static pool_ring_t *pool_ring(sl_history_t *h, const char *name)
{
    for (size_t i = 0; i < h->n_pools; i++)
        if (!strcmp(h->pools[i]->name, name)) return h->pools[i];
    if (h->n_pools == HISTORY_MAX_POOLS) return NULL;
    pool_ring_t *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    snprintf(p->name, sizeof(p->name), "%s", name);
    h->pools[h->n_pools++] = p;
    return p;
}

static void on_sample_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg,
                            void *ud)
{
    sl_server_t *srv = ud;
    (void)errmsg;
    sl_history_t *h = srv->history;
    if (!h) return;
    h->sampling = false;
    if (rc != SL_OK) return;
    double t = sl_backend_now(srv->backend);
    for (size_t i = 0; i < n; i++) {
        pool_ring_t *p = pool_ring(h, pools[i].name);
        if (!p) continue;
        sample_t *s = &p->s[p->head];
        p->head = (p->head + 1) % HISTORY_SAMPLES;
        if (p->n < HISTORY_SAMPLES) p->n++;
        *s = (sample_t){.t = t, .margin = pools[i].margin,
                        .inflight = (int64_t)pools[i].leases_in_flight,
                        .depth = (int64_t)pools[i].queue_depth};
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            s->level[b] = pools[i].level[b];
            s->capacity[b] = pools[i].capacity[b];
            s->limit[b] = (int64_t)pools[i].limit[b];
        }
    }
}

void sl__history_tick(sl_server_t *srv)
{
    sl_history_t *h = history(srv);
    if (!h || h->sampling) return;
    double now = sl_backend_now(srv->backend);
    if (now < h->next_sample_t) return;
    h->next_sample_t = now + HISTORY_SAMPLE_S;
    h->sampling = true;
    sl_backend_pools(srv->backend, NULL, on_sample_pools, srv);
}

/* ---- reading ---------------------------------------------------------------------- */

static json_t *samples_json(const pool_ring_t *p, double since)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < p->n; i++) {
        const sample_t *s = &p->s[(p->head + HISTORY_SAMPLES - p->n + i) % HISTORY_SAMPLES];
        if (s->t <= since) continue;
        json_t *buckets = json_object();
        for (int b = 0; buckets && b < SL_BUCKET_COUNT; b++) {
            if (s->limit[b] == 0) continue;
            json_object_set_new(buckets, sl_bucket_name((sl_bucket_t)b),
                                json_pack("[f,f,I]", s->level[b], s->capacity[b],
                                          (json_int_t)s->limit[b]));
        }
        json_array_append_new(arr, json_pack("{s:f,s:f,s:I,s:I,s:o}", "t", s->t, "margin",
                                             s->margin, "inflight", (json_int_t)s->inflight,
                                             "depth", (json_int_t)s->depth, "buckets", buckets));
    }
    return arr;
}

static void add_events(json_t *arr, const event_ring_t *r, uint64_t after)
{
    for (size_t i = 0; i < r->n; i++) {
        const kept_event_t *k = &r->e[(r->head + HISTORY_EVENTS - r->n + i) % HISTORY_EVENTS];
        if (k->seq <= after) continue;
        json_t *j = sl__event_json(&k->ev);
        if (!j) continue;
        json_object_set_new(j, "seq", json_integer((json_int_t)k->seq));
        json_array_append_new(arr, j);
    }
}

static int by_seq(const void *a, const void *b)
{
    json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "seq"));
    json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "seq"));
    return (x > y) - (x < y);
}

/* The events after `after`, oldest first; the folded kinds only when `all`. */
static json_t *events_json(const sl_history_t *h, uint64_t after, bool all)
{
    json_t *arr = json_array();
    if (!arr) return NULL;
    add_events(arr, &h->events, after);
    if (all) {
        add_events(arr, &h->folded, after);
        size_t n = json_array_size(arr);
        json_t **items = malloc((n ? n : 1) * sizeof(*items));
        if (items) {
            for (size_t i = 0; i < n; i++)
                items[i] = json_incref(json_array_get(arr, i));
            qsort(items, n, sizeof(*items), by_seq);
            json_array_clear(arr);
            for (size_t i = 0; i < n; i++)
                json_array_append_new(arr, items[i]);
            free(items);
        }
    }
    return arr;
}

json_t *sl__history_json(sl_server_t *srv, double since, uint64_t after, bool all)
{
    sl_history_t *h = history(srv);
    double now = sl_backend_now(srv->backend);
    json_t *pools = json_object(), *bins = json_array();
    json_t *out = json_pack("{s:f,s:f,s:f,s:o,s:o}", "now", now, "sample_s", HISTORY_SAMPLE_S,
                            "bin_s", HISTORY_BIN_S, "pools", pools, "bins", bins);
    if (!out || !h) return out;
    for (size_t i = 0; i < h->n_pools; i++)
        json_object_set_new(pools, h->pools[i]->name, samples_json(h->pools[i], since));
    int64_t last = (int64_t)floor(now / HISTORY_BIN_S);
    for (int64_t key = last - HISTORY_BINS + 1; key <= last; key++) {
        const bin_t *b = &h->bins[((key % HISTORY_BINS) + HISTORY_BINS) % HISTORY_BINS];
        if (b->key != key || (double)key * HISTORY_BIN_S <= since - HISTORY_BIN_S) continue;
        json_array_append_new(bins, json_pack("{s:f,s:i,s:i,s:i}", "t", (double)key * HISTORY_BIN_S,
                                              "grants", (int)b->grants, "upstream_429",
                                              (int)b->upstream_429, "refused", (int)b->refused));
    }
    json_object_set_new(out, "events", events_json(h, after, all));
    json_object_set_new(out, "folded", json_pack("{s:I,s:I}", "resync",
                                                 (json_int_t)h->folded_count[0], "margin",
                                                 (json_int_t)h->folded_count[1]));
    json_object_set_new(out, "seq", json_integer((json_int_t)h->seq));
    return out;
}

/* GET /v1/history?since=T&after=SEQ&fold=none. Every agent's events: the admin token (or
 * the dashboard's session, or auth off) only. */
void sl__handle_history(sl_call_t *call, const char *query)
{
    if (sl_config_auth_enabled(&call->srv->config) && !call->admin) {
        sl__reply_error(call, 403, "forbidden",
                        "token: GET /v1/history names every agent; it needs the admin token");
        return;
    }
    double since = 0;
    uint64_t after = 0;
    bool all = false;
    struct evkeyvalq q;
    if (query && *query) {
        if (evhttp_parse_query_str(query, &q) < 0) {
            sl__reply_error(call, 400, "invalid_request", "query: '%.64s' cannot be parsed", query);
            return;
        }
        const char *v, *bad = NULL, *field = NULL;
        char *end;
        if (!bad && (v = evhttp_find_header(&q, "since"))) {
            errno = 0;
            since = strtod(v, &end);
            if (errno || end == v || *end || !isfinite(since) || since < 0) bad = v, field = "since";
        }
        if (!bad && (v = evhttp_find_header(&q, "after"))) {
            errno = 0;
            unsigned long long a = strtoull(v, &end, 10);
            if (errno || end == v || *end || *v == '-') bad = v, field = "after";
            after = a;
        }
        if (!bad && (v = evhttp_find_header(&q, "fold"))) {
            if (!strcmp(v, "none")) all = true;
            else if (strcmp(v, "high_rate") != 0) bad = v, field = "fold";
        }
        if (bad) {
            sl__reply_error(call, 400, "invalid_request", "%s: '%.64s' is not %s", field, bad,
                            !strcmp(field, "fold") ? "none or high_rate"
                                                   : "a number >= 0");
            evhttp_clear_headers(&q);
            return;
        }
        evhttp_clear_headers(&q);
    }
    json_t *j = sl__history_json(call->srv, since, after, all);
    if (!j) {
        sl__reply_error(call, 503, "out_of_memory", "history: out of memory");
        return;
    }
    sl__reply_json(call, 200, j);
}
