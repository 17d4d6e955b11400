/* config_guard.c - the `events:` and `agents:` YAML sections: what one token may make sluiced hold.
 *
 * Both sections bound state a client creates by asking: event streams (each with a
 * buffer of events not yet read) and agent names (each with the engine's record and the
 * fleet watch's series). docs/server.md gives the defaults and their reasons.
 */
#include "config.h"

#include <stddef.h>

#include <yaml.h>

void sl__config_guard_defaults(sl_events_config_t *ev, sl_agents_config_t *ag)
{
    ev->max_streams = 64;
    ev->max_streams_per_token = 4;
    ev->stream_buffer_bytes = 256 * 1024;
    ag->forget_idle_s = 3600;
    ag->max_per_token = 10000;
    ag->max_total = 100000;
}

/* The keys, their bounds and where they go (read by config_table.c). */
#define EVENTS(key, min, max) {#key, SL_FIELD_INT, offsetof(sl_events_config_t, key), min, max, NULL, NULL}
static const sl_config_field_t events_fields[] = {
    EVENTS(max_streams, 1, 100000),
    EVENTS(max_streams_per_token, 1, 100000),
    EVENTS(stream_buffer_bytes, 4096, 1073741824),
};
#undef EVENTS
#define AGENTS(key, type, min, max) {#key, type, offsetof(sl_agents_config_t, key), min, max, NULL, NULL}
static const sl_config_field_t agents_fields[] = {
    AGENTS(forget_idle_s, SL_FIELD_NUMBER, 1, 31536000),
    AGENTS(max_per_token, SL_FIELD_INT, 1, 100000000),
    AGENTS(max_total, SL_FIELD_INT, 1, 100000000),
};
#undef AGENTS

const sl_config_table_t sl__events_table =
    SL_CONFIG_TABLE("events", sl_events_config_t, events_fields);
const sl_config_table_t sl__agents_table =
    SL_CONFIG_TABLE("agents", sl_agents_config_t, agents_fields);

int sl__config_parse_events(yaml_document_t *doc, yaml_node_t *section, const char *path,
                            sl_events_config_t *out, char *err, size_t errlen)
{
    return sl__config_read_table(doc, section, &sl__events_table, path, out, err, errlen);
}

int sl__config_parse_agents(yaml_document_t *doc, yaml_node_t *section, const char *path,
                            sl_agents_config_t *out, char *err, size_t errlen)
{
    return sl__config_read_table(doc, section, &sl__agents_table, path, out, err, errlen);
}
