/* stats.c - the emulator's own endpoints: GET /stats, GET /health, POST /emu/spend-cap.
 *
 * /stats reports what the provider billed and refused (its counters, the same the
 * simulator reads) plus what HTTP saw, for tests to assert on:
 *   {"requests": N, "admitted": N, "http_429": N, "http_429_rate": N,
 *    "http_429_spend_cap": N, "tokens": {"input": N, "cache_creation_input": N,
 *    "cache_read_input": N, "output": N}, "outside": {...}, "levels": {...},
 *    "http": {...}, "spend_capped": bool, "overloaded": N, "stream_errors": N,
 *    "count_tokens": {"requests": N, "http_429": N, "limit_rpm": N},
 *    "long_context": N (calls that drew from the long-context limits),
 *    "cache_creation_1h_input_tokens": N (the 1-hour part of tokens.cache_creation_input)} */
#include "emu.h"

#include <string.h>

void sl__emu_stats(sl_emu_t *emu, struct evhttp_request *req)
{
    /* Levels first: reading them plays outside traffic up to now, which the
     * counters then include. */
    sl_provider_levels_t lv;
    sl_provider_levels(emu->provider, sl__emu_now(), &lv);
    sl_provider_stats_t s;
    sl_provider_stats(emu->provider, &s);
    const sl_provider_config_t *cfg = sl_provider_config(emu->provider);
    const sl_emu_counters_t *n = &emu->n;
    json_t *body = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I,"
        " s:{s:I, s:I, s:I, s:I},"
        " s:{s:I, s:I, s:I, s:I},"
        " s:{s:f, s:f, s:f, s:f},"
        " s:{s:I, s:I, s:I, s:I},"
        " s:I,"
        " s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
        "requests", (json_int_t)s.requests, "admitted", (json_int_t)s.admitted, "http_429",
        (json_int_t)s.http_429, "http_429_rate", (json_int_t)s.http_429_rate, "http_429_spend_cap",
        (json_int_t)s.http_429_spend_cap, "invalid", (json_int_t)s.invalid, "tokens", "input",
        (json_int_t)s.input_tokens, "cache_creation_input",
        (json_int_t)s.cache_creation_input_tokens, "cache_read_input",
        (json_int_t)s.cache_read_input_tokens, "output", (json_int_t)s.output_tokens, "outside",
        "requests", (json_int_t)s.outside_requests, "refused", (json_int_t)s.outside_refused,
        "input_tokens", (json_int_t)s.outside_input_tokens, "output_tokens",
        (json_int_t)s.outside_output_tokens, "levels", "requests", lv.requests, "input_tokens",
        lv.input_tokens, "output_tokens", lv.output_tokens, "tokens", lv.tokens, "limits",
        "input_tpm", (json_int_t)cfg->input_tpm, "output_tpm", (json_int_t)cfg->output_tpm, "rpm",
        (json_int_t)cfg->rpm, "tokens_tpm", (json_int_t)cfg->tokens_tpm, "cache_entries",
        (json_int_t)s.cache_entries, "http", "requests", (json_int_t)n->http_requests, "messages",
        (json_int_t)n->messages, "messages_stream", (json_int_t)n->messages_stream, "count_tokens",
        (json_int_t)n->count_tokens, "chat_completions", (json_int_t)n->chat_completions,
        "chat_stream", (json_int_t)n->chat_stream, "status_400", (json_int_t)n->http_400,
        "status_401", (json_int_t)n->http_401, "status_404", (json_int_t)n->http_404, "status_429",
        (json_int_t)n->http_429, "client_gone", (json_int_t)n->client_gone, "active",
        (json_int_t)n->active);
    if (body) {
        json_object_set_new(body, "spend_capped", json_boolean(emu->spend_capped));
        /* Faults and token counting (keys added after the original set). */
        json_object_set_new(body, "overloaded", json_integer((json_int_t)s.overloaded));
        json_object_set_new(body, "stream_errors", json_integer((json_int_t)s.stream_errors));
        json_object_set_new(body, "http_429_acceleration",
                            json_integer((json_int_t)s.http_429_acceleration));
        json_object_set_new(body, "count_tokens",
                            json_pack("{s:I, s:I, s:I}", "requests", (json_int_t)s.count_tokens,
                                      "http_429", (json_int_t)s.count_tokens_429, "limit_rpm",
                                      (json_int_t)cfg->count_tokens_rpm));
        /* 1-hour cache writes and long-context calls (issue 28). */
        json_object_set_new(body, "cache_creation_1h_input_tokens",
                            json_integer((json_int_t)s.cache_creation_1h_input_tokens));
        json_object_set_new(body, "long_context", json_integer((json_int_t)s.long_context));
        json_t *http = json_object_get(body, "http");
        json_object_set_new(http, "status_503", json_integer((json_int_t)n->http_503));
        json_object_set_new(http, "status_529", json_integer((json_int_t)n->http_529));
        json_object_set_new(http, "responses", json_integer((json_int_t)n->responses));
        json_object_set_new(http, "responses_stream",
                            json_integer((json_int_t)n->responses_stream));
        json_object_set_new(http, "models", json_integer((json_int_t)n->models));
        /* Embeddings, moderations and batches (batches.c), billed apart from the calls. */
        json_object_set_new(body, "batches", sl__emu_batches_stats(emu));
    }
    sl__emu_send_json(req, 200, body);
}

void sl__emu_health(sl_emu_t *emu, struct evhttp_request *req)
{
    (void)emu;
    sl__emu_send_json(req, 200, json_pack("{s:s}", "status", "ok"));
}

void sl__emu_spend_cap(sl_emu_t *emu, struct evhttp_request *req, json_t *body)
{
    json_t *capped = json_object_get(body, "capped");
    if (!json_is_boolean(capped)) {
        sl__emu_send_error(emu, req, SL_EMU_ANTHROPIC, 400, "invalid_request_error",
                           "capped: expected true or false", NULL, NULL);
        return;
    }
    emu->spend_capped = json_is_true(capped);
    sl_provider_set_spend_capped(emu->provider, emu->spend_capped);
    sl__emu_send_json(req, 200, json_pack("{s:b}", "spend_capped", emu->spend_capped));
}
