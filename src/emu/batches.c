/* batches.c - the providers' batch APIs: Anthropic Message Batches, OpenAI Batch (with files.c).
 *
 * A batch is created in_progress (Anthropic) or validating (OpenAI) and processed
 * --batch-seconds after its create: each request is answered as the provider would
 * (its input counted like a live call's, its output --output-tokens clamped to its
 * max_tokens, filler text) and billed at the batch price, half the standard price (both
 * providers' pricing pages), in /stats "batches". The state is brought up to date at every
 * call to these endpoints and to /stats (sl__emu_batches_advance), so a batch is seen
 * ended once its time has passed. Results: Anthropic's as JSONL at results_url (this
 * server's own URL, from the request's Host), OpenAI's as an output file (and an error file
 * for the lines that failed).
 *
 * Limits, as Anthropic documents them for the Message Batches API: --batch-rpm requests
 * per minute to all its batch endpoints together (50) and --batch-queue requests of
 * unfinished batches in the processing queue (100,000); beyond either, 429
 * rate_limit_error with retry-after. OpenAI's batch limits are per-model enqueued tokens,
 * not modelled. Embeddings and moderations (embeddings.c) are routed here too. */
#include "batch.h"

#include <math.h>
#include <string.h>

#define ANTHROPIC_MAX_BATCH 100000 /* requests in one Message Batch */
#define BATCH_PRICE_FACTOR  0.5

static const char ANTHROPIC_PREFIX[] = "/v1/messages/batches";

sl_emu_batches_t *sl__emu_batches(sl_emu_t *emu)
{
    if (!emu->batches) {
        emu->batches = calloc(1, sizeof(sl_emu_batches_t));
        if (emu->batches) {
            emu->batches->rpm_tokens = (double)emu->opt.batch_rpm;
            emu->batches->rpm_at_s = sl__emu_now();
        }
    }
    return emu->batches;
}

/* Does `path` start with the segment(s) `prefix` (followed by its end or a '/')? */
static bool under(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return !strncmp(path, prefix, n) && (path[n] == '\0' || path[n] == '/');
}

int sl__emu_batch_api(const char *path)
{
    if (under(path, ANTHROPIC_PREFIX)) return SL_EMU_ANTHROPIC;
    if (!strcmp(path, "/v1/embeddings") || !strcmp(path, "/v1/moderations") ||
        under(path, "/v1/files") || under(path, "/v1/batches"))
        return SL_EMU_OPENAI;
    return -1;
}

static char *rfc3339(double t, char *buf, size_t cap)
{
    sl_provider_format_rfc3339(t, buf, cap);
    return buf;
}

/* ---- processing one request ------------------------------------------------------------ */

/* The output of a request asking at most `max_tokens`. */
static int64_t output_of(sl_emu_t *emu, int64_t max_tokens)
{
    int64_t d = sl_provider_config(emu->provider)->default_output_tokens;
    return max_tokens > 0 && max_tokens < d ? max_tokens : d;
}

/* An Anthropic batch request's result: {"type": "succeeded", "message": ...} or errored. */
static json_t *anthropic_result(sl_emu_t *emu, json_t *params, sl_emu_batch_bill_t *bill)
{
    char err[512] = "";
    const char *model = json_string_value(json_object_get(params, "model"));
    json_t *max = json_object_get(params, "max_tokens");
    sl_estimate_t est;
    json_t *counted = model && json_is_integer(max) && json_integer_value(max) >= 1
                          ? sl__count_anthropic_body(params)
                          : NULL;
    if (!counted) snprintf(err, sizeof err, "params: model and max_tokens >= 1 are required");
    int rc =
        counted ? sl_estimate_json(emu->tok, SL_API_ANTHROPIC, counted, &est, err, sizeof err) : -1;
    json_decref(counted);
    bill->requests++;
    if (rc != 0) {
        bill->errored++;
        return json_pack("{s:s, s:{s:s, s:{s:s, s:s}}}", "type", "errored", "error", "type",
                         "error", "error", "type", "invalid_request_error", "message", err);
    }
    int64_t in = sl_provider_count(emu->provider, est.input_tokens + est.cached_tokens);
    int64_t asked = json_integer_value(max), out = output_of(emu, asked);
    char *text = sl__filler_text(emu->call_seq++, out);
    char id[48];
    sl__emu_new_id(emu, "msg_", id, sizeof id);
    bill->succeeded++;
    bill->input_tokens += in;
    bill->output_tokens += out;
    json_t *msg = json_pack(
        "{s:s, s:s, s:s, s:s, s:[{s:s, s:s}], s:s, s:n, s:{s:I, s:I, s:I, s:I, s:s}}", "id", id,
        "type", "message", "role", "assistant", "model", model, "content", "type", "text", "text",
        text ? text : "", "stop_reason", out < asked ? "end_turn" : "max_tokens", "stop_sequence",
        "usage", "input_tokens", (json_int_t)in, "cache_creation_input_tokens", (json_int_t)0,
        "cache_read_input_tokens", (json_int_t)0, "output_tokens", (json_int_t)out, "service_tier",
        "batch");
    free(text);
    return json_pack("{s:s, s:o}", "type", "succeeded", "message", msg);
}

/* An OpenAI batch line's response body (status 200), or NULL with `err` set (status 400). */
static json_t *openai_body(sl_emu_t *emu, const char *endpoint, json_t *body,
                           sl_emu_batch_bill_t *bill, char *err, size_t errlen)
{
    if (!strcmp(endpoint, "/v1/embeddings")) {
        int64_t tokens = 0;
        json_t *answer = sl__embeddings_answer(emu, body, &tokens, err, errlen);
        if (answer) bill->input_tokens += tokens;
        return answer;
    }
    const char *model = json_string_value(json_object_get(body, "model"));
    sl_estimate_t est;
    if (!model) {
        snprintf(err, errlen, "model: a string is required");
        return NULL;
    }
    if (sl_estimate_json(emu->tok, SL_API_OPENAI, body, &est, err, errlen) != 0) return NULL;
    int64_t in = sl_provider_count(emu->provider, est.input_tokens + est.cached_tokens);
    json_t *max = json_object_get(body, "max_completion_tokens");
    if (!json_is_integer(max)) max = json_object_get(body, "max_tokens");
    int64_t asked = json_is_integer(max) ? json_integer_value(max) : 0;
    int64_t out = output_of(emu, asked);
    char *text = sl__filler_text(emu->call_seq++, out);
    char id[48];
    sl__emu_new_id(emu, "chatcmpl-", id, sizeof id);
    bill->input_tokens += in;
    bill->output_tokens += out;
    json_t *answer = json_pack(
        "{s:s, s:s, s:I, s:s, s:[{s:i, s:{s:s, s:s, s:n}, s:n, s:s}], s:{s:I, s:I, s:I}, "
        "s:s}",
        "id", id, "object", "chat.completion", "created", (json_int_t)sl__emu_now(), "model", model,
        "choices", "index", 0, "message", "role", "assistant", "content", text ? text : "",
        "refusal", "logprobs", "finish_reason", asked > 0 && out >= asked ? "length" : "stop",
        "usage", "prompt_tokens", (json_int_t)in, "completion_tokens", (json_int_t)out,
        "total_tokens", (json_int_t)(in + out), "service_tier", "default");
    free(text);
    return answer;
}

/* ---- processing a batch -------------------------------------------------------------------- */

static void end_anthropic(sl_emu_t *emu, sl_emu_batch_t *bt, double now)
{
    sl_emu_batches_t *b = emu->batches;
    struct evbuffer *out = evbuffer_new();
    int64_t ok = 0, errored = 0, canceled = 0;
    size_t i;
    json_t *r;
    json_array_foreach(bt->requests, i, r)
    {
        json_t *result;
        if (bt->canceling) {
            result = json_pack("{s:s}", "type", "canceled");
            canceled++;
            b->anthropic.canceled++;
        } else {
            result = anthropic_result(emu, json_object_get(r, "params"), &b->anthropic);
            const char *t = json_string_value(json_object_get(result, "type"));
            ok += t && !strcmp(t, "succeeded");
            errored += !(t && !strcmp(t, "succeeded"));
        }
        json_t *line =
            json_pack("{s:O, s:o}", "custom_id", json_object_get(r, "custom_id"), "result", result);
        char *s = line ? json_dumps(line, JSON_COMPACT) : NULL;
        if (s && out) evbuffer_add_printf(out, "%s\n", s);
        free(s);
        json_decref(line);
    }
    if (out) {
        bt->results_len = evbuffer_get_length(out);
        bt->results = malloc(bt->results_len + 1);
        if (bt->results) evbuffer_remove(out, bt->results, bt->results_len);
        evbuffer_free(out);
    }
    char ts[64], url[400];
    const char *base = json_string_value(json_object_get(bt->obj, "_base"));
    snprintf(url, sizeof url, "%s/v1/messages/batches/%s/results", base ? base : "", bt->id);
    json_object_del(bt->obj, "_base");
    json_object_set_new(bt->obj, "processing_status", json_string("ended"));
    json_object_set_new(bt->obj, "ended_at", json_string(rfc3339(now, ts, sizeof ts)));
    json_object_set_new(bt->obj, "results_url", json_string(url));
    json_object_set_new(bt->obj, "request_counts",
                        json_pack("{s:i, s:I, s:I, s:I, s:i}", "processing", 0, "succeeded",
                                  (json_int_t)ok, "errored", (json_int_t)errored, "canceled",
                                  (json_int_t)canceled, "expired", 0));
}

/* Writes `lines` (JSONL) into a new file of purpose batch_output; its id, or NULL. */
static const char *output_file(sl_emu_t *emu, sl_emu_batch_t *bt, struct evbuffer *lines,
                               const char *kind)
{
    size_t len = evbuffer_get_length(lines);
    if (len == 0) return NULL;
    char *data = malloc(len + 1);
    if (!data) return NULL;
    evbuffer_remove(lines, data, len);
    data[len] = '\0';
    char name[128];
    snprintf(name, sizeof name, "%s_%s.jsonl", bt->id, kind);
    sl_emu_file_t *f = sl__emu_file_add(emu, name, "batch_output", data, len);
    return f ? f->id : NULL;
}

static void end_openai(sl_emu_t *emu, sl_emu_batch_t *bt, double now)
{
    sl_emu_batches_t *b = emu->batches;
    const char *endpoint = json_string_value(json_object_get(bt->obj, "endpoint"));
    struct evbuffer *ok_lines = evbuffer_new(), *err_lines = evbuffer_new();
    int64_t done = 0, failed = 0;
    size_t i;
    json_t *line;
    if (!bt->canceling) json_array_foreach(bt->requests, i, line)
        {
            char err[512] = "", rid[48], lid[48];
            json_t *body = json_object_get(line, "body");
            const char *url = json_string_value(json_object_get(line, "url"));
            json_t *answer = NULL;
            if (!json_is_object(body) || !url || strcmp(url, endpoint) != 0)
                snprintf(err, sizeof err, "line %zu: url must be %s and body an object", i + 1,
                         endpoint);
            else
                answer = openai_body(emu, endpoint, body, &b->openai, err, sizeof err);
            b->openai.requests++;
            sl__emu_new_id(emu, "req_", rid, sizeof rid);
            sl__emu_new_id(emu, "batch_req_", lid, sizeof lid);
            json_t *response = json_object();
            json_object_set_new(response, "status_code", json_integer(answer ? 200 : 400));
            json_object_set_new(response, "request_id", json_string(rid));
            json_object_set_new(response, "body",
                                answer
                                    ? json_incref(answer)
                                    : json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", err,
                                                "type", "invalid_request_error", "param", "code"));
            json_t *out = json_object();
            json_object_set_new(out, "id", json_string(lid));
            json_object_set(out, "custom_id", json_object_get(line, "custom_id"));
            json_object_set_new(out, "response", response);
            json_object_set_new(out, "error", json_null());
            char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
            struct evbuffer *to = answer ? ok_lines : err_lines;
            if (s && to) evbuffer_add_printf(to, "%s\n", s);
            free(s);
            json_decref(out);
            if (answer) {
                json_decref(answer);
                done++;
                b->openai.succeeded++;
            } else {
                failed++;
                b->openai.errored++;
            }
        }
    else
        b->openai.canceled += json_array_size(bt->requests);
    const char *out_id = ok_lines ? output_file(emu, bt, ok_lines, "output") : NULL;
    const char *err_id = err_lines ? output_file(emu, bt, err_lines, "error") : NULL;
    if (ok_lines) evbuffer_free(ok_lines);
    if (err_lines) evbuffer_free(err_lines);
    json_int_t t = (json_int_t)now;
    json_object_set_new(bt->obj, "status", json_string(bt->canceling ? "cancelled" : "completed"));
    json_object_set_new(bt->obj, bt->canceling ? "cancelled_at" : "completed_at", json_integer(t));
    if (!bt->canceling) json_object_set_new(bt->obj, "finalizing_at", json_integer(t));
    json_object_set_new(bt->obj, "output_file_id", out_id ? json_string(out_id) : json_null());
    json_object_set_new(bt->obj, "error_file_id", err_id ? json_string(err_id) : json_null());
    json_object_set_new(bt->obj, "request_counts",
                        json_pack("{s:I, s:I, s:I}", "total",
                                  (json_int_t)json_array_size(bt->requests), "completed",
                                  (json_int_t)done, "failed", (json_int_t)failed));
}

void sl__emu_batches_advance(sl_emu_t *emu)
{
    sl_emu_batches_t *b = emu->batches;
    double now = sl__emu_now();
    for (size_t i = 0; b && i < b->n_batches; i++) {
        sl_emu_batch_t *bt = b->batches[i];
        if (bt->ended) continue;
        if (bt->api == SL_EMU_OPENAI) { /* validated at once: in progress until due */
            const char *st = json_string_value(json_object_get(bt->obj, "status"));
            if (st && !strcmp(st, "validating")) {
                json_object_set_new(bt->obj, "status", json_string("in_progress"));
                json_object_set_new(bt->obj, "in_progress_at", json_integer((json_int_t)now));
                json_object_set_new(bt->obj, "request_counts",
                                    json_pack("{s:I, s:i, s:i}", "total",
                                              (json_int_t)json_array_size(bt->requests),
                                              "completed", 0, "failed", 0));
            }
        }
        if (now < bt->due_s && !bt->canceling) continue;
        if (bt->api == SL_EMU_ANTHROPIC)
            end_anthropic(emu, bt, now);
        else
            end_openai(emu, bt, now);
        bt->ended = true;
    }
}

/* ---- the endpoints ------------------------------------------------------------------------- */

static sl_emu_batch_t *find_batch(sl_emu_batches_t *b, sl_emu_api_t api, const char *id)
{
    for (size_t i = 0; i < b->n_batches; i++)
        if (b->batches[i]->api == api && !strcmp(b->batches[i]->id, id)) return b->batches[i];
    return NULL;
}

static void batch_free(sl_emu_batch_t *bt)
{
    json_decref(bt->obj);
    json_decref(bt->requests);
    free(bt->results);
    free(bt);
}

/* The batch object as answered (without the private _base). */
static json_t *batch_json(const sl_emu_batch_t *bt)
{
    json_t *o = json_deep_copy(bt->obj);
    json_object_del(o, "_base");
    return o;
}

static void invalid(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, int status,
                    const char *msg)
{
    sl__emu_send_error(emu, req, api, status,
                       status == 404 && api == SL_EMU_ANTHROPIC ? "not_found_error"
                                                                : "invalid_request_error",
                       msg, NULL, NULL);
}

/* Takes one request from Anthropic's batch-endpoint bucket; answers 429 and returns false
 * when it is empty. */
static bool take_batch_rpm(sl_emu_t *emu, struct evhttp_request *req)
{
    sl_emu_batches_t *b = emu->batches;
    double rpm = (double)emu->opt.batch_rpm, now = sl__emu_now();
    if (rpm <= 0) return true;
    b->rpm_tokens = fmin(rpm, b->rpm_tokens + (now - b->rpm_at_s) * rpm / 60.0);
    b->rpm_at_s = now;
    if (b->rpm_tokens >= 1) {
        b->rpm_tokens -= 1;
        return true;
    }
    char v[32], msg[256];
    snprintf(v, sizeof v, "%.0f", ceil((1 - b->rpm_tokens) * 60.0 / rpm));
    evhttp_add_header(evhttp_request_get_output_headers(req), "retry-after", v);
    snprintf(msg, sizeof msg,
             "This request would exceed the rate limit for your organization of %lld requests "
             "per minute to the Message Batches API. Please reduce the prompt length or the "
             "maximum tokens requested, or try again later.",
             (long long)emu->opt.batch_rpm);
    b->batch_429++;
    sl__emu_send_error(emu, req, SL_EMU_ANTHROPIC, 429, "rate_limit_error", msg, NULL, NULL);
    return false;
}

static bool custom_id_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

static int64_t anthropic_queued(const sl_emu_batches_t *b)
{
    int64_t n = 0;
    for (size_t i = 0; i < b->n_batches; i++)
        if (b->batches[i]->api == SL_EMU_ANTHROPIC && !b->batches[i]->ended)
            n += (int64_t)json_array_size(b->batches[i]->requests);
    return n;
}

static sl_emu_batch_t *new_batch(sl_emu_t *emu, sl_emu_api_t api, json_t *requests)
{
    sl_emu_batches_t *b = emu->batches;
    sl_emu_batch_t *bt = b->n_batches < EMU_MAX_BATCHES ? calloc(1, sizeof *bt) : NULL;
    if (!bt) return NULL;
    bt->api = api;
    bt->requests = json_incref(requests);
    bt->due_s = sl__emu_now() + emu->opt.batch_s;
    sl__emu_new_id(emu, api == SL_EMU_ANTHROPIC ? "msgbatch_" : "batch_", bt->id, sizeof bt->id);
    b->batches[b->n_batches++] = bt;
    return bt;
}

static void anthropic_create(sl_emu_t *emu, struct evhttp_request *req, json_t *body)
{
    sl_emu_batches_t *b = emu->batches;
    json_t *requests = json_object_get(body, "requests");
    size_t n = json_array_size(requests);
    if (!json_is_array(requests) || n == 0 || n > ANTHROPIC_MAX_BATCH) {
        invalid(emu, req, SL_EMU_ANTHROPIC, 400,
                "requests: expected an array of 1-100000 batch requests");
        return;
    }
    json_t *seen = json_object();
    size_t i;
    json_t *r;
    json_array_foreach(requests, i, r)
    {
        const char *cid = json_string_value(json_object_get(r, "custom_id"));
        char msg[200];
        const char *why = !custom_id_ok(cid)           ? "custom_id must be 1-64 of [a-zA-Z0-9_-]"
                          : json_object_get(seen, cid) ? "custom_id is not unique"
                          : !json_is_object(json_object_get(r, "params"))
                              ? "params: expected an object"
                              : NULL;
        if (why) {
            snprintf(msg, sizeof msg, "requests[%zu]: %s", i, why);
            json_decref(seen);
            invalid(emu, req, SL_EMU_ANTHROPIC, 400, msg);
            return;
        }
        json_object_set_new(seen, cid, json_true());
    }
    json_decref(seen);
    int64_t queued = anthropic_queued(b);
    if (emu->opt.batch_queue_requests > 0 && queued + (int64_t)n > emu->opt.batch_queue_requests) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "Number of batch requests in the processing queue (%lld + %zu) would exceed "
                 "the limit of %lld for your organization.",
                 (long long)queued, n, (long long)emu->opt.batch_queue_requests);
        evhttp_add_header(evhttp_request_get_output_headers(req), "retry-after", "60");
        b->batch_429++;
        sl__emu_send_error(emu, req, SL_EMU_ANTHROPIC, 429, "rate_limit_error", msg, NULL, NULL);
        return;
    }
    sl_emu_batch_t *bt = new_batch(emu, SL_EMU_ANTHROPIC, requests);
    if (!bt) {
        invalid(emu, req, SL_EMU_ANTHROPIC, 400, "the emulator holds no more batches");
        return;
    }
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    char base[300], created[64], expires[64];
    snprintf(base, sizeof base, "%s://%.256s", emu->ssl_ctx ? "https" : "http",
             host ? host : "localhost");
    double now = sl__emu_now();
    bt->obj = json_pack(
        "{s:s, s:s, s:s, s:{s:I, s:i, s:i, s:i, s:i}, s:n, s:s, s:s, s:n, s:n, s:n, s:s}", "id",
        bt->id, "type", "message_batch", "processing_status", "in_progress", "request_counts",
        "processing", (json_int_t)n, "succeeded", 0, "errored", 0, "canceled", 0, "expired", 0,
        "ended_at", "created_at", rfc3339(now, created, sizeof created), "expires_at",
        rfc3339(now + 86400, expires, sizeof expires), "archived_at", "cancel_initiated_at",
        "results_url", "_base", base);
    b->anthropic.batches++;
    sl__emu_send_json(req, 200, batch_json(bt));
}

static void list(struct evhttp_request *req, sl_emu_batches_t *b, sl_emu_api_t api)
{
    json_t *data = json_array();
    for (size_t i = b->n_batches; i-- > 0;) /* newest first */
        if (b->batches[i]->api == api) json_array_append_new(data, batch_json(b->batches[i]));
    size_t n = json_array_size(data);
    json_t *first = json_object_get(json_array_get(data, 0), "id");
    json_t *last = json_object_get(json_array_get(data, n ? n - 1 : 0), "id");
    json_t *out = json_pack("{s:o, s:b, s:O?, s:O?}", "data", data, "has_more", 0, "first_id",
                            first, "last_id", last);
    if (api == SL_EMU_OPENAI) json_object_set_new(out, "object", json_string("list"));
    sl__emu_send_json(req, 200, out);
}

/* What both providers' batch routes do before their own paths: a POST to the collection
 * creates a batch (through `create`), a GET lists them, and any other path must name a
 * known batch ("/<id>[/tail]", 404 in the provider's words when it does not). Returns that
 * batch, its id copied into `id` and `*tail` what follows the id; NULL when the request
 * was answered here. */
static sl_emu_batch_t *
route_collection(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, const char *rest,
                 void (*create)(sl_emu_t *, struct evhttp_request *, json_t *), char id[64],
                 const char **tail)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (!*rest && m == EVHTTP_REQ_POST) {
        char *raw = NULL;
        size_t raw_len = 0;
        json_t *body = sl__emu_read_json(emu, req, api, &raw, &raw_len);
        if (body) create(emu, req, body);
        json_decref(body);
        free(raw);
        return NULL;
    }
    if (!*rest && m == EVHTTP_REQ_GET) {
        list(req, emu->batches, api);
        return NULL;
    }
    size_t idlen = strcspn(rest + 1, "/");
    snprintf(id, 64, "%.*s", (int)(idlen < 63 ? idlen : 63), rest + 1);
    *tail = rest + 1 + idlen;
    sl_emu_batch_t *bt = find_batch(emu->batches, api, id);
    if (!bt) {
        char msg[128];
        snprintf(msg, sizeof msg,
                 api == SL_EMU_ANTHROPIC ? "message_batch %s not found"
                                         : "No batch found with id '%s'.",
                 id);
        invalid(emu, req, api, 404, msg);
    }
    return bt;
}

static void anthropic_batches(sl_emu_t *emu, struct evhttp_request *req, const char *rest)
{
    sl_emu_batches_t *b = emu->batches;
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (!evhttp_find_header(evhttp_request_get_input_headers(req), "anthropic-version")) {
        invalid(emu, req, SL_EMU_ANTHROPIC, 400, "anthropic-version: header is required");
        return;
    }
    if (!take_batch_rpm(emu, req)) return;
    char id[64];
    const char *tail;
    sl_emu_batch_t *bt =
        route_collection(emu, req, SL_EMU_ANTHROPIC, rest, anthropic_create, id, &tail);
    if (!bt) return;
    if (!*tail && m == EVHTTP_REQ_GET) {
        sl__emu_send_json(req, 200, batch_json(bt));
    } else if (!*tail && m == EVHTTP_REQ_DELETE) {
        if (!bt->ended) {
            invalid(emu, req, SL_EMU_ANTHROPIC, 400,
                    "A batch that is still processing cannot be deleted; cancel it first.");
            return;
        }
        for (size_t i = 0; i < b->n_batches; i++)
            if (b->batches[i] == bt) {
                memmove(&b->batches[i], &b->batches[i + 1], (b->n_batches - i - 1) * sizeof bt);
                b->n_batches--;
                break;
            }
        sl__emu_send_json(req, 200,
                          json_pack("{s:s, s:s}", "id", id, "type", "message_batch_deleted"));
        batch_free(bt);
    } else if (!strcmp(tail, "/results") && m == EVHTTP_REQ_GET) {
        if (!bt->ended || !bt->results) {
            invalid(emu, req, SL_EMU_ANTHROPIC, 400, "The batch has not ended: no results yet.");
            return;
        }
        sl__emu_send_bytes(req, "application/binary", bt->results, bt->results_len);
    } else if (!strcmp(tail, "/cancel") && m == EVHTTP_REQ_POST) {
        if (!bt->ended && !bt->canceling) {
            char ts[64];
            bt->canceling = true;
            json_object_set_new(bt->obj, "processing_status", json_string("canceling"));
            json_object_set_new(bt->obj, "cancel_initiated_at",
                                json_string(rfc3339(sl__emu_now(), ts, sizeof ts)));
        }
        sl__emu_send_json(req, 200, batch_json(bt));
    } else {
        invalid(emu, req, SL_EMU_ANTHROPIC, 405, "Method not allowed for this batches path");
    }
}

static void openai_create(sl_emu_t *emu, struct evhttp_request *req, json_t *body)
{
    const char *file_id = json_string_value(json_object_get(body, "input_file_id"));
    const char *endpoint = json_string_value(json_object_get(body, "endpoint"));
    const char *window = json_string_value(json_object_get(body, "completion_window"));
    sl_emu_file_t *f = file_id ? sl__emu_file(emu, file_id) : NULL;
    const char *why =
        !f                            ? "input_file_id: no such file"
        : strcmp(f->purpose, "batch") ? "input_file_id: the file's purpose must be batch"
        : !endpoint ||
                (strcmp(endpoint, "/v1/chat/completions") && strcmp(endpoint, "/v1/embeddings"))
            ? "endpoint: the emulator batches /v1/chat/completions and /v1/embeddings"
        : !window || strcmp(window, "24h") ? "completion_window: must be '24h'"
                                           : NULL;
    if (why) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error", why, NULL, NULL);
        return;
    }
    json_t *lines = json_array();
    for (const char *p = f->data, *end = f->data + f->len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_t *line = n > 0 ? json_loadb(p, n, 0, NULL) : NULL;
        if (n > 0) json_array_append_new(lines, json_is_object(line) ? line : json_object());
        if (line && !json_is_object(line)) json_decref(line);
        p += n + 1;
    }
    sl_emu_batch_t *bt = json_array_size(lines) ? new_batch(emu, SL_EMU_OPENAI, lines) : NULL;
    json_decref(lines);
    if (!bt) {
        sl__emu_send_error(emu, req, SL_EMU_OPENAI, 400, "invalid_request_error",
                           "input_file_id: the file holds no request lines (or the emulator "
                           "holds no more batches)",
                           NULL, NULL);
        return;
    }
    json_t *meta = json_object_get(body, "metadata");
    bt->obj = json_pack(
        "{s:s, s:s, s:s, s:n, s:s, s:s, s:s, s:n, s:n, s:I, s:n, s:I, s:n, s:n, s:n, s:n, s:n, "
        "s:n, s:{s:i, s:i, s:i}, s:O?}",
        "id", bt->id, "object", "batch", "endpoint", endpoint, "errors", "input_file_id", file_id,
        "completion_window", "24h", "status", "validating", "output_file_id", "error_file_id",
        "created_at", (json_int_t)sl__emu_now(), "in_progress_at", "expires_at",
        (json_int_t)sl__emu_now() + 86400, "finalizing_at", "completed_at", "failed_at",
        "expired_at", "cancelling_at", "cancelled_at", "request_counts", "total", 0, "completed", 0,
        "failed", 0, "metadata", json_is_object(meta) ? meta : NULL);
    emu->batches->openai.batches++;
    sl__emu_send_json(req, 200, batch_json(bt));
}

static void openai_batches(sl_emu_t *emu, struct evhttp_request *req, const char *rest)
{
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    char id[64];
    const char *tail;
    sl_emu_batch_t *bt = route_collection(emu, req, SL_EMU_OPENAI, rest, openai_create, id, &tail);
    if (!bt) return;
    if (!*tail && m == EVHTTP_REQ_GET) {
        sl__emu_send_json(req, 200, batch_json(bt));
    } else if (!strcmp(tail, "/cancel") && m == EVHTTP_REQ_POST) {
        if (bt->ended) {
            char msg[128];
            snprintf(msg, sizeof msg, "Cannot cancel a batch with status '%s'.",
                     json_string_value(json_object_get(bt->obj, "status")));
            invalid(emu, req, SL_EMU_OPENAI, 400, msg);
            return;
        }
        bt->canceling = true;
        json_object_set_new(bt->obj, "status", json_string("cancelling"));
        json_object_set_new(bt->obj, "cancelling_at", json_integer((json_int_t)sl__emu_now()));
        sl__emu_send_json(req, 200, batch_json(bt));
    } else {
        invalid(emu, req, SL_EMU_OPENAI, 405, "Method not allowed for this batches path");
    }
}

void sl__emu_batch_request(sl_emu_t *emu, struct evhttp_request *req, const char *path)
{
    sl_emu_api_t api = (sl_emu_api_t)sl__emu_batch_api(path);
    if (!sl__emu_check_key(emu, req, api)) return;
    if (!sl__emu_batches(emu)) {
        sl__emu_send_error(emu, req, api, 500, "api_error", "out of memory", NULL, NULL);
        return;
    }
    sl__emu_batches_advance(emu);
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (!strcmp(path, "/v1/embeddings") || !strcmp(path, "/v1/moderations")) {
        if (m != EVHTTP_REQ_POST) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "POST");
            invalid(emu, req, api, 405, "Method not allowed: POST only");
            return;
        }
        char *raw = NULL;
        size_t raw_len = 0;
        json_t *body = sl__emu_read_json(emu, req, api, &raw, &raw_len);
        if (body && path[4] == 'e') sl__openai_embeddings(emu, req, body);
        if (body && path[4] == 'm') sl__openai_moderations(emu, req, body);
        json_decref(body);
        free(raw);
    } else if (under(path, "/v1/files")) {
        sl__openai_files(emu, req, path + strlen("/v1/files"));
    } else if (under(path, "/v1/batches")) {
        openai_batches(emu, req, path + strlen("/v1/batches"));
    } else {
        anthropic_batches(emu, req, path + strlen(ANTHROPIC_PREFIX));
    }
}

static json_t *bill_json(const sl_emu_batch_bill_t *b)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "batches", (json_int_t)b->batches,
                     "requests", (json_int_t)b->requests, "succeeded", (json_int_t)b->succeeded,
                     "errored", (json_int_t)b->errored, "canceled", (json_int_t)b->canceled,
                     "input_tokens", (json_int_t)b->input_tokens, "output_tokens",
                     (json_int_t)b->output_tokens);
}

json_t *sl__emu_batches_stats(sl_emu_t *emu)
{
    sl__emu_batches_advance(emu);
    sl_emu_batches_t *b = sl__emu_batches(emu);
    if (!b) return json_null();
    return json_pack("{s:o, s:o, s:f, s:I, s:{s:I, s:I}, s:I, s:I}", "anthropic",
                     bill_json(&b->anthropic), "openai", bill_json(&b->openai), "price_factor",
                     BATCH_PRICE_FACTOR, "queued_requests", (json_int_t)anthropic_queued(b),
                     "embeddings", "requests", (json_int_t)b->embeddings.requests, "prompt_tokens",
                     (json_int_t)b->embeddings.input_tokens, "moderations",
                     (json_int_t)b->moderations, "http_429", (json_int_t)b->batch_429);
}

void sl__emu_batches_free(sl_emu_t *emu)
{
    sl_emu_batches_t *b = emu->batches;
    if (!b) return;
    for (size_t i = 0; i < b->n_batches; i++)
        batch_free(b->batches[i]);
    sl__emu_files_free(b);
    free(b);
    emu->batches = NULL;
}
