/* features.c - the feature table (features.def) and the core's walks over it: the event bus,
 * admission checks, metrics, ticks, start, reload, shutdown and teardown.
 *
 * The bus is synchronous: sl__bus_publish calls every feature's on_event in the table's
 * order before it returns, so a subscriber sees the state the publisher saw. Nothing
 * replaces anyone's subscription: the backend's one event callback is the core's
 * (events.c), which feeds its own subscribers (owners, metrics, the log and the streams)
 * and then the bus. */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SL_FEATURE(name, summary) extern const sl_feature_t sl_feature_##name;
#include "features.def"
#undef SL_FEATURE

const sl_feature_t *const sl__features[SL_FEATURE_COUNT] = {
#define SL_FEATURE(name, summary) &sl_feature_##name,
#include "features.def"
#undef SL_FEATURE
};

#define N SL_FEATURE_COUNT

void *sl__slot_make(sl_server_t *srv, sl_feature_id_t id, size_t size)
{
    if (!srv->slot[id]) srv->slot[id] = calloc(1, size);
    return srv->slot[id];
}

void sl__features_annotate_agent(sl_server_t *srv, const char *agent, json_t *obj)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->annotate_agent) sl__features[i]->annotate_agent(srv, agent, obj);
}

void sl__bus_publish(sl_server_t *srv, const sl_bus_event_t *ev)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->on_event) sl__features[i]->on_event(srv, ev);
}

int sl__admit_agent(sl_call_t *call, sl_admit_kind_t kind, const char *agent, const char *role,
                    sl_refusal_t *ref)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->admit_check &&
            sl__features[i]->admit_check(call, kind, agent, role, ref) < 0)
            return -1;
    return 0;
}

void sl__features_metrics(sl_call_t *call, const sl_pool_info_t *pools, size_t n_pools,
                          struct evbuffer *out)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->metrics) sl__features[i]->metrics(call, pools, n_pools, out);
}

void sl__features_tick(sl_server_t *srv, unsigned quarter)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->tick) sl__features[i]->tick(srv, quarter);
}

int sl__features_settings_start(sl_server_t *srv, char *err, size_t errlen)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->settings_start &&
            sl__features[i]->settings_start(srv, err, errlen) < 0)
            return -1;
    return 0;
}

void sl__features_settings_reload(sl_server_t *srv, sl_config_t *next)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->settings_reload) sl__features[i]->settings_reload(srv, next);
}

void sl__features_config_clear(sl_config_t *c)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->config && sl__features[i]->config->clear)
            sl__features[i]->config->clear(c);
}

int sl__features_early_start(sl_server_t *srv, char *err, size_t errlen)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->early_start && sl__features[i]->early_start(srv, err, errlen) < 0)
            return -1;
    return 0;
}

int sl__features_start(sl_server_t *srv, char *err, size_t errlen)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->start && sl__features[i]->start(srv, err, errlen) < 0) return -1;
    return 0;
}

int sl__features_reload_check(sl_server_t *srv, const sl_config_t *next, char *err, size_t errlen)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->reload_check &&
            sl__features[i]->reload_check(srv, next, err, errlen) < 0)
            return -1;
    return 0;
}

void sl__features_reload_prepare(const sl_config_t *running, sl_config_t *next)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->reload_prepare) sl__features[i]->reload_prepare(running, next);
}

void sl__features_reload(sl_server_t *srv)
{
    char err[512];
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->reload && sl__features[i]->reload(srv, err, sizeof(err)) < 0)
            sl__log(SL_LOG_WARN, "reload: %s", err);
}

void sl__features_shutdown(sl_server_t *srv, bool drain)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->shutdown) sl__features[i]->shutdown(srv, drain);
}

size_t sl__features_in_flight(const sl_server_t *srv)
{
    size_t n = 0;
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->in_flight) n += sl__features[i]->in_flight(srv);
    return n;
}

void sl__features_stop(sl_server_t *srv)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->stop) sl__features[i]->stop(srv);
}

void sl__features_free(sl_server_t *srv)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->free) sl__features[i]->free(srv);
}

size_t sl__features_max_body(const sl_config_t *c)
{
    size_t most = c->body_limit_bytes;
    for (size_t i = 0; i < N; i++) {
        size_t b = sl__features[i]->max_body ? sl__features[i]->max_body(c) : 0;
        if (b > most) most = b;
    }
    return most;
}

size_t sl__features_body_limit(const sl_config_t *c, const char *path, size_t len)
{
    for (size_t i = 0; i < N; i++) {
        size_t b = sl__features[i]->body_limit ? sl__features[i]->body_limit(c, path, len) : 0;
        if (b) return b;
    }
    return c->body_limit_bytes;
}

int sl__features_config_defaults(sl_config_t *c)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->config && sl__features[i]->config->defaults &&
            sl__features[i]->config->defaults(c) < 0)
            return -1;
    return 0;
}

int sl__features_config_parse(const char *key, struct yaml_document_s *doc,
                              struct yaml_node_s *section, const char *path, sl_config_t *c,
                              char *err, size_t errlen)
{
    for (size_t i = 0; i < N; i++) {
        const sl_config_section_t *f = sl__features[i]->config;
        if (f && f->key && f->parse && !strcmp(f->key, key))
            return f->parse(doc, section, path, c, err, errlen) < 0 ? -1 : 1;
    }
    return 0;
}

int sl__features_config_check(const sl_config_t *c, const char *path, char *err, size_t errlen)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->config && sl__features[i]->config->check &&
            sl__features[i]->config->check(c, path, err, errlen) < 0)
            return -1;
    return 0;
}

void sl__features_pool_defaults(sl_pool_bounds_t *b)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->config && sl__features[i]->config->pool_defaults)
            sl__features[i]->config->pool_defaults(b);
}

int sl__features_pool_key(const sl_config_ctx_t *x, const char *key, struct yaml_node_s *v,
                          sl_pool_bounds_t *b)
{
    for (size_t i = 0; i < N; i++) {
        const sl_config_table_t *t =
            sl__features[i]->config ? sl__features[i]->config->pool_table : NULL;
        int rc = t ? sl__config_read_row(x, t, key, v, b) : 0;
        if (rc != 0) return rc;
    }
    return 0;
}

bool sl__features_claim(sl_call_t *call, int n, char **seg, const char *query)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->claim && sl__features[i]->claim(call, n, seg, query)) return true;
    return false;
}

bool sl__features_authenticate(sl_call_t *call, int n, char **seg)
{
    for (size_t i = 0; i < N; i++)
        if (sl__features[i]->authenticate && sl__features[i]->authenticate(call, n, seg))
            return true;
    return false;
}
