/* sluice cancel: give a lease back unused (a full refund). */
#include <stdio.h>
#include <string.h>

#include "client_cli.h"

static void cancel_usage(FILE *out)
{
    fprintf(
        out,
        "usage: sluice cancel LEASE [--json] [--server URL] [--token TOKEN]\n\n"
        "Gives LEASE back without making the call: sluiced refunds all of it.\n\n" SL_CLI_CONN_HELP
        "\n" SL_CLI_EXIT_HELP);
}

int sl_cli_cancel(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice cancel");
    const char *lease_id = NULL;
    int done = sl_cli_conn_args(&conn, argc, argv, cancel_usage, &lease_id);
    if (done >= 0) return done;
    if (!lease_id) {
        fprintf(stderr, "sluice cancel: LEASE is required\n");
        return SL_EXIT_USAGE;
    }
    sl_client_t *c;
    int code = sl_cli_client(&conn, &c);
    if (code != SL_EXIT_OK) return code;
    sl_lease_t lease;
    memset(&lease, 0, sizeof(lease));
    snprintf(lease.id, sizeof(lease.id), "%s", lease_id);
    int rc = sl_cancel(c, &lease);
    if (rc == 0) {
        if (conn.json) {
            json_t *j = json_pack("{s:s, s:s}", "status", "cancelled", "lease", lease.id);
            sl_cli_print_json(j);
            json_decref(j);
        }
    } else {
        code = sl_cli_report(&conn, c, rc);
    }
    sl_client_free(c);
    return code;
}
