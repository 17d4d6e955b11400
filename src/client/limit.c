/* limit.c - sl_limit_check(): an action-limit check against sluiced, waiting while denied. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void sl_limit_check_req_init(sl_limit_check_req_t *req)
{
    memset(req, 0, sizeof(*req));
    req->hits = 1;
}

static json_t *check_body(const sl_client_t *c, const sl_limit_check_req_t *req, double wait_s)
{
    json_t *b = json_pack("{s:s,s:I}", "agent", req->agent ? req->agent : c->agent, "hits",
                          (json_int_t)req->hits);
    if (!b) return NULL;
    int bad = 0;
    if (req->key) bad |= json_object_set_new(b, "key", json_string(req->key));
    if (req->action) bad |= json_object_set_new(b, "action", json_string(req->action));
    /* sluiced takes a wait up to 1e9 s and holds at most its max_wait_s: a longer one
     * asks the same. */
    if (wait_s > 0) bad |= json_object_set_new(b, "wait", json_real(fmin(wait_s, 1e9)));
    if (bad) {
        json_decref(b);
        return NULL;
    }
    return b;
}

static double number(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* Reads a 200 or 429 answer into `out`. A 429 refusal made before any limit was asked
 * ({"status": "rejected", "reason": "suspended", "retry_after"}: docs/api.md
 * "Suspension") is a denial by that reason. Returns 0 or SL_EPROTO. */
static int read_answer(sl_client_t *c, int status, const json_t *b, sl_limit_answer_t *out)
{
    json_t *allowed = json_object_get(b, "allowed");
    const char *reason = json_string_value(json_object_get(b, "reason"));
    if (!json_is_boolean(allowed) && status == 429 && reason) {
        out->allowed = 0;
        out->retry_after_s = number(b, "retry_after");
        snprintf(out->denied_by, sizeof(out->denied_by), "%s", reason);
        return 0;
    }
    if (!json_is_boolean(allowed))
        return sl__cl_fail(c, SL_EPROTO, "limit check: the answer has no \"allowed\"");
    out->allowed = json_is_true(allowed);
    out->limit = (int64_t)number(b, "limit");
    out->remaining = (int64_t)number(b, "remaining");
    out->retry_after_s = number(b, "retry_after");
    out->reset_after_s = number(b, "reset_after");
    json_t *d = json_object_get(b, "denied_by");
    const char *lim = json_string_value(json_object_get(d, "limit"));
    const char *key = json_string_value(json_object_get(d, "key"));
    snprintf(out->denied_by, sizeof(out->denied_by), "%s", lim ? lim : "");
    snprintf(out->denied_key, sizeof(out->denied_key), "%s", key ? key : "");
    return 0;
}

int sl_limit_check(sl_client_t *c, const sl_limit_check_req_t *req, sl_limit_answer_t *answer)
{
    if (!c || !req || !answer || !req->limit || !*req->limit) return SL_EARG;
    memset(answer, 0, sizeof(*answer));
    c->err[0] = '\0';
    if (req->hits < 0 || !isfinite(req->wait_s) || req->wait_s < 0)
        return sl__cl_fail(c, SL_EARG, "limit check %s: hits %lld and wait_s %g must be >= 0",
                           req->limit, (long long)req->hits, req->wait_s);
    char *esc = curl_easy_escape(c->curl, req->limit, 0);
    size_t n = esc ? strlen(esc) + 32 : 0;
    char *path = esc ? malloc(n) : NULL;
    if (path) snprintf(path, n, "/v1/limits/%s/check", esc);
    curl_free(esc);
    if (!path) return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    double started = sl__cl_now_mono_s();
    int rc;
    for (;;) {
        double left = req->wait_s - (sl__cl_now_mono_s() - started);
        if (left < 0) left = 0;
        json_t *body = check_body(c, req, left);
        if (!body) {
            rc = sl__cl_fail(c, SL_ENOMEM, "out of memory");
            break;
        }
        sl__cl_http_answer_t a;
        rc = sl__cl_http(c, "POST", path, body, c->opts.request_timeout_s + left, &a);
        json_decref(body);
        if (rc < 0) break;
        if (a.status == 200 || a.status == 429)
            rc = read_answer(c, a.status, a.body, answer);
        else
            rc = sl__cl_http_error(c, &a, "limit check");
        sl__cl_http_answer_clear(&a);
        if (rc < 0 || answer->allowed || answer->retry_after_s < 0) break;
        /* Denied by a reject limit (a queue limit was already held by sluiced): sleep
         * retry_after and ask again while the wait lasts. */
        left = req->wait_s - (sl__cl_now_mono_s() - started);
        if (req->hits == 0 || answer->retry_after_s > left) break;
        sl__cl_sleep_s(answer->retry_after_s);
    }
    answer->waited_s = sl__cl_now_mono_s() - started;
    free(path);
    return rc;
}
