/* keys.c - a pool of several provider keys: which key a lease goes to.
 *
 * A pool with `keys:` is one engine pool per key, named "POOL:KEY" (config.c expands
 * it), so each key has its own buckets, margin, cold start, queue and provider headers
 * on both backends without a rule of the engine or of sluice.lua changing
 * (docs/design.md, "A pool of several keys", has the why). What the engine cannot know
 * is that those pools are one: a lease naming POOL is sent here first, and goes to the
 * key that should grant it soonest, by the keys' own state (GET /v1/pools's figures)
 * and the engine's pure rule sl_keys_pick() (src/engine/keys.c, which the simulator
 * uses too). The chosen key's pool then decides the request exactly as any pool does,
 * so the choice can cost waiting but never overbook a key. A lease naming "POOL:KEY"
 * goes to that key alone (pinning, for operators). A request above the pool's
 * long-context threshold is picked a key by the keys' long-context pools' state and
 * leases from the chosen key's "POOL:KEY:long_context" (long_context.c); it is still
 * forwarded with that key.
 */
#include "long_context.h"
#include "server.h"

#include <event2/buffer.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A retry of a request (same agent and request_id) must reach the key of its first
 * answer: the engine (and sluice.lua, per pool) recognises a replay only in the pool that
 * answered it. So the key chosen for each request_id is remembered for the engine's
 * idempotency window, in a fixed table indexed by a hash of (pool, agent, request_id):
 * memory is bounded (MEMO_SLOTS entries, about 200 KiB), and a slot overwritten by
 * another request only loses the stickiness of an old one. Per replica: on Redis, a retry
 * that reaches another replica is routed afresh. */
#define MEMO_SLOTS 8192

typedef struct memo_slot {
    uint64_t hash; /* 0: empty */
    double at_s;
    char pool[129]; /* the key's pool, "POOL:KEY" */
} memo_slot_t;

/* Grants of a ticket by another key than the one it queued on (one queue over the keys,
 * src/engine/keyqueue.c), counted per granting key for /metrics: at most TAKEN_KEYS keys
 * (a pool has at most SL_CONFIG_KEYS_MAX; more pools of keys share the table, and a key
 * beyond it is not counted). */
#define TAKEN_KEYS 64

typedef struct taken_count {
    char pool[129]; /* the granting key's pool, "POOL:KEY"; "" = free */
    uint64_t n;
} taken_count_t;

struct sl_keys_memo {
    memo_slot_t slot[MEMO_SLOTS];
    taken_count_t taken[TAKEN_KEYS];
};

static struct sl_keys_memo *memo_of(sl_server_t *srv)
{
    if (!srv->keys_memo) srv->keys_memo = calloc(1, sizeof(*srv->keys_memo));
    return srv->keys_memo;
}

void sl__keys_note_grant(sl_server_t *srv, const char *queued_on, const char *granted_on)
{
    if (!queued_on || !granted_on || !strcmp(queued_on, granted_on) || strlen(granted_on) > 128 ||
        !sl__key_name(&srv->config, granted_on) || !memo_of(srv))
        return;
    taken_count_t *t = srv->keys_memo->taken;
    for (size_t i = 0; i < TAKEN_KEYS; i++) {
        if (t[i].pool[0] && strcmp(t[i].pool, granted_on) != 0) continue;
        if (!t[i].pool[0]) snprintf(t[i].pool, sizeof(t[i].pool), "%s", granted_on);
        t[i].n++;
        return;
    }
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return (h ^ 0x1f) * 1099511628211ULL; /* a separator, so ("ab","c") != ("a","bc") */
}

static uint64_t memo_hash(const char *group, const sl_request_t *r)
{
    uint64_t h = fnv1a(fnv1a(fnv1a(14695981039346656037ULL, group), r->agent), r->request_id);
    return h ? h : 1;
}

/* The slot of `r`'s request_id in `group`, or NULL (no id, or out of memory). */
static memo_slot_t *memo_slot(sl_server_t *srv, const char *group, const sl_request_t *r,
                              uint64_t *hash)
{
    if (!r->request_id || !r->agent || !memo_of(srv)) return NULL;
    *hash = memo_hash(group, r);
    return &srv->keys_memo->slot[*hash % MEMO_SLOTS];
}

void sl__keys_free(sl_server_t *srv)
{
    free(srv->keys_memo);
    srv->keys_memo = NULL;
}

/* A request to a pool of keys is asked of the key that should grant it soonest; when that
 * key rejects it for its wait or its agent's own retry-after, of the next key by the
 * estimate, and so on: a key the estimate ranked second may still queue or grant it (a
 * misjudged queue, an agent held on one key's workspace only). When every key rejects it,
 * the answer is the reject with the least retry_after: the soonest a key expects it. */
typedef struct keys_pick {
    sl_server_t *srv;
    sl_request_t req; /* the caller's; its strings are the caller's and outlive the pick */
    char group[129];
    char *pool_out;
    size_t pool_out_size;
    sl_backend_decision_cb cb;
    void *ud;
    size_t order[SL_CONFIG_KEYS_MAX]; /* the keys' configuration indexes, soonest first */
    size_t n_order, next;             /* keys to ask; the next one */
    bool is_long;                     /* above the long-context threshold (long_context.c) */
    bool rejected;                    /* best_reject holds a key's reject */
    sl_decision_t best_reject;        /* the least retry_after so far, of best_pool */
    char best_pool[129], best_reason[64], best_limited_by[64];
} keys_pick_t;

static const sl_pool_info_t *find_info(const sl_pool_info_t *pools, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (pools[i].name && !strcmp(pools[i].name, name)) return &pools[i];
    return NULL;
}

static void ask_next(keys_pick_t *pk);

static void keep_reject(keys_pick_t *pk, const sl_decision_t *d)
{
    if (pk->rejected && pk->best_reject.retry_after_s <= d->retry_after_s) return;
    pk->rejected = true;
    pk->best_reject = *d;
    snprintf(pk->best_pool, sizeof(pk->best_pool), "%s", pk->pool_out);
    snprintf(pk->best_reason, sizeof(pk->best_reason), "%s", d->reason ? d->reason : "");
    snprintf(pk->best_limited_by, sizeof(pk->best_limited_by), "%s",
             d->limited_by ? d->limited_by : "");
    pk->best_reject.reason = d->reason ? pk->best_reason : NULL;
    pk->best_reject.limited_by = d->limited_by ? pk->best_limited_by : NULL;
}

/* Remembers the key that answered `r`'s request_id, so a retry asks it again. */
static void memo_note(sl_server_t *srv, const char *group, const sl_request_t *r, const char *pool)
{
    uint64_t hash = 0;
    memo_slot_t *m = memo_slot(srv, group, r, &hash);
    if (!m) return;
    m->hash = hash;
    m->at_s = sl_backend_now(srv->backend);
    snprintf(m->pool, sizeof(m->pool), "%s", pool);
}

static void on_key_decision(int rc, const sl_decision_t *d, const char *errmsg, void *ud)
{
    keys_pick_t *pk = ud;
    if (rc == SL_OK && sl_keys_ask_next(d)) {
        keep_reject(pk, d);
        if (pk->next < pk->n_order) {
            ask_next(pk);
            return;
        }
        d = &pk->best_reject;
        snprintf(pk->pool_out, pk->pool_out_size, "%s", pk->best_pool);
    }
    if (pk->next > 1) memo_note(pk->srv, pk->group, &pk->req, pk->pool_out);
    pk->cb(rc, d, errmsg, pk->ud);
    free(pk);
}

/* Asks the next key of pk->order that is still a key of pk->group (a reload may have
 * changed the keys); with none left, answers the best reject kept. */
static void ask_next(keys_pick_t *pk)
{
    const sl_config_t *c = &pk->srv->config;
    while (pk->next < pk->n_order) {
        size_t i = pk->order[pk->next++];
        const sl_pool_upstream_t *up = i < c->settings.n_pools && c->upstreams ? &c->upstreams[i] : NULL;
        if (!up || !up->key_group || strcmp(up->key_group, pk->group) != 0) continue;
        snprintf(pk->pool_out, pk->pool_out_size, "%s", c->settings.pools[i].name);
        /* A long request's lease is the key's long-context pool's; pool_out names the key
         * it goes with. */
        const char *lc = pk->is_long ? sl__long_context_pool(c, pk->pool_out) : NULL;
        pk->req.pool = lc ? lc : pk->pool_out;
        sl_backend_request(pk->srv->backend, &pk->req, on_key_decision, pk);
        return;
    }
    snprintf(pk->pool_out, pk->pool_out_size, "%s", pk->best_pool);
    if (pk->rejected)
        pk->cb(SL_OK, &pk->best_reject, NULL, pk->ud);
    else /* a reload removed the pool's keys before the first was asked */
        pk->cb(SL_ENOTFOUND, NULL, "pool: no such pool", pk->ud);
    free(pk);
}

static void on_pools(int rc, const sl_pool_info_t *pools, size_t n, const char *errmsg, void *ud)
{
    keys_pick_t *pk = ud;
    const sl_config_t *c = &pk->srv->config; /* as of now: a reload may have changed it */
    size_t idx[SL_CONFIG_KEYS_MAX];
    size_t n_keys = sl_config_key_members(c, pk->group, idx, SL_CONFIG_KEYS_MAX);
    if (rc != SL_OK || n_keys == 0) {
        if (rc == SL_OK) rc = SL_ENOTFOUND;
        pk->cb(rc, NULL, rc == SL_ENOTFOUND && !errmsg ? "pool: no such pool" : errmsg, pk->ud);
        free(pk);
        return;
    }
    const sl_pool_info_t *info[SL_CONFIG_KEYS_MAX];
    /* Above the long-context threshold: each key's long-context pool (NULL: none), whose
     * requests are its key's (request_parent), so the pick sees its tokens and its key's
     * request bucket together. */
    const char *lc[SL_CONFIG_KEYS_MAX];
    sl_pool_info_t joined[SL_CONFIG_KEYS_MAX];
    bool is_long = sl__long_context_is_long(c, &pk->req);
    for (size_t k = 0; k < n_keys; k++) {
        const char *name = c->settings.pools[idx[k]].name;
        lc[k] = is_long ? sl__long_context_pool(c, name) : NULL;
        info[k] = find_info(pools, n, lc[k] ? lc[k] : name);
        const sl_pool_info_t *key = lc[k] && info[k] ? find_info(pools, n, name) : NULL;
        if (!key) continue;
        joined[k] = *info[k];
        int b = SL_BUCKET_REQUESTS;
        joined[k].limit[b] = key->limit[b];
        joined[k].level[b] = key->level[b];
        joined[k].capacity[b] = key->capacity[b];
        joined[k].refill_per_s[b] = key->refill_per_s[b];
        info[k] = &joined[k];
    }
    double now = sl_backend_now(pk->srv->backend);
    /* The keys by the estimate, soonest first (each pick without the keys before it); a
     * key that can never hold the request is not asked, unless none can (the first then
     * answers why: none known to the backend yet, say). */
    pk->is_long = is_long;
    for (int best; (best = sl_keys_pick(info, n_keys, &pk->req, now)) >= 0; info[best] = NULL)
        pk->order[pk->n_order++] = idx[best];
    if (pk->n_order == 0) pk->order[pk->n_order++] = idx[0];
    uint64_t hash = 0;
    memo_slot_t *m = memo_slot(pk->srv, pk->group, &pk->req, &hash);
    if (m && m->hash == hash && now - m->at_s <= c->engine.idempotency_ttl_s)
        for (size_t k = 0; k < n_keys; k++) /* a retry: its first key, if it still is one */
            if (!strcmp(c->settings.pools[idx[k]].name, m->pool)) {
                pk->order[0] = idx[k];
                pk->n_order = 1; /* its answer is that key's, a replay */
            }
    if (m && !(m->hash == hash && now - m->at_s <= c->engine.idempotency_ttl_s))
        memo_note(pk->srv, pk->group, &pk->req, c->settings.pools[pk->order[0]].name);
    ask_next(pk);
}

void sl__keys_request(sl_server_t *srv, const sl_request_t *req, char *pool_out,
                      size_t pool_out_size, sl_backend_decision_cb cb, void *ud)
{
    const char *pool = req->pool ? req->pool : "default";
    size_t first;
    if (sl_config_key_members(&srv->config, pool, &first, 1) == 0 || strlen(pool) > 128) {
        sl_request_t pinned = *req; /* POOL:KEY: that key alone, queued too (keyqueue.c) */
        pinned.key_pinned = sl__key_name(&srv->config, pool) != NULL;
        sl_backend_request(srv->backend, &pinned, cb, ud);
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

bool sl__is_key_group(const sl_config_t *c, const char *name)
{
    size_t first;
    return sl_config_key_members(c, name, &first, 1) > 0;
}

json_t *sl__keys_describe(const sl_config_t *c, json_t *pool_json)
{
    const char *name = json_string_value(json_object_get(pool_json, "name"));
    const sl_pool_upstream_t *up = name ? sl_config_pool_upstream(c, name) : NULL;
    if (up && up->key_group && strcmp(name, up->key_group) != 0) {
        json_object_set_new(pool_json, "key", json_string(up->key_name));
        json_object_set_new(pool_json, "key_of", json_string(up->key_group));
    }
    return pool_json;
}

json_t *sl__keys_pool_json(sl_server_t *srv, const char *group, const sl_pool_info_t *pools,
                           size_t n)
{
    const sl_config_t *c = &srv->config;
    json_t *keys = json_array();
    for (size_t i = 0; i < n; i++) {
        const sl_pool_upstream_t *up = sl_config_pool_upstream(c, pools[i].name);
        if (up && up->key_group && !strcmp(up->key_group, group) &&
            strcmp(pools[i].name, group) != 0)
            json_array_append_new(keys, sl__keys_describe(c, sl__pool_json(srv->backend, &pools[i])));
    }
    return json_pack("{s:s,s:o}", "name", group, "keys", keys);
}

void sl__keys_metrics_render(const sl_server_t *srv, struct evbuffer *out)
{
    const sl_config_t *c = &srv->config;
    bool any = false;
    for (size_t i = 0; c->upstreams && i < c->settings.n_pools; i++) {
        const sl_pool_upstream_t *up = &c->upstreams[i];
        if (!up->key_group) continue;
        if (!any)
            evbuffer_add_printf(out, "# HELP sluice_pool_key A key of a pool of several keys: "
                                     "its own pool's name, the pool it belongs to, its name.\n"
                                     "# TYPE sluice_pool_key gauge\n");
        any = true;
        /* Pool and key names are [A-Za-z0-9._:-] (the engine's pool names, checked when
         * the configuration loads): nothing in them needs a label's escaping. */
        evbuffer_add_printf(out, "sluice_pool_key{pool=\"%s\",key_of=\"%s\",key=\"%s\"} 1\n",
                            c->settings.pools[i].name, up->key_group, up->key_name);
    }
    if (!any) return;
    evbuffer_add_printf(out, "# HELP sluice_pool_key_taken_total Queued requests a key granted "
                             "from another key's queue (one queue over the keys).\n"
                             "# TYPE sluice_pool_key_taken_total counter\n");
    for (size_t i = 0; i < c->settings.n_pools; i++) {
        const sl_pool_upstream_t *up = &c->upstreams[i];
        if (!up->key_group) continue;
        uint64_t n = 0;
        for (size_t k = 0; srv->keys_memo && k < TAKEN_KEYS; k++)
            if (!strcmp(srv->keys_memo->taken[k].pool, c->settings.pools[i].name))
                n = srv->keys_memo->taken[k].n;
        evbuffer_add_printf(out, "sluice_pool_key_taken_total{pool=\"%s\"} %llu\n",
                            c->settings.pools[i].name, (unsigned long long)n);
    }
}
