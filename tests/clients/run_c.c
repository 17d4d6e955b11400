/* run_c.c - the conformance runner of libsluice-client (tests/clients/README.md).
 *
 * usage: run_c CASES_FILE   (sluiced at $SLUICE_URL; driver.py starts one)
 *
 * Maps each op onto the C library: acquire, settle, cancel, renew and limit_check onto
 * sl_acquire, sl_settle, sl_cancel, sl_extend and sl_limit_check; the calls the library
 * has no function for (tickets, estimate, limit release and report, tasks, pools) onto
 * sl_client_call. One client per (agent, pool, role). Answers are rebuilt as the API's
 * JSON so the case file's expectations read the same for every client; a result code
 * becomes the error class and code of the README's table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sluice/client.h>

#define DEFAULT_AGENT     "conformance"
#define CLIENT_MAX_WAIT_S 30.0
#define MAX_CLIENTS       128
#define MAX_LEASES        256

typedef struct {
    char key[512];
    sl_client_t *c;
} client_slot_t;

static client_slot_t clients[MAX_CLIENTS];
static size_t n_clients;
static sl_lease_t leases[MAX_LEASES]; /* granted leases, by id, for settle/cancel/renew */
static size_t n_leases;

/* The outcome of a step: an answer (ok) or an error class, its code and the answer. */
typedef struct {
    int ok;
    const char *cls;
    char code[128];
    json_t *answer; /* owned */
} outcome_t;

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static double num(const json_t *o, const char *k, double dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static sl_client_t *client(const char *agent, const char *pool, const char *role,
                           double max_hold_s)
{
    char key[512];
    snprintf(key, sizeof(key), "%s|%s|%s|%g", agent ? agent : DEFAULT_AGENT, pool ? pool : "",
             role ? role : "", max_hold_s);
    for (size_t i = 0; i < n_clients; i++)
        if (!strcmp(clients[i].key, key)) return clients[i].c;
    if (n_clients == MAX_CLIENTS) return NULL;
    sl_client_options_t o;
    sl_client_options_init(&o);
    o.agent = agent ? agent : DEFAULT_AGENT;
    o.pool = pool;
    o.role = role;
    o.request_timeout_s = 5.0;
    if (max_hold_s >= 0) o.max_hold_s = max_hold_s;
    char err[256];
    sl_client_t *c;
    if (sl_client_new(&o, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "run_c: %s\n", err);
        return NULL;
    }
    snprintf(clients[n_clients].key, sizeof(key), "%s", key);
    clients[n_clients++].c = c;
    return c;
}

/* The class of a result code (README "Error classes"). */
static const char *class_of(int rc, const char *reason)
{
    switch (rc) {
    case SL_EINVAL:
    case SL_EARG:
    case SL_ETOOBIG:
        return "InvalidRequest";
    case SL_ENOTFOUND:
        return "NotFound";
    case SL_EAUTH:
        return "Forbidden";
    case SL_EALREADY:
    case SL_EEXPIRED:
        return "Conflict";
    case SL_ECAPACITY:
        return "ExceedsCapacity";
    case SL_EREJECTED:
    case SL_EMAXWAIT:
        return reason && !strcmp(reason, "suspended") ? "Suspended" : "Rejected";
    case SL_EUNREACHABLE:
        return "Unreachable";
    default:
        return "Error";
    }
}

/* The API error type sluiced sent, as the library's message carries it
 * ("what: 404 not_found: ..."), else the code's own name. */
static void code_of(sl_client_t *c, int rc, char *out, size_t n)
{
    const char *m = c ? sl_client_errmsg(c) : "";
    for (const char *p = m; p && *p; p++) {
        if (p[0] == ':' && p[1] == ' ' && p[2] >= '1' && p[2] <= '5' && p[3] >= '0' &&
            p[3] <= '9' && p[4] >= '0' && p[4] <= '9' && p[5] == ' ') {
            size_t k = strcspn(p + 6, ": ");
            snprintf(out, n, "%.*s", (int)k, p + 6);
            return;
        }
    }
    snprintf(out, n, "%s", rc == SL_EARG ? "invalid_request" : sl_strerror(rc));
}

static void fail_rc(outcome_t *r, sl_client_t *c, int rc, const char *reason)
{
    r->ok = 0;
    r->cls = class_of(rc, reason);
    if (reason && *reason)
        snprintf(r->code, sizeof(r->code), "%s", reason);
    else if (rc == SL_EMAXWAIT)
        snprintf(r->code, sizeof(r->code), "max_wait");
    else
        code_of(c, rc, r->code, sizeof(r->code));
    if (!r->answer) r->answer = json_object();
    json_object_set_new(r->answer, "message", json_string(c ? sl_client_errmsg(c) : ""));
}

/* An answer of sl_client_call: ok when the status is in [ok_lo, ok_hi], else the class of
 * its error type (or of a 429 rejection's reason). */
static void from_http(outcome_t *r, int status, char *text, int ok_lo, int ok_hi)
{
    json_t *body = json_loads(text ? text : "", JSON_DECODE_ANY, NULL);
    free(text);
    r->answer = body ? body : json_object();
    if (status >= ok_lo && status <= ok_hi) {
        r->ok = 1;
        return;
    }
    r->ok = 0;
    const char *reason = str(body, "reason");
    if (status == 429 && reason) {
        r->cls = !strcmp(reason, "suspended") ? "Suspended" : "Rejected";
        snprintf(r->code, sizeof(r->code), "%s", reason);
        return;
    }
    const char *type = str(json_object_get(body, "error"), "type");
    static const struct {
        const char *type, *cls;
    } table[] = {{"invalid_request", "InvalidRequest"}, {"body_too_large", "InvalidRequest"},
                 {"unsupported_media_type", "InvalidRequest"}, {"unauthorized", "Forbidden"},
                 {"forbidden", "Forbidden"}, {"not_found", "NotFound"},
                 {"already_settled", "Conflict"}, {"lease_expired", "Conflict"},
                 {"exceeds_capacity", "ExceedsCapacity"}};
    r->cls = "Error";
    for (size_t i = 0; type && i < sizeof(table) / sizeof(table[0]); i++)
        if (!strcmp(type, table[i].type)) r->cls = table[i].cls;
    snprintf(r->code, sizeof(r->code), "%s", type ? type : "http_error");
}

static void call(outcome_t *r, const char *agent, const char *method, const char *path,
                 const json_t *body, int ok_lo, int ok_hi)
{
    sl_client_t *c = client(agent, NULL, NULL, -1);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL, *resp = NULL;
    int status = 0;
    int rc = sl_client_call(c, method, path, text, 30, &status, &resp);
    free(text);
    if (rc < 0) {
        fail_rc(r, c, rc, NULL);
        return;
    }
    from_http(r, status, resp, ok_lo, ok_hi);
}

/* "%XX"-escapes what a path segment may not carry as it is. */
static void escape(const char *s, char *out, size_t n)
{
    size_t k = 0;
    for (; s && *s && k + 4 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            strchr("._-:", ch))
            out[k++] = (char)ch;
        else
            k += (size_t)snprintf(out + k, n - k, "%%%02X", ch);
    }
    out[k] = '\0';
}

static sl_lease_t *lease_named(const char *id, sl_lease_t *scratch)
{
    for (size_t i = 0; id && i < n_leases; i++)
        if (!strcmp(leases[i].id, id)) return &leases[i];
    memset(scratch, 0, sizeof(*scratch));
    snprintf(scratch->id, sizeof(scratch->id), "%s", id ? id : "");
    return scratch;
}

static int only_keys(outcome_t *r, const json_t *args, const char *const *known)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)args, k, v)
    {
        int found = 0;
        for (size_t i = 0; known[i]; i++)
            found |= !strcmp(k, known[i]);
        if (!found) {
            r->ok = 0;
            r->cls = "Error";
            snprintf(r->code, sizeof(r->code), "unsupported_arg_%s", k);
            r->answer = json_object();
            return -1;
        }
    }
    return 0;
}

static void op_acquire(outcome_t *r, const json_t *a, const json_t *options)
{
    static const char *const known[] = {"agent",     "pool",     "role",      "input_tokens",
                                        "cached_tokens", "output_tokens", "task", "unblocks",
                                        "priority",  "cache_key", "ttl",      "request_id",
                                        "max_wait",  "cache_ttl_s", NULL};
    if (only_keys(r, a, known) < 0) return;
    /* `max_wait` is what a checkpointed acquire sends: the C library asks it when it saves
     * a checkpoint before waiting, up to the client's max_hold_s. */
    double max_wait = num(a, "max_wait", -1);
    sl_client_t *c = client(str(a, "agent"), str(a, "pool"), str(a, "role"), max_wait);
    sl_acquire_req_t req;
    sl_acquire_req_init(&req);
    req.input_tokens = (int64_t)num(a, "input_tokens", 0);
    req.output_tokens = (int64_t)num(a, "output_tokens", 0);
    req.cached_tokens = (int64_t)num(a, "cached_tokens", 0);
    req.task = str(a, "task");
    req.unblocks = (int64_t)num(a, "unblocks", 0);
    req.priority = str(a, "priority");
    req.cache_key = str(a, "cache_key");
    req.ttl_s = num(a, "ttl", 0);
    req.cache_ttl_s = num(a, "cache_ttl_s", 0);
    req.request_id = str(a, "request_id");
    req.max_wait_s = num(options, "max_wait_s", CLIENT_MAX_WAIT_S);
    char path[] = "/tmp/sluice-conformance-XXXXXX";
    sl_checkpoint_t *cp = NULL;
    if (max_wait > 0) {
        int fd = mkstemp(path);
        if (fd >= 0) close(fd);
        cp = sl_checkpoint_new("conformance");
        req.checkpoint = cp;
        req.checkpoint_path = path;
    }
    sl_lease_t lease;
    int rc = sl_acquire(c, &req, &lease);
    if (cp) {
        sl_checkpoint_free(cp);
        unlink(path);
    }
    if (rc < 0) {
        r->answer = json_pack("{s:s, s:f, s:s}", "ticket", lease.ticket, "eta", lease.eta_s,
                              "reason", lease.reason);
        fail_rc(r, c, rc, rc == SL_EREJECTED ? lease.reason : NULL);
        return;
    }
    if (n_leases < MAX_LEASES) leases[n_leases++] = lease;
    r->ok = 1;
    r->answer = json_pack("{s:s, s:s, s:f, s:f, s:f, s:{s:I, s:I}, s:f, s:s, s:b}", "status",
                          "granted", "lease", lease.id, "expires_at", lease.expires_at, "ttl",
                          lease.ttl_s, "weight", lease.weight, "charged", "input_tokens",
                          (json_int_t)lease.charged_input_tokens, "output_tokens",
                          (json_int_t)lease.charged_output_tokens, "waited", lease.waited_s,
                          "request_id", lease.request_id, "local", lease.local);
}

static void op_settle(outcome_t *r, const json_t *a)
{
    static const char *const known[] = {"lease", "input_tokens", "output_tokens",
                                        "cache_creation_input_tokens", "cache_read_input_tokens",
                                        "got_429", "retry_after", "headers",
                                        "failure_signature", NULL};
    if (only_keys(r, a, known) < 0) return;
    sl_lease_t scratch, *lease = lease_named(str(a, "lease"), &scratch);
    sl_client_t *c = client(NULL, NULL, NULL, -1);
    sl_client_usage_t u;
    sl_client_usage_init(&u);
    u.input_tokens = (int64_t)num(a, "input_tokens", 0);
    u.output_tokens = (int64_t)num(a, "output_tokens", 0);
    u.cache_creation_input_tokens = (int64_t)num(a, "cache_creation_input_tokens", 0);
    u.cache_read_input_tokens = (int64_t)num(a, "cache_read_input_tokens", 0);
    u.got_429 = json_is_true(json_object_get(a, "got_429"));
    u.retry_after_s = num(a, "retry_after", -1);
    u.failure_signature = str(a, "failure_signature");
    sl_header_t headers[64];
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(a, "headers"), k, v)
    {
        if (u.n_headers < 64) headers[u.n_headers++] = (sl_header_t){k, json_string_value(v)};
    }
    u.headers = headers;
    sl_client_settle_result_t s;
    int rc = sl_settle(c, lease, &u, &s);
    if (rc < 0) {
        fail_rc(r, c, rc, NULL);
        return;
    }
    r->ok = 1;
    r->answer = json_pack("{s:s, s:{s:I, s:I}, s:f, s:f, s:b}", "status", "settled", "adjust",
                          "input_tokens", (json_int_t)s.adjust_input_tokens, "output_tokens",
                          (json_int_t)s.adjust_output_tokens, "estimate_error", s.estimate_error,
                          "backoff_s", s.backoff_s, "settled_locally", s.settled_locally);
    if (s.headers_ignored)
        json_object_set_new(r->answer, "headers_ignored",
                            json_pack("{s:I}", "count", (json_int_t)s.headers_ignored));
}

static void op_cancel_or_renew(outcome_t *r, const json_t *a, int renew)
{
    sl_lease_t scratch, *lease = lease_named(str(a, "lease"), &scratch);
    sl_client_t *c = client(NULL, NULL, NULL, -1);
    int rc = renew ? sl_extend(c, lease, num(a, "ttl", 0)) : sl_cancel(c, lease);
    if (rc < 0) {
        fail_rc(r, c, rc, NULL);
        return;
    }
    r->ok = 1;
    r->answer = renew ? json_pack("{s:s, s:f}", "status", "extended", "expires_at",
                                  lease->expires_at)
                      : json_pack("{s:s}", "status", "cancelled");
}

static void op_limit_check(outcome_t *r, const json_t *a, const json_t *options)
{
    static const char *const known[] = {"limit", "agent", "key", "hits", "action", "wait", NULL};
    if (only_keys(r, a, known) < 0) return;
    sl_client_t *c = client(str(a, "agent"), NULL, NULL, -1);
    sl_limit_check_req_t req;
    sl_limit_check_req_init(&req);
    req.limit = str(a, "limit");
    req.key = str(a, "key");
    req.action = str(a, "action");
    req.hits = (int64_t)num(a, "hits", 1);
    req.wait_s = num(a, "wait", 0);
    sl_limit_answer_t ans;
    int rc = sl_limit_check(c, &req, &ans);
    if (rc < 0) {
        fail_rc(r, c, rc, NULL);
        return;
    }
    /* denied before any limit was asked: denied_by is the reason, with no key */
    int refused = !ans.allowed && ans.denied_by[0] && !ans.denied_key[0] &&
                  !strcmp(ans.denied_by, "suspended");
    r->answer = json_pack("{s:b, s:I, s:I, s:f, s:f}", "allowed", ans.allowed, "limit",
                          (json_int_t)ans.limit, "remaining", (json_int_t)ans.remaining,
                          "retry_after", ans.retry_after_s, "reset_after", ans.reset_after_s);
    if (!ans.allowed)
        json_object_set_new(r->answer, "denied_by",
                            refused ? json_pack("{s:s}", "reason", ans.denied_by)
                                    : json_pack("{s:s, s:s}", "limit", ans.denied_by, "key",
                                                ans.denied_key));
    r->ok = 1;
    if (!ans.allowed && json_is_true(json_object_get(options, "enforce"))) {
        r->ok = 0;
        r->cls = refused ? "Suspended" : "LimitExceeded";
        snprintf(r->code, sizeof(r->code), "%s", refused ? "suspended" : "limit_exceeded");
    }
}

static json_t *without(const json_t *a, const char *k1, const char *k2)
{
    json_t *b = json_deep_copy(a);
    if (k1) json_object_del(b, k1);
    if (k2) json_object_del(b, k2);
    return b;
}

static void do_step(outcome_t *r, const char *op, const json_t *a, const json_t *options)
{
    char seg[512], path[1200];
    if (!strcmp(op, "acquire")) {
        op_acquire(r, a, options);
    } else if (!strcmp(op, "settle")) {
        op_settle(r, a);
    } else if (!strcmp(op, "cancel") || !strcmp(op, "renew")) {
        op_cancel_or_renew(r, a, !strcmp(op, "renew"));
    } else if (!strcmp(op, "get_lease")) {
        escape(str(a, "ticket"), seg, sizeof(seg));
        snprintf(path, sizeof(path), "/v1/tickets/%s?wait=%g", seg, num(a, "wait", 0));
        call(r, NULL, "GET", path, NULL, 200, 202);
    } else if (!strcmp(op, "estimate")) {
        call(r, NULL, "POST", "/v1/estimate", a, 200, 200);
    } else if (!strcmp(op, "limit_check")) {
        op_limit_check(r, a, options);
    } else if (!strcmp(op, "limit_release") || !strcmp(op, "limit_report")) {
        escape(str(a, "limit"), seg, sizeof(seg));
        snprintf(path, sizeof(path), "/v1/limits/%s/%s", seg,
                 !strcmp(op, "limit_release") ? "release" : "report");
        json_t *body = without(a, "limit", NULL);
        if (!json_object_get(body, "agent"))
            json_object_set_new(body, "agent", json_string(DEFAULT_AGENT));
        call(r, str(a, "agent"), "POST", path, body, 200, 200);
        json_decref(body);
    } else if (!strcmp(op, "task_put")) {
        escape(str(a, "task"), seg, sizeof(seg));
        snprintf(path, sizeof(path), "/v1/tasks/%s", seg);
        json_t *body = without(a, "task", NULL);
        call(r, NULL, "PUT", path, body, 200, 200);
        json_decref(body);
    } else if (!strcmp(op, "pool_get")) {
        escape(str(a, "pool"), seg, sizeof(seg));
        snprintf(path, sizeof(path), "/v1/pools/%s", seg);
        call(r, NULL, "GET", path, NULL, 200, 200);
    } else {
        r->ok = 0;
        r->cls = "Error";
        snprintf(r->code, sizeof(r->code), "unknown_op");
        r->answer = json_object();
    }
}

/* ---- the runner's rules (README): substitution, subset matching, reporting ---------- */

static json_t *substitute(const json_t *v, const json_t *saved, char *err, size_t n)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (s[0] != '$' || !strchr(s, '.')) return json_deep_copy(v);
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", s + 1);
        char *save = NULL, *part = strtok_r(buf, ".", &save);
        const json_t *cur = json_object_get(saved, part);
        if (!cur) snprintf(err, n, "%s: nothing was saved as '%s'", s, part);
        while (cur && (part = strtok_r(NULL, ".", &save))) {
            cur = json_object_get(cur, part);
            if (!cur) snprintf(err, n, "%s: the saved answer has no '%s'", s, part);
        }
        return cur ? json_deep_copy(cur) : NULL;
    }
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
        {
            json_t *y = substitute(x, saved, err, n);
            if (!y) {
                json_decref(o);
                return NULL;
            }
            json_object_set_new(o, k, y);
        }
        return o;
    }
    if (json_is_array(v)) {
        json_t *arr = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            json_t *y = substitute(x, saved, err, n);
            if (!y) {
                json_decref(arr);
                return NULL;
            }
            json_array_append_new(arr, y);
        }
        return arr;
    }
    return json_deep_copy(v);
}

/* 0 when `e` is a subset of `a`; else -1 with `why`. */
static int mismatch(const json_t *e, const json_t *a, const char *where, char *why, size_t n)
{
    char sub[512];
    if (json_is_object(e)) {
        if (!json_is_object(a)) return snprintf(why, n, "%s: expected an object", where), -1;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)e, k, x)
        {
            snprintf(sub, sizeof(sub), "%s.%s", where, k);
            json_t *y = json_object_get(a, k);
            if (!y) return snprintf(why, n, "%s: missing", sub), -1;
            if (mismatch(x, y, sub, why, n) < 0) return -1;
        }
        return 0;
    }
    if (json_is_array(e)) {
        if (!json_is_array(a) || json_array_size(a) != json_array_size(e))
            return snprintf(why, n, "%s: expected an array of %zu", where, json_array_size(e)), -1;
        for (size_t i = 0; i < json_array_size(e); i++) {
            snprintf(sub, sizeof(sub), "%s[%zu]", where, i);
            if (mismatch(json_array_get(e, i), json_array_get(a, i), sub, why, n) < 0) return -1;
        }
        return 0;
    }
    int same = json_is_number(e) && json_is_number(a)
                   ? json_number_value(e) == json_number_value(a)
                   : json_equal((json_t *)e, (json_t *)a);
    if (same) return 0;
    char *es = json_dumps(e, JSON_ENCODE_ANY), *as = json_dumps(a, JSON_ENCODE_ANY);
    snprintf(why, n, "%s: expected %s, got %s", where, es ? es : "?", as ? as : "?");
    free(es);
    free(as);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: run_c CASES_FILE\n");
        return 2;
    }
    json_error_t jerr;
    json_t *doc = json_load_file(argv[argc - 1], 0, &jerr);
    if (!doc) {
        fprintf(stderr, "run_c: %s: line %d: %s\n", argv[argc - 1], jerr.line, jerr.text);
        return 2;
    }
    json_t *cases = json_object_get(doc, "cases");
    size_t failed = 0, ci;
    json_t *kase;
    json_array_foreach(cases, ci, kase)
    {
        json_t *saved = json_object();
        char why[1024] = "", failure[2048] = "";
        size_t si;
        json_t *step;
        json_array_foreach(json_object_get(kase, "steps"), si, step)
        {
            const char *op = str(step, "op");
            json_t *args = json_object_get(step, "args");
            json_t *a = substitute(args ? args : json_object(), saved, why, sizeof(why));
            json_t *expect = a ? substitute(json_object_get(step, "expect"), saved, why,
                                            sizeof(why))
                               : NULL;
            char detail[900] = "";
            if (a && expect) {
                outcome_t r = {0};
                do_step(&r, op, a, json_object_get(step, "options"));
                json_t *want_ok = json_object_get(expect, "ok");
                const char *want_cls = str(expect, "error"), *want_code = str(expect, "code");
                if (r.ok && !want_ok)
                    snprintf(detail, sizeof(detail), "expected %s, got an answer", want_cls);
                else if (r.ok)
                    mismatch(want_ok, r.answer, "answer", detail, sizeof(detail));
                else if (!want_cls)
                    snprintf(detail, sizeof(detail), "expected an answer, got %s (%s): %s",
                             r.cls, r.code, str(r.answer, "message") ? str(r.answer, "message")
                                                                     : "");
                else if (strcmp(r.cls, want_cls) || (want_code && strcmp(r.code, want_code)))
                    snprintf(detail, sizeof(detail), "expected %s (%s), got %s (%s)", want_cls,
                             want_code ? want_code : "any", r.cls, r.code);
                if (!detail[0] && str(step, "save"))
                    json_object_set(saved, str(step, "save"), r.answer);
                json_decref(r.answer);
            }
            json_decref(a);
            json_decref(expect);
            if (detail[0] || why[0]) {
                snprintf(failure, sizeof(failure), "step %zu (%s): %s", si + 1, op ? op : "?",
                         detail[0] ? detail : why);
                break;
            }
        }
        json_decref(saved);
        if (failure[0]) {
            failed++;
            printf("FAIL %s: %s\n", str(kase, "name"), failure);
        } else {
            printf("ok %s\n", str(kase, "name"));
        }
        fflush(stdout);
    }
    size_t total = json_array_size(cases);
    if (failed)
        printf("%zu of %zu cases failed\n", failed, total);
    else
        printf("all %zu cases passed\n", total);
    for (size_t i = 0; i < n_clients; i++)
        sl_client_free(clients[i].c);
    json_decref(doc);
    return failed ? 1 : 0;
}
