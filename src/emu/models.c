/* models.c - GET /v1/models and GET /v1/models/{id} in both providers' shapes.
 *
 * SDKs and harnesses list models at start-up (client.models.list()). The emulator
 * serves every model name it is sent (all share one key's limits), so the list is a
 * fixed set of current names, and GET /v1/models/{id} answers for any id: a listed
 * one with its entry, another with an entry for that id. Which shape: Anthropic when
 * the request carries anthropic-version (every Anthropic SDK sends it), OpenAI
 * otherwise. Anthropic's list pages with limit (1..1000, default 20), after_id and
 * before_id, and reports first_id, last_id and has_more. */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#include <event2/keyvalq_struct.h>

static const struct {
    const char *id, *display_name, *created_at;
} anthropic_models[] = {
    {"claude-opus-4-5-20251101", "Claude Opus 4.5", "2025-11-01T00:00:00Z"},
    {"claude-haiku-4-5-20251001", "Claude Haiku 4.5", "2025-10-01T00:00:00Z"},
    {"claude-sonnet-4-5-20250929", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z"},
    {"claude-opus-4-1-20250805", "Claude Opus 4.1", "2025-08-05T00:00:00Z"},
    {"claude-sonnet-4-20250514", "Claude Sonnet 4", "2025-05-14T00:00:00Z"},
};

static const struct {
    const char *id;
    int64_t created;
} openai_models[] = {
    {"gpt-5", 1754425777},       {"gpt-5-mini", 1754425928},   {"gpt-5-codex", 1757527818},
    {"gpt-4.1", 1744316542},     {"gpt-4.1-mini", 1744318173}, {"gpt-4o", 1715367049},
    {"gpt-4o-mini", 1721172741}, {"o4-mini", 1744225351},
};

#define N_ANTHROPIC (sizeof anthropic_models / sizeof anthropic_models[0])
#define N_OPENAI    (sizeof openai_models / sizeof openai_models[0])

const char *sl__emu_model_id(sl_emu_api_t api, size_t i)
{
    if (api == SL_EMU_ANTHROPIC) return i < N_ANTHROPIC ? anthropic_models[i].id : NULL;
    return i < N_OPENAI ? openai_models[i].id : NULL;
}

static json_t *anthropic_entry(const char *id, const char *name, const char *created)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:n, s:s, s:n, s:n, s:n, s:n}", "type", "model", "id",
                     id, "display_name", name, "created_at", created, "deprecated_at", "lifecycle",
                     "active", "capabilities", "line", "max_input_tokens", "max_tokens");
}

static json_t *openai_entry(const char *id, int64_t created)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", "model", "created",
                     (json_int_t)created, "owned_by", "system");
}

static json_t *anthropic_list(sl_emu_t *emu, struct evhttp_request *req, int *status)
{
    struct evkeyvalq q;
    memset(&q, 0, sizeof q);
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    if (query) evhttp_parse_query_str(query, &q);
    const char *limit_s = evhttp_find_header(&q, "limit");
    const char *after = evhttp_find_header(&q, "after_id");
    const char *before = evhttp_find_header(&q, "before_id");
    long limit = 20;
    char *end = NULL;
    if (limit_s) limit = strtol(limit_s, &end, 10);
    if (limit_s && (!*limit_s || *end || limit < 1 || limit > 1000)) {
        char msg[160];
        snprintf(msg, sizeof msg, "limit: Input should be an integer in [1, 1000], got \"%.40s\"",
                 limit_s);
        evhttp_clear_headers(&q);
        *status = 400;
        sl__emu_send_error(emu, req, SL_EMU_ANTHROPIC, 400, "invalid_request_error", msg, NULL,
                           NULL);
        return NULL;
    }
    size_t from = 0, to = N_ANTHROPIC;
    for (size_t i = 0; i < N_ANTHROPIC; i++) {
        if (after && !strcmp(after, anthropic_models[i].id)) from = i + 1;
        if (before && !strcmp(before, anthropic_models[i].id)) to = i;
    }
    if (before && !after && to >= (size_t)limit) from = to - (size_t)limit;
    evhttp_clear_headers(&q);
    json_t *data = json_array();
    size_t last = from;
    for (size_t i = from; i < to && i < from + (size_t)limit; i++, last = i)
        json_array_append_new(data, anthropic_entry(anthropic_models[i].id,
                                                    anthropic_models[i].display_name,
                                                    anthropic_models[i].created_at));
    size_t n = json_array_size(data);
    json_t *first_id =
        n ? json_incref(json_object_get(json_array_get(data, 0), "id")) : json_null();
    json_t *last_id =
        n ? json_incref(json_object_get(json_array_get(data, n - 1), "id")) : json_null();
    bool more = before && !after ? from > 0 : last < to;
    return json_pack("{s:o, s:b, s:o, s:o}", "data", data, "has_more", more, "first_id", first_id,
                     "last_id", last_id);
}

void sl__emu_models(sl_emu_t *emu, struct evhttp_request *req, sl_emu_api_t api, const char *id)
{
    emu->n.models++;
    json_t *body = NULL;
    int status = 200;
    if (api == SL_EMU_ANTHROPIC && !id) {
        body = anthropic_list(emu, req, &status);
        if (!body && status != 200) return;
    } else if (api == SL_EMU_ANTHROPIC) {
        for (size_t i = 0; i < N_ANTHROPIC && !body; i++)
            if (!strcmp(id, anthropic_models[i].id))
                body = anthropic_entry(id, anthropic_models[i].display_name,
                                       anthropic_models[i].created_at);
        if (!body) body = anthropic_entry(id, id, "2025-01-01T00:00:00Z");
    } else if (!id) {
        json_t *data = json_array();
        for (size_t i = 0; i < N_OPENAI; i++)
            json_array_append_new(data,
                                  openai_entry(openai_models[i].id, openai_models[i].created));
        body = json_pack("{s:s, s:o}", "object", "list", "data", data);
    } else {
        int64_t created = 1735689600;
        for (size_t i = 0; i < N_OPENAI; i++)
            if (!strcmp(id, openai_models[i].id)) created = openai_models[i].created;
        body = openai_entry(id, created);
    }
    sl__emu_add_ratelimit_headers(emu, req, api, NULL, sl__emu_now());
    sl__emu_send_json(req, status, body);
}
