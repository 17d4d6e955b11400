/* forget.c - forgetting an agent that holds nothing, so that agent names do not cost memory forever.
 *
 * An agent is created by its first request and, before this, lived as long as the
 * engine: one token leasing under 200,000 fresh names held 1.8 KB each (issue 25). The
 * daemon forgets an agent once it has been idle long enough (agents.forget_idle_s);
 * the engine's part is to say whether forgetting would change anything, and to drop the
 * agent only when it would not:
 *
 * - no lease, no ticket (nothing points at its records);
 * - no team membership (configured: caps.teams.NAME.members) and no caps of its own
 *   (configured or set by an admin): those are the operator's, not the agent's;
 * - its copy of the "*" caps is as a new agent's would be: nothing in flight or
 *   parked, every share and rpm bucket full in every pool, both budgets full;
 * - in every pool, no retry-after of its own report holds it (forgetting would lift it);
 * - in every pool it asked, the prompt cache named by its name is cold. That cache is the
 *   name's, not the agent record's: other agents read and write it through cache_key
 *   (docs/api.md), so a warm one keeps the agent even when other agents' calls keep it
 *   warm (forgetting must not make their next call cold, nor a returning agent's);
 * - in every pool, its fair-queue tag is not ahead of its team's clock: a new agent
 *   starts at that clock, so it is what the forgotten one would get anyway.
 *
 * What is dropped is then what a new name starts without: the weight of its last
 * request (recomputed at the next one), the repeat count and failure signature, the
 * estimate-error window and its alert, the totals shown by /v1/agents, and the cold cache
 * of its name, so that names cost no memory for ever on the Redis port either (whose
 * caches no sweep reclaims). A lease or ticket of another agent may still name that cache:
 * its record then stays for that pointer, but as a cache never settled, as the Redis port's
 * (which drops the key) reads it; that lease's settle writes it anew. The Redis port
 * (sluice.lua, `agent_forget`) applies the same rules per pool.
 */
#include "internal.h"

#include <stdlib.h>

/* Whether `pa` (the agent's state in pool `p`) holds nothing a new agent would lack. */
static bool pagent_idle(sl_engine_t *e, sl__pool_t *p, const sl__pagent_t *pa, double now)
{
    const sl__cache_t *c = sl__cache_get(p, pa->agent->name, false);
    if (c && now - c->used_at < p->cfg.cache_ttl_s) return false; /* warm, through anyone */
    if (pa->blocked_until > now) return false; /* its own retry-after holds it: not a new agent's */
    const sl__pteam_t *pt = sl__pteam_get(e, p, SL__DEFAULT_TEAM, false);
    return pa->last_finish <= (pt ? pt->vtime : 0);
}

int sl_engine_agent_forget(sl_engine_t *e, const char *agent, double now_s)
{
    int rc = sl_engine_advance(e, now_s);
    if (rc) return rc;
    sl__agent_t *a = agent ? sl__strmap_get(&e->agents, agent) : NULL;
    if (!a)
        return sl__fail(e, SL_ENOTFOUND, "agent \"%.140s\" not found", agent ? agent : "(null)");
    const char *why = NULL;
    if (a->leases > 0 || a->queued > 0)
        why = "it holds a lease or a ticket";
    else if (a->team)
        why = "it is a member of a team";
    else if (!sl__caps_agent_fresh(e, a->name, now_s))
        why = "its caps hold state";
    for (size_t i = 0; !why && i < e->n_pools; i++) {
        sl__pagent_t *pa = sl__strmap_get(&e->pools[i]->pagents, a->name);
        if (pa && !pagent_idle(e, e->pools[i], pa, now_s))
            why = "its prompt cache, fair-queue tag or own retry-after in a pool is not a new agent's";
    }
    if (why) return sl__fail(e, SL_EEXIST, "agent \"%s\" is kept: %s", a->name, why);
    sl__caps_agent_drop(e, a->name);
    for (size_t i = 0; i < e->n_pools; i++) {
        sl__pagent_t *pa = sl__strmap_del(&e->pools[i]->pagents, a->name); /* key: a->name */
        if (!pa) continue; /* a pool it never asked: its caches there are the sweep's */
        free(pa);
        sl__cache_forget(e->pools[i], a->name);
    }
    sl__strmap_del(&e->agents, a->name);
    sl__agent_free(a);
    return SL_OK;
}
