/* admit.c - the one admission path of a lease: what a caller claims, bounded by its token.
 *
 * The lease API (leases.c: a JSON body) and the proxy (proxy.c: x-sluice-* headers) read
 * the same claims — agent, pool, role, task, unblocks, priority — and must decide them
 * alike, or a token refused a role on one path gets it on the other. So neither decides:
 * both fill an sl_request_t and call sl__admit(), which answers with the request to send
 * to the backend or a refusal (status, type, message) that each path writes in its own
 * shape (the lease API's JSON, or the provider's error shape from the proxy). The two
 * paths differ only in how a field is spelt in the message (`role` or `x-sluice-role`),
 * so that the message names what the caller actually sent.
 *
 * The task graph decides the role of a lease naming a task in it (docs/design.md,
 * "Reports and claims"): a worker token cannot get the planner's weight by naming a
 * planner task, and a role other than the task's is a contradiction (400), not a choice.
 * The backend applies that rule in the request itself (the token's roles go with it as
 * roles_allowed: 403 SL_EFORBIDDEN), so a lease naming a task costs one decision and, on
 * Redis, one round trip.
 */
#include "server.h"
#include "long_context.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How each path spells a claim: the lease API's body fields, the proxy's headers. */
typedef struct claim_names {
    const char *agent, *pool, *role, *unblocks, *priority;
} claim_names_t;

static const claim_names_t *names_of(sl_error_dialect_t d)
{
    static const claim_names_t lease_api = {"agent", "pool", "role", "unblocks", "priority"};
    static const claim_names_t proxy = {"x-sluice-agent", "x-sluice-pool", "x-sluice-role",
                                        "x-sluice-unblocks", "x-sluice-priority"};
    return d == SL_DIALECT_PROVIDER ? &proxy : &lease_api;
}

int sl__refuse(sl_refusal_t *ref, int status, const char *type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ref->message, sizeof(ref->message), fmt, ap);
    va_end(ap);
    ref->status = status;
    ref->type = type;
    ref->retry_after_s = -1;
    return -1;
}

bool sl__token_may_use_priority(const sl_call_t *call, const char *priority)
{
    const sl_token_rule_t *t = call->token;
    if (call->admin || !t) return call->admin;
    if (t->n_priorities) {
        for (size_t i = 0; i < t->n_priorities; i++)
            if (!strcmp(t->priorities[i], priority)) return true;
        return false;
    }
    double factor = sl_config_priority_factor(&call->srv->config, priority);
    return factor >= 0 && factor <= 1;
}

int64_t sl__max_unblocks(const sl_call_t *call)
{
    return call->token && !call->admin ? call->token->max_unblocks : call->srv->config.max_unblocks;
}

int sl__admit_claims(const sl_call_t *call, sl_error_dialect_t d, const sl_request_t *r,
                     sl_refusal_t *ref)
{
    const claim_names_t *f = names_of(d);
    if (!sl__token_may_act_as(call, r->agent))
        return sl__refuse(ref, 403, "forbidden", "%s: this token may not act as agent '%s'",
                          f->agent, r->agent);
    if (r->pool && *r->pool && !sl__token_may_use(call, NULL, r->pool))
        return sl__refuse(ref, 403, "forbidden", "%s: this token may not use pool '%s'", f->pool,
                          r->pool);
    int64_t max_unblocks = sl__max_unblocks(call);
    if (r->unblocks > max_unblocks) {
        if (call->token && !call->admin)
            return sl__refuse(ref, 403, "forbidden",
                              "%s: %" PRId64 " is more than this token may claim "
                              "(max_unblocks %" PRId64 ")",
                              f->unblocks, r->unblocks, max_unblocks);
        return sl__refuse(ref, 400, "invalid_request",
                          "%s: %" PRId64 " is above max_unblocks %" PRId64, f->unblocks,
                          r->unblocks, max_unblocks);
    }
    /* An unknown name is left to the engine (400 naming it). */
    const char *priority = r->priority ? r->priority : "normal";
    if (sl_config_priority_factor(&call->srv->config, priority) >= 0 &&
        !sl__token_may_use_priority(call, priority))
        return sl__refuse(ref, 403, "forbidden", "%s: this token may not use priority '%.64s'",
                          f->priority, priority);
    return 0;
}

int sl__admit(sl_call_t *call, sl_error_dialect_t d, sl_request_t *r, const char *task_role,
              sl_refusal_t *ref)
{
    const claim_names_t *f = names_of(d);
    if (sl__admit_claims(call, d, r, ref) < 0) return -1;
    if (task_role) {
        if (r->role && strcmp(r->role, task_role) != 0)
            return sl__refuse(ref, 400, "invalid_request",
                              "%s: '%s' is not the role '%s' task '%s' is registered with", f->role,
                              r->role, task_role, r->task);
        r->role = task_role;
    }
    const char *role = r->role ? r->role : "worker";
    if (call->token && !call->admin && call->token->n_roles) {
        r->roles_allowed = (const char *const *)call->token->roles;
        r->n_roles_allowed = call->token->n_roles;
    }
    /* A task named without a role: the graph's role, checked by the backend. */
    if ((r->role || !r->task || task_role) && !sl__token_may_use(call, role, NULL))
        return sl__refuse(ref, 403, "forbidden", "%s: this token may not use role '%s'%s%s%s",
                          f->role, role, task_role ? " (the role of task '" : "",
                          task_role ? r->task : "", task_role ? "')" : "");
    r->max_unblocks_set = true; /* the graph's count is bounded like the claimed one */
    r->max_unblocks = sl__max_unblocks(call);
    /* The agent itself: what the features say of it (the fleet: its bounds, suspension). */
    if (sl__admit_agent(call, SL_ADMIT_LEASE, r->agent, role, ref) < 0) return -1;
    /* Above the provider's long-context threshold: the pool's long-context limits. */
    sl__long_context_route(&call->srv->config, r);
    return 0;
}
