/* Settle, cancel and extend a lease; local leases stay local, lost ones fail open. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void sl_client_usage_init(sl_client_usage_t *usage)
{
    memset(usage, 0, sizeof(*usage));
    usage->retry_after_s = -1;
}

static char *lease_path(sl_client_t *c, const char *id, const char *suffix)
{
    char *esc = curl_easy_escape(c->curl, id, 0);
    if (!esc) return NULL;
    size_t n = strlen(esc) + strlen(suffix) + 16;
    char *p = malloc(n);
    if (p) snprintf(p, n, "/v1/leases/%s%s", esc, suffix);
    curl_free(esc);
    return p;
}

static json_t *settle_body(const sl_client_usage_t *u)
{
    json_t *b = json_object();
    if (!b) return NULL;
    int bad = 0;
    bad |= json_object_set_new(b, "input_tokens", json_integer(u->input_tokens));
    bad |= json_object_set_new(b, "output_tokens", json_integer(u->output_tokens));
    bad |= json_object_set_new(b, "cache_creation_input_tokens",
                               json_integer(u->cache_creation_input_tokens));
    bad |=
        json_object_set_new(b, "cache_read_input_tokens", json_integer(u->cache_read_input_tokens));
    bad |= json_object_set_new(b, "got_429", json_boolean(u->got_429));
    if (isfinite(u->retry_after_s) && u->retry_after_s >= 0)
        bad |= json_object_set_new(b, "retry_after", json_real(u->retry_after_s));
    if (u->n_headers) {
        json_t *h = json_object();
        bad |= h == NULL;
        for (size_t i = 0; h && i < u->n_headers; i++) {
            char name[128];
            size_t k;
            for (k = 0; u->headers[i].name[k] && k < sizeof(name) - 1; k++) {
                char ch = u->headers[i].name[k];
                name[k] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
            }
            name[k] = '\0';
            bad |= json_object_set_new(h, name, json_string(u->headers[i].value));
        }
        bad |= json_object_set_new(b, "headers", h);
    }
    if (u->failure_signature)
        bad |= json_object_set_new(b, "failure_signature", json_string(u->failure_signature));
    if (bad) {
        json_decref(b);
        return NULL;
    }
    return b;
}

/* After a transport failure on a lease call: fail closed, or go local and carry on. */
static int lost_sluiced(sl_client_t *c)
{
    char why[512];
    snprintf(why, sizeof(why), "%s", c->err);
    return sl__cl_go_local(c, why);
}

int sl_settle(sl_client_t *c, const sl_lease_t *lease, const sl_client_usage_t *usage,
              sl_client_settle_result_t *result)
{
    sl_client_settle_result_t scratch;
    if (!result) result = &scratch;
    memset(result, 0, sizeof(*result));
    if (!c || !lease || !usage || !lease->id[0]) return SL_EARG;
    c->err[0] = '\0';
    if (usage->input_tokens < 0 || usage->output_tokens < 0 ||
        usage->cache_creation_input_tokens < 0 || usage->cache_read_input_tokens < 0)
        return sl__cl_fail(c, SL_EARG, "settle of lease %s: token counts must be >= 0", lease->id);
    for (size_t i = 0; i < usage->n_headers; i++)
        if (!usage->headers || !usage->headers[i].name || !usage->headers[i].value)
            return sl__cl_fail(c, SL_EARG, "settle of lease %s: header %zu has no name or value",
                               lease->id, i);
    int rc;
    if (lease->local) {
        rc = sl__cl_local_settle(c, lease, usage, result);
    } else {
        json_t *body = settle_body(usage);
        char *path = lease_path(c, lease->id, "/settle");
        if (!body || !path) {
            json_decref(body);
            free(path);
            return sl__cl_fail(c, SL_ENOMEM, "out of memory");
        }
        sl__cl_http_answer_t a;
        rc = sl__cl_http(c, "POST", path, body, c->opts.request_timeout_s, &a);
        json_decref(body);
        free(path);
        if (rc == SL_EUNREACHABLE) {
            rc = lost_sluiced(c);
            result->settled_locally = 1; /* sluiced will reap it, without refund */
        } else if (rc == 0) {
            sl__cl_go_coordinated(c);
            if (a.status == 200) {
                json_t *adj = json_object_get(a.body, "adjust");
                result->adjust_input_tokens =
                    json_integer_value(json_object_get(adj, "input_tokens"));
                result->adjust_output_tokens =
                    json_integer_value(json_object_get(adj, "output_tokens"));
                json_t *e = json_object_get(a.body, "estimate_error");
                result->estimate_error = json_is_number(e) ? json_number_value(e) : 0;
                json_t *ignored = json_object_get(a.body, "headers_ignored");
                result->headers_ignored =
                    json_integer_value(json_object_get(ignored, "count"));
            } else {
                rc = sl__cl_http_error(c, &a, "settle");
            }
            sl__cl_http_answer_clear(&a);
        }
    }
    if (rc == 0) {
        c->last_settle_s = sl__cl_now_mono_s();
        result->backoff_s = sl__cl_note_429(c, usage->got_429, usage->retry_after_s);
    }
    return rc;
}

int sl_cancel(sl_client_t *c, const sl_lease_t *lease)
{
    if (!c || !lease || !lease->id[0]) return SL_EARG;
    c->err[0] = '\0';
    if (lease->local) return sl__cl_local_cancel(c, lease);
    char *path = lease_path(c, lease->id, "");
    if (!path) return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    sl__cl_http_answer_t a;
    int rc = sl__cl_http(c, "DELETE", path, NULL, c->opts.request_timeout_s, &a);
    free(path);
    if (rc == SL_EUNREACHABLE) return lost_sluiced(c);
    if (rc < 0) return rc;
    sl__cl_go_coordinated(c);
    if (a.status != 200) rc = sl__cl_http_error(c, &a, "cancel");
    sl__cl_http_answer_clear(&a);
    return rc;
}

int sl_extend(sl_client_t *c, sl_lease_t *lease, double ttl_s)
{
    if (!c || !lease || !lease->id[0]) return SL_EARG;
    c->err[0] = '\0';
    if (!isfinite(ttl_s) || ttl_s <= 0)
        return sl__cl_fail(c, SL_EARG, "extend of lease %s: ttl_s %g must be > 0", lease->id,
                           ttl_s);
    if (lease->local) {
        lease->expires_at = sl__cl_now_unix_s() + ttl_s;
        lease->ttl_s = ttl_s;
        return 0;
    }
    char *path = lease_path(c, lease->id, "/extend");
    json_t *body = json_pack("{s:f}", "ttl", ttl_s);
    if (!path || !body) {
        free(path);
        json_decref(body);
        return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    }
    sl__cl_http_answer_t a;
    int rc = sl__cl_http(c, "POST", path, body, c->opts.request_timeout_s, &a);
    free(path);
    json_decref(body);
    if (rc == SL_EUNREACHABLE) return lost_sluiced(c);
    if (rc < 0) return rc;
    sl__cl_go_coordinated(c);
    if (a.status == 200) {
        json_t *e = json_object_get(a.body, "expires_at");
        if (json_is_number(e)) lease->expires_at = json_number_value(e);
        lease->ttl_s = ttl_s;
    } else {
        rc = sl__cl_http_error(c, &a, "extend");
    }
    sl__cl_http_answer_clear(&a);
    return rc;
}
