/* main.c - sluiced: flags, configuration, signals and the one event loop. */
#include "netaddr.h"
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#define EXIT_USAGE 2
/* SIGTERM: answers already queued get this long to reach their clients ... */
#define SHUTDOWN_FLUSH_S 0.3
/* ... and proxied calls the provider is answering this long to finish (the issue's
 * bound on the whole exit is 5 s); those still running then end with an error event. */
#define SHUTDOWN_DRAIN_S 4.0
#define SHUTDOWN_CHECK_S 0.1
#define FD_LIMIT_WARN    4096 /* fewer descriptors than this gets a line on stderr */

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sluiced [--config FILE] [--listen HOST:PORT] [--check-config] [--help]\n"
               "\n"
               "  --config FILE     YAML configuration (see examples/sluice.yaml)\n"
               "  --listen H:P      listen address, overriding the file (default 127.0.0.1:8750;\n"
               "                    port 0 picks a free port)\n"
               "  --check-config    validate the configuration and exit (0 = valid)\n"
               "  --help            this text\n"
               "\n"
               "Signals: SIGHUP reloads limits, roles and tokens; SIGTERM drains and exits.\n");
}

static void on_housekeeping(evutil_socket_t fd, short what, void *ud)
{
    static unsigned ticks;
    sl_server_t *srv = ud;
    (void)fd;
    (void)what;
    ticks++;
    sl__events_flush(srv);
    sl__suspend_sync(srv); /* 0.25 s: what other replicas suspended and released */
    if (ticks % 4 == 0) { /* 1 s */
        sl__agents_sweep(srv);
        sl__anomaly_tick(srv);
        sl__watch_tick(srv);
        sl__history_tick(srv);
    }
    if (ticks % 40 == 4) /* 1 s after the start, then every 10 s */
        sl__fleet_sync(srv);
    if (ticks % 40 == 0) { /* 10 s */
        sl__owners_forget_old(srv);
        sl__limits_sweep(srv);
    }
    if (ticks % 8 == 0) /* 2 s */
        sl__tokens_watch(srv);
    if (ticks % 60 == 0) /* 15 s */
        sl__events_ping_streams(srv);
}

static void on_exit_timer(evutil_socket_t fd, short what, void *ud)
{
    sl_server_t *srv = ud;
    (void)fd;
    (void)what;
    double waited_s = monotonic_s() - srv->shutdown_started_s;
    if ((waited_s >= SHUTDOWN_FLUSH_S && sl__proxy_in_flight(srv) == 0) ||
        waited_s >= SHUTDOWN_DRAIN_S) {
        event_base_loopbreak(srv->base);
        return;
    }
    struct timeval tv = {0, (suseconds_t)(SHUTDOWN_CHECK_S * 1e6)};
    evtimer_add(srv->exit_timer, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *ud)
{
    sl_server_t *srv = ud;
    (void)what;
    if (sig == SIGHUP) {
        char err[512];
        if (sl__server_reload(srv, err, sizeof(err)) < 0)
            sl__log(SL_LOG_WARN, "reload refused, keeping the running configuration: %s",
                    err);
        else
            sl__log(SL_LOG_INFO, "configuration reloaded from %s", srv->config_path);
        return;
    }
    if (srv->shutting_down) return;
    sl__log(SL_LOG_INFO, "%s: draining and exiting", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    srv->shutdown_started_s = monotonic_s();
    sl__server_shutdown(srv);
    struct timeval tv = {0, (suseconds_t)(SHUTDOWN_CHECK_S * 1e6)};
    evtimer_add(srv->exit_timer, &tv);
}

static void on_configured(int rc, double value, const char *errmsg, void *ud)
{
    char *err = ud;
    (void)value;
    if (rc != SL_OK)
        snprintf(err, 512, "%s", errmsg ? errmsg : "backend refused the configuration");
}

/* Every agent holds a connection (a long-poll, a proxied stream, its upstream call), so a
 * fleet of thousands needs more descriptors than the usual soft limit of 1024: raise it
 * to the hard limit, as servers commonly do, and say so when even that is small. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < FD_LIMIT_WARN)
        sl__log(SL_LOG_WARN,
                "only %llu file descriptors (ulimit -n): about that many agents can "
                "wait or stream at once",
                (unsigned long long)rl.rlim_cur);
}

static int run(sl_server_t *srv)
{
    char err[512] = "";
    int rc = 1;
    raise_fd_limit();
    /* The changelist folds interest flips made within one loop turn (a write backlog
     * armed and drained at once) into at most one epoll_ctl (no dup()ed fds here). */
    struct event_config *ecfg = event_config_new();
    if (ecfg) event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    srv->base = ecfg ? event_base_new_with_config(ecfg) : NULL;
    if (ecfg) event_config_free(ecfg);
    if (!srv->base) srv->base = event_base_new();
    srv->metrics = sl__metrics_new();
    if (!srv->base || !srv->metrics) {
        sl__log(SL_LOG_ERROR, "out of memory");
        goto done;
    }
    if (srv->config.redis) {
        srv->backend =
            sl_backend_redis_new(srv->base, &srv->config.redis_opt, &srv->config.engine, err,
                                 sizeof(err));
        if (!srv->backend) {
            sl__log(SL_LOG_ERROR, "backend: %s", err[0] ? err : "out of memory");
            goto done;
        }
        err[0] = '\0';
    } else {
        sl_memory_options_t mopt;
        sl_memory_options_init(&mopt);
        mopt.state_file = srv->config.state_file;
        mopt.fsync_interval_s = srv->config.state_fsync_interval_s;
        mopt.cold_start = srv->config.cold_start;
        srv->backend =
            sl_backend_memory_open(srv->base, &srv->config.engine, &mopt, err, sizeof(err));
        if (!srv->backend) {
            sl__log(SL_LOG_ERROR, "backend: %s", err);
            goto done;
        }
        err[0] = '\0';
    }
    sl_backend_set_event_cb(srv->backend, sl__events_on_backend_event, srv);
    if (sl__tokens_start(srv, err, sizeof(err)) < 0) {
        sl__log(SL_LOG_ERROR, "auth.minted_file: %s", err);
        goto done;
    }
    if (sl__pacing_start(srv, err, sizeof(err)) < 0) {
        fprintf(stderr, "sluiced: %s\n", err);
        goto done;
    }
    if (sl__tokens_configure(srv, &srv->config, srv->minted, on_configured, err) < 0)
        snprintf(err, sizeof err, "out of memory");
    if (err[0]) {
        sl__log(SL_LOG_ERROR, "%s", err);
        goto done;
    }
    sl__suspend_sync(srv); /* the memory backend answers at once: refused from the start */
    if (sl__events_open_log(srv, err, sizeof(err)) < 0 ||
        sl__access_log_open(srv, srv->config.access_log, err, sizeof(err)) < 0 ||
        sl__server_start(srv, err, sizeof(err)) < 0) {
        sl__log(SL_LOG_ERROR, "%s", err);
        goto done;
    }
    if (!sl_config_auth_enabled(&srv->config) && !sl_httpd_is_loopback(srv->http)) {
        sl__log(SL_LOG_ERROR, "listen: %s was bound to an address that is not loopback and "
                        "no auth tokens are configured; refusing to start",
                srv->config.listen_host);
        goto done;
    }
    srv->housekeeping = event_new(srv->base, -1, EV_PERSIST, on_housekeeping, srv);
    srv->exit_timer = evtimer_new(srv->base, on_exit_timer, srv);
    srv->sig_hup = evsignal_new(srv->base, SIGHUP, on_signal, srv);
    srv->sig_term = evsignal_new(srv->base, SIGTERM, on_signal, srv);
    srv->sig_int = evsignal_new(srv->base, SIGINT, on_signal, srv);
    struct timeval quarter = {0, 250000};
    if (!srv->housekeeping || !srv->exit_timer || !srv->sig_hup || !srv->sig_term ||
        !srv->sig_int || event_add(srv->housekeeping, &quarter) < 0 ||
        event_add(srv->sig_hup, NULL) < 0 || event_add(srv->sig_term, NULL) < 0 ||
        event_add(srv->sig_int, NULL) < 0) {
        sl__log(SL_LOG_ERROR, "cannot set up timers and signals");
        goto done;
    }
    int port = sl_httpd_port(srv->http);
    const char *host = srv->config.listen_host;
    bool v6 = strchr(host, ':') != NULL;
    char backend[320];
    if (srv->config.redis)
        snprintf(backend, sizeof(backend), "redis %s:%d/%d, fail %s",
                 srv->config.redis_opt.host, srv->config.redis_opt.port,
                 srv->config.redis_opt.db,
                 srv->config.redis_opt.fail == SL_REDIS_FAIL_OPEN ? "open" : "closed");
    else
        snprintf(backend, sizeof(backend), "%s", srv->backend->ops->name);
    sl__log_stdout(SL_LOG_INFO, "listening on http://%s%s%s:%d (backend %s, %zu pool%s, auth %s)",
           v6 ? "[" : "", host, v6 ? "]" : "", port, backend,
           srv->config.settings.n_pools, srv->config.settings.n_pools == 1 ? "" : "s",
           sl_config_auth_enabled(&srv->config) ? "on" : "off");
    event_base_dispatch(srv->base);
    rc = 0;
done:
    sl__waiters_shutdown(srv);
    sl__events_close_streams(srv);
    sl__server_stop(srv);
    sl__dashboard_free(srv);
    sl__events_flush(srv);
    if (srv->event_log) fclose(srv->event_log);
    struct event *evs[] = {srv->housekeeping, srv->exit_timer, srv->sig_hup, srv->sig_term,
                           srv->sig_int};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i]) event_free(evs[i]);
    sl__server_free_state(srv);
    if (srv->base) event_base_free(srv->base);
    return rc;
}

int main(int argc, char **argv)
{
    const char *config_path = NULL, *listen = NULL;
    bool check_only = false;
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--check-config")) {
            check_only = true;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config_path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            config_path = argv[i] + 9;
        } else if (!strcmp(argv[i], "--listen") && i + 1 < argc) {
            listen = argv[++i];
        } else if (!strncmp(argv[i], "--listen=", 9)) {
            listen = argv[i] + 9;
        } else {
            sl__log(SL_LOG_ERROR, "unknown or incomplete argument '%s'", argv[i]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }

    static sl_server_t srv;
    if (sl_config_defaults(&srv.config) < 0) {
        sl__log(SL_LOG_ERROR, "out of memory");
        return 1;
    }
    if (config_path && sl_config_load(config_path, &srv.config, err, sizeof(err)) < 0) {
        sl__log(SL_LOG_ERROR, "%s", err);
        return 1;
    }
    sl__log_set_format((sl_log_format_t)srv.config.log_format);
    sl_backend_set_log(sl__log_backend);
    if (listen && sl_config_set_listen(&srv.config, listen, err, sizeof(err)) < 0) {
        sl__log(SL_LOG_ERROR, "--listen: %s", err);
        sl_config_clear(&srv.config);
        return EXIT_USAGE;
    }
    /* Decided from the resolved address; run() checks the address bound again. */
    bool loopback = false;
    char why[320] = "";
    if (!sl_config_auth_enabled(&srv.config) &&
        (sl_net_host_is_loopback(srv.config.listen_host, &loopback, why, sizeof(why)) < 0 ||
         !loopback)) {
        sl__log(SL_LOG_ERROR,
                "listen: %s is not a loopback address%s%s%s and no auth tokens are "
                "configured; refusing to start (add auth.tokens or listen on 127.0.0.1)",
                srv.config.listen_host, why[0] ? " (" : "", why, why[0] ? ")" : "");
        sl_config_clear(&srv.config);
        return 1;
    }
    if (check_only) {
        printf("%s: ok (%zu pool%s, %zu role%s, auth %s, %zu agent token%s, %zu tier%s)\n",
               config_path ? config_path : "(built-in defaults)", srv.config.settings.n_pools,
               srv.config.settings.n_pools == 1 ? "" : "s", srv.config.settings.n_roles,
               srv.config.settings.n_roles == 1 ? "" : "s",
               sl_config_auth_enabled(&srv.config) ? "on" : "off", srv.config.n_tokens,
               srv.config.n_tokens == 1 ? "" : "s", srv.config.token_cfg.n_tiers,
               srv.config.token_cfg.n_tiers == 1 ? "" : "s");
        sl_config_clear(&srv.config);
        return 0;
    }
    if (!config_path)
        sl__log(SL_LOG_INFO, "no --config: one pool \"default\" without limits");
    signal(SIGPIPE, SIG_IGN);
    srv.config_path = config_path;
    srv.listen_from_flag = listen != NULL;
    int rc = run(&srv);
    sl_config_clear(&srv.config);
    return rc;
}
