/* admin.c - the providers' rate-limit endpoints, served from the emulator's own limits.
 *
 * sluiced's `limits: provider` reads these at start, on reload and hourly:
 *   GET /v1/organizations/rate_limits (Anthropic's Admin API, key in x-api-key):
 *     {"data": [{"type": "rate_limit", "id": ..., "group": {"type": "model_group", "id",
 *       "display_name"},
 *       "group_type": "model_group", "models": [...], "limits": [{"type":
 *       "requests_per_minute", "value": N}, {"type": "input_tokens_per_minute", ...},
 *       {"type": "output_tokens_per_minute", ...}]}, {... "token_count" ...}],
 *      "next_page": null}
 *   GET /v1/organization/projects/{project_id}/rate_limits (OpenAI, Bearer admin key):
 *     {"object": "list", "data": [{"object": "project.rate_limit", "id": "rl-<model>",
 *       "model": ..., "max_requests_per_1_minute": N, "max_tokens_per_1_minute": N}],
 *      "first_id": ..., "last_id": ..., "has_more": false}
 * Every model shares the emulator's one set of limits, so every model is listed with
 * them; a limit of 0 (not limited) is left out. POST /emu/limits {"input_tpm": N, ...}
 * changes the limits at once (a test's stand-in for the provider raising a tier). */
#include "emu.h"

#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>

/* The admin key presented (x-api-key, or a bearer token), checked against --admin-key. */
static bool admin_key_ok(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *k = api == SL_EMU_ANTHROPIC ? evhttp_find_header(h, "x-api-key") : NULL;
    const char *auth = evhttp_find_header(h, "Authorization");
    if (!k && auth && strncasecmp(auth, "Bearer ", 7) == 0) k = auth + 7;
    if (k && *k && (!emu->opt.admin_key[0] || !strcmp(k, emu->opt.admin_key))) return true;
    sl__emu_send_error(emu, req, api, 401,
                       api == SL_EMU_ANTHROPIC ? "authentication_error" : "invalid_request_error",
                       k && *k ? "invalid admin API key" : "an admin API key is required", NULL,
                       api == SL_EMU_OPENAI ? "invalid_api_key" : NULL);
    return false;
}

static void add_limit(json_t *limits, const char *type, int64_t value)
{
    if (value > 0)
        json_array_append_new(limits,
                              json_pack("{s:s, s:I}", "type", type, "value", (json_int_t)value));
}

static json_t *anthropic_group(const char *id, const char *type, json_t *models, json_t *limits)
{
    json_t *e = json_pack("{s:s, s:s, s:{s:s}, s:s, s:o, s:o}", "type", "rate_limit", "id", id,
                          "group", "type", type, "group_type", type, "models", models, "limits",
                          limits);
    /* A model group names itself (an opaque id and a display name), as the API's does. */
    if (e && !strcmp(type, "model_group")) {
        json_t *g = json_object_get(e, "group");
        json_object_set_new(g, "id", json_string("rlg_emu_models"));
        json_object_set_new(g, "display_name", json_string("sluice-emu models"));
    }
    return e;
}

static void anthropic_rate_limits(sl_emu_t *emu, struct evhttp_request *req)
{
    const sl_provider_config_t *c = sl_provider_config(emu->provider);
    json_t *models = json_array();
    for (size_t i = 0; sl__emu_model_id(SL_EMU_ANTHROPIC, i); i++)
        json_array_append_new(models, json_string(sl__emu_model_id(SL_EMU_ANTHROPIC, i)));
    json_t *limits = json_array();
    add_limit(limits, "requests_per_minute", c->rpm);
    add_limit(limits, "input_tokens_per_minute", c->input_tpm);
    add_limit(limits, "output_tokens_per_minute", c->output_tpm);
    json_t *data = json_array();
    json_array_append_new(data, anthropic_group("rl_emu_models", "model_group", models, limits));
    if (emu->opt.batch_rpm > 0) { /* the Message Batches endpoints' own RPM (batches.c) */
        json_t *b = json_array();
        add_limit(b, "requests_per_minute", emu->opt.batch_rpm);
        json_array_append_new(data, anthropic_group("rl_emu_batch", "batch", json_null(), b));
    }
    if (c->count_tokens_rpm > 0) {
        json_t *ct = json_array();
        add_limit(ct, "requests_per_minute", c->count_tokens_rpm);
        json_array_append_new(data,
                              anthropic_group("rl_emu_token_count", "token_count", json_null(), ct));
    }
    sl__emu_send_json(req, 200, json_pack("{s:o, s:n}", "data", data, "next_page"));
}

static void openai_rate_limits(sl_emu_t *emu, struct evhttp_request *req)
{
    const sl_provider_config_t *c = sl_provider_config(emu->provider);
    int64_t tpm = c->tokens_tpm > 0 ? c->tokens_tpm : c->input_tpm;
    json_t *data = json_array();
    for (size_t i = 0; sl__emu_model_id(SL_EMU_OPENAI, i); i++) {
        const char *model = sl__emu_model_id(SL_EMU_OPENAI, i);
        char id[96];
        snprintf(id, sizeof id, "rl-%s", model);
        json_t *e = json_pack("{s:s, s:s, s:s}", "object", "project.rate_limit", "id", id, "model",
                              model);
        if (c->rpm > 0)
            json_object_set_new(e, "max_requests_per_1_minute", json_integer((json_int_t)c->rpm));
        if (tpm > 0) json_object_set_new(e, "max_tokens_per_1_minute", json_integer((json_int_t)tpm));
        json_array_append_new(data, e);
    }
    size_t n = json_array_size(data);
    json_t *first = n ? json_incref(json_object_get(json_array_get(data, 0), "id")) : json_null();
    json_t *last = n ? json_incref(json_object_get(json_array_get(data, n - 1), "id")) : json_null();
    sl__emu_send_json(req, 200,
                      json_pack("{s:s, s:o, s:o, s:o, s:b}", "object", "list", "data", data,
                                "first_id", first, "last_id", last, "has_more", 0));
}

/* POST /emu/limits: {"input_tpm", "output_tpm", "rpm", "tokens_tpm"}, each optional. */
static void set_limits(sl_emu_t *emu, struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    char buf[4096];
    if (n >= sizeof buf) n = sizeof buf - 1;
    evbuffer_copyout(in, buf, n);
    buf[n] = '\0';
    json_t *body = json_loads(buf, 0, NULL);
    const sl_provider_config_t *c = sl_provider_config(emu->provider);
    int64_t v[4] = {c->input_tpm, c->output_tpm, c->rpm, c->tokens_tpm};
    static const char *const keys[4] = {"input_tpm", "output_tpm", "rpm", "tokens_tpm"};
    const char *bad = json_is_object(body) ? NULL : "the body";
    for (int i = 0; i < 4 && !bad; i++) {
        json_t *x = json_object_get(body, keys[i]);
        if (!x) continue;
        if (!json_is_integer(x) || json_integer_value(x) < 0) bad = keys[i];
        else v[i] = json_integer_value(x);
    }
    json_decref(body);
    if (bad) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: expected an object of non-negative integers "
                                  "(input_tpm, output_tpm, rpm, tokens_tpm)", bad);
        sl__emu_send_error(emu, req, SL_EMU_ANTHROPIC, 400, "invalid_request_error", msg, NULL,
                           NULL);
        return;
    }
    sl_provider_set_limits(emu->provider, v[0], v[1], v[2], v[3], sl__emu_now());
    sl__emu_send_json(req, 200,
                      json_pack("{s:I, s:I, s:I, s:I}", "input_tpm", (json_int_t)v[0],
                                "output_tpm", (json_int_t)v[1], "rpm", (json_int_t)v[2],
                                "tokens_tpm", (json_int_t)v[3]));
}

static bool method_is(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api,
                      enum evhttp_cmd_type want)
{
    if (evhttp_request_get_command(req) == want) return true;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                      want == EVHTTP_REQ_GET ? "GET" : "POST");
    sl__emu_send_error(emu, req, api, 405, "invalid_request_error", "Method not allowed", NULL,
                       NULL);
    return false;
}

bool sl__emu_admin_route(sl_emu_t *emu, struct evhttp_request *req, const char *path)
{
    static const char proj[] = "/v1/organization/projects/";
    if (!strcmp(path, "/v1/organizations/rate_limits")) {
        if (method_is(emu, req, SL_EMU_ANTHROPIC, EVHTTP_REQ_GET) &&
            admin_key_ok(emu, req, SL_EMU_ANTHROPIC))
            anthropic_rate_limits(emu, req);
        return true;
    }
    if (!strncmp(path, proj, sizeof proj - 1)) {
        const char *id = path + sizeof proj - 1;
        const char *slash = strchr(id, '/');
        if (!slash || slash == id || strcmp(slash, "/rate_limits") != 0) return false;
        if (method_is(emu, req, SL_EMU_OPENAI, EVHTTP_REQ_GET) &&
            admin_key_ok(emu, req, SL_EMU_OPENAI))
            openai_rate_limits(emu, req);
        return true;
    }
    if (!strcmp(path, "/emu/limits")) {
        if (method_is(emu, req, SL_EMU_ANTHROPIC, EVHTTP_REQ_POST)) set_limits(emu, req);
        return true;
    }
    return false;
}
