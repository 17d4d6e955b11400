/* keys.c - which key of a pool of several keys a request should go to (a pure rule).
 *
 * A pool of several provider keys is one engine pool per key (docs/design.md, "A pool of
 * several keys"); every grant, settle, resync and queue is that pool's, by the engine's
 * rules, on both backends. This file adds no state and no rule to a pool: it only reads
 * the keys' sl_pool_info_t and says where to ask, so sluiced (for the memory and the
 * Redis backend alike) and the simulator route the same way:
 *
 *   ETA of a key = max(provider hold left, max over its limited buckets of
 *                  (need - level) / refill, the lease-duration prior when its
 *                  concurrency is full); when its queue is not empty, at least its
 *                  head's ETA plus, per ticket queued, this request's own refill time
 *                  (join the shortest expected wait)
 *   the least ETA wins; ETAs within 1 ms are equal and the emptiest key wins (the
 *   largest least share left over its limited buckets and its concurrency); a key whose
 *   limit is below the need, or whose capacity is below the need up to its starting
 *   capacity (limit x margin_start, lease.c fit_capacity), never fits (ETA infinite).
 *
 * The estimate only decides where to ask: the chosen key's engine pool decides the
 * request exactly as any pool does, so a wrong estimate costs waiting, never a 429.
 */
#include <math.h>
#include <string.h>

#include <sluice/engine.h>

#define ETA_TIE_S 0.001

double sl_key_eta_s(const sl_pool_info_t *p, const sl_request_t *r, double now_s)
{
    double in = (double)r->input_tokens + (double)r->cached_tokens;
    double need[SL_BUCKET_COUNT];
    need[SL_BUCKET_INPUT] = in; /* a cold cache assumed: the most the engine may charge */
    need[SL_BUCKET_OUTPUT] = (double)r->output_tokens;
    need[SL_BUCKET_REQUESTS] = 1;
    need[SL_BUCKET_TOKENS] = in + (double)r->output_tokens;
    double eta = p->blocked_until > now_s ? p->blocked_until - now_s : 0, own = 0;
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (p->limit[b] <= 0) continue;
        /* The engine refuses a need above the limit for good and waits for a full
         * bucket at the starting capacity (limit x margin_start) for one between the two
         * (lease.c fit_capacity); above today's capacity it waits for the margin: either
         * way, not this key. */
        if (need[b] > (double)p->limit[b]) return INFINITY;
        need[b] = fmin(need[b], floor((double)p->limit[b] * p->config.margin_start));
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

double sl_key_room(const sl_pool_info_t *p)
{
    double room = 1;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        if (p->limit[b] > 0 && p->capacity[b] > 0) room = fmin(room, p->level[b] / p->capacity[b]);
    if (p->config.concurrency > 0)
        room = fmin(room, 1 - (double)p->leases_in_flight / (double)p->config.concurrency);
    return room;
}

int sl_keys_pick(const sl_pool_info_t *const *keys, size_t n, const sl_request_t *r,
                 double now_s)
{
    int best = -1;
    double best_eta = INFINITY, best_room = -INFINITY;
    for (size_t k = 0; k < n; k++) {
        if (!keys[k]) continue;
        double eta = sl_key_eta_s(keys[k], r, now_s), room = sl_key_room(keys[k]);
        if (isinf(eta)) continue; /* its capacity is below the need */
        bool sooner = best < 0 || eta < best_eta - ETA_TIE_S;
        bool tie = !sooner && fabs(eta - best_eta) <= ETA_TIE_S && room > best_room;
        if (sooner || tie) {
            best = (int)k;
            best_eta = eta;
            best_room = room;
        }
    }
    return best;
}

bool sl_keys_ask_next(const sl_decision_t *d)
{
    /* The wait and an agent's hold are one key's; caps, suspension and capacity are the
     * pool's answer wherever it is asked. */
    return d->status == SL_REJECTED && !d->replayed && d->reason &&
           (!strcmp(d->reason, "queue_wait_exceeds_max") || !strcmp(d->reason, "agent_retry_after"));
}
