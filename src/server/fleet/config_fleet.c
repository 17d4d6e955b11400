/* config_fleet.c - the `fleet:` YAML section: the 429 window, anomaly detection, suspension. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

void sl__config_fleet_defaults(sl_fleet_config_t *f)
{
    f->window_s = 300;
    f->anomaly_window_s = 60;
    f->anomaly_z = 3;
    f->anomaly_min_agents = 5;
    f->anomaly_min_count = 20;
    f->suspend_anomalous = false;
    f->metrics_top_agents = 20;
}

/* The numeric keys, their bounds and where they go. */
static const struct fleet_number {
    const char *name;
    double min, max;
    bool integer;
    size_t offset;
} numbers[] = {
    {"window_s", 12, 86400, false, offsetof(sl_fleet_config_t, window_s)},
    {"anomaly_window_s", 12, 86400, false, offsetof(sl_fleet_config_t, anomaly_window_s)},
    {"anomaly_z", 0.5, 100, false, offsetof(sl_fleet_config_t, anomaly_z)},
    {"anomaly_min_agents", 3, 1000000, true, offsetof(sl_fleet_config_t, anomaly_min_agents)},
    {"anomaly_min_count", 1, 1e9, true, offsetof(sl_fleet_config_t, anomaly_min_count)},
    {"metrics_top_agents", 0, 10000, true, offsetof(sl_fleet_config_t, metrics_top_agents)},
};

static int fail(char *err, size_t errlen, const char *path, const yaml_node_t *at, const char *key,
                const char *what)
{
    snprintf(err, errlen, "%s:%lu: fleet.%s: %s", path, (unsigned long)at->start_mark.line + 1, key,
             what);
    return -1;
}

int sl__config_number(const char *s, double min, double max, bool integer, void *field,
                      char *what, size_t whatlen)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(d) || d < min || d > max ||
        (integer && d != floor(d))) {
        snprintf(what, whatlen, "'%.64s' must be %s between %g and %g", s,
                 integer ? "an integer" : "a number", min, max);
        return -1;
    }
    if (integer)
        *(int64_t *)field = (int64_t)d;
    else
        *(double *)field = d;
    return 0;
}

static int set_number(const struct fleet_number *f, const char *s, sl_fleet_config_t *out,
                      const char *path, const yaml_node_t *v, char *err, size_t errlen)
{
    char what[200];
    if (sl__config_number(s, f->min, f->max, f->integer, (char *)out + f->offset, what,
                          sizeof(what)) < 0)
        return fail(err, errlen, path, v, f->name, what);
    return 0;
}

int sl__config_parse_fleet(yaml_document_t *doc, yaml_node_t *section, const char *path,
                           sl_fleet_config_t *out, char *err, size_t errlen)
{
    if (!section || section->type != YAML_MAPPING_NODE) {
        snprintf(err, errlen, "%s:%lu: fleet: expected a mapping", path,
                 section ? (unsigned long)section->start_mark.line + 1 : 0UL);
        return -1;
    }
    sl_fleet_config_t f = *out;
    for (yaml_node_pair_t *p = section->data.mapping.pairs.start;
         p < section->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return fail(err, errlen, path, section, "?", "keys must be plain names");
        const char *key = (const char *)k->data.scalar.value;
        if (v->type != YAML_SCALAR_NODE)
            return fail(err, errlen, path, v, key, "expected a single value");
        const char *s = (const char *)v->data.scalar.value;
        size_t i = 0;
        while (i < sizeof(numbers) / sizeof(numbers[0]) && strcmp(numbers[i].name, key) != 0)
            i++;
        if (i < sizeof(numbers) / sizeof(numbers[0])) {
            if (set_number(&numbers[i], s, &f, path, v, err, errlen) < 0) return -1;
        } else if (!strcmp(key, "suspend_anomalous")) {
            if (strcmp(s, "true") != 0 && strcmp(s, "false") != 0) {
                char what[120];
                snprintf(what, sizeof(what), "'%.64s' must be true or false", s);
                return fail(err, errlen, path, v, key, what);
            }
            f.suspend_anomalous = !strcmp(s, "true");
        } else {
            char what[320];
            snprintf(what, sizeof(what),
                     "unknown key '%.64s' (known: window_s, anomaly_window_s, anomaly_z, "
                     "anomaly_min_agents, anomaly_min_count, suspend_anomalous, "
                     "metrics_top_agents)",
                     key);
            return fail(err, errlen, path, k, key, what);
        }
    }
    *out = f;
    return 0;
}
