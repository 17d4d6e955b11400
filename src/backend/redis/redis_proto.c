/* redis_proto.c - FCALL argument vectors for sluice.lua and decoding of its replies. */
#include "redis_proto.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* ---- the names of fcall.def ---- */

#define SL_FCALL_ARG(n) const char sl__fa_##n[] = #n;
#define SL_FCALL_ARG_SERIES(n) const char sl__fa_##n[] = #n;
#define SL_FCALL_REPLY(n) const char sl__fr_##n[] = #n;
#define SL_FCALL_REPLY_SERIES(n) const char sl__fr_##n[] = #n;
#define SL_FCALL_CONFIG(n, src) const char sl__fa_##n[] = #n;
#define SL_FCALL_CONFIG_LATER(n, src, dflt) const char sl__fa_##n[] = #n;
#include "fcall.def"
#include "fcall_end.h"

/* ---- commands ---- */

static void push(sl__rcmd_t *c, const char *s, size_t n)
{
    if (c->argc >= SL__RCMD_MAX_ARGS) return; /* callers stay far below the bound */
    char *copy = malloc(n + 1);
    if (!copy) return;
    memcpy(copy, s, n);
    copy[n] = '\0';
    c->argv[c->argc] = copy;
    c->len[c->argc] = n;
    c->argc++;
}

static void pushf(sl__rcmd_t *c, const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    push(c, buf, n < 0 ? 0 : (size_t)n);
}

void sl__rcmd_raw(sl__rcmd_t *c, const char *arg)
{
    push(c, arg, strlen(arg));
}

void sl__rcmd_graph(sl__rcmd_t *c, const char *fn)
{
    c->argc = 0;
    sl__rcmd_raw(c, "FCALL");
    sl__rcmd_raw(c, fn);
    sl__rcmd_raw(c, "1");
    sl__rcmd_raw(c, SL__RGRAPH_KEY);
}

void sl__rcmd_begin(sl__rcmd_t *c, const char *fn, const char *pool, double now_s,
                    const char *origin)
{
    sl__rcmd_begin2(c, fn, pool, NULL, now_s, origin);
}

void sl__rcmd_begin2(sl__rcmd_t *c, const char *fn, const char *pool, const char *key2,
                     double now_s, const char *origin)
{
    c->argc = 0;
    sl__rcmd_raw(c, "FCALL");
    sl__rcmd_raw(c, fn);
    sl__rcmd_raw(c, key2 ? "2" : "1");
    char key[160];
    snprintf(key, sizeof key, "sluice:{%s}:pool", pool ? pool : "default");
    sl__rcmd_raw(c, key);
    if (key2) sl__rcmd_raw(c, key2);
    if (isnan(now_s)) sl__rcmd_raw(c, "");
    else pushf(c, "%.17g", now_s);
    sl__rcmd_raw(c, origin ? origin : "");
}

void sl__rcmd_str(sl__rcmd_t *c, const char *name, const char *value)
{
    if (!value) return;
    sl__rcmd_raw(c, name);
    sl__rcmd_raw(c, value);
}

void sl__rcmd_num(sl__rcmd_t *c, const char *name, double v)
{
    sl__rcmd_raw(c, name);
    pushf(c, "%.17g", v);
}

void sl__rcmd_u64(sl__rcmd_t *c, const char *name, uint64_t v)
{
    sl__rcmd_raw(c, name);
    pushf(c, "%llu", (unsigned long long)v);
}

void sl__rcmd_free(sl__rcmd_t *c)
{
    for (int i = 0; i < c->argc; i++) free(c->argv[i]);
    c->argc = 0;
}

void sl__rcmd_configure(sl__rcmd_t *c, const char *name, const sl_pool_config_t *cfg,
                        const sl_engine_config_t *ecfg, const char *roles, const char *prios,
                        int pool_no, double now_s, const char *origin)
{
    sl_engine_config_t defaults;
    if (!ecfg) {
        sl_engine_config_init(&defaults);
        ecfg = &defaults;
    }
    sl__rcmd_begin(c, "sluice_configure", name, now_s, origin);
    sl_engine_config_t engine = *ecfg;
    if (!(isfinite(engine.weight_floor) && engine.weight_floor > 0)) engine.weight_floor = 0.1;
    /* Every configuration field fcall.def lists, the pool's or the engine's. */
#define SL__CONFIG_POOL(n) cfg->n
#define SL__CONFIG_ENGINE(n) engine.n
#define SL_FCALL_CONFIG(n, src) sl__rcmd_num(c, SL_FA(n), (double)SL__CONFIG_##src(n));
#define SL_FCALL_CONFIG_LATER(n, src, dflt) SL_FCALL_CONFIG(n, src)
#include "fcall_config_only.h"
#include "fcall.def"
#include "fcall_end.h"
    sl__rcmd_str(c, SL_FA(roles), roles);
    sl__rcmd_str(c, SL_FA(prios), prios);
    sl__rcmd_num(c, SL_FA(pool_no), pool_no);
}

int sl__rcaps_format(char *out, size_t len, bool team, const char *holder, const sl_caps_t *caps)
{
    return snprintf(out, len, "%c:%s=%.17g/%lld/%lld/%.17g/%.17g", team ? 't' : 'a', holder,
                    caps->max_share, (long long)caps->max_rpm, (long long)caps->max_concurrent,
                    caps->budget_usd_per_hour, caps->budget_usd_per_day);
}

sl__rgraph_t sl__rgraph_parse(const redisReply *r)
{
    sl__rgraph_t g = SL__RGRAPH_NONE;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_INTEGER &&
        r->element[2]->type == REDIS_REPLY_INTEGER) {
        snprintf(g.role, sizeof g.role, "%s", r->element[0]->str);
        g.unblocks = r->element[1]->integer;
        g.depth = r->element[2]->integer;
    }
    return g;
}

void sl__rcmd_request(sl__rcmd_t *c, const sl_request_t *req, bool graph_key, sl__rgraph_t graph,
                      double now_s, const char *origin)
{
    sl__rcmd_begin2(c, "sluice_request", req->pool ? req->pool : "default",
                    req->task && graph_key ? SL__RGRAPH_KEY : NULL, now_s, origin);
    sl__rcmd_str(c, SL_FA(agent), req->agent);
    sl__rcmd_num(c, SL_FA(input_tokens), (double)req->input_tokens);
    sl__rcmd_num(c, SL_FA(cached_tokens), (double)req->cached_tokens);
    sl__rcmd_num(c, SL_FA(output_tokens), (double)req->output_tokens);
    sl__rcmd_str(c, SL_FA(role), req->role);
    sl__rcmd_str(c, SL_FA(task), req->task);
    sl__rcmd_num(c, SL_FA(unblocks), (double)req->unblocks);
    if (graph.unblocks >= 0) sl__rcmd_num(c, SL_FA(graph_unblocks), (double)graph.unblocks);
    if (graph.depth >= 1) sl__rcmd_num(c, SL_FA(graph_depth), (double)graph.depth);
    if (graph.role[0]) sl__rcmd_str(c, SL_FA(task_role), graph.role);
    if (req->max_unblocks_set) sl__rcmd_num(c, SL_FA(max_unblocks), (double)req->max_unblocks);
    if (req->roles_allowed) {
        char list[1024];
        size_t n = 0;
        list[0] = '\0';
        for (size_t i = 0; i < req->n_roles_allowed && n < sizeof list; i++) {
            int k = snprintf(list + n, sizeof list - n, "%s%s", i ? "," : "",
                             req->roles_allowed[i] ? req->roles_allowed[i] : "");
            n += k > 0 ? (size_t)k : 0;
        }
        sl__rcmd_str(c, SL_FA(roles_allowed), list);
    }
    sl__rcmd_str(c, SL_FA(priority), req->priority);
    sl__rcmd_str(c, SL_FA(cache_key), req->cache_key);
    if (req->ttl_s != 0) sl__rcmd_num(c, SL_FA(ttl), req->ttl_s);
    sl__rcmd_str(c, SL_FA(request_id), req->request_id);
    sl__rcmd_str(c, SL_FA(model), req->model);
    sl__rcmd_str(c, SL_FA(cache_prefix_hash), req->cache_prefix_hash);
    if (req->max_wait_s != 0) sl__rcmd_num(c, SL_FA(max_wait_s), req->max_wait_s);
    if (req->output_capped) sl__rcmd_num(c, SL_FA(output_capped), 1);
    if (req->output_capped && req->output_floor_tokens > 0)
        sl__rcmd_num(c, SL_FA(output_floor), (double)req->output_floor_tokens);
    if (req->key_pinned) sl__rcmd_num(c, SL_FA(key_pinned), 1);
    if (req->cache_ttl_s != 0) sl__rcmd_num(c, SL_FA(cache_ttl_s), req->cache_ttl_s);
}

/* ---- provider headers (docs/design.md "Resync"; classified by the engine's headers.c) ---- */

static const char *const FIELD_NAMES[] = {"limit", "remaining", "reset"};

/* Validates every known header, then appends "hn" and the applied entries. */
static int add_headers(sl__rcmd_t *c, const char *const *names, const char *const *values,
                       size_t count, char *err, size_t errlen)
{
    for (size_t i = 0; i < count; i++) {
        if (!names || !values || !names[i] || !values[i]) {
            snprintf(err, errlen, "headers: entry %zu is missing", i);
            return SL_EINVAL;
        }
        sl_header_kind_t h = sl_header_classify(names[i]);
        if (!h.known) continue;
        int64_t v;
        double t;
        bool reset = h.field == SL_HEADER_RESET;
        bool ok = reset ? (h.anthropic ? sl_parse_rfc3339(values[i], &t)
                                       : sl_parse_duration(values[i], &t)) == SL_OK
                        : sl_header_parse_count(values[i], &v);
        if (!ok) {
            snprintf(err, errlen, "header %s: \"%.64s\" is not a valid %s", names[i], values[i],
                     reset ? (h.anthropic ? "RFC 3339 time" : "duration") : "non-negative integer");
            return SL_EINVAL;
        }
    }
    int n = 0;
    char name[16], entry[96];
    for (size_t i = 0; i < count; i++) {
        sl_header_kind_t h = sl_header_classify(names[i]);
        int64_t v;
        if (!h.known || h.bucket < 0 || h.field == SL_HEADER_RESET ||
            !sl_header_parse_count(values[i], &v))
            continue;
        if (c->argc + 4 >= SL__RCMD_MAX_ARGS) break;
        snprintf(name, sizeof name, "%s%d", SL_FA(h), ++n);
        snprintf(entry, sizeof entry, "%d:%d:%s:%lld", h.anthropic ? 1 : 0, h.bucket,
                 FIELD_NAMES[h.field], (long long)v);
        sl__rcmd_str(c, name, entry);
    }
    sl__rcmd_num(c, SL_FA(hn), n);
    return SL_OK;
}

static int check_tokens(const char *field, int64_t v, char *err, size_t errlen)
{
    if (v >= 0 && v <= SL_TOKENS_MAX) return SL_OK;
    snprintf(err, errlen, "%s %lld must be an integer between 0 and 2^53", field, (long long)v);
    return SL_EINVAL;
}

int sl__rcmd_settle(sl__rcmd_t *c, const char *pool, uint64_t lease, const sl_settle_t *s,
                    double now_s, const char *origin, char *err, size_t errlen)
{
    int rc;
    if (!s) {
        snprintf(err, errlen, "settle body missing");
        return SL_EINVAL;
    }
    if ((rc = check_tokens("input_tokens", s->input_tokens, err, errlen)) ||
        (rc = check_tokens("output_tokens", s->output_tokens, err, errlen)) ||
        (rc = check_tokens("cache_creation_input_tokens", s->cache_creation_input_tokens, err,
                           errlen)) ||
        (rc = check_tokens("cache_read_input_tokens", s->cache_read_input_tokens, err, errlen)) ||
        (rc = check_tokens("cache_creation_1h_input_tokens", s->cache_creation_1h_input_tokens,
                           err, errlen)))
        return rc;
    if (isnan(s->retry_after_s) || isinf(s->retry_after_s) || s->retry_after_s > 86400) {
        snprintf(err, errlen, "retry_after %g must be a number of seconds up to 86400",
                 s->retry_after_s);
        return SL_EINVAL;
    }
    if (isnan(s->agent_retry_after_s) || isinf(s->agent_retry_after_s) ||
        s->agent_retry_after_s > 86400) {
        snprintf(err, errlen, "agent_retry_after %g must be a number of seconds up to 86400",
                 s->agent_retry_after_s);
        return SL_EINVAL;
    }
    if (s->failure_signature && strlen(s->failure_signature) > 256) {
        snprintf(err, errlen, "failure_signature is longer than 256 bytes");
        return SL_EINVAL;
    }
    sl__rcmd_begin(c, "sluice_settle", pool, now_s, origin);
    sl__rcmd_u64(c, SL_FA(lease), lease);
    sl__rcmd_num(c, SL_FA(input_tokens), (double)s->input_tokens);
    sl__rcmd_num(c, SL_FA(output_tokens), (double)s->output_tokens);
    sl__rcmd_num(c, SL_FA(cache_creation_input_tokens), (double)s->cache_creation_input_tokens);
    sl__rcmd_num(c, SL_FA(cache_read_input_tokens), (double)s->cache_read_input_tokens);
    if (s->cache_creation_1h_input_tokens)
        sl__rcmd_num(c, SL_FA(cache_creation_1h_input_tokens),
                     (double)s->cache_creation_1h_input_tokens);
    sl__rcmd_num(c, SL_FA(got_429), s->got_429 ? 1 : 0);
    sl__rcmd_num(c, SL_FA(retry_after), s->retry_after_s < 0 ? -1 : s->retry_after_s);
    if (s->agent_retry_after_s > 0) sl__rcmd_num(c, SL_FA(agent_retry_after), s->agent_retry_after_s);
    sl__rcmd_num(c, SL_FA(spend_cap), s->spend_cap ? 1 : 0);
    sl__rcmd_num(c, SL_FA(failed), s->failed ? 1 : 0);
    if (s->failure_signature && s->failure_signature[0])
        sl__rcmd_str(c, SL_FA(failure_signature), s->failure_signature);
    rc = add_headers(c, s->header_names, s->header_values, s->header_count, err, errlen);
    if (rc) sl__rcmd_free(c);
    return rc;
}

int sl__rcmd_resync(sl__rcmd_t *c, const char *pool, uint64_t lease, double sent_after_s,
                    const char *const *names, const char *const *values, size_t count,
                    double now_s, const char *origin, char *err, size_t errlen)
{
    if (!isfinite(sent_after_s)) {
        snprintf(err, errlen, "sent_after_s %g must be a finite number of seconds", sent_after_s);
        return SL_EINVAL;
    }
    sl__rcmd_begin(c, "sluice_resync", pool, now_s, origin);
    if (lease) sl__rcmd_u64(c, SL_FA(lease), lease);
    if (lease && sent_after_s >= 0) sl__rcmd_num(c, SL_FA(sent_after_s), sent_after_s);
    int rc = add_headers(c, names, values, count, err, errlen);
    if (rc) sl__rcmd_free(c);
    return rc;
}

/* ---- replies ---- */

int sl__rcode(const char *name)
{
    static const int codes[] = {SL_OK,       SL_EINVAL, SL_ENOTFOUND, SL_EALREADY,
                                SL_EEXPIRED, SL_ECAPACITY, SL_ETIME,  SL_ENOMEM,
                                SL_EEXIST,   SL_EFORBIDDEN};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(name, sl_strerror(codes[i])) == 0) return codes[i];
    return SL__RPROTO;
}

static bool is_str(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

int sl__rreply_parse(const redisReply *r, sl__rreply_t *out)
{
    memset(out, 0, sizeof *out);
    out->rc = SL__RPROTO;
    out->wake_s = INFINITY;
    out->epoch = out->next_n = 0;
    out->lost_until_s = -INFINITY;
    out->msg = "the connection to Redis was lost";
    if (!r) return out->rc;
    if (r->type == REDIS_REPLY_ERROR) {
        out->msg = r->str;
        return out->rc;
    }
    out->msg = "unexpected reply from the sluice library";
    if (r->type != REDIS_REPLY_ARRAY || (r->elements != 5 && r->elements != 6) ||
        !is_str(r->element[0]) || !is_str(r->element[1]) ||
        r->element[2]->type != REDIS_REPLY_ARRAY || r->element[3]->type != REDIS_REPLY_ARRAY ||
        !is_str(r->element[4]))
        return out->rc;
    if (r->elements == 6 && r->element[5]->type == REDIS_REPLY_ARRAY &&
        r->element[5]->elements == 3) {
        const redisReply *e = r->element[5];
        if (is_str(e->element[0])) out->epoch = strtod(e->element[0]->str, NULL);
        if (is_str(e->element[1])) out->next_n = strtod(e->element[1]->str, NULL);
        if (is_str(e->element[2])) out->lost_until_s = strtod(e->element[2]->str, NULL);
    }
    out->state_lost = strcmp(r->element[0]->str, "state_lost") == 0;
    out->rc = sl__rcode(r->element[0]->str);
    out->msg = r->element[1]->str;
    out->fields = r->element[2];
    out->events = r->element[3];
    out->wake_s = strtod(r->element[4]->str, NULL);
    return out->rc;
}

static const char *array_get(const redisReply *a, const char *name)
{
    if (!a) return NULL;
    for (size_t i = 0; i + 1 < a->elements; i += 2)
        if (is_str(a->element[i]) && strcmp(a->element[i]->str, name) == 0 &&
            is_str(a->element[i + 1]))
            return a->element[i + 1]->str;
    return NULL;
}

const char *sl__rreply_get(const sl__rreply_t *rep, const char *name)
{
    return array_get(rep->fields, name);
}

double sl__rreply_num(const sl__rreply_t *rep, const char *name, double dflt)
{
    const char *v = sl__rreply_get(rep, name);
    return v ? strtod(v, NULL) : dflt;
}

static uint64_t to_u64(const char *v)
{
    return v ? strtoull(v, NULL, 10) : 0;
}

static int64_t to_i64(const char *v)
{
    return v ? (int64_t)strtod(v, NULL) : 0;
}

const char *sl__rreply_limited_by(const char *v)
{
    static const char *const KNOWN[] = {"input_tokens", "output_tokens", "requests",
                                        "tokens",       "concurrency",   "retry_after",
                                        "agent_cap",    "team_cap",      "budget_exhausted",
                                        "working_set"};
    for (size_t i = 0; v && i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (strcmp(v, KNOWN[i]) == 0) return KNOWN[i];
    return NULL;
}

/* A refusal's reason as a static string: a cap's (caps in sluice.lua) or the agent's own
 * retry-after, else the queue's. */
static const char *reject_reason(const char *v)
{
    static const char *const CAPS[] = {"agent_cap", "team_cap", "budget_exhausted",
                                       "agent_retry_after"};
    for (size_t i = 0; v && i < sizeof CAPS / sizeof CAPS[0]; i++)
        if (strcmp(v, CAPS[i]) == 0) return CAPS[i];
    return "queue_wait_exceeds_max";
}

void sl__rreply_decision(const sl__rreply_t *rep, sl_decision_t *out)
{
    memset(out, 0, sizeof *out);
    const char *status = sl__rreply_get(rep, SL_FR(status));
    out->status = !status                         ? SL_REJECTED
                  : strcmp(status, "granted") == 0 ? SL_GRANTED
                  : strcmp(status, "queued") == 0  ? SL_QUEUED
                                                   : SL_REJECTED;
    out->lease = to_u64(sl__rreply_get(rep, SL_FR(lease)));
    out->ticket = to_u64(sl__rreply_get(rep, SL_FR(ticket)));
    out->expires_at = sl__rreply_num(rep, SL_FR(expires_at), 0);
    out->ttl_s = sl__rreply_num(rep, SL_FR(ttl), 0);
    out->weight = sl__rreply_num(rep, SL_FR(weight), 0);
    out->charged_input_tokens = to_i64(sl__rreply_get(rep, SL_FR(charged_input_tokens)));
    out->charged_output_tokens = to_i64(sl__rreply_get(rep, SL_FR(charged_output_tokens)));
    out->charged_requests = to_i64(sl__rreply_get(rep, SL_FR(charged_requests)));
    out->cache_penalty = sl__rreply_num(rep, SL_FR(cache_penalty), 0) != 0;
    out->waited_s = sl__rreply_num(rep, SL_FR(waited), 0);
    out->eta_s = sl__rreply_num(rep, SL_FR(eta), 0);
    out->position = to_i64(sl__rreply_get(rep, SL_FR(position)));
    out->retry_after_s = sl__rreply_num(rep, SL_FR(retry_after), 0);
    out->retry_at = sl__rreply_num(rep, SL_FR(retry_at), 0);
    if (out->status == SL_REJECTED) out->reason = reject_reason(sl__rreply_get(rep, SL_FR(reason)));
    out->limited_by = sl__rreply_limited_by(sl__rreply_get(rep, SL_FR(limited_by)));
    out->replayed = sl__rreply_num(rep, SL_FR(replayed), 0) != 0;
}

void sl__rreply_pool_info(const sl__rreply_t *rep, sl_pool_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->name = sl__rreply_get(rep, SL_FR(name));
    sl_pool_config_t *c = &out->config;
    sl_pool_config_init(c);
    /* cfg_NAME for every pool field fcall.def lists (the engine's are not the pool's). */
#define SL__DECODE_POOL(n) c->n = (__typeof__(c->n))sl__rreply_num(rep, "cfg_" #n, (double)c->n);
#define SL__DECODE_ENGINE(n)
#define SL_FCALL_CONFIG(n, src) SL__DECODE_##src(n)
#define SL_FCALL_CONFIG_LATER(n, src, dflt) SL_FCALL_CONFIG(n, src)
#include "fcall_config_only.h"
#include "fcall.def"
#include "fcall_end.h"
    out->margin = sl__rreply_num(rep, SL_FR(margin), 0);
    char name[32];
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        snprintf(name, sizeof name, "%s%d", SL_FR(level), b);
        out->level[b] = sl__rreply_num(rep, name, 0);
        snprintf(name, sizeof name, "%s%d", SL_FR(capacity), b);
        out->capacity[b] = sl__rreply_num(rep, name, 0);
        snprintf(name, sizeof name, "%s%d", SL_FR(refill), b);
        out->refill_per_s[b] = sl__rreply_num(rep, name, 0);
        snprintf(name, sizeof name, "%s%d", SL_FR(limit), b);
        out->limit[b] = to_i64(sl__rreply_get(rep, name));
    }
    out->queue_depth = to_i64(sl__rreply_get(rep, SL_FR(queue_depth)));
    out->head_eta_s = sl__rreply_num(rep, SL_FR(head_eta), -1);
    out->leases_in_flight = to_i64(sl__rreply_get(rep, SL_FR(leases_in_flight)));
    out->alert_margin_at_floor = sl__rreply_num(rep, SL_FR(alert_margin_at_floor), 0) != 0;
    out->alert_spend_cap = sl__rreply_num(rep, SL_FR(alert_spend_cap), 0) != 0;
    out->blocked_until = sl__rreply_num(rep, SL_FR(blocked_until), -INFINITY);
    out->granted_total = to_u64(sl__rreply_get(rep, SL_FR(granted_total)));
    out->queued_total = to_u64(sl__rreply_get(rep, SL_FR(queued_total)));
    out->rejected_total = to_u64(sl__rreply_get(rep, SL_FR(rejected_total)));
    out->upstream_429_total = to_u64(sl__rreply_get(rep, SL_FR(upstream_429_total)));
}

/* ---- events ---- */

static const struct {
    const char *name;
    sl_event_kind_t kind;
} KINDS[] = {
    {"granted", SL_EV_GRANTED},
    {"queued", SL_EV_QUEUED},
    {"rejected", SL_EV_REJECTED},
    {"settled", SL_EV_SETTLED},
    {"cancelled", SL_EV_CANCELLED},
    {"reaped", SL_EV_REAPED},
    {"unclaimed", SL_EV_UNCLAIMED},
    {"ticket_cancelled", SL_EV_TICKET_CANCELLED},
    {"ticket_expired", SL_EV_TICKET_EXPIRED},
    {"ticket_rejected", SL_EV_TICKET_REJECTED},
    {"upstream_429", SL_EV_UPSTREAM_429},
    {"margin", SL_EV_MARGIN},
    {"alert", SL_EV_ALERT},
    {"limit_adopted", SL_EV_LIMIT_ADOPTED},
    {"resync", SL_EV_RESYNC},
};

/* Fills `out` from name/value pairs given as parallel string pointers. */
static bool fill_event(const char *const *kv, size_t n, sl_event_t *out)
{
    memset(out, 0, sizeof *out);
    bool have_kind = false;
    for (size_t i = 0; i + 1 < n; i += 2) {
        const char *k = kv[i], *v = kv[i + 1];
        double d = strtod(v, NULL);
        if (strcmp(k, "kind") == 0) {
            for (size_t j = 0; j < sizeof KINDS / sizeof KINDS[0]; j++)
                if (strcmp(v, KINDS[j].name) == 0) out->kind = KINDS[j].kind, have_kind = true;
        } else if (strcmp(k, "now") == 0) out->now_s = d;
        else if (strcmp(k, "pool") == 0) out->pool = v;
        else if (strcmp(k, "agent") == 0) out->agent = v;
        else if (strcmp(k, "lease") == 0) out->lease = strtoull(v, NULL, 10);
        else if (strcmp(k, "ticket") == 0) out->ticket = strtoull(v, NULL, 10);
        else if (strcmp(k, "input_tokens") == 0) out->input_tokens = (int64_t)d;
        else if (strcmp(k, "output_tokens") == 0) out->output_tokens = (int64_t)d;
        else if (strcmp(k, "adjust_input_tokens") == 0) out->adjust_input_tokens = (int64_t)d;
        else if (strcmp(k, "adjust_output_tokens") == 0) out->adjust_output_tokens = (int64_t)d;
        else if (strcmp(k, "weight") == 0) out->weight = d;
        else if (strcmp(k, "eta") == 0) out->eta_s = d;
        else if (strcmp(k, "retry_at") == 0) out->retry_at = d;
        else if (strcmp(k, "waited") == 0) out->waited_s = d;
        else if (strcmp(k, "estimate_error") == 0) out->estimate_error = d;
        else if (strcmp(k, "not_counted") == 0) out->not_counted = d != 0;
        else if (strcmp(k, "margin") == 0) out->margin = d;
        else if (strcmp(k, "reason") == 0) out->reason = v;
        else if (strcmp(k, "alert") == 0) out->alert = v;
        else if (strcmp(k, "active") == 0) out->active = d != 0;
        else if (strcmp(k, "bucket") == 0) out->bucket = (sl_bucket_t)(int)d;
        else if (strcmp(k, "value") == 0) out->value = d;
    }
    return have_kind;
}

bool sl__rreply_event(const sl__rreply_t *rep, size_t i, sl_event_t *out)
{
    if (!rep->events || i >= rep->events->elements) return false;
    const redisReply *ev = rep->events->element[i];
    if (ev->type != REDIS_REPLY_ARRAY || ev->elements > 64) return false;
    const char *kv[64];
    for (size_t j = 0; j < ev->elements; j++) {
        if (!is_str(ev->element[j])) return false;
        kv[j] = ev->element[j]->str;
    }
    return fill_event(kv, ev->elements, out);
}

bool sl__wire_event(char *msg, sl_event_t *out)
{
    const char *kv[64];
    size_t n = 0;
    char *p = msg;
    while (n < 64) {
        kv[n++] = p;
        char *sep = strchr(p, '\x1f');
        if (!sep) break;
        *sep = '\0';
        p = sep + 1;
    }
    return fill_event(kv, n, out);
}
