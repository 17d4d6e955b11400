/* limits_api.c - /v1/limits: checks (held for queue limits), releases, reports, views, metrics.
 *
 * The limit set (src/limits) lives in the server and is used from the event loop only,
 * so every check of all its levels is atomic by construction: the memory backend's
 * answers. With the Redis backend up, checks, releases, reports and key views go to
 * limits.lua instead (limits_redis.c: one FCALL, shared by every replica); the set here
 * then only validates and plans them, and answers while Redis is away.
 *
 * A held check (on_limit: queue, `wait` > 0) asks sl_limits_when() for the earliest time
 * the check could pass; when that is within its wait it sleeps on a timer until then and
 * checks again (another caller may have taken the room: it then sleeps again, up to the
 * same deadline), else it is answered 429 at once. Held checks of one queue (limit, agent,
 * key) go in arrival order: a newcomer with a wait queues behind them, only the oldest
 * re-checks, and answering it wakes the next. A client that leaves cancels its timer;
 * nothing was taken for it.
 *
 * Reload: a limit whose configuration is unchanged (the same JSON) keeps its keys'
 * state (sl_limits_move_state); a changed one starts with fresh keys; counters of the
 * metrics stay per name.
 */
#include "limits_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "limits_json.h"
#include "limits_redis.h"

#define AGENT_MAX_CHARS  128
#define ACTION_MAX_CHARS 128

typedef struct limit_stats {
    char *name;
    uint64_t allowed, denied;
    uint64_t adapt_up, adapt_down;
    double adaptive_rate; /* after the latest change (any key); NAN before one */
} limit_stats_t;

typedef struct held held_t;

struct sl_limits_api {
    sl_limits_t *set; /* NULL: no limits configured */
    json_t *config;   /* the section `set` was built from, with the tiers' copies */
    json_t *copies;   /* the tiers' copies: NAME@TIER -> {of, tier, limit_multiplier} */
    limit_stats_t *stats;
    size_t n_stats;
    held_t *held, *held_tail; /* checks waiting for room, oldest first */
    size_t n_held;
    sl_server_t *srv;
};

/* The feature's state on the server (its slot, features.def); NULL until it is made. */
static sl_limits_api_t *api_of(const sl_server_t *srv)
{
    return srv->slot[SL_FEATURE_ID_limits];
}

/* A check held until its limit has room. Request strings point into call->body. */
struct held {
    sl_call_t *call;
    char name[SL_LIMITS_MAX_NAME + 1];
    char team[AGENT_MAX_CHARS + 1];
    sl_limit_request_t req;
    int64_t started_us, deadline_us;
    held_t *prev, *next;
};

static int64_t now_us(const sl_server_t *srv)
{
    return (int64_t)llround(sl_backend_now(srv->backend) * 1e6);
}

static limit_stats_t *stats_of(sl_limits_api_t *api, const char *name)
{
    for (size_t i = 0; i < api->n_stats; i++)
        if (!strcmp(api->stats[i].name, name)) return &api->stats[i];
    return NULL;
}

/* ---- building the set ------------------------------------------------------------- */

static void on_adapt(const sl_limit_adapt_event_t *ev, void *user);
static bool reaches(sl_limits_t *set, const char *name, const char *target, int depth);

void sl__limits_adapted(sl_server_t *srv, const sl_limit_adapt_event_t *ev)
{
    on_adapt(ev, api_of(srv));
}

static void on_adapt(const sl_limit_adapt_event_t *ev, void *user)
{
    sl_limits_api_t *api = user;
    limit_stats_t *st = stats_of(api, ev->limit);
    if (st) {
        if (ev->new_rate > ev->old_rate)
            st->adapt_up++;
        else
            st->adapt_down++;
        st->adaptive_rate = ev->new_rate;
    }
    sl__events_publish(api->srv, "limit_adapted",
                       json_pack("{s:f,s:s,s:s,s:s,s:f,s:f,s:f,s:I}", "ts",
                                 sl_backend_now(api->srv->backend), "event", "limit_adapted",
                                 "limit", ev->limit, "key", ev->key, "old_rate", ev->old_rate,
                                 "new_rate", ev->new_rate, "error_rate", ev->error_rate,
                                 "window_outcomes", (json_int_t)ev->window_outcomes));
}

static void stats_free(limit_stats_t *st, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(st[i].name);
    free(st);
}

/* Tells the bus the configured limits' names (the fleet's metrics give each its rows before
 * its first check). Out of memory: not told; the rows come with the first check. */
static void publish_names(sl_server_t *srv)
{
    json_t *all = SL_LIMITS_CONF(&srv->config);
    size_t n = json_object_size(all), i = 0;
    const char **names = n ? malloc(n * sizeof(*names)) : NULL;
    if (n && !names) return;
    const char *name;
    json_t *cfg;
    json_object_foreach(all, name, cfg) names[i++] = name;
    sl_bus_event_t ev = {.kind = SL_BUS_LIMITS, .limits = {names, n}};
    sl__bus_publish(srv, &ev);
    free(names);
}

int sl__limits_apply(sl_server_t *srv, char *err, size_t errlen)
{
    sl_limits_api_t *api = api_of(srv);
    json_t *cfg = NULL, *copies = NULL;
    if (!api) {
        api = calloc(1, sizeof(*api));
        if (!api) goto oom;
        api->srv = srv;
        srv->slot[SL_FEATURE_ID_limits] = api;
    }
    if (sl__limits_with_tiers(SL_LIMITS_CONF(&srv->config), &srv->config.token_cfg, &cfg, &copies, err,
                              errlen) < 0) {
        json_decref(cfg);
        json_decref(copies);
        return -1;
    }
    sl_limits_t *set = NULL;
    limit_stats_t *stats = NULL;
    size_t n = 0;
    if (cfg && json_object_size(cfg) > 0) {
        set = sl_limits_new();
        if (!set || sl_limits_add_all_json(set, cfg) != SL_OK) {
            /* validated when the file loaded: only memory can fail here */
            snprintf(err, errlen, "limits: %s", set ? sl_limits_errmsg(set) : "out of memory");
            sl_limits_free(set);
            json_decref(cfg);
            json_decref(copies);
            return -1;
        }
        n = sl_limits_count(set);
        stats = calloc(n, sizeof(*stats));
        if (!stats) {
            sl_limits_free(set);
            goto oom;
        }
        for (size_t i = 0; i < n; i++) {
            const char *name = sl_limits_name_at(set, i);
            limit_stats_t *old = stats_of(api, name);
            stats[i].name = strdup(name);
            if (!stats[i].name) {
                stats_free(stats, n);
                sl_limits_free(set);
                goto oom;
            }
            stats[i].adaptive_rate = NAN;
            if (old) {
                stats[i].allowed = old->allowed;
                stats[i].denied = old->denied;
                stats[i].adapt_up = old->adapt_up;
                stats[i].adapt_down = old->adapt_down;
            }
        }
        /* Only now that nothing can fail: an unchanged limit's running keys go on, their
         * adapted rates too. */
        for (size_t i = 0; i < n; i++) {
            const char *name = stats[i].name;
            json_t *was = api->config ? json_object_get(api->config, name) : NULL;
            if (!was || !api->set || !json_equal(was, json_object_get(cfg, name))) continue;
            sl_limits_move_state(set, api->set, name);
            limit_stats_t *old = stats_of(api, name);
            if (old) stats[i].adaptive_rate = old->adaptive_rate;
        }
        sl_limits_set_adapt_cb(set, on_adapt, api);
    }
    sl_limits_free(api->set);
    stats_free(api->stats, api->n_stats);
    json_decref(api->config);
    json_decref(api->copies);
    api->set = set;
    api->stats = stats;
    api->n_stats = n;
    api->config = cfg;
    api->copies = copies;
    publish_names(srv);
    return 0;
oom:
    json_decref(cfg);
    json_decref(copies);
    snprintf(err, errlen, "limits: out of memory");
    return -1;
}

/* ---- held checks ------------------------------------------------------------------ */

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* Held checks of one queue: the same limit, agent and key (so the same keys at every
 * level). Within a queue they are served in arrival order. */
static bool same_queue(const held_t *a, const held_t *b)
{
    return !strcmp(a->name, b->name) && same_str(a->req.agent, b->req.agent) &&
           same_str(a->req.key, b->req.key);
}

/* The oldest held check of `h`'s queue that arrived before it, or NULL. */
static held_t *ahead_of(const held_t *h)
{
    for (held_t *o = api_of(h->call->srv)->held; o && o != h; o = o->next)
        if (same_queue(o, h)) return o;
    return NULL;
}

/* Wakes the next held check of `h`'s queue (after `h`) at once: it may be the head now. */
static void wake_next(const held_t *h)
{
    static const struct timeval now_tv = {0, 0};
    for (held_t *o = h->next; o; o = o->next)
        if (same_queue(o, h)) {
            evtimer_add(o->call->wait_timer, &now_tv);
            return;
        }
}

static void held_unlink(held_t *h)
{
    sl_limits_api_t *api = api_of(h->call->srv);
    wake_next(h);
    if (h->prev)
        h->prev->next = h->next;
    else
        api->held = h->next;
    if (h->next)
        h->next->prev = h->prev;
    else
        api->held_tail = h->prev;
    api->n_held--;
    h->call->owner = NULL;
    h->call->gone = NULL;
    if (h->call->wait_timer) event_del(h->call->wait_timer);
    free(h);
}

void sl__limits_wake_held(sl_server_t *srv, const char *name)
{
    static const struct timeval now_tv = {0, 0};
    sl_limits_api_t *api = api_of(srv);
    for (held_t *h = api && api->set ? api->held : NULL; h; h = h->next)
        if (!ahead_of(h) && reaches(api->set, h->name, name, 0))
            evtimer_add(h->call->wait_timer, &now_tv);
}

static void on_held_gone(sl_call_t *call)
{
    held_unlink(call->owner);
    sl__call_drop(call);
}

sl_limits_t *sl__limits_set(const sl_server_t *srv)
{
    return api_of(srv) ? api_of(srv)->set : NULL;
}

void sl__limits_shutdown(sl_server_t *srv)
{
    sl_limits_api_t *api = api_of(srv);
    sl__limits_redis_shutdown(srv);
    while (api && api->held) {
        sl_call_t *call = api->held->call;
        held_unlink(api->held);
        sl__reply_error(call, 503, "shutting_down", "server: sluiced is shutting down");
    }
}

void sl__limits_sweep(sl_server_t *srv)
{
    if (api_of(srv) && api_of(srv)->set) sl_limits_sweep(api_of(srv)->set, now_us(srv));
}

void sl__limits_free(sl_server_t *srv)
{
    sl_limits_api_t *api = api_of(srv);
    if (!api) return;
    sl__limits_shutdown(srv);
    sl_limits_free(api->set);
    stats_free(api->stats, api->n_stats);
    json_decref(api->config);
    json_decref(api->copies);
    free(api);
    srv->slot[SL_FEATURE_ID_limits] = NULL;
}

/* ---- answers ---------------------------------------------------------------------- */

/* Microseconds as seconds: an integer when whole, -1 for never. */
static json_t *seconds(int64_t us)
{
    if (us < 0) return json_integer(-1); /* -1 µs: never, not -0.000001 s */
    if (us % 1000000 == 0) return json_integer((json_int_t)(us / 1000000));
    return json_real((double)us / 1e6);
}

static long long ceil_s(int64_t us)
{
    return us <= 0 ? 0 : (long long)((us + 999999) / 1000000);
}

/* A limit name as a Structured Field String (RFC 8941): printable ASCII, `"` and `\`
 * escaped; any other byte becomes '?'. */
static void sf_string(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    out[o++] = '"';
    for (; *s && o + 4 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') out[o++] = '\\';
        out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out[o++] = '"';
    out[o] = '\0';
}

/* `b` as a NUL-terminated header value, or NULL when it did not fit. */
static const char *jb_cstr(sl_jbuf_t *b)
{
    sl__jb_mem(b, "", 1);
    return b->overflow ? NULL : b->buf;
}

/* RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers) of level `lv`;
 * none when the limit is no longer configured (a Redis answer arriving after a reload,
 * maybe one that left no limits at all). Written without printf (every check answers
 * with them). */
static void add_ratelimit_headers(sl_call_t *call, const sl_limit_level_t *lv)
{
    sl_limits_t *set = api_of(call->srv)->set;
    const sl_limit_config_t *cfg = NULL;
    char name[2 * SL_LIMITS_MAX_NAME + 4];
    if (!call->req || !set || sl_limits_config(set, lv->limit_name, &cfg, NULL) != SL_OK) return;
    sf_string(name, sizeof(name), lv->limit_name);
    sl_jbuf_t b; /* not zeroed: 768 bytes per answer */
    b.len = 0, b.overflow = false;
    sl__jb_lit(&b, name);
    sl__jb_lit(&b, ";q=");
    sl__jb_i64(&b, lv->limit);
    if (cfg->algorithm != SL_LIMIT_CONCURRENCY) { /* concurrency: a quota of holds, no window */
        sl__jb_lit(&b, ";w=");
        sl__jb_i64(&b, (int64_t)ceil(cfg->period_s));
    }
    const char *h = jb_cstr(&b);
    if (h) sl_hreq_add_header(call->req, "RateLimit-Policy", h);
    b.len = 0;
    sl__jb_lit(&b, name);
    sl__jb_lit(&b, ";r=");
    sl__jb_i64(&b, lv->remaining);
    sl__jb_lit(&b, ";t=");
    sl__jb_i64(&b, ceil_s(lv->reset_after_us));
    h = jb_cstr(&b);
    if (h) sl_hreq_add_header(call->req, "RateLimit", h);
}

json_t *sl__limits_level_json(const sl_limit_level_t *lv)
{
    return json_pack("{s:s,s:s,s:I,s:I,s:o,s:o,s:o,s:I,s:f,s:s}", "limit", lv->limit_name, "key",
                     lv->key, "remaining", (json_int_t)lv->remaining, "max", (json_int_t)lv->limit,
                     "retry_after", seconds(lv->retry_after_us), "reset_after",
                     seconds(lv->reset_after_us), "delay", seconds(lv->delay_us), "cost",
                     (json_int_t)lv->cost, "rate", lv->rate, "reason",
                     sl_limit_reason_name(lv->reason));
}

/* A JSON string: `"` and `\\` escaped, control bytes as \\u00XX (the rest is UTF-8 that
 * jansson or the config already validated); runs of plain bytes copied at once. */
static void jb_str(sl_jbuf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    sl__jb_mem(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        sl__jb_mem(b, run, (size_t)(s - run));
        char esc[6] = {'\\', (char)c, '0', '0', hex[c >> 4], hex[c & 15]};
        if (c < 0x20) esc[1] = 'u';
        sl__jb_mem(b, esc, c < 0x20 ? 6 : 2);
        run = s + 1;
    }
    sl__jb_mem(b, run, (size_t)(s - run));
    sl__jb_mem(b, "\"", 1);
}

/* `key` (JSON text: a comma, the quoted name and a colon), then microseconds as seconds
 * (-1 for never, as seconds()). */
static void jb_us_at(sl_jbuf_t *b, const char *key, int64_t us)
{
    if (us < 0)
        sl__jb_key_i64(b, key, -1);
    else
        sl__jb_key_seconds(b, key, (double)us / 1e6);
}

/* `lead` then a level's object up to its key: {"limit":"…","key":"…" */
static void jb_level_open(sl_jbuf_t *b, const char *lead, const sl_limit_level_t *lv)
{
    sl__jb_lit(b, lead);
    sl__jb_lit(b, "{\"limit\":");
    jb_str(b, lv->limit_name);
    sl__jb_lit(b, ",\"key\":");
    jb_str(b, lv->key);
}

/* A level's object from its reason to its end: ,"reason":"…"} */
static void jb_level_close(sl_jbuf_t *b, sl_limit_reason_t reason)
{
    sl__jb_lit(b, ",\"reason\":\"");
    sl__jb_lit(b, sl_limit_reason_name(reason));
    sl__jb_lit(b, "\"}");
}

/* The check answer written straight into `b` (the hot path); b->overflow when it does
 * not fit (many levels, long names): the caller falls back to jansson (result_json(),
 * the same fields). */
static void format_result(sl_jbuf_t *b, const sl_limit_result_t *r, double waited_s)
{
    sl__jb_lit(b, r->allowed ? "{\"allowed\":true" : "{\"allowed\":false");
    sl__jb_key_i64(b, ",\"limit\":", r->limit);
    sl__jb_key_i64(b, ",\"remaining\":", r->remaining);
    jb_us_at(b, ",\"reset_after\":", r->reset_after_us);
    jb_us_at(b, ",\"retry_after\":", r->retry_after_us);
    jb_us_at(b, ",\"delay\":", r->delay_us);
    sl__jb_lit(b, ",\"checked\":[");
    for (size_t i = 0; i < r->n_checked; i++) {
        const sl_limit_level_t *lv = &r->checked[i];
        jb_level_open(b, i ? "," : "", lv);
        sl__jb_key_i64(b, ",\"remaining\":", lv->remaining);
        sl__jb_key_i64(b, ",\"max\":", lv->limit);
        jb_us_at(b, ",\"retry_after\":", lv->retry_after_us);
        jb_us_at(b, ",\"reset_after\":", lv->reset_after_us);
        jb_us_at(b, ",\"delay\":", lv->delay_us);
        sl__jb_key_i64(b, ",\"cost\":", lv->cost);
        sl__jb_key_num(b, ",\"rate\":", lv->rate);
        jb_level_close(b, lv->reason);
    }
    sl__jb_lit(b, "]");
    if (waited_s > 0) {
        sl__jb_lit(b, ",\"waited\":");
        sl__jb_seconds(b, waited_s);
    }
    if (!r->allowed && r->denied_by >= 0) {
        const sl_limit_level_t *d = &r->checked[r->denied_by];
        jb_level_open(b, ",\"denied_by\":", d);
        jb_level_close(b, d->reason);
    }
    sl__jb_lit(b, "}\n");
}

static json_t *result_json(const sl_limit_result_t *r, double waited_s)
{
    json_t *checked = json_array();
    for (size_t i = 0; checked && i < r->n_checked; i++)
        json_array_append_new(checked, sl__limits_level_json(&r->checked[i]));
    json_t *j =
        json_pack("{s:b,s:I,s:I,s:o,s:o,s:o,s:o*}", "allowed", r->allowed, "limit",
                  (json_int_t)r->limit, "remaining", (json_int_t)r->remaining, "reset_after",
                  seconds(r->reset_after_us), "retry_after", seconds(r->retry_after_us), "delay",
                  seconds(r->delay_us), "checked", checked);
    if (j && waited_s > 0) json_object_set_new(j, "waited", json_real(waited_s));
    if (j && !r->allowed && r->denied_by >= 0) {
        const sl_limit_level_t *d = &r->checked[r->denied_by];
        json_object_set_new(j, "denied_by",
                            json_pack("{s:s,s:s,s:s}", "limit", d->limit_name, "key", d->key,
                                      "reason", sl_limit_reason_name(d->reason)));
    }
    return j;
}

/* Answers a check's result: 200 when allowed, 429 (Retry-After unless never) when not. */
void sl__limits_reply_result(sl_call_t *call, const char *name, const sl_limit_result_t *r,
                             double waited_s)
{
    limit_stats_t *st = stats_of(api_of(call->srv), name);
    const char *agent = json_string_value(json_object_get(call->body, "agent"));
    sl_bus_event_t ev = {
        .kind = SL_BUS_LIMIT_CHECK,
        .limit_check = {.limit = name,
                        .agent = agent,
                        .allowed = r->allowed,
                        .delayed = waited_s > 0,
                        .retry_after_s =
                            r->retry_after_us >= 0 ? (double)r->retry_after_us / 1e6 : -1},
    };
    sl__bus_publish(call->srv, &ev);
    if (st) {
        if (r->allowed)
            st->allowed++;
        else
            st->denied++;
    }
    if (call->req) {
        add_ratelimit_headers(call, &r->checked[r->top]);
        if (!r->allowed && r->retry_after_us >= 0) {
            sl_jbuf_t b;
            b.len = 0, b.overflow = false;
            sl__jb_i64(&b, ceil_s(r->retry_after_us));
            sl_hreq_add_header(call->req, "Retry-After", jb_cstr(&b));
        }
    }
    int status = r->allowed ? 200 : 429;
    sl_jbuf_t b;
    b.len = 0;
    b.overflow = false;
    format_result(&b, r, waited_s);
    if (!b.overflow)
        sl__reply_text(call, status, b.buf, b.len);
    else
        sl__reply_json(call, status, result_json(r, waited_s));
}

/* A library error as an answer; a per: team level of an agent in no team says so. */
void sl__limits_reply_error(sl_call_t *call, int rc, const sl_limit_request_t *req)
{
    const char *msg = sl_limits_errmsg(api_of(call->srv)->set);
    if (rc == SL_EINVAL && !strncmp(msg, "team", 4) && !req->team) {
        sl__reply_error(call, 400, "invalid_request",
                        "agent: '%s' is in no team (caps.teams.NAME.members), and %s", req->agent,
                        msg);
        return;
    }
    sl__reply_engine_error(call, rc, msg);
}

/* ---- request fields --------------------------------------------------------------- */

/* True when `name` or one of its ancestors counts per caller-named key. */
static bool uses_key(sl_limits_t *set, const char *name, int depth)
{
    const sl_limit_config_t *cfg;
    if (depth > SL_LIMITS_MAX_LEVELS || sl_limits_config(set, name, &cfg, NULL) != SL_OK)
        return false;
    if (cfg->per == SL_LIMIT_PER_KEY) return true;
    for (size_t i = 0; i < cfg->n_parents; i++)
        if (uses_key(set, cfg->parents[i], depth + 1)) return true;
    return false;
}

/* True when checks of `name` also check `target` (itself or an ancestor). */
static bool reaches(sl_limits_t *set, const char *name, const char *target, int depth)
{
    const sl_limit_config_t *cfg;
    if (!strcmp(name, target)) return true;
    if (depth > SL_LIMITS_MAX_LEVELS || sl_limits_config(set, name, &cfg, NULL) != SL_OK)
        return false;
    for (size_t i = 0; i < cfg->n_parents; i++)
        if (reaches(set, cfg->parents[i], target, depth + 1)) return true;
    return false;
}

/* True when a concurrency level denied `r`: a release may make room before its
 * retry_after (which counts on the TTLs alone), so a queued check waits out its wait. */
static bool release_may_help(sl_limits_t *set, const sl_limit_result_t *r)
{
    for (size_t i = 0; i < r->n_checked; i++) {
        const sl_limit_config_t *cfg;
        if (r->checked[i].reason == SL_LIMIT_RATE &&
            sl_limits_config(set, r->checked[i].limit_name, &cfg, NULL) == SL_OK &&
            cfg->algorithm == SL_LIMIT_CONCURRENCY)
            return true;
    }
    return false;
}

static const char *team_of(const sl_server_t *srv, const char *agent)
{
    const sl_backend_settings_t *s = &srv->config.settings;
    for (size_t i = 0; i < s->n_members; i++)
        if (!strcmp(s->members[i].agent, agent)) return s->members[i].team;
    return NULL;
}

/* Reads agent and key (and action, when `with_action`) into `req`, checks the token and
 * that `key` is given exactly when a level needs it. Returns 0, or -1 after answering. */
static int read_request(sl_call_t *call, const char *name, const char *const *fields,
                        sl_limit_request_t *req)
{
    char msg[320];
    json_t *b = call->body;
    sl_limits_t *set = api_of(call->srv)->set;
    memset(req, 0, sizeof(*req));
    if (sl__json_check_fields(b, fields, msg, sizeof(msg)) < 0 ||
        sl__json_get_string(b, "agent", true, AGENT_MAX_CHARS, true, &req->agent, msg,
                            sizeof(msg)) < 0 ||
        sl__json_get_string(b, "key", false, SL_LIMITS_MAX_NAME, false, &req->key, msg,
                            sizeof(msg)) < 0 ||
        sl__json_get_string(b, "action", false, ACTION_MAX_CHARS, true, &req->action, msg,
                            sizeof(msg)) < 0) {
        sl__reply_error(call, 400, "invalid_request", "%s", msg);
        return -1;
    }
    if (req->key && strlen(req->key) != json_string_length(json_object_get(b, "key"))) {
        sl__reply_error(call, 400, "invalid_request", "key: must not contain a NUL character");
        return -1;
    }
    bool keyed = uses_key(set, name, 0);
    if (keyed && !req->key) {
        sl__reply_error(call, 400, "invalid_request",
                        "key: required, limit '%s' counts per caller-named key (per: key)", name);
        return -1;
    }
    if (!keyed && req->key) {
        sl__reply_error(call, 400, "invalid_request",
                        "key: '%.64s' given, but limit '%s' and its parents count per agent, team "
                        "or globally (key is for per: key)",
                        req->key, name);
        return -1;
    }
    if (!sl__token_may_act_as(call, req->agent)) {
        sl__reply_error(call, 403, "forbidden", "agent: this token may not act as '%s'",
                        req->agent);
        return -1;
    }
    req->team = team_of(call->srv, req->agent);
    return 0;
}

/* ---- check ------------------------------------------------------------------------ */

static void held_arm(held_t *h, int64_t at_us, int64_t now);

static void on_held_timer(evutil_socket_t fd, short what, void *ud)
{
    sl_call_t *call = ud;
    held_t *h = call->owner;
    sl_limits_api_t *api = api_of(call->srv);
    (void)fd, (void)what;
    int64_t now = now_us(call->srv);
    if (ahead_of(h) && now < h->deadline_us) { /* the check ahead is woken first */
        held_arm(h, h->deadline_us, now);
        return;
    }
    sl_limit_result_t r;
    int rc = api->set ? sl_limits_check(api->set, h->name, &h->req, now, &r) : SL_ENOTFOUND;
    if (rc == SL_OK && !r.allowed && now < h->deadline_us) {
        int64_t at;
        int wrc = sl_limits_when(api->set, h->name, &h->req, now, &at);
        if (wrc == SL_OK && at > h->deadline_us && release_may_help(api->set, &r))
            at = h->deadline_us; /* a release wakes it sooner */
        if (wrc == SL_OK && at <= h->deadline_us) {
            held_arm(h, at, now);
            return;
        }
    }
    double waited_s = (double)(now - h->started_us) / 1e6;
    sl_limit_request_t req = h->req;
    char name[SL_LIMITS_MAX_NAME + 1];
    snprintf(name, sizeof(name), "%s", h->name);
    held_unlink(h);
    if (rc == SL_ENOTFOUND)
        sl__reply_error(call, 404, "not_found", "limit: '%s' is no longer configured (reload)",
                        name);
    else if (rc != SL_OK)
        sl__limits_reply_error(call, rc, &req);
    else
        sl__limits_reply_result(call, name, &r, waited_s);
}

static void held_arm(held_t *h, int64_t at_us, int64_t now)
{
    int64_t d = at_us > now ? at_us - now : 0;
    struct timeval tv = {.tv_sec = (time_t)(d / 1000000), .tv_usec = (suseconds_t)(d % 1000000)};
    evtimer_add(h->call->wait_timer, &tv);
}

/* Holds `call` until `at_us`. Returns 0, or -1 (out of memory: the caller answers). */
static int hold(sl_call_t *call, const char *name, const sl_limit_request_t *req, int64_t now,
                int64_t at_us, int64_t deadline_us)
{
    sl_limits_api_t *api = api_of(call->srv);
    held_t *h = calloc(1, sizeof(*h));
    if (!h) return -1;
    if (!call->wait_timer) call->wait_timer = evtimer_new(call->srv->base, on_held_timer, call);
    if (!call->wait_timer) {
        free(h);
        return -1;
    }
    h->call = call;
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->req = *req;
    if (req->team) { /* the config (and its team names) may be replaced by a reload */
        snprintf(h->team, sizeof(h->team), "%s", req->team);
        h->req.team = h->team;
    }
    h->started_us = now;
    h->deadline_us = deadline_us;
    h->prev = api->held_tail;
    if (api->held_tail)
        api->held_tail->next = h;
    else
        api->held = h;
    api->held_tail = h;
    api->n_held++;
    call->owner = h;
    sl__call_watch_close(call, on_held_gone);
    held_arm(h, at_us, now);
    return 0;
}

static void handle_check(sl_call_t *call, const char *name)
{
    static const char *const fields[] = {"agent", "key", "hits", "action", "wait", NULL};
    sl_limits_api_t *api = api_of(call->srv);
    sl_limit_request_t req;
    char msg[320];
    int64_t hits = 1;
    double wait_s = 0;
    if (read_request(call, name, fields, &req) < 0) return;
    if (sl__json_get_int(call->body, "hits", false, &hits, msg, sizeof(msg)) < 0 ||
        sl__json_get_number(call->body, "wait", false, 0, false, &wait_s, msg, sizeof(msg)) < 0) {
        sl__reply_error(call, 400, "invalid_request", "%s", msg);
        return;
    }
    if (hits > SL_LIMITS_MAX_HITS) {
        sl__reply_error(call, 400, "invalid_request",
                        "hits: %lld is above the most one check may ask (%lld)", (long long)hits,
                        (long long)SL_LIMITS_MAX_HITS);
        return;
    }
    /* After the 400/403 checks (docs/api.md "Suspension"): suspended, nothing checked. */
    sl_refusal_t ref;
    if (sl__admit_agent(call, SL_ADMIT_ACTION, req.agent, NULL, &ref) < 0) {
        double now = sl_backend_now(call->srv->backend);
        sl__reply_rejected(call, ref.type, ref.retry_after_s, now + ref.retry_after_s);
        return;
    }
    req.hits = hits;
    wait_s = fmin(wait_s, call->srv->config.max_wait_s);
    int64_t now = now_us(call->srv);
    const sl_limit_config_t *cfg;
    sl_limits_config(api->set, name, &cfg, NULL);
    bool queues = cfg->on_limit == SL_LIMIT_QUEUE && wait_s > 0 && hits > 0;
    int64_t deadline = now + (int64_t)llround(wait_s * 1e6);
    if (sl__limits_redis_check(call, name, &req, queues, deadline)) return;
    if (queues) { /* behind the checks of its queue already waiting, in arrival order */
        held_t probe = {.call = call, .req = req};
        snprintf(probe.name, sizeof(probe.name), "%s", name);
        for (held_t *o = api->held; o; o = o->next)
            if (same_queue(o, &probe)) {
                if (hold(call, name, &req, now, deadline, deadline) == 0) return;
                break;
            }
    }
    sl_limit_result_t r;
    int rc = sl_limits_check(api->set, name, &req, now, &r);
    if (rc != SL_OK) {
        sl__limits_reply_error(call, rc, &req);
        return;
    }
    if (!r.allowed && queues) {
        int64_t at;
        int wrc = sl_limits_when(api->set, name, &req, now, &at);
        if (wrc == SL_OK && at > deadline && release_may_help(api->set, &r))
            at = deadline; /* a release wakes it sooner */
        if (wrc == SL_OK && at <= deadline && hold(call, name, &req, now, at, deadline) == 0)
            return;
    }
    sl__limits_reply_result(call, name, &r, 0);
}

/* ---- release, report -------------------------------------------------------------- */

static void handle_release(sl_call_t *call, const char *name)
{
    static const char *const fields[] = {"agent", "key", NULL};
    sl_limits_api_t *api = api_of(call->srv);
    sl_limit_request_t req;
    if (read_request(call, name, fields, &req) < 0) return;
    if (sl__limits_redis_release(call, name, &req)) return;
    int rc = sl_limits_release(api->set, name, &req, now_us(call->srv));
    if (rc != SL_OK) {
        sl__limits_reply_error(call, rc, &req);
        return;
    }
    sl__limits_wake_held(call->srv, name);
    sl_limit_key_info_t info;
    req.hits = 0;
    sl_limits_key_info(api->set, name, &req, now_us(call->srv), &info);
    sl__reply_json(call, 200,
                   json_pack("{s:s,s:s,s:I,s:I}", "status", "released", "key", info.level.key,
                             "held", (json_int_t)info.held, "remaining",
                             (json_int_t)info.level.remaining));
}

static void handle_report(sl_call_t *call, const char *name)
{
    static const char *const fields[] = {"agent", "key", "successes", "errors", NULL};
    sl_limits_api_t *api = api_of(call->srv);
    sl_limit_request_t req;
    char msg[320];
    int64_t successes = 0, errors = 0;
    if (read_request(call, name, fields, &req) < 0) return;
    if (sl__json_get_int(call->body, "successes", false, &successes, msg, sizeof(msg)) < 0 ||
        sl__json_get_int(call->body, "errors", false, &errors, msg, sizeof(msg)) < 0) {
        sl__reply_error(call, 400, "invalid_request", "%s", msg);
        return;
    }
    if (successes + errors < 1 || successes + errors > SL_LIMITS_MAX_HITS) {
        sl__reply_error(call, 400, "invalid_request",
                        "successes, errors: %lld + %lld outcomes; a report holds 1..%lld",
                        (long long)successes, (long long)errors, (long long)SL_LIMITS_MAX_HITS);
        return;
    }
    if (sl__limits_redis_report(call, name, &req, successes, errors)) return;
    double rate;
    int rc = sl_limits_report(api->set, name, &req, successes, errors, now_us(call->srv), &rate);
    if (rc != SL_OK) {
        sl__limits_reply_error(call, rc, &req);
        return;
    }
    sl__reply_json(call, 200, json_pack("{s:s,s:f}", "status", "reported", "rate", rate));
}

/* ---- views ------------------------------------------------------------------------ */

static json_t *limit_json(sl_limits_api_t *api, const char *name)
{
    const sl_limit_config_t *cfg;
    size_t keys = 0;
    if (sl_limits_config(api->set, name, &cfg, &keys) != SL_OK) return NULL;
    json_t *j =
        json_pack("{s:s,s:O,s:I,s:f}", "name", name, "config", json_object_get(api->config, name),
                  "keys", (json_int_t)keys, "rate", cfg->rate);
    json_t *copy = json_object_get(api->copies, name);
    if (j && copy) json_object_update(j, copy); /* of, tier, limit_multiplier */
    limit_stats_t *st = stats_of(api, name);
    if (j && cfg->adaptive.enabled && st && !isnan(st->adaptive_rate))
        json_object_set_new(j, "adaptive_rate", json_real(st->adaptive_rate));
    if (j && st)
        json_object_set_new(j, "checks",
                            json_pack("{s:I,s:I}", "allowed", (json_int_t)st->allowed, "denied",
                                      (json_int_t)st->denied));
    return j;
}

/* GET /v1/limits/NAME?key=K: K is the level's key (an agent, a team, or the key). */
static void handle_view(sl_call_t *call, const char *name, const char *query)
{
    sl_limits_api_t *api = api_of(call->srv);
    json_t *j = limit_json(api, name);
    if (!j) {
        sl__reply_error(call, 404, "not_found", "limit: '%s' is not configured", name);
        return;
    }
    struct evkeyvalq q = {0};
    const char *key = NULL;
    bool parsed = query && *query && evhttp_parse_query_str(query, &q) == 0;
    if (parsed) key = evhttp_find_header(&q, "key");
    if (key && !sl__utf8_valid(key)) { /* no check can name it (a body is JSON) */
        char shown[SL_LIMITS_MAX_NAME + 1];
        snprintf(shown, sizeof(shown), "%s", key);
        sl__utf8_scrub(shown);
        sl__reply_error(call, 400, "invalid_request", "key: '%.64s' is not valid UTF-8", shown);
        json_decref(j);
        evhttp_clear_headers(&q);
        return;
    }
    if (key) {
        const sl_limit_config_t *cfg;
        sl_limits_config(api->set, name, &cfg, NULL);
        sl_limit_request_t req = {.agent = key, .team = key, .key = key};
        bool own = cfg->per == SL_LIMIT_PER_GLOBAL || cfg->per == SL_LIMIT_PER_KEY ||
                   (cfg->per == SL_LIMIT_PER_AGENT && sl__token_may_act_as(call, key)) ||
                   (cfg->per == SL_LIMIT_PER_TEAM && call->admin);
        if (!own && cfg->per == SL_LIMIT_PER_TEAM && call->token && call->token->agent) {
            const char *t = team_of(call->srv, call->token->agent);
            own = t && !strcmp(t, key);
        }
        sl_limit_key_info_t info;
        if (own && sl__limits_redis_view(call, name, &req, j)) {
            evhttp_clear_headers(&q);
            return;
        }
        int rc = own ? sl_limits_key_info(api->set, name, &req, now_us(call->srv), &info) : SL_OK;
        if (!own) {
            sl__reply_error(call, 403, "forbidden", "key: this token may not read '%s' of '%s'",
                            key, name);
        } else if (rc != SL_OK) {
            sl__reply_engine_error(call, rc, sl_limits_errmsg(api->set));
        } else {
            json_t *lv = sl__limits_level_json(&info.level);
            json_object_set_new(lv, "tracked", json_boolean(info.tracked));
            json_object_set_new(lv, "held", json_integer((json_int_t)info.held));
            json_object_set_new(j, "state", lv);
            sl__reply_json(call, 200, j);
            j = NULL;
        }
    } else {
        sl__reply_json(call, 200, j);
        j = NULL;
    }
    json_decref(j);
    if (parsed) evhttp_clear_headers(&q);
}

static void handle_list(sl_call_t *call)
{
    sl_limits_api_t *api = api_of(call->srv);
    json_t *list = json_array();
    size_t n = api->set ? sl_limits_count(api->set) : 0;
    for (size_t i = 0; list && i < n; i++)
        json_array_append_new(list, limit_json(api, sl_limits_name_at(api->set, i)));
    sl__reply_json(call, 200, json_pack("{s:o*}", "limits", list));
}

void sl__handle_limits(sl_call_t *call, const char *name, const char *action, const char *query)
{
    sl_limits_api_t *api = api_of(call->srv);
    if (!name) {
        handle_list(call);
        return;
    }
    const sl_limit_config_t *cfg;
    if (!api->set || sl_limits_config(api->set, name, &cfg, NULL) != SL_OK) {
        sl__reply_error(call, 404, "not_found", "limit: '%.256s' is not configured (limits:)",
                        name);
        return;
    }
    json_t *copy = json_object_get(api->copies, name);
    if (copy && action) {
        sl__reply_error(call, 400, "invalid_request",
                        "limit: '%.256s' is tier %s's copy of '%s' (limit_multiplier %g): "
                        "check '%s' with a token of tier %s",
                        name, json_string_value(json_object_get(copy, "tier")),
                        json_string_value(json_object_get(copy, "of")),
                        json_number_value(json_object_get(copy, "limit_multiplier")),
                        json_string_value(json_object_get(copy, "of")),
                        json_string_value(json_object_get(copy, "tier")));
        return;
    }
    char tiered[SL_LIMITS_MAX_NAME + 1];
    if (!copy) name = sl__limits_tier_name(call, api->copies, name, tiered, sizeof tiered);
    if (!action)
        handle_view(call, name, query);
    else if (!strcmp(action, "check"))
        handle_check(call, name);
    else if (!strcmp(action, "release"))
        handle_release(call, name);
    else
        handle_report(call, name);
}

/* ---- metrics ---------------------------------------------------------------------- */

/* A label value with `\`, `"` and newlines escaped (Prometheus text format). */
static void label(struct evbuffer *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            evbuffer_add_printf(out, "\\%c", *s);
        else if (*s == '\n')
            evbuffer_add(out, "\\n", 2);
        else
            evbuffer_add(out, s, 1);
    }
}

void sl__limits_metrics_render(const sl_server_t *srv, struct evbuffer *out)
{
    const sl_limits_api_t *api = api_of(srv);
    if (!api || api->n_stats == 0) return;
    evbuffer_add_printf(out, "# HELP sluice_limit_checks_total Action-limit checks answered, "
                             "by limit and result (allowed, denied).\n"
                             "# TYPE sluice_limit_checks_total counter\n");
    for (size_t i = 0; i < api->n_stats; i++) {
        const limit_stats_t *st = &api->stats[i];
        for (int k = 0; k < 2; k++) {
            evbuffer_add_printf(out, "sluice_limit_checks_total{limit=\"");
            label(out, st->name);
            evbuffer_add_printf(out, "\",result=\"%s\"} %llu\n", k ? "denied" : "allowed",
                                (unsigned long long)(k ? st->denied : st->allowed));
        }
    }
    evbuffer_add_printf(out,
                        "# HELP sluice_limit_held Checks held until their limit has "
                        "room (on_limit: queue).\n# TYPE sluice_limit_held gauge\n"
                        "sluice_limit_held %zu\n",
                        api->n_held);
    /* Each family's samples together, as the text format wants. */
    for (int family = 0; family < 2; family++) {
        bool header = false;
        for (size_t i = 0; i < api->n_stats; i++) {
            const limit_stats_t *st = &api->stats[i];
            const sl_limit_config_t *cfg;
            if (sl_limits_config(api->set, st->name, &cfg, NULL) != SL_OK || !cfg->adaptive.enabled)
                continue;
            if (!header && family == 0)
                evbuffer_add_printf(out,
                                    "# HELP sluice_limit_adaptive_rate An adaptive limit's rate "
                                    "after its latest change (any key; the configured rate "
                                    "before one).\n# TYPE sluice_limit_adaptive_rate gauge\n");
            if (!header && family == 1)
                evbuffer_add_printf(out, "# HELP sluice_limit_adaptive_changes_total Rate "
                                         "changes of adaptive limits, by direction (up, down).\n"
                                         "# TYPE sluice_limit_adaptive_changes_total counter\n");
            header = true;
            if (family == 0) {
                evbuffer_add_printf(out, "sluice_limit_adaptive_rate{limit=\"");
                label(out, st->name);
                evbuffer_add_printf(out, "\"} %.15g\n",
                                    isnan(st->adaptive_rate) ? cfg->rate : st->adaptive_rate);
                continue;
            }
            for (int k = 0; k < 2; k++) {
                evbuffer_add_printf(out, "sluice_limit_adaptive_changes_total{limit=\"");
                label(out, st->name);
                evbuffer_add_printf(out, "\",direction=\"%s\"} %llu\n", k ? "down" : "up",
                                    (unsigned long long)(k ? st->adapt_down : st->adapt_up));
            }
        }
    }
}
