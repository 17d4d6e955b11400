/* manage.c - the redis backend's configure, task graph, pool and agent listings, and ping. */
#include "redis_internal.h"
#include "../../common/grow.h"

/* ---- configure ---- */

static int copy_settings(rb_t *rb, const sl_backend_settings_t *s)
{
    sl_backend_settings_t c = {0};
    c.pools = calloc(s->n_pools ? s->n_pools : 1, sizeof *c.pools);
    c.roles = calloc(s->n_roles ? s->n_roles : 1, sizeof *c.roles);
    c.priorities = calloc(s->n_priorities ? s->n_priorities : 1, sizeof *c.priorities);
    c.caps = calloc(s->n_caps ? s->n_caps : 1, sizeof *c.caps);
    c.members = calloc(s->n_members ? s->n_members : 1, sizeof *c.members);
    if (!c.pools || !c.roles || !c.priorities || !c.caps || !c.members) goto nomem;
    for (size_t i = 0; i < s->n_pools; i++, c.n_pools++) {
        c.pools[i].config = s->pools[i].config;
        if (!(c.pools[i].name = sl__rb_dup_or_null(s->pools[i].name))) goto nomem;
    }
    for (size_t i = 0; i < s->n_roles; i++, c.n_roles++) {
        c.roles[i].value = s->roles[i].value;
        if (!(c.roles[i].name = sl__rb_dup_or_null(s->roles[i].name))) goto nomem;
    }
    for (size_t i = 0; i < s->n_priorities; i++, c.n_priorities++) {
        c.priorities[i].value = s->priorities[i].value;
        if (!(c.priorities[i].name = sl__rb_dup_or_null(s->priorities[i].name))) goto nomem;
    }
    /* Caps, teams' weights and members go to the library with every configure. */
    for (size_t i = 0; i < s->n_caps; i++, c.n_caps++) {
        c.caps[i] = s->caps[i];
        if (!(c.caps[i].holder = sl__rb_dup_or_null(s->caps[i].holder))) goto nomem;
    }
    for (size_t i = 0; i < s->n_members; i++, c.n_members++) {
        if (!(c.members[i].agent = sl__rb_dup_or_null(s->members[i].agent)) ||
            !(c.members[i].team = sl__rb_dup_or_null(s->members[i].team)))
            goto nomem;
    }
    sl__rb_local_lift(rb, s);
    sl_backend_settings_clear(&rb->settings);
    rb->settings = c;
    rb->have_settings = true;
    return SL_OK;
nomem:
    sl_backend_settings_clear(&c);
    return SL_ENOMEM;
}

/* "name=value,..." of the engine's predefined classes overridden by the settings. */
static void class_list(char *out, size_t len, const char *const *names, const double *values,
                       size_t n_builtin, const sl_named_factor_t *extra, size_t n_extra)
{
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n_builtin; i++) {
        double v = values[i];
        for (size_t j = 0; j < n_extra; j++)
            if (strcmp(extra[j].name, names[i]) == 0) v = extra[j].value;
        off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%s=%.17g", off ? "," : "",
                                names[i], v);
    }
    for (size_t j = 0; j < n_extra; j++) {
        bool builtin = false;
        for (size_t i = 0; i < n_builtin; i++) builtin |= strcmp(extra[j].name, names[i]) == 0;
        if (!builtin)
            off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%s=%.17g",
                                    off ? "," : "", extra[j].name, extra[j].value);
    }
}

/* Appends "k=v,..." to a growing string; false when out of memory. */
static bool list_add(char **buf, size_t *len, size_t *cap, const char *k, const char *v)
{
    size_t need = strlen(k) + strlen(v) + 3;
    if (*len + need > *cap) {
        size_t ncap = (*cap + need) * 2;
        char *grown = realloc(*buf, ncap);
        if (!grown) return false;
        *buf = grown;
        *cap = ncap;
    }
    *len += (size_t)snprintf(*buf + *len, *cap - *len, "%s%s=%s", *len ? "," : "", k, v);
    return true;
}

void sl__rb_add_teams(const rb_t *rb, sl__rcmd_t *cmd)
{
    const sl_backend_settings_t *s = &rb->settings;
    char *teams = calloc(1, 1), *members = calloc(1, 1), *caps = calloc(1, 1);
    size_t tl = 0, tc = 1, ml = 0, mc = 1, cl = 0, ccap = 1;
    bool ok = teams && members && caps;
    for (size_t i = 0; ok && i < s->n_caps; i++) {
        char one[512]; /* a holder name is at most 128 bytes */
        sl__rcaps_format(one, sizeof one, s->caps[i].team, s->caps[i].holder, &s->caps[i].caps);
        char *eq = strchr(one, '=');
        *eq = '\0';
        ok = list_add(&caps, &cl, &ccap, one, eq + 1);
        if (!ok || !s->caps[i].team || s->caps[i].weight == 0) continue;
        char w[32];
        snprintf(w, sizeof w, "%.17g", s->caps[i].weight);
        ok = list_add(&teams, &tl, &tc, s->caps[i].holder, w);
    }
    for (size_t i = 0; ok && i < s->n_members; i++)
        ok = list_add(&members, &ml, &mc, s->members[i].agent, s->members[i].team);
    if (ok) {
        sl__rcmd_str(cmd, SL_FA(teams), teams);
        sl__rcmd_str(cmd, SL_FA(members), members);
        sl__rcmd_str(cmd, SL_FA(caps), caps);
    }
    free(teams);
    free(members);
    free(caps);
}

static void on_user_configured(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL_OK) {
        sl__rb_queue_reply_events(rb, &rep);
        sl__rb_note_wake(rb, sl__rreply_get(&rep, SL_FR(name)), &rep);
    } else if (rc != SL__RPROTO && op->rc == SL_OK) {
        op->rc = rc;
        snprintf(op->errmsg, sizeof op->errmsg, "%s", rep.msg);
    }
    /* Redis down: the settings are kept and applied when it returns. */
    if (--op->waiting == 0) {
        if (op->cb.done) op->cb.done(op->rc, 0, op->rc ? op->errmsg : NULL, op->ud);
        sl__rb_rop_free(op);
    }
}

static void on_user_registered(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    int i = c->idx;
    if (r && r->type == REDIS_REPLY_STRING && i < rb->n_pools) {
        rb->pools[i].no = atoi(r->str);
        for (size_t k = 0; k < rb->settings.n_pools; k++) {
            const sl_named_pool_t *np = &rb->settings.pools[k];
            if (strcmp(np->name, rb->pools[i].name) != 0) continue;
            sl__rcmd_t cmd;
            sl__rcmd_configure(&cmd, np->name, &np->config, &rb->ecfg, rb->roles, rb->prios,
                               rb->pools[i].no, NAN, rb->opt.replica_id);
            sl__rb_add_teams(rb, &cmd);
            sl__rb_add_configure_history(rb, &cmd, &rb->pools[i]);
            sl__rb_send_cmd(rb, &cmd, on_user_configured, op, i, false);
            return;
        }
    }
    on_user_configured(rb, c, NULL);
}

/* A new operation that answers `cb` (which may be NULL); NULL when out of memory, after
 * answering SL_ENOMEM. */
static rop_t *done_op_new(sl_backend_done_cb cb, void *ud)
{
    rop_t *op = sl__rb_rop_new(ud);
    if (!op) {
        if (cb) cb(SL_ENOMEM, 0, "out of memory", ud);
        return NULL;
    }
    op->cb.done = cb;
    return op;
}

void sl__rb_configure(sl_backend_t *b, const sl_backend_settings_t *s, sl_backend_done_cb cb,
                      void *ud)
{
    rb_t *rb = (rb_t *)b;
    char err[512];
    long bad_pool;
    int rc = sl_backend_settings_validate(s, &bad_pool, err, sizeof err);
    if (rc == SL_OK && rb->n_pools + (int)s->n_pools > MAX_POOLS) {
        rc = SL_EINVAL;
        snprintf(err, sizeof err, "pools: at most %d", MAX_POOLS);
    }
    if (rc == SL_OK) rc = copy_settings(rb, s);
    if (rc != SL_OK) {
        if (cb) cb(rc, 0, rc == SL_ENOMEM ? "out of memory" : err, ud);
        return;
    }
    static const char *const role_names[] = {"planner", "reviewer", "worker"};
    static const double role_values[] = {3, 2, 1};
    static const char *const prio_names[] = {"high", "normal", "low"};
    static const double prio_values[] = {4, 1, 0.25};
    class_list(rb->roles, sizeof rb->roles, role_names, role_values, 3, s->roles, s->n_roles);
    class_list(rb->prios, sizeof rb->prios, prio_names, prio_values, 3, s->priorities,
               s->n_priorities);
    for (size_t i = 0; i < s->n_roles; i++)
        sl_engine_set_role(rb->check, s->roles[i].name, s->roles[i].value);
    for (size_t i = 0; i < s->n_pools; i++) {
        if (sl__rb_pool_by_name(rb, s->pools[i].name)) continue;
        rb->pools[rb->n_pools].name = sl__rb_dup_or_null(s->pools[i].name);
        rb->pools[rb->n_pools].wake_s = INFINITY;
        rb->n_pools++;
    }
    rb->local_replicas = 0; /* the local engine follows the new settings when next used */
    if (rb->local) sl__rb_local_configure(rb, false);
    if (!rb->up || s->n_pools == 0) {
        if (cb) cb(SL_OK, 0, NULL, ud);
        return;
    }
    rop_t *op = done_op_new(cb, ud);
    if (!op) return;
    op->waiting = (int)s->n_pools;
    for (size_t i = 0; i < s->n_pools; i++) {
        rpool_t *p = sl__rb_pool_by_name(rb, s->pools[i].name);
        sl__rcmd_t cmd;
        sl__rb_register_cmd(&cmd, p);
        sl__rb_send_cmd(rb, &cmd, on_user_registered, op, (int)(p - rb->pools), false);
    }
}

/* ---- task graph ---- */

/* sluice_task_put answers the status 'ok' (or an error naming the task), not the
 * key/value reply the lease functions give. */
static void on_task_put(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    if (!r) {
        if (op->cb.done) op->cb.done(SL_REDIS_EUNAVAILABLE, 0, sl__rb_unavailable_msg(rb), op->ud);
    } else if ((r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) && r->str &&
               !strcmp(r->str, "ok")) {
        if (op->cb.done) op->cb.done(SL_OK, 0, NULL, op->ud);
    } else if (op->cb.done) {
        op->cb.done(SL_EINVAL, 0, r->type == REDIS_REPLY_ERROR && r->str ? r->str : "task: refused",
                    op->ud);
    }
    sl__rb_rop_free(op);
}

void sl__rb_task_put(sl_backend_t *b, const char *id, const char *role,
                     const char *const *depends_on, size_t n_depends, sl_task_state_t state,
                     sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    /* The engine's rules, on a scratch engine that knows the configured roles. */
    int rc = sl_engine_task_put(rb->check, id, role, depends_on, n_depends, state);
    if (rc != SL_OK) {
        if (cb) cb(rc, 0, sl_engine_errmsg(rb->check), ud);
        return;
    }
    sl_engine_task_delete(rb->check, id);
    rop_t *op = done_op_new(cb, ud);
    if (!op) return;
    sl__rcmd_t cmd;
    sl__rcmd_graph(&cmd, "sluice_task_put");
    sl__rcmd_raw(&cmd, id);
    sl__rcmd_raw(&cmd, role ? role : "worker");
    sl__rcmd_raw(&cmd, sl_task_state_name(state));
    for (size_t i = 0; i < n_depends && cmd.argc < SL__RCMD_MAX_ARGS - 1; i++)
        sl__rcmd_raw(&cmd, depends_on[i]);
    sl__rb_send_cmd(rb, &cmd, on_task_put, op, 0, false);
}

static void on_task_deleted(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    if (!r) {
        if (op->cb.done) op->cb.done(SL_REDIS_EUNAVAILABLE, 0, sl__rb_unavailable_msg(rb), op->ud);
    } else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        if (op->cb.done) op->cb.done(SL_OK, 0, NULL, op->ud);
    } else if (op->cb.done) {
        op->cb.done(SL_ENOTFOUND, 0, "task not found", op->ud);
    }
    sl__rb_rop_free(op);
}

void sl__rb_task_delete(sl_backend_t *b, const char *id, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = done_op_new(cb, ud);
    if (!op) return;
    sl__rcmd_t cmd;
    sl__rcmd_graph(&cmd, "sluice_task_delete");
    sl__rcmd_raw(&cmd, id);
    sl__rb_send_cmd(rb, &cmd, on_task_deleted, op, 0, false);
}

static void on_tasks(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    (void)rb;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        op->cb.tasks(r ? SL__RPROTO : SL_REDIS_EUNAVAILABLE, NULL, 0, op->ud);
        sl__rb_rop_free(op);
        return;
    }
    size_t n = r->elements;
    sl_task_info_t *tasks = calloc(n ? n : 1, sizeof *tasks);
    char **bufs = calloc(n ? n : 1, sizeof *bufs);
    const char ***deps = calloc(n ? n : 1, sizeof *deps);
    size_t k = 0;
    for (size_t i = 0; tasks && bufs && deps && i < n; i++) {
        const redisReply *t = r->element[i];
        if (t->type != REDIS_REPLY_ARRAY || t->elements != 3) continue;
        char *buf = sl__rb_dup_or_null(t->element[1]->str);
        if (!buf) continue;
        bufs[k] = buf;
        size_t parts = 1;
        for (char *p = buf; *p; p++) parts += *p == '\x1f';
        deps[k] = calloc(parts, sizeof *deps[k]);
        char *field[3] = {buf, NULL, NULL};
        size_t nd = 0;
        char *p = buf;
        for (size_t f = 0; p; f++) {
            char *sep = strchr(p, '\x1f');
            if (sep) *sep = '\0';
            if (f < 2) field[f] = p;
            else if (*p && deps[k]) deps[k][nd++] = p;
            p = sep ? sep + 1 : NULL;
        }
        tasks[k].id = t->element[0]->str;
        tasks[k].role = field[0];
        tasks[k].state = field[1] && strcmp(field[1], "running") == 0 ? SL_TASK_RUNNING
                         : field[1] && strcmp(field[1], "done") == 0  ? SL_TASK_DONE
                                                                      : SL_TASK_WAITING;
        tasks[k].depends_on = deps[k];
        tasks[k].n_depends = nd;
        tasks[k].unblocks = t->element[2]->integer;
        k++;
    }
    op->cb.tasks(tasks ? SL_OK : SL_ENOMEM, tasks, k, op->ud);
    for (size_t i = 0; bufs && i < k; i++) {
        free(bufs[i]);
        free(deps[i]);
    }
    free(bufs);
    free(deps);
    free(tasks);
    sl__rb_rop_free(op);
}

void sl__rb_tasks(sl_backend_t *b, sl_backend_tasks_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = sl__rb_rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, 0, ud);
        return;
    }
    op->cb.tasks = cb;
    sl__rcmd_t cmd;
    sl__rcmd_graph(&cmd, "sluice_tasks");
    sl__rb_send_cmd(rb, &cmd, on_tasks, op, 0, false);
}

/* ---- pools and agents ---- */

static void collect_local_pool(const sl_pool_info_t *p, void *ud)
{
    rop_t *op = ud;
    void *items = sl_grow(op->items, op->n, &op->cap, sizeof(sl_pool_info_t), 8);
    if (!items) return;
    op->items = items;
    ((sl_pool_info_t *)op->items)[op->n++] = *p;
}

static void on_pool_info(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    if (rc == SL_OK && c->idx < rb->n_pools) {
        sl_pool_info_t *info = &((sl_pool_info_t *)op->items)[op->n++];
        sl__rreply_pool_info(&rep, info);
        info->name = rb->pools[c->idx].name; /* outlives the reply */
        sl__rb_queue_reply_events(rb, &rep);
        sl__rb_note_wake(rb, info->name, &rep);
    } else if (op->rc == SL_OK) {
        op->rc = rc == SL__RPROTO ? SL_REDIS_EUNAVAILABLE : rc;
        const char *msg = rc == SL__RPROTO ? sl__rb_unavailable_msg(rb) : rep.msg;
        size_t n = strlen(msg);
        if (n >= sizeof op->errmsg) n = sizeof op->errmsg - 1;
        memcpy(op->errmsg, msg, n);
        op->errmsg[n] = '\0';
    }
    if (--op->waiting > 0) return;
    if (op->rc != SL_OK && rb->opt.fail == SL_REDIS_FAIL_OPEN && rb->local && op->rc == SL_REDIS_EUNAVAILABLE) {
        op->n = 0; /* down: show the local share */
        sl__rb_local_advance(rb);
        if (op->pool) {
            sl_pool_info_t info;
            int lrc = sl_engine_pool_info(rb->local, op->pool, &info);
            op->cb.pools(lrc, lrc == SL_OK ? &info : NULL, lrc == SL_OK ? 1 : 0,
                         lrc == SL_OK ? NULL : sl_engine_errmsg(rb->local), op->ud);
        } else {
            sl_engine_pool_foreach(rb->local, collect_local_pool, op);
            op->cb.pools(SL_OK, op->items, op->n, NULL, op->ud);
        }
    } else {
        op->cb.pools(op->rc, op->rc == SL_OK ? op->items : NULL, op->rc == SL_OK ? op->n : 0,
                     op->rc == SL_OK ? NULL : op->errmsg, op->ud);
    }
    sl__rb_rop_free(op);
}

void sl__rb_pools(sl_backend_t *b, const char *pool, sl_backend_pools_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    if (pool && !sl__rb_pool_by_name(rb, pool)) {
        char msg[192]; /* the engine's wording, naming the pool */
        snprintf(msg, sizeof msg, "pool \"%.140s\" not found", pool);
        cb(SL_ENOTFOUND, NULL, 0, msg, ud);
        return;
    }
    rop_t *op = sl__rb_rop_new(ud);
    if (op) op->items = calloc(rb->n_pools ? (size_t)rb->n_pools : 1, sizeof(sl_pool_info_t));
    if (!op || !op->items) {
        sl__rb_rop_free(op);
        cb(SL_ENOMEM, NULL, 0, "out of memory", ud);
        return;
    }
    op->cb.pools = cb;
    op->cap = (size_t)rb->n_pools;
    op->pool = sl__rb_dup_or_null(pool);
    op->waiting = pool ? 1 : rb->n_pools;
    if (op->waiting == 0) {
        cb(SL_OK, NULL, 0, NULL, ud);
        sl__rb_rop_free(op);
        return;
    }
    for (int i = 0; i < rb->n_pools; i++) {
        if (pool && strcmp(pool, rb->pools[i].name) != 0) continue;
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_pool", rb->pools[i].name, NAN, rb->opt.replica_id);
        sl__rb_add_history(&cmd, &rb->pools[i]);
        sl__rb_send_cmd(rb, &cmd, on_pool_info, op, i, false);
    }
}

/* Agents: the library keeps them per pool; one entry per name, summed over pools. */
typedef struct agent_acc {
    sl_agent_info_t info;
    char *name, *role, *state;
} agent_acc_t;

static void on_agents(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    for (size_t j = 0; rc == SL_OK && rep.fields && j + 1 < rep.fields->elements; j += 2) {
        char *buf = sl__rb_dup_or_null(rep.fields->element[j + 1]->str);
        char *part[12];
        int n = 0;
        for (char *p = buf; p && n < 12;) {
            part[n++] = p;
            char *sep = strchr(p, '\x1f');
            if (!sep) break;
            *sep = '\0';
            p = sep + 1;
        }
        if (n < 11) {
            free(buf);
            continue;
        }
        agent_acc_t *acc = NULL;
        for (size_t k = 0; k < op->n; k++)
            if (strcmp(((agent_acc_t *)op->items)[k].name, part[0]) == 0)
                acc = &((agent_acc_t *)op->items)[k];
        if (!acc) {
            void *items = sl_grow(op->items, op->n, &op->cap, sizeof(agent_acc_t), 16);
            if (!items) {
                free(buf);
                continue;
            }
            op->items = items;
            acc = &((agent_acc_t *)op->items)[op->n++];
            memset(acc, 0, sizeof *acc);
            acc->name = sl__rb_dup_or_null(part[0]);
            acc->role = sl__rb_dup_or_null(part[1]);
            acc->info.weight = strtod(part[2], NULL);
            acc->info.repeats = (int64_t)strtod(part[3], NULL);
            acc->info.estimate_error = strtod(part[4], NULL);
        }
        acc->info.alert_estimate_error |= atoi(part[5]) != 0;
        acc->info.leases += (int64_t)strtod(part[6], NULL);
        acc->info.queued += (int64_t)strtod(part[7], NULL);
        acc->info.tokens_in += (int64_t)strtod(part[8], NULL);
        acc->info.tokens_out += (int64_t)strtod(part[9], NULL);
        acc->info.got_429 += (int64_t)strtod(part[10], NULL);
        free(buf);
    }
    if (rc != SL_OK && op->rc == SL_OK) op->rc = rc == SL__RPROTO ? SL_REDIS_EUNAVAILABLE : rc;
    (void)rb;
    if (--op->waiting > 0) return;
    agent_acc_t *acc = op->items;
    sl_agent_info_t *out = calloc(op->n ? op->n : 1, sizeof *out);
    for (size_t k = 0; out && k < op->n; k++) {
        out[k] = acc[k].info;
        out[k].name = acc[k].name;
        out[k].role = acc[k].role;
        out[k].state = out[k].leases > 0 ? "running" : out[k].queued > 0 ? "queued" : "idle";
    }
    op->cb.agents(!out ? SL_ENOMEM : op->rc, op->rc == SL_OK ? out : NULL,
                  op->rc == SL_OK && out ? op->n : 0, op->ud);
    for (size_t k = 0; k < op->n; k++) {
        free(acc[k].name);
        free(acc[k].role);
    }
    free(out);
    sl__rb_rop_free(op);
}

void sl__rb_agents(sl_backend_t *b, sl_backend_agents_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = sl__rb_rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, NULL, 0, ud);
        return;
    }
    op->cb.agents = cb;
    op->waiting = rb->n_pools;
    if (!op->waiting) {
        cb(SL_OK, NULL, 0, ud);
        sl__rb_rop_free(op);
        return;
    }
    for (int i = 0; i < rb->n_pools; i++) {
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_agents", rb->pools[i].name, NAN, rb->opt.replica_id);
        sl__rb_add_history(&cmd, &rb->pools[i]);
        sl__rb_send_cmd(rb, &cmd, on_agents, op, i, false);
    }
}

/* Forgetting an agent: asked of every pool; kept in one is kept (value 0), else forgotten
 * in one is forgotten (1), else not known (-1). op->n counts forgotten, op->cap kept. */
static void on_agent_forget(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    sl__rreply_t rep;
    int rc = sl__rreply_parse(r, &rep);
    double f = rc == SL_OK ? sl__rreply_num(&rep, SL_FR(forgotten), -1) : -1;
    op->n += f > 0;
    op->cap += f == 0;
    if (rc == SL_OK && c->idx < rb->n_pools) { /* it advanced the pool: reaps are events */
        sl__rb_queue_reply_events(rb, &rep);
        sl__rb_note_wake(rb, rb->pools[c->idx].name, &rep);
    }
    if (rc != SL_OK && op->rc == SL_OK) op->rc = rc == SL__RPROTO ? SL_REDIS_EUNAVAILABLE : rc;
    if (--op->waiting > 0) return;
    double value = op->cap ? 0 : op->n ? 1 : -1;
    op->cb.done(op->rc, value, op->rc == SL_OK ? NULL : "the agent could not be forgotten",
                op->ud);
    sl__rb_rop_free(op);
}

void sl__rb_agent_forget(sl_backend_t *b, const char *agent, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = sl__rb_rop_new(ud);
    if (!op) {
        cb(SL_ENOMEM, -1, "out of memory", ud);
        return;
    }
    op->cb.done = cb;
    op->waiting = rb->n_pools;
    if (!op->waiting) {
        cb(SL_OK, -1, NULL, ud);
        sl__rb_rop_free(op);
        return;
    }
    for (int i = 0; i < rb->n_pools; i++) {
        sl__rcmd_t cmd;
        sl__rcmd_begin(&cmd, "sluice_agent_forget", rb->pools[i].name, NAN, rb->opt.replica_id);
        sl__rb_add_history(&cmd, &rb->pools[i]);
        sl__rcmd_str(&cmd, SL_FA(agent), agent);
        sl__rb_send_cmd(rb, &cmd, on_agent_forget, op, i, false);
    }
}

/* ---- ping ---- */

static void on_ping(rb_t *rb, rcall_t *c, redisReply *r)
{
    rop_t *op = c->ctx;
    bool ok = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, SL__REDIS_LIB_VERSION) == 0;
    if (op->cb.done) op->cb.done(ok ? SL_OK : SL_REDIS_EUNAVAILABLE, 0, ok ? NULL : sl__rb_unavailable_msg(rb), op->ud);
    sl__rb_rop_free(op);
}

void sl__rb_ping(sl_backend_t *b, sl_backend_done_cb cb, void *ud)
{
    rb_t *rb = (rb_t *)b;
    rop_t *op = done_op_new(cb, ud);
    if (!op) return;
    sl__rcmd_t cmd = {0};
    sl__rcmd_raw(&cmd, "FCALL");
    sl__rcmd_raw(&cmd, "sluice_version");
    sl__rcmd_raw(&cmd, "0");
    sl__rb_send_cmd(rb, &cmd, on_ping, op, 0, false);
}
