/* HTTP/JSON transport of the client: one reused libcurl easy handle per client. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_ANSWER_BYTES (16u << 20) /* /v1/agents of a big fleet fits; a runaway does not */

typedef struct buffer {
    char *p;
    size_t n, cap;
    int too_big, oom;
} buffer_t;

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
    buffer_t *b = ud;
    size_t n = size * nmemb;
    if (b->n + n + 1 > MAX_ANSWER_BYTES) {
        b->too_big = 1;
        return 0;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return 0;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
    return n;
}

void sl__cl_http_answer_clear(sl__cl_http_answer_t *a)
{
    json_decref(a->body);
    free(a->text);
    a->body = NULL;
    a->text = NULL;
    a->status = 0;
}

int sl__cl_http(sl_client_t *c, const char *method, const char *path, json_t *body,
                double timeout_s, sl__cl_http_answer_t *out)
{
    memset(out, 0, sizeof(*out));
    size_t url_n = strlen(c->url) + strlen(path) + 1;
    char *url = malloc(url_n);
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (!url || (body && !payload)) {
        free(url);
        free(payload);
        return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    }
    snprintf(url, url_n, "%s%s", c->url, path);
    buffer_t buf = {0};
    CURL *h = c->curl;
    curl_easy_reset(h); /* keeps the connection cache: one TCP connection is reused */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->opts.connect_timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (payload) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    }
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    else if (!payload || strcmp(method, "POST") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);

    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    free(url);
    free(payload);
    if (buf.oom || rc == CURLE_OUT_OF_MEMORY) {
        free(buf.p);
        return sl__cl_fail(c, SL_ENOMEM, "out of memory reading the answer of %s %s", method, path);
    }
    if (buf.too_big) {
        free(buf.p);
        return sl__cl_fail(c, SL_EPROTO, "the answer of %s %s is over %u bytes", method, path,
                           MAX_ANSWER_BYTES);
    }
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
        free(buf.p);
        return sl__cl_fail(c, SL_EARG, "server URL \"%s\": %s", c->url, curl_easy_strerror(rc));
    }
    if (rc != CURLE_OK) {
        free(buf.p);
        return sl__cl_fail(c, SL_EUNREACHABLE, "%s %s%s: %s", method, c->url, path,
                           curl_easy_strerror(rc));
    }
    out->status = (int)status;
    out->text = buf.p ? buf.p : strdup("");
    if (!out->text) return sl__cl_fail(c, SL_ENOMEM, "out of memory");
    out->body = json_loads(out->text, JSON_DECODE_ANY, NULL);
    return 0;
}

int sl__cl_http_error(sl_client_t *c, const sl__cl_http_answer_t *a, const char *what)
{
    const char *type = "", *message = "";
    json_t *e = json_object_get(a->body, "error");
    if (json_is_object(e)) {
        type = json_string_value(json_object_get(e, "type"));
        message = json_string_value(json_object_get(e, "message"));
        type = type ? type : "";
        message = message ? message : "";
    }
    int code = 0;
    /* The answer's type, by sluiced's own table (src/common/errors.def); then the status
     * for what the table does not name (auth, a body too large, an older server). */
#define SL_ERROR(rc, status, name, provider_status)                                                \
    if (!code && !strcmp(type, name)) code = rc;
#include "../common/errors.def"
#undef SL_ERROR
    if (!code) {
        switch (a->status) {
        case 400:
            code = SL_EINVAL;
            break;
        case 401: /* fall through */
        case 403:
            code = SL_EAUTH;
            break;
        case 404:
            code = SL_ENOTFOUND;
            break;
        case 409:
            code = SL_EALREADY;
            break;
        case 410:
            code = SL_EEXPIRED;
            break;
        case 413:
            code = SL_ETOOBIG;
            break;
        case 422: /* exceeds_capacity, from a server before 413 */
            code = SL_ECAPACITY;
            break;
        case 503:
            code = SL_EUNAVAILABLE;
            break;
        default:
            code = a->body ? SL_EHTTP : SL_EPROTO;
            break;
        }
    }
    if (*message) return sl__cl_fail(c, code, "%s: %d %s: %s", what, a->status, type, message);
    return sl__cl_fail(c, code, "%s: HTTP %d%s", what, a->status,
                       a->body ? "" : " with a body that is not JSON");
}
