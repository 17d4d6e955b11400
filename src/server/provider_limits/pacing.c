/* pacing.c - the limits in force: the least of the configured, published and ramp figures.
 *
 * State per pool lives here, by name, across reloads. Whenever a published figure or
 * the ramp's cap changes, the running configuration's pools are rewritten and handed to
 * the backend whole, as a reload does (the backend keeps every lease and ticket and
 * clamps levels to lower limits). The file's own figures are kept apart (`configured`),
 * so a lower figure found later can be lifted again. */
#include "pacing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "server.h"

/* The ramp's tick, in the core's quarter-second ticks (feature.h `tick`): every 0.5 s, how
 * late a pool going busy is seen at most. */
#define RAMP_EVERY_QUARTERS 2

struct sl_pacing {
    sl_pace_pool_t *pools;
    size_t n, cap;
    double next_refresh_s; /* the backend's clock: the next read of the published limits */
};

sl_pace_pool_t *sl__pace_pool(sl_pacing_t *pc, const char *name)
{
    for (size_t i = 0; pc && i < pc->n; i++)
        if (!strcmp(pc->pools[i].name, name)) return &pc->pools[i];
    return NULL;
}

static sl_pace_pool_t *pool_add(sl_pacing_t *pc, const char *name)
{
    sl_pace_pool_t *pp = sl__pace_pool(pc, name);
    if (pp) return pp;
    if (pc->n == pc->cap) {
        size_t cap = pc->cap ? pc->cap * 2 : 8;
        sl_pace_pool_t *grown = realloc(pc->pools, cap * sizeof(*grown));
        if (!grown) return NULL;
        pc->pools = grown;
        pc->cap = cap;
    }
    pp = &pc->pools[pc->n++];
    memset(pp, 0, sizeof(*pp));
    snprintf(pp->name, sizeof(pp->name), "%s", name);
    pp->idle_since_s = -1;
    return pp;
}

/* Records `c`'s pool figures as the configured ones. */
static void snapshot(sl_pacing_t *pc, const sl_config_t *c)
{
    for (size_t i = 0; i < c->settings.n_pools; i++) {
        const sl_named_pool_t *np = &c->settings.pools[i];
        sl_pace_pool_t *pp = pool_add(pc, np->name);
        if (!pp) continue; /* out of memory: the pool keeps its configured figures */
        pp->configured[0] = np->config.rpm;
        pp->configured[1] = np->config.input_tpm;
        pp->configured[2] = np->config.output_tpm;
        pp->configured[3] = np->config.tokens_tpm;
        double floor_tpm = (double)c->bounds[i].ramp.floor_tpm;
        if (!pp->learned || pp->floor_tpm <= 0 || floor_tpm < pp->floor_tpm)
            pp->floor_tpm = floor_tpm;
    }
}

/* The figures in force without the ramp: the configured one is a ceiling. */
static void without_ramp(const sl_pace_pool_t *pp, int64_t out[4])
{
    for (int b = 0; b < 4; b++) {
        int64_t v = pp->configured[b];
        int64_t p = pp->have_published ? pp->published[b] : 0;
        if (p > 0) v = v > 0 && v < p ? v : p;
        out[b] = v;
    }
}

static void in_force(const sl_pace_pool_t *pp, int64_t out[4])
{
    without_ramp(pp, out);
    int64_t cap = pp->cap_tpm;
    if (cap <= 0) return;
    if (out[1] == 0 || out[1] > cap) out[1] = cap;
    if (out[3] > cap) out[3] = cap;
}

static void on_configured(int rc, double value, const char *errmsg, void *ud)
{
    (void)value;
    (void)ud;
    if (rc != SL_OK)
        fprintf(stderr, "sluiced: provider_limits: the backend refused the limits: %s\n",
                errmsg ? errmsg : sl_strerror(rc));
}

void sl__pacing_apply(sl_server_t *srv, sl_config_t *c, bool push)
{
    sl_pacing_t *pc = SL_PACING(srv);
    if (!pc) return;
    for (size_t i = 0; i < c->settings.n_pools; i++) {
        sl_named_pool_t *np = &c->settings.pools[i];
        const sl_pace_pool_t *pp = sl__pace_pool(pc, np->name);
        if (!pp) continue;
        int64_t v[4];
        in_force(pp, v);
        np->config.rpm = v[0];
        np->config.input_tpm = v[1];
        np->config.output_tpm = v[2];
        np->config.tokens_tpm = v[3];
    }
    /* The backend takes the whole settings, the minted tokens' caps with them. */
    if (push && sl__tokens_configure(srv, c, srv->minted, on_configured, NULL) < 0)
        fprintf(stderr, "sluiced: provider_limits: out of memory; keeping the limits in force\n");
}

/* The published limits are read again refresh_s after the last read (start, reload). */
static void schedule_refresh(sl_server_t *srv, sl_pacing_t *pc)
{
    pc->next_refresh_s = sl_backend_now(srv->backend) + SL_PUBLISHED(&srv->config)->refresh_s;
}

void sl__pacing_tick(sl_server_t *srv, unsigned quarter)
{
    sl_pacing_t *pc = SL_PACING(srv);
    if (!pc) return;
    double now_s = sl_backend_now(srv->backend);
    if (quarter % RAMP_EVERY_QUARTERS == 0) sl__ramp_tick(srv, now_s);
    if (SL_PUBLISHED(&srv->config)->on && now_s >= pc->next_refresh_s) {
        char err[512];
        schedule_refresh(srv, pc);
        sl__published_fetch(srv, false, err, sizeof(err));
    }
}

int sl__pacing_start(sl_server_t *srv, char *err, size_t errlen)
{
    sl_pacing_t *pc = calloc(1, sizeof(*pc));
    if (!pc) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    srv->slot[SL_FEATURE_ID_provider_limits] = pc;
    snapshot(pc, &srv->config);
    /* A cold start: pools whose ramp is on start held at its floor. */
    for (size_t i = 0; i < srv->config.settings.n_pools; i++) {
        sl_pace_pool_t *pp = sl__pace_pool(pc, srv->config.settings.pools[i].name);
        if (pp && sl__ramp_active(&srv->config.bounds[i].ramp, pp))
            sl__ramp_arm(pp, &srv->config.bounds[i].ramp);
    }
    if (SL_PUBLISHED(&srv->config)->on && sl__published_fetch(srv, true, err, errlen) < 0) return -1;
    sl__pacing_apply(srv, &srv->config, false);
    schedule_refresh(srv, pc);
    return 0;
}

void sl__pacing_prepare(sl_server_t *srv, sl_config_t *next)
{
    if (!SL_PACING(srv)) return;
    snapshot(SL_PACING(srv), next);
    sl__pacing_apply(srv, next, false);
}

void sl__pacing_reloaded(sl_server_t *srv)
{
    sl_pacing_t *pc = SL_PACING(srv);
    if (!pc) return;
    schedule_refresh(srv, pc);
    char err[512];
    if (SL_PUBLISHED(&srv->config)->on) sl__published_fetch(srv, false, err, sizeof(err));
}

void sl__pacing_free(sl_server_t *srv)
{
    sl_pacing_t *pc = SL_PACING(srv);
    if (!pc) return;
    sl__published_free_client();
    free(pc->pools);
    free(pc);
    srv->slot[SL_FEATURE_ID_provider_limits] = NULL;
}

void sl__pacing_metrics_render(const sl_server_t *srv, struct evbuffer *out)
{
    const sl_pacing_t *pc = SL_PACING(srv);
    if (!pc) return;
    for (size_t i = 0; i < pc->n; i++)
        evbuffer_add_printf(out, "sluice_alert{name=\"provider_limits_changed\",pool=\"%s\"} %d\n",
                            pc->pools[i].name, pc->pools[i].alert_changed ? 1 : 0);
    evbuffer_add_printf(out, "# HELP sluice_pool_ramp_cap_tpm The slow start's input cap "
                             "(tokens per minute) in force; 0 when no ramp binds.\n"
                             "# TYPE sluice_pool_ramp_cap_tpm gauge\n");
    for (size_t i = 0; i < pc->n; i++)
        evbuffer_add_printf(out, "sluice_pool_ramp_cap_tpm{pool=\"%s\"} %lld\n", pc->pools[i].name,
                            (long long)pc->pools[i].cap_tpm);
}
