/* limits_internal.h - what the files of src/limits share: key state, the algorithm table, the key map. */
#ifndef SLUICE_LIMITS_INTERNAL_H
#define SLUICE_LIMITS_INTERNAL_H

#include "limits.h"
#include "../common/map.h"

/* One entry of a log: sliding_window (time of the hits, units) or concurrency (the
 * time the hold ends, units). */
typedef struct sl__entry {
    int64_t t_us;
    int64_t units;
} sl__entry_t;

/* A ring of entries in time order; `cap` is a power of two or 0. */
typedef struct sl__ring {
    sl__entry_t *e;
    uint32_t head, n, cap;
    int64_t sum; /* units of all n entries */
} sl__ring_t;

/* The outcomes of an adaptive key: a ring of bits, 1 = error. */
typedef struct sl__outcomes {
    uint8_t *bits;
    int64_t head, n, errors;
} sl__outcomes_t;

/* Per-key state. `fresh` is the state of a key never seen: every algorithm treats a
 * zeroed struct with fresh=true as full. */
typedef struct sl__kstate {
    bool fresh;
    int64_t t_us;   /* token: last refill; gcra: TAT; leaky: when the drain is free;
                       windows: index of the current window; others: last time seen */
    double level;   /* token_bucket: tokens */
    int64_t cur, prev; /* fixed_window: count; approx: this and the previous window */
    sl__ring_t ring;   /* sliding_window, concurrency */
    double rate;       /* the current rate (adaptive), else 0: the configured one */
    sl__outcomes_t outcomes;
    int64_t seen_us;   /* the latest time a commit, release or report saw: earlier
                          times are treated as this one */
} sl__kstate_t;

typedef struct sl__limit sl__limit_t;

/* What one algorithm says about taking `units` at now. */
typedef struct sl__answer {
    sl_limit_reason_t reason;
    int64_t limit, remaining, retry_after_us, reset_after_us, delay_us;
} sl__answer_t;

/* An algorithm: probe never changes state; reserve allocates what commit needs (so
 * commit cannot fail); commit takes `units` that probe allowed. at_rest says the state
 * answers exactly as a fresh one; rescale moves a state to a new rate at now. */
typedef struct sl__algorithm {
    void (*probe)(const sl__limit_t *l, const sl__kstate_t *s, int64_t units, int64_t now_us,
                  sl__answer_t *a);
    int (*reserve)(const sl__limit_t *l, sl__kstate_t *s, int64_t now_us);
    void (*commit)(const sl__limit_t *l, sl__kstate_t *s, int64_t units, int64_t now_us);
    bool (*at_rest)(const sl__limit_t *l, const sl__kstate_t *s, int64_t now_us);
    void (*rescale)(const sl__limit_t *l, sl__kstate_t *s, double old_rate, int64_t now_us);
} sl__algorithm_t;

extern const sl__algorithm_t sl__token_bucket, sl__leaky_bucket, sl__fixed_window,
    sl__sliding_window, sl__sliding_window_approx, sl__gcra, sl__concurrency;

/* Key map: string -> state, nodes indexed by the common string map (keymap.c). */
typedef struct sl__knode {
    sl__kstate_t state;
    char key[]; /* NUL-terminated; the map borrows it */
} sl__knode_t;

typedef sl_strmap_t sl__kmap_t; /* values: sl__knode_t *; iterate slots[i].val (NULL: empty) */

sl__knode_t *sl__kmap_find(const sl__kmap_t *m, const char *key);
/* Inserts a fresh node for `key` (absent). NULL when out of memory (map unchanged). */
sl__knode_t *sl__kmap_insert(sl__kmap_t *m, const char *key);
/* Removes the node at slot i (freeing it); the slot may then hold a later node. */
void sl__kmap_remove_at(sl__kmap_t *m, size_t i);
/* The slot holding `node` (in the map). */
size_t sl__kmap_slot_of(const sl__kmap_t *m, const sl__knode_t *node);
void sl__kmap_free(sl__kmap_t *m);

/* A limit of the set. */
struct sl__limit {
    char *name;
    sl_limit_config_t cfg; /* strings and arrays owned below */
    char **parent_names;
    sl_limit_cost_t *costs;
    const sl__algorithm_t *algo;
    int64_t period_us, ttl_us, burst_units;
    sl__limit_t *levels[SL_LIMITS_MAX_LEVELS]; /* itself, then its ancestors (after link) */
    size_t n_levels;
    sl__kmap_t keys;
    int64_t no_rest_until_us; /* a sweep that freed nothing: no key rests before this */
    uint64_t tree_hash, config_hash; /* plan.c, computed on first use (0: not yet) */
};

/* config.c: validation (0 or SL_EINVAL with `limits.NAME.FIELD: ...` in err), an owned
 * copy of a validated configuration (NULL: out of memory), and its release. */
int sl__limit_validate(const char *name, const sl_limit_config_t *cfg, char *err, size_t n);
sl__limit_t *sl__limit_new(const char *name, const sl_limit_config_t *cfg);
void sl__limit_free(sl__limit_t *l);

/* limitset.c for plan.c: the levels of a check of `name` (itself and its ancestors, or
 * itself alone when `one`), each with its key and units (hits x cost), validated as a
 * check validates them. Returns 0 or the errors of sl_limits_check. */
int sl__limits_levels(sl_limits_t *ls, const char *name, const sl_limit_request_t *req, bool one,
                      sl__limit_t **lim, const char **keys, int64_t *units, size_t *n);
/* What release and report refuse (SL_EINVAL, the message set): not a concurrency limit;
 * not adaptive, or counts out of range. */
int sl__limits_release_ok(sl_limits_t *ls, const sl__limit_t *l);
int sl__limits_report_ok(sl_limits_t *ls, const sl__limit_t *l, int64_t successes, int64_t errors);
/* The limits of the set, for plan.c's trees. */
sl__limit_t *sl__limits_at(const sl_limits_t *ls, size_t i);
sl__limit_t *sl__limits_find(const sl_limits_t *ls, const char *name);

/* Sets the set's error message; returns rc. */
int sl__limits_fail(sl_limits_t *ls, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The current rate of a state (the configured one for a fresh key). */
double sl__rate(const sl__limit_t *l, const sl__kstate_t *s);
/* Whole units per window or at once for the windows and concurrency: floor(rate), >= 1. */
int64_t sl__whole_rate(const sl__limit_t *l, const sl__kstate_t *s);
/* The emission interval of gcra and leaky_bucket: period / rate, truncated to the µs
 * (redis-cell truncates to the ns), at least 1. */
int64_t sl__interval_us(const sl__limit_t *l, const sl__kstate_t *s);

/* Ring helpers for the logs. */
int sl__ring_reserve(sl__ring_t *r, uint32_t n);
void sl__ring_push(sl__ring_t *r, int64_t t_us, int64_t units, bool merge);
const sl__entry_t *sl__ring_at(const sl__ring_t *r, uint32_t i);
void sl__ring_pop(sl__ring_t *r);
void sl__ring_free(sl__ring_t *r);

/* What every counting limit (fixed and sliding windows, concurrency) answers when it
 * holds `count` of `limit` units and is asked for `units` more: true when they fit
 * (allowed, with the room left); else false, with the room left and the reason (NEVER,
 * retry -1, when units > limit; RATE otherwise, its retry time the caller's). The reset
 * time is the caller's in both cases. */
bool sl__answer_count(sl__answer_t *a, int64_t limit, int64_t count, int64_t units);

/* The logs of sliding_window and concurrency: an entry (t_us, units) counts until
 * t_us + shift_us (sliding_window: its hit time and the period; concurrency: its hold's
 * end and 0). */
/* Units of the leading entries that no longer count at now_us, and in *n how many. */
int64_t sl__log_expired(const sl__kstate_t *s, int64_t shift_us, int64_t now_us, uint32_t *n);
/* The probe of a log holding at most `limit` units at once: allowed while they fit; else
 * retry when enough of the oldest entries stop counting. span_us is what a new entry
 * adds to the reset time (sliding_window: the period; concurrency: the hold's ttl). */
void sl__log_probe(const sl__kstate_t *s, int64_t limit, int64_t shift_us, int64_t span_us,
                   int64_t units, int64_t now_us, sl__answer_t *a);

/* concurrency: ends the oldest live hold (SL_ENOTFOUND: none); the units held now. */
int sl__concurrency_release(sl__kstate_t *s, int64_t now_us);
int64_t sl__concurrency_held(const sl__kstate_t *s, int64_t now_us);

/* Adaptive: appends outcomes and applies AIMD; returns the new rate. */
int sl__adaptive_reserve(const sl__limit_t *l, sl__kstate_t *s);
double sl__adaptive_report(const sl__limit_t *l, sl__kstate_t *s, int64_t successes,
                           int64_t errors, double *error_rate);
void sl__adaptive_free(sl__kstate_t *s);

/* Ceil of a non-negative double number of µs, as int64. */
int64_t sl__ceil_us(double us);

#endif /* SLUICE_LIMITS_INTERNAL_H */
