/* limits.h - action limits: named rate limits on any agent action, every algorithm, hierarchical, adaptive.
 *
 * A limit set (sl_limits_t) holds named limits. Each limit has an algorithm
 * (token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_window_approx,
 * gcra, concurrency), a rate per period, a burst, a scope (`per`: agent, team,
 * global or a caller-named key), costs per action type and parents. A check of one
 * limit checks it and every ancestor together, all or nothing: either every level
 * takes its cost, or none changes at all (a deny, a peek with hits 0, an error).
 * The semantics, the memory bound and every answer field are in docs/limits.md.
 *
 * Time: every call that depends on time takes `now_us`, microseconds on the caller's
 * clock (Unix time in sluiced; fixed windows are aligned to its zero). Integers make
 * the answers exact and identical in the Redis Lua port (every value below 2^53).
 * A `now_us` earlier than one a key already saw is treated as that later time.
 * Durations in answers are microseconds too.
 *
 * Errors: functions return 0 or a negative SL_E* code of sluice/common.h; after an
 * error nothing changed, and sl_limits_errmsg() names the field and the value.
 * Not thread-safe: the caller serialises calls on one set (sluiced: the event loop).
 */
#ifndef SLUICE_LIMITS_H
#define SLUICE_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest rate (per period) of the two algorithms that keep a log per key:
 * sliding_window holds one entry per distinct timestamp in the window and
 * concurrency one per hold, each at most `rate` entries of 16 bytes. */
#define SL_LIMITS_LOG_MAX_RATE 10000
/* A check touches at most this many levels (the limit and its ancestors). */
#define SL_LIMITS_MAX_LEVELS 8
/* The longest agent, team, key or action name, and limit name, in bytes. */
#define SL_LIMITS_MAX_NAME 256
/* The most hits one check may ask for, and the largest cost per action. */
#define SL_LIMITS_MAX_HITS 1000000000LL
#define SL_LIMITS_MAX_COST 1000000000LL
/* The outcome window of an adaptive limit holds at most this many results. */
#define SL_LIMITS_MAX_WINDOW 65536

typedef enum sl_limit_algorithm {
    SL_LIMIT_TOKEN_BUCKET = 0,     /* continuous refill at rate/period, capacity burst */
    SL_LIMIT_LEAKY_BUCKET,         /* meter: a queue of burst units drained at the rate */
    SL_LIMIT_FIXED_WINDOW,         /* rate per aligned window; up to 2x across a boundary */
    SL_LIMIT_SLIDING_WINDOW,       /* exact: a log of the last period */
    SL_LIMIT_SLIDING_WINDOW_APPROX, /* two windows, the previous one weighted */
    SL_LIMIT_GCRA,                 /* theoretical arrival time, CL.THROTTLE's answers */
    SL_LIMIT_CONCURRENCY,          /* at most rate held at once; release or TTL */
    SL_LIMIT_ALGORITHM_COUNT
} sl_limit_algorithm_t;

typedef enum sl_limit_per {
    SL_LIMIT_PER_AGENT = 0, /* one state per agent */
    SL_LIMIT_PER_TEAM,      /* one per team (the caller resolves the agent's team) */
    SL_LIMIT_PER_GLOBAL,    /* one state, key "*" */
    SL_LIMIT_PER_KEY,       /* one per caller-named key */
} sl_limit_per_t;

typedef enum sl_limit_on_limit {
    SL_LIMIT_REJECT = 0, /* a deny is answered at once */
    SL_LIMIT_QUEUE,      /* the caller may wait up to its `wait` (sl_limits_when) */
} sl_limit_on_limit_t;

/* The name of each enum value, as the config spells it; NULL when out of range. */
const char *sl_limit_algorithm_name(sl_limit_algorithm_t a);
const char *sl_limit_per_name(sl_limit_per_t p);
const char *sl_limit_on_limit_name(sl_limit_on_limit_t o);

typedef struct sl_limit_cost {
    const char *action; /* borrowed during sl_limits_add, copied */
    int64_t cost;       /* 0..SL_LIMITS_MAX_COST units per hit */
} sl_limit_cost_t;

/* AIMD on the reported error rate: additive increase, multiplicative decrease. */
typedef struct sl_limit_adaptive {
    bool enabled;
    double min_rate, max_rate; /* the current rate stays in [min_rate, max_rate] */
    double decrease;           /* 0 < decrease < 1: factor when error rate > high_error */
    double increase;           /* > 1: factor when error rate < low_error */
    double high_error;         /* 0 <= low_error < high_error <= 1 */
    double low_error;
    int64_t window; /* 1..SL_LIMITS_MAX_WINDOW: the error rate is over the last `window` outcomes */
} sl_limit_adaptive_t;

/* One limit's configuration. Strings and arrays are borrowed during sl_limits_add. */
typedef struct sl_limit_config {
    sl_limit_algorithm_t algorithm;
    double rate;     /* > 0: events (or cost units) per period; the starting rate when
                        adaptive. Whole number >= 1 for the windows and concurrency. */
    double period_s; /* > 0 (default 1); not used by concurrency */
    double burst;    /* token_bucket, gcra: bucket size; leaky_bucket: queue size in units.
                        0 means the default, `rate`; else a whole number >= 1. Not used by
                        the windows and concurrency (must stay 0). */
    sl_limit_per_t per;
    const sl_limit_cost_t *costs; /* cost per action type; an action not listed costs 1 */
    size_t n_costs;
    const char *const *parents; /* names of limits also checked; resolved by sl_limits_link */
    size_t n_parents;
    sl_limit_on_limit_t on_limit;
    sl_limit_adaptive_t adaptive;
    double ttl_s;     /* concurrency: a hold ends by itself after ttl_s (default 60) */
    int64_t max_keys; /* keys tracked at once (default 100000); see docs/limits.md */
} sl_limit_config_t;

/* Fills the defaults: token_bucket, rate 0 (must be set), period_s 1, burst = rate,
 * per agent, no costs, no parents, reject, not adaptive (adaptive's defaults are the
 * seed's: decrease 0.9, increase 1.1, high 0.10, low 0.02, window 100), ttl_s 60,
 * max_keys 100000. */
void sl_limit_config_init(sl_limit_config_t *cfg);

typedef struct sl_limits sl_limits_t;

/* A rate change of an adaptive limit, given to the callback of sl_limits_set_adapt_cb.
 * Strings are borrowed for the duration of the call. */
typedef struct sl_limit_adapt_event {
    const char *limit, *key;
    double old_rate, new_rate;
    double error_rate; /* over the outcome window after this report */
    int64_t window_outcomes;
} sl_limit_adapt_event_t;

typedef void (*sl_limit_adapt_cb)(const sl_limit_adapt_event_t *ev, void *user);

/* A new empty set; NULL when out of memory. Free it with sl_limits_free. */
sl_limits_t *sl_limits_new(void);
void sl_limits_free(sl_limits_t *ls);

/* The message of the last error of `ls`, naming the field and value; "" after success. */
const char *sl_limits_errmsg(const sl_limits_t *ls);

/* Adds limit `name` (copied). Validates every field: rate > 0, period_s > 0, burst a
 * whole number >= 1 where used, ttl and max_keys positive, costs 0..max, the adaptive
 * bounds (see sl_limit_adaptive_t and docs/limits.md). Errors name the field as
 * `limits.NAME.FIELD: ...`. Returns 0; SL_EINVAL (bad field), SL_EEXIST (the name is
 * taken), SL_EALREADY (the set is already linked), SL_ENOMEM. */
int sl_limits_add(sl_limits_t *ls, const char *name, const sl_limit_config_t *cfg);

/* Resolves every limit's parents, once, after the last add: each must exist, none may
 * reach itself (a cycle), and a limit with its ancestors is at most
 * SL_LIMITS_MAX_LEVELS. Returns 0, SL_EINVAL (named in errmsg), SL_EALREADY. Checks
 * before a successful link fail with SL_EINVAL. */
int sl_limits_link(sl_limits_t *ls);

/* Called with every rate change of an adaptive limit (NULL turns it off). */
void sl_limits_set_adapt_cb(sl_limits_t *ls, sl_limit_adapt_cb cb, void *user);

/* One check. `agent` is needed by per: agent levels, `team` by per: team, `key` by
 * per: key; `action` picks the cost of each level (NULL: cost 1 everywhere). */
typedef struct sl_limit_request {
    const char *agent, *team, *key, *action;
    int64_t hits; /* 0..SL_LIMITS_MAX_HITS; 0 peeks */
} sl_limit_request_t;

/* Why a level denied. */
typedef enum sl_limit_reason {
    SL_LIMIT_ALLOWED = 0,
    SL_LIMIT_RATE,     /* the algorithm denied: retry after retry_after_us */
    SL_LIMIT_NEVER,    /* the cost exceeds the level's limit: no wait helps (retry -1) */
    SL_LIMIT_MAX_KEYS, /* the limit tracks max_keys keys and none is at rest */
} sl_limit_reason_t;

/* The name of a reason ("allowed", "rate", "never", "max_keys"). */
const char *sl_limit_reason_name(sl_limit_reason_t r);

/* One level's answer. `limit_name` and `key` point into the set or the request: valid
 * until the next call on the set or until the request's strings go. */
typedef struct sl_limit_level {
    const char *limit_name, *key;
    sl_limit_reason_t reason;
    int64_t limit;          /* units the level allows at most (burst, or rate per window) */
    int64_t remaining;      /* units left after this check (before it, when denied) */
    int64_t retry_after_us; /* 0 when allowed; -1 never */
    int64_t reset_after_us; /* until the state is back to full with no further hits */
    int64_t delay_us;       /* leaky_bucket: when the action may run; 0 elsewhere */
    int64_t cost;           /* units this check asked of the level (hits x cost) */
    double rate;            /* the current rate (adaptive), else the configured one */
} sl_limit_level_t;

/* The answer of a check: the top fields are those of the most restrictive level
 * (`top`): when denied, the denying level with the longest retry_after (a -1 wins),
 * else the level with the fewest remaining units; ties go to the earlier level. */
typedef struct sl_limit_result {
    bool allowed;
    int64_t limit, remaining, retry_after_us, reset_after_us;
    int64_t delay_us; /* the longest delay of any level */
    size_t top;       /* index into checked */
    int denied_by;    /* index into checked of `top` when denied, else -1 */
    size_t n_checked; /* the limit first, then its ancestors, nearest first */
    sl_limit_level_t checked[SL_LIMITS_MAX_LEVELS];
} sl_limit_result_t;

/* Checks `name` and its ancestors for `req` at `now_us`: when every level allows, each
 * takes its cost (hits x its cost for req->action) and `out->allowed` is true; when one
 * denies, nothing changes at any level. hits 0 answers the same fields and changes
 * nothing. Returns 0 with `out` filled (a deny is not an error); SL_ENOTFOUND (no such
 * limit), SL_EINVAL (a missing agent/team/key a level needs, a name too long, hits out
 * of range, the set not linked), SL_ENOMEM (nothing changed). */
int sl_limits_check(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                    int64_t now_us, sl_limit_result_t *out);

/* What sl_limits_check would answer, changing nothing (for on_limit: queue: a caller
 * that waits re-checks at now + retry_after). Same errors. */
int sl_limits_probe(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                    int64_t now_us, sl_limit_result_t *out);

/* The earliest time (µs, >= now_us) at which the check would be allowed if nothing else
 * happened meanwhile: now_us when it is allowed now. Changes nothing. Returns 0;
 * SL_ECAPACITY when no wait helps (a cost above a level's limit); the errors of check. */
int sl_limits_when(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                   int64_t now_us, int64_t *at_us);

/* Ends the oldest live hold of a concurrency limit's key (the request names the key as a
 * check does; hits and action are ignored). Only `name`'s own level: parents are
 * released by releasing them. Returns 0; SL_ENOTFOUND (no such limit, or no live hold),
 * SL_EINVAL (not a concurrency limit, a missing key field). */
int sl_limits_release(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                      int64_t now_us);

/* Feeds `successes` and `errors` (each >= 0, together 1..SL_LIMITS_MAX_HITS) to the
 * adaptive limit `name` at the request's key, then applies AIMD once: the rate
 * multiplies by `decrease` when the error rate over the last `window` outcomes is above
 * high_error, by `increase` when below low_error, clamped to [min_rate, max_rate]; a
 * change calls the adapt callback. `rate_out` (may be NULL) gets the rate after.
 * Returns 0; SL_ENOTFOUND, SL_EINVAL (not adaptive, counts out of range, key fields),
 * SL_ECAPACITY (a new key, and the limit holds max_keys keys none of which is at rest),
 * SL_ENOMEM. */
int sl_limits_report(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                     int64_t successes, int64_t errors, int64_t now_us, double *rate_out);

/* One key's state of one limit (no ancestors), for GET /v1/limits/{name}?key=K. */
typedef struct sl_limit_key_info {
    bool tracked;  /* the key has state (false: it answers as a fresh key) */
    sl_limit_level_t level; /* a peek of this level alone */
    int64_t held;  /* concurrency: live holds; others 0 */
} sl_limit_key_info_t;

/* Fills `info` for `name` at the request's key. Changes nothing. Returns 0,
 * SL_ENOTFOUND, SL_EINVAL. */
int sl_limits_key_info(sl_limits_t *ls, const char *name, const sl_limit_request_t *req,
                       int64_t now_us, sl_limit_key_info_t *info);

/* Moves the per-key state of limit `name` from `src` to `dst` (both hold `name`), leaving
 * `src`'s limit with no keys and `dst`'s previous keys freed. For a reload: the caller
 * only moves a limit whose configuration is the same in both sets, so every key answers
 * on as before. Returns 0 or SL_ENOTFOUND (either set lacks `name`; nothing moved). */
int sl_limits_move_state(sl_limits_t *dst, sl_limits_t *src, const char *name);

/* The number of limits, and the i-th one's name (add order) or NULL. */
size_t sl_limits_count(const sl_limits_t *ls);
const char *sl_limits_name_at(const sl_limits_t *ls, size_t i);

/* A limit's configuration as added (strings owned by the set; parents as given), and
 * the number of keys it tracks now. Returns 0 or SL_ENOTFOUND. */
int sl_limits_config(const sl_limits_t *ls, const char *name, const sl_limit_config_t **cfg,
                     size_t *keys);

/* Forgets every key whose state is at rest at now_us (it would answer exactly as a
 * fresh key; an adaptive key also at its starting rate, its outcome history dropped).
 * Returns the number forgotten. Checks sweep a full limit by themselves. */
size_t sl_limits_sweep(sl_limits_t *ls, int64_t now_us);

/* CL.THROTTLE's rounding of a duration to whole seconds: up when the fraction has a
 * millisecond or more; -1 stays -1. (redis-cell answers retry_after and reset_after so.) */
int64_t sl_limits_cl_seconds(int64_t us);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_LIMITS_H */
