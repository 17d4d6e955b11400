/* config_fleet.c - the `fleet:` YAML section: the 429 window, anomaly detection, suspension. */
#include "config.h"
#include "fleet.h"

#include <stddef.h>

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

/* The keys, their bounds and where they go (read by config_table.c). */
#define FLEET(key, type, min, max) {#key, type, offsetof(sl_fleet_config_t, key), min, max, NULL, NULL}
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
                           sl_fleet_config_t *out, char *err, size_t errlen)
{
    return sl__config_read_table(doc, section, &sl__fleet_table, path, out, err, errlen);
}
