/* failopen.c - the redis backend while Redis is down: the local engine, replays, charges.
 *
 * Design:
 *  - Down, `fail: open`: requests are decided by an in-process engine configured with
 *    1/replicas of each limit (replicas = the last heartbeat's count); its ids carry
 *    pool number SL__RPOOL_LOCAL so they are settled locally whatever happens later.
 *    Settles, cancels and extends of Redis leases are answered at once and kept for
 *    replay (a second settle is `already_settled`, so a replay never charges twice).
 *    Requests sent when the connection broke may have been decided by Redis: each
 *    carries a request_id (the client's, or an internal one), and on recovery those
 *    are forgotten, refunding whatever they created. `fail: closed` answers
 *    SL_REDIS_EUNAVAILABLE instead. Both raise the alert `backend_unavailable`.
 *  - The provider's rate-limit headers of a local lease's call describe the whole
 *    provider, which every replica's share spends: they are read as the share's (each
 *    limit and remaining count over the replicas), and the share never climbs.
 *  - On recovery the local share's spending since the last charge is charged to
 *    Redis under one key per charge, resent until acknowledged (sl__rb_send_charges);
 *    Redis holds the outage's refill until then (sluice.lua, CALL.hold_gap).
 */
#include "redis_internal.h"
#include "../../common/grow.h"

/* ---- fail-open: the local engine ---- */

int64_t sl__rb_share(int64_t limit, int replicas)
{
    if (limit <= 0) return limit;
    int64_t s = limit / replicas;
    return s > 0 ? s : 1;
}

/* The margin of the local share: the pool's configured start, or lower when Redis's
 * margin was seen lower (429s cut it). */
static double local_margin(const rb_t *rb, const char *pool, const sl_pool_config_t *cfg)
{
    for (int i = 0; i < rb->n_pools; i++)
        if (strcmp(rb->pools[i].name, pool) == 0 && rb->pools[i].margin > 0 &&
            rb->pools[i].margin < cfg->margin_start)
            return rb->pools[i].margin > cfg->margin_floor ? rb->pools[i].margin : cfg->margin_floor;
    return cfg->margin_start;
}

void sl__rb_local_lift(rb_t *rb, const sl_backend_settings_t *next)
{
    if (!rb->local || !rb->have_settings) return;
    const sl_backend_settings_t *s = &rb->settings;
    for (size_t i = 0; i < s->n_caps; i++) {
        if (!sl_backend_settings_names_caps(next, s->caps[i].holder, s->caps[i].team))
            sl_engine_set_caps(rb->local, s->caps[i].holder, s->caps[i].team, NULL);
        if (s->caps[i].team) sl_engine_set_team_weight(rb->local, s->caps[i].holder, 1.0);
    }
    for (size_t i = 0; i < s->n_members; i++)
        sl_engine_set_agent_team(rb->local, s->members[i].agent, NULL);
}

/* (Re)configures the local engine with 1/replicas of every limit. `cold`: every pool's
 * buckets are emptied too and refill from now - what the replicas spent just before
 * Redis went away is not known here, and a full share on top of it would overbook. */
void sl__rb_local_configure(rb_t *rb, bool cold)
{
    if (!rb->have_settings) return;
    int n = rb->replicas > 0 ? rb->replicas : 1;
    if (!rb->local) {
        rb->local = sl_engine_new(&rb->ecfg);
        if (!rb->local) return;
        sl_engine_set_event_cb(rb->local, sl__rb_on_local_event, rb);
        cold = true;
    } else if (rb->local_replicas == n && !cold) {
        return;
    }
    const sl_backend_settings_t *s = &rb->settings;
    for (size_t i = 0; i < s->n_roles; i++)
        sl_engine_set_role(rb->local, s->roles[i].name, s->roles[i].value);
    for (size_t i = 0; i < s->n_priorities; i++)
        sl_engine_set_priority(rb->local, s->priorities[i].name, s->priorities[i].value);
    for (size_t i = 0; i < s->n_caps; i++)
        if (s->caps[i].team)
            sl_engine_set_team_weight(rb->local, s->caps[i].holder,
                                      s->caps[i].weight != 0 ? s->caps[i].weight : 1.0);
    for (size_t i = 0; i < s->n_members; i++)
        sl_engine_set_agent_team(rb->local, s->members[i].agent, s->members[i].team);
    /* Caps too, at 1/replicas of each (a share cap already follows the shared limits). */
    for (size_t i = 0; i < s->n_caps; i++) {
        sl_caps_t c = s->caps[i].caps;
        c.max_rpm = sl__rb_share(c.max_rpm, n);
        c.max_concurrent = sl__rb_share(c.max_concurrent, n);
        c.budget_usd_per_hour /= n;
        c.budget_usd_per_day /= n;
        sl_engine_set_caps(rb->local, s->caps[i].holder, s->caps[i].team, &c);
    }
    double now = sl__rb_now(&rb->base);
    for (size_t i = 0; i < s->n_pools; i++) {
        sl_pool_config_t cfg = s->pools[i].config;
        cfg.margin_start = local_margin(rb, s->pools[i].name, &cfg);
        cfg.input_tpm = sl__rb_share(cfg.input_tpm, n);
        cfg.output_tpm = sl__rb_share(cfg.output_tpm, n);
        cfg.rpm = sl__rb_share(cfg.rpm, n);
        cfg.tokens_tpm = sl__rb_share(cfg.tokens_tpm, n);
        cfg.concurrency = sl__rb_share(cfg.concurrency, n);
        /* The share never climbs above its start: a header vouches for the provider's
         * room, which the other replicas' shares spend too. */
        cfg.margin_max = cfg.margin_start;
        sl_engine_configure_pool(rb->local, s->pools[i].name, &cfg, now);
        /* No cold-start window: headers seen during an outage only lower the share. */
        if (cold) sl_engine_pool_cold_start(rb->local, s->pools[i].name, 0, now);
    }
    sl_engine_wake_parked(rb->local); /* a cap raised or lifted frees slots */
    rb->local_replicas = n;
}

/* The headers of a fail-open lease's call, scaled to this replica's share: a limit or a
 * remaining count is the provider's whole, of which the share is 1/replicas (as its
 * configured limits are); the local engine then never adopts the whole limit as its
 * own, nor a room the other replicas' shares spend too. Resets pass as they are. */
const char **sl__rb_share_headers(const rb_t *rb, const char *const *names,
                                  const char *const *values, size_t count)
{
    enum { VALUE_CHARS = 24 };
    int n = rb->local_replicas > 0 ? rb->local_replicas : 1;
    /* One block: the pointers, then each scaled value's text. */
    const char **scaled = malloc(count * (sizeof *scaled + VALUE_CHARS) + 1);
    if (!scaled) return NULL;
    char *text = (char *)(scaled + count);
    for (size_t i = 0; i < count; i++) {
        sl_header_kind_t h = sl_header_classify(names[i]);
        int64_t v;
        scaled[i] = values[i];
        if (h.known && h.field != SL_HEADER_RESET && sl_header_parse_count(values[i], &v)) {
            snprintf(text + i * VALUE_CHARS, VALUE_CHARS, "%lld",
                     (long long)(h.field == SL_HEADER_LIMIT ? sl__rb_share(v, n) : v / n));
            scaled[i] = text + i * VALUE_CHARS;
        }
    }
    return scaled;
}

/* Local ids: (local_no << 40) | (local_base + engine id). local_no is this replica's own
 * (4096..6143 from the registry; 6144..8191 a hash of its id when Redis was away at its
 * start), so no two replicas issue one id; local_base is the milliseconds since
 * 2025 when the process started, so a restarted replica issues ids above its earlier
 * ones (unless it issued more than 1,000 local ids per second on average). */
bool sl__rb_is_local(uint64_t id)
{
    return sl__rid_pool(id) >= SL__RPOOL_LOCAL_MIN;
}

bool sl__rb_is_mine(const rb_t *rb, uint64_t id)
{
    return sl__rid_pool(id) == rb->local_no && rb->local;
}

static uint64_t local_id(const rb_t *rb, uint64_t sl__rb_engine_id)
{
    return sl__rb_engine_id ? ((uint64_t)rb->local_no << SL__RID_SHIFT) | (rb->local_base + sl__rb_engine_id) : 0;
}

uint64_t sl__rb_engine_id(const rb_t *rb, uint64_t id)
{
    uint64_t n = id & (((uint64_t)1 << SL__RID_SHIFT) - 1);
    return n > rb->local_base ? n - rb->local_base : 0;
}

void sl__rb_local_decision_ids(const rb_t *rb, sl_decision_t *d)
{
    d->lease = local_id(rb, d->lease);
    d->ticket = local_id(rb, d->ticket);
}

/* Local engine events carry engine ids; rewrite them to wire ids before delivery. */
void sl__rb_fix_local_events(rb_t *rb, size_t from)
{
    for (size_t i = from; i < rb->n_events; i++) {
        rb->events[i].ev.lease = local_id(rb, rb->events[i].ev.lease);
        rb->events[i].ev.ticket = local_id(rb, rb->events[i].ev.ticket);
    }
}

void sl__rb_local_advance(rb_t *rb)
{
    if (!rb->local) return;
    size_t from = rb->n_events;
    sl_engine_advance(rb->local, sl__rb_now(&rb->base));
    sl__rb_fix_local_events(rb, from);
}

const char *sl__rb_unavailable_msg(rb_t *rb)
{
    static char msg[320];
    snprintf(msg, sizeof msg, "backend_unavailable: Redis at %s:%d does not answer", rb->opt.host,
             rb->opt.port);
    return msg;
}

void sl__rb_defer_cmd(rb_t *rb, sl__rcmd_t *cmd)
{
    if (rb->n_deferred == rb->cap_deferred) {
        size_t cap = rb->cap_deferred ? rb->cap_deferred * 2 : 64;
        deferred_t *p = cap <= MAX_DEFERRED ? realloc(rb->deferred, cap * sizeof *p) : NULL;
        if (!p) {
            sl__rcmd_free(cmd); /* the lease will be reaped without refund: conservative */
            return;
        }
        rb->deferred = p;
        rb->cap_deferred = cap;
    }
    rb->deferred[rb->n_deferred++].cmd = *cmd;
    cmd->argc = 0;
}

void sl__rb_add_doubt(rb_t *rb, const char *pool, const char *agent, const char *rid)
{
    doubt_t *p = sl_grow(rb->doubts, rb->n_doubts, &rb->cap_doubts, sizeof *p, 64);
    if (!p) return;
    rb->doubts = p;
    size_t na = strlen(agent), nr = strlen(rid);
    char *key = malloc(na + nr + 2);
    if (!key) return;
    memcpy(key, agent, na);
    key[na] = '\x1f';
    memcpy(key + na + 1, rid, nr + 1);
    rb->doubts[rb->n_doubts].pool = sl__rb_dup_or_null(pool);
    rb->doubts[rb->n_doubts].key = key;
    rb->n_doubts++;
}

/* ---- fail-open spending charged to Redis ---- */

static void on_charged(rb_t *rb, rcall_t *c, redisReply *r)
{
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (c->idx >= rb->n_pools) return;
    rpool_t *p = &rb->pools[c->idx];
    p->charge_in_flight = false;
    if (rc == SL_OK) {
        memset(p->charge, 0, sizeof p->charge);
        p->charge_seq = 0;
        sl__rb_queue_reply_events(rb, &rep);
        sl__rb_note_state(rb, p, &rep);
    } else if (rc != SL__RPROTO) {
        /* A charge the library refuses is dropped, not retried forever. */
        sl__backend_log(SL_BACKEND_LOG_WARN, "redis: charging pool %s for its fail-open grants failed: %s",
                p->name, rep.msg);
        memset(p->charge, 0, sizeof p->charge);
        p->charge_seq = 0;
    }
}

/* Sends what each pool's local share spent (or refunded) since the last charge. A
 * pending charge keeps its key until acknowledged: the library applies a key once. */
void sl__rb_send_charges(rb_t *rb)
{
    for (int i = 0; i < rb->n_pools && rb->up; i++) {
        rpool_t *p = &rb->pools[i];
        if (p->charge_in_flight) continue;
        if (!p->charge_seq) {
            bool any = false;
            for (int b = 0; b < SL_BUCKET_COUNT; b++) any |= p->spent[b] != 0;
            if (!any) continue;
            memcpy(p->charge, p->spent, sizeof p->charge);
            memset(p->spent, 0, sizeof p->spent);
            p->charge_seq = ++rb->charge_seq;
        }
        char key[128];
        snprintf(key, sizeof key, "~charge:%.63s:%llu:%llu", rb->opt.replica_id,
                 (unsigned long long)rb->local_base, (unsigned long long)p->charge_seq);
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_charge", p->name, NAN, rb->opt.replica_id);
        sl__rcmd_str(&cmd, SL_FA(key), key);
        char name[16];
        for (int b = 0; b < SL_BUCKET_COUNT; b++) {
            snprintf(name, sizeof name, "%s%d", SL_FA(c), b);
            sl__rcmd_num(&cmd, name, p->charge[b]);
        }
        sl__rb_add_history(&cmd, p);
        p->charge_in_flight = true;
        sl__rb_send_cmd(rb, &cmd, on_charged, NULL, i, true);
    }
}
