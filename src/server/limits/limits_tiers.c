/* limits_tiers.c - a tier's limit_multiplier: each `per: agent` limit copied, scaled, per tier.
 *
 * A tier may say `limit_multiplier: M` (docs/server.md "Tiers"): its tokens' agents get M
 * times the per-agent action limits. The multiplier scales what is the agent's own: a
 * `per: agent` limit's state is one agent's, so a gold agent's bucket may be twice a free
 * agent's without taking anything from anyone. A `per: team`, `global` or `key` limit is
 * one state shared by every caller: scaling it by the caller's tier would answer two
 * callers of one key from two different limits over the same state, so those stay as
 * configured and still bound the tier's agents (a gold agent's doubled bucket still draws
 * from the team's). An adaptive limit learns its rate from the outcomes it is told (a
 * resource's health), which no tier can promise more of: it is not scaled either.
 *
 * How: for every tier with a multiplier other than 1, each scalable limit NAME gets a copy
 * `NAME@TIER` in the set the server builds (rate and burst times M, rounded to a whole
 * number where the algorithm counts whole units, never below 1; parents that are copied
 * too point at their copies, the others at the shared limit). A check of NAME by a token of
 * that tier uses the copy; the copy has its own per-agent keys, on the memory backend and
 * in Redis alike (the Redis plan carries each level's figures), so nothing in the library
 * or in limits.lua knows about tiers. A copy is never checked by its own name.
 */
#include "limits_api.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "limits_json.h"

/* True when `lim` (one limit's JSON) keeps its state per agent and is not adaptive. */
static bool scalable(const json_t *lim)
{
    const char *per = json_string_value(json_object_get(lim, "per"));
    return (!per || !strcmp(per, "agent")) && !json_object_get(lim, "adaptive");
}

/* True when algorithm `algo` (NULL: token_bucket) counts whole units in `rate`. */
static bool whole_rate(const char *algo)
{
    return algo && (!strcmp(algo, "fixed_window") || !strcmp(algo, "sliding_window") ||
                    !strcmp(algo, "sliding_window_approx") || !strcmp(algo, "concurrency"));
}

/* `v` (a JSON number) times `m`: a whole number at least 1 when `whole`, else as is. */
static json_t *scaled(const json_t *v, double m, bool whole)
{
    double x = json_number_value(v) * m;
    if (!whole) return json_real(x);
    return json_integer((json_int_t)fmax(1, llround(x)));
}

/* The copy of limit `lim` for tier `tier` (multiplier `m`): NULL when out of memory. */
static json_t *copy_for(const json_t *all, const json_t *lim, const char *tier, double m)
{
    json_t *c = json_deep_copy(lim);
    if (!c) return NULL;
    const char *algo = json_string_value(json_object_get(lim, "algorithm"));
    json_t *rate = json_object_get(lim, "rate"), *burst = json_object_get(lim, "burst");
    if (json_is_number(rate)) json_object_set_new(c, "rate", scaled(rate, m, whole_rate(algo)));
    if (json_is_number(burst)) json_object_set_new(c, "burst", scaled(burst, m, true));
    json_t *parents = json_object_get(c, "parents");
    for (size_t i = 0; i < json_array_size(parents); i++) {
        const char *p = json_string_value(json_array_get(parents, i));
        if (!p || !scalable(json_object_get(all, p))) continue;
        char name[2 * SL_LIMITS_MAX_NAME + 2];
        snprintf(name, sizeof name, "%s@%s", p, tier);
        json_array_set_new(parents, i, json_string(name));
    }
    return c;
}

/* The tier whose copy a library message ("limits.NAME@TIER.FIELD: ...") is about. */
static const char *tier_in(const json_t *copies, const char *msg)
{
    const char *copy;
    json_t *info;
    json_object_foreach((json_t *)copies, copy, info)
    {
        size_t n = strlen(copy);
        if (!strncmp(msg, "limits.", 7) && !strncmp(msg + 7, copy, n) &&
            (msg[7 + n] == '.' || msg[7 + n] == ':'))
            return json_string_value(json_object_get(info, "tier"));
    }
    return "?";
}

int sl__limits_with_tiers(const json_t *limits, const sl_token_config_t *tiers, json_t **out,
                          json_t **copies, char *err, size_t errlen)
{
    *out = limits ? json_deep_copy(limits) : json_object();
    *copies = json_object();
    if (!*out || !*copies) goto oom;
    for (size_t t = 0; limits && t < tiers->n_tiers; t++) {
        const sl_tier_t *tier = &tiers->tiers[t];
        double m = tier->limit_multiplier;
        if (m <= 0 || m == 1) continue;
        const char *name;
        json_t *lim;
        json_object_foreach((json_t *)limits, name, lim)
        {
            if (!scalable(lim)) continue;
            char copy[2 * SL_LIMITS_MAX_NAME + 2];
            snprintf(copy, sizeof copy, "%s@%s", name, tier->name);
            if (strlen(copy) > SL_LIMITS_MAX_NAME || json_object_get(limits, copy)) {
                snprintf(err, errlen,
                         "tiers.%s.limit_multiplier: the copy of limit '%.64s' for this tier "
                         "would be named '%.80s', which is %s",
                         tier->name, name, copy,
                         json_object_get(limits, copy) ? "a configured limit's name"
                                                       : "longer than a limit name may be");
                return -1;
            }
            json_t *c = copy_for(limits, lim, tier->name, m);
            if (!c || json_object_set_new(*out, copy, c) < 0 ||
                json_object_set_new(*copies, copy,
                                    json_pack("{s:s,s:s,s:f}", "of", name, "tier", tier->name,
                                              "limit_multiplier", m)) < 0)
                goto oom;
        }
    }
    if (json_object_size(*copies) == 0) return 0;
    sl_limits_t *scratch = sl_limits_new(); /* a scaled figure may leave the library's range */
    int rc = scratch ? sl_limits_add_all_json(scratch, *out) : SL_ENOMEM;
    if (rc != SL_OK) {
        const char *msg = scratch ? sl_limits_errmsg(scratch) : "out of memory";
        snprintf(err, errlen, "tiers.%s.limit_multiplier: scaling the per-agent limits gives %s",
                 tier_in(*copies, msg), msg);
        sl_limits_free(scratch);
        return -1;
    }
    sl_limits_free(scratch);
    return 0;
oom:
    snprintf(err, errlen, "limits: out of memory");
    return -1;
}

const char *sl__limits_tier_name(const sl_call_t *call, const json_t *copies, const char *name,
                                 char *buf, size_t buflen)
{
    const char *tier = call->token ? call->token->meta.tier : NULL;
    if (!tier || json_object_size(copies) == 0) return name;
    snprintf(buf, buflen, "%s@%s", name, tier);
    return json_object_get(copies, buf) ? buf : name;
}
