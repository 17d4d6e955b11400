/* state.c - read-only views (pools, agents, tasks, health, metrics) and task writes. */
#include "server.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#define MSG_LEN 320

/* ---- pools ------------------------------------------------------------------------ */

static json_t *pool_config_json(const sl_pool_config_t *c)
{
    json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:b,s:I,s:f,"
                     "s:f,s:i,s:f,s:f,s:f,s:f}",
                     "input_tpm", (json_int_t)c->input_tpm, "output_tpm", (json_int_t)c->output_tpm,
                     "rpm", (json_int_t)c->rpm, "tokens_tpm", (json_int_t)c->tokens_tpm,
                     "concurrency", (json_int_t)c->concurrency, "margin_start", c->margin_start,
                     "margin_floor", c->margin_floor, "margin_step_down", c->margin_step_down,
                     "margin_step_up", c->margin_step_up, "recover_every_s", c->recover_every_s,
                     "margin_floor_alert_s", c->margin_floor_alert_s, "lease_ttl_s", c->lease_ttl_s,
                     "max_lease_ttl_s", c->max_lease_ttl_s, "max_queue_wait_s", c->max_queue_wait_s,
                     "cache_ttl_s", c->cache_ttl_s, "cache_reads_count", c->cache_reads_count,
                     "cache_bump_min_tokens", (json_int_t)c->cache_bump_min_tokens, "cache_bump",
                     c->cache_bump, "estimate_error_alert", c->estimate_error_alert,
                     "estimate_error_window", c->estimate_error_window, "claim_timeout_s",
                     c->claim_timeout_s, "ticket_idle_s", c->ticket_idle_s,
                     "price_input_per_mtok", c->price_input_per_mtok, "price_output_per_mtok",
                     c->price_output_per_mtok);
    if (j) {
        json_object_set_new(j, "spend_cap_reset_s", json_real(c->spend_cap_reset_s));
        json_object_set_new(j, "lease_duration_prior_s", json_real(c->lease_duration_prior_s));
        json_object_set_new(j, "margin_max", json_real(c->margin_max));
        json_object_set_new(j, "send_window_s", json_real(c->send_window_s));
        json_object_set_new(j, "output_reserve",
                            json_string(c->output_reserve_learned ? "learned" : "max_tokens"));
        json_object_set_new(j, "backfill", json_boolean(c->backfill));
        json_object_set_new(j, "working_set", json_boolean(c->working_set));
    }
    return j;
}

json_t *sl__pool_json(sl_backend_t *backend, const sl_pool_info_t *p)
{
    json_t *buckets = json_object();
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (p->limit[b] == 0) continue;
        json_object_set_new(buckets, sl_bucket_name((sl_bucket_t)b),
                            json_pack("{s:f,s:f,s:f,s:I}", "level", p->level[b], "capacity",
                                      p->capacity[b], "refill_per_s", p->refill_per_s[b], "limit",
                                      (json_int_t)p->limit[b]));
    }
    json_t *alerts = json_array();
    if (p->alert_margin_at_floor) json_array_append_new(alerts, json_string("margin_at_floor"));
    if (p->alert_spend_cap) json_array_append_new(alerts, json_string("spend_cap"));
    if (sl_backend_redis_state_lost(backend, p->name))
        json_array_append_new(alerts, json_string("backend_state_lost"));
    json_t *calibration = json_array();
    for (int i = 0; i < p->n_calibration; i++)
        json_array_append_new(calibration,
                              json_pack("{s:s,s:f,s:I}", "model", p->calibration[i].model,
                                        "ratio", p->calibration[i].ratio, "samples",
                                        (json_int_t)p->calibration[i].samples));
    const sl_pool_config_t *c = &p->config;
    json_t *out = json_pack(
        "{s:s,s:{s:I,s:I,s:I,s:I,s:I},s:f,s:o,s:{s:I,s:o},s:I,s:o,s:o,s:{s:I,s:I,s:I,s:I},s:o}",
        "name", p->name, "limits", "input_tpm", (json_int_t)c->input_tpm, "output_tpm",
        (json_int_t)c->output_tpm, "rpm", (json_int_t)c->rpm, "tokens_tpm",
        (json_int_t)c->tokens_tpm, "concurrency", (json_int_t)c->concurrency, "margin", p->margin,
        "buckets", buckets, "queue", "depth", (json_int_t)p->queue_depth, "eta",
        p->head_eta_s >= 0 ? json_real(p->head_eta_s) : json_null(), "leases_in_flight",
        (json_int_t)p->leases_in_flight, "alerts", alerts, "blocked_until",
        p->blocked_until > 0 ? json_real(p->blocked_until) : json_null(), "totals", "granted",
        (json_int_t)p->granted_total, "queued", (json_int_t)p->queued_total, "rejected",
        (json_int_t)p->rejected_total, "upstream_429", (json_int_t)p->upstream_429_total, "config",
        pool_config_json(c));
    if (out) json_object_set_new(out, "calibration", calibration);
    else json_decref(calibration);
    return out;
}

json_t *sl__agent_json(sl_server_t *srv, const sl_agent_info_t *a)
{
    json_t *j = json_pack("{s:s,s:s,s:f,s:I,s:f,s:b,s:I,s:I,s:I,s:I,s:I,s:s}", "name", a->name,
                          "role", a->role ? a->role : "", "weight", a->weight, "repeats",
                          (json_int_t)a->repeats, "estimate_error", a->estimate_error,
                          "estimate_error_alert", a->alert_estimate_error, "leases",
                          (json_int_t)a->leases, "queued", (json_int_t)a->queued, "tokens_in",
                          (json_int_t)a->tokens_in, "tokens_out", (json_int_t)a->tokens_out,
                          "got_429", (json_int_t)a->got_429, "state", a->state ? a->state : "");
    if (!j) return NULL;
    if (a->team) json_object_set_new(j, "team", json_string(a->team));
    sl__features_annotate_agent(srv, a->name, j);
    return j;
}

static void on_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    if (rc != SL_OK) {
        sl__reply_engine_error(call, rc, errmsg);
        return;
    }
    const sl_config_t *c = &call->srv->config;
    if (call->pool[0] && sl__is_key_group(c, call->pool)) { /* a pool of several keys */
        sl__reply_json(call, 200, sl__keys_pool_json(call->srv, call->pool, pools, n));
        return;
    }
    if (call->pool[0]) {
        sl__reply_json(call, 200,
                       sl__keys_describe(c, sl__pool_json(call->srv->backend, &pools[0])));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr,
                              sl__keys_describe(c, sl__pool_json(call->srv->backend, &pools[i])));
    sl__reply_json(call, 200, json_pack("{s:o}", "pools", arr));
}

void sl__handle_pools(sl_call_t *call, const char *pool)
{
    if (pool) {
        if (strlen(pool) == 0 || strlen(pool) > 128) {
            sl__reply_error(call, 404, "not_found", "pool: '%.64s' is not a pool", pool);
            return;
        }
        snprintf(call->pool, sizeof(call->pool), "%s", pool);
        if (sl__is_key_group(&call->srv->config, pool)) pool = NULL; /* read every key's */
    }
    sl_backend_pools(call->srv->backend, pool, on_pools, call);
}

/* ---- tasks ------------------------------------------------------------------------ */

static json_t *task_json(const sl_task_info_t *t)
{
    json_t *deps = json_array();
    for (size_t i = 0; i < t->n_depends; i++)
        json_array_append_new(deps, json_string(t->depends_on[i]));
    return json_pack("{s:s,s:s,s:s,s:o,s:I}", "id", t->id, "role", t->role ? t->role : "worker",
                     "state", sl_task_state_name(t->state), "depends_on", deps, "unblocks",
                     (json_int_t)t->unblocks);
}

static void on_tasks(int rc, const sl_task_info_t *t, size_t n, void *ud)
{
    sl_call_t *call = ud;
    if (rc != SL_OK) {
        sl__reply_engine_error(call, rc, "tasks: out of memory");
        return;
    }
    const char *only = call->pool[0] ? call->pool : NULL; /* GET /v1/tasks/{task} */
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (only && strcmp(t[i].id, only) != 0) continue;
        if (only) {
            json_decref(arr);
            sl__reply_json(call, 200, task_json(&t[i]));
            return;
        }
        json_array_append_new(arr, task_json(&t[i]));
    }
    if (only) {
        json_decref(arr);
        sl__reply_error(call, 404, "not_found", "task: '%s' is not in the task graph", only);
        return;
    }
    sl__reply_json(call, 200, json_pack("{s:o}", "tasks", arr));
}

/* Publishes a task write the backend took on the bus (the body was checked by task_put). */
static void publish_task_write(sl_call_t *call)
{
    const char *deps[256];
    size_t n = 0;
    sl_task_state_t state = SL_TASK_WAITING;
    const char *s = json_string_value(json_object_get(call->body, "state"));
    if (s && !strcmp(s, "running")) state = SL_TASK_RUNNING;
    if (s && !strcmp(s, "done")) state = SL_TASK_DONE;
    json_t *d = json_object_get(call->body, "depends_on");
    for (size_t i = 0; json_is_array(d) && i < json_array_size(d) && n < 256; i++)
        deps[n++] = json_string_value(json_array_get(d, i));
    sl_bus_event_t ev = {
        .kind = SL_BUS_TASK_WRITE,
        .task_write = {.id = call->pool,
                       .put = call->method == SL_HTTP_PUT,
                       .state = state,
                       .deps = deps,
                       .n_deps = n},
    };
    sl__bus_publish(call->srv, &ev);
}

static void on_task_written(int rc, double value, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    (void)value;
    if (rc != SL_OK) {
        sl__reply_engine_error(call, rc, errmsg);
        return;
    }
    publish_task_write(call);
    if (call->method == SL_HTTP_DELETE) {
        sl__reply_json(call, 200, json_pack("{s:s,s:s}", "status", "deleted", "task", call->pool));
        return;
    }
    /* Answer with the task as stored. */
    sl_backend_tasks(call->srv->backend, on_tasks, call);
}

static void task_put(sl_call_t *call, const char *id)
{
    static const char *const fields[] = {"role", "depends_on", "state", NULL};
    char msg[MSG_LEN];
    const json_t *b = call->body;
    const char *role = NULL, *state_s = NULL;
    const char *deps[256];
    size_t n_deps = 0;
    sl_task_state_t state = SL_TASK_WAITING;
    if (sl__json_check_fields(b, fields, msg, sizeof(msg)) < 0 ||
        sl__json_get_string(b, "role", false, 64, false, &role, msg, sizeof(msg)) < 0 ||
        sl__json_get_string(b, "state", false, 16, false, &state_s, msg, sizeof(msg)) < 0)
        goto invalid;
    if (state_s) {
        if (!strcmp(state_s, "waiting"))
            state = SL_TASK_WAITING;
        else if (!strcmp(state_s, "running"))
            state = SL_TASK_RUNNING;
        else if (!strcmp(state_s, "done"))
            state = SL_TASK_DONE;
        else {
            snprintf(msg, sizeof(msg), "state must be waiting, running or done, not '%s'", state_s);
            goto invalid;
        }
    }
    json_t *d = json_object_get(b, "depends_on");
    if (d && !json_is_null(d)) {
        size_t i;
        json_t *v;
        if (!json_is_array(d) || json_array_size(d) > 256) {
            snprintf(msg, sizeof(msg), "depends_on must be a list of at most 256 task ids");
            goto invalid;
        }
        json_array_foreach(d, i, v)
        {
            if (!json_is_string(v) || !sl__name_ok(json_string_value(v), 128)) {
                snprintf(msg, sizeof(msg),
                         "depends_on[%zu] must be a task id (1-128 of A-Z a-z 0-9 . _ : -)", i);
                goto invalid;
            }
            deps[n_deps++] = json_string_value(v);
        }
    }
    sl_backend_task_put(call->srv->backend, id, role, deps, n_deps, state, on_task_written, call);
    return;
invalid:
    sl__reply_error(call, 400, "invalid_request", "%s", msg);
}

void sl__handle_tasks(sl_call_t *call, const char *task, int method)
{
    if (task) {
        if (!sl__name_ok(task, 128)) {
            sl__reply_error(call, method == SL_HTTP_PUT ? 400 : 404,
                            method == SL_HTTP_PUT ? "invalid_request" : "not_found",
                            "task: '%.64s' is not a task id (1-128 of A-Z a-z 0-9 . _ : -)", task);
            return;
        }
        snprintf(call->pool, sizeof(call->pool), "%s", task);
    }
    if (method != SL_HTTP_GET && !call->admin) {
        sl__reply_error(call, 403, "forbidden",
                        "task: writing the task graph needs the admin token");
        return;
    }
    if (method == SL_HTTP_PUT)
        task_put(call, task);
    else if (method == SL_HTTP_DELETE)
        sl_backend_task_delete(call->srv->backend, task, on_task_written, call);
    else
        sl_backend_tasks(call->srv->backend, on_tasks, call);
}

/* ---- health and metrics ----------------------------------------------------------- */

/* Readiness. A redis backend that is down fails closed: 503, every decision would be
 * refused. Failing open it is 200 "degraded": the replica still grants on its local
 * share, and taking every replica out of rotation when Redis goes would turn fail-open
 * into an outage. */
static void on_ping(int rc, double value, const char *errmsg, void *ud)
{
    sl_call_t *call = ud;
    const sl_config_t *cfg = &call->srv->config;
    (void)value;
    if (rc == SL_EUNAVAILABLE && cfg->redis && cfg->redis_opt.fail == SL_REDIS_FAIL_OPEN &&
        !call->srv->shutting_down) {
        sl__reply_json(call, 200,
                       json_pack("{s:s,s:s,s:b,s:s,s:s}", "status", "degraded", "backend",
                                 "redis", "backend_available", 0, "fail", "open", "alert",
                                 "backend_unavailable"));
        return;
    }
    if (rc != SL_OK || call->srv->shutting_down) {
        sl__reply_error(call, 503, "backend_unavailable", "backend: %s",
                        errmsg ? errmsg : "not ready");
        return;
    }
    json_t *body =
        json_pack("{s:s,s:s}", "status", "ready", "backend", call->srv->backend->ops->name);
    if (body && cfg->redis)
        json_object_set_new(body, "backend_available", json_true());
    sl__reply_json(call, 200, body);
}

void sl__handle_readyz(sl_call_t *call)
{
    sl_backend_ping(call->srv->backend, on_ping, call);
}

static void on_metrics_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg,
                             void *ud)
{
    sl_call_t *call = ud;
    if (rc != SL_OK && rc != SL_EUNAVAILABLE) {
        sl__reply_engine_error(call, rc, errmsg);
        return;
    }
    if (rc != SL_OK) { /* backend down, fail closed: the alert still shows, pools do not */
        pools = NULL;
        n = 0;
    }
    struct evbuffer *out = evbuffer_new();
    if (!out) {
        sl__reply_error(call, 503, "out_of_memory", "metrics: out of memory");
        return;
    }
    sl__metrics_render(call->srv->metrics, pools, n, out);
    sl__keys_metrics_render(call->srv, out);
    sl__events_metrics_render(call->srv, out);
    sl__access_metrics_render(call->srv, out);
    sl__features_metrics(call, pools, n, out);
    if (call->req)
        sl_hreq_reply(call->req, 200, "text/plain; version=0.0.4; charset=utf-8",
                      evbuffer_pullup(out, -1), evbuffer_get_length(out));
    call->req = NULL;
    evbuffer_free(out);
    sl__call_free(call);
}

void sl__handle_metrics(sl_call_t *call)
{
    sl_backend_pools(call->srv->backend, NULL, on_metrics_pools, call);
}
