/* drive.c - one scenario operation run on the engine or on sluice.lua, answered in the backend-neutral record. */
#include "drive.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_proto.h"

extern const char sl__redis_lua_source[];

/* ---- ids ---- */

static size_t id_hash(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    return (size_t)(id ^ (id >> 33));
}

static int ids_grow(ids_t *m)
{
    int cap = m->cap ? m->cap * 2 : 256;
    uint64_t *id = realloc(m->id, (size_t)cap * sizeof *id);
    if (!id) return -1;
    m->id = id;
    m->cap = cap;
    size_t n_slots = (size_t)cap * 2;
    int *slot = calloc(n_slots, sizeof *slot);
    if (!slot) return -1;
    free(m->slot);
    m->slot = slot;
    m->n_slots = n_slots;
    for (int s = 1; s <= m->n; s++) {
        size_t i = id_hash(m->id[s - 1]) & (n_slots - 1);
        while (slot[i]) i = (i + 1) & (n_slots - 1);
        slot[i] = s;
    }
    return 0;
}

int ids_symbol(ids_t *m, uint64_t id)
{
    if (id == 0) return 0;
    if (m->n == m->cap && ids_grow(m) < 0) return -1;
    size_t i = id_hash(id) & (m->n_slots - 1);
    for (; m->slot[i]; i = (i + 1) & (m->n_slots - 1))
        if (m->id[m->slot[i] - 1] == id) return m->slot[i];
    m->id[m->n++] = id;
    m->slot[i] = m->n;
    return m->n;
}

bool ids_var_get(const ids_t *m, const char *name, uint64_t *id)
{
    for (int i = 0; i < m->n_vars; i++)
        if (strcmp(m->var[i], name) == 0) {
            *id = m->var_id[i];
            return true;
        }
    return false;
}

void ids_var_set(ids_t *m, const char *name, uint64_t id)
{
    if (m->n_vars == SCN_MAX_VARS) return;
    snprintf(m->var[m->n_vars], sizeof m->var[0], "%s", name);
    m->var_id[m->n_vars++] = id;
}

void ids_reset(ids_t *m)
{
    m->n = 0;
    m->n_vars = 0;
    if (m->slot) memset(m->slot, 0, m->n_slots * sizeof *m->slot);
}

void ids_free(ids_t *m)
{
    free(m->id);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- scenario lines ---- */

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A `caps HOLDER max_share= max_rpm= max_concurrent= budget_usd_per_hour=
 * budget_usd_per_day= team=0|1` operation's caps. */
static void caps_from(const op_t *op, sl_caps_t *caps)
{
    caps->max_share = arg_num(op, "max_share", 0);
    caps->max_rpm = (int64_t)arg_num(op, "max_rpm", 0);
    caps->max_concurrent = (int64_t)arg_num(op, "max_concurrent", 0);
    caps->budget_usd_per_hour = arg_num(op, "budget_usd_per_hour", 0);
    caps->budget_usd_per_day = arg_num(op, "budget_usd_per_day", 0);
}

void scenario_init(scenario_t *sc, const char *path)
{
    memset(sc, 0, sizeof *sc);
    sc->path = path;
    sl_engine_config_init(&sc->ecfg);
    snprintf(sc->roles, sizeof sc->roles, "planner=3,reviewer=2,worker=1");
    snprintf(sc->prios, sizeof sc->prios, "high=4,normal=1,low=0.25");
}

static void list_append(char *list, size_t size, const char *sep, const char *name,
                        const char *value)
{
    size_t len = strlen(list);
    snprintf(list + len, size - len, "%s%s=%s", len ? sep : "", name, value);
}

/* Notes what the Redis library receives with every pool's configuration. */
static void note_pool_settings(scenario_t *sc, const op_t *op)
{
    const char *name = op->tok[0];
    /* roles and priorities go to every pool (the Redis library keeps them per pool) */
    if (strcmp(name, "role") == 0 || strcmp(name, "priority") == 0) {
        char *list = strcmp(name, "role") == 0 ? sc->roles : sc->prios;
        list_append(list, sizeof sc->roles, ",", op->tok[1], op->ntok > 2 ? op->tok[2] : "1");
    }
    /* so do teams' weights and members (before the pools, like roles) */
    if (strcmp(name, "team") == 0 && op->ntok > 2)
        list_append(sc->teams, sizeof sc->teams, ",", op->tok[1], op->tok[2]);
    if (strcmp(name, "member") == 0 && op->ntok > 2)
        list_append(sc->members, sizeof sc->members, ",", op->tok[1], op->tok[2]);
    /* and caps (the Redis side applies them all from the start) */
    if (strcmp(name, "caps") == 0 && op->ntok > 1) {
        sl_caps_t caps;
        caps_from(op, &caps);
        size_t len = strlen(sc->caps);
        if (len) snprintf(sc->caps + len, sizeof sc->caps - len, ",");
        len = strlen(sc->caps);
        sl__rcaps_format(sc->caps + len, sizeof sc->caps - len, arg_num(op, "team", 0) != 0,
                         op->tok[1], &caps);
    }
}

int scenario_line(scenario_t *sc, char *line, int lineno, op_t *op)
{
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *tok[SCN_MAX_TOKENS * 2];
    int n = scn_split(line, tok, SCN_MAX_TOKENS * 2);
    if (n == 0) return 0;
    if (strcmp(tok[0], "engine_only") == 0) {
        sc->engine_only = true;
        return 0;
    }
    if (strcmp(tok[0], "one_server") == 0) {
        sc->one_server = true;
        return 0;
    }
    if (strcmp(tok[0], "wakeups") == 0) {
        sc->wakeups = true;
        return 0;
    }
    if (strcmp(tok[0], "engine") == 0) {
        for (int i = 1; i < n; i++) {
            double v = strtod(strchr(tok[i], '=') ? strchr(tok[i], '=') + 1 : "0", NULL);
            if (strncmp(tok[i], "tombstone_ttl_s=", 16) == 0) sc->ecfg.tombstone_ttl_s = v;
            if (strncmp(tok[i], "idempotency_ttl_s=", 18) == 0) sc->ecfg.idempotency_ttl_s = v;
        }
        return 0;
    }
    memset(op, 0, sizeof *op);
    if (scn_op_parse(op, tok, n, lineno) < 0) return -1;
    note_pool_settings(sc, op);
    return 1;
}

void scenario_free(scenario_t *sc)
{
    for (int i = 0; i < sc->n_lines; i++) free(sc->lines[i]);
    sc->n_lines = 0;
}

int scenario_load(const char *path, scenario_t *sc)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    scenario_init(sc, path);
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f) && sc->n < SCN_MAX_OPS && sc->n_lines < SCN_MAX_OPS) {
        lineno++;
        char *copy = dupstr(line);
        if (!copy) break;
        sc->lines[sc->n_lines++] = copy;
        int got = scenario_line(sc, copy, lineno, &sc->ops[sc->n]);
        if (got < 0) {
            fprintf(stderr, "%s:%d: no operation\n", path, lineno);
            scenario_free(sc);
            fclose(f);
            return -1;
        }
        sc->n += got;
    }
    fclose(f);
    return 0;
}

static void pool_config_from(const op_t *op, sl_pool_config_t *cfg)
{
    sl_pool_config_init(cfg);
#define N(field) cfg->field = (__typeof__(cfg->field))arg_num(op, #field, (double)cfg->field)
    N(input_tpm);
    N(output_tpm);
    N(rpm);
    N(tokens_tpm);
    N(concurrency);
    N(margin_start);
    N(margin_floor);
    N(margin_step_down);
    N(margin_step_up);
    N(margin_max);
    N(send_window_s);
    N(recover_every_s);
    N(margin_floor_alert_s);
    N(lease_ttl_s);
    N(max_lease_ttl_s);
    N(max_queue_wait_s);
    N(cache_ttl_s);
    N(cache_bump_min_tokens);
    N(cache_bump);
    N(estimate_error_alert);
    N(estimate_error_window);
    N(claim_timeout_s);
    N(ticket_idle_s);
    N(output_reserve_learned);
    N(spend_cap_reset_s);
    N(lease_duration_prior_s);
    N(backfill);
    N(working_set);
    N(key_group);
    N(request_parent);
    N(price_input_per_mtok);
    N(price_output_per_mtok);
#undef N
    cfg->cache_reads_count = arg_num(op, "cache_reads_count", 0) != 0;
}

static void request_from(const op_t *op, sl_request_t *r)
{
    memset(r, 0, sizeof *r);
    r->agent = arg(op, "agent");
    r->pool = arg(op, "pool");
    r->input_tokens = (int64_t)arg_num(op, "in", 0);
    r->cached_tokens = (int64_t)arg_num(op, "cached", 0);
    r->output_tokens = (int64_t)arg_num(op, "out", 0);
    r->role = arg(op, "role");
    r->task = arg(op, "task");
    r->unblocks = (int64_t)arg_num(op, "unblocks", 0);
    r->priority = arg(op, "priority");
    r->cache_key = arg(op, "cache_key");
    r->ttl_s = arg_num(op, "ttl", 0);
    r->request_id = arg(op, "rid");
    r->model = arg(op, "model");
    r->cache_prefix_hash = arg(op, "prefix");
    r->max_wait_s = arg_num(op, "max_wait", 0);
    r->output_capped = arg_num(op, "capped", 0) != 0;
    r->output_floor_tokens = (int64_t)arg_num(op, "floor", 0);
    r->key_pinned = arg_num(op, "pin", 0) != 0;
    r->cache_ttl_s = arg_num(op, "cache_ttl", 0);
    /* allowed=a,b: the caller's roles (roles_allowed), valid until the next request */
    static char allowed[512];
    static const char *roles[16];
    if (arg(op, "allowed")) {
        snprintf(allowed, sizeof allowed, "%s", arg(op, "allowed"));
        r->n_roles_allowed = 0;
        for (char *s = strtok(allowed, ","); s && r->n_roles_allowed < 16; s = strtok(NULL, ","))
            roles[r->n_roles_allowed++] = s;
        r->roles_allowed = roles;
    }
}

/* Headers are h.NAME=VALUE arguments. */
typedef struct headers {
    const char *names[32], *values[32];
    char buf[32][128];
    size_t n;
} headers_t;

static void headers_from(const op_t *op, headers_t *h)
{
    h->n = 0;
    for (int i = 1; i < op->ntok && h->n < 32; i++) {
        if (strncmp(op->tok[i], "h.", 2) != 0) continue;
        snprintf(h->buf[h->n], sizeof h->buf[0], "%s", op->tok[i] + 2);
        char *eq = strchr(h->buf[h->n], '=');
        if (!eq) continue;
        *eq = '\0';
        h->names[h->n] = h->buf[h->n];
        h->values[h->n] = eq + 1;
        h->n++;
    }
}

static void settle_from(const op_t *op, sl_settle_t *s, headers_t *h)
{
    memset(s, 0, sizeof *s);
    s->input_tokens = (int64_t)arg_num(op, "in", 0);
    s->output_tokens = (int64_t)arg_num(op, "out", 0);
    s->cache_creation_input_tokens = (int64_t)arg_num(op, "cc", 0);
    s->cache_read_input_tokens = (int64_t)arg_num(op, "cr", 0);
    s->cache_creation_1h_input_tokens = (int64_t)arg_num(op, "cc1h", 0);
    s->got_429 = arg_num(op, "got_429", 0) != 0;
    s->retry_after_s = arg_num(op, "retry_after", -1);
    s->agent_retry_after_s = arg_num(op, "agent_retry_after", 0);
    s->spend_cap = arg_num(op, "spend_cap", 0) != 0;
    s->failed = arg_num(op, "failed", 0) != 0;
    s->failure_signature = arg(op, "sig");
    headers_from(op, h);
    s->header_names = h->names;
    s->header_values = h->values;
    s->header_count = h->n;
}

static void decision_result(const sl_decision_t *d, ids_t *ids, result_t *r)
{
    put_str(r, "status", d->status == SL_GRANTED ? "granted"
                         : d->status == SL_QUEUED ? "queued"
                                                  : "rejected");
    put_num(r, "weight", d->weight);
    put_num(r, "replayed", d->replayed);
    if (d->status == SL_GRANTED) {
        put_num(r, "lease", ids_symbol(ids, d->lease));
        put_num(r, "ticket", ids_symbol(ids, d->ticket));
        put_num(r, "expires_at", d->expires_at - SCN_T0);
        put_num(r, "ttl", d->ttl_s);
        put_num(r, "charged_in", (double)d->charged_input_tokens);
        put_num(r, "charged_out", (double)d->charged_output_tokens);
        put_num(r, "charged_requests", (double)d->charged_requests);
        put_num(r, "penalty", d->cache_penalty);
        put_num(r, "waited", d->waited_s);
    } else if (d->status == SL_QUEUED) {
        put_num(r, "ticket", ids_symbol(ids, d->ticket));
        put_num(r, "eta", d->eta_s);
        put_num(r, "position", (double)d->position);
        put_str(r, "limited_by", d->limited_by);
    } else {
        put_str(r, "limited_by", d->limited_by);
        put_num(r, "retry_after", d->retry_after_s);
        put_num(r, "retry_at", d->retry_at - SCN_T0);
        put_str(r, "reason", d->reason);
    }
}

static const char *BUCKET_SHORT[] = {"input", "output", "requests", "tokens"};

static void pool_result(const sl_pool_info_t *p, result_t *r)
{
    put_num(r, "margin", p->margin);
    char name[40];
    for (int b = 0; b < SL_BUCKET_COUNT; b++) {
        if (!p->limit[b]) continue;
        snprintf(name, sizeof name, "level.%s", BUCKET_SHORT[b]);
        put_num(r, name, p->level[b]);
        snprintf(name, sizeof name, "capacity.%s", BUCKET_SHORT[b]);
        put_num(r, name, p->capacity[b]);
        snprintf(name, sizeof name, "limit.%s", BUCKET_SHORT[b]);
        put_num(r, name, (double)p->limit[b]);
    }
    put_num(r, "queue_depth", (double)p->queue_depth);
    put_num(r, "head_eta", p->head_eta_s);
    put_num(r, "leases_in_flight", (double)p->leases_in_flight);
    put_num(r, "alert_floor", p->alert_margin_at_floor);
    put_num(r, "alert_spend_cap", p->alert_spend_cap);
    put_num(r, "blocked_until", isfinite(p->blocked_until) ? p->blocked_until - SCN_T0 : -1);
    put_num(r, "granted_total", (double)p->granted_total);
    put_num(r, "queued_total", (double)p->queued_total);
    put_num(r, "rejected_total", (double)p->rejected_total);
    put_num(r, "upstream_429_total", (double)p->upstream_429_total);
}

static void agent_result(const sl_agent_info_t *a, result_t *r)
{
    put_str(r, "role", a->role);
    put_num(r, "weight", a->weight);
    put_num(r, "repeats", (double)a->repeats);
    put_num(r, "estimate_error", a->estimate_error);
    put_num(r, "alert", a->alert_estimate_error);
    put_num(r, "leases", (double)a->leases);
    put_num(r, "queued", (double)a->queued);
    put_num(r, "tokens_in", (double)a->tokens_in);
    put_num(r, "tokens_out", (double)a->tokens_out);
    put_num(r, "got_429", (double)a->got_429);
}

/* $name or @symbol -> id in this backend; a literal number is used as is. */
static uint64_t id_ref(ids_t *ids, const char *tok)
{
    uint64_t id = 0;
    if (tok && tok[0] == '$' && ids_var_get(ids, tok + 1, &id)) return id;
    if (tok && tok[0] == '@') {
        long s = strtol(tok + 1, NULL, 10);
        return s >= 1 && s <= ids->n ? ids->id[s - 1] : 999999;
    }
    return tok && tok[0] != '$' ? strtoull(tok, NULL, 10) : 999999;
}

/* ---- backend: the engine ---- */

void engine_op(engine_run_t *er, const scenario_t *sc, const op_t *op, result_t *r)
{
    sl_engine_t *e = er->e;
    double now = SCN_T0 + op->t_s;
    const char *name = op->tok[0];
    const char *a1 = op->ntok > 1 ? op->tok[1] : NULL;
    sl_decision_t d;
    (void)sc;
    if (strcmp(name, "role") == 0) {
        r->rc = sl_engine_set_role(e, a1, op->ntok > 2 ? strtod(op->tok[2], NULL) : 1);
    } else if (strcmp(name, "team") == 0) {
        r->rc = sl_engine_set_team_weight(e, a1, op->ntok > 2 ? strtod(op->tok[2], NULL) : 1);
    } else if (strcmp(name, "member") == 0) {
        r->rc = sl_engine_set_agent_team(e, a1, op->ntok > 2 ? op->tok[2] : NULL);
    } else if (strcmp(name, "priority") == 0) {
        r->rc = sl_engine_set_priority(e, a1, op->ntok > 2 ? strtod(op->tok[2], NULL) : 1);
    } else if (strcmp(name, "pool") == 0) {
        sl_pool_config_t cfg;
        pool_config_from(op, &cfg);
        r->rc = sl_engine_configure_pool(e, a1, &cfg, now);
    } else if (strcmp(name, "request") == 0) {
        sl_request_t req;
        request_from(op, &req);
        r->rc = sl_engine_request(e, &req, now, &d);
        if (!r->rc) decision_result(&d, &er->ids, r);
    } else if (strcmp(name, "ticket") == 0) {
        r->rc = sl_engine_ticket(e, id_ref(&er->ids, a1), now, &d);
        if (!r->rc) decision_result(&d, &er->ids, r);
    } else if (strcmp(name, "hold") == 0) {
        r->rc = sl_engine_ticket_hold(e, id_ref(&er->ids, a1),
                                      op->ntok > 2 && atoi(op->tok[2]) != 0, now);
    } else if (strcmp(name, "tcancel") == 0) {
        r->rc = sl_engine_ticket_cancel(e, id_ref(&er->ids, a1), now);
    } else if (strcmp(name, "settle") == 0) {
        sl_settle_t s;
        headers_t h;
        sl_settle_result_t res;
        settle_from(op, &s, &h);
        r->rc = sl_engine_settle(e, id_ref(&er->ids, a1), &s, now, &res);
        if (!r->rc) {
            put_num(r, "adjust_in", (double)res.adjust_input_tokens);
            put_num(r, "adjust_out", (double)res.adjust_output_tokens);
            put_num(r, "estimate_error", res.estimate_error);
            put_num(r, "counted", !res.not_counted);
        }
    } else if (strcmp(name, "cancel") == 0) {
        r->rc = sl_engine_cancel(e, id_ref(&er->ids, a1), now);
    } else if (strcmp(name, "extend") == 0) {
        double at = 0;
        r->rc = sl_engine_extend(e, id_ref(&er->ids, a1), arg_num(op, "ttl", 0), now, &at);
        if (!r->rc) put_num(r, "expires_at", at - SCN_T0);
    } else if (strcmp(name, "advance") == 0) {
        r->rc = sl_engine_advance(e, now);
    } else if (strcmp(name, "wakeup") == 0) {
        /* the next wake-up after advancing to now (-1: none) */
        r->rc = sl_engine_advance(e, now);
        double at = sl_engine_next_wakeup(e);
        if (!r->rc) put_num(r, "wake_at", isfinite(at) ? at - SCN_T0 : -1);
    } else if (strcmp(name, "resync") == 0) {
        headers_t h;
        headers_from(op, &h);
        int changed = 0;
        /* `resync POOL lease=$l [sent=S] h...`: the headers of that lease's call, sent S
         * seconds after its grant (absent: not known) */
        r->rc = arg(op, "lease")
                    ? sl_engine_resync_lease_sent(e, id_ref(&er->ids, arg(op, "lease")),
                                                  arg_num(op, "sent", -1), h.names, h.values,
                                                  h.n, now, &changed)
                    : sl_engine_resync(e, a1, h.names, h.values, h.n, now, &changed);
        if (!r->rc) put_num(r, "changed", changed);
    } else if (strcmp(name, "task") == 0) {
        char deps_buf[512] = "";
        const char *deps[32];
        size_t nd = 0;
        if (arg(op, "deps")) snprintf(deps_buf, sizeof deps_buf, "%s", arg(op, "deps"));
        for (char *s = strtok(deps_buf, ","); s && nd < 32; s = strtok(NULL, ",")) deps[nd++] = s;
        const char *st = arg(op, "state") ? arg(op, "state") : "waiting";
        sl_task_state_t state = strcmp(st, "running") == 0 ? SL_TASK_RUNNING
                                : strcmp(st, "done") == 0  ? SL_TASK_DONE
                                                           : SL_TASK_WAITING;
        r->rc = sl_engine_task_put(e, a1, arg(op, "role"), deps, nd, state);
    } else if (strcmp(name, "taskdel") == 0) {
        r->rc = sl_engine_task_delete(e, a1);
    } else if (strcmp(name, "state") == 0) {
        sl_pool_info_t info;
        r->rc = sl_engine_advance(e, now);
        if (!r->rc) r->rc = sl_engine_pool_info(e, a1 ? a1 : "default", &info);
        if (!r->rc) pool_result(&info, r);
    } else if (strcmp(name, "caps") == 0) {
        sl_caps_t caps;
        caps_from(op, &caps);
        r->rc = sl_engine_set_caps(e, a1, arg_num(op, "team", 0) != 0, &caps);
    } else if (strcmp(name, "forget_agent") == 0) {
        r->rc = sl_engine_agent_forget(e, a1, now);
    } else if (strcmp(name, "agent") == 0) {
        sl_agent_info_t info;
        r->rc = sl_engine_agent_info(e, a1, &info);
        if (!r->rc) agent_result(&info, r);
    } else {
        r->rc = SL__RPROTO;
    }
    if (r->rc) put_str(r, "error", sl_strerror(r->rc));
}

/* ---- backend: the Redis library ---- */

/* Follows a Cluster redirection: reconnects to the node that serves the slot. */
static bool follow_moved(redis_run_t *rr, redisReply *rep)
{
    if (!rep || rep->type != REDIS_REPLY_ERROR || strncmp(rep->str, "MOVED ", 6) != 0) return false;
    char host[128];
    int port;
    if (sscanf(rep->str, "MOVED %*d %127[^:]:%d", host, &port) != 2) return false;
    redisFree(rr->c);
    rr->c = redisConnect(host, port);
    return rr->c && !rr->c->err;
}

static redisReply *argv_cmd(redis_run_t *rr, int argc, const char **argv, const size_t *len)
{
    for (int hop = 0; hop < 4; hop++) {
        redisReply *rep = redisCommandArgv(rr->c, argc, argv, len);
        if (!follow_moved(rr, rep)) return rep;
        freeReplyObject(rep);
    }
    return NULL;
}

static redisReply *rcmd(redis_run_t *rr, sl__rcmd_t *c)
{
    redisReply *rep = argv_cmd(rr, c->argc, (const char **)c->argv, c->len);
    sl__rcmd_free(c);
    return rep;
}

/* FCALL fn 1 key arg: one key, one argument. */
static redisReply *fcall1(redis_run_t *rr, const char *fn, const char *key, const char *arg1)
{
    const char *argv[] = {"FCALL", fn, "1", key, arg1};
    return argv_cmd(rr, 5, argv, NULL);
}

static const char *pool_of_id(redis_run_t *rr, uint64_t id)
{
    int no = sl__rid_pool(id);
    for (int i = 0; i < rr->n_pools; i++)
        if (rr->pool_no[i] == no) return rr->pools[i];
    return "default";
}

static int register_pool(redis_run_t *rr, const char *name)
{
    for (int i = 0; i < rr->n_pools; i++)
        if (strcmp(rr->pools[i], name) == 0) return rr->pool_no[i];
    redisReply *rep = fcall1(rr, "sluice_register", "sluice:{registry}:pools", name);
    int no = rep && rep->type == REDIS_REPLY_STRING ? atoi(rep->str) : 0;
    if (rep) freeReplyObject(rep);
    if (rr->n_pools < SCN_MAX_POOLS) {
        snprintf(rr->pools[rr->n_pools], sizeof rr->pools[0], "%s", name);
        rr->wake_s[rr->n_pools] = INFINITY;
        rr->pool_no[rr->n_pools++] = no;
    }
    return no;
}

/* Runs a library call and decodes it into `r`; returns the decoded reply owner. */
/* The index of pool `name` among the registered ones, or -1. */
static int pool_index(const redis_run_t *rr, const char *name, size_t len)
{
    for (int i = 0; i < rr->n_pools; i++)
        if (strlen(rr->pools[i]) == len && memcmp(rr->pools[i], name, len) == 0) return i;
    return -1;
}

/* Runs a library call and decodes it into `r`; returns the decoded reply owner. The
 * pool's next wake-up, which every reply carries, is noted for redis_wake. */
static redisReply *lib_call(redis_run_t *rr, sl__rcmd_t *c, sl__rreply_t *rep, result_t *r)
{
    int pool = -1;
    if (c->argc > 3 && strncmp(c->argv[3], "sluice:{", 8) == 0 && strchr(c->argv[3], '}'))
        pool = pool_index(rr, c->argv[3] + 8, (size_t)(strchr(c->argv[3], '}') - c->argv[3] - 8));
    redisReply *raw = rcmd(rr, c);
    r->rc = sl__rreply_parse(raw, rep);
    if (r->rc == SL__RPROTO) fprintf(stderr, "  redis: %s\n", rep->msg);
    /* as the backend (events.c): an error reply names no wake-up */
    if (pool >= 0 && r->rc == SL_OK) rr->wake_s[pool] = rep->wake_s;
    return raw;
}

int redis_wake(redis_run_t *rr, double now_s)
{
    for (int n = 0; n < SCN_MAX_WAKEUPS; n++) {
        int due = -1;
        for (int i = 0; i < rr->n_pools; i++)
            if (rr->wake_s[i] <= now_s && (due < 0 || rr->wake_s[i] < rr->wake_s[due])) due = i;
        if (due < 0) return n;
        sl__rcmd_t c;
        sl__rreply_t rep;
        result_t r;
        double at = rr->wake_s[due];
        rr->wake_s[due] = INFINITY; /* a reply that names none leaves it so */
        sl__rcmd_begin(&c, "sluice_advance", rr->pools[due], at, NULL);
        redisReply *x = lib_call(rr, &c, &rep, &r);
        if (x) freeReplyObject(x);
    }
    return -1;
}

int engine_wake(engine_run_t *er, double now_s)
{
    for (int n = 0; n < SCN_MAX_WAKEUPS; n++) {
        double at = sl_engine_next_wakeup(er->e);
        if (!(at <= now_s)) return n;
        sl_engine_advance(er->e, at);
    }
    return -1;
}

void redis_op(redis_run_t *rr, const scenario_t *sc, const op_t *op, result_t *r)
{
    double now = SCN_T0 + op->t_s;
    const char *name = op->tok[0];
    const char *a1 = op->ntok > 1 ? op->tok[1] : NULL;
    sl__rcmd_t c;
    sl__rreply_t rep;
    redisReply *raw = NULL;
    char err[256];
    sl_decision_t d;
    if (strcmp(name, "role") == 0 || strcmp(name, "priority") == 0 ||
        strcmp(name, "member") == 0) {
        r->rc = SL_OK; /* applied with every pool's configuration */
    } else if (strcmp(name, "caps") == 0) {
        /* Applied with every pool's configuration; validated with the engine's rules. */
        sl_caps_t caps;
        caps_from(op, &caps);
        sl_engine_t *scratch = sl_engine_new(NULL);
        r->rc = sl_engine_set_caps(scratch, a1, arg_num(op, "team", 0) != 0, &caps);
        sl_engine_free(scratch);
    } else if (strcmp(name, "team") == 0) {
        /* The daemon validates weights with the engine's rules before Redis. */
        sl_engine_t *scratch = sl_engine_new(NULL);
        r->rc = sl_engine_set_team_weight(scratch, a1, op->ntok > 2 ? strtod(op->tok[2], NULL) : 1);
        sl_engine_free(scratch);
    } else if (strcmp(name, "pool") == 0) {
        sl_pool_config_t cfg;
        pool_config_from(op, &cfg);
        /* The daemon validates configurations with the engine's rules before Redis. */
        sl_engine_t *scratch = sl_engine_new(NULL);
        r->rc = sl_engine_configure_pool(scratch, a1, &cfg, now);
        sl_engine_free(scratch);
        if (!r->rc) {
            int no = register_pool(rr, a1);
            sl__rcmd_configure(&c, a1, &cfg, &sc->ecfg, sc->roles, sc->prios, no, now, NULL);
            sl__rcmd_str(&c, SL_FA(teams), sc->teams);
            sl__rcmd_str(&c, SL_FA(members), sc->members);
            sl__rcmd_str(&c, SL_FA(caps), sc->caps);
            raw = lib_call(rr, &c, &rep, r);
        }
    } else if (strcmp(name, "request") == 0) {
        sl_request_t req;
        request_from(op, &req);
        /* As the backend: one node reads the graph in the request's call; a Cluster
         * (several nodes) keeps it in another slot, so it is looked up first. */
        bool cluster = strchr(rr->host, ',') != NULL;
        sl__rgraph_t graph = SL__RGRAPH_NONE;
        if (req.task && cluster) {
            redisReply *g = fcall1(rr, "sluice_task_role", SL__RGRAPH_KEY, req.task);
            graph = sl__rgraph_parse(g);
            if (g) freeReplyObject(g);
        }
        sl__rcmd_request(&c, &req, !cluster, graph, now, NULL);
        raw = lib_call(rr, &c, &rep, r);
        if (!r->rc) {
            sl__rreply_decision(&rep, &d);
            decision_result(&d, &rr->ids, r);
        }
    } else if (strcmp(name, "ticket") == 0 || strcmp(name, "hold") == 0 ||
               strcmp(name, "tcancel") == 0 || strcmp(name, "cancel") == 0 ||
               strcmp(name, "extend") == 0) {
        uint64_t id = id_ref(&rr->ids, a1);
        bool is_ticket = name[0] == 't' || name[0] == 'h';
        const char *fn = strcmp(name, "ticket") == 0    ? "sluice_ticket"
                         : strcmp(name, "hold") == 0    ? "sluice_ticket_hold"
                         : strcmp(name, "tcancel") == 0 ? "sluice_ticket_cancel"
                         : strcmp(name, "cancel") == 0  ? "sluice_cancel"
                                                        : "sluice_extend";
        sl__rcmd_begin(&c, fn, pool_of_id(rr, id), now, NULL);
        sl__rcmd_u64(&c, is_ticket ? SL_FA(ticket) : SL_FA(lease), id);
        if (strcmp(name, "hold") == 0) sl__rcmd_num(&c, SL_FA(held), op->ntok > 2 ? atoi(op->tok[2]) : 0);
        if (strcmp(name, "extend") == 0) sl__rcmd_num(&c, SL_FA(ttl), arg_num(op, "ttl", 0));
        raw = lib_call(rr, &c, &rep, r);
        if (!r->rc && strcmp(name, "ticket") == 0) {
            sl__rreply_decision(&rep, &d);
            decision_result(&d, &rr->ids, r);
        }
        if (!r->rc && strcmp(name, "extend") == 0)
            put_num(r, "expires_at", sl__rreply_num(&rep, SL_FR(expires_at), 0) - SCN_T0);
    } else if (strcmp(name, "settle") == 0) {
        sl_settle_t s;
        headers_t h;
        settle_from(op, &s, &h);
        uint64_t id = id_ref(&rr->ids, a1);
        r->rc = sl__rcmd_settle(&c, pool_of_id(rr, id), id, &s, now, NULL, err, sizeof err);
        if (!r->rc) raw = lib_call(rr, &c, &rep, r);
        if (!r->rc) {
            put_num(r, "adjust_in", sl__rreply_num(&rep, SL_FR(adjust_input_tokens), 0));
            put_num(r, "adjust_out", sl__rreply_num(&rep, SL_FR(adjust_output_tokens), 0));
            put_num(r, "estimate_error", sl__rreply_num(&rep, SL_FR(estimate_error), 0));
            put_num(r, "counted", sl__rreply_num(&rep, SL_FR(counted), 1));
        }
    } else if (strcmp(name, "advance") == 0) {
        r->rc = SL_OK;
        for (int i = 0; i < rr->n_pools && !r->rc; i++) {
            sl__rcmd_begin(&c, "sluice_advance", rr->pools[i], now, NULL);
            redisReply *x = lib_call(rr, &c, &rep, r);
            if (x) freeReplyObject(x);
        }
    } else if (strcmp(name, "wakeup") == 0) {
        sl__rcmd_begin(&c, "sluice_advance", a1 ? a1 : "default", now, NULL);
        raw = lib_call(rr, &c, &rep, r);
        if (!r->rc) put_num(r, "wake_at", isfinite(rep.wake_s) ? rep.wake_s - SCN_T0 : -1);
    } else if (strcmp(name, "resync") == 0) {
        headers_t h;
        headers_from(op, &h);
        uint64_t lease = arg(op, "lease") ? id_ref(&rr->ids, arg(op, "lease")) : 0;
        r->rc = sl__rcmd_resync(&c, a1, lease, arg_num(op, "sent", -1), h.names, h.values, h.n,
                                now, NULL, err, sizeof err);
        if (!r->rc) raw = lib_call(rr, &c, &rep, r);
        if (!r->rc) put_num(r, "changed", sl__rreply_num(&rep, SL_FR(changed), 0));
    } else if (strcmp(name, "task") == 0) {
        const char *argv[40];
        int argc = 0;
        char deps_buf[512] = "";
        argv[argc++] = "FCALL";
        argv[argc++] = "sluice_task_put";
        argv[argc++] = "1";
        argv[argc++] = "sluice:{graph}:tasks";
        argv[argc++] = a1;
        argv[argc++] = arg(op, "role") ? arg(op, "role") : "worker";
        argv[argc++] = arg(op, "state") ? arg(op, "state") : "waiting";
        if (arg(op, "deps")) snprintf(deps_buf, sizeof deps_buf, "%s", arg(op, "deps"));
        for (char *s = strtok(deps_buf, ","); s && argc < 40; s = strtok(NULL, ",")) argv[argc++] = s;
        redisReply *x = argv_cmd(rr, argc, argv, NULL);
        r->rc = x && x->type != REDIS_REPLY_ERROR ? SL_OK : SL_EINVAL;
        if (x) freeReplyObject(x);
    } else if (strcmp(name, "taskdel") == 0) {
        redisReply *x = fcall1(rr, "sluice_task_delete", "sluice:{graph}:tasks", a1);
        r->rc = x && x->type == REDIS_REPLY_INTEGER && x->integer == 1 ? SL_OK : SL_ENOTFOUND;
        if (x) freeReplyObject(x);
    } else if (strcmp(name, "state") == 0) {
        sl__rcmd_begin(&c, "sluice_pool", a1 ? a1 : "default", now, NULL);
        raw = lib_call(rr, &c, &rep, r);
        if (!r->rc) {
            sl_pool_info_t info;
            sl__rreply_pool_info(&rep, &info);
            pool_result(&info, r);
        }
    } else if (strcmp(name, "forget_agent") == 0) {
        /* Per pool in Redis: forgotten where it holds nothing; kept anywhere is "kept". */
        int forgotten = 0, kept = 0;
        for (int i = 0; i < rr->n_pools; i++) {
            sl__rcmd_begin(&c, "sluice_agent_forget", rr->pools[i], now, NULL);
            sl__rcmd_str(&c, SL_FA(agent), a1);
            redisReply *x = lib_call(rr, &c, &rep, r);
            double f = r->rc == SL_OK ? sl__rreply_num(&rep, SL_FR(forgotten), -1) : -1;
            if (x) freeReplyObject(x);
            forgotten += f > 0;
            kept += f == 0;
        }
        r->rc = kept ? SL_EEXIST : forgotten ? SL_OK : SL_ENOTFOUND;
    } else if (strcmp(name, "agent") == 0) {
        /* Agents live per pool in Redis; the scenarios ask about agents of one pool. */
        r->rc = SL_ENOTFOUND;
        for (int i = 0; i < rr->n_pools && r->rc == SL_ENOTFOUND; i++) {
            sl__rcmd_begin(&c, "sluice_agents", rr->pools[i], now, NULL);
            redisReply *x = lib_call(rr, &c, &rep, r);
            r->rc = SL_ENOTFOUND;
            for (size_t j = 0; rep.fields && j + 1 < rep.fields->elements; j += 2) {
                char buf[1024];
                snprintf(buf, sizeof buf, "%s", rep.fields->element[j + 1]->str);
                char *part[12];
                int n = 0;
                for (char *p = buf; n < 12;) {
                    part[n++] = p;
                    char *sep = strchr(p, '\x1f');
                    if (!sep) break;
                    *sep = '\0';
                    p = sep + 1;
                }
                if (n < 11 || strcmp(part[0], a1) != 0) continue;
                sl_agent_info_t info = {.name = part[0], .role = part[1],
                                        .weight = strtod(part[2], NULL),
                                        .repeats = (int64_t)strtod(part[3], NULL),
                                        .estimate_error = strtod(part[4], NULL),
                                        .alert_estimate_error = atoi(part[5]) != 0,
                                        .leases = (int64_t)strtod(part[6], NULL),
                                        .queued = (int64_t)strtod(part[7], NULL),
                                        .tokens_in = (int64_t)strtod(part[8], NULL),
                                        .tokens_out = (int64_t)strtod(part[9], NULL),
                                        .got_429 = (int64_t)strtod(part[10], NULL)};
                r->rc = SL_OK;
                agent_result(&info, r);
            }
            if (x) freeReplyObject(x);
        }
    } else {
        r->rc = SL__RPROTO;
    }
    if (raw) freeReplyObject(raw);
    if (r->rc) put_str(r, "error", r->rc == SL__RPROTO ? "protocol" : sl_strerror(r->rc));
}

/* Empties every node (--redis may list several, for a Cluster) and loads the library. */
int redis_reset(redis_run_t *rr)
{
    char nodes[512];
    snprintf(nodes, sizeof nodes, "%s", rr->host);
    for (char *node = strtok(nodes, ","); node; node = strtok(NULL, ",")) {
        char *colon = strrchr(node, ':');
        int port = colon ? atoi(colon + 1) : 6379;
        if (colon) *colon = '\0';
        if (rr->c) redisFree(rr->c);
        rr->c = redisConnect(node, port);
        if (!rr->c || rr->c->err) {
            fprintf(stderr, "cannot connect to Redis at %s:%d\n", node, port);
            return -1;
        }
        redisReply *x = redisCommand(rr->c, "FLUSHALL");
        if (x) freeReplyObject(x);
        x = redisCommand(rr->c, "FUNCTION LOAD REPLACE %s", sl__redis_lua_source);
        if (!x || x->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "FUNCTION LOAD failed: %s\n", x ? x->str : rr->c->errstr);
            if (x) freeReplyObject(x);
            return -1;
        }
        freeReplyObject(x);
    }
    ids_reset(&rr->ids);
    rr->n_pools = 0;
    return 0;
}

void redis_close(redis_run_t *rr)
{
    if (rr->c) redisFree(rr->c);
    rr->c = NULL;
    ids_free(&rr->ids);
}
