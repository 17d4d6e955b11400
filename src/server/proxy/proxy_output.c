/* proxy_output.c - the output a proxied call asks the provider to hold, and capping it to the
 * lease.
 *
 * The provider holds a call's whole output limit from the moment it starts, not what the
 * answer turns out to use: Anthropic estimates output TPM from max_tokens at the start
 * of a request and corrects it at the end (docs.anthropic.com/en/api/rate-limits), and
 * OpenAI counts max_tokens in its TPM. So what sluice reserves for output must be that
 * limit, in every field that sets it, times every field that multiplies it:
 *
 *   Anthropic Messages       max_tokens (extended thinking's budget_tokens lies within it)
 *   OpenAI Chat Completions  max_completion_tokens, else the deprecated max_tokens, each
 *                            per choice, times `n` (choices generated at once; "you will
 *                            be charged based on the number of generated tokens across
 *                            all of the choices", API reference)
 *   OpenAI Responses         max_output_tokens (no `n`: one response per call)
 *
 * `n` is the only multiplier of the three APIs sluice proxies (the legacy Completions'
 * `best_of` is another, and that path is not proxied). When the lease reserved less than
 * the call asks (`output_reserve: learned`, a share cap), the body is rewritten so the
 * provider is asked to hold no more than was reserved: the per-choice limit becomes
 * floor(reserved / n). The lease is never reserved below what can be sent (`floor_tokens`:
 * a token per choice; 16 on the Responses API, which refuses a max_output_tokens below it,
 * so a learned percentile of 6 would turn a valid call into the provider's 400). Pure
 * functions on parsed JSON: no I/O. */
#include "proxy.h"

#include <string.h>

#define DEFAULT_OUTPUT_TOKENS 4096 /* OpenAI calls without a limit: the proxy's guess */

/* The field holding the per-choice limit in `body` for this dialect, or the one to add. */
static const char *limit_field(const json_t *body, sl_upstream_api_t api, bool responses)
{
    if (responses) return "max_output_tokens";
    if (api == SL_UPSTREAM_ANTHROPIC) return "max_tokens";
    if (json_is_integer(json_object_get(body, "max_completion_tokens")) ||
        !json_is_integer(json_object_get(body, "max_tokens")))
        return "max_completion_tokens";
    return "max_tokens";
}

/* Anthropic's extended thinking needs budget_tokens below max_tokens: such a call keeps
 * its max_tokens (and so reserves it), since lowering it could make the call invalid. */
static bool thinking_budget(const json_t *body)
{
    const json_t *t = json_object_get(body, "thinking");
    const char *type = json_string_value(json_object_get(t, "type"));
    return type && !strcmp(type, "enabled");
}

int sl__proxy_output_read(sl_upstream_api_t api, bool responses, const json_t *body,
                          sl_proxy_output_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    out->field = limit_field(body, api, responses);
    out->choices = 1;
    const json_t *m = json_object_get(body, out->field);
    if (json_is_integer(m) && json_integer_value(m) > 0) {
        out->per_choice_tokens = (int64_t)json_integer_value(m);
        if (out->per_choice_tokens > SL_TOKENS_MAX) out->per_choice_tokens = SL_TOKENS_MAX;
    }
    out->cappable = !(api == SL_UPSTREAM_ANTHROPIC && !responses && thinking_budget(body));
    const json_t *n = json_object_get(body, "n");
    if (api == SL_UPSTREAM_OPENAI && !responses && n && !json_is_null(n)) {
        if (!json_is_integer(n) || json_integer_value(n) < 1 ||
            json_integer_value(n) > SL_PROXY_MAX_CHOICES) {
            snprintf(err, errlen,
                     "sluice: n must be an integer from 1 to %d (choices generated at once, each "
                     "up to the output limit, all held by the provider)",
                     SL_PROXY_MAX_CHOICES);
            return -1;
        }
        out->choices = (int64_t)json_integer_value(n);
    }
    out->floor_tokens = out->choices * (responses ? SL_PROXY_RESPONSES_MIN_OUTPUT : 1);
    return 0;
}

int64_t sl__proxy_output_tokens(const sl_proxy_output_t *o)
{
    int64_t per = o->per_choice_tokens > 0 ? o->per_choice_tokens : DEFAULT_OUTPUT_TOKENS;
    /* per <= 2^53 and choices <= 128: no overflow; the engine refuses above 2^53. */
    return per * o->choices;
}

int sl__proxy_output_cap(json_t *body, const sl_proxy_output_t *o, int64_t reserved_tokens)
{
    int64_t per = reserved_tokens / (o->choices > 0 ? o->choices : 1);
    if (per < 1) per = 1;
    int64_t asked = o->per_choice_tokens > 0 ? o->per_choice_tokens : DEFAULT_OUTPUT_TOKENS;
    if (per >= asked) return 0;
    if (json_object_set_new(body, o->field, json_integer((json_int_t)per)) != 0) return -1;
    return 1;
}
