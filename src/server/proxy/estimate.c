/* estimate.c - POST /v1/estimate: what a provider request body will cost, counted exactly as the
 * proxy counts it, without calling anyone.
 *
 * An agent that calls the provider itself (the lease API, not the proxy) has to say its
 * input_tokens, cached_tokens and output_tokens before the call; a guess is off by a factor
 * (a 1,200 guess for a 408-token prompt). sluiced has the exact tokenizer and the proxy's
 * rules, so it counts the body the agent is about to send: the same sl_estimate_json, the
 * same output reservation (proxy_output.c: the per-choice limit, 4096 when none, times
 * `n`) and the same cache-prefix hash (proxy_prefix.c) a proxied call would get. Nothing
 * is charged, nothing is remembered. */
#include "server.h"

#include <stdio.h>
#include <string.h>

/* The dialects a body may be written in, by their names in the API. */
static const struct dialect {
    const char *name;
    sl_upstream_api_t upstream;
    bool responses;
    sl_api_t tokenizer_api;
} dialects[] = {
    {"anthropic", SL_UPSTREAM_ANTHROPIC, false, SL_API_ANTHROPIC},
    {"openai", SL_UPSTREAM_OPENAI, false, SL_API_OPENAI},
    {"responses", SL_UPSTREAM_OPENAI, true, SL_API_OPENAI_RESPONSES},
};
#define N_DIALECTS (sizeof(dialects) / sizeof(dialects[0]))

static const struct dialect *dialect_named(const char *name)
{
    for (size_t i = 0; i < N_DIALECTS; i++)
        if (!strcmp(dialects[i].name, name)) return &dialects[i];
    return NULL;
}

/* The dialect of a body that names none: the pool's upstream when it has one; else a
 * Responses body by its `input`/`instructions` without `messages`; else the tokenizer's
 * own detection (OpenAI roles and fields, Anthropic otherwise: docs/tokenizer.md). */
static const struct dialect *guess_dialect(const sl_config_t *c, const char *pool,
                                           const json_t *request)
{
    const sl_pool_upstream_t *up = sl_config_pool_upstream(c, pool);
    bool responses_shape = !json_object_get(request, "messages") &&
                           (json_object_get(request, "input") ||
                            json_object_get(request, "instructions"));
    if (up && up->url && up->api == SL_UPSTREAM_ANTHROPIC) return dialect_named("anthropic");
    if (responses_shape) return dialect_named("responses");
    if (up && up->url && up->api == SL_UPSTREAM_OPENAI) return dialect_named("openai");
    return dialect_named(sl_estimate_detect_api(request) == SL_API_OPENAI ? "openai"
                                                                          : "anthropic");
}

/* "sluice: n must be ..." from proxy_output.c becomes "request.n must be ...". */
static void reply_request_error(sl_call_t *call, const char *err)
{
    if (!strncmp(err, "sluice: ", 8)) err += 8;
    sl__reply_error(call, 400, "invalid_request", "request.%s", err);
}

void sl__handle_estimate(sl_call_t *call)
{
    static const char *const fields[] = {"request", "api", "pool", "model", NULL};
    const sl_config_t *c = &call->srv->config;
    const json_t *body = call->body;
    char msg[512];
    const char *pool = "default", *api_name = NULL, *model = NULL;
    if (sl__json_check_fields(body, fields, msg, sizeof(msg)) < 0 ||
        sl__json_get_string(body, "pool", false, 128, true, &pool, msg, sizeof(msg)) < 0 ||
        sl__json_get_string(body, "api", false, 16, false, &api_name, msg, sizeof(msg)) < 0 ||
        sl__json_get_string(body, "model", false, 128, false, &model, msg, sizeof(msg)) < 0) {
        sl__reply_error(call, 400, "invalid_request", "%s", msg);
        return;
    }
    const json_t *request = json_object_get(body, "request");
    if (!json_is_object(request)) {
        sl__reply_error(call, 400, "invalid_request",
                        "request is required: the provider request body (an object), not %s",
                        request ? "another JSON type" : "missing");
        return;
    }
    const struct dialect *d = api_name ? dialect_named(api_name) : guess_dialect(c, pool, request);
    if (api_name && !d) {
        sl__reply_error(call, 400, "invalid_request",
                        "api must be \"anthropic\", \"openai\" or \"responses\", not \"%.16s\"",
                        api_name);
        return;
    }
    if (!sl_config_pool(c, pool)) {
        sl__reply_error(call, 404, "not_found", "pool: '%s' is not configured", pool);
        return;
    }
    if (!model) model = json_string_value(json_object_get(request, "model"));
    if (model && (strlen(model) == 0 || strlen(model) > 128)) model = NULL;

    sl_tokenizer_t *tok = sl__proxy_tokenizer(call->srv);
    if (!tok) {
        sl__reply_error(call, 503, "tokenizer_unavailable",
                        "tokenizer: sluiced has no vocabulary loaded (see docs/tokenizer.md); "
                        "nothing can be counted exactly");
        return;
    }
    sl_estimate_t est;
    char err[384];
    if (sl_estimate_json(tok, d->tokenizer_api, request, &est, err,
                         sizeof(err)) != 0) {
        reply_request_error(call, err);
        return;
    }
    sl_proxy_output_t out;
    if (sl__proxy_output_read(d->upstream, d->responses, request, &out, err, sizeof(err)) < 0) {
        reply_request_error(call, err);
        return;
    }
    char hash[65];
    int hashed = sl__prefix_hash(d->upstream, request, hash);
    if (hashed < 0) {
        sl__reply_error(call, 503, "out_of_memory", "server: out of memory hashing the prefix");
        return;
    }
    json_t *ans = json_pack("{s:s, s:s, s:I, s:I, s:I, s:b}", "pool", pool, "api", d->name,
                            "input_tokens", (json_int_t)est.input_tokens, "cached_tokens",
                            (json_int_t)est.cached_tokens, "output_tokens",
                            (json_int_t)sl__proxy_output_tokens(&out), "output_limit_named",
                            out.per_choice_tokens > 0);
    if (ans) {
        json_object_set_new(ans, "model", model ? json_string(model) : json_null());
        json_object_set_new(ans, "cache_prefix_hash", hashed ? json_string(hash) : json_null());
    }
    sl__reply_json(call, 200, ans);
}
