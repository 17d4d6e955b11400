/* dashboard.h - the dashboard's embedded files: the table embed.cmake generates at build time. */
#ifndef SL_DASHBOARD_H
#define SL_DASHBOARD_H

#include <stddef.h>

/* One file of src/server/dashboard/, as built into sluiced. */
typedef struct sl_dashboard_asset {
    const char *name;         /* "index.html", "app.js", ... */
    const char *content_type; /* from the extension */
    const unsigned char *data;
    size_t len;
    const char *etag; /* quoted, from the content's SHA-256 */
} sl_dashboard_asset_t;

extern const sl_dashboard_asset_t sl__dashboard_assets[];
extern const size_t sl__dashboard_n_assets;

#endif /* SL_DASHBOARD_H */
