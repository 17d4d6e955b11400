/* The client object: options, errors, clocks, randomness, mode switches and probing. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "internal.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

const char *sl_client_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
    case SL_EARG:
        return "invalid argument";
    case SL_ENOMEM:
        return "out of memory";
    case SL_EUNREACHABLE:
        return "sluiced cannot be reached";
    case SL_EMAXWAIT:
        return "no grant before the wait ran out";
    case SL_EREJECTED:
        return "rejected until after the wait runs out";
    case SL_ECANCELED:
        return "the wait was given up";
    case SL_EPROTO:
        return "sluiced answered something that is not the API's JSON";
    case SL_EHTTP:
        return "sluiced answered an unexpected HTTP status";
    case SL_EINVAL:
        return "sluiced refused a field or value (invalid_request)";
    case SL_EAUTH:
        return "not authorized (unauthorized or forbidden)";
    case SL_ENOTFOUND:
        return "unknown pool, lease or ticket (not_found)";
    case SL_EALREADY:
        return "the lease was settled or cancelled before";
    case SL_EEXPIRED:
        return "the lease expired and was reaped (no refund)";
    case SL_ETOOBIG:
        return "the request body is too large";
    case SL_ECAPACITY:
        return "the need can never fit the pool (exceeds_capacity)";
    case SL_EUNAVAILABLE:
        return "sluiced's backend is unavailable (fail closed)";
    case SL_EIO:
        return "a file could not be read or written";
    case SL_ECORRUPT:
        return "not a valid sluice checkpoint";
    case SL_ETIME:
        return "the clock went backwards";
    case SL_EEXIST:
        return "the id is already in use";
    default:
        return "unknown error";
    }
}

double sl__cl_now_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double sl__cl_now_unix_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sl__cl_sleep_s(double s)
{
    if (!(s > 0)) return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

double sl__cl_rand01(uint64_t *state)
{
    /* xorshift64*: plenty for jitter, and a client owns its state (no locking). */
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

uint64_t sl__cl_random_seed(void)
{
    uint64_t seed = 0;
    if (RAND_bytes((unsigned char *)&seed, sizeof(seed)) != 1 || seed == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&seed;
    }
    return seed ? seed : 0x9E3779B97F4A7C15ULL;
}

void sl__cl_random_hex(char *out, size_t hex_digits)
{
    static const char digits[] = "0123456789abcdef";
    unsigned char bytes[64];
    size_t n = (hex_digits + 1) / 2;
    if (n > sizeof(bytes)) n = sizeof(bytes);
    if (RAND_bytes(bytes, (int)n) != 1) {
        uint64_t s = sl__cl_random_seed();
        for (size_t i = 0; i < n; i++)
            bytes[i] = (unsigned char)(sl__cl_rand01(&s) * 256.0);
    }
    size_t i;
    for (i = 0; i < hex_digits && i / 2 < n; i++)
        out[i] = digits[(i % 2 ? bytes[i / 2] : bytes[i / 2] >> 4) & 0xf];
    out[i] = '\0';
}

int sl__cl_fail(sl_client_t *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return code;
}

void sl__cl_alert(sl_client_t *c, const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (c->opts.log)
        c->opts.log(c->opts.log_userdata, line);
    else
        fprintf(stderr, "%s\n", line);
}

void sl_client_options_init(sl_client_options_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->connect_timeout_s = 0.5;
    opts->request_timeout_s = 1.0;
    opts->poll_chunk_s = 20.0;
    opts->fleet_size = 1;
    opts->probe_interval_s = 5.0;
    opts->cache_ttl_s = 300.0;
    opts->backoff_base_s = 1.0;
    opts->backoff_cap_s = 30.0;
    opts->max_hold_s = SL_CHECKPOINTED_MAX_WAIT_S;
}

static int valid_agent(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 128) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == ':' || ch == '-'))
            return 0;
    }
    return 1;
}

/* A malloc'd copy of `s` (NULL for NULL); out of memory sets *oom, so the caller checks
 * once after a run of copies. */
static char *dup_noting_oom(const char *s, int *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

static int positive_finite(double v)
{
    return isfinite(v) && v > 0;
}

int sl_client_new(const sl_client_options_t *opts, sl_client_t **out, char *err, size_t err_size)
{
    char scratch[8];
    if (!err) {
        err = scratch;
        err_size = sizeof(scratch);
    }
    *out = NULL;
    if (!opts || !opts->agent || !valid_agent(opts->agent)) {
        snprintf(err, err_size, "agent \"%s\": expected 1-128 characters of [A-Za-z0-9._:-]",
                 opts && opts->agent ? opts->agent : "(null)");
        return SL_EARG;
    }
    if (!positive_finite(opts->connect_timeout_s) || !positive_finite(opts->request_timeout_s) ||
        !positive_finite(opts->poll_chunk_s) || !positive_finite(opts->probe_interval_s) ||
        !positive_finite(opts->cache_ttl_s) || !positive_finite(opts->backoff_base_s) ||
        !positive_finite(opts->backoff_cap_s)) {
        snprintf(err, err_size,
                 "every timeout, interval, TTL and backoff option must be a "
                 "positive number (call sl_client_options_init first)");
        return SL_EARG;
    }
    if (!isfinite(opts->max_hold_s) || opts->max_hold_s < 0 || opts->max_hold_s > 86400) {
        snprintf(err, err_size, "max_hold_s %g must be between 0 and 86400 seconds",
                 opts->max_hold_s);
        return SL_EARG;
    }
    if (opts->fleet_size < 1 || opts->local_input_tpm < 0 || opts->local_output_tpm < 0 ||
        opts->local_rpm < 0) {
        snprintf(err, err_size, "fleet_size %d must be >= 1 and local limits >= 0",
                 opts->fleet_size);
        return SL_EARG;
    }
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) {
        snprintf(err, err_size, "curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
        return SL_ENOMEM;
    }
    sl_client_t *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, err_size, "out of memory");
        return SL_ENOMEM;
    }
    c->opts = *opts;
    const char *url = opts->url ? opts->url : getenv("SLUICE_URL");
    if (!url || !*url) url = "http://127.0.0.1:8750";
    const char *token = opts->token ? opts->token : getenv("SLUICE_TOKEN");
    int oom = 0;
    c->url = dup_noting_oom(url, &oom);
    if (c->url) {
        size_t n = strlen(c->url);
        while (n > 0 && c->url[n - 1] == '/')
            c->url[--n] = '\0';
    }
    c->token = token && *token ? dup_noting_oom(token, &oom) : NULL;
    c->agent = dup_noting_oom(opts->agent, &oom);
    c->pool = dup_noting_oom(opts->pool ? opts->pool : "default", &oom);
    c->role = dup_noting_oom(opts->role ? opts->role : "worker", &oom);
    c->curl = curl_easy_init();
    c->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (c->headers && c->token) {
        size_t n = strlen(c->token) + 32;
        char *h = malloc(n);
        if (h) {
            snprintf(h, n, "Authorization: Bearer %s", c->token);
            struct curl_slist *more = curl_slist_append(c->headers, h);
            if (more)
                c->headers = more;
            else
                oom = 1;
            free(h);
        } else {
            oom = 1;
        }
    }
    if (oom || !c->curl || !c->headers) {
        sl_client_free(c);
        snprintf(err, err_size, "out of memory");
        return SL_ENOMEM;
    }
    c->opts.url = c->url;
    c->opts.token = c->token;
    c->opts.agent = c->agent;
    c->opts.pool = c->pool;
    c->opts.role = c->role;
    c->mode = SL_MODE_COORDINATED;
    c->rng = sl__cl_random_seed();
    c->next_local_id = 1;
    *out = c;
    return 0;
}

void sl_client_free(sl_client_t *c)
{
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    free(c->url);
    free(c->token);
    free(c->agent);
    free(c->pool);
    free(c->role);
    free(c->local_leases);
    free(c);
}

const char *sl_client_errmsg(const sl_client_t *c)
{
    return c ? c->err : "";
}

sl_client_mode_t sl_client_mode(const sl_client_t *c)
{
    return c->mode;
}

static double jittered_probe_interval(sl_client_t *c)
{
    /* ±50% so a fleet that lost sluiced together does not probe it in step. */
    return c->opts.probe_interval_s * (0.5 + sl__cl_rand01(&c->rng));
}

int sl__cl_go_local(sl_client_t *c, const char *why)
{
    if (c->opts.fail_closed)
        return sl__cl_fail(c, SL_EUNREACHABLE, "sluiced at %s cannot be reached (%s); fail_closed",
                           c->url, why);
    if (c->mode != SL_MODE_LOCAL) {
        c->mode = SL_MODE_LOCAL;
        sl__cl_alert(c,
                     "sluice: ALERT agent %s: sluiced at %s unreachable (%s); fail-open: local "
                     "share of pool %s, probing every ~%.0f s",
                     c->agent, c->url, why, c->pool, c->opts.probe_interval_s);
    }
    c->next_probe_s = sl__cl_now_mono_s() + jittered_probe_interval(c);
    return 0;
}

void sl__cl_go_coordinated(sl_client_t *c)
{
    if (c->mode == SL_MODE_LOCAL) {
        c->mode = SL_MODE_COORDINATED;
        sl__cl_alert(c, "sluice: agent %s: sluiced at %s answers again; coordinated mode", c->agent,
                     c->url);
    }
}

int sl_client_probe(sl_client_t *c)
{
    sl__cl_http_answer_t a;
    int rc = sl__cl_http(c, "GET", "/healthz", NULL, c->opts.request_timeout_s, &a);
    if (rc == 0) {
        sl__cl_http_answer_clear(&a);
        sl__cl_go_coordinated(c);
        return 0;
    }
    if (rc == SL_EUNREACHABLE && !c->opts.fail_closed) {
        char why[sizeof(c->err)];
        memcpy(why, c->err, sizeof(why));
        sl__cl_go_local(c, why);
        snprintf(c->err, sizeof(c->err), "%s", why);
    }
    return SL_EUNREACHABLE;
}

void sl__cl_learn_limits(sl_client_t *c)
{
    if (c->limits_known || c->opts.fail_closed) return;
    if (c->opts.local_input_tpm && c->opts.local_output_tpm && c->opts.local_rpm) return;
    size_t n = strlen(c->pool) * 3 + 16;
    char *path = malloc(n);
    if (!path) return;
    char *esc = curl_easy_escape(c->curl, c->pool, 0);
    snprintf(path, n, "/v1/pools/%s", esc ? esc : c->pool);
    curl_free(esc);
    sl__cl_http_answer_t a;
    if (sl__cl_http(c, "GET", path, NULL, c->opts.request_timeout_s, &a) == 0) {
        json_t *limits = a.status == 200 ? json_object_get(a.body, "limits") : NULL;
        if (json_is_object(limits)) {
            static const char *names[SL__CL_LB_COUNT] = {"input_tpm", "output_tpm", "rpm"};
            for (int i = 0; i < SL__CL_LB_COUNT; i++) {
                json_t *v = json_object_get(limits, names[i]);
                c->pool_limits[i] = json_is_integer(v) ? json_integer_value(v) : 0;
            }
            c->limits_known = 1;
        }
    }
    sl__cl_http_answer_clear(&a);
    free(path);
}

int sl_client_call(sl_client_t *c, const char *method, const char *path, const char *json_body,
                   double timeout_s, int *http_status, char **response)
{
    if (!c || !method || !path || path[0] != '/' || !http_status || !response) return SL_EARG;
    *response = NULL;
    json_t *body = NULL;
    if (json_body) {
        json_error_t jerr;
        body = json_loads(json_body, JSON_DECODE_ANY, &jerr);
        if (!body)
            return sl__cl_fail(c, SL_EARG, "request body is not JSON: %s (line %d)", jerr.text,
                               jerr.line);
    }
    sl__cl_http_answer_t a;
    int rc = sl__cl_http(c, method, path, body,
                         timeout_s > 0 ? timeout_s : c->opts.request_timeout_s, &a);
    json_decref(body);
    if (rc < 0) return rc;
    *http_status = a.status;
    *response = a.text;
    a.text = NULL;
    sl__cl_http_answer_clear(&a);
    return 0;
}
