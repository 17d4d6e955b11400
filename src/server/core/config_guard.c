/* config_guard.c - the `events:` and `agents:` YAML sections: what one token may make sluiced hold.
 *
 * Both sections bound state a client creates by asking: event streams (each with a
 * buffer of events not yet read) and agent names (each with the engine's record and the
 * fleet watch's series). docs/server.md gives the defaults and their reasons.
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One numeric key: its section, name, bounds and where it goes. */
typedef struct guard_number {
    const char *section, *name;
    double min, max;
    bool integer;
    size_t offset;
} guard_number_t;

static const guard_number_t numbers[] = {
    {"events", "max_streams", 1, 100000, true, offsetof(sl_events_config_t, max_streams)},
    {"events", "max_streams_per_token", 1, 100000, true,
     offsetof(sl_events_config_t, max_streams_per_token)},
    {"events", "stream_buffer_bytes", 4096, 1073741824, true,
     offsetof(sl_events_config_t, stream_buffer_bytes)},
    {"agents", "forget_idle_s", 1, 31536000, false, offsetof(sl_agents_config_t, forget_idle_s)},
    {"agents", "max_per_token", 1, 100000000, true, offsetof(sl_agents_config_t, max_per_token)},
    {"agents", "max_total", 1, 100000000, true, offsetof(sl_agents_config_t, max_total)},
};

#define N_NUMBERS (sizeof(numbers) / sizeof(numbers[0]))

static int fail(char *err, size_t errlen, const char *path, const yaml_node_t *at,
                const char *section, const char *key, const char *what)
{
    snprintf(err, errlen, "%s:%lu: %s.%s: %s", path,
             at ? (unsigned long)at->start_mark.line + 1 : 0UL, section, key, what);
    return -1;
}

static int set_number(const guard_number_t *f, const char *s, void *out, const char *path,
                      const yaml_node_t *v, char *err, size_t errlen)
{
    char what[200];
    if (sl__config_number(s, f->min, f->max, f->integer, (char *)out + f->offset, what,
                          sizeof(what)) < 0)
        return fail(err, errlen, path, v, f->section, f->name, what);
    return 0;
}

/* Reads mapping `map` of section `section` into `out` (a copy is written only when every
 * key is good, so a bad file leaves `out` as it was). */
static int parse_section(yaml_document_t *doc, yaml_node_t *map, const char *section,
                         const char *path, void *out, size_t size, char *err, size_t errlen)
{
    if (!map || map->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%lu: %s: expected a mapping", path,
                 map ? (unsigned long)map->start_mark.line + 1 : 0UL, section);
        return -1;
    }
    char scratch[sizeof(sl_events_config_t) > sizeof(sl_agents_config_t)
                     ? sizeof(sl_events_config_t)
                     : sizeof(sl_agents_config_t)];
    memcpy(scratch, out, size);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return fail(err, errlen, path, map, section, "?", "keys must be plain names");
        const char *key = (const char *)k->data.scalar.value;
        if (v->type != YAML_SCALAR_NODE)
            return fail(err, errlen, path, v, section, key, "expected a single value");
        const guard_number_t *f = NULL;
        for (size_t i = 0; i < N_NUMBERS && !f; i++)
            if (!strcmp(numbers[i].section, section) && !strcmp(numbers[i].name, key))
                f = &numbers[i];
        if (!f) {
            char what[300];
            int at = snprintf(what, sizeof(what), "unknown key '%.64s' (known:", key);
            for (size_t i = 0; i < N_NUMBERS && at > 0 && (size_t)at < sizeof(what); i++)
                if (!strcmp(numbers[i].section, section))
                    at += snprintf(what + at, sizeof(what) - (size_t)at, " %s", numbers[i].name);
            if (at > 0 && (size_t)at < sizeof(what))
                snprintf(what + at, sizeof(what) - (size_t)at, ")");
            return fail(err, errlen, path, k, section, key, what);
        }
        if (set_number(f, (const char *)v->data.scalar.value, scratch, path, v, err, errlen) < 0)
            return -1;
    }
    memcpy(out, scratch, size);
    return 0;
}

int sl__config_parse_events(yaml_document_t *doc, yaml_node_t *section, const char *path,
                            sl_events_config_t *out, char *err, size_t errlen)
{
    return parse_section(doc, section, "events", path, out, sizeof(*out), err, errlen);
}

int sl__config_parse_agents(yaml_document_t *doc, yaml_node_t *section, const char *path,
                            sl_agents_config_t *out, char *err, size_t errlen)
{
    return parse_section(doc, section, "agents", path, out, sizeof(*out), err, errlen);
}
