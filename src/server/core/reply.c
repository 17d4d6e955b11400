/* reply.c - a call's lifetime and its answers (JSON, errors, engine errors, rejections).
 *
 * Every request the front accepts becomes an sl_call_t that lives until it is answered.
 * Handlers answer through the backend's completion callbacks and never touch the call
 * after starting a backend operation (the callback may have answered and freed it
 * already). A client that leaves first only clears call->req (and runs call->gone when
 * one is set); the answer, when it comes, is then dropped.
 */
#include "server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- call lifetime ---------------------------------------------------------------- */

static void on_req_gone(void *ud)
{
    sl_call_t *call = ud;
    call->req = NULL; /* the transport frees it when this returns */
    if (call->gone) call->gone(call);
}

sl_call_t *sl__call_new(sl_server_t *srv, sl_hreq_t *req)
{
    sl_call_t *call = calloc(1, sizeof(*call));
    if (!call) {
        static const char oom[] =
            "{\"error\":{\"type\":\"out_of_memory\",\"message\":\"server: out of memory\"}}\n";
        sl_hreq_reply(req, 503, "application/json", oom, sizeof(oom) - 1);
        return NULL;
    }
    call->srv = srv;
    call->req = req;
    call->method = sl_hreq_method(req) == SL_HTTP_HEAD ? SL_HTTP_GET : sl_hreq_method(req);
    sl_hreq_on_gone(req, on_req_gone, call);
    return call;
}

void sl__call_free(sl_call_t *call)
{
    sl_server_t *srv = call->srv;
    if (call->req) sl_hreq_on_gone(call->req, NULL, NULL);
    sl__access_call_gone(call);
    if (call->wait_timer) event_free(call->wait_timer);
    if (call->mode == SL_CALL_STREAM) {
        if (call->prev)
            call->prev->next = call->next;
        else if (srv->streams == call)
            srv->streams = call->next;
        if (call->next) call->next->prev = call->prev;
        srv->n_streams--;
    }
    json_decref(call->body);
    free(call);
}

void sl__call_drop(sl_call_t *call)
{
    sl_hreq_t *req = call->req;
    call->req = NULL;
    if (req) sl_hreq_abort(req);
    sl__call_free(call);
}

void sl__call_watch_close(sl_call_t *call, void (*gone)(sl_call_t *call))
{
    call->gone = gone;
    if (gone && call->req) sl_hreq_watch(call->req);
}

/* ---- answers ---------------------------------------------------------------------- */

void sl__reply_json(sl_call_t *call, int status, json_t *body)
{
    if (call->req) {
        char *s = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
        if (s) {
            size_t n = strlen(s);
            s[n] = '\n'; /* overwrite the NUL: the body is sent by length */
            sl_hreq_reply(call->req, status, "application/json", s, n + 1);
            free(s);
        } else {
            static const char oom[] =
                "{\"error\":{\"type\":\"internal\",\"message\":\"out of memory\"}}\n";
            sl_hreq_reply(call->req, 500, "application/json", oom, sizeof(oom) - 1);
        }
        call->req = NULL;
    }
    json_decref(body);
    sl__call_free(call);
}

void sl__reply_text(sl_call_t *call, int status, const char *json, size_t len)
{
    if (call->req) sl_hreq_reply(call->req, status, "application/json", json, len);
    call->req = NULL;
    sl__call_free(call);
}

void sl__reply_error(sl_call_t *call, int status, const char *type, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sl__utf8_scrub(msg); /* echoed bytes may be invalid UTF-8, which JSON cannot carry */
    sl__reply_json(call, status, json_pack("{s:{s:s,s:s}}", "error", "type", type, "message", msg));
}

int sl__error_status(int rc, sl_error_dialect_t dialect, const char **type)
{
    switch (rc) {
#define SL_ERROR(code, status, name, provider_status)                                              \
    case code:                                                                                     \
        if (type) *type = name;                                                                    \
        return dialect == SL_DIALECT_PROVIDER ? provider_status : status;
#include "../../common/errors.def"
#undef SL_ERROR
    case SL_EFORBIDDEN:
        /* A role the token may not take, or a lease of an agent it may not act as: the
         * answer of auth, which is not in errors.def (whose types the clients map back
         * to a code; theirs for 403 is SL_EAUTH). */
        if (type) *type = "forbidden";
        return 403;
    default:
        if (type) *type = "internal";
        return 500;
    }
}

void sl__reply_engine_error(sl_call_t *call, int rc, const char *errmsg)
{
    const char *type;
    int status = sl__error_status(rc, SL_DIALECT_LEASE_API, &type);
    if (rc == SL_EUNAVAILABLE && call->req) /* the backend reconnects every tick */
        sl_hreq_add_header(call->req, "Retry-After", "1");
    sl__reply_error(call, status, type, "%s", errmsg && *errmsg ? errmsg : sl_strerror(rc));
}

void sl__reply_rejected(sl_call_t *call, const char *reason, double retry_after_s, double retry_at)
{
    sl__reply_rejected_by(call, reason, NULL, retry_after_s, retry_at);
}

void sl__reply_rejected_by(sl_call_t *call, const char *reason, const char *limited_by,
                           double retry_after_s, double retry_at)
{
    if (retry_after_s < 0) retry_after_s = 0;
    if (call->req) {
        char h[32];
        double secs = retry_after_s;
        long long whole = (long long)secs;
        if ((double)whole < secs) whole++;
        snprintf(h, sizeof(h), "%lld", whole);
        sl_hreq_add_header(call->req, "Retry-After", h);
    }
    json_t *j = json_pack("{s:s,s:s,s:f,s:f}", "status", "rejected", "reason",
                          reason ? reason : "queue_wait_exceeds_max", "retry_after",
                          retry_after_s, "retry_at", retry_at);
    if (j && limited_by) json_object_set_new(j, "limited_by", json_string(limited_by));
    sl__reply_json(call, 429, j);
}
