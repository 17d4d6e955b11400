/* tokens_api.c - /v1/admin/tokens (mint, list, revoke) and the tokens' caps in the backend's
 * settings.
 *
 * The engine keeps caps per agent name. A token naming one `agent` whose tier or own
 * fields set caps hands them to that agent: the backend is configured with the file's
 * `caps:` plus one entry per such agent (the first token of an agent wins; an agent the
 * file's `caps.agents` names keeps those). The whole set is given at start, on every
 * reload and after a mint or revoke that changes caps, as the backend lifts the caps a
 * configure no longer names.
 */
#include "server.h"
#include "tokens_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

/* ---- caps of tokens into the backend's settings ---------------------------------- */

typedef struct cand {
    const char *agent;
    sl_caps_t caps;
    size_t order; /* config, file, then minted: the first wins */
} cand_t;

static int by_agent_then_order(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    int c = strcmp(x->agent, y->agent);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static bool caps_set(const sl_caps_t *c)
{
    return c->max_share > 0 || c->max_rpm > 0 || c->max_concurrent > 0 ||
           c->budget_usd_per_hour > 0 || c->budget_usd_per_day > 0;
}

static bool has_caps(const sl_token_rule_t *r)
{
    return r->agent && caps_set(&r->meta.caps);
}

int sl__tokens_configure(sl_server_t *srv, const sl_config_t *c, const sl_token_store_t *minted,
                         sl_backend_done_cb cb, void *ud)
{
    size_t n_minted;
    sl_token_rule_t *const *m = sl__token_store_rules(minted, &n_minted);
    cand_t *cands = malloc((c->n_tokens + n_minted + 1) * sizeof(*cands));
    sl_named_caps_t *caps =
        malloc((c->settings.n_caps + c->n_tokens + n_minted + 1) * sizeof(*caps));
    if (!cands || !caps) {
        free(cands), free(caps);
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < c->n_tokens; i++) {
        if (!has_caps(&c->tokens[i])) continue;
        cands[n] = (cand_t){c->tokens[i].agent, c->tokens[i].meta.caps, n};
        n++;
    }
    for (size_t i = 0; i < n_minted; i++) {
        /* against c's tiers: on a reload the minted tokens still hold the running ones */
        sl_caps_t caps_now = sl__token_effective_caps(sl__tier_find(&c->token_cfg, m[i]->meta.tier),
                                                      &m[i]->meta.own);
        if (!m[i]->agent || !caps_set(&caps_now)) continue;
        cands[n] = (cand_t){m[i]->agent, caps_now, n};
        n++;
    }
    qsort(cands, n, sizeof(*cands), by_agent_then_order);
    sl_backend_settings_t s = c->settings;
    if (c->settings.n_caps) memcpy(caps, c->settings.caps, c->settings.n_caps * sizeof(*caps));
    s.caps = caps;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && !strcmp(cands[i].agent, cands[i - 1].agent)) continue;
        if (sl_backend_settings_names_caps(&c->settings, cands[i].agent, false)) continue;
        caps[s.n_caps++] =
            (sl_named_caps_t){.holder = (char *)cands[i].agent, .caps = cands[i].caps};
    }
    sl_backend_configure(srv->backend, &s, cb, ud); /* the backends copy what they keep */
    free(cands);
    free(caps);
    return 0;
}

/* An answer held until the backend has the new set of caps. */
typedef struct caps_answer {
    sl_call_t *call;
    int status;
    json_t *body;
} caps_answer_t;

static void on_caps_applied(int rc, double value, const char *errmsg, void *ud)
{
    caps_answer_t *a = ud;
    (void)value;
    if (rc != SL_OK) /* the token stays as written; its caps are what the backend kept */
        sl__log(SL_LOG_WARN, "tokens: the backend refused the tokens' caps: %s",
                errmsg ? errmsg : sl_strerror(rc));
    sl__reply_json(a->call, a->status, a->body);
    free(a);
}

/* Answers `call` with (status, body) once the backend has every token's caps (at once on
 * memory, after the configure's round trips on Redis): when a mint or revoke is answered,
 * its caps are in force, or lifted. */
static void reply_after_caps(sl_call_t *call, int status, json_t *body)
{
    caps_answer_t *a = malloc(sizeof(*a));
    if (a) *a = (caps_answer_t){call, status, body};
    if (!a || sl__tokens_configure(call->srv, &call->srv->config, call->srv->minted,
                                   on_caps_applied, a) < 0) {
        sl__log(SL_LOG_ERROR, "tokens: out of memory applying the tokens' caps");
        free(a);
        sl__reply_json(call, status, body);
    }
}

/* ---- start, reload, stop ------------------------------------------------------------ */

int sl__tokens_start(sl_server_t *srv, char *err, size_t errlen)
{
    srv->minted = sl__token_store_open(&srv->config.token_cfg, err, errlen);
    return srv->minted ? 0 : -1;
}

int sl__tokens_reload_check(sl_server_t *srv, const sl_config_t *next, char *err, size_t errlen)
{
    return sl__token_store_check(srv->minted, &next->token_cfg, err, errlen);
}

void sl__tokens_retire(sl_server_t *srv)
{
    if (!srv->minted) return; /* no store (fuzz target): freed with the configuration */
    sl__token_store_retire_rules(srv->minted, srv->config.tokens, srv->config.n_tokens);
    srv->config.tokens = NULL;
    srv->config.n_tokens = 0;
}

void sl__tokens_reloaded(sl_server_t *srv)
{
    if (srv->minted) sl__token_store_reconfigure(srv->minted, &srv->config.token_cfg);
}

void sl__tokens_free(sl_server_t *srv)
{
    sl__token_store_free(srv->minted);
    srv->minted = NULL;
}

void sl__tokens_watch(sl_server_t *srv)
{
    const sl_token_config_t *cfg = &srv->config.token_cfg;
    if (!cfg->tokens_file || !srv->config_path || !srv->minted) return;
    sl_file_stamp_t now;
    sl__file_stamp(cfg->tokens_file, &now);
    if (sl__file_stamp_equal(&now, &cfg->tokens_file_read) ||
        sl__file_stamp_equal(&now, sl__token_store_refused_stamp(srv->minted)))
        return;
    char err[512];
    if (sl__server_reload(srv, err, sizeof err) < 0) {
        sl__log(SL_LOG_WARN,
                "%s changed; reload refused, keeping the running "
                "configuration: %s",
                cfg->tokens_file, err);
        *sl__token_store_refused_stamp(srv->minted) = now; /* said once per version */
        return;
    }
    sl__log(SL_LOG_INFO, "%s changed: configuration reloaded",
            srv->config.token_cfg.tokens_file);
}

sl_token_rule_t *sl__tokens_find(sl_server_t *srv, const char *secret)
{
    unsigned char sha[SL_TOKEN_SHA256_BYTES];
    sl__token_sha256(secret, sha);
    sl_token_rule_t *r = sl__token_index_find(srv->config.token_cfg.index, sha);
    return r ? r : sl__token_store_find(srv->minted, sha);
}

/* ---- the routes --------------------------------------------------------------------- */

static void reply_refusal(sl_call_t *call, const sl_token_refusal_t *ref)
{
    sl__reply_error(call, ref->status, ref->type, "%s", ref->message);
}

#define PAGE_DEFAULT 1000
#define PAGE_MAX     10000

/* Reads `name` of query `q` as a whole number in [min, max] (dflt when absent); -1 after
 * answering 400 naming it and its value. */
static int query_number(sl_call_t *call, struct evkeyvalq *q, const char *name, long min, long max,
                        long dflt, long *out)
{
    const char *v = evhttp_find_header(q, name);
    char *end;
    errno = 0;
    *out = v ? strtol(v, &end, 10) : dflt;
    if (v && (!*v || *end || errno || *out < min || *out > max)) {
        char shown[72];
        snprintf(shown, sizeof shown, "%.64s", v);
        evhttp_clear_headers(q); /* the query's strings before the reply frees the request */
        sl__reply_error(call, 400, "invalid_request",
                        "%s: '%s' is not an integer between %ld "
                        "and %ld",
                        name, shown, min, max);
        return -1;
    }
    return 0;
}

/* One page: the configuration's tokens, then the minted ones, `limit` from `cursor` (an
 * index into that order); `next_cursor` is where the next page starts, null after the last. */
static void list_tokens(sl_call_t *call, const char *query)
{
    const sl_config_t *c = &call->srv->config;
    size_t n_minted;
    sl_token_rule_t *const *m = sl__token_store_rules(call->srv->minted, &n_minted);
    size_t total = c->n_tokens + n_minted;
    struct evkeyvalq q = {0};
    long limit, from;
    if (query && *query && evhttp_parse_query_str(query, &q) < 0) {
        sl__reply_error(call, 400, "invalid_request", "query: cannot be parsed");
        return;
    }
    if (query_number(call, &q, "limit", 1, PAGE_MAX, PAGE_DEFAULT, &limit) < 0 ||
        query_number(call, &q, "cursor", 0, (long)total, 0, &from) < 0)
        return;
    evhttp_clear_headers(&q);
    json_t *list = json_array();
    size_t end = (size_t)from + (size_t)limit < total ? (size_t)from + (size_t)limit : total;
    for (size_t i = (size_t)from; list && i < end; i++)
        json_array_append_new(
            list, sl__token_rule_json(i < c->n_tokens ? &c->tokens[i] : m[i - c->n_tokens]));
    char next[24];
    snprintf(next, sizeof next, "%zu", end);
    sl__reply_json(call, 200,
                   json_pack("{s:o, s:o, s:I, s:I, s:I}", "tokens", list ? list : json_array(),
                             "next_cursor", end < total ? json_string(next) : json_null(), "total",
                             (json_int_t)total, "minted", (json_int_t)n_minted, "max_minted_tokens",
                             (json_int_t)c->token_cfg.max_minted));
}

static void mint(sl_call_t *call)
{
    sl_token_refusal_t ref;
    if (!call->srv->config.admin_token) {
        sl__reply_error(call, 409, "conflict",
                        "auth.admin_token: minted tokens need auth on (an admin token)");
        return;
    }
    json_t *answer =
        sl__token_store_mint(call->srv->minted, &call->srv->config.token_cfg, call->body, &ref);
    if (!answer) {
        reply_refusal(call, &ref);
        return;
    }
    const char *id = json_string_value(json_object_get(answer, "id"));
    sl_token_rule_t *r = sl__token_store_by_id(call->srv->minted, id);
    if (r && has_caps(r))
        reply_after_caps(call, 201, answer);
    else
        sl__reply_json(call, 201, answer);
}

static void revoke(sl_call_t *call, const char *id)
{
    const sl_config_t *c = &call->srv->config;
    for (size_t i = 0; i < c->n_tokens; i++)
        if (!strcmp(c->tokens[i].meta.id, id)) {
            sl__reply_error(
                call, 409, "conflict", "id: '%.128s' is a token of %s: remove it there and reload",
                id, c->tokens[i].meta.source == SL_TOKEN_FILE ? "auth.tokens_file" : "auth.tokens");
            return;
        }
    sl_token_refusal_t ref;
    sl_token_rule_t *r;
    if (sl__token_store_revoke(call->srv->minted, id, &ref, &r) < 0) {
        reply_refusal(call, &ref);
        return;
    }
    /* Its open event streams end too: a revoked token sees nothing more. */
    uint64_t who = sl__token_principal(r);
    for (sl_call_t *sub = call->srv->streams, *next; sub; sub = next) {
        next = sub->next;
        if (sub->stream_principal == who) sl__call_drop(sub);
    }
    json_t *answer = json_pack("{s:s, s:s}", "id", id, "status", "revoked");
    if (has_caps(r))
        reply_after_caps(call, 200, answer);
    else
        sl__reply_json(call, 200, answer);
}

void sl__handle_tokens(sl_call_t *call, char **seg, int method, const char *query)
{
    if (!call->admin) {
        sl__reply_error(call, 403, "forbidden", "tokens: needs the admin token");
        return;
    }
    if (method != SL_HTTP_GET && !call->srv->minted) /* a server without a store (fuzz target) */
        sl__reply_error(call, 409, "conflict", "tokens: this server keeps no minted tokens");
    else if (seg[3])
        revoke(call, seg[3]);
    else if (method == SL_HTTP_POST)
        mint(call);
    else
        list_tokens(call, query);
}
