/* libsluice-client: lease capacity from sluiced before a model call, settle after it. */
#ifndef SLUICE_CLIENT_H
#define SLUICE_CLIENT_H

/*
 * An agent asks sluiced for a lease before every model call (sl_acquire), makes the
 * call, and reports what it really used (sl_settle). While a lease is queued or
 * rejected, sl_acquire waits for it (long-polling sluiced), after saving the agent's
 * checkpoint so a crash or timeout while waiting never forces a re-plan.
 *
 * Errors. Every function that can fail returns 0 or a negative SL_E* code of
 * common.h (compare with `rc == SL_EREJECTED`). sluiced's HTTP errors come back as the
 * engine's codes they stand for (400 SL_EINVAL, 404 SL_ENOTFOUND, 409 SL_EALREADY,
 * 410 SL_EEXPIRED, 413 `exceeds_capacity` SL_ECAPACITY, 503 SL_EUNAVAILABLE); an argument the library
 * refuses before sending anything is SL_EARG. sl_client_errmsg() gives a sentence for
 * the last error of a client. The library never aborts, exits or prints, except the one
 * alert line per switch into or out of local mode (sent to the `log` callback,
 * default standard error).
 *
 * Thread-safety. An sl_client_t is not locked: use one client per thread (or guard
 * one with your own mutex). Different clients may be used from different threads at
 * the same time; the library's one global set-up (curl_global_init) runs once, the
 * first time sl_client_new() is called, under pthread_once. sl_checkpoint_t objects
 * follow the same rule. sl_backoff_delay_s() and sl_client_strerror() are pure.
 *
 * Fail-open. When sluiced cannot be reached (connection refused or reset, or a
 * timeout), the client switches to local mode at once: leases come from a local
 * token bucket holding a share of the pool (by default the pool's limits divided by
 * `fleet_size`), 429s are answered with full-jitter backoff, one alert line is
 * logged, and sluiced is probed every ~5 s (jittered); the first answer switches the
 * client back. With `fail_closed` set, the client never decides locally: calls
 * return SL_EUNREACHABLE instead.
 */
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif


/* A sentence describing a result code of common.h; never NULL. (sl_strerror() gives
 * its short name.) */
const char *sl_client_strerror(int code);

/* ---------------------------------------------------------------- the client */

typedef struct sl_client sl_client_t;

typedef enum sl_client_mode {
    SL_MODE_COORDINATED = 0, /* leases come from sluiced */
    SL_MODE_LOCAL = 1        /* sluiced is unreachable: leases come from the local share */
} sl_client_mode_t;

/* Receives one alert line (no trailing newline). */
typedef void (*sl_log_cb)(void *userdata, const char *line);

typedef struct sl_client_options {
    const char *url;          /* base URL of sluiced; NULL: $SLUICE_URL or
                                 http://127.0.0.1:8750 */
    const char *token;        /* bearer token; NULL: $SLUICE_TOKEN, or none */
    const char *agent;        /* required: the agent's name, [A-Za-z0-9._:-]{1,128} */
    const char *pool;         /* NULL: "default" */
    const char *role;         /* NULL: "worker" */
    double connect_timeout_s; /* default 0.5 */
    double request_timeout_s; /* a call that does not long-poll; default 1.0 */
    double poll_chunk_s;      /* longest single long-poll; default 20 */
    int fail_closed;          /* 1: never decide locally (billing-sensitive use) */
    int fleet_size;           /* agents sharing the pool; local share = limits / fleet_size;
                                 default 1 */
    /* The local share in fail-open mode; 0: the pool's limit (learnt from sluiced) /
     * fleet_size. A limit still unknown then means "not limited locally". */
    int64_t local_input_tpm;
    int64_t local_output_tpm;
    int64_t local_rpm;
    double probe_interval_s; /* probe sluiced this often in local mode (±50% jitter);
                                default 5 */
    double cache_ttl_s;      /* provider prompt-cache lifetime; default 300 */
    double backoff_base_s;   /* default 1 */
    double backoff_cap_s;    /* default 30 */
    sl_log_cb log;           /* NULL: one line to standard error */
    void *log_userdata;
    double max_hold_s; /* an acquire that saves a checkpoint asks sluiced to hold it queued
                          for an ETA up to this (the lease request's `max_wait`, at most the
                          acquire's max_wait_s left) rather than reject it past the pool's
                          max_queue_wait_s; default SL_CHECKPOINTED_MAX_WAIT_S (540);
                          0: never ask (the pool's wait limit applies) */
} sl_client_options_t;

/* Fills `opts` with the defaults above (every pointer NULL). */
void sl_client_options_init(sl_client_options_t *opts);

/* Creates a client; no network traffic happens yet. Strings are copied.
 * Returns 0 with *out set, or SL_EARG (message in `err`, which may be NULL) or
 * SL_ENOMEM. Free with sl_client_free(). */
int sl_client_new(const sl_client_options_t *opts, sl_client_t **out, char *err, size_t err_size);

/* Frees the client and every local lease it holds. NULL is allowed. */
void sl_client_free(sl_client_t *c);

/* The message of the last failed call on `c` ("" when none); valid until the next call. */
const char *sl_client_errmsg(const sl_client_t *c);

/* Coordinated or local (fail-open) mode, as of the last call. */
sl_client_mode_t sl_client_mode(const sl_client_t *c);

/* Asks sluiced whether it answers (GET /healthz) now, switching the mode to match
 * (always coordinated when fail_closed). Returns 0 when it answered, else
 * SL_EUNREACHABLE. */
int sl_client_probe(sl_client_t *c);

/* One raw API call: METHOD path (e.g. "/v1/pools") with an optional JSON body. On 0,
 * *http_status is set and *response is a NUL-terminated body the caller frees (also
 * for non-2xx answers). Returns SL_EUNREACHABLE when sluiced could not be reached
 * (this does not change the mode), SL_EARG, SL_ENOMEM. */
int sl_client_call(sl_client_t *c, const char *method, const char *path, const char *json_body,
                   double timeout_s, int *http_status, char **response);

/* ---------------------------------------------------------------- checkpoints */

/*
 * A checkpoint is an agent's plan state, saved before it waits: the goal and the
 * current step, the files it read with their SHA-256 content hashes, the decisions
 * made (each with a one-line reason), and the exact next call (opaque JSON: the
 * messages plus tool state). See docs/client.md for the file format.
 */
typedef struct sl_checkpoint sl_checkpoint_t;

typedef enum sl_file_state {
    SL_FILE_UNCHECKED = 0, /* not verified yet */
    SL_FILE_SAME = 1,      /* the content hash matches */
    SL_FILE_CHANGED = 2,   /* the content differs: re-read it */
    SL_FILE_MISSING = 3    /* the file cannot be read any more */
} sl_file_state_t;

/* A new, empty checkpoint for `goal` (copied; may be NULL). Returns NULL when out of
 * memory. Free with sl_checkpoint_free(). */
sl_checkpoint_t *sl_checkpoint_new(const char *goal);
void sl_checkpoint_free(sl_checkpoint_t *cp);

/* Set the goal / the current step of the plan (copied; a single line each).
 * Returns 0, SL_EARG (a newline, or NULL), SL_ENOMEM. */
int sl_checkpoint_set_goal(sl_checkpoint_t *cp, const char *goal);
int sl_checkpoint_set_step(sl_checkpoint_t *cp, const char *step);

/* Records that the agent read `path` (as given: relative paths resolve against the
 * working directory on verify) and hashes its current content. Adding a path again
 * re-hashes it. Returns 0, SL_EIO (unreadable; message in cp's error), SL_ENOMEM. */
int sl_checkpoint_add_file(sl_checkpoint_t *cp, const char *path);

/* Records a decision with its one-line reason (neither may contain a newline).
 * Returns 0, SL_EARG, SL_ENOMEM. */
int sl_checkpoint_add_decision(sl_checkpoint_t *cp, const char *decision, const char *reason);

/* Stores the exact next call, any JSON text (an object with messages and tool state
 * is usual). Returns 0, SL_EARG (not JSON), SL_ENOMEM. */
int sl_checkpoint_set_next_call(sl_checkpoint_t *cp, const char *json_text);

/* The request_id of the acquire the agent was waiting on (set by sl_acquire before it
 * waits; NULL or "" clears it). Resuming with the same request_id gets the same
 * answer from sluiced and is never charged twice. Returns 0, SL_EARG, SL_ENOMEM. */
int sl_checkpoint_set_request_id(sl_checkpoint_t *cp, const char *request_id);

/* Writes `cp` to `path` atomically: a temporary file in the same directory, fsync,
 * rename over `path`, fsync of the directory. Records the save time. Returns 0 or
 * SL_EIO (message via sl_checkpoint_errmsg), SL_ENOMEM. */
int sl_checkpoint_save(sl_checkpoint_t *cp, const char *path);

/* Reads a checkpoint from `path`. Returns 0 with *out set, SL_EIO (unreadable),
 * SL_ECORRUPT (not a sluice checkpoint), SL_ENOMEM; on failure `err` (may be NULL)
 * names the file and the problem. */
int sl_checkpoint_load(const char *path, sl_checkpoint_t **out, char *err, size_t err_size);

/* Re-hashes every recorded file and sets its state. Returns the number of files that
 * changed or went missing (0: nothing to re-read), or SL_ENOMEM. */
int sl_checkpoint_verify(sl_checkpoint_t *cp);

/* Resume = load + verify: *out is the checkpoint, *changed the number of files to
 * re-read (their names via sl_checkpoint_file_* with state SL_FILE_CHANGED or
 * SL_FILE_MISSING). Returns 0 or the errors of sl_checkpoint_load. */
int sl_checkpoint_resume(const char *path, sl_checkpoint_t **out, size_t *changed, char *err,
                         size_t err_size);

/* Accessors. Strings are owned by `cp` and stay valid until it is changed or freed;
 * they are NULL when never set. */
const char *sl_checkpoint_goal(const sl_checkpoint_t *cp);
const char *sl_checkpoint_step(const sl_checkpoint_t *cp);
const char *sl_checkpoint_next_call(const sl_checkpoint_t *cp); /* compact JSON text */
const char *sl_checkpoint_request_id(const sl_checkpoint_t *cp);
double sl_checkpoint_saved_at(const sl_checkpoint_t *cp); /* Unix time; 0: never saved */
size_t sl_checkpoint_file_count(const sl_checkpoint_t *cp);
const char *sl_checkpoint_file_path(const sl_checkpoint_t *cp, size_t i);
const char *sl_checkpoint_file_sha256(const sl_checkpoint_t *cp, size_t i); /* 64 hex */
sl_file_state_t sl_checkpoint_file_state(const sl_checkpoint_t *cp, size_t i);
size_t sl_checkpoint_decision_count(const sl_checkpoint_t *cp);
const char *sl_checkpoint_decision(const sl_checkpoint_t *cp, size_t i);
const char *sl_checkpoint_decision_reason(const sl_checkpoint_t *cp, size_t i);
const char *sl_checkpoint_errmsg(const sl_checkpoint_t *cp);

/* The SHA-256 of a file's content as 64 lower-case hex digits plus NUL in `hex`.
 * Returns 0, or SL_EIO with a message in `err` (may be NULL). */
int sl_sha256_file(const char *path, char hex[65], char *err, size_t err_size);

/* ---------------------------------------------------------------- leases */

/* What sl_acquire is about to wait for; passed to the wait callback. */
typedef enum sl_wait_kind {
    SL_WAIT_QUEUED = 0,   /* in sluiced's queue; `eta_s`, `position` */
    SL_WAIT_REJECTED = 1, /* rejected; will ask again after `eta_s` (the retry_after) */
    SL_WAIT_BACKOFF = 2,  /* backing off after a provider 429 */
    SL_WAIT_LOCAL = 3     /* local mode: the local share refills in `eta_s` */
} sl_wait_kind_t;

typedef struct sl_wait {
    sl_wait_kind_t kind;
    double eta_s;       /* expected seconds until the grant (or the next attempt) */
    int64_t position;   /* place in the queue (SL_WAIT_QUEUED), else 0 */
    const char *reason; /* the reject reason (SL_WAIT_REJECTED), else NULL */
    double waited_s;    /* waited so far in this acquire */
    sl_client_mode_t mode;
} sl_wait_t;

/* Called before each wait of sl_acquire (every long-poll, every sleep) with a fresh
 * ETA. Return 0 to keep waiting, non-zero to give up: sl_acquire then gives up its
 * place (a queued ticket is cancelled) and returns SL_ECANCELED. */
typedef int (*sl_wait_cb)(void *userdata, const sl_wait_t *wait);

#define SL_WAIT_FOREVER (-1.0)

typedef struct sl_acquire_req {
    int64_t input_tokens;   /* required: uncached prompt tokens, counted locally */
    int64_t cached_tokens;  /* the cached prompt prefix. Always pass it: sluiced charges
                               it as input when the cache went cold (e.g. the wait
                               outlasted the cache TTL); so does local mode. */
    int64_t output_tokens;  /* required: max_tokens of the call */
    const char *task;       /* NULL: none */
    int64_t unblocks;       /* tasks waiting on this one (no task graph); 0 */
    const char *priority;   /* NULL: "normal" */
    const char *cache_key;  /* NULL: the agent */
    double ttl_s;           /* lease lifetime; 0: the pool's lease_ttl */
    double cache_ttl_s;     /* how long the provider keeps the cached prefix this call
                               writes: 0 = the pool's cache_ttl_s (a 5-minute write);
                               3600 for Anthropic's cache_control ttl "1h" (sluiced
                               refuses more than a day) */
    double max_wait_s;      /* longest the acquire may wait in all; SL_WAIT_FOREVER (the
                               default) waits as long as needed, 0 never waits */
    const char *request_id; /* NULL: a random one (kept for transport retries, and saved
                               in the checkpoint); pass a checkpoint's to resume */
    sl_wait_cb on_wait;     /* NULL: none */
    void *wait_userdata;
    /* When both are set, the checkpoint (with the request_id) is saved to
     * `checkpoint_path` before the first wait. */
    sl_checkpoint_t *checkpoint;
    const char *checkpoint_path;
} sl_acquire_req_t;

/* Fills `req` with the defaults: zeros, NULLs, max_wait_s = SL_WAIT_FOREVER. */
void sl_acquire_req_init(sl_acquire_req_t *req);

typedef enum sl_lease_status {
    SL_LEASE_GRANTED = 0,
    SL_LEASE_QUEUED = 1,  /* max_wait_s ran out while queued (the ticket was given up) */
    SL_LEASE_REJECTED = 2 /* rejected; retry_at is when to come back */
} sl_lease_status_t;

typedef struct sl_lease {
    sl_lease_status_t status;
    char id[72]; /* the lease id ("local-N" for a lease of the local share) */
    char request_id[40];
    char ticket[72];   /* the last ticket waited on, or "" */
    char reason[64];   /* the reject reason, or "" */
    int local;         /* 1: granted in local mode; settle/cancel/extend stay local */
    double expires_at; /* Unix time */
    double ttl_s;
    double weight;
    int64_t charged_input_tokens; /* includes a cold-cache penalty when one was applied */
    int64_t charged_output_tokens;
    int cache_penalty; /* 1: the cached prefix was charged as input (cache cold) */
    double waited_s;   /* time this acquire waited in all */
    double retry_at;   /* SL_LEASE_REJECTED: Unix time to come back */
    double retry_after_s;
    double eta_s; /* SL_LEASE_QUEUED: the last ETA */
} sl_lease_t;

/* Asks for a lease and waits for it: POST /v1/leases, then GET /v1/tickets/{t}?wait
 * while queued, and asking again at retry_at after a reject, until granted or
 * `max_wait_s` runs out. Before the first wait it saves the checkpoint (when given)
 * and before every wait it calls `on_wait`. It first sleeps out any backoff that a
 * settle with got_429 started. In local mode it takes the need from the local share.
 * Returns 0 with `lease` granted; SL_EMAXWAIT or SL_EREJECTED with `lease`
 * describing the last answer; SL_ECANCELED; SL_EUNREACHABLE (fail_closed only);
 * SL_EINVAL, SL_EAUTH, SL_ENOTFOUND, SL_ECAPACITY, SL_EUNAVAILABLE,
 * SL_EPROTO, SL_EHTTP, SL_EIO (checkpoint), SL_EARG, SL_ENOMEM. */
int sl_acquire(sl_client_t *c, const sl_acquire_req_t *req, sl_lease_t *lease);

/* One provider rate-limit header, name in lower case. */
typedef struct sl_header {
    const char *name;
    const char *value;
} sl_header_t;

typedef struct sl_client_usage {
    int64_t input_tokens; /* the provider's usage.input_tokens */
    int64_t output_tokens;
    int64_t cache_creation_input_tokens;
    int64_t cache_read_input_tokens;
    int got_429;                /* the call with this lease came back 429 */
    double retry_after_s;       /* the provider's retry-after; < 0: none sent */
    const sl_header_t *headers; /* the provider's rate-limit headers */
    size_t n_headers;
    const char *failure_signature; /* failing test + diff hash; NULL: none */
} sl_client_usage_t;

/* Fills `usage` with zeros, retry_after_s = -1. */
void sl_client_usage_init(sl_client_usage_t *usage);

typedef struct sl_client_settle_result {
    int64_t adjust_input_tokens; /* back into the bucket: > 0 refund, < 0 charge */
    int64_t adjust_output_tokens;
    double estimate_error;
    double backoff_s;    /* got_429: the full-jitter delay, never below
                            retry_after; the next sl_acquire sleeps it out */
    int settled_locally; /* 1: applied to the local share only */
    int64_t headers_ignored; /* rate-limit headers sluiced left out (this client's token may
                                not resync pools); the settle was applied without them */
} sl_client_settle_result_t;

/* Reports what the call used (POST /v1/leases/{id}/settle). A 429 is reported to
 * sluiced and starts the client's fallback backoff (result->backoff_s). When sluiced
 * is unreachable the settle is applied locally and 0 returned (sluiced reaps the lease
 * without refund), unless fail_closed. `result` may be NULL. Returns 0, SL_EALREADY,
 * SL_EEXPIRED, SL_ENOTFOUND, SL_EINVAL, SL_EUNREACHABLE (fail_closed), ... */
int sl_settle(sl_client_t *c, const sl_lease_t *lease, const sl_client_usage_t *usage,
              sl_client_settle_result_t *result);

/* Gives the lease back unused: a full refund (DELETE /v1/leases/{id}).
 * Returns 0, SL_EALREADY, SL_EEXPIRED, SL_ENOTFOUND, SL_EUNREACHABLE (fail_closed). */
int sl_cancel(sl_client_t *c, const sl_lease_t *lease);

/* Moves the lease's expiry to now + ttl_s (capped by the pool's max_lease_ttl) for a
 * long stream; updates lease->expires_at. Returns 0 or the errors of sl_cancel. */
int sl_extend(sl_client_t *c, sl_lease_t *lease, double ttl_s);

/* ---------------------------------------------------------------- backoff */

/* The fallback delay after the `attempt`-th consecutive 429 (attempt 0 = the first):
 * full jitter, u01 * min(cap_s, base_s * 2^attempt), with u01 in [0, 1); never below
 * retry_after_s when that is >= 0. Non-finite or negative inputs count as 0. Pure. */
double sl_backoff_delay_s(unsigned attempt, double base_s, double cap_s, double retry_after_s,
                          double u01);

/* ---------------------------------------------------------------- action limits */

/*
 * An action limit (sluiced's `limits:`, docs/limits.md) is checked before any action:
 * a tool call, a database query, an outbound request. sl_limit_check() asks sluiced
 * once and, while denied, waits: sluiced holds the check for a limit with
 * `on_limit: queue`; for the others the client sleeps the answer's retry_after and asks
 * again; both only while `wait_s` lasts. Limits are never decided locally: when sluiced
 * cannot be reached the call returns SL_EUNREACHABLE whatever fail_closed says.
 */
typedef struct sl_limit_check_req {
    const char *limit;  /* required: the limit's name */
    const char *agent;  /* NULL: the client's agent */
    const char *key;    /* the caller-named key of a per: key limit, else NULL */
    const char *action; /* the action type for costs; NULL: cost 1 */
    int64_t hits;       /* 0..1e9, default 1; 0 peeks (changes nothing) */
    double wait_s;      /* how long a denied check may wait for room; default 0 */
} sl_limit_check_req_t;

/* Fills `req` with the defaults above (hits 1, wait 0, every pointer NULL). */
void sl_limit_check_req_init(sl_limit_check_req_t *req);

typedef struct sl_limit_answer {
    int allowed;          /* 1: every level took its cost */
    int64_t limit;        /* the most restrictive level's limit (units) */
    int64_t remaining;    /* its units left */
    double retry_after_s; /* 0 when allowed; -1: no wait helps (the cost exceeds a level) */
    double reset_after_s; /* until that level is full again */
    double waited_s;      /* how long this call waited in all */
    char denied_by[257];  /* denied: the level that denied ("" when allowed), or the
                             reason sluiced refused before any level (e.g. "suspended") */
    char denied_key[257]; /* and its key */
} sl_limit_answer_t;

/* Checks `req` against sluiced and fills `answer`. Returns 0 for an answer (allowed or
 * denied: see answer->allowed); SL_EARG (no client, req, answer or limit; hits < 0;
 * wait_s < 0), SL_EINVAL (sluiced refused a field, e.g. a key the limit does not take),
 * SL_ENOTFOUND (no such limit), SL_EAUTH (the token may not act as the agent),
 * SL_EUNREACHABLE, SL_EPROTO, SL_ENOMEM. */
int sl_limit_check(sl_client_t *c, const sl_limit_check_req_t *req, sl_limit_answer_t *answer);

#ifdef __cplusplus
}
#endif

#endif
