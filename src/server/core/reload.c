/* reload.c - rereading the configuration file in a running sluiced (SIGHUP, POST /v1/admin/reload).
 *
 * A refused reload changes nothing: the new file is loaded and checked, and the backend
 * takes its settings, before the running configuration is replaced. The listener and the
 * backend stay what they were at start (a change there is logged as needing a restart).
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A memory backend answers configure before it returns; a networked one may answer
 * after sl__server_reload() returned, so a late refusal is logged instead. */
typedef struct reload_wait {
    bool called;   /* the callback ran */
    bool returned; /* sl__server_reload() is past waiting: the callback frees this */
    int rc;
} reload_wait_t;

static void on_configured(int rc, double value, const char *errmsg, void *ud)
{
    reload_wait_t *w = ud;
    (void)value;
    if (!w->returned) {
        w->called = true;
        w->rc = rc;
        return;
    }
    if (rc != SL_OK)
        sl__log(SL_LOG_WARN, "reload: the backend refused the new settings: %s",
                errmsg ? errmsg : sl_strerror(rc));
    free(w);
}

int sl__server_reload(sl_server_t *srv, char *err, size_t errlen)
{
    sl_config_t next;
    if (!srv->config_path) {
        snprintf(err, errlen, "no --config file to reload");
        return -1;
    }
    if (sl_config_defaults(&next) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (sl_config_load(srv->config_path, &next, err, errlen) < 0) return -1;
    /* Checked first: a refused reload changes nothing, the backend's settings included. */
    if (!sl_config_auth_enabled(&next) && !sl_httpd_is_loopback(srv->http)) {
        snprintf(err, errlen,
                 "%s: auth: the new configuration has no tokens, but sluiced listens on %s:%d, "
                 "which is not a loopback address; a reload never switches auth off there "
                 "(restart to change the listener)",
                 srv->config_path, srv->config.listen_host, sl_httpd_port(srv->http));
        sl_config_clear(&next);
        return -1;
    }
    /* Reopened even when unchanged (log rotation); before anything else changes, so a
     * file that cannot be opened refuses the whole reload. */
    if (sl__access_log_open(srv, next.access_log, err, errlen) < 0) {
        sl_config_clear(&next);
        return -1;
    }
    if (sl__tokens_reload_check(srv, &next, err, errlen) < 0 ||
        sl__proxy_estimator_ready(srv, &next, err, errlen) < 0) {
        sl_config_clear(&next);
        return -1;
    }
    if (strcmp(next.backend, srv->config.backend) != 0 ||
        next.redis_opt.fail != srv->config.redis_opt.fail)
        sl__log(SL_LOG_WARN, "reload: `backend` changes need a restart; keeping %s",
                srv->config.backend);
    free(next.backend);
    next.backend = strdup(srv->config.backend);
    if (!next.backend) {
        snprintf(err, errlen, "out of memory");
        sl_config_clear(&next);
        return -1;
    }
    next.redis = srv->config.redis;
    next.redis_opt = srv->config.redis_opt;
    reload_wait_t *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(err, errlen, "out of memory");
        sl_config_clear(&next);
        return -1;
    }
    sl__pacing_prepare(srv, &next); /* published limits and ramps stay in force */
    if (sl__tokens_configure(srv, &next, srv->minted, on_configured, w) < 0) {
        snprintf(err, errlen, "out of memory");
        sl_config_clear(&next);
        free(w);
        return -1;
    }
    if (!w->called) {
        w->returned = true; /* answered later, on the loop */
    } else {
        int rc = w->rc;
        free(w);
        if (rc != SL_OK) {
            snprintf(err, errlen, "%s: the backend refused the new settings", srv->config_path);
            sl_config_clear(&next);
            return -1;
        }
    }
    /* The listener and backend stay; limits, roles, tokens, body limit and log are new. */
    if (!srv->listen_from_flag && (strcmp(next.listen_host, srv->config.listen_host) != 0 ||
                                   next.listen_port != srv->config.listen_port))
        sl__log(SL_LOG_WARN, "reload: `listen` changes need a restart; keeping %s:%d",
                srv->config.listen_host, srv->config.listen_port);
    /* The windows' slots are cut to their length: a new length waits for a restart. */
    if (next.fleet.window_s != srv->config.fleet.window_s ||
        next.fleet.anomaly_window_s != srv->config.fleet.anomaly_window_s)
        sl__log(SL_LOG_WARN, "reload: fleet.window_s and fleet.anomaly_window_s changes need "
                        "a restart; keeping %g s and %g s",
                srv->config.fleet.window_s, srv->config.fleet.anomaly_window_s);
    next.fleet.window_s = srv->config.fleet.window_s;
    next.fleet.anomaly_window_s = srv->config.fleet.anomaly_window_s;
    free(next.listen_host);
    next.listen_host = srv->config.listen_host;
    next.listen_port = srv->config.listen_port;
    srv->config.listen_host = NULL;
    sl__tokens_retire(srv);
    sl_config_clear(&srv->config);
    srv->config = next;
    sl__pacing_reloaded(srv);
    sl__tokens_reloaded(srv);
    if (sl__limits_apply(srv, err, errlen) < 0) /* memory only: the running limits stay */
        sl__log(SL_LOG_WARN, "reload: keeping the running limits: %s", err);
    sl_httpd_set_max_body(srv->http, sl__outer_body_limit(&srv->config));
    sl_httpd_limits_t limits = sl__listener_limits(&srv->config);
    sl_httpd_set_limits(srv->http, &limits);
    /* Reopened even when unchanged, so a rotated file is picked up. */
    if (sl__events_open_log(srv, err, errlen) < 0) return -1;
    sl__log_set_format((sl_log_format_t)srv->config.log_format);
    return 0;
}

void sl__handle_reload(sl_call_t *call)
{
    char err[512];
    if (!call->admin) {
        sl__reply_error(call, 403, "forbidden", "reload: needs the admin token");
        return;
    }
    if (sl__server_reload(call->srv, err, sizeof(err)) < 0) {
        sl__log(SL_LOG_WARN, "reload refused, keeping the running configuration: %s", err);
        sl__reply_error(call, 400, "invalid_request", "config: %s", err);
        return;
    }
    sl__reply_json(call, 200, json_pack("{s:s}", "status", "reloaded"));
}
