/* test_config_sections.c - the core's sections and the features' keys read through field
 * tables: a good file lands in the struct, and every bad value of every section fails in
 * the one shape `FILE:LINE: SECTION.KEY: 'VALUE' ...` (config_table.c). */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "fleet.h"      /* the fleet section's struct: SL_FLEET_CONF */
#include "limits_api.h" /* SL_LIMITS_CONF */
#include "proxy.h"      /* the proxy section's struct: SL_PROXY_CONF */
#include "usage.h"      /* SL_USAGE_PRICES */
#include "test_main.h"

/* Loads `yaml` from a temporary file into `c`; returns sl_config_load's answer, `err` its
 * message prefixed by nothing (the file's name is cut to "F"). */
static int load(const char *yaml, sl_config_t *c, char *err, size_t errlen)
{
    char path[] = "/tmp/sl-config-sections-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(yaml, f);
    fclose(f);
    assert_int_equal(sl_config_defaults(c), 0);
    char raw[1024] = "";
    int rc = sl_config_load(path, c, raw, sizeof raw);
    unlink(path);
    size_t n = strlen(path);
    snprintf(err, errlen, "%s", strncmp(raw, path, n) == 0 ? raw + n : raw); /* ":LINE: ..." */
    return rc;
}

/* `yaml` is refused with a message starting ":LINE: KEY: ..." that contains `want`. */
static void refused(const char *yaml, const char *want)
{
    sl_config_t c;
    char err[1024];
    if (load(yaml, &c, err, sizeof err) == 0) fail_msg("loaded:\n%s", yaml);
    if (!strstr(err, want)) fail_msg("'%s' is not in '%s'", want, err);
    assert_true(err[0] == ':' || err[0] == '\0');
}

static void test_good_values_of_every_converted_section_land_in_the_struct(void **state)
{
    (void)state;
    sl_config_t c;
    char err[1024];
    int rc = load("log_format: json\n"
                  "cold_start: full\n"
                  "event_log: ''\n"
                  "max_unblocks: 7\n"
                  "body_limit_bytes: 2048\n"
                  "server:\n  max_connections: 10\n  idle_timeout_s: 2.5\n"
                  "  allowed_hosts: [Example.COM]\n"
                  "engine:\n  weight_floor: 0.5\n"
                  "roles:\n  reviewer: 3\n"
                  "auth:\n  admin_token: abcdefgh12\n  max_minted_tokens: 5\n"
                  "  tokens:\n    - {token: tokentoken1, agent_prefix: ''}\n"
                  "caps:\n  agents:\n    a:\n      max_rpm: 30\n"
                  "  teams:\n    t:\n      weight: 2\n      members: [a, b]\n"
                  "proxy:\n  estimator: bytes\n  max_headers: 50\n"
                  "pools:\n  p:\n    rpm: 60\n    ramp: on\n    ramp_factor: 3\n",
                  &c, err, sizeof err);
    if (rc != 0) fail_msg("%s", err);
    assert_int_equal(c.log_format, 1);
    assert_int_equal(c.cold_start, SL_COLD_START_FULL);
    assert_null(c.event_log);
    assert_int_equal(c.max_unblocks, 7);
    assert_int_equal(c.body_limit_bytes, 2048);
    assert_int_equal(c.server.max_connections, 10);
    assert_true(c.server.idle_timeout_s == 2.5);
    assert_int_equal(c.server.n_allowed_hosts, 1);
    assert_string_equal(c.server.allowed_hosts[0], "example.com");
    assert_true(c.engine.weight_floor == 0.5);
    assert_true(sl_config_priority_factor(&c, "normal") == 1);
    assert_string_equal(c.admin_token, "abcdefgh12");
    assert_int_equal(c.token_cfg.max_minted, 5);
    assert_int_equal(c.n_tokens, 1);
    assert_string_equal(c.tokens[0].agent_prefix, ""); /* "": every agent, not "unset" */
    assert_int_equal(c.settings.n_caps, 2);
    assert_int_equal(c.settings.caps[0].caps.max_rpm, 30);
    assert_true(c.settings.caps[1].team && c.settings.caps[1].weight == 2);
    assert_int_equal(c.settings.n_members, 2);
    assert_true(SL_PROXY_CONF(&c)->estimate_bytes);
    assert_int_equal(SL_PROXY_CONF(&c)->max_headers, 50);
    const sl_pool_bounds_t *b = sl_config_pool_bounds(&c, "p");
    assert_non_null(b);
    assert_int_equal(b->ramp.mode, SL_RAMP_ON);
    assert_true(b->ramp.factor == 3);
    assert_int_equal(b->ramp.floor_tpm, 10000); /* the feature's default */
    sl_config_clear(&c);
}

static void test_bad_auth_values_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("auth:\n  admin_token: short\n", ":2: auth.admin_token: must be at least 8");
    refused("auth:\n  max_minted_tokens: 0\n",
            ":2: auth.max_minted_tokens: '0' must be an integer between 1 and");
    refused("auth:\n  tokens: {a: 1}\n", ":2: auth.tokens: expected a list");
    refused("auth:\n  tokens:\n    - token: short\n      agent: a\n",
            ":3: auth.tokens[].token: must be at least 8 characters");
    refused("auth:\n  tokens:\n    - token: abcdefgh12\n      agent: a\n      max_rpm: lots\n",
            ":5: auth.tokens[].max_rpm: 'lots' must be a whole number between 0 and");
    refused("auth:\n  tokens:\n    - token: abcdefgh12\n      agent: a\n      colour: red\n",
            ":5: auth.tokens[]: unknown key 'colour' (known: ");
    refused("auth:\n  tokens:\n    - token: abcdefgh12\n      agent_prefix: a\n      agent: b\n",
            ":3: auth.tokens[]: give exactly one of `agent` or `agent_prefix`");
    refused("auth:\n  tokenz: []\n", ":2: auth.tokenz: unknown key 'tokenz' (known: admin_token, "
                                      "tokens, tokens_file, minted_file, max_minted_tokens)");
}

static void test_bad_logging_values_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("\nlog_format: xml\n", ":2: log_format: 'xml' must be text or json");
    refused("event_log: [a, b]\n", ":1: event_log: expected a single value");
    refused("state_fsync_interval_s: 4000\n",
            ":1: state_fsync_interval_s: '4000' must be a number between 0 and 3600");
    refused("cold_start: warm\n", ":1: cold_start: 'warm' must be empty or full");
}

static void test_bad_server_values_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("server:\n  max_connections: 0\n",
            ":2: server.max_connections: '0' must be an integer between 1 and");
    refused("server:\n  idle_timeout_s: fast\n",
            ":2: server.idle_timeout_s: 'fast' must be a number between 0.1 and 86400");
    refused("server:\n  allowed_hosts: [a/b]\n", ":2: server.allowed_hosts: 'a/b' is not a host");
    refused("server:\n  max_conns: 5\n", ":2: server.max_conns: unknown key 'max_conns' (known: "
                                          "max_connections,");
}

static void test_bad_engine_values_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("engine:\n  weight_floor: -1\n",
            ":2: engine.weight_floor: '-1' must be a number between 0 and");
    refused("engine:\n  floor: 1\n", ":2: engine.floor: unknown key 'floor' (known: "
                                     "tombstone_ttl_s, idempotency_ttl_s, weight_floor)");
}

static void test_bad_caps_values_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("caps:\n  agents:\n    a:\n      max_rpm: lots\n",
            ":4: caps.agents.a.max_rpm: 'lots' must be an integer between 0 and");
    refused("caps:\n  agents:\n    a:\n      weight: 2\n",
            ":4: caps.agents.a.weight: unknown key 'weight' (known: max_share, max_rpm,");
    refused("caps:\n  teams:\n    t:\n      members: a\n",
            ":4: caps.teams.t.members: expected a list");
    refused("caps:\n  crews: {}\n", ":2: caps.crews: unknown key 'crews' (known: agents, teams)");
}

static void test_bad_roles_and_priorities_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("roles:\n  reviewer: 0\n", ":2: roles.reviewer: '0' must be above 0");
    refused("priorities:\n  urgent: x\n", ":2: priorities.urgent: 'x' must be a number between");
}

static void test_bad_backend_values_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("backend: postgres://db\n", ":1: backend: unknown backend 'postgres://db'");
    refused("backend_fail: maybe\n", ":1: backend_fail: 'maybe' must be closed or open");
    refused("colds_start: full\n", ":1: colds_start: unknown key 'colds_start' (known: listen,");
}

static void test_feature_keys_fail_in_the_same_shape(void **state)
{
    (void)state;
    refused("proxy:\n  max_headers: 3\n",
            ":2: proxy.max_headers: '3' must be an integer between 8 and 10000");
    refused("proxy:\n  estimator: words\n", ":2: proxy.estimator: 'words' must be tokenizer or "
                                            "bytes");
    refused("pools:\n  p:\n    ramp: sometimes\n",
            ":3: pools.p.ramp: 'sometimes' must be auto, on or off");
    refused("pools:\n  p:\n    ramp_factor: 1\n",
            ":3: pools.p.ramp_factor: '1' must be a number between 1.01 and 100");
    refused("pools:\n  p:\n    ramp_speed: 1\n",
            ":3: pools.p.ramp_speed: unknown key 'ramp_speed' (known: input_tpm, output_tpm,");
    refused("provider_limits:\n  refresh_s: 5\n",
            ":2: provider_limits.refresh_s: '5' must be a number between 60 and 86400");
    refused("provider_limits:\n  anthropic:\n    admin_key: x\n",
            ":3: provider_limits.anthropic.admin_key: admin keys are not written");
    refused("provider_limits:\n  anthropic:\n    url: ftp://x\n",
            ":3: provider_limits.anthropic.url: 'ftp://x' must start with http:// or https://");
    refused("provider_limits:\n  refresh: 60\n", ":2: provider_limits.refresh: unknown key "
                                                   "'refresh' (known: refresh_s, anthropic,");
}

/* A pool with an upstream and `keys:`; `entry` is the first key's extra lines. */
#define KEYS_POOL(entry)                                                                           \
    "pools:\n  claude:\n    provider: anthropic\n    upstream_url: http://127.0.0.1:9\n"         \
    "    keys:\n      - name: a\n        api_key_env: SL_TEST_CONFIG_KEY\n" entry

static void test_bad_pool_values_name_file_line_key_and_value(void **state)
{
    (void)state;
    refused("pools:\n  p:\n    rpm: 10\n    inptu_tpm: 5\n",
            ":4: pools.p.inptu_tpm: unknown key 'inptu_tpm' (known: input_tpm, output_tpm, rpm,");
    /* The pools' list is long and cut; a key two edits from a row's is named. */
    refused("pools:\n  p:\n    rpm: 10\n    inptu_tpm: 5\n", ", ...); did you mean 'input_tpm'?");
    refused("pools:\n  p:\n    max_batch_request: 5\n", "did you mean 'max_batch_requests'?");
    refused("auth:\n  tokenz: []\n", "; did you mean 'tokens'?");
    refused("pools:\n  p:\n    rpm: -3\n",
            ":3: pools.p.rpm: '-3' must be an integer between 0 and 9007199254740992");
    refused("pools:\n  p:\n    rpm: 1.5\n", ":3: pools.p.rpm: '1.5' must be an integer between");
    refused("pools:\n  p:\n    lease_ttl_s: soon\n",
            ":3: pools.p.lease_ttl_s: 'soon' must be a number of at least 0");
    refused("pools:\n  p:\n    max_retry_after_s: 100000\n",
            ":3: pools.p.max_retry_after_s: '100000' must be a number between 1 and 86400");
    refused("pools:\n  p:\n    max_settle_tokens: 0\n",
            ":3: pools.p.max_settle_tokens: '0' must be an integer between 1 and");
    refused("pools:\n  p:\n    estimate_error_window: 2000000\n",
            ":3: pools.p.estimate_error_window: '2000000' must be an integer between 0 and 1000000");
    refused("pools:\n  p:\n    backfill: maybe\n",
            ":3: pools.p.backfill: 'maybe' must be true or false");
    refused("pools:\n  p:\n    output_reserve: guess\n",
            ":3: pools.p.output_reserve: 'guess' must be max_tokens or learned");
    refused("pools:\n  p:\n    rpm: [1, 2]\n",
            ":3: pools.p.rpm: expected a single value, not a list or a mapping");
    refused("pools:\n  p:\n    models: gpt\n", ":3: pools.p.models: expected a list");
    refused("pools:\n  p:\n    provider: acme\n",
            ":3: pools.p.provider: unknown provider 'acme' (known: anthropic, openai)");
    refused("pools:\n  p:\n    upstream_url: ftp://x\n",
            ":3: pools.p.upstream_url: 'ftp://x' must start with http:// or https://");
    refused("pools:\n  p:\n    api_key: sk-123\n",
            ":3: pools.p.api_key: keys are not written in the configuration");
    refused("pools:\n  p: 5\n", ":2: pools.p: expected a mapping of keys to values");
}

static void test_bad_long_context_values_name_the_key_and_the_value(void **state)
{
    (void)state;
    refused("pools:\n  p:\n    long_context: {threshold_tokens: 10, input_tmp: 5}\n",
            ":3: pools.p.long_context: unknown key 'input_tmp' (known: threshold_tokens, "
            "input_tpm, output_tpm)");
    refused("pools:\n  p:\n    long_context:\n      threshold_tokens: -1\n",
            ":4: pools.p.long_context.threshold_tokens: '-1' must be an integer between 0 and");
    refused("pools:\n  p:\n    long_context: {input_tpm: x}\n",
            ":3: pools.p.long_context.input_tpm: 'x' must be an integer between 0 and");
    refused("pools:\n  p:\n    long_context: {input_tpm: 5}\n",
            ":3: pools.p.long_context.threshold_tokens: must be given and above 0");
    refused("pools:\n  p:\n    long_context: 5\n",
            ":3: pools.p.long_context: expected a mapping of keys to values");
}

static void test_bad_key_entries_name_the_entry_the_key_and_the_value(void **state)
{
    (void)state;
    setenv("SL_TEST_CONFIG_KEY", "sk-test-key", 1);
    refused(KEYS_POOL("        models: ['gpt-*']\n"),
            ":8: pools.claude.keys[0]: unknown key 'models' (known: name, input_tpm, output_tpm, "
            "rpm, tokens_tpm, concurrency, upstream_url, api_key_env, api_key_file, api_key, "
            "headers)");
    refused(KEYS_POOL("        rpm: -1\n"),
            ":8: pools.claude.keys[0].rpm: '-1' must be an integer between 0 and");
    refused(KEYS_POOL("        output_tpm: lots\n"),
            ":8: pools.claude.keys[0].output_tpm: 'lots' must be an integer between 0 and");
    refused(KEYS_POOL("        input_tpm: {a: 1}\n"),
            ":8: pools.claude.keys[0].input_tpm: expected a single value");
    refused(KEYS_POOL("        headers: {x-api-key: k}\n"),
            ":8: pools.claude.keys[0].headers: header 'x-api-key' is set by the proxy");
    refused(KEYS_POOL("      - name: 'a b'\n"),
            ":8: pools.claude.keys[1].name: 'a b' must be 1-64 of [A-Za-z0-9._-]");
    refused(KEYS_POOL("      - api_key_env: SL_TEST_CONFIG_KEY\n"),
            ":8: pools.claude.keys[1]: a key needs a name");
    refused(KEYS_POOL("      - name: a\n        api_key_env: SL_TEST_CONFIG_KEY\n"),
            "pools.claude.keys: key 'claude:a' is named twice");
    refused(KEYS_POOL("      - name: b\n        api_key_env: SL_TEST_CONFIG_NOT_SET\n"),
            ":8: pools.claude:b: the environment variable SL_TEST_CONFIG_NOT_SET (api_key_env) "
            "is not set");
}

static void test_a_pool_of_keys_loads_one_pool_per_key(void **state)
{
    (void)state;
    setenv("SL_TEST_CONFIG_KEY", "sk-test-key", 1);
    sl_config_t c;
    char err[1024];
    int rc = load(KEYS_POOL("        rpm: 7\n        headers: {OpenAI-Project: p1}\n"
                            "      - name: b\n        api_key_env: SL_TEST_CONFIG_KEY\n"
                            "    rpm: 9\n    models: ['claude-*']\n"
                            "  other:\n    long_context: {threshold_tokens: 100, input_tpm: 5}\n"),
                  &c, err, sizeof err);
    if (rc != 0) fail_msg("%s", err);
    assert_int_equal(c.settings.n_pools, 4); /* claude:a, claude:b, other, other:long_context */
    assert_string_equal(c.settings.pools[0].name, "claude:a");
    assert_int_equal(c.settings.pools[0].config.rpm, 7); /* its own */
    assert_int_equal(c.settings.pools[1].config.rpm, 9); /* the pool's */
    assert_true(c.settings.pools[0].config.key_group == c.settings.pools[1].config.key_group);
    assert_string_equal(c.upstreams[0].key_group, "claude");
    assert_string_equal(c.upstreams[0].api_key, "sk-test-key");
    assert_int_equal(c.upstreams[0].n_headers, 1);
    assert_string_equal(c.upstreams[0].headers[0], "OpenAI-Project: p1");
    assert_int_equal(c.upstreams[1].n_models, 1);
    assert_string_equal(c.upstreams[1].url, "http://127.0.0.1:9");
    assert_string_equal(c.settings.pools[3].name, "other:long_context");
    assert_int_equal(c.settings.pools[3].config.input_tpm, 5);
    assert_int_equal(sl_config_pool_upstream(&c, "other")->long_context_threshold_tokens, 100);
    assert_int_equal(c.pool_lines[0], 6);
    sl_config_clear(&c);
}

/* fleet:, limits: and prices: are their features' own: each lands in its feature's slot of
 * the configuration (the core's sl_config_t knows none of their shapes) and is freed with
 * it. */
static void test_feature_sections_land_in_their_feature_slot(void **state)
{
    (void)state;
    sl_config_t c;
    char err[1024];
    int rc = load("fleet:\n  window_s: 60\n  metrics_top_agents: 3\n"
                  "limits:\n  tool.call: {algorithm: token_bucket, rate: 5, burst: 5}\n"
                  "prices:\n  m-*: {input_per_mtok: 1, output_per_mtok: 2}\n",
                  &c, err, sizeof err);
    if (rc != 0) fail_msg("%s", err);
    assert_true(SL_FLEET_CONF(&c)->window_s == 60);
    assert_true(SL_FLEET_CONF(&c)->anomaly_window_s == 60); /* its default */
    assert_int_equal(c.metrics_top_agents, 3);              /* the core's copy, usage reads */
    assert_non_null(json_object_get(SL_LIMITS_CONF(&c), "tool.call"));
    assert_int_equal(json_array_size(SL_USAGE_PRICES(&c)), 1);
    sl_config_clear(&c);
    for (size_t i = 0; i < SL_FEATURE_COUNT; i++)
        assert_null(c.feature[i]);
    /* Defaults: the fleet's numbers, no limits, no prices. */
    assert_int_equal(load("", &c, err, sizeof err), 0);
    assert_int_equal(c.metrics_top_agents, 20);
    assert_true(SL_FLEET_CONF(&c)->window_s == 300);
    assert_null(SL_LIMITS_CONF(&c));
    assert_null(SL_USAGE_PRICES(&c));
    sl_config_clear(&c);
    refused("fleet:\n  window_s: 5\n", ":2: fleet.window_s: '5' must be a number between 12");
    refused("fleet:\n  windows: 5\n", ":2: fleet.windows: unknown key 'windows' (known: window_s,");
}

SL_TEST_MAIN(
    cmocka_unit_test(test_good_values_of_every_converted_section_land_in_the_struct),
    cmocka_unit_test(test_bad_auth_values_name_file_line_key_and_value),
    cmocka_unit_test(test_bad_logging_values_name_file_line_key_and_value),
    cmocka_unit_test(test_bad_server_values_name_file_line_key_and_value),
    cmocka_unit_test(test_bad_engine_values_name_file_line_key_and_value),
    cmocka_unit_test(test_bad_caps_values_name_file_line_key_and_value),
    cmocka_unit_test(test_bad_roles_and_priorities_name_file_line_key_and_value),
    cmocka_unit_test(test_bad_backend_values_name_file_line_key_and_value),
    cmocka_unit_test(test_feature_keys_fail_in_the_same_shape),
    cmocka_unit_test(test_bad_pool_values_name_file_line_key_and_value),
    cmocka_unit_test(test_bad_long_context_values_name_the_key_and_the_value),
    cmocka_unit_test(test_bad_key_entries_name_the_entry_the_key_and_the_value),
    cmocka_unit_test(test_a_pool_of_keys_loads_one_pool_per_key),
    cmocka_unit_test(test_feature_sections_land_in_their_feature_slot))
