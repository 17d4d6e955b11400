/* rollup.c - what was used in the last day, kept in memory for GET /v1/usage.
 *
 * Two rings of buckets: one a minute wide for the last hour (60) and one an hour wide for
 * the last day (24); every call is added to both, and a query reads one ring: a `since`
 * within the last hour is answered to the minute, an older one to the hour (the answer's
 * `from` says where the first bucket counted starts). A bucket holds at most
 * SL_USAGE_MAX_KEYS (agent, team, model) keys; past that a call is counted as agent and
 * model "other" in its team, so memory is bounded by 84 buckets of at most
 * SL_USAGE_MAX_KEYS + SL_USAGE_MAX_TEAMS keys whatever the fleet does. Nothing older than
 * the hour ring's oldest bucket is kept, and nothing survives a restart: the event log
 * has the per-lease truth for longer windows (docs/api.md "GET /v1/usage").
 */
#include "usage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

static void bucket_add(sl_usage_bucket_t *b, double width_s, const char *key,
                       const sl_usage_counts_t *c, double now_s)
{
    double start = floor(now_s / width_s) * width_s;
    if (b->start_s != start) { /* a bucket from a lap ago: emptied for this one */
        sl__namemap_free_all(&b->keys);
        b->start_s = start;
    }
    const char *stored;
    sl_usage_counts_t *t = sl__namemap_obtain(&b->keys, key, sizeof(*t), SL_USAGE_MAX_KEYS,
                                              &stored);
    if (!t) {
        const char *team = strchr(key, '\x1f');
        char other[160];
        snprintf(other, sizeof(other), "other\x1f%.128s", team ? team + 1 : "other");
        char *model = strchr(other + 6, '\x1f');
        if (model) snprintf(model, sizeof(other) - (size_t)(model - other), "\x1fother");
        t = sl__namemap_obtain(&b->keys, other, sizeof(*t),
                               SL_USAGE_MAX_KEYS + SL_USAGE_MAX_TEAMS + 1, &stored);
    }
    if (t) sl__usage_counts_add(t, c);
}

void sl__usage_rollup_add(sl_usage_state_t *u, const char *key, const sl_usage_counts_t *c,
                          double now_s)
{
    bucket_add(&u->minutes[(int64_t)floor(now_s / 60) % SL_USAGE_MINUTES], 60, key, c, now_s);
    bucket_add(&u->hours[(int64_t)floor(now_s / 3600) % SL_USAGE_HOURS], 3600, key, c, now_s);
}

void sl__usage_rollup_free(sl_usage_state_t *u)
{
    for (size_t i = 0; i < SL_USAGE_MINUTES; i++)
        sl__namemap_free_all(&u->minutes[i].keys);
    for (size_t i = 0; i < SL_USAGE_HOURS; i++)
        sl__namemap_free_all(&u->hours[i].keys);
}

/* ---- `since` ------------------------------------------------------------------------------- */

/* `since` as a Unix time: Unix seconds (digits only), a duration back from `now_s`
 * (`90s`, `30m`, `24h`, `1h30m`: sl_parse_duration) or an RFC 3339 time. A '+' of an
 * offset that the query decoded as a blank is read as '+'. */
static int parse_since(const char *s, double now_s, double *out)
{
    size_t digits = strspn(s, "0123456789");
    if (digits > 0 && s[digits] == '\0' && digits <= 12) {
        *out = strtod(s, NULL);
        return 0;
    }
    double back_s;
    if (s[digits] != '-' && sl_parse_duration(s, &back_s) == SL_OK) {
        *out = now_s - back_s;
        return 0;
    }
    char fixed[72];
    snprintf(fixed, sizeof(fixed), "%s", s);
    char *blank = strchr(fixed, ' ');
    if (blank) *blank = '+';
    return sl_parse_rfc3339(fixed, out) == SL_OK ? 0 : -1;
}

/* ---- GET /v1/usage ------------------------------------------------------------------------- */

typedef enum { BY_TEAM, BY_AGENT, BY_MODEL } by_t;
static const char *const by_names[] = {"team", "agent", "model"};

typedef struct sum_ctx {
    by_t by;
    sl_namemap_t rows; /* name -> sl_usage_counts_t */
    sl_usage_counts_t total;
    bool oom;
} sum_ctx_t;

static void sum_key(const char *key, void *val, void *ud)
{
    sum_ctx_t *s = ud;
    const char *team = strchr(key, '\x1f');
    const char *model = team ? strchr(team + 1, '\x1f') : NULL;
    if (!model) return;
    char name[130];
    if (s->by == BY_AGENT)
        snprintf(name, sizeof(name), "%.*s", (int)(team - key), key);
    else if (s->by == BY_TEAM)
        snprintf(name, sizeof(name), "%.*s", (int)(model - team - 1), team + 1);
    else
        snprintf(name, sizeof(name), "%s", model + 1);
    const char *stored;
    sl_usage_counts_t *t = sl__namemap_obtain(&s->rows, name, sizeof(*t), SIZE_MAX, &stored);
    if (!t) {
        s->oom = true;
        return;
    }
    sl__usage_counts_add(t, val);
    sl__usage_counts_add(&s->total, val);
}

static json_t *counts_json(const sl_usage_counts_t *c)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:f}", "calls", (json_int_t)c->calls, "input_tokens",
                     (json_int_t)c->input_tokens, "output_tokens", (json_int_t)c->output_tokens,
                     "cache_read_input_tokens", (json_int_t)c->cache_read_tokens,
                     "cache_creation_input_tokens", (json_int_t)c->cache_write_tokens,
                     "cost_usd", c->cost_usd);
}

static void row_json(const char *name, void *val, void *ud)
{
    json_t *rows = ud;
    char shown[130];
    snprintf(shown, sizeof(shown), "%s", name);
    sl__utf8_scrub(shown); /* names came from JSON or headers; a JSON string either way */
    json_t *r = counts_json(val);
    if (r && json_object_set_new(r, "name", json_string(shown)) == 0)
        json_array_append(rows, r);
    json_decref(r);
}

static int by_cost_desc(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    double cx = json_real_value(json_object_get(x, "cost_usd"));
    double cy = json_real_value(json_object_get(y, "cost_usd"));
    if (cx != cy) return cx > cy ? -1 : 1;
    return strcmp(json_string_value(json_object_get(x, "name")),
                  json_string_value(json_object_get(y, "name")));
}

/* The rows sorted by cost (then name), each named by `by` ("team": "red"). */
static json_t *sorted_rows(sum_ctx_t *s)
{
    json_t *tmp = json_array(), *rows = json_array();
    if (!tmp || !rows) goto fail;
    sl__namemap_foreach(&s->rows, row_json, tmp);
    size_t n = json_array_size(tmp);
    json_t **v = calloc(n ? n : 1, sizeof(*v));
    if (!v) goto fail;
    for (size_t i = 0; i < n; i++) v[i] = json_array_get(tmp, i);
    qsort(v, n, sizeof(*v), by_cost_desc);
    for (size_t i = 0; i < n; i++) {
        json_object_set(v[i], by_names[s->by], json_object_get(v[i], "name"));
        json_object_del(v[i], "name");
        json_array_append(rows, v[i]);
    }
    free(v);
    json_decref(tmp);
    return rows;
fail:
    json_decref(tmp);
    json_decref(rows);
    return NULL;
}

static const char since_forms[] =
    "an RFC 3339 time (2026-12-07T08:00:00Z), Unix seconds, or a duration back from now "
    "(90s, 30m, 24h)";

void sl__handle_usage(sl_call_t *call, const char *query)
{
    if (!call->admin) {
        sl__reply_error(call, 403, "forbidden", "usage: needs the admin token");
        return;
    }
    struct evkeyvalq q = {0};
    if (query && *query && evhttp_parse_query_str(query, &q) < 0) {
        sl__reply_error(call, 400, "invalid_request", "query: '%.64s' cannot be parsed", query);
        return;
    }
    char msg[400] = "";
    by_t by = BY_TEAM;
    double now = sl__usage_now_s();
    double kept_from = floor(now / 3600) * 3600 - (SL_USAGE_HOURS - 1) * 3600.0;
    double since = kept_from; /* everything kept */
    struct evkeyval *kv;
    for (kv = q.tqh_first; kv; kv = kv->next.tqe_next)
    {
        char shown[72];
        snprintf(shown, sizeof(shown), "%.64s", kv->value);
        sl__utf8_scrub(shown);
        if (!strcmp(kv->key, "by")) {
            size_t i = 0;
            while (i < 3 && strcmp(by_names[i], kv->value) != 0)
                i++;
            if (i == 3)
                snprintf(msg, sizeof(msg), "by: '%s' must be team, agent or model", shown);
            else
                by = (by_t)i;
        } else if (!strcmp(kv->key, "since")) {
            if (parse_since(kv->value, now, &since) < 0)
                snprintf(msg, sizeof(msg), "since: '%s' must be %s", shown, since_forms);
            else if (since > now)
                snprintf(msg, sizeof(msg), "since: '%s' is in the future", shown);
            else if (since < kept_from)
                snprintf(msg, sizeof(msg),
                         "since: '%s' is %.0f s ago; this server keeps the last %d h (from "
                         "%.0f, per minute for the last hour and per hour before)",
                         shown, now - since, SL_USAGE_HOURS, kept_from);
        } else {
            char key[72];
            snprintf(key, sizeof(key), "%.64s", kv->key);
            sl__utf8_scrub(key);
            snprintf(msg, sizeof(msg), "query: unknown parameter '%s' (known: by, since)", key);
        }
        if (msg[0]) break;
    }
    evhttp_clear_headers(&q); /* its strings live in the request, which a reply frees */
    if (msg[0]) {
        sl__reply_error(call, 400, "invalid_request", "%s", msg);
        return;
    }
    bool by_minute = since >= now - SL_USAGE_MINUTES * 60.0;
    double width = by_minute ? 60 : 3600, from = floor(since / width) * width;
    sum_ctx_t s = {.by = by};
    const sl_usage_state_t *u = call->srv->usage;
    size_t n = by_minute ? SL_USAGE_MINUTES : SL_USAGE_HOURS;
    for (size_t i = 0; u && i < n; i++) {
        const sl_usage_bucket_t *b = by_minute ? &u->minutes[i] : &u->hours[i];
        if (b->start_s >= from && b->start_s > now - (double)n * width)
            sl__namemap_foreach(&b->keys, sum_key, &s);
    }
    json_t *rows = s.oom ? NULL : sorted_rows(&s);
    json_t *total = counts_json(&s.total);
    sl__namemap_free_all(&s.rows);
    if (!rows || !total) {
        json_decref(rows);
        json_decref(total);
        sl__reply_error(call, 503, "out_of_memory", "usage: out of memory");
        return;
    }
    double counting_since = u && u->started_s > 0 ? u->started_s : now;
    sl__reply_json(call, 200,
                   json_pack("{s:s,s:f,s:f,s:f,s:i,s:f,s:f,s:o,s:o}", "by", by_names[by], "since",
                             since, "from", from, "to", now, "resolution_s", (int)width,
                             "kept_from", kept_from, "counting_since", counting_since, "rows",
                             rows, "total", total));
}
