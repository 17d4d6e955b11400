/* dashboard_feature.c - the live dashboard registers with the core (features.def): its page and
 * files (GET /, /dashboard/<file>), the session cookie as a way in to the read endpoints
 * the page uses, and the session forgotten at exit. */
#include "dashboard.h"

const sl_feature_t sl_feature_dashboard = {
    .name = "dashboard",
    .claim = sl__dashboard_route,
    .authenticate = sl__dashboard_authenticate,
    .free = sl__dashboard_free,
};
