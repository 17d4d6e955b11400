/* queue.c - the hierarchical weighted fair queue of a pool: teams, then agents.
 *
 * Why a fair queue and not strict priority: a planner whose output unblocks six
 * workers should go first, but a busy planner must not starve a leaf agent for
 * ever. Each request gets a finish tag `start + cost / weight`, where `cost` is its
 * dominant share of the pool (weight.c) and `start = max(V, the agent's last
 * finish)`. Serving requests in finish-tag order gives every backlogged agent a share
 * of the pool proportional to its weight, whatever the sizes of its requests.
 *
 * Why two levels: per-agent fair queueing gives a team of 150 agents three times the
 * key of a team of 50, whatever the teams agreed. So the tags above are *inner* tags,
 * kept per team (each team has its own V, the inner tag of its latest grant), and
 * the teams are themselves fair-queued: a team's tickets, in inner-tag order, have
 * the outer tags `base + (c_0 + ... + c_k) / team_weight`, where `base` is the outer
 * tag of the team's latest grant while it stays backlogged, and max(pool V, that tag)
 * when it becomes backlogged again (standard virtual-time rule: an idle team lends its
 * share and gets no credit for the time it lent it). The pool serves the team head of
 * lowest outer tag (ties: the team seen first). So backlogged teams get dominant shares
 * in proportion to their weights, and inside a team the task graph's weights order
 * the agents as before. With one team this is exactly the one-level queue: the outer
 * tags are monotone in the inner order. docs/engine.md says why not an auction.
 *
 * Outer tags are never stored: inserting a ticket ahead of others in its team moves
 * their outer tags, so they are derived from subtree sums of cost when asked.
 *
 * Why a treap with subtree sums: a request's ETA depends on the tokens of every
 * request ahead of it, and new requests land anywhere in the order. Keeping, per
 * node, the number of requests, the summed needs and the summed cost of its subtree
 * gives the position and the tokens ahead of any key in O(log n) per team, so the
 * cost of a request hardly grows with the queue (100,000 queued must cost at most
 * 3x 1,000 queued). Teams are few (tens): the head and the ETA look at each team.
 * Priorities come from the engine's seeded generator, so runs are reproducible.
 *
 * Head-of-line: the pool drains from the head (pool.c); a head that does not fit
 * blocks the rest, so large requests are never starved by small ones, except for
 * what backfill.c grants past it without moving its ETA (sl__queue_window gives it
 * the first tickets in the pool's order).
 */
#include "internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

static bool key_less(double f1, uint64_t s1, double f2, uint64_t s2)
{
    return f1 < f2 || (f1 == f2 && s1 < s2);
}

static void pull(sl__ticket_t *t)
{
    t->count = 1;
    t->cost_sum = t->cost;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        t->sum[b] = (double)t->need.n[b];
    if (t->left) {
        t->count += t->left->count;
        t->cost_sum += t->left->cost_sum;
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            t->sum[b] += t->left->sum[b];
    }
    if (t->right) {
        t->count += t->right->count;
        t->cost_sum += t->right->cost_sum;
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

void sl__treap_insert(sl__ticket_t **root, sl__ticket_t *t)
{
    sl__ticket_t *l, *r;
    t->left = t->right = NULL;
    pull(t);
    split(*root, t->finish, t->seq, &l, &r);
#ifndef NDEBUG
    const sl__ticket_t *next = r; /* r's lowest key: the first not below t's */
    while (next && next->left) next = next->left;
    assert(!(next && next->finish == t->finish && next->seq == t->seq) &&
           "no queued ticket has t's key");
#endif
    *root = merge(merge(l, t), r);
}

void sl__treap_remove(sl__ticket_t **root, sl__ticket_t *t)
{
    sl__ticket_t *l, *mid, *r;
    split(*root, t->finish, t->seq, &l, &r);
    /* Keys are unique, so the next key after t is (finish, seq + 1). */
    split(r, t->finish, t->seq + 1, &mid, &r);
    assert(mid == t && t->count == 1 && "the ticket is in the tree");
    (void)mid;
    *root = merge(l, r);
    t->left = t->right = NULL;
}

void sl__queue_insert(sl__pool_t *p, sl__ticket_t *t)
{
    sl__pteam_t *pt = t->team;
    assert(pt && "the ticket has its team");
    if (!pt->root) pt->base = p->vtime > pt->last_outer ? p->vtime : pt->last_outer;
    sl__treap_insert(&pt->root, t);
    p->queued++;
    p->queued_pinned += t->key_pinned;
}

void sl__queue_remove(sl__pool_t *p, sl__ticket_t *t)
{
    sl__treap_remove(&t->team->root, t);
    p->queued--;
    p->queued_pinned -= t->key_pinned;
}

static sl__ticket_t *leftmost(sl__ticket_t *t)
{
    while (t && t->left)
        t = t->left;
    return t;
}

static double team_weight(const sl__pteam_t *pt)
{
    return pt->team->weight;
}

sl__ticket_t *sl__queue_head(const sl__pool_t *p)
{
    if (p->n_teams == 1) return leftmost(p->teams[0]->root);
    sl__ticket_t *best = NULL;
    double best_outer = 0;
    for (size_t i = 0; i < p->n_teams; i++) {
        const sl__pteam_t *pt = p->teams[i];
        sl__ticket_t *h = leftmost(pt->root);
        if (!h) continue;
        double outer = sl__queue_head_outer(h);
        if (!best || outer < best_outer) { /* ties: the team created first */
            best = h;
            best_outer = outer;
        }
    }
    return best;
}

int64_t sl__queue_depth(const sl__pool_t *p)
{
    return p->queued;
}

/* Counts t and its whole left subtree as ahead: their number, needs and costs. */
static void take_ahead(const sl__ticket_t *t, int64_t *count, double sums[SL_BUCKET_COUNT],
                       double *cost)
{
    *count += 1;
    *cost += t->cost;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        sums[b] += (double)t->need.n[b];
    if (t->left) {
        *count += t->left->count;
        *cost += t->left->cost_sum;
        for (int b = 0; b < SL_BUCKET_COUNT; b++)
            sums[b] += t->left->sum[b];
    }
}

/* Tickets of one team with inner key < (finish, seq): count, needs and cost. */
static void inner_prefix(const sl__ticket_t *t, double finish, uint64_t seq, int64_t *count,
                         double sums[SL_BUCKET_COUNT], double *cost)
{
    while (t) {
        if (key_less(t->finish, t->seq, finish, seq)) {
            take_ahead(t, count, sums, cost);
            t = t->right;
        } else {
            t = t->left;
        }
    }
}

/* Tickets of team pt whose outer tag is below `outer` (at most `outer` when
 * `inclusive`): a prefix of its inner order, since costs are never negative. */
static void outer_prefix(const sl__pteam_t *pt, double outer, bool inclusive, int64_t *count,
                         double sums[SL_BUCKET_COUNT])
{
    double w = team_weight(pt), acc = 0;
    const sl__ticket_t *t = pt->root;
    while (t) {
        double left_cost = t->left ? t->left->cost_sum : 0;
        double tag = pt->base + (acc + left_cost + t->cost) / w;
        if (tag < outer || (inclusive && tag == outer)) {
            take_ahead(t, count, sums, &acc);
            t = t->right;
        } else {
            t = t->left;
        }
    }
}

const sl__ticket_t *sl__queue_team_head(const sl__pteam_t *pt)
{
    return leftmost(pt->root);
}

sl__ticket_t *sl__treap_first(sl__ticket_t *root)
{
    return leftmost(root);
}

/* In-order walk of at most `max` tickets of one team, with their outer tags. */
static void team_window(const sl__ticket_t *t, const sl__pteam_t *pt, double *acc,
                        sl__ticket_t **out, double *outer, size_t *n, size_t max)
{
    if (!t || *n == max) return;
    team_window(t->left, pt, acc, out, outer, n, max);
    if (*n == max) return;
    *acc += t->cost;
    out[*n] = (sl__ticket_t *)t;
    outer[*n] = pt->base + *acc / team_weight(pt);
    (*n)++;
    team_window(t->right, pt, acc, out, outer, n, max);
}

size_t sl__queue_window(const sl__pool_t *p, sl__ticket_t **out, size_t max)
{
    size_t n = 0;
    double acc = 0;
    if (p->n_teams == 1) {
        double outer[SL__BACKFILL_WINDOW];
        if (max > SL__BACKFILL_WINDOW) max = SL__BACKFILL_WINDOW;
        team_window(p->teams[0]->root, p->teams[0], &acc, out, outer, &n, max);
        return n;
    }
    /* Several teams: each team's first `max` in its order, merged by outer tag (ties:
     * the team created first), which is the pool's order (sl__queue_head). */
    size_t per = max > SL__BACKFILL_WINDOW ? SL__BACKFILL_WINDOW : max;
    sl__ticket_t **all = malloc(p->n_teams * per * sizeof *all);
    double *tag = malloc(p->n_teams * per * sizeof *tag);
    size_t *len = calloc(p->n_teams, sizeof *len), *pos = calloc(p->n_teams, sizeof *pos);
    if (all && tag && len && pos) {
        for (size_t i = 0; i < p->n_teams; i++) {
            acc = 0;
            team_window(p->teams[i]->root, p->teams[i], &acc, all + i * per, tag + i * per, &len[i],
                        per);
        }
        while (n < per) {
            size_t best = p->n_teams;
            for (size_t i = 0; i < p->n_teams; i++)
                if (pos[i] < len[i] &&
                    (best == p->n_teams || tag[i * per + pos[i]] < tag[best * per + pos[best]]))
                    best = i;
            if (best == p->n_teams) break;
            out[n++] = all[best * per + pos[best]++];
        }
    }
    free(all);
    free(tag);
    free(len);
    free(pos);
    return n;
}

double sl__queue_head_outer(const sl__ticket_t *head)
{
    return head->team->base + head->cost / team_weight(head->team);
}

double sl__queue_place(const sl__pool_t *p, const sl__pteam_t *pt, double finish, uint64_t seq,
                       double cost, int64_t *count, double sums[SL_BUCKET_COUNT])
{
    *count = 0;
    for (int b = 0; b < SL_BUCKET_COUNT; b++)
        sums[b] = 0;
    double before = 0;
    inner_prefix(pt->root, finish, seq, count, sums, &before);
    double base = pt->root ? pt->base : p->vtime > pt->last_outer ? p->vtime : pt->last_outer;
    double outer = base + (before + cost) / team_weight(pt);
    for (size_t i = 0; i < p->n_teams; i++) {
        const sl__pteam_t *o = p->teams[i];
        if (o != pt && o->root) outer_prefix(o, outer, o->order < pt->order, count, sums);
    }
    return outer;
}

void sl__queue_served(sl__pool_t *p, sl__pteam_t *pt, double finish, double outer)
{
    if (finish > pt->vtime) pt->vtime = finish;
    pt->last_outer = outer;
    pt->base = outer;
    if (outer > p->vtime) p->vtime = outer;
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
    for (size_t i = 0; i < p->n_teams; i++)
        foreach_rec(p->teams[i]->root, fn, ud);
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
    double cost_sum = t->cost;
    if (t->left) cost_sum += t->left->cost_sum;
    if (t->right) cost_sum += t->right->cost_sum;
    if (cost_sum != t->cost_sum || !(t->cost >= 0)) {
        snprintf(msg, msg_len, "queue cost sum wrong at ticket %llu", (unsigned long long)t->id);
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
    int64_t total = 0;
    for (size_t i = 0; i < p->n_teams; i++) {
        const sl__ticket_t *prev = NULL;
        int64_t n = check_rec(p->teams[i]->root, &prev, msg, msg_len);
        if (n < 0) return -1;
        total += n;
    }
    if (total != p->queued) {
        snprintf(msg, msg_len, "queue holds %lld tickets but counts %lld", (long long)total,
                 (long long)p->queued);
        return -1;
    }
    return 0;
}
