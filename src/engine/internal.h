/* internal.h - the engine's data structures, shared by the files of src/engine only. */
#ifndef SL_ENGINE_INTERNAL_H
#define SL_ENGINE_INTERNAL_H

#include "sluice/engine.h"

#include "heap.h"
#include "map.h"

#include <stdarg.h>

#define SL__NAME_MAX       128 /* agent, pool, task, cache key, request id */
#define SL__SIG_MAX        256 /* failure_signature */
#define SL__CLASS_MAX      64  /* role and priority names */
#define SL__MAX_CLASSES    32
#define SL__ERR_WINDOW_MAX 64
#define SL__SEND_WINDOW_MAX_S 60 /* the largest send_window_s */
#define SL__GRANT_MARKS 64       /* closed marks a pool's grant history keeps (grants.c) */
#define SL__GRANT_MARK_SPLIT 8   /* a mark spans at most send_window_s / this */
#define SL__LEVEL_EPS      1e-6 /* tolerance of invariant checks on double levels */
#define SL__BACKFILL_WINDOW 16  /* queued tickets (the head included) backfill.c looks at */
#define SL__ADMIT_MAX_WAIT_CACHE_LIVES 10 /* a parked first call joins the queue after this */
#define SL__ADMIT_LEVEL_CACHE_LIVES 3 /* a level of remaining chain is worth this long a wait */
#define SL__GRAPH_DEPTH_MAX 64        /* remaining chains are counted up to this many tasks */

/* A prompt cache (per pool, per cache identity: lease.c). An agent's default cache is the
 * one named by its name, in the same map as every other (agent.c, sl__cache_get). */
typedef struct sl__cache {
    char *key;
    double used_at;        /* start (grant) of the last counted call: the provider runs the
                              cache life from the call's start; -INFINITY: cold. The cache
                              lapses at used_at + the pool's cache_ttl_s: a call with a
                              longer life (1h) sets it later (sl__cache_touch) */
    int64_t tokens;        /* size of the cached prefix last seen */
    int64_t refs;          /* leases and tickets that point here: never swept while > 0 */
} sl__cache_t;

/* Caps of an agent, of every agent ("*"), or of a team (caps.c). Never freed while
 * the engine lives, so leases may point at them. */
typedef struct sl__holder {
    char *key;        /* "a:<agent>", "a:*" or "t:<team>" */
    const char *name; /* key + 2 */
    bool team;
    bool inherited; /* an agent's copy of the "*" caps, kept in step with them */
    sl_caps_t caps;
    double budget_hour_usd, budget_day_usd; /* levels of the two budget buckets */
    double budget_last;                     /* time of their last refill */
} sl__holder_t;

/* A holder's share, rpm and concurrency state within one pool. */
typedef struct sl__capstate sl__capstate_t;
struct sl__capstate {
    char *key;
    const sl__holder_t *holder; /* whose caps these are */
    double level[SL_BUCKET_COUNT]; /* share buckets; REQUESTS is the rpm cap */
    double last;
    int64_t in_flight;
    int64_t check_count; /* scratch for sl_engine_check() */
    /* Tickets waiting only for this holder's max_concurrent, oldest first: out of the
     * pool's queue so that they never block its head (caps.c, "parked"). */
    struct sl__ticket *park_head, *park_tail;
    int64_t n_parked;
    int64_t n_woken; /* tickets moved from the park back to the queue, not ended yet */
};

/* The caps a request answers to: its agent's (own or "*") and its team's. */
typedef struct sl__capref {
    sl__holder_t *h[2];
    sl__capstate_t *st[2]; /* per pool, created at grant */
    double cost_usd;       /* reserved spend */
} sl__capref_t;

/* Per pool and model: the learned ratio of actual to estimated prompt tokens. */
#define SL__CALIB_WINDOW      64
#define SL__CALIB_MIN_SAMPLES 5
#define SL__CALIB_MIN_TOKENS  100
#define SL__OUTPUT_MIN_SAMPLES 20 /* output_reserve_learned: samples before it applies */
typedef struct sl__calib {
    char *model;
    double sample[SL__CALIB_WINDOW];
    int n, pos;
    int64_t total;
    double ratio;
    int64_t out_sample[SL__CALIB_WINDOW]; /* output tokens of the last counted settles */
    int out_n, out_pos;
    int64_t out_p95; /* their 95th percentile; 0 until SL__OUTPUT_MIN_SAMPLES */
} sl__calib_t;

/* A team's weight (team.c): one per name the engine has heard of, never freed while
 * the engine lives, so pools' team queues may point at it. */
#define SL__DEFAULT_TEAM "default" /* the queue team of agents outside every team */
#define SL__TEAM_WEIGHT_MIN 0.001
#define SL__TEAM_WEIGHT_MAX 1000.0
typedef struct sl__team {
    char *name;
    double weight;
} sl__team_t;

/* A team's queue within one pool (queue.c): the outer level of the hierarchical fair
 * queue. Its tickets are a treap ordered by their agents' (inner) finish tags; the
 * team's outer tag for its k-th ticket in that order is base + (the costs of tickets
 * 0..k) / weight, computed from subtree sums when asked, never stored. */
typedef struct sl__pteam {
    const sl__team_t *team;
    uint32_t order;            /* creation order in the pool: ties between teams */
    double vtime;              /* inner V: the inner finish tag of its latest grant */
    double last_outer;         /* the outer finish tag of its latest grant */
    double base;               /* while backlogged: the outer start tag of its head */
    struct sl__ticket *root;   /* treap ordered by (inner finish, seq) */
    struct sl__ticket *ws_root; /* its first calls parked by the working set (admit.c) */
} sl__pteam_t;

/* An agent's state within one pool. */
typedef struct sl__pagent {
    struct sl__agent *agent;
    double last_finish; /* WFQ finish tag of its last granted or queued request */
    double blocked_until; /* its own 429 report's retry-after holds its requests until then */
} sl__pagent_t;

typedef struct sl__agent {
    char *name;
    char *team; /* NULL: no team */
    char role[SL__CLASS_MAX];
    const struct sl__class *role_class; /* the class `role` was last copied from, or NULL */
    double weight;      /* weight of its last request */
    double weight_base; /* that request's role x unblocks x priority, before repeats */
    int64_t repeats;
    char *last_sig; /* NULL: the last settle had no failure signature */
    double err[SL__ERR_WINDOW_MAX];
    int err_n, err_pos;
    double err_sum;     /* sum of err[0..err_n), kept as errors come in */
    bool alert_estimate_error;
    int64_t leases, queued;
    int64_t tokens_in, tokens_out, got_429;
} sl__agent_t;

/* Fields shared by a granted lease and a queued ticket: what they reserve. */
typedef struct sl__need {
    int64_t n[SL_BUCKET_COUNT]; /* input, output, requests, tokens */
    int64_t cached_tokens;      /* the prefix the call expects from the cache */
    int64_t prompt_tokens;      /* input + cached as estimated (corrected), warm or cold:
                                   what the estimate error compares the billed prompt with */
    bool penalty;               /* the cached prefix is charged as uncached input */
    double cache_ttl_s;         /* the call's cache lifetime; 0 = the pool's cache_ttl_s */
    int64_t over[SL_BUCKET_COUNT]; /* above the starting capacity, up to the limit: left out
                                      of n (what must be in the bucket) and charged at the
                                      grant (lease.c fit_capacity) */
} sl__need_t;

/* A pool's grant history (grants.c): the reservations ever granted, per bucket, and when.
 * Grants close together share one mark (at most send_window_s / SL__GRANT_MARK_SPLIT
 * apart); the open mark is the newest, the closed ones a ring of the last SL__GRANT_MARKS. */
typedef struct sl__grant_mark {
    double at;                      /* its last grant */
    double cum[SL_BUCKET_COUNT];    /* reservations granted up to and including it */
} sl__grant_mark_t;

typedef struct sl__grants {
    double cum[SL_BUCKET_COUNT];    /* reservations ever granted (the open mark's) */
    double open_from, open_at;      /* the open mark's first and last grant (-inf: none) */
    sl__grant_mark_t closed[SL__GRANT_MARKS];
    int head, n;                    /* the oldest closed mark, and how many are kept */
} sl__grants_t;

typedef struct sl__lease {
    uint64_t id;
    uint64_t ticket; /* 0 when granted directly */
    struct sl__pool *pool;
    sl__pagent_t *pa;
    sl__cache_t *cache;
    sl__calib_t *calib;        /* NULL unless the request named a model */
    sl__calib_t *outs;         /* its (model, group) output percentile (sl__calib_outputs) */
    int64_t est_prompt_tokens; /* input + cached as the client estimated them */
    sl__capref_t caps;
    sl__need_t need;
    double weight;
    double granted_at;
    double waited_s;
    double ttl_s;
    /* The provider's room the pool believed in right after the grant, per bucket (level +
     * the margin's reserve), and that reserve: what a header of this call, written when
     * the provider took it, is compared with (headers.c). Not known for a lease restored
     * from a snapshot. */
    double room_at_grant[SL_BUCKET_COUNT];
    double reserve_at_grant[SL_BUCKET_COUNT];
    double cum_at_grant[SL_BUCKET_COUNT]; /* the pool's grants.cum right after its grant */
    bool room_known;
    bool claimed; /* the client knows about the grant */
    sl__hnode_t expiry;
    struct sl__lease *next_spare; /* on the engine's list of ended leases kept for reuse */
} sl__lease_t;

typedef struct sl__ticket {
    uint64_t id;
    struct sl__pool *pool;
    sl__pagent_t *pa;
    sl__cache_t *cache;
    sl__calib_t *calib;
    sl__calib_t *outs;
    int64_t est_prompt_tokens;
    sl__capref_t caps;
    sl__need_t need;
    double weight;
    sl__pteam_t *team; /* the team queue it is in */
    double cost;       /* its dominant share (weight.c): what it adds to the team's tag */
    double finish;     /* WFQ key within its team: (finish, seq) */
    uint64_t seq;
    double enqueued_at;
    double ttl_s;
    bool held;
    sl__hnode_t idle; /* deadline for idleness; not in the heap while held */
    struct sl__capstate *parked_on; /* waiting for this holder's release, not in the queue */
    struct sl__capstate *woken_by;  /* moved back to the queue by that holder's release */
    bool key_pinned;                /* its request named this key alone (keyqueue.c) */
    bool ws_parked;                 /* a first call parked by the working set (admit.c); then
                                       park_prev/park_next chain the pool's arrival list */
    struct sl__ticket *park_prev, *park_next;
    sl__hnode_t admit; /* parked first call: in the pool's ws_heap at its admission key (admit.c) */
    /* treap */
    struct sl__ticket *left, *right;
    uint32_t prio;
    int64_t count;
    double sum[SL_BUCKET_COUNT]; /* doubles: sums of 2^53-token needs must not overflow */
    double cost_sum;             /* summed cost of the subtree */
} sl__ticket_t;

typedef struct sl__pool {
    char *name;
    int index;
    sl_pool_config_t cfg;
    int64_t limit[SL_BUCKET_COUNT];
    double level[SL_BUCKET_COUNT];
    double last_refill;
    int margin_bp;                          /* margin in basis points: 8500 = 0.85 */
    int start_bp, floor_bp, up_bp, down_bp; /* the margin settings in basis points */
    int max_bp;                             /* the climb's ceiling: max(start, margin_max) */
    double clean_since;                     /* last 429 or margin raise: the recovery clock */
    uint64_t climb_id;    /* the engine's next id at the last margin change: a header of a
                             lease with a lower id was decided before it and vouches for no
                             step of the climb above the start (margin.c) */
    uint64_t cut_id;      /* the engine's next id at the last cut: a lease with a lower id
                             was granted before it, so its 429 is the same congestion event */
    double floor_since;                     /* when the margin reached the floor, or -1 */
    bool alert_floor;
    bool alert_spend_cap;
    double spend_cap_at;  /* the last spend-cap 429 */
    double blocked_until; /* a provider retry-after holds grants until then */
    double cold_until;    /* end of the cold-start window; 0 when none */
    unsigned cold_raised; /* bit b: bucket b was already raised by headers in the window */
    int64_t in_flight;
    int64_t n_parked;      /* tickets parked on a holder's max_concurrent (caps.c) */
    double lease_mean_s;   /* moving average of settled leases' durations (concurrency ETA) */
    int64_t lease_samples; /* settles averaged so far */
    /* Moving average, over counted settles, of the share of a lease's output_tokens and
     * tokens reservation given back at its settle (0 before any): the queue ETA counts the
     * requests ahead at what they keep (bucket.c sl__queue_eta_sums). */
    double refund_share[SL_BUCKET_COUNT];
    int64_t refund_samples;
    double reserved[SL_BUCKET_COUNT]; /* sum of the needs of leases in flight */
    double vtime;                     /* outer V: the outer finish tag of the latest grant */
    sl__pteam_t **teams;              /* team queues, in creation order */
    size_t n_teams;
    int64_t queued;                   /* tickets in all team queues */
    int64_t queued_pinned;            /* of those, whose request named this key alone */
    struct sl__ticket *ws_head, *ws_tail; /* first calls parked by the working set, by
                                             arrival (by tag: their teams' ws_root) */
    int64_t ws_n;
    sl__heap_t ws_heap; /* the same, by admission key: arrival - level x depth, then seq */
    double ws_promoted_at; /* when the working set's age bound last queued a first call */
    uint64_t seq;
    sl__heap_t lease_heap;  /* leases by expires_at */
    sl__heap_t ticket_heap; /* unheld tickets by idle deadline */
    sl__strmap_t pagents;   /* agent name -> sl__pagent_t */
    sl__strmap_t caches;    /* cache identity -> sl__cache_t (agents' default caches too) */
    size_t caches_sweep_at; /* sweep cold, unreferenced caches when this many exist */
    sl__strmap_t calibs;    /* model -> sl__calib_t */
    sl__strmap_t capstates; /* holder key -> sl__capstate_t */
    uint64_t granted_total, queued_total, rejected_total, upstream_429_total;
    sl__grants_t grants; /* when what was granted (grants.c) */
    struct sl__pool *req_parent; /* cfg.request_parent: the pool whose request bucket it
                                    draws from (reqparent.c); NULL: none, or not configured */
} sl__pool_t;

typedef struct sl__class {
    char name[SL__CLASS_MAX];
    double value;
} sl__class_t;

/* An ended ticket, or an ended lease outside the `ended` ring (one restored from an
 * earlier run), remembered for tombstone_ttl_s. */
typedef struct sl__tomb {
    uint64_t id;
    double at;
    bool lease; /* in `ended_old`, not in `tickets` */
} sl__tomb_t;

/* Ended leases are remembered in a byte ring indexed by id: the last SL__ENDED_MAX
 * ids issued (4 MiB; at 1,000 leases per second, 70 minutes of history). */
#define SL__ENDED_MIN ((size_t)1 << 16)
#define SL__ENDED_MAX ((size_t)1 << 22)

/* First answer to a request_id, remembered for idempotency_ttl_s. */
typedef struct sl__idem {
    char *key; /* agent "\x1f" request_id */
    double at;
    sl_decision_t first;
    struct sl__idem *next; /* FIFO by `at` */
} sl__idem_t;

typedef struct sl__task {
    char *id;
    char role[SL__CLASS_MAX];
    sl_task_state_t state;
    char **deps;
    size_t n_deps;
    int64_t depth, depth_next; /* its remaining chain (graph.c), valid at the engine's
                                  graph_gen == depth_gen */
} sl__task_t;

/* Ended states: of leases in the `ended` ring, of tickets in the ticket map (value =
 * lease << 4 | state << 1 | 1, where live tickets are stored as pointers). */
enum {
    SL__END_SETTLED = 1,
    SL__END_CANCELLED = 2,
    SL__END_REAPED = 3,
    SL__END_GRANTED = 4,  /* ticket only: the grant is in the upper bits */
    SL__END_EXPIRED = 5,  /* ticket only */
    SL__END_REJECTED = 6, /* ticket only */
};

struct sl_engine {
    sl_engine_config_t cfg;
    double now; /* the latest time seen */
    uint64_t next_id;
    uint64_t id_base; /* ids issued by this engine are above it (sl_engine_set_id_base) */
    uint64_t rng;
    sl__pool_t **pools;
    size_t n_pools;
    sl__strmap_t pool_map;
    sl__strmap_t agents;
    sl__u64map_t leases; /* id -> live sl__lease_t * */
    sl__lease_t *spare_leases; /* ended leases kept for reuse (no malloc per grant) */
    size_t n_spare_leases;
    uint8_t *ended;      /* id & (ended_cap - 1) -> SL__END_* of an ended lease */
    size_t ended_cap;
    sl__u64map_t ended_old; /* id -> SL__END_* of ended leases below the id base */
    sl__u64map_t tickets; /* id -> sl__ticket_t * or an ended state */
    sl__tomb_t *tombs;    /* ticket tombstones, ring buffer, oldest first */
    size_t tomb_head, tomb_len, tomb_cap;
    sl__strmap_t idem;
    sl__idem_t *idem_head, *idem_tail;
    sl__strmap_t tasks;
    uint64_t graph_gen, depth_gen; /* task writes; the writes the tasks' depths count */
    sl__strmap_t holders; /* holder key -> sl__holder_t */
    sl__strmap_t teams;   /* team name -> sl__team_t (weights) */
    sl__class_t roles[SL__MAX_CLASSES];
    size_t n_roles;
    sl__class_t prios[SL__MAX_CLASSES];
    size_t n_prios;
    sl_event_cb cb;
    void *cb_ud;
    /* The last error's message. A buffer of its own (allocated with the engine) so that
     * queries taking a const engine can still say why they failed. */
    char *errmsg;
};

#define SL__ERRMSG_LEN 512

/* engine.c */
int sl__fail(const sl_engine_t *e, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void sl__emit(sl_engine_t *e, sl_event_t *ev);
void sl__event_init(sl_event_t *ev, sl_event_kind_t kind, double now_s, const sl__pool_t *p);
int sl__tomb_add(sl_engine_t *e, uint64_t ticket, uint64_t value);
uint64_t sl__new_id(sl_engine_t *e);
void sl__lease_forget(sl_engine_t *e, uint64_t lease, int end_state);
int sl__lease_ended_state(const sl_engine_t *e, uint64_t lease);
uint32_t sl__rand32(sl_engine_t *e);
bool sl__valid_name(const char *s, size_t max_len);
sl__pool_t *sl__pool_find(const sl_engine_t *e, const char *name);

/* bucket.c */
double sl__capacity(const sl__pool_t *p, sl_bucket_t b);
bool sl__limited(const sl__pool_t *p, sl_bucket_t b);
void sl__refill(sl__pool_t *p, double now);
void sl__clamp_levels(sl__pool_t *p);
bool sl__fits(const sl__pool_t *p, const sl__need_t *need, double now);
/* The ETA of a request whose need plus the needs ahead of it are `prefix`, `ahead`
 * requests ahead; `limited_by` (may be NULL) receives what binds, or NULL. */
double sl__eta_for(const sl__pool_t *p, const double prefix[SL_BUCKET_COUNT], int64_t ahead,
                   double now, const char **limited_by);
void sl__need_as_sums(const sl__need_t *need, double out[SL_BUCKET_COUNT]);
void sl__adjust(sl__pool_t *p, sl_bucket_t b, int64_t delta_tokens);
/* Seconds until `releases` of `slots` leases in flight have ended, from the settled
 * leases' mean duration (the pool's lease_duration_prior_s until one was settled); the
 * first release is bounded by `earliest_expiry` (absolute, may be +INFINITY), which is
 * all there is with a prior of 0 and nothing settled. */
double sl__release_eta(const sl__pool_t *p, int64_t releases, int64_t slots, double earliest_expiry,
                       double now);
/* Records a settled lease's duration in the pool's moving average. */
void sl__record_lease_duration(sl__pool_t *p, double duration_s);
/* Records a counted settle of a lease that reserved `reserved` and was charged `charged`
 * (per bucket) into the pool's refund_share of the output_tokens and tokens buckets. */
void sl__record_refund(sl__pool_t *p, const int64_t reserved[SL_BUCKET_COUNT],
                       const int64_t charged[SL_BUCKET_COUNT]);
/* What the buckets must hold before a request of `own` behind requests whose needs sum to
 * `ahead` is granted: `ahead` counted at the share its requests keep after their settles
 * (output_tokens and tokens: 1 - refund_share; the others whole) plus `own` whole. */
void sl__queue_eta_sums(const sl__pool_t *p, const double ahead[SL_BUCKET_COUNT],
                        const int64_t own[SL_BUCKET_COUNT], double out[SL_BUCKET_COUNT]);

/* margin.c */
/* The pool's margin as a fraction (inline: every fit and cost asks for it). */
static inline double sl__margin(const sl__pool_t *p)
{
    return p->margin_bp / 10000.0;
}
int sl__to_bp(double ratio);
void sl__margin_advance(sl_engine_t *e, sl__pool_t *p, double now);
/* A 429 against lease `lease_id`: cuts the margin once per congestion event (a lease
 * granted before the last cut belongs to that cut's event); returns whether it cut. */
bool sl__margin_cut(sl_engine_t *e, sl__pool_t *p, uint64_t lease_id, double now);
/* What the provider's `remaining` headers of one report, from the call of lease `lease_id`
 * (0: no lease), said before they are applied: `lowered`: one shows less room than the
 * pool believes, which takes a margin above the start back to the start; else
 * `agreed_bits` (bit b: bucket b's header showed at least that room): from a lease granted
 * since the last margin change, one step of the climb above the start, which adds its
 * room to those buckets' levels. */
void sl__margin_headers(sl_engine_t *e, sl__pool_t *p, bool lowered, unsigned agreed_bits,
                        uint64_t lease_id, double now);
double sl__margin_next_step_at(const sl__pool_t *p);
double sl__margin_wait_for(const sl__pool_t *p, const sl__need_t *need, double now);

/* queue.c */
/* Inserts t (t->team, t->finish, t->seq, t->cost set; a key no queued ticket has) into
 * its team's queue; a team that was idle starts at max(V, its last outer tag): no
 * credit for idle time. */
void sl__queue_insert(sl__pool_t *p, sl__ticket_t *t);
/* Takes `t` out of p's queue; `t` must be in it (asserted in debug builds). */
void sl__queue_remove(sl__pool_t *p, sl__ticket_t *t);
/* The next ticket to serve: the head of the team whose head has the lowest outer tag. */
sl__ticket_t *sl__queue_head(const sl__pool_t *p);
int64_t sl__queue_depth(const sl__pool_t *p);
/* The outer tag of the queue's head (sl__queue_head). */
double sl__queue_head_outer(const sl__ticket_t *head);
/* Where a request of `cost` with inner key (finish, seq) in team pt stands, queued or
 * as if inserted (a queued ticket is not ahead of itself): the requests ahead of it,
 * in its team those of lower inner key, in another team those of lower outer tag
 * (their count and summed needs), and its outer tag, returned. */
double sl__queue_place(const sl__pool_t *p, const sl__pteam_t *pt, double finish, uint64_t seq,
                       double cost, int64_t *count, double sums[SL_BUCKET_COUNT]);
/* Records a grant of team pt with inner tag `finish` and outer tag `outer`. */
void sl__queue_served(sl__pool_t *p, sl__pteam_t *pt, double finish, double outer);
int sl__queue_check(const sl__pool_t *p, char *msg, size_t msg_len);
/* A treap of tickets keyed by (finish, seq) with subtree sums: insert (a key it does not
 * hold), remove (a ticket it holds), and the lowest key (NULL when empty). The team
 * queues are such trees; so is the working set's list of parked first calls (admit.c). */
void sl__treap_insert(sl__ticket_t **root, sl__ticket_t *t);
void sl__treap_remove(sl__ticket_t **root, sl__ticket_t *t);
sl__ticket_t *sl__treap_first(sl__ticket_t *root);
/* The head of one team's queue (lowest inner key), or NULL. */
const sl__ticket_t *sl__queue_team_head(const sl__pteam_t *pt);
/* The first `max` (at most SL__BACKFILL_WINDOW) queued tickets in the pool's order,
 * the head first, into out; returns their count (0 when out of memory). */
size_t sl__queue_window(const sl__pool_t *p, sl__ticket_t **out, size_t max);
void sl__queue_foreach(sl__pool_t *p, void (*fn)(sl__ticket_t *t, void *ud), void *ud);

/* weight.c */
const sl__class_t *sl__role_find(const sl_engine_t *e, const char *name);
const sl__class_t *sl__prio_find(const sl_engine_t *e, const char *name);
double sl__cost(const sl__pool_t *p, const sl__need_t *need);

/* agent.c */
/* A malloc'd copy of `s` (ISO C has no strdup); NULL when out of memory. */
char *sl__dup_str(const char *s);
sl__agent_t *sl__agent_get(sl_engine_t *e, const char *name, bool create);
sl__pagent_t *sl__pagent_get(sl__pool_t *p, sl__agent_t *a, bool create);
/* The cache of `identity` in p (an agent's name for its default cache: one namespace), or
 * NULL when it has none and `create` is false or memory ran out. */
sl__cache_t *sl__cache_get(sl__pool_t *p, const char *identity, bool create);
/* Drops caches that are cold at `now` and that no lease or ticket points at, once the
 * pool holds caches_sweep_at of them (amortised O(1) per new cache). */
void sl__cache_sweep(sl__pool_t *p, double now);
/* Forgets the cache of `identity` in p: freed, or, while a lease or ticket points at it,
 * left as a cache never settled (cold, and a first call's for the working set). */
void sl__cache_forget(sl__pool_t *p, const char *identity);
/* Records a counted call of `c` that started at start_s and keeps the prefix ttl_s (0 =
 * the pool's cache_ttl_s): the cache lapses at the later of its current end of life and
 * start_s + ttl_s, kept as used_at = end of life - the pool's cache_ttl_s (lease.c). */
void sl__cache_touch(const sl__pool_t *p, sl__cache_t *c, double start_s, double ttl_s);
double sl__agent_record_error(sl_engine_t *e, sl__pool_t *p, sl__agent_t *a, int window,
                              double limit, double err);
int sl__agent_record_signature(sl__agent_t *a, const char *sig);
double sl__agent_mean_error(const sl__agent_t *a);
void sl__agent_free(sl__agent_t *a);

/* caps.c */
/* Whether agent `agent`'s caps hold nothing a new agent's would not: none, or a copy of
 * "*" with nothing in flight or parked and every bucket and budget full at `now`. */
bool sl__caps_agent_fresh(const sl_engine_t *e, const char *agent, double now);
/* Frees agent `agent`'s copy of "*" and its state in every pool (when fresh: forget.c). */
void sl__caps_agent_drop(sl_engine_t *e, const char *agent);
void sl__caps_resolve(sl_engine_t *e, const sl__agent_t *a, const char *agent_name,
                      sl__capref_t *out);
/* 0: allowed; 1: rejected (reason, retry_after_s set); SL_ECAPACITY: never allowed. When
 * it is 1 and `park_on` is not NULL, *park_on is the holder state whose max_concurrent
 * alone holds the request back (nothing else does), or NULL. */
int sl__caps_check(sl_engine_t *e, const sl__pool_t *p, const sl__capref_t *c,
                   const sl__need_t *need, double now, const char **reason, double *retry_after_s,
                   sl__capstate_t **park_on);
/* The holder state of `c` whose max_concurrent is reached in p, or NULL. */
sl__capstate_t *sl__caps_at_concurrency(const sl__pool_t *p, const sl__capref_t *c);
/* Seconds until a slot of st's holder frees for a request behind `ahead` others waiting
 * for it (the pool's release formula); *reason receives agent_cap or team_cap. */
double sl__caps_release_eta(const sl__pool_t *p, const sl__capstate_t *st, int64_t ahead,
                            double now, const char **reason);
/* Parks t on st (at the front when it was already woken once), out of the queue. */
void sl__caps_park(sl__pool_t *p, sl__capstate_t *st, sl__ticket_t *t, bool front);
/* Takes a parked ticket off its holder's list; the caller ends or queues it. */
void sl__caps_unpark(sl__pool_t *p, sl__ticket_t *t);
/* Moves st's parked tickets back to the queue while its holder has free slots. */
void sl__caps_wake(sl__pool_t *p, sl__capstate_t *st);
/* Number of tickets parked on st ahead of t. */
int64_t sl__caps_parked_ahead(const sl__ticket_t *t);
/* Removes a ticket from wherever it waits (the queue or a park). */
void sl__ticket_detach(sl__pool_t *p, sl__ticket_t *t);
double sl__caps_cost_usd(const sl__pool_t *p, int64_t in_tokens, int64_t out_tokens);
/* Anthropic prices a 5-minute cache write at 1.25x the base input price and a 1-hour write
 * at 2x (docs/design.md "Cache lifetimes"). */
#define SL__CACHE_WRITE_5M_PRICE 1.25
#define SL__CACHE_WRITE_1H_PRICE 2.0
/* What a settled call cost: sl__caps_cost_usd of its input and output, plus the premium
 * of its cache writes over the input price (cc tokens written, cc_1h of them for an hour). */
double sl__caps_billed_cost_usd(const sl__pool_t *p, int64_t in_tokens, int64_t cc, int64_t cc_1h,
                                int64_t out_tokens);
/* The most output tokens the share caps of `c` let a request with `in_tokens` of input
 * reserve (output and combined buckets), or -1 when no share cap limits output. */
int64_t sl__caps_output_fit(const sl__pool_t *p, const sl__capref_t *c, int64_t in_tokens);
int sl__caps_reserve(sl__pool_t *p, sl__capref_t *c);
void sl__caps_take(sl__pool_t *p, sl__capref_t *c, const sl__need_t *need, double now);
void sl__caps_give(sl__pool_t *p, sl__capref_t *c, const int64_t delta[SL_BUCKET_COUNT],
                   double delta_usd, double now);
void sl__caps_end(sl__capref_t *c);

/* team.c */
/* The team queue of `name` in pool p, created (weight 1 unless configured) when
 * `create`; NULL when out of memory. */
sl__pteam_t *sl__pteam_get(sl_engine_t *e, sl__pool_t *p, const char *name, bool create);
void sl__teams_free_pool(sl__pool_t *p);

/* calibrate.c */
void sl__calib_update_ratio(sl__calib_t *c);
sl__calib_t *sl__calib_get(sl__pool_t *p, const char *model, bool create);
double sl__calib_ratio(const sl__calib_t *c);
void sl__calib_record(sl__calib_t *c, int64_t estimated_tokens, int64_t actual_tokens);
/* Records the output of a counted settle of a lease that named this model. */
/* Records a counted call's output. One that stopped exactly at its lease's reservation
 * (`reserved_tokens`: a capped call cut off there) is recorded as twice that figure. */
void sl__calib_record_output(sl__calib_t *c, int64_t output_tokens, int64_t reserved_tokens);
/* The output samples of `model`'s calls in agent group `group` (the request's role): a
 * calibration entry of its own, keyed model US group, whose ratio is unused. NULL when
 * absent and !create, or out of memory. */
sl__calib_t *sl__calib_outputs(sl__pool_t *p, const char *model, const char *group, bool create);
/* Whether a calibration entry is such an output entry (its key holds a US). */
bool sl__calib_is_outputs(const sl__calib_t *c);
/* Recomputes the output 95th percentile from the samples held (after a restore). */
void sl__calib_update_output(sl__calib_t *c);

/* reqparent.c: the request bucket a pool with request_parent shares with its parent. */
/* Links p to its parent, and the pools that name p as theirs to p (after p's configure). */
void sl__req_parent_link(sl_engine_t *e, sl__pool_t *p);
/* The parent whose request bucket p draws from, when that bucket is limited; else NULL. */
const sl__pool_t *sl__req_parent(const sl__pool_t *p);
/* The parent q's request level at `now`, as its refill would make it (q is not changed). */
double sl__req_parent_level(const sl__pool_t *q, double now);
/* Takes `requests` from p's parent's bucket (a negative count gives them back, up to its
 * capacity), once the parent is refilled to `now`. Nothing when p has no limited parent. */
void sl__req_parent_charge(sl__pool_t *p, int64_t requests, double now);

/* pool.c */
void sl__pool_free(sl__pool_t *p);
void sl__pool_advance(sl_engine_t *e, sl__pool_t *p, double now);
void sl__pool_drain(sl_engine_t *e, sl__pool_t *p, double now);
/* keyqueue.c: p (a key of a pool of several keys, its queue empty) grants its siblings'
 * queued tickets that fit it and not their own key, the longest waiting first. */
void sl__keys_drain(sl_engine_t *e, sl__pool_t *p, double now);
/* A request on key p, as sl__keys_eta() sees it: its agent's entry, cache and need in p,
 * whether it named p alone, whether caps hold it, and where it stands in p's queue (the
 * needs of the tickets ahead with its own, `ahead` of them). */
typedef struct sl__keys_ask {
    sl__pagent_t *pa;
    const sl__cache_t *cache;
    const sl__need_t *need;
    bool pinned;
    bool capped;
    const double *sums;
    int64_t ahead;
} sl__keys_ask_t;
/* The ETA of a request queued on key p over the keys of its group: the least of own_s
 * (p's own ETA) and, for each other key with an empty queue, when it would fit the
 * tickets ahead and this one. own_s (and *limited_by unchanged) when p has no group, the
 * request is pinned or capped, p's queue holds a pinned ticket, or another key has a
 * queue of its own. */
double sl__keys_eta(sl_engine_t *e, sl__pool_t *p, const sl__keys_ask_t *ask, double own_s,
                    double now, const char **limited_by);
/* When the next sibling ticket sl__keys_drain would take fits p (INFINITY: none). */
double sl__keys_next_wakeup(const sl_engine_t *e, sl__pool_t *p);
double sl__pool_next_wakeup(const sl__pool_t *p);
void sl__pool_reject_unfit(sl_engine_t *e, sl__pool_t *p, double now);
/* Raises or clears the pool's spend_cap alert (an ALERT event when it changes). */
void sl__spend_cap_alert(sl_engine_t *e, sl__pool_t *p, bool active, double now);

/* lease.c */
/* The fair-queue tags of a grant: its team, inner and outer finish tags. */
typedef struct sl__tags {
    sl__pteam_t *team;
    double finish, outer;
} sl__tags_t;
int sl__grant(sl_engine_t *e, sl__pool_t *p, sl__pagent_t *pa, sl__cache_t *cache,
              const sl__need_t *need, const sl__capref_t *caps, double weight,
              const sl__tags_t *tags, double ttl_s, uint64_t ticket, double waited_s, double now,
              sl__lease_t **out);
/* Grants the waiting ticket `t` (out of the queue or the parked list already) with `tags`
 * and ends it as granted. Returns SL_OK, or SL_ENOMEM with `t` untouched: the caller puts
 * it back where it was. One path for the drain, backfilling and the working set. */
int sl__grant_ticket(sl_engine_t *e, sl__pool_t *p, sl__ticket_t *t, const sl__tags_t *tags,
                     double now);
/* A queued ticket whose prompt cache lapsed while it waited (the cache life runs from the
 * start of the last call that used it): the provider will bill the prefix again, so its
 * need grows by the prefix, once, before it is granted; the queue's sums follow and its
 * place stays. Left as it is when the larger need could never fit the pool. Returns true
 * when the need changed. */
bool sl__ticket_cache_lapsed(sl__pool_t *p, sl__ticket_t *t, double now);

/* Lets a grant remember the calibration it came with (called right after sl__grant). */
void sl__lease_set_calib(sl__lease_t *l, sl__calib_t *c, sl__calib_t *outs,
                         int64_t est_prompt_tokens);
void sl__lease_end(sl_engine_t *e, sl__lease_t *l, int end_state, bool refund, double now);
void sl__ticket_end(sl_engine_t *e, sl__ticket_t *t, int end_state, uint64_t lease, double now);
void sl__fill_grant(const sl__lease_t *l, sl_decision_t *out);

/* backfill.c */
/* Whether a request of `need` (caps, team pt, dominant-share cost) may be granted now past
 * the blocked `head`: it fits now and takes only what the head does not need now (every
 * bucket that holds the head's need keeps it, one it waits for is not touched), a
 * concurrency slot stays free for the head, it shares no max_concurrent holder with the
 * head, and the head stays the pool's head. */
bool sl__backfill_admits(sl_engine_t *e, const sl__pool_t *p, sl__ticket_t *head,
                         const sl__need_t *need, const sl__capref_t *caps, const sl__pteam_t *pt,
                         double cost, double now);
/* The tags of a backfill grant of team pt: its inner V unmoved, the outer tag its team's
 * base plus cost / team weight (the team pays). */
sl__tags_t sl__backfill_tags(const sl__pool_t *p, sl__pteam_t *pt, double cost);
/* Grants what sl__backfill_admits allows among the first SL__BACKFILL_WINDOW queued
 * tickets, in queue order, past the blocked `head`. */
void sl__backfill(sl_engine_t *e, sl__pool_t *p, sl__ticket_t *head, double now);
/* When the refill alone next lets a queued ticket among the first SL__BACKFILL_WINDOW pass
 * the blocked `head` (its buckets hold its need plus the head's), after p's last refill;
 * +INFINITY when none will (backfilling off, no slot to lend, a need that can never fit
 * beside the head's). For the pool's wake-up: without it such a ticket waited for the
 * next unrelated event, often the head's own grant. */
double sl__backfill_next_at(const sl__pool_t *p, const sl__ticket_t *head);
/* Seconds until backfilling would grant a request of `need` (caps, team pt, cost) standing
 * in the window behind the blocked queue head, `upto` the needs of the tickets ahead of it
 * (the head's included) plus its own: the buckets it uses hold them all before the head
 * fits, and nothing but the refill holds it back; +INFINITY when it will not pass that
 * way, or would pass now. *limited_by receives the bucket it waits for. */
double sl__backfill_eta(sl_engine_t *e, const sl__pool_t *p, const sl__need_t *need,
                        const double upto[SL_BUCKET_COUNT], const sl__capref_t *caps,
                        const sl__pteam_t *pt, double cost, double now, const char **limited_by);

/* admit.c */
/* Whether a request with this cache identity (NULL: never seen) is the first call of a
 * task under the pool's working set: its identity was never settled. */
bool sl__admit_is_first_call(const sl__pool_t *p, const sl__cache_t *cache);
/* Whether a first call may go now: nothing queued, no first call parked before it. */
bool sl__admit_open(const sl__pool_t *p);
/* Parks a first call out of the queue / takes it back off (the caller queues or ends it). */
/* The admission key of a first call parked at `enqueued_at` whose task has remaining chain
 * `depth` (1 without a task graph): lower goes first. */
double sl__admit_key(const sl__pool_t *p, double enqueued_at, int64_t depth);
/* Parks t (its admit.at set to its key; the caller reserved room in p->ws_heap). */
void sl__admit_park(sl__pool_t *p, sl__ticket_t *t);
void sl__admit_unpark(sl__pool_t *p, sl__ticket_t *t);
/* Moves the oldest first call parked past its bound into the queue at its tag, at most
 * one per cache life. */
void sl__admit_promote(sl__pool_t *p, double now);
/* The parked first call to admit next: of the teams' first ones, the lowest outer tag. */
sl__ticket_t *sl__admit_next(const sl__pool_t *p);
/* Grants parked first calls, in tag order, while nothing is queued and they fit. */
void sl__admit_grant(sl_engine_t *e, sl__pool_t *p, double now);
/* When the oldest parked first call joins the queue (+INFINITY: none parked). */
double sl__admit_next_at(const sl__pool_t *p);
/* A parked first call's ETA: behind every queued and parked request (the need of one
 * already `parked` is among them); *ahead receives their count. */
double sl__admit_eta(const sl__pool_t *p, const sl__need_t *need, bool parked, double now,
                     int64_t *ahead);
void sl__admit_free(sl__pool_t *p);
/* A settle made `cache` known for the first time: its parked first calls continue a task
 * now, and join the queue at their tags (the caller drains). */
void sl__admit_settled(sl__pool_t *p, const sl__cache_t *cache);
/* The working set was turned off: every parked first call joins the queue at its tag. */
void sl__admit_release_all(sl__pool_t *p);

/* headers.c */
/* Validates the headers (apply false) or applies them (true); `lease_id` is the lease whose
 * call returned them (0: none), which the margin's climb asks for (margin.c); `refused`:
 * that call got a 429, so the headers do not count it and vouch for no step. */
int sl__resync(sl_engine_t *e, sl__pool_t *p, const char *const *names, const char *const *values,
               size_t count, uint64_t lease_id, double sent_after_s, bool refused, double now,
               bool apply, int *changed);
/* grants.c: records lease `l`'s grant of `need` in its pool's history at `now` and sets its
 * cum_at_grant. */
void sl__grants_record(sl__pool_t *p, sl__lease_t *l, const int64_t *need, double now);
/* The reservations of bucket `b` granted after lease `l` (of pool `p`) and at most
 * send_window_s after it, or `sent_after_s` when that is known (>= 0) and shorter: calls
 * that may have reached the provider before `l`'s, so a header of `l`'s call may count
 * them. 0 when the history no longer reaches back to the end of that window (excusing
 * nothing lowers more, never overbooks). */
double sl__grants_after(const sl__pool_t *p, const sl__lease_t *l, sl_bucket_t b,
                        double sent_after_s);
/* sl_engine_resync of pool `p` (found) with headers of lease `lease_id`'s call (0: none). */
int sl__resync_pool(sl_engine_t *e, sl__pool_t *p, uint64_t lease_id, double sent_after_s,
                    const char *const *names,
                    const char *const *values, size_t count, double now_s, int *changed);

#endif
