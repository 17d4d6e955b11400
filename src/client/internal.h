/* Declarations shared by the files of libsluice-client (not installed). */
#ifndef SL_CLIENT_INTERNAL_H
#define SL_CLIENT_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "sluice/client.h"

/* ------------------------------------------------------------ local share (local.c) */

/* The three buckets of the local share: a limit of 0 means "not limited". Each bucket
 * holds at most limit_per_min and refills at limit_per_min / 60 per second, like
 * sluiced's (docs/design.md, "Buckets"), so local mode keeps its tokens spread over the minute. */
enum { SL__CL_LB_INPUT = 0, SL__CL_LB_OUTPUT = 1, SL__CL_LB_REQUESTS = 2, SL__CL_LB_COUNT = 3 };

typedef struct sl__cl_local_bucket {
    double limit_per_min[SL__CL_LB_COUNT];
    double level[SL__CL_LB_COUNT];
    double last_refill_s; /* monotonic seconds of the last refill */
} sl__cl_local_bucket_t;

/* Sets the limits (per minute, 0 = unlimited) and fills the buckets, as of now_s. */
void sl__cl_local_bucket_init(sl__cl_local_bucket_t *b,
                              const int64_t limits_per_min[SL__CL_LB_COUNT], double now_s);

/* Changes the limits, keeping levels but capping them at the new limits. */
void sl__cl_local_bucket_set_limits(sl__cl_local_bucket_t *b,
                                    const int64_t limits_per_min[SL__CL_LB_COUNT], double now_s);

/* Takes `need` from every bucket when all hold it (returns 0); else returns the
 * seconds until they will (> 0), or -1 when a need exceeds a limit (can never fit). */
double sl__cl_local_bucket_take(sl__cl_local_bucket_t *b, const int64_t need[SL__CL_LB_COUNT],
                                double now_s);

/* Adds `delta` (positive refund, negative charge) to every bucket, capped at limits. */
void sl__cl_local_bucket_adjust(sl__cl_local_bucket_t *b, const int64_t delta[SL__CL_LB_COUNT],
                                double now_s);

/* ------------------------------------------------------------ the client */

typedef struct sl__cl_local_lease {
    uint64_t id;
    int64_t reserved_in, reserved_out;
} sl__cl_local_lease_t;

struct sl_client {
    CURL *curl;
    struct curl_slist *headers;
    char *url, *token, *agent, *pool, *role;
    sl_client_options_t opts; /* strings above replace its pointers */
    sl_client_mode_t mode;
    double next_probe_s; /* monotonic: when local mode probes sluiced next */
    int limits_known;    /* pool limits learnt from sluiced */
    int64_t pool_limits[SL__CL_LB_COUNT];
    sl__cl_local_bucket_t local;
    int local_ready;
    sl__cl_local_lease_t *local_leases;
    size_t n_local_leases, cap_local_leases;
    uint64_t next_local_id;
    unsigned consecutive_429;
    double backoff_until_s; /* monotonic */
    double last_settle_s;   /* monotonic; 0: never (local cold-cache guess) */
    uint64_t rng;
    char err[512];
};

/* Monotonic and wall-clock seconds. */
double sl__cl_now_mono_s(void);
double sl__cl_now_unix_s(void);

/* Sleeps `s` seconds (no-op when <= 0). */
void sl__cl_sleep_s(double s);

/* A uniform double in [0, 1) from the client's xorshift state. */
double sl__cl_rand01(uint64_t *state);

/* Seeds a PRNG state / writes a random 32-hex-digit id (OpenSSL RAND_bytes, falling
 * back to time and address entropy). */
uint64_t sl__cl_random_seed(void);
void sl__cl_random_hex(char *out, size_t hex_digits);

/* Records a message for sl_client_errmsg() and returns `code` (a negative SL_E*). */
int sl__cl_fail(sl_client_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sends the alert line through the log callback. */
void sl__cl_alert(sl_client_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An HTTP answer: status and parsed JSON body (NULL when not JSON). */
typedef struct sl__cl_http_answer {
    int status;
    json_t *body;
    char *text;
} sl__cl_http_answer_t;

void sl__cl_http_answer_clear(sl__cl_http_answer_t *a);

/* Performs one request. body may be NULL. Returns 0 (an HTTP answer arrived, any
 * status), SL_EUNREACHABLE (refused, reset, timeout: message in c->err), SL_ENOMEM. */
int sl__cl_http(sl_client_t *c, const char *method, const char *path, json_t *body,
                double timeout_s, sl__cl_http_answer_t *out);

/* Maps a non-2xx answer to an SL_E* code with its error message recorded. */
int sl__cl_http_error(sl_client_t *c, const sl__cl_http_answer_t *a, const char *what);

/* Mode switches (client.c). sl__cl_go_local logs the alert line once per switch; it
 * returns SL_EUNREACHABLE when fail_closed, else 0. */
int sl__cl_go_local(sl_client_t *c, const char *why);
void sl__cl_go_coordinated(sl_client_t *c);

/* Learns the pool's limits from GET /v1/pools/{pool} once, for the local share. */
void sl__cl_learn_limits(sl_client_t *c);

/* The state of one sl_acquire call, shared by the coordinated and local paths. */
typedef struct sl__cl_acq {
    const sl_acquire_req_t *req;
    sl_lease_t *lease;
    double started_s; /* monotonic */
    int checkpoint_saved;
} sl__cl_acq_t;

/* Before every wait: saves the checkpoint the first time, then calls on_wait.
 * Returns 0 to go on waiting, SL_ECANCELED, SL_EIO (checkpoint), SL_ENOMEM. */
int sl__cl_before_wait(sl_client_t *c, sl__cl_acq_t *acq, sl_wait_kind_t kind, double eta_s,
                       int64_t position, const char *reason);

/* Seconds left of the acquire's max_wait_s (HUGE_VAL when unlimited). */
double sl__cl_wait_left_s(const sl__cl_acq_t *acq);

/* Local mode (local.c). sl__cl_local_acquire returns 0 (granted locally), 1 (sluiced
 * answered a probe: ask it again), or a negative error. */
int sl__cl_local_acquire(sl_client_t *c, sl__cl_acq_t *acq);
int sl__cl_local_settle(sl_client_t *c, const sl_lease_t *lease, const sl_client_usage_t *usage,
                        sl_client_settle_result_t *result);
int sl__cl_local_cancel(sl_client_t *c, const sl_lease_t *lease);

/* Starts or clears the fallback backoff after a settle (backoff.c). Returns the delay. */
double sl__cl_note_429(sl_client_t *c, int got_429, double retry_after_s);

#endif
