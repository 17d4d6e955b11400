/* config_sections.c - the core's sections as field tables: the top level, `server:`,
 * `engine:`, `caps:` and `roles:`/`priorities:`.
 *
 * Each section is a table of rows {key, type, offset, min, max} read by config_table.c, so
 * every bad value fails as `FILE:LINE: SECTION.KEY: 'VALUE' must be ...` and a new key is
 * one row. Rows that are more than a bounded number, a flag, a string or a choice (a
 * nested section, a list, a value checked with the engine's own rules) name their reader
 * here. `auth:` is config_tokens.c's table, `events:`/`agents:` config_guard.c's, the
 * pools' config.c's; a top-level key no row names is a feature's section (features.def).
 */
#include "config.h"
#include "feature.h"
#include "log.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* ---- server: --------------------------------------------------------------------------- */

/* One `server.allowed_hosts` entry: a host name or address as a Host header carries it,
 * optionally with ":port"; kept in lower case. */
static int check_allowed_host(const sl_config_ctx_t *x, const yaml_node_t *v, char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 261) return sl__config_fail(x, v, "'%s' must be 1-261 characters", name);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= ' ' || ch >= 0x7f || strchr("/?#@,\"\\", ch))
            return sl__config_fail(
                x, v, "'%s' is not a host name (letters, digits, '.', '-', ':' and [IPv6])", name);
        if (ch >= 'A' && ch <= 'Z') name[i] = (char)(ch - 'A' + 'a');
    }
    return 0;
}

static int read_allowed_hosts(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    sl_listener_config_t *l = (sl_listener_config_t *)(void *)((char *)field -
                                                               offsetof(sl_listener_config_t,
                                                                        allowed_hosts));
    for (size_t i = 0; i < l->n_allowed_hosts; i++)
        free(l->allowed_hosts[i]);
    free(l->allowed_hosts);
    l->allowed_hosts = NULL;
    l->n_allowed_hosts = 0;
    if (sl__config_string_list(x, v, &l->allowed_hosts, &l->n_allowed_hosts) < 0) return -1;
    for (size_t i = 0; i < l->n_allowed_hosts; i++)
        if (check_allowed_host(x, v, l->allowed_hosts[i]) < 0) return -1;
    return 0;
}

#define SRV sl_listener_config_t
static const sl_config_field_t server_fields[] = {
    SL_ROW_SIZE(SRV, max_connections, 1, 1000000),
    SL_ROW_SIZE(SRV, max_pending_output_bytes, 4096, 1073741824),
    SL_ROW_NUMBER(SRV, write_timeout_s, 0.1, 86400),
    SL_ROW_NUMBER(SRV, idle_timeout_s, 0.1, 86400),
    SL_ROW_NUMBER(SRV, head_timeout_s, 0.1, 86400),
    SL_ROW_NUMBER(SRV, body_min_rate_bytes_per_s, 1, 1e9),
    {"allowed_hosts", SL_FIELD_CUSTOM, offsetof(SRV, allowed_hosts), 0, 0, NULL,
     read_allowed_hosts},
};
#undef SRV
const sl_config_table_t sl__server_table =
    SL_CONFIG_TABLE("server", sl_listener_config_t, server_fields);

/* ---- engine: (every value above 0 is checked once the file is read) ------------------- */

#define ENG(key) SL_ROW_NUMBER(sl_engine_config_t, key, 0, 1e12)
static const sl_config_field_t engine_fields[] = {
    ENG(tombstone_ttl_s),
    ENG(idempotency_ttl_s),
    ENG(weight_floor),
};
#undef ENG
const sl_config_table_t sl__engine_table =
    SL_CONFIG_TABLE("engine", sl_engine_config_t, engine_fields);

/* ---- caps: {agents: {NAME|"*": {...}}, teams: {NAME: {..., weight, members}}} ---------- */

/* A team's fair-queue weight, checked with the engine's rules (x->arg: the team). */
static int read_team_weight(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    const char *s = scalar(v);
    char what[240];
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    if (sl__config_number(s, 0, 1e12, false, field, what, sizeof(what)) < 0)
        return sl__config_fail(x, v, "%s", what);
    sl_engine_t *e = sl_engine_new(NULL);
    if (!e) return sl__config_fail(x, v, "out of memory");
    int rc = sl_engine_set_team_weight(e, x->arg, *(double *)field);
    if (rc != SL_OK) rc = sl__config_fail(x, v, "%s", sl_engine_errmsg(e));
    sl_engine_free(e);
    return rc;
}

/* A team's members: one team per agent, so the queue and `per: team` limits agree on it. */
static int read_team_members(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    const char *team = x->arg;
    sl_backend_settings_t *st = &x->c->settings;
    char **names = NULL;
    size_t n = 0;
    int rc = sl__config_string_list(x, v, &names, &n);
    for (size_t i = 0; i < n; i++) {
        const char *other = NULL;
        for (size_t j = 0; !other && j < st->n_members; j++)
            if (!strcmp(st->members[j].agent, names[i]) && strcmp(st->members[j].team, team) != 0)
                other = st->members[j].team;
        if (other && rc == 0)
            rc = sl__config_fail(x, v, "'%s' is already a member of team '%s' (an agent is in "
                                 "one team at most)", names[i], other);
        sl_team_member_t *m = realloc(st->members, (st->n_members + 1) * sizeof(*m));
        if (!m) {
            if (rc == 0) rc = sl__config_fail(x, v, "out of memory");
            free(names[i]);
            continue;
        }
        st->members = m;
        m[st->n_members].agent = names[i];
        m[st->n_members].team = strdup(team);
        st->n_members++;
    }
    free(names);
    return rc;
}

#define CAP(key, type, max)                                                                        \
    {#key, type, offsetof(sl_named_caps_t, caps.key), 0, max, NULL, NULL}
#define CAPS_ROWS                                                                                  \
    CAP(max_share, SL_FIELD_NUMBER, 1e12), CAP(max_rpm, SL_FIELD_INT, 9007199254740992.0),         \
        CAP(max_concurrent, SL_FIELD_INT, 9007199254740992.0),                                     \
        CAP(budget_usd_per_hour, SL_FIELD_NUMBER, 1e15),                                           \
        CAP(budget_usd_per_day, SL_FIELD_NUMBER, 1e15)
static const sl_config_field_t agent_caps_fields[] = {CAPS_ROWS};
static const sl_config_field_t team_caps_fields[] = {
    CAPS_ROWS,
    {"weight", SL_FIELD_CUSTOM, offsetof(sl_named_caps_t, weight), 0, 0, NULL, read_team_weight},
    {"members", SL_FIELD_CUSTOM, 0, 0, 0, NULL, read_team_members},
};
#undef CAPS_ROWS
#undef CAP
const sl_config_table_t sl__agent_caps_table =
    SL_CONFIG_TABLE("caps.agents.NAME", sl_named_caps_t, agent_caps_fields);
const sl_config_table_t sl__team_caps_table =
    SL_CONFIG_TABLE("caps.teams.NAME", sl_named_caps_t, team_caps_fields);

/* One holder's caps, appended to the settings and checked with the engine's rules. */
static int read_holder(const sl_config_ctx_t *x, yaml_node_t *map, const char *holder, bool team)
{
    char section[400];
    snprintf(section, sizeof(section), "caps.%s.%s", team ? "teams" : "agents", holder);
    sl_config_ctx_t hx = *x;
    hx.key = section;
    hx.arg = holder;
    sl_backend_settings_t *st = &x->c->settings;
    sl_named_caps_t *grown = realloc(st->caps, (st->n_caps + 1) * sizeof(*grown));
    if (!grown) return sl__config_fail(&hx, map, "out of memory");
    st->caps = grown;
    sl_named_caps_t *nc = &grown[st->n_caps];
    memset(nc, 0, sizeof(*nc));
    if (!(nc->holder = strdup(holder))) return sl__config_fail(&hx, map, "out of memory");
    nc->team = team;
    st->n_caps++;
    if (sl__config_read_fields(&hx, map, team ? &sl__team_caps_table : &sl__agent_caps_table,
                               section, nc) < 0)
        return -1;
    /* Checked here so the error names the line; the engine repeats the checks. */
    sl_engine_t *e = sl_engine_new(NULL);
    if (!e) return sl__config_fail(&hx, map, "out of memory");
    int rc = sl_engine_set_caps(e, holder, team, &nc->caps);
    if (rc != SL_OK) rc = sl__config_fail(&hx, map, "%s", sl_engine_errmsg(e));
    sl_engine_free(e);
    return rc;
}

/* caps.agents or caps.teams: a mapping of holder names to their caps. */
static int read_holders(sl_config_ctx_t *x, yaml_node_t *v, bool team)
{
    if (!v || v->type != YAML_MAPPING_NODE)
        return sl__config_fail(x, v, "expected a mapping of keys to values");
    for (yaml_node_pair_t *h = v->data.mapping.pairs.start; h < v->data.mapping.pairs.top; h++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, h->key);
        const char *holder = scalar(k);
        if (!holder || !*holder || strlen(holder) > 128)
            return sl__config_fail(x, k, "a name must be 1-128 characters");
        if (read_holder(x, yaml_document_get_node(x->doc, h->value), holder, team) < 0) return -1;
    }
    return 0;
}

static int read_agent_caps(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    return read_holders(x, v, false);
}

static int read_team_caps(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    return read_holders(x, v, true);
}

static const sl_config_field_t caps_fields[] = {
    {"agents", SL_FIELD_CUSTOM, 0, 0, 0, NULL, read_agent_caps},
    {"teams", SL_FIELD_CUSTOM, 0, 0, 0, NULL, read_team_caps},
};
static const sl_config_table_t caps_table = SL_CONFIG_TABLE("caps", sl_config_t, caps_fields);

/* ---- roles: {name: weight}, priorities: {name: factor} --------------------------------- */

/* Sets `name` to `value` in the list at `field` (an sl_named_factor_t * and its count). */
static int read_factors(sl_config_ctx_t *x, yaml_node_t *map, sl_named_factor_t **out,
                        size_t *n_out)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return sl__config_fail(x, map, "expected a mapping of keys to values");
    const char *section = x->key;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(x->doc, pr->value);
        const char *name = scalar(k), *s = scalar(v);
        char key[320];
        snprintf(key, sizeof(key), "%s.%.64s", section, name ? name : "?");
        sl_config_ctx_t fx = *x;
        fx.key = key;
        if (!name || !*name || strlen(name) > 64)
            return sl__config_fail(x, k, "a name must be 1-64 characters");
        if (!s) return sl__config_fail(&fx, v, "expected a single value, not a list or a mapping");
        double value;
        char what[240];
        if (sl__config_number(s, 0, 1e12, false, &value, what, sizeof(what)) < 0)
            return sl__config_fail(&fx, v, "%s", what);
        if (!(value > 0)) return sl__config_fail(&fx, v, "'%s' must be above 0", s);
        size_t i;
        for (i = 0; i < *n_out; i++)
            if (!strcmp((*out)[i].name, name)) break;
        if (i == *n_out) {
            sl_named_factor_t *grown = realloc(*out, (*n_out + 1) * sizeof(**out));
            if (!grown) return sl__config_fail(&fx, k, "out of memory");
            *out = grown;
            if (!(grown[i].name = strdup(name))) return sl__config_fail(&fx, k, "out of memory");
            (*n_out)++;
        }
        (*out)[i].value = value;
    }
    return 0;
}

static int read_roles(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    return read_factors(x, v, &x->c->settings.roles, &x->c->settings.n_roles);
}

static int read_priorities(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    return read_factors(x, v, &x->c->settings.priorities, &x->c->settings.n_priorities);
}

/* ---- the top level ---------------------------------------------------------------------- */

static int read_listen(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    const char *s = scalar(v);
    char err[256];
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    if (sl_config_set_listen(x->c, s, err, sizeof(err)) < 0)
        return sl__config_fail(x, v, "%s", err);
    return 0;
}

/* backend: memory | redis://[:pw@]host[:port][/db][?fail=..&timeout_ms=..&tick_ms=..] */
static int read_backend(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    sl_config_t *c = x->c;
    const char *s = scalar(v);
    if (!s) return sl__config_fail(x, v, "expected a single value, not a list or a mapping");
    char *copy = strdup(s);
    if (!copy) return sl__config_fail(x, v, "out of memory");
    free(c->backend);
    c->backend = copy;
    c->redis = false;
    if (!strcmp(s, "memory")) return 0;
    if (strncmp(s, "redis://", 8) != 0 && strncmp(s, "rediss://", 9) != 0)
        return sl__config_fail(x, v, "unknown backend '%s' (memory, or redis://HOST:PORT/DB)", s);
    char err[384];
    sl_redis_options_init(&c->redis_opt);
    if (sl_redis_options_parse_url(&c->redis_opt, c->backend, err, sizeof(err)) < 0)
        return sl__config_fail(x, v, "%s", err);
    c->redis = true;
    return 0;
}

/* A nested section read through its own table into the struct at `field`. */
#define SECTION_READER(fn, table)                                                                  \
    static int fn(sl_config_ctx_t *x, yaml_node_t *v, void *field)                                 \
    {                                                                                              \
        return sl__config_read_fields(x, v, &(table), NULL, field);                                \
    }
SECTION_READER(read_server, sl__server_table)
SECTION_READER(read_engine, sl__engine_table)
SECTION_READER(read_caps, caps_table)
SECTION_READER(read_auth, sl__auth_table)
SECTION_READER(read_events, sl__events_table)
SECTION_READER(read_agents, sl__agents_table)
#undef SECTION_READER

static int read_pools(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    (void)field;
    return sl__config_parse_pools(x, v);
}

static int read_tiers(sl_config_ctx_t *x, yaml_node_t *v, void *field)
{
    return sl__config_parse_tiers(x->doc, v, x->path, field, x->err, x->errlen);
}

/* A top-level key no row names: a feature's section (features.def: `limits`, `proxy`, ...). */
static int read_feature_section(sl_config_ctx_t *x, const char *key, yaml_node_t *k,
                                yaml_node_t *v, void *out)
{
    (void)k;
    return sl__features_config_parse(key, x->doc, v, x->path, out, x->err, x->errlen);
}

static const char *const backend_fail_names[] = {"closed", "open", NULL}; /* sl_redis_fail_t */
static const char *const cold_start_names[] = {"empty", "full", NULL};    /* sl_cold_start_t */

#define TOP(key, type, min, max) SL_ROW(sl_config_t, key, type, min, max)
#define CHOICE(key, names) {#key, SL_FIELD_CHOICE, offsetof(sl_config_t, key), 0, 0, names, NULL}
#define NESTED(key, member, fn) {#key, SL_FIELD_CUSTOM, offsetof(sl_config_t, member), 0, 0, NULL, fn}
static const sl_config_field_t root_fields[] = {
    NESTED(listen, listen_host, read_listen),
    NESTED(backend, backend, read_backend),
    CHOICE(backend_fail, backend_fail_names),
    TOP(body_limit_bytes, SL_FIELD_SIZE, 1024, 67108864),
    TOP(max_unblocks, SL_FIELD_INT, 0, 1000000),
    TOP(max_wait_s, SL_FIELD_NUMBER, 1, 3600),
    TOP(max_hold_s, SL_FIELD_NUMBER, 1, 86400),
    TOP(event_log, SL_FIELD_OPTIONAL, 0, 0),
    CHOICE(log_format, sl__log_format_names),
    TOP(access_log, SL_FIELD_OPTIONAL, 0, 0),
    TOP(state_file, SL_FIELD_OPTIONAL, 0, 0),
    TOP(state_fsync_interval_s, SL_FIELD_NUMBER, 0, 3600),
    CHOICE(cold_start, cold_start_names),
    NESTED(engine, engine, read_engine),
    NESTED(pools, settings, read_pools),
    NESTED(roles, settings, read_roles),
    NESTED(priorities, settings, read_priorities),
    {"auth", SL_FIELD_CUSTOM, 0, 0, 0, NULL, read_auth}, /* rows of sl_config_t */
    {"caps", SL_FIELD_CUSTOM, 0, 0, 0, NULL, read_caps},
    NESTED(tiers, token_cfg, read_tiers),
    NESTED(server, server, read_server),
    NESTED(events, events, read_events),
    NESTED(agents, agents, read_agents),
};
#undef TOP
#undef CHOICE
#undef NESTED
const sl_config_table_t sl__root_table = {"", sizeof(sl_config_t), root_fields,
                                          sizeof(root_fields) / sizeof(root_fields[0]),
                                          read_feature_section, false};

_Static_assert(sizeof(sl_cold_start_t) == sizeof(int), "cold_start is read as an int");
