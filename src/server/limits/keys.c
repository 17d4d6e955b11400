/* keys.c - a pool of several provider keys: which key a lease goes to.
 *
 * A pool with `keys:` is one engine pool per key, named "POOL:KEY" (config.c expands
 * it), so each key has its own buckets, margin, cold start, queue and provider headers
 * on both backends without a rule of the engine or of sluice.lua changing
 * (docs/design.md, "A pool of several keys", has the why). What the engine cannot know
 * is that those pools are one: a lease naming POOL is sent here first, and goes to the
 * key that should grant it soonest, by the keys' own state (GET /v1/pools's figures):
 *
 *   ETA of key k = max(provider hold left, max over its limited buckets of
 *                  (need - level) / refill), then if its queue is not empty at least
 *                  its head's ETA plus, per ticket queued, this request's own refill time
 *   pick the least ETA; equal ETAs (within 1 ms): the emptiest key (the largest least
 *   share of its buckets left); a key whose capacity is below the need is never picked
 *   unless every key is so (then the engine answers its clear error).
 *
 * The decision itself is the engine's on the chosen key, exactly as for any pool, so the
 * estimate above only decides where to ask, never what is granted: it cannot overbook a
 * key. A lease naming "POOL:KEY" goes to that key alone (pinning, for operators).
 */
#include "server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEYS_MAX 64     /* keys of one pool considered; config keeps no more */
#define ETA_TIE_S 0.001 /* ETAs closer than this are equal: the emptiest key wins */

typedef struct keys_pick {
    sl_server_t *srv;
    sl_request_t req; /* the caller's; its strings are the caller's and outlive the pick */
    char group[129];
    char *pool_out;
    size_t pool_out_size;
    sl_backend_decision_cb cb;
    void *ud;
} keys_pick_t;

/* What the request takes from each bucket (the engine's need, a cold cache assumed). */
static void request_need(const sl_request_t *r, double need[SL_BUCKET_COUNT])
{
    double in = (double)r->input_tokens + (double)r->cached_tokens;
    need[SL_BUCKET_INPUT] = in;
    need[SL_BUCKET_OUTPUT] = (double)r->output_tokens;
    need[SL_BUCKET_REQUESTS] = 1;
    need[SL_BUCKET_TOKENS] = in + (double)r->output_tokens;
}

double sl__key_eta_s(const sl_pool_info_t *p, const sl_request_t *r, double now_s)
{
    double need[SL_BUCKET_COUNT];
    request_need(r, need);
    double eta = p->blocked_until > now_s ? p->blocked_until - now_s : 0, own = 0;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (p->limit[b] <= 0) continue;
        if (need[b] > p->capacity[b]) return INFINITY;
        double rate = p->refill_per_s[b] > 0 ? p->refill_per_s[b] : 1e-9;
        if (p->level[b] < need[b]) eta = fmax(eta, (need[b] - p->level[b]) / rate);
        own = fmax(own, need[b] / rate);
    }
    if (p->config.concurrency > 0 && p->leases_in_flight >= p->config.concurrency)
        eta = fmax(eta, p->config.lease_duration_prior_s);
    if (p->queue_depth > 0) eta = fmax(eta, p->head_eta_s) + (double)p->queue_depth * own;
    return eta;
}

double sl__key_room(const sl_pool_info_t *p)
{
    double room = 1;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (p->limit[b] > 0 && p->capacity[b] > 0) room = fmin(room, p->level[b] / p->capacity[b]);
    if (p->config.concurrency > 0)
        room = fmin(room, 1 - (double)p->leases_in_flight / (double)p->config.concurrency);
    return room;
}

static const sl_pool_info_t *find_info(const sl_pool_info_t *pools, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (pools[i].name && !strcmp(pools[i].name, name)) return &pools[i];
    return NULL;
}

static void on_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud)
{
    keys_pick_t *pk = ud;
    const sl_config_t *c = &pk->srv->config; /* as of now: a reload may have changed it */
    size_t idx[KEYS_MAX];
    size_t n_keys = sl_config_key_members(c, pk->group, idx, KEYS_MAX);
    if (rc != SL_OK || n_keys == 0) {
        if (rc == SL_OK) rc = SL_ENOTFOUND;
        pk->cb(rc, NULL, rc == SL_ENOTFOUND && !errmsg ? "pool: no such pool" : errmsg, pk->ud);
        free(pk);
        return;
    }
    double now = sl_backend_now(pk->srv->backend), best_eta = INFINITY, best_room = -INFINITY;
    size_t best = idx[0];
    for (size_t k = 0; k < n_keys; k++) {
        const sl_pool_info_t *p = find_info(pools, n, c->settings.pools[idx[k]].name);
        if (!p) continue;
        double eta = sl__key_eta_s(p, &pk->req, now), room = sl__key_room(p);
        bool sooner = eta < best_eta - ETA_TIE_S;
        bool tie = !sooner && fabs(eta - best_eta) <= ETA_TIE_S && room > best_room;
        if (sooner || tie) {
            best = idx[k];
            best_eta = eta;
            best_room = room;
        }
    }
    snprintf(pk->pool_out, pk->pool_out_size, "%s", c->settings.pools[best].name);
    pk->req.pool = pk->pool_out;
    sl_backend_request(pk->srv->backend, &pk->req, pk->cb, pk->ud);
    free(pk);
}

void sl__keys_request(sl_server_t *srv, const sl_request_t *req, char *pool_out,
                      size_t pool_out_size, sl_backend_decision_cb cb, void *ud)
{
    const char *pool = req->pool ? req->pool : "default";
    size_t first;
    if (sl_config_key_members(&srv->config, pool, &first, 1) == 0 || strlen(pool) > 128) {
        sl_backend_request(srv->backend, req, cb, ud);
        return;
    }
    keys_pick_t *pk = calloc(1, sizeof(*pk));
    if (!pk) {
        cb(SL_ENOMEM, NULL, "out of memory", ud);
        return;
    }
    pk->srv = srv;
    pk->req = *req;
    snprintf(pk->group, sizeof(pk->group), "%s", pool);
    pk->pool_out = pool_out;
    pk->pool_out_size = pool_out_size;
    pk->cb = cb;
    pk->ud = ud;
    sl_backend_pools(srv->backend, NULL, on_pools, pk);
}

const char *sl__key_name(const sl_config_t *c, const char *pool)
{
    const sl_pool_upstream_t *up = pool ? sl_config_pool_upstream(c, pool) : NULL;
    return up && up->key_group && strcmp(pool, up->key_group) != 0 ? up->key_name : NULL;
}
