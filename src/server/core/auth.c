/* auth.c - who a request is: bearer tokens against the configuration, in constant time.
 *
 * sl__token_equal() is the one comparison of a presented secret with a configured one
 * (the lease API, the proxy's keys, the dashboard's session): its time depends on the
 * lengths only, never on where the bytes first differ.
 */
#include "server.h"

#include <string.h>
#include <strings.h>

bool sl__token_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < na && i < nb; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

bool sl__token_identify(sl_call_t *call, const char *token)
{
    const sl_config_t *c = &call->srv->config;
    if (c->admin_token && sl__token_equal(token, c->admin_token)) {
        call->admin = true;
        return true;
    }
    sl_token_rule_t *t = sl__tokens_find(call->srv, token); /* by SHA-256: tokens_api.c */
    if (!t) return false;
    t->meta.last_used_s = sl_backend_now(call->srv->backend);
    call->token = t;
    return true;
}

uint64_t sl__token_principal(const sl_token_rule_t *t)
{
    /* The first bytes of the secret's SHA-256: equal for every call with that token,
     * across reloads that keep it, and never shown anywhere. 0 is kept for the admin
     * token and auth off. */
    uint64_t h;
    memcpy(&h, t->meta.sha256, sizeof h);
    return h ? h : 1;
}

uint64_t sl__call_principal(const sl_call_t *call)
{
    return call->token ? sl__token_principal(call->token) : 0;
}

bool sl__metrics_names_agents(sl_call_t *call)
{
    const sl_config_t *c = &call->srv->config;
    if (!sl_config_auth_enabled(c)) return true;
    const char *h = call->req ? sl_hreq_header(call->req, "Authorization") : NULL;
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    const char *tok = h + 7;
    while (*tok == ' ')
        tok++;
    return sl__token_identify(call, tok) && call->admin;
}

int sl__authenticate(sl_call_t *call)
{
    const sl_config_t *c = &call->srv->config;
    if (!sl_config_auth_enabled(c)) {
        call->admin = true;
        return 0;
    }
    const char *h = sl_hreq_header(call->req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
        sl__reply_error(
            call, 401, "unauthorized",
            "Authorization: a bearer token is required (Authorization: Bearer <token>)");
        return -1;
    }
    const char *tok = h + 7;
    while (*tok == ' ')
        tok++;
    if (sl__token_identify(call, tok)) return 0;
    sl__reply_error(call, 401, "unauthorized", "Authorization: the bearer token is not known");
    return -1;
}

bool sl__token_may_act_as(const sl_call_t *call, const char *agent)
{
    if (call->admin) return true;
    const sl_token_rule_t *t = call->token;
    if (!t || !agent) return false;
    if (t->agent) return strcmp(t->agent, agent) == 0;
    return strncmp(t->agent_prefix, agent, strlen(t->agent_prefix)) == 0;
}

static bool in_list(char **list, size_t n, const char *s)
{
    if (n == 0) return true;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], s)) return true;
    return false;
}

bool sl__token_may_use(const sl_call_t *call, const char *role, const char *pool)
{
    if (call->admin) return true;
    const sl_token_rule_t *t = call->token;
    return t && (!role || in_list(t->roles, t->n_roles, role)) &&
           (!pool || in_list(t->pools, t->n_pools, pool));
}
