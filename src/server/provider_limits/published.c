/* published.c - reading the provider's rate limits from its admin endpoint and mapping them to pools.
 *
 *   Anthropic: GET {url}/v1/organizations/rate_limits (x-api-key: the admin key,
 *     anthropic-version): {"data": [{"group_type": "model_group", "models": [...],
 *     "limits": [{"type": "requests_per_minute" | "input_tokens_per_minute" |
 *     "output_tokens_per_minute", "value": N}, ...]}, ...]}. A pool takes the first
 *     model_group listing a model its `models` patterns match (the first model_group
 *     when it has no patterns). A pool named under `groups:` takes that group type's
 *     entry instead (batch, token_count, files, ...: limits of an API surface, not of
 *     a model class).
 *   OpenAI: GET {url}/v1/organization/projects/{project}/rate_limits (Bearer): {"data":
 *     [{"model": M, "max_requests_per_1_minute": N, "max_tokens_per_1_minute": N}]}: a
 *     pool takes the first entry whose model its patterns match, as rpm and tokens_tpm.
 *
 * The figures adopted are logged, one line per pool and limit; a change from the last
 * figures read raises the alert provider_limits_changed (an event and
 * sluice_alert{name="provider_limits_changed"}), cleared by the next read that finds no
 * change. At start a failed read is an error; later ones are logged and the figures
 * in force are kept. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "pacing.h"
#include "server.h"
#include "upstream.h"

#define MAX_BODY_BYTES (4u << 20)

static const char *const KEYS[4] = {"rpm", "input_tpm", "output_tpm", "tokens_tpm"};

typedef struct fetch {
    sl_server_t *srv;
    char pool[129];
    char url[1400];
    char key_from[300]; /* "variable NAME" or "file PATH": where the admin key came from
                           (copied: a reload may free the configuration meanwhile) */
    int status;
    char *body;
    size_t len;
    bool done;
    int result;
    char errmsg[256];
    int *pending;
    bool blocking;
    struct fetch *prev, *next; /* background reads in flight (freed at shutdown) */
} fetch_t;

static fetch_t *in_flight; /* background reads not yet done */

static void unlink_fetch(fetch_t *f)
{
    if (f->prev) f->prev->next = f->next;
    else if (in_flight == f) in_flight = f->next;
    if (f->next) f->next->prev = f->prev;
    f->prev = f->next = NULL;
}

static void on_headers(void *ud, int status, const char *const *names, const char *const *values,
                       size_t n)
{
    fetch_t *f = ud;
    (void)names;
    (void)values;
    (void)n;
    f->status = status;
}

static int on_body(void *ud, const char *data, size_t len)
{
    fetch_t *f = ud;
    if (f->len + len > MAX_BODY_BYTES) return -1;
    char *grown = realloc(f->body, f->len + len + 1);
    if (!grown) return -1;
    memcpy(grown + f->len, data, len);
    f->body = grown;
    f->len += len;
    f->body[f->len] = '\0';
    return 1;
}

static bool pool_matches(const sl_pool_upstream_t *up, const char *model)
{
    for (size_t i = 0; i < up->n_models; i++)
        if (fnmatch(up->models[i], model, 0) == 0) return true;
    return false;
}

static int64_t limit_value(json_t *limits, const char *type)
{
    size_t i;
    json_t *l;
    json_array_foreach(limits, i, l)
    {
        json_t *t = json_object_get(l, "type"), *v = json_object_get(l, "value");
        if (json_is_string(t) && !strcmp(json_string_value(t), type) && json_is_integer(v))
            return json_integer_value(v) > 0 ? json_integer_value(v) : 0;
    }
    return 0;
}

/* Finds the pool's figures in `doc`; returns false (with `why`) when none apply. */
static bool map_limits(const sl_pool_upstream_t *up, const char *want, json_t *doc,
                       int64_t out[4], char *group, size_t group_len, char *why, size_t why_len)
{
    bool by_model = !strcmp(want, "model_group");
    json_t *data = json_object_get(doc, "data");
    if (!json_is_array(data)) {
        snprintf(why, why_len, "the answer has no \"data\" list");
        return false;
    }
    memset(out, 0, 4 * sizeof(out[0]));
    size_t i;
    json_t *e;
    json_array_foreach(data, i, e)
    {
        if (up->api == SL_UPSTREAM_ANTHROPIC) {
            json_t *gt = json_object_get(e, "group_type");
            if (!json_is_string(gt)) gt = json_object_get(json_object_get(e, "group"), "type");
            if (!json_is_string(gt) || strcmp(json_string_value(gt), want) != 0) continue;
            bool hit = up->n_models == 0 || !by_model;
            size_t j;
            json_t *m;
            json_array_foreach(json_object_get(e, "models"), j, m)
            {
                if (!hit && json_is_string(m) && pool_matches(up, json_string_value(m))) hit = true;
            }
            if (!hit) continue;
            json_t *limits = json_object_get(e, "limits");
            out[0] = limit_value(limits, "requests_per_minute");
            out[1] = limit_value(limits, "input_tokens_per_minute");
            out[2] = limit_value(limits, "output_tokens_per_minute");
            json_t *id = json_object_get(e, "id");
            snprintf(group, group_len, "%s %s", want, json_is_string(id) ? json_string_value(id) : "");
            return true;
        }
        json_t *m = json_object_get(e, "model");
        if (!json_is_string(m) || (up->n_models && !pool_matches(up, json_string_value(m))))
            continue;
        json_t *rpm = json_object_get(e, "max_requests_per_1_minute");
        json_t *tpm = json_object_get(e, "max_tokens_per_1_minute");
        out[0] = json_is_integer(rpm) && json_integer_value(rpm) > 0 ? json_integer_value(rpm) : 0;
        out[3] = json_is_integer(tpm) && json_integer_value(tpm) > 0 ? json_integer_value(tpm) : 0;
        snprintf(group, group_len, "model %s", json_string_value(m));
        return true;
    }
    snprintf(why, why_len, "no %s %s the pool's",
             up->api == SL_UPSTREAM_ANTHROPIC ? want : "entry",
             by_model ? "matches the models" : "group is listed for");
    return false;
}

static void raise_alert(sl_server_t *srv, sl_pace_pool_t *pp, const int64_t before[4], bool active)
{
    pp->alert_changed = active;
    json_t *j = json_pack("{s:s, s:s, s:b, s:s, s:f}", "event", "alert", "alert",
                          "provider_limits_changed", "active", active, "pool", pp->name, "ts",
                          sl_backend_now(srv->backend));
    if (j && active) {
        json_t *was = json_object(), *now = json_object();
        for (int b = 0; b < 4; b++) {
            json_object_set_new(was, KEYS[b], json_integer(before[b]));
            json_object_set_new(now, KEYS[b], json_integer(pp->published[b]));
        }
        json_object_set_new(j, "previous", was);
        json_object_set_new(j, "published", now);
    }
    sl__events_publish(srv, "alert", j);
}

/* Adopts what the provider published for `pp`: logs it, alerts on a change. */
static void adopt(sl_server_t *srv, sl_pace_pool_t *pp, const int64_t pub[4], const char *group)
{
    int64_t before[4];
    memcpy(before, pp->published, sizeof(before));
    bool had = pp->have_published;
    bool changed = had && memcmp(before, pub, sizeof(before)) != 0;
    memcpy(pp->published, pub, sizeof(pp->published));
    pp->have_published = true;
    snprintf(pp->group, sizeof(pp->group), "%s", group);
    for (int b = 0; b < 4; b++) {
        if (pub[b] == 0 && pp->configured[b] == 0) continue;
        int64_t force = pp->configured[b];
        if (pub[b] > 0) force = force > 0 && force < pub[b] ? force : pub[b];
        fprintf(stderr,
                "sluiced: provider_limits: pool '%s' %s %lld in force (published %lld by %s, "
                "configured %lld%s)\n",
                pp->name, KEYS[b], (long long)force, (long long)pub[b], group,
                (long long)pp->configured[b],
                pub[b] > 0 && pp->configured[b] > 0 && pp->configured[b] < pub[b]
                    ? ": the configured figure is the ceiling"
                    : "");
    }
    if (changed) {
        for (int b = 0; b < 4; b++)
            if (before[b] != pub[b])
                fprintf(stderr,
                        "sluiced: provider_limits: alert provider_limits_changed: pool '%s' %s "
                        "published %lld, was %lld\n",
                        pp->name, KEYS[b], (long long)pub[b], (long long)before[b]);
        raise_alert(srv, pp, before, true);
    } else if (had && pp->alert_changed) {
        raise_alert(srv, pp, before, false);
    }
}

/* Handles one finished read; returns -1 with `err` when it failed. */
static int finish(fetch_t *f, char *err, size_t errlen)
{
    sl_server_t *srv = f->srv;
    const sl_pool_upstream_t *up = sl_config_pool_upstream(&srv->config, f->pool);
    sl_pace_pool_t *pp = SL_PACING(srv) ? sl__pace_pool(SL_PACING(srv), f->pool) : NULL;
    if (f->result != SL_UPSTREAM_OK) {
        snprintf(err, errlen, "provider_limits: pool '%s': cannot read %s: %s", f->pool, f->url,
                 f->errmsg);
        return -1;
    }
    if (f->status == 401 || f->status == 403) {
        snprintf(err, errlen,
                 "provider_limits: pool '%s': %s refused the admin key in %s (HTTP %d)",
                 f->pool, f->url, f->key_from, f->status);
        return -1;
    }
    json_t *doc = f->status == 200 && f->body ? json_loadb(f->body, f->len, 0, NULL) : NULL;
    int64_t pub[4];
    char group[96] = "", why[160] = "";
    const char *want = "model_group";
    for (size_t i = 0; i < SL_PUBLISHED(&srv->config)->n_groups; i++)
        if (!strcmp(SL_PUBLISHED(&srv->config)->group_pools[i], f->pool))
            want = SL_PUBLISHED(&srv->config)->group_types[i];
    if (!doc || !up || !pp ||
        !map_limits(up, want, doc, pub, group, sizeof(group), why, sizeof(why))) {
        snprintf(err, errlen, "provider_limits: pool '%s': %s answered HTTP %d: %s", f->pool,
                 f->url, f->status, doc ? why : "not a JSON rate-limit list");
        json_decref(doc);
        return -1;
    }
    json_decref(doc);
    adopt(srv, pp, pub, group);
    return 0;
}

static void on_done(void *ud, int result, bool request_sent, const char *errmsg)
{
    fetch_t *f = ud;
    (void)request_sent;
    f->result = result;
    snprintf(f->errmsg, sizeof(f->errmsg), "%s", errmsg ? errmsg : "");
    f->done = true;
    if (f->pending) (*f->pending)--;
    if (f->blocking) return;
    unlink_fetch(f);
    char err[600];
    if (finish(f, err, sizeof(err)) < 0)
        fprintf(stderr, "sluiced: %s; keeping the limits in force\n", err);
    else
        sl__pacing_apply(f->srv, &f->srv->config, true);
    free(f->body);
    free(f);
}

/* The source that serves `up`'s provider, or NULL when none is configured. */
static const sl_published_source_t *source_of(const sl_config_t *c, const sl_pool_upstream_t *up)
{
    const sl_published_source_t *s = up->api == SL_UPSTREAM_ANTHROPIC ? &SL_PUBLISHED(c)->anthropic
                                      : up->api == SL_UPSTREAM_OPENAI  ? &SL_PUBLISHED(c)->openai
                                                                       : NULL;
    return s && s->key ? s : NULL;
}

/* Whether pool `name` (with upstream `up`) adopts published limits. */
static bool adopts(const sl_config_t *c, const char *name, const sl_pool_upstream_t *up)
{
    if (!up || !up->url || !source_of(c, up)) return false;
    if (SL_PUBLISHED(c)->n_pools == 0) return true;
    for (size_t i = 0; i < SL_PUBLISHED(c)->n_pools; i++)
        if (!strcmp(SL_PUBLISHED(c)->pools[i], name)) return true;
    return false;
}

static fetch_t *start_one(sl_server_t *srv, sl_upstream_t *u, const char *name,
                          const sl_pool_upstream_t *up, char *err, size_t errlen)
{
    const sl_published_source_t *src = source_of(&srv->config, up);
    fetch_t *f = calloc(1, sizeof(*f));
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->srv = srv;
    snprintf(f->key_from, sizeof(f->key_from), "%s %s", src->key_env ? "variable" : "file",
             src->key_env ? src->key_env : src->key_file);
    snprintf(f->pool, sizeof(f->pool), "%s", name);
    const char *base = src->url ? src->url : up->url;
    if (up->api == SL_UPSTREAM_ANTHROPIC)
        snprintf(f->url, sizeof(f->url), "%s/v1/organizations/rate_limits", base);
    else
        snprintf(f->url, sizeof(f->url), "%s/v1/organization/projects/%s/rate_limits", base,
                 src->project);
    char auth[4200];
    const char *hdr[3];
    size_t nh = 0;
    if (up->api == SL_UPSTREAM_ANTHROPIC) {
        snprintf(auth, sizeof(auth), "x-api-key: %s", src->key);
        hdr[nh++] = auth;
        hdr[nh++] = "anthropic-version: 2023-06-01";
    } else {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", src->key);
        hdr[nh++] = auth;
    }
    sl_upstream_request_t rq = {.method = "GET",
                                .url = f->url,
                                .headers = hdr,
                                .n_headers = nh,
                                .ca_file = up->ca_file,
                                .connect_timeout_s = 5,
                                .idle_timeout_s = 10};
    sl_upstream_cbs_t cbs = {.on_headers = on_headers, .on_body = on_body, .on_done = on_done};
    char why[256];
    sl_upstream_xfer_t *x = sl_upstream_start(u, &rq, &cbs, f, why, sizeof(why));
    memset(auth, 0, sizeof(auth));
    if (!x) {
        snprintf(err, errlen, "provider_limits: pool '%s': cannot read %s: %s", name, f->url, why);
        free(f);
        return NULL;
    }
    return f;
}

/* One background client for the server's lifetime (the loop's reads share it). */
static sl_upstream_t *background;

static sl_upstream_t *background_client(sl_server_t *srv)
{
    if (!background) background = sl_upstream_new(srv->base);
    return background;
}

void sl__published_free_client(void)
{
    sl_upstream_free(background); /* cancels the reads in flight, without callbacks */
    background = NULL;
    while (in_flight) {
        fetch_t *f = in_flight;
        unlink_fetch(f);
        free(f->body);
        free(f);
    }
}

int sl__published_fetch(sl_server_t *srv, bool blocking, char *err, size_t errlen)
{
    const sl_config_t *c = &srv->config;
    for (size_t i = 0; i < SL_PUBLISHED(c)->n_pools; i++) {
        const sl_pool_upstream_t *up = sl_config_pool_upstream(c, SL_PUBLISHED(c)->pools[i]);
        if (!up || !up->url || !source_of(c, up)) {
            snprintf(err, errlen,
                     "provider_limits.pools: '%s' is not a pool with an upstream_url of a "
                     "provider configured under provider_limits",
                     SL_PUBLISHED(c)->pools[i]);
            if (blocking) return -1;
            fprintf(stderr, "sluiced: %s\n", err);
            return -1;
        }
    }
    struct event_base *base = blocking ? event_base_new() : NULL;
    sl_upstream_t *u = blocking ? (base ? sl_upstream_new(base) : NULL) : background_client(srv);
    if (!u) {
        snprintf(err, errlen, "provider_limits: cannot set up the HTTP client");
        if (base) event_base_free(base);
        return -1;
    }
    int pending = 0, rc = 0;
    fetch_t *started[256];
    size_t n_started = 0;
    for (size_t i = 0; i < c->settings.n_pools && rc == 0 && n_started < 256; i++) {
        const char *name = c->settings.pools[i].name;
        const sl_pool_upstream_t *up = &c->upstreams[i];
        if (!adopts(c, name, up)) continue;
        fetch_t *f = start_one(srv, u, name, up, err, errlen);
        if (!f) {
            rc = -1;
            break;
        }
        if (blocking) {
            f->blocking = true;
            f->pending = &pending;
            pending++;
            started[n_started++] = f;
        } else {
            f->next = in_flight;
            if (in_flight) in_flight->prev = f;
            in_flight = f;
        }
    }
    if (!blocking) {
        if (rc < 0) fprintf(stderr, "sluiced: %s\n", err);
        return rc;
    }
    while (pending > 0 && event_base_loop(base, EVLOOP_ONCE) == 0) {
    }
    for (size_t i = 0; i < n_started; i++) {
        if (rc == 0 && started[i]->done && finish(started[i], err, errlen) < 0) rc = -1;
        free(started[i]->body);
        free(started[i]);
    }
    sl_upstream_free(u);
    event_base_free(base);
    return rc;
}
