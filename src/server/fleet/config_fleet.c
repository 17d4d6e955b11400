/* config_fleet.c - the `fleet:` YAML section: the 429 window, anomaly detection, suspension.
 * The section's struct is the fleet's own, in the configuration's fleet slot; the core
 * keeps only the /metrics bound on per-agent series it sets (c->metrics_top_agents). */
#include "config.h"
#include "fleet.h"

#include <stddef.h>
#include <stdlib.h>

#include <yaml.h>

int sl__config_fleet_defaults(sl_config_t *c)
{
    sl_fleet_config_t *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    f->window_s = 300;
    f->anomaly_window_s = 60;
    f->anomaly_z = 3;
    f->anomaly_min_agents = 5;
    f->anomaly_min_count = 20;
    f->suspend_anomalous = false;
    f->metrics_top_agents = 20;
    c->feature[SL_FEATURE_ID_fleet] = f;
    c->metrics_top_agents = f->metrics_top_agents;
    return 0;
}

/* The keys, their bounds and where they go (read by config_table.c). */
#define FLEET(key, type, min, max) SL_CONFIG_ROW(sl_fleet_config_t, key, type, min, max)
static const sl_config_field_t fleet_fields[] = {
    FLEET(window_s, SL_FIELD_NUMBER, 12, 86400),
    FLEET(anomaly_window_s, SL_FIELD_NUMBER, 12, 86400),
    FLEET(anomaly_z, SL_FIELD_NUMBER, 0.5, 100),
    FLEET(anomaly_min_agents, SL_FIELD_INT, 3, 1000000),
    FLEET(anomaly_min_count, SL_FIELD_INT, 1, 1e9),
    FLEET(suspend_anomalous, SL_FIELD_BOOL, 0, 1),
    FLEET(metrics_top_agents, SL_FIELD_INT, 0, 10000),
};
#undef FLEET

const sl_config_table_t sl__fleet_table = SL_CONFIG_TABLE("fleet", sl_fleet_config_t, fleet_fields);

int sl__config_parse_fleet(yaml_document_t *doc, yaml_node_t *section, const char *path,
                           sl_config_t *c, char *err, size_t errlen)
{
    sl_fleet_config_t *f = SL_FLEET_CONF(c);
    if (sl__config_read_table(doc, section, &sl__fleet_table, path, f, err, errlen) < 0) return -1;
    c->metrics_top_agents = f->metrics_top_agents;
    return 0;
}

void sl__config_fleet_clear(sl_config_t *c)
{
    free(SL_FLEET_CONF(c));
    c->feature[SL_FEATURE_ID_fleet] = NULL;
}
