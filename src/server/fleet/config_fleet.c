/* config_fleet.c - the `fleet:` YAML section: the 429 window, anomaly detection, suspension.
 * The section's struct is the fleet's own, in the configuration's fleet slot; the core
 * keeps only the /metrics bound on per-agent series it sets (c->metrics_top_agents). */
#include "config.h"
#include "fleet.h"

#include <stddef.h>
#include <stdlib.h>

#include <yaml.h>

static const sl_fleet_config_t fleet_defaults = {
    .window_s = 300,
    .anomaly_window_s = 60,
    .anomaly_z = 3,
    .anomaly_min_agents = 5,
    .anomaly_min_count = 20,
    .suspend_anomalous = false,
    .metrics_top_agents = 20,
};

static int fleet_config_defaults(sl_config_t *c)
{
    sl_fleet_config_t *f = malloc(sizeof(*f));
    if (!f) return -1;
    *f = fleet_defaults;
    c->feature[SL_FEATURE_ID_fleet] = f;
    c->metrics_top_agents = f->metrics_top_agents;
    return 0;
}

/* The keys, their bounds and where they go (read by config_table.c). */
#define F sl_fleet_config_t
static const sl_config_field_t fleet_fields[] = {
    SL_ROW_NUMBER(F, window_s, 12, 86400),
    SL_ROW_NUMBER(F, anomaly_window_s, 12, 86400),
    SL_ROW_NUMBER(F, anomaly_z, 0.5, 100),
    SL_ROW_INT(F, anomaly_min_agents, 3, 1000000),
    SL_ROW_INT(F, anomaly_min_count, 1, 1e9),
    SL_ROW_FLAG(F, suspend_anomalous),
    SL_ROW_INT(F, metrics_top_agents, 0, 10000),
};
#undef F

static const sl_config_table_t fleet_table =
    SL_CONFIG_TABLE("fleet", sl_fleet_config_t, fleet_fields);

static int fleet_config_parse(yaml_document_t *doc, yaml_node_t *section, const char *path,
                              sl_config_t *c, char *err, size_t errlen)
{
    sl_fleet_config_t *f = SL_FLEET_CONF(c);
    if (sl__config_read_table(doc, section, &fleet_table, path, f, err, errlen) < 0) return -1;
    c->metrics_top_agents = f->metrics_top_agents;
    return 0;
}

static void fleet_config_clear(sl_config_t *c)
{
    free(SL_FLEET_CONF(c));
    c->feature[SL_FEATURE_ID_fleet] = NULL;
}

const sl_config_section_t sl__fleet_config = {.key = "fleet", .defaults = fleet_config_defaults,
    .parse = fleet_config_parse, .clear = fleet_config_clear, .table = &fleet_table};
