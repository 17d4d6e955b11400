/* engine.h - libsluice: the quota engine that makes every lease decision.
 *
 * One sl_engine_t owns pools (one provider key and model class each), the agents
 * that ask them for capacity, the leases in flight, the weighted fair queue of
 * waiting requests and the task graph. The engine does no I/O, starts no threads
 * and holds no global state: the caller passes the current time `now_s` (seconds,
 * Unix time as a double) to every call that depends on it, and learns about things
 * that happen on their own (a queued request granted, a lease reaped, an alert) from
 * an event callback. The semantics are docs/design.md's "Engine semantics".
 *
 * Errors: every function that can fail returns 0 (SL_OK) or a negative SL_E* code
 * (common.h), and on error leaves the engine exactly as it was. sl_engine_errmsg()
 * then holds a sentence naming the field and the value. An engine is not thread-safe: callers
 * serialise access (sluiced runs it on one event loop).
 */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes (SL_OK, SL_EINVAL, ...) and sl_strerror() are in common.h. */

/* The largest token count the engine accepts (2^53, exact in a double). */
#define SL_TOKENS_MAX ((int64_t)1 << 53)

/* Token and request buckets of a pool. */
typedef enum sl_bucket {
    SL_BUCKET_INPUT = 0, /* input tokens per minute (uncached input) */
    SL_BUCKET_OUTPUT,    /* output tokens per minute */
    SL_BUCKET_REQUESTS,  /* requests per minute */
    SL_BUCKET_TOKENS,    /* combined input + output tokens per minute (OpenAI style) */
    SL_BUCKET_COUNT
} sl_bucket_t;

/* Name of a bucket as used in the API and metrics: "input_tokens", ... */
const char *sl_bucket_name(sl_bucket_t b);

/* A pool's configuration. sl_pool_config_init() fills the documented defaults. */
typedef struct sl_pool_config {
    int64_t input_tpm;             /* 0 = not limited */
    int64_t output_tpm;            /* 0 = not limited */
    int64_t rpm;                   /* 0 = not limited */
    int64_t tokens_tpm;            /* combined limit; 0 = not limited */
    int64_t concurrency;           /* max leases in flight; 0 = not limited */
    double margin_start;           /* 0.85: capacity = limit x margin */
    double margin_floor;           /* 0.60 */
    double margin_step_down;       /* 0.05 per 429 against a granted lease */
    double margin_step_up;         /* 0.01 per clean recover_every_s */
    double margin_max;             /* 0.97: the ceiling of a climb above margin_start, which
                                      the provider's headers must vouch for (docs/design.md
                                      "Margin"); at or below margin_start: no climb */
    double recover_every_s;        /* 180 */
    double margin_floor_alert_s;   /* 600: margin_at_floor after this long at the floor */
    double lease_ttl_s;            /* 120 */
    double max_lease_ttl_s;        /* 600 */
    double max_queue_wait_s;       /* 60: a longer ETA is rejected */
    double cache_ttl_s;            /* 300 */
    bool cache_reads_count;        /* false: cache reads do not count against input TPM */
    int64_t cache_bump_min_tokens; /* 10000 */
    double cache_bump;             /* 1.5 */
    double estimate_error_alert;   /* 0.20: alert when the mean error is above this */
    int estimate_error_window;     /* 20 leases (1..64) */
    double claim_timeout_s;        /* 30: a lease granted from the queue that nobody
                                      fetched in this time is cancelled with a refund */
    double ticket_idle_s;          /* 120: a queued ticket nobody waits on or polls for
                                      this long expires */
    double price_input_per_mtok;   /* USD per million input tokens (budgets); 0 = unknown */
    double price_output_per_mtok;  /* USD per million output tokens */
    bool output_reserve_learned;   /* false: reserve max_tokens (output_tokens); true: for a
                                      request naming a model, the 95th percentile of the
                                      outputs of the model's last 64 counted settles (once
                                      20 are known) when that is lower */
    double spend_cap_reset_s;      /* 3600: the spend_cap alert clears this long after the
                                      last spend-cap 429 (0 = only when a call succeeds) */
    double lease_duration_prior_s; /* 30: D, the mean lease duration of the concurrency
                                      ETA (k x D / slots), until a settle has measured it;
                                      0 = no prior: the earliest lease expiry bounds it */
    bool backfill;                 /* true: a queued call that does not delay the blocked
                                      head's ETA is granted past it (EASY backfilling) */
    bool working_set;              /* false; true: the first call of a task (a cache
                                      identity never settled) waits, parked, while any
                                      request is queued (docs/design.md, "Working set") */
    int64_t key_group;             /* 0: none. Pools of one nonzero key_group are the keys
                                      of one pool of several keys: a key whose own queue
                                      is empty grants the queued tickets of the others when
                                      they fit it and not their own key (one queue over
                                      the keys; docs/design.md, "A pool of several keys") */
    bool request_parent;           /* false. true: this pool, named PARENT:NAME, has no
                                      request bucket of its own (rpm 0): each grant takes its
                                      request from pool PARENT's, and a refund gives it back
                                      there (a long-context pool, whose calls count against
                                      the standard RPM; docs/design.md "Long context") */
    double send_window_s;          /* 5: how long after its grant a lease's call may still
                                      be sent. A header of a lease is compared with the pool
                                      at its grant, less the reservations of leases granted
                                      in this window after it (their calls may have reached
                                      the provider first: docs/design.md "A later grant
                                      taken first"); 0 excuses none. At most 60 */
} sl_pool_config_t;

/* Fills `cfg` with the defaults above (all limits 0). */
void sl_pool_config_init(sl_pool_config_t *cfg);

/* Engine-wide settings. sl_engine_config_init() fills the defaults. */
typedef struct sl_engine_config {
    double tombstone_ttl_s;   /* 600: how long an ended lease or ticket is remembered, so a
                                 second settle says already_settled rather than not_found */
    double idempotency_ttl_s; /* 600: how long a request_id is remembered */
    double weight_floor;      /* 0.1 */
} sl_engine_config_t;

void sl_engine_config_init(sl_engine_config_t *cfg);

typedef struct sl_engine sl_engine_t;

/* Event kinds reported through the event callback. */
typedef enum sl_event_kind {
    SL_EV_GRANTED,          /* a lease was granted (directly, or to a queued ticket) */
    SL_EV_QUEUED,           /* a request was queued (ticket) */
    SL_EV_REJECTED,         /* a request was rejected with retry_at */
    SL_EV_SETTLED,          /* a lease was settled */
    SL_EV_CANCELLED,        /* a lease was cancelled (full refund) */
    SL_EV_REAPED,           /* a lease expired: dropped without refund */
    SL_EV_UNCLAIMED,        /* a lease granted from the queue was never fetched: refunded */
    SL_EV_TICKET_CANCELLED, /* a queued ticket was given up */
    SL_EV_TICKET_EXPIRED,   /* a queued ticket nobody waited on expired */
    SL_EV_TICKET_REJECTED,  /* a queued ticket can no longer fit (margin cut): rejected */
    SL_EV_UPSTREAM_429,     /* a settle reported a 429 from the provider */
    SL_EV_MARGIN,           /* the margin changed */
    SL_EV_ALERT,            /* an alert was raised or cleared (see `alert`, `active`) */
    SL_EV_LIMIT_ADOPTED,    /* a provider header changed a configured limit */
    SL_EV_RESYNC,           /* a provider header lowered a bucket level */
} sl_event_kind_t;

/* One event. Pointers are valid only during the callback. */
typedef struct sl_event {
    sl_event_kind_t kind;
    double now_s;
    const char *pool;
    const char *agent;    /* NULL for pool-wide events */
    uint64_t lease;       /* 0 when none */
    uint64_t ticket;      /* 0 when none */
    int64_t input_tokens; /* charged (grant), actual (settle), refunded (cancel) */
    int64_t output_tokens;
    int64_t adjust_input_tokens; /* settle: reserved - actual (positive = refund) */
    int64_t adjust_output_tokens;
    double weight;
    double eta_s;    /* queued */
    double retry_at; /* rejected */
    double waited_s; /* granted from the queue: time spent queued */
    double estimate_error;
    double margin;      /* margin events and 429s: the margin after the change */
    const char *reason; /* rejections: the reason; 429: "rate" or "spend_cap" */
    const char *alert;  /* alert name: margin_at_floor, estimate_error, spend_cap */
    bool active;        /* alert raised (true) or cleared (false) */
    sl_bucket_t bucket; /* resync / limit adopted */
    double value;       /* resync: new level; limit adopted: new limit */
    bool not_counted;   /* settled: a failed call, not an estimate-error sample */
} sl_event_t;

typedef void (*sl_event_cb)(const sl_event_t *ev, void *userdata);

/* Creates an engine. `cfg` may be NULL for the defaults. The roles planner 3,
 * reviewer 2, worker 1 and the priorities high 4, normal 1, low 0.25 are
 * predefined. Returns NULL when out of memory. */
sl_engine_t *sl_engine_new(const sl_engine_config_t *cfg);

/* Frees the engine and everything it owns. NULL is allowed. No events are sent. */
void sl_engine_free(sl_engine_t *e);

/* Sets the callback that receives every event (NULL to stop). Called synchronously
 * from inside engine calls; it must not call back into the engine. */
void sl_engine_set_event_cb(sl_engine_t *e, sl_event_cb cb, void *userdata);

/* The message of the last error: names the field and the value. Never NULL. */
const char *sl_engine_errmsg(const sl_engine_t *e);

/* Defines or redefines a role's base weight (> 0, finite). Existing agents keep
 * their leases; weights of later requests use the new value. */
int sl_engine_set_role(sl_engine_t *e, const char *role, double base_weight);

/* Defines or redefines a priority class's factor (> 0, finite). */
int sl_engine_set_priority(sl_engine_t *e, const char *priority, double factor);

/* Caps on top of the pool, for one agent, every agent ("*"), or a team (docs/design.md
 * "Beyond the one pool"). 0 means "no cap" for every field. Share, rpm and
 * concurrency caps apply per pool; budgets across pools, priced with each pool's
 * price_*_per_mtok. A request the caps do not allow now is REJECTED with reason
 * "agent_cap", "team_cap" or "budget_exhausted" and the time the cap allows it; a
 * need that can never pass a cap is SL_ECAPACITY. Grants from the queue take from
 * the caps when granted (which may leave a cap in debt, like a pool's bucket). */
typedef struct sl_caps {
    double max_share;           /* (0, 1]: at most this fraction of each limited token
                                   bucket's per-minute limit, per minute */
    int64_t max_rpm;            /* requests per minute */
    int64_t max_concurrent;     /* leases in flight */
    double budget_usd_per_hour; /* spend per hour (refilled continuously) */
    double budget_usd_per_day;  /* spend per day (refilled continuously) */
} sl_caps_t;

/* Sets the caps of agent `holder` ("*" = every agent without caps of its own), or of
 * team `holder` when `is_team`. NULL or all-zero caps remove them. Errors: SL_EINVAL
 * (bad name, negative, NaN or a share above 1), SL_ENOMEM. */
int sl_engine_set_caps(sl_engine_t *e, const char *holder, bool is_team, const sl_caps_t *caps);

/* After caps were changed (sl_engine_set_caps, e.g. by a reload): moves the tickets
 * parked on a holder's max_concurrent back to their pool's queue while the holder now
 * has free slots (a cap raised or lifted), and drains the pools, so none waits for a
 * release it no longer needs. Call it once the whole batch of caps is set: between two
 * calls a cap may be lifted only for a moment. */
void sl_engine_wake_parked(sl_engine_t *e);

/* Puts `agent` in `team` (NULL removes it from its team). Takes effect for later
 * requests. Errors: SL_EINVAL, SL_ENOMEM. */
int sl_engine_set_agent_team(sl_engine_t *e, const char *agent, const char *team);

/* Sets `team`'s weight in the pools' fair queue (finite, in [0.001, 1000]; a team never
 * set weighs 1). Backlogged teams are served in proportion to their weights in
 * dominant share, whatever their numbers of agents; inside a team its agents' own
 * weights (role, unblocks, priority) order them. An agent outside every team is in
 * the team "default". Takes effect at once, for queued requests too. Errors:
 * SL_EINVAL (the message names the team and the value), SL_ENOMEM. */
int sl_engine_set_team_weight(sl_engine_t *e, const char *team, double weight);

/* The weight of `team` (1 when it was never set). */
double sl_engine_team_weight(const sl_engine_t *e, const char *team);

/* Creates pool `name` (1-128 bytes) or, when it exists, applies the new
 * configuration keeping every lease and queued ticket: capacities follow the new
 * limits at once (levels clamped), then the queue drains. A new pool starts with
 * full buckets. Errors: SL_EINVAL (a value out of range), SL_ETIME. */
int sl_engine_configure_pool(sl_engine_t *e, const char *name, const sl_pool_config_t *cfg,
                             double now_s);

/* A request for capacity (POST /v1/leases). Strings are borrowed for the call. */
typedef struct sl_request {
    const char *agent;     /* required, 1-128 of [A-Za-z0-9._:-] */
    const char *pool;      /* NULL = "default" */
    int64_t input_tokens;  /* >= 0, uncached prompt tokens */
    int64_t cached_tokens; /* >= 0, prefix expected from the provider's cache */
    int64_t output_tokens; /* >= 0, max_tokens */
    const char *role;      /* NULL = "worker" */
    const char *task;      /* NULL = none */
    int64_t unblocks;      /* >= 0, used when `task` is not in the task graph */
    const char *priority;  /* NULL = "normal" */
    const char *cache_key; /* NULL = agent: the cache named by the agent's name, which
                              another agent's cache_key equal to that name reads too */
    /* NULL = none. A hash of the cached prefix (1-128 printable bytes): the cache is
     * identified by (cache_key, model, cache_prefix_hash), so another prefix or another
     * model is cold, as the provider's cache is. */
    const char *cache_prefix_hash;
    double ttl_s;           /* 0 = the pool's lease_ttl_s; at most max_lease_ttl_s */
    const char *request_id; /* NULL = no idempotency */
    const char *model;      /* NULL = none. The model the input was counted for with a
                               local tokenizer: the engine corrects input_tokens and
                               cached_tokens by the ratio it learned for this pool and
                               model, and learns from the settle (calibration). */
    double max_wait_s;      /* 0 = the pool's max_queue_wait_s: the longest ETA that is
                               queued rather than rejected (the proxy holds calls longer) */
    /* When set, the task graph's count of tasks `task` unblocks is capped at max_unblocks
     * (the most the caller's token may claim, as for an explicit `unblocks`): naming a
     * hub task gives no more weight than the token could ask for itself. */
    bool max_unblocks_set;
    int64_t max_unblocks;
    /* The caller sends the provider at most charged_output_tokens as the call's
     * max_tokens (the proxy rewrites the body; a lease client says "cap_output"). Only
     * then may a pool with output_reserve_learned reserve its learned percentile below
     * output_tokens: the provider holds whatever max_tokens it is sent, so a reservation
     * below the figure sent would overbook it. Unset: output_tokens is reserved. */
    bool output_capped;
    /* With output_capped: the least max_tokens the caller can send (the Responses API
     * refuses a max_output_tokens below 16; n choices need at least 1 each). A capped
     * reservation (the learned percentile, a share cap's fit) is never below it, nor is
     * it raised above the request's own output_tokens. 0 (or less): 1 token is enough. */
    int64_t output_floor_tokens;
    /* The lifetime the provider keeps the cached prefix after this call starts: 0 = the
     * pool's cache_ttl_s (a 5-minute write); 3600 for Anthropic's ttl "1h". Up to
     * SL_CACHE_TTL_MAX_S. A longer life is never shortened by a later, shorter call
     * (docs/design.md "Cache lifetimes"). */
    double cache_ttl_s;
    /* The roles the caller may take (its token's); NULL = any. The request's role is the
     * registered role of its task when the task graph knows `task` (a `role` naming
     * another is SL_EINVAL), and one outside this list is SL_EFORBIDDEN: the daemon need
     * not read the graph before it asks. */
    const char *const *roles_allowed;
    size_t n_roles_allowed;
    /* Named one key of a pool of several keys (POOL:KEY, an operator's pinning): queued,
     * it waits for that key alone; no other key of its key_group grants it. */
    bool key_pinned;
} sl_request_t;

/* The longest cache lifetime a request may name (one day). */
#define SL_CACHE_TTL_MAX_S 86400.0

typedef enum sl_status {
    SL_GRANTED = 1,
    SL_QUEUED,
    SL_REJECTED,
} sl_status_t;

/* The answer to a request or a ticket poll. */
typedef struct sl_decision {
    sl_status_t status;
    uint64_t lease;    /* granted */
    uint64_t ticket;   /* queued (and, when granted from the queue, the ticket) */
    double expires_at; /* granted */
    double ttl_s;      /* granted */
    double weight;
    int64_t charged_input_tokens; /* granted: includes the cold-cache penalty */
    int64_t charged_output_tokens;
    int64_t charged_requests;
    bool cache_penalty;   /* the cached prefix was charged as uncached input */
    double waited_s;      /* granted: time spent queued */
    double eta_s;         /* queued: seconds until the expected grant */
    int64_t position;     /* queued: 1 = head of the queue */
    double retry_after_s; /* rejected */
    double retry_at;      /* rejected: now + retry_after_s */
    const char *reason;   /* rejected: "queue_wait_exceeds_max", "agent_cap", "team_cap"
                             or "budget_exhausted" (static strings) */
    bool replayed;        /* the answer is for an earlier request with the same id */
    /* queued, rejected: what binds (static strings): a bucket name ("input_tokens",
     * "output_tokens", "requests", "tokens"), "concurrency", "retry_after" (a provider
     * hold), or for caps "agent_cap", "team_cap", "budget_exhausted"; NULL: not known. */
    const char *limited_by;
} sl_decision_t;

/* Decides a request at `now_s`: GRANT, QUEUED or REJECT (docs/design.md "Decision").
 * Returns SL_OK with `out` filled, or an error with `out` untouched and the engine
 * unchanged: SL_EINVAL (bad field, unknown role or priority, a role other than its
 * task's), SL_EFORBIDDEN (a role outside roles_allowed), SL_ENOTFOUND (pool),
 * SL_ECAPACITY (can never fit), SL_ETIME. A request_id seen before from the same
 * agent returns the current state of the first answer (`replayed` set) and charges
 * nothing. */
int sl_engine_request(sl_engine_t *e, const sl_request_t *req, double now_s, sl_decision_t *out);

/* Polls a ticket: its fresh ETA and position while queued, or the grant once
 * granted (which marks the lease as claimed). Counts as the client being present.
 * Errors: SL_ENOTFOUND; SL_EALREADY (cancelled, expired or rejected ticket). */
int sl_engine_ticket(sl_engine_t *e, uint64_t ticket, double now_s, sl_decision_t *out);

/* Marks a queued ticket as held (a client is waiting on it right now) or not. A
 * held ticket never expires for idleness. Time advances to `now_s` first. Errors:
 * SL_ETIME, SL_ENOTFOUND, SL_EALREADY. */
int sl_engine_ticket_hold(sl_engine_t *e, uint64_t ticket, bool held, double now_s);

/* Gives up a queued ticket's place. When the ticket was already granted, the lease
 * is cancelled with a full refund (its client is gone). Errors: SL_ENOTFOUND,
 * SL_EALREADY. */
int sl_engine_ticket_cancel(sl_engine_t *e, uint64_t ticket, double now_s);

/* What a call really used (POST /v1/leases/{id}/settle). */
typedef struct sl_settle {
    int64_t input_tokens; /* usage.input_tokens */
    int64_t output_tokens;
    int64_t cache_creation_input_tokens;
    int64_t cache_read_input_tokens;
    /* The part of cache_creation_input_tokens written as 1-hour entries (Anthropic's
     * usage.cache_creation.ephemeral_1h_input_tokens), at most it: budgets price 1-hour
     * writes at 2x the input price, the rest of the writes at 1.25x. */
    int64_t cache_creation_1h_input_tokens;
    bool got_429;                    /* the call with this lease came back 429 */
    double retry_after_s;            /* < 0 when the provider sent none: holds every
                                        agent's grants in the pool that long */
    double agent_retry_after_s;      /* <= 0: none; holds only this lease's agent's new
                                        requests in its pool that long (answered REJECTED,
                                        reason agent_retry_after): for a report longer than
                                        the pool may be held on its word */
    bool spend_cap;                  /* the 429's error was a spend/budget cap */
    bool failed;                     /* the provider refused or failed the call (any 4xx or
                                        5xx, a stream that broke off): the tokens given are
                                        charged, but the call teaches nothing (no calibration,
                                        estimate-error or cache sample). got_429 implies it. */
    const char *failure_signature;   /* NULL or "" = none */
    const char *const *header_names; /* provider rate-limit headers, lower-case */
    const char *const *header_values;
    size_t header_count;
} sl_settle_t;

typedef struct sl_settle_result {
    int64_t adjust_input_tokens; /* what went back into the bucket: + refund, - charge */
    int64_t adjust_output_tokens;
    double estimate_error; /* |billed - estimated prompt| / max(billed, 1); billed = input +
                              cache creation + cache reads, estimated = input_tokens +
                              cached_tokens after calibration */
    bool not_counted;      /* a failed call: no calibration, estimate-error or cache sample */
} sl_settle_result_t;

/* Settles a lease (docs/design.md "Settle"). Errors: SL_EINVAL, SL_ENOTFOUND,
 * SL_EALREADY (settled or cancelled before), SL_EEXPIRED (reaped), SL_ETIME. */
int sl_engine_settle(sl_engine_t *e, uint64_t lease, const sl_settle_t *s, double now_s,
                     sl_settle_result_t *out);

/* Cancels a lease: the call was never made, the whole reservation goes back.
 * Errors as sl_engine_settle. */
int sl_engine_cancel(sl_engine_t *e, uint64_t lease, double now_s);

/* Moves a lease's expiry to now + ttl_s (ttl_s > 0, capped at max_lease_ttl_s).
 * `expires_at` may be NULL. Errors as sl_engine_settle. */
int sl_engine_extend(sl_engine_t *e, uint64_t lease, double ttl_s, double now_s,
                     double *expires_at);

/* Advances the engine to `now_s`: refills, reaps expired leases (no refund),
 * expires idle tickets, recovers margins, raises time-based alerts and drains the
 * queues. Every other call with `now_s` does this first. Errors: SL_ETIME. */
int sl_engine_advance(sl_engine_t *e, double now_s);

/* The earliest instant at which sl_engine_advance() would change something on its
 * own (a queue head's ETA, a lease expiry, a margin step, an alert); +INFINITY when
 * nothing is pending. A caller sets its timer to this. */
double sl_engine_next_wakeup(const sl_engine_t *e);

/* Resyncs pool `pool` from provider rate-limit headers (Anthropic
 * anthropic-ratelimit-* or OpenAI x-ratelimit-*; names lower-case). Headers never
 * raise a level, except once per bucket in a cold-start window
 * (sl_engine_pool_cold_start); a limit that disagrees with the configuration is
 * adopted. Unknown headers are ignored; a malformed value of a known header is SL_EINVAL with
 * nothing changed. `changed` (may be NULL) receives the number of levels or limits
 * changed. */
int sl_engine_resync(sl_engine_t *e, const char *pool, const char *const *names,
                     const char *const *values, size_t count, double now_s, int *changed);
/* sl_engine_resync of the pool of live lease `lease`, with the headers its call returned:
 * only such a report, from a lease granted since the margin last changed, earns a step of
 * the margin's climb above its start (docs/design.md "Margin"). Errors as sl_engine_settle
 * for the lease, then as sl_engine_resync. */
int sl_engine_resync_lease(sl_engine_t *e, uint64_t lease, const char *const *names,
                           const char *const *values, size_t count, double now_s, int *changed);
/* sl_engine_resync_lease of a call sent `sent_after_s` seconds after the lease's grant (the
 * proxy measures it): only the leases granted before then, and within the pool's
 * send_window_s, are excused as perhaps taken first (docs/design.md "A later grant taken
 * first"). Negative: not known, the pool's send_window_s (sl_engine_resync_lease). Not a
 * finite number: SL_EINVAL, nothing changed. */
int sl_engine_resync_lease_sent(sl_engine_t *e, uint64_t lease, double sent_after_s,
                                const char *const *names, const char *const *values, size_t count,
                                double now_s, int *changed);

/* Task graph (PUT /v1/tasks/{task}). */
typedef enum sl_task_state {
    SL_TASK_WAITING = 0,
    SL_TASK_RUNNING,
    SL_TASK_DONE,
} sl_task_state_t;

/* Creates or replaces task `id` with its role (NULL = "worker"), the tasks it
 * depends on and its state. Errors: SL_EINVAL (bad id, unknown role, a task that
 * depends on itself). */
int sl_engine_task_put(sl_engine_t *e, const char *id, const char *role,
                       const char *const *depends_on, size_t n_depends, sl_task_state_t state);

/* Removes a task. Errors: SL_ENOTFOUND. */
int sl_engine_task_delete(sl_engine_t *e, const char *id);

/* Number of tasks in state waiting that list `id` in depends_on (0 for unknown). */
int64_t sl_engine_task_unblocks(const sl_engine_t *e, const char *id);
/* The remaining chain of task `id`: 1 + the longest remaining chain among the tasks in
 * state waiting that list it in depends_on (counted up to 64 tasks; a cycle counts as
 * the longest), or -1 when `id` is not in the graph. It orders a pool's parked first
 * calls under working_set (docs/design.md "Working set"). */
int64_t sl_engine_task_depth(sl_engine_t *e, const char *id);

/* A task as seen by sl_engine_task_foreach(). */
typedef struct sl_task_info {
    const char *id;
    const char *role;
    sl_task_state_t state;
    const char *const *depends_on;
    size_t n_depends;
    int64_t unblocks;
} sl_task_info_t;

/* Calls `fn` for every task (in no particular order). */
void sl_engine_task_foreach(const sl_engine_t *e, void (*fn)(const sl_task_info_t *t, void *ud),
                            void *ud);

const char *sl_task_state_name(sl_task_state_t s);

/* Calibration of one model in a pool: the robust ratio of actual to estimated prompt
 * tokens (input + cache creation + cache reads over input_tokens + cached_tokens),
 * the median of the last 64 settles of leases that named the model. The ratio is 1
 * until 5 samples exist; samples are clamped to [0.2, 5] and leases estimated below
 * 100 tokens are not sampled (too noisy). */
typedef struct sl_calibration_info {
    const char *model;
    double ratio;    /* what estimates are multiplied by */
    int64_t samples; /* settles sampled in total */
} sl_calibration_info_t;

#define SL_POOL_INFO_MODELS 16

/* State of one pool (GET /v1/pools/{pool}). */
typedef struct sl_pool_info {
    const char *name;
    sl_pool_config_t config; /* the limits in force (after adoption) */
    double margin;
    double level[SL_BUCKET_COUNT]; /* only buckets with a limit are meaningful */
    double capacity[SL_BUCKET_COUNT];
    double refill_per_s[SL_BUCKET_COUNT];
    int64_t limit[SL_BUCKET_COUNT]; /* 0 = not limited */
    int64_t queue_depth;
    double head_eta_s; /* -1 when the queue is empty */
    int64_t leases_in_flight;
    bool alert_margin_at_floor;
    bool alert_spend_cap;
    double blocked_until; /* a provider retry-after holds grants until */
    uint64_t granted_total, queued_total, rejected_total;
    uint64_t upstream_429_total;
    sl_calibration_info_t calibration[SL_POOL_INFO_MODELS]; /* the first models calibrated */
    int n_calibration;
    double cold_until; /* end of the cold-start window (sl_engine_pool_cold_start), 0 when none */
} sl_pool_info_t;

/* Fills `out` for pool `name` as of the engine's last time (call sl_engine_advance
 * first for fresh levels). Errors: SL_ENOTFOUND. Strings live as long as the pool. */
int sl_engine_pool_info(const sl_engine_t *e, const char *name, sl_pool_info_t *out);

/* Calls `fn` for every pool, in creation order. */
void sl_engine_pool_foreach(const sl_engine_t *e, void (*fn)(const sl_pool_info_t *p, void *ud),
                            void *ud);

/* A pool of several keys is one pool per key (docs/design.md, "A pool of several keys").
 * sl_keys_pick: of the `n` keys' pools (as sl_engine_pool_info fills them at `now_s`; a
 * NULL entry is skipped), the index of the one that should grant `r`'s need soonest,
 * equal ETAs (within 1 ms) going to the emptiest; -1 when none could ever hold the
 * need (the caller asks any key, whose engine answers SL_ECAPACITY). It reads only
 * its arguments: the chosen pool decides the request by the engine's rules.
 * sl_key_eta_s: seconds until pool `p` could grant `r` (INFINITY: never), queue included.
 * sl_key_room: the least share left of `p`'s limited buckets and concurrency (0-1). */
int sl_keys_pick(const sl_pool_info_t *const *keys, size_t n, const sl_request_t *r,
                 double now_s);
double sl_key_eta_s(const sl_pool_info_t *p, const sl_request_t *r, double now_s);
double sl_key_room(const sl_pool_info_t *p);
/* Whether another key of the pool is asked after one key answered `d`: a reject for the
 * wait (queue_wait_exceeds_max) or for its agent's own hold on that key
 * (agent_retry_after), never a replay (docs/design.md "The ETA over the keys"). Every key
 * rejecting, the answer is the reject with the least retry_after. */
bool sl_keys_ask_next(const sl_decision_t *d);

/* Calls `fn` for every model calibrated in pool `pool`. Errors: SL_ENOTFOUND. */
int sl_engine_calibration_foreach(const sl_engine_t *e, const char *pool,
                                  void (*fn)(const sl_calibration_info_t *c, void *ud), void *ud);

/* State of one agent (GET /v1/agents). */
typedef struct sl_agent_info {
    const char *name;
    const char *role; /* role of its last request */
    const char *team; /* NULL: no team */
    double weight;    /* current weight: its last request's role, unblocks and priority
                         with the repeats as they are now (floored) */
    int64_t repeats;
    double estimate_error; /* mean over the last window; 0 when no settles */
    bool alert_estimate_error;
    int64_t leases;    /* in flight */
    int64_t queued;    /* tickets in the queue */
    int64_t tokens_in; /* settled actual input tokens, total */
    int64_t tokens_out;
    int64_t got_429;
    const char *state; /* "idle", "queued", "running" */
} sl_agent_info_t;

void sl_engine_agent_foreach(const sl_engine_t *e, void (*fn)(const sl_agent_info_t *a, void *ud),
                             void *ud);

/* Fills `out` for one agent. Errors: SL_ENOTFOUND. */
int sl_engine_agent_info(const sl_engine_t *e, const char *agent, sl_agent_info_t *out);

/* Forgets agent `agent` when it holds nothing a new agent would not (no lease or
 * ticket, no team, no caps of its own, its copy of "*" caps full and idle, in every
 * pool a cold prompt cache and a fair-queue tag not ahead of its team's clock: see
 * src/engine/forget.c); its weight, repeats, estimate errors and totals go with it, and
 * its next request starts it anew. Errors: SL_ENOTFOUND (not known), SL_EEXIST (it
 * holds something; nothing changes), SL_ETIME. */
int sl_engine_agent_forget(sl_engine_t *e, const char *agent, double now_s);

/* Checks every invariant of docs/design.md that can be checked on the state (levels
 * never above capacity, queue order, counts consistent). Returns SL_OK, or
 * SL_EINVAL with a description in sl_engine_errmsg(). For tests and debug builds;
 * cost is linear in the state's size. */
int sl_engine_check(sl_engine_t *e);

/* ---- Restarts: ids, cold start and the durable state ----------------------------------
 *
 * The engine does no I/O; a daemon that must survive a restart exports what a restart
 * must not forget (each pool's levels with their time, its margin and the margin's
 * clocks, every lease in flight, the calibrations) with the *_state functions, stores
 * it, and on the next start restores it with the *_restore functions into a fresh
 * engine whose pools are configured, after moving the id base above every id the
 * earlier run issued. Tickets, agents' statistics, caches, caps' buckets and the task
 * graph are not part of it: queued requests are answered again by their clients'
 * retries, and the rest only tunes weights. */

/* Lease and ticket ids share one increasing sequence: 1, 2, 3, ... by default. After
 * sl_engine_set_id_base(e, base) the next ids are base + 1, base + 2, ... (contiguous).
 * A restarted daemon gives a base above every id an earlier run issued, so an id from
 * that run can never name a lease of this one; replicas give disjoint ranges. Ids
 * below the base that this engine issued or restored stay valid. Errors: SL_EINVAL when
 * base + 1 is below the next id (ids would repeat) or base is above SL_ID_BASE_MAX. */
#define SL_ID_BASE_MAX ((uint64_t)1 << 59)
int sl_engine_set_id_base(sl_engine_t *e, uint64_t base);

/* The id the next lease or ticket will get. */
uint64_t sl_engine_next_id(const sl_engine_t *e);

/* A cold start of pool `pool` at `now_s`, for a daemon that cannot know what was spent
 * in the last minute (a first start, a lost state file): every bucket is emptied (no
 * debt) and refills from there, and a cold-start window opens until now_s + window_s.
 * While it is open, the first provider headers that report a bucket's remaining may
 * RAISE that bucket's level up to what they report (less the margin's reserve and
 * Anthropic's rounding); later headers, and all headers after the window, only lower.
 * Errors: SL_ENOTFOUND, SL_EINVAL (window_s negative, NaN or above 1e9), SL_ETIME. */
int sl_engine_pool_cold_start(sl_engine_t *e, const char *pool, double window_s, double now_s);

/* What a restart must not forget of a pool. */
typedef struct sl_pool_state {
    double level[SL_BUCKET_COUNT]; /* tokens (requests) at time `at` */
    double at;                     /* the time of the levels (the last refill) */
    double margin;                 /* 0.85 ... */
    double clean_since;            /* the margin's recovery clock (last 429 or step) */
    double floor_since;            /* when the margin reached its floor, or -1 */
    double blocked_until;          /* a provider retry-after holds grants until then */
    double cold_until;             /* end of a cold-start window, 0 when none */
    unsigned cold_raised;          /* bit b: bucket b was raised by headers in the window */
    double lease_mean_s;           /* D: moving average of settled leases' durations */
    int64_t lease_samples;         /* settles averaged into D (0: none, D unknown) */
} sl_pool_state_t;

/* Fills `out` with pool `pool`'s durable state. Errors: SL_ENOTFOUND. */
int sl_engine_pool_state(const sl_engine_t *e, const char *pool, sl_pool_state_t *out);

/* Restores pool `pool` (configured already) to `st` at `now_s`: the margin is clamped
 * to the pool's configured [floor, start], levels to the capacity, times later than
 * now_s to now_s; then time advances to now_s, so the buckets refill (and the margin
 * recovers) for the time the daemon was down. Errors: SL_ENOTFOUND, SL_EINVAL (a level
 * that is not finite, a NaN), SL_ETIME. Leases are restored separately and take nothing from the levels, which
 * already account for them. */
int sl_engine_pool_restore(sl_engine_t *e, const char *pool, const sl_pool_state_t *st,
                           double now_s);

/* A lease in flight, as exported and restored. Strings are borrowed. */
typedef struct sl_lease_state {
    uint64_t id;
    uint64_t ticket; /* 0 when granted directly */
    const char *pool;
    const char *agent;
    const char *cache_key; /* the cache its settle warms (NULL: the agent's name) */
    const char *model;     /* NULL: the request named none (no calibration) */
    const char *outputs;   /* the calibration its output is learned in ("model\x1frole",
                              sl_calibration_state_t); NULL with no model. Not restored:
                              a restored lease learns in its agent's last role's */
    int64_t need[SL_BUCKET_COUNT]; /* reserved per bucket: input, output, requests, tokens */
    int64_t cached_tokens;
    bool cache_penalty;
    int64_t est_prompt_tokens; /* input + cached as the client estimated them */
    double weight;
    double granted_at;
    double waited_s;
    double ttl_s;
    double expires_at;
    bool claimed; /* the client knows about the grant (false: granted from the queue, unfetched) */
    double cache_ttl_s; /* the call's cache lifetime (sl_request_t.cache_ttl_s); 0 = the pool's */
} sl_lease_state_t;

/* Fills `out` for live lease `lease`; its strings live as long as the lease and its
 * pool. Errors: SL_ENOTFOUND (unknown or ended). */
int sl_engine_lease_state(const sl_engine_t *e, uint64_t lease, sl_lease_state_t *out);

/* Calls `fn` for every lease in flight (pools in creation order, no order within). */
void sl_engine_lease_foreach(const sl_engine_t *e, void (*fn)(const sl_lease_state_t *l, void *ud),
                             void *ud);

/* Puts lease `l` back in flight at `now_s`, without an event and without taking from the
 * pool's levels (sl_engine_pool_restore restored them with the lease charged): settle,
 * cancel and extend work on it as before, and it is reaped without refund at
 * expires_at, which may already be past (then at the next advance). Errors:
 * SL_ENOTFOUND (pool), SL_EINVAL (a bad field, or an id not below sl_engine_next_id(),
 * which a later grant could issue again: set the id base first), SL_EEXIST (the id is
 * live), SL_ENOMEM, SL_ETIME. */
int sl_engine_lease_restore(sl_engine_t *e, const sl_lease_state_t *l, double now_s);

/* A model's calibration, as exported and restored. */
#define SL_CALIBRATION_WINDOW 64
typedef struct sl_calibration_state {
    const char *model; /* a model; or "model\x1frole": the output samples of that model's
                          calls in that agent group (output_reserve: learned), no ratios */
    double sample[SL_CALIBRATION_WINDOW]; /* ratios, a ring */
    int n;                                /* samples held (0..64) */
    int pos;                              /* the next slot written */
    int64_t total;                        /* samples taken in total */
    int64_t out_sample[SL_CALIBRATION_WINDOW]; /* output tokens of counted settles, a ring */
    int out_n, out_pos;                        /* as n and pos (output_reserve: learned) */
} sl_calibration_state_t;

/* Fills `out` for `model` in `pool`. Errors: SL_ENOTFOUND (pool or model). */
int sl_engine_calibration_state(const sl_engine_t *e, const char *pool, const char *model,
                                sl_calibration_state_t *out);

/* Calls `fn` for every model calibrated in `pool`. Errors: SL_ENOTFOUND. */
int sl_engine_calibration_state_foreach(const sl_engine_t *e, const char *pool,
                                        void (*fn)(const sl_calibration_state_t *c, void *ud),
                                        void *ud);

/* Restores a calibration (the ratio is recomputed from the samples). Errors:
 * SL_ENOTFOUND (pool), SL_EINVAL (n or pos out of range, a sample outside [0.2, 5]),
 * SL_ENOMEM. */
int sl_engine_calibration_restore(sl_engine_t *e, const char *pool,
                                  const sl_calibration_state_t *c);

/* Parses an RFC 3339 timestamp ("2026-11-30T03:39:42Z", fractions and offsets
 * allowed) into Unix seconds. Returns SL_OK or SL_EINVAL. */
int sl_parse_rfc3339(const char *s, double *unix_s);

/* Parses a Go-style duration ("6m0s", "1s", "12ms", "1h2m3.5s", "250us") into
 * seconds. A bare number is seconds. Returns SL_OK or SL_EINVAL. */
int sl_parse_duration(const char *s, double *seconds);

/* ---- provider rate-limit headers (docs/design.md "Resync") ---- */

/* The value a rate-limit header carries. */
typedef enum sl_header_field {
    SL_HEADER_LIMIT,
    SL_HEADER_REMAINING,
    SL_HEADER_RESET
} sl_header_field_t;

/* A response header name as sl_engine_resync() reads it. */
typedef struct sl_header_kind {
    bool known;     /* anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-FIELD
                       or x-ratelimit-FIELD-{requests,tokens}, FIELD limit|remaining|reset */
    bool anthropic; /* an anthropic-ratelimit-* header */
    int bucket;     /* the sl_bucket_t it drives; -1: validated, not applied (Anthropic's
                       tokens-*, which describe the most restrictive token limit) */
    sl_header_field_t field;
} sl_header_kind_t;

/* Classifies header `name` (lower-case). A name sluice does not read is
 * {.known = false, .bucket = -1}. */
sl_header_kind_t sl_header_classify(const char *name);

/* Whether header `name` (lower-case) is of the providers' rate-limit families,
 * anthropic-ratelimit-* or x-ratelimit-*, whether sluice reads that name or not: what a
 * caller without the right to resync may not report, and what the proxy hands to resync. */
bool sl_header_is_ratelimit(const char *name);

/* Parses a count header's value: decimal digits only, at most SL_TOKENS_MAX. Returns
 * false, *out untouched, for anything else (the empty string, a sign, a fraction). */
bool sl_header_parse_count(const char *value, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_ENGINE_H */
