/* proxy_batches.c - the providers' batch APIs through the proxy: routes, the processing queue.
 *
 * Anthropic's Message Batches and OpenAI's Files and Batch APIs go to the provider with
 * the pool's key under a batch pool of their own (a pool with `batch: true`): every call
 * is a lease of one request and no tokens on it (its rpm is the provider's limit on the
 * batch endpoints), and a create counts its requests against the pool's
 * `max_batch_requests`, the provider's bound on requests in its processing queue, kept by
 * the backend so that replicas share it. The proxy learns that a batch ended only from an
 * answer that shows it (a retrieve, a list, a cancel): a batch nobody looks at again stays
 * counted until the backend forgets it, past the providers' 24-hour processing window
 * (docs/proxy.md says so).
 *
 * Paths follow proxy_routes.c's rules byte for byte: the ids are single segments decoded
 * and checked as model ids are. */
#define _GNU_SOURCE /* memmem, strcasestr */
#include "proxy_endpoints.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- routes ----------------------------------------------------------------------------- */

typedef struct batch_route {
    sl_upstream_api_t api;
    const char *base;   /* after /anthropic or /openai (without /v1), before any id */
    const char *suffix; /* after the id: NULL for no id, "" for the id alone */
    sl_http_method_t method;
    sl_batch_op_t op;
    const char *allow; /* every method the same spelling takes */
} batch_route_t;

static const batch_route_t routes[] = {
    {SL_UPSTREAM_ANTHROPIC, "/messages/batches", NULL, SL_HTTP_POST, SL_BATCH_CREATE, "GET, POST"},
    {SL_UPSTREAM_ANTHROPIC, "/messages/batches", NULL, SL_HTTP_GET, SL_BATCH_LIST, "GET, POST"},
    {SL_UPSTREAM_ANTHROPIC, "/messages/batches", "", SL_HTTP_GET, SL_BATCH_RETRIEVE, "GET, DELETE"},
    {SL_UPSTREAM_ANTHROPIC, "/messages/batches", "", SL_HTTP_DELETE, SL_BATCH_DELETE,
     "GET, DELETE"},
    {SL_UPSTREAM_ANTHROPIC, "/messages/batches", "/results", SL_HTTP_GET, SL_BATCH_RESULTS, "GET"},
    {SL_UPSTREAM_ANTHROPIC, "/messages/batches", "/cancel", SL_HTTP_POST, SL_BATCH_CANCEL, "POST"},
    {SL_UPSTREAM_OPENAI, "/files", NULL, SL_HTTP_POST, SL_BATCH_FILE_UPLOAD, "GET, POST"},
    {SL_UPSTREAM_OPENAI, "/files", NULL, SL_HTTP_GET, SL_BATCH_FILE_LIST, "GET, POST"},
    {SL_UPSTREAM_OPENAI, "/files", "", SL_HTTP_GET, SL_BATCH_FILE_RETRIEVE, "GET, DELETE"},
    {SL_UPSTREAM_OPENAI, "/files", "", SL_HTTP_DELETE, SL_BATCH_FILE_DELETE, "GET, DELETE"},
    {SL_UPSTREAM_OPENAI, "/files", "/content", SL_HTTP_GET, SL_BATCH_FILE_CONTENT, "GET"},
    {SL_UPSTREAM_OPENAI, "/batches", NULL, SL_HTTP_POST, SL_BATCH_CREATE, "GET, POST"},
    {SL_UPSTREAM_OPENAI, "/batches", NULL, SL_HTTP_GET, SL_BATCH_LIST, "GET, POST"},
    {SL_UPSTREAM_OPENAI, "/batches", "", SL_HTTP_GET, SL_BATCH_RETRIEVE, "GET"},
    {SL_UPSTREAM_OPENAI, "/batches", "/cancel", SL_HTTP_POST, SL_BATCH_CANCEL, "POST"},
};

const char *sl__batch_method(sl_batch_op_t op)
{
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (routes[i].op == op)
            return routes[i].method == SL_HTTP_GET      ? "GET"
                   : routes[i].method == SL_HTTP_DELETE ? "DELETE"
                                                        : "POST";
    return "POST";
}

/* Does path[0, len) match `r` (its id, when it has one, decoded into `id`)? */
static bool route_matches(const batch_route_t *r, const char *path, size_t len, char *id)
{
    size_t blen = strlen(r->base);
    if (len < blen || memcmp(path, r->base, blen) != 0) return false;
    path += blen, len -= blen;
    id[0] = '\0';
    if (!r->suffix) return len == 0;
    if (len < 2 || path[0] != '/') return false;
    path++, len--;
    size_t slen = strlen(r->suffix);
    if (len <= slen || memcmp(path + len - slen, r->suffix, slen) != 0) return false;
    return sl__proxy_id_decode(path, len - slen, id);
}

sl_batch_op_t sl__batch_resolve(sl_upstream_api_t api, const char *path, size_t len,
                                sl_http_method_t method, char *upstream, size_t upstream_size,
                                char *id, const char **allow)
{
    const char *prefix = api == SL_UPSTREAM_ANTHROPIC ? "/anthropic" : "/openai";
    size_t plen = strlen(prefix);
    *allow = NULL;
    if (len < plen || memcmp(path, prefix, plen) != 0) return SL_BATCH_NONE;
    path += plen, len -= plen;
    if (len >= 4 && !memcmp(path, "/v1/", 4)) path += 3, len -= 3; /* with or without /v1 */
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const batch_route_t *r = &routes[i];
        if (r->api != api || !route_matches(r, path, len, id)) continue;
        if (r->method != method) {
            *allow = r->allow;
            continue;
        }
        if (!id[0])
            snprintf(upstream, upstream_size, "/v1%s", r->base);
        else
            snprintf(upstream, upstream_size, "/v1%s/%s%s", r->base, id, r->suffix);
        *allow = NULL;
        return r->op;
    }
    return SL_BATCH_NONE;
}

/* ---- the processing queue ----------------------------------------------------------------- */
/* The count itself lives in the backend (sl_backend_batch_queue): replicas share it and
 * a restart keeps it. Here: what the answers say (a create's id, the batches that ended)
 * and the line counts of uploaded files, which only the replica that saw the upload knows. */

typedef struct file_entry {
    char id[257];
    int64_t lines;
} file_entry_t;

struct sl_batch_queue {
    file_entry_t files[SL_BATCH_TRACKED]; /* a ring: the oldest is overwritten */
    size_t next_file;
};

sl_batch_queue_t *sl__batch_queue_new(void)
{
    return calloc(1, sizeof(sl_batch_queue_t));
}

void sl__batch_queue_free(sl_batch_queue_t *q)
{
    free(q);
}

static int64_t file_lines(const sl_batch_queue_t *q, const char *id)
{
    for (size_t i = 0; i < SL_BATCH_TRACKED; i++)
        if (q->files[i].id[0] && !strcmp(q->files[i].id, id)) return q->files[i].lines;
    return 0;
}

int64_t sl__batch_create_requests(const sl_batch_queue_t *q, sl_upstream_api_t api,
                                  const json_t *body, char *err, size_t errlen)
{
    if (api == SL_UPSTREAM_ANTHROPIC) {
        const json_t *reqs = json_object_get(body, "requests");
        if (!json_is_array(reqs)) {
            snprintf(err, errlen, "sluice: requests: expected an array of batch requests");
            return -1;
        }
        return (int64_t)json_array_size(reqs);
    }
    const char *file = json_string_value(json_object_get(body, "input_file_id"));
    if (!file) {
        snprintf(err, errlen, "sluice: input_file_id: expected the id of an uploaded file");
        return -1;
    }
    return file_lines(q, file);
}

bool sl__batch_created(const char *body, size_t len, char *id, int64_t *requests)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    const char *s = json_string_value(json_object_get(j, "id"));
    bool ok = s && *s && strlen(s) <= SL_BATCHQ_ID_MAX;
    if (ok) snprintf(id, SL_BATCHQ_ID_MAX + 1, "%s", s);
    /* OpenAI: a file the proxy did not see uploaded counts as the provider counts it. */
    json_t *total = json_object_get(json_object_get(j, "request_counts"), "total");
    if (ok && *requests == 0 && json_is_integer(total) && json_integer_value(total) > 0)
        *requests = json_integer_value(total);
    json_decref(j);
    return ok;
}

/* Has the batch object `b` ended (no longer in the provider's processing queue)? */
static bool batch_ended(sl_upstream_api_t api, const json_t *b)
{
    if (api == SL_UPSTREAM_ANTHROPIC) {
        const char *s = json_string_value(json_object_get(b, "processing_status"));
        return s && !strcmp(s, "ended");
    }
    static const char *const ended[] = {"completed", "failed", "expired", "cancelled"};
    const char *s = json_string_value(json_object_get(b, "status"));
    for (size_t i = 0; s && i < sizeof(ended) / sizeof(ended[0]); i++)
        if (!strcmp(s, ended[i])) return true;
    return false;
}

static void report_if_ended(sl_upstream_api_t api, const json_t *b, sl_batch_ended_fn ended,
                            void *ud)
{
    const char *id = json_string_value(json_object_get(b, "id"));
    if (id && *id && strlen(id) <= SL_BATCHQ_ID_MAX && batch_ended(api, b)) ended(id, ud);
}

/* Non-blank lines of text[0, len). */
static int64_t count_lines(const char *text, size_t len)
{
    int64_t n = 0;
    bool blank = true;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n') {
            n += !blank;
            blank = true;
        } else if (text[i] != ' ' && text[i] != '\r' && text[i] != '\t') {
            blank = false;
        }
    }
    return n + !blank;
}

/* The bytes of the multipart part named "file" in body[0, len), or NULL. */
static const char *multipart_file(const char *body, size_t len, const char *ctype, size_t *file_len)
{
    const char *b = ctype ? strcasestr(ctype, "boundary=") : NULL;
    if (!b) return NULL;
    b += 9;
    char delim[200];
    size_t blen = strcspn(b, "; ");
    if (blen > 0 && b[0] == '"') {
        b++;
        blen = strcspn(b, "\"");
    }
    if (blen == 0 || blen + 4 >= sizeof(delim)) return NULL;
    snprintf(delim, sizeof(delim), "\r\n--%.*s", (int)blen, b);
    size_t dlen = strlen(delim);
    const char *end = body + len;
    const char *p = memmem(body, len, delim + 2, dlen - 2); /* the first has no CRLF */
    while (p) {
        const char *head = p + dlen - 2;
        const char *content = memmem(head, (size_t)(end - head), "\r\n\r\n", 4);
        if (!content) return NULL;
        content += 4;
        const char *next = memmem(content, (size_t)(end - content), delim, dlen);
        if (!next) return NULL;
        const char *name = memmem(head, (size_t)(content - head), "name=\"file\"", 11);
        if (name) {
            *file_len = (size_t)(next - content);
            return content;
        }
        p = next + 2;
    }
    return NULL;
}

void sl__batch_on_answer(sl_batch_queue_t *q, sl_upstream_api_t api, sl_batch_op_t op,
                         const char *body, size_t len, const char *upload, size_t upload_len,
                         const char *ctype, sl_batch_ended_fn ended, void *ud)
{
    if (op != SL_BATCH_RETRIEVE && op != SL_BATCH_LIST && op != SL_BATCH_CANCEL &&
        op != SL_BATCH_FILE_UPLOAD)
        return;
    json_t *j = json_loadb(body, len, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return;
    }
    if (op == SL_BATCH_FILE_UPLOAD) {
        const char *id = json_string_value(json_object_get(j, "id"));
        size_t flen = 0;
        const char *file = multipart_file(upload, upload_len, ctype, &flen);
        if (id && strlen(id) <= 256 && file) {
            file_entry_t *f = &q->files[q->next_file];
            q->next_file = (q->next_file + 1) % SL_BATCH_TRACKED;
            snprintf(f->id, sizeof(f->id), "%s", id);
            f->lines = count_lines(file, flen);
        }
    } else if (op == SL_BATCH_LIST) {
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(j, "data"), i, b) report_if_ended(api, b, ended, ud);
    } else {
        report_if_ended(api, j, ended, ud);
    }
    json_decref(j);
}

/* ---- the usage of results -------------------------------------------------------------------- */

static int64_t usage_int(const json_t *usage, const char *key)
{
    const json_t *v = json_object_get(usage, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
}

void sl__batch_results_usage(sl_upstream_api_t api, const char *body, size_t len, sl_usage_t *u)
{
    memset(u, 0, sizeof(*u));
    u->have_input = u->have_output = true;
    for (const char *p = body, *end = body + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_t *line = n > 1 ? json_loadb(p, n, 0, NULL) : NULL;
        p += n + 1;
        if (!line) continue;
        if (api == SL_UPSTREAM_ANTHROPIC) {
            const json_t *usage = json_object_get(
                json_object_get(json_object_get(line, "result"), "message"), "usage");
            u->input_tokens += usage_int(usage, "input_tokens");
            u->cache_creation_input_tokens += usage_int(usage, "cache_creation_input_tokens");
            u->cache_read_input_tokens += usage_int(usage, "cache_read_input_tokens");
            u->output_tokens += usage_int(usage, "output_tokens");
        } else {
            const json_t *usage = json_object_get(
                json_object_get(json_object_get(line, "response"), "body"), "usage");
            int64_t cached =
                usage_int(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
            int64_t prompt = usage_int(usage, "prompt_tokens");
            u->input_tokens += prompt > cached ? prompt - cached : 0;
            u->cache_read_input_tokens += cached;
            u->output_tokens += usage_int(usage, "completion_tokens");
        }
        json_decref(line);
    }
}

/* ---- results_url ------------------------------------------------------------------------- */

static bool rewrite_one(json_t *b, const char *base)
{
    const char *id = json_string_value(json_object_get(b, "id"));
    if (!id || !json_is_string(json_object_get(b, "results_url"))) return false;
    char url[1024];
    char safe[257];
    if (!sl__proxy_id_decode(id, strlen(id), safe)) return false; /* not an id we route */
    snprintf(url, sizeof(url), "%s/v1/messages/batches/%s/results", base, safe);
    json_object_set_new(b, "results_url", json_string(url));
    return true;
}

char *sl__batch_rewrite_results_url(const char *body, size_t len, const char *base)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    bool changed = false;
    if (json_is_object(j)) {
        json_t *data = json_object_get(j, "data");
        size_t i;
        json_t *b;
        json_array_foreach(data, i, b) changed |= rewrite_one(b, base);
        changed |= rewrite_one(j, base);
    }
    char *out = changed ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return out;
}
