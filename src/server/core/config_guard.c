/* config_guard.c - the `events:` and `agents:` YAML sections: what one token may make sluiced hold.
 *
 * Both sections bound state a client creates by asking: event streams (each with a
 * buffer of events not yet read) and agent names (each with the engine's record and the
 * fleet watch's series). docs/server.md gives the defaults and their reasons.
 */
#include "config.h"

#include <stddef.h>


static const sl_events_config_t events_defaults = {
    .max_streams = 64,
    .max_streams_per_token = 4,
    .stream_buffer_bytes = 256 * 1024,
};
static const sl_agents_config_t agents_defaults = {
    .forget_idle_s = 3600,
    .max_per_token = 10000,
    .max_total = 100000,
};

void sl__config_guard_defaults(sl_events_config_t *ev, sl_agents_config_t *ag)
{
    *ev = events_defaults;
    *ag = agents_defaults;
}

/* The keys, their bounds and where they go (read by config_table.c). */
#define EVENTS(key, min, max) SL_ROW_INT(sl_events_config_t, key, min, max)
static const sl_config_field_t events_fields[] = {
    EVENTS(max_streams, 1, 100000),
    EVENTS(max_streams_per_token, 1, 100000),
    EVENTS(stream_buffer_bytes, 4096, 1073741824),
};
#undef EVENTS
#define AGENTS sl_agents_config_t
static const sl_config_field_t agents_fields[] = {
    SL_ROW_NUMBER(AGENTS, forget_idle_s, 1, 31536000),
    SL_ROW_INT(AGENTS, max_per_token, 1, 100000000),
    SL_ROW_INT(AGENTS, max_total, 1, 100000000),
};
#undef AGENTS

const sl_config_table_t sl__events_table =
    SL_CONFIG_TABLE("events", sl_events_config_t, events_fields);
const sl_config_table_t sl__agents_table =
    SL_CONFIG_TABLE("agents", sl_agents_config_t, agents_fields);
