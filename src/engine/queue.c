/* queue.c - the weighted fair queue of a pool: a treap ordered by WFQ finish tags.
 *
 * Why a fair queue and not strict priority: a planner whose output unblocks six
 * workers should go first, but a busy planner must not starve a leaf agent for
 * ever. Each request gets a finish tag `start + cost / weight`, where `cost` is its
 * dominant share of the pool (weight.c) and `start = max(V, the agent's last
 * finish)`. Serving requests in finish-tag order gives every backlogged agent a share
 * of the pool proportional to its weight, whatever the sizes of its requests.
 *
 * Why a treap with subtree sums: a request's ETA depends on the tokens of every
 * request ahead of it, and new requests land anywhere in the order. Keeping, per
 * node, the number of requests and the summed needs of its subtree gives the
 * position and the tokens ahead of any key in O(log n), so the cost of a request
 * hardly grows with the queue (100,000 queued must cost at most 3x 1,000 queued).
 * Priorities come from the engine's seeded generator, so runs are reproducible.
 *
 * Head-of-line: the pool drains from the head only (pool.c); a head that does not
 * fit blocks the rest, so large requests are never starved by small ones.
 */
#include "internal.h"

#include <assert.h>
#include <stdio.h>

static bool key_less(double f1, uint64_t s1, double f2, uint64_t s2)
{
    return f1 < f2 || (f1 == f2 && s1 < s2);
}

static void pull(sl__ticket_t *t)
{
    t->count = 1;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        t->sum[b] = (double)t->need.n[b];
    if (t->left) {
        t->count += t->left->count;
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            t->sum[b] += t->left->sum[b];
    }
    if (t->right) {
        t->count += t->right->count;
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            t->sum[b] += t->right->sum[b];
    }
}

/* Splits `t` into keys < (finish, seq) and keys >= it. */
static void split(sl__ticket_t *t, double finish, uint64_t seq, sl__ticket_t **l, sl__ticket_t **r)
{
    if (!t) {
        *l = *r = NULL;
        return;
    }
    if (key_less(t->finish, t->seq, finish, seq)) {
        split(t->right, finish, seq, &t->right, r);
        *l = t;
    } else {
        split(t->left, finish, seq, l, &t->left);
        *r = t;
    }
    pull(t);
}

static sl__ticket_t *merge(sl__ticket_t *l, sl__ticket_t *r)
{
    if (!l) return r;
    if (!r) return l;
    if (l->prio > r->prio) {
        l->right = merge(l->right, r);
        pull(l);
        return l;
    }
    r->left = merge(l, r->left);
    pull(r);
    return r;
}

void sl__queue_insert(sl__pool_t *p, sl__ticket_t *t)
{
    sl__ticket_t *l, *r;
    t->left = t->right = NULL;
    pull(t);
    split(p->queue, t->finish, t->seq, &l, &r);
    p->queue = merge(merge(l, t), r);
}

void sl__queue_remove(sl__pool_t *p, sl__ticket_t *t)
{
    sl__ticket_t *l, *mid, *r;
    split(p->queue, t->finish, t->seq, &l, &r);
    /* Keys are unique, so the next key after t is (finish, seq + 1). */
    split(r, t->finish, t->seq + 1, &mid, &r);
    assert(mid == t && t->count == 1 && "the ticket is in this pool's queue");
    (void)mid;
    p->queue = merge(l, r);
    t->left = t->right = NULL;
}

sl__ticket_t *sl__queue_head(const sl__pool_t *p)
{
    sl__ticket_t *t = p->queue;
    while (t && t->left)
        t = t->left;
    return t;
}

int64_t sl__queue_depth(const sl__pool_t *p)
{
    return p->queue ? p->queue->count : 0;
}

void sl__queue_prefix(const sl__pool_t *p, double finish, uint64_t seq, int64_t *count,
                      double sums[SL_BUCKET_COUNT])
{
    *count = 0;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        sums[b] = 0;
    const sl__ticket_t *t = p->queue;
    while (t) {
        if (key_less(t->finish, t->seq, finish, seq)) {
            /* t and its whole left subtree are ahead. */
            *count += 1;
            for (int b = 0; b < SL_BUCKET_COUNT; b++)
                sums[b] += (double)t->need.n[b];
            if (t->left) {
                *count += t->left->count;
                for (int b = 0; b < SL_BUCKET_COUNT; b++)
                    sums[b] += t->left->sum[b];
            }
            t = t->right;
        } else {
            t = t->left;
        }
    }
}

static void foreach_rec(sl__ticket_t *t, void (*fn)(sl__ticket_t *, void *), void *ud)
{
    if (!t) return;
    foreach_rec(t->left, fn, ud);
    sl__ticket_t *right = t->right; /* fn may not modify the tree, but be safe */
    fn(t, ud);
    foreach_rec(right, fn, ud);
}

void sl__queue_foreach(sl__pool_t *p, void (*fn)(sl__ticket_t *t, void *ud), void *ud)
{
    foreach_rec(p->queue, fn, ud);
}

/* Checks order, heap priorities and subtree sums. Returns the node count or -1. */
static int64_t check_rec(const sl__ticket_t *t, const sl__ticket_t **prev, char *msg,
                         size_t msg_len)
{
    if (!t) return 0;
    int64_t nl = check_rec(t->left, prev, msg, msg_len);
    if (nl < 0) return -1;
    if (*prev && !key_less((*prev)->finish, (*prev)->seq, t->finish, t->seq)) {
        snprintf(msg, msg_len, "queue out of order at ticket %llu", (unsigned long long)t->id);
        return -1;
    }
    *prev = t;
    int64_t nr = check_rec(t->right, prev, msg, msg_len);
    if (nr < 0) return -1;
    if ((t->left && t->left->prio > t->prio) || (t->right && t->right->prio > t->prio)) {
        snprintf(msg, msg_len, "queue heap order broken at ticket %llu", (unsigned long long)t->id);
        return -1;
    }
    double sum[SL_BUCKET_COUNT];
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        /* Same order of additions as pull(), so the doubles agree exactly. */
        sum[b] = (double)t->need.n[b];
        if (t->left) sum[b] += t->left->sum[b];
        if (t->right) sum[b] += t->right->sum[b];
    }
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (sum[b] != t->sum[b]) {
            snprintf(msg, msg_len, "queue subtree sum wrong at ticket %llu",
                     (unsigned long long)t->id);
            return -1;
        }
    }
    if (t->count != 1 + nl + nr) {
        snprintf(msg, msg_len, "queue subtree count wrong at ticket %llu",
                 (unsigned long long)t->id);
        return -1;
    }
    return t->count;
}

int sl__queue_check(const sl__pool_t *p, char *msg, size_t msg_len)
{
    const sl__ticket_t *prev = NULL;
    return check_rec(p->queue, &prev, msg, msg_len) < 0 ? -1 : 0;
}
