/* sluice agents: every agent's weight, estimate error, leases, tokens and state. */
#include <stdio.h>
#include <string.h>

#include "client_cli.h"

static void agents_usage(FILE *out)
{
    fprintf(out, "usage: sluice agents [--json] [--server URL] [--token TOKEN]\n\n"
                 "One line per agent sluiced knows: role, weight, repeated failures, mean\n"
                 "estimate error, leases in flight, tokens in and out, 429s, state.\n"
                 "--json prints sluiced's GET /v1/agents answer, every page in one.\n\n" SL_CLI_CONN_HELP
                 "\n" SL_CLI_EXIT_HELP);
}

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "-";
}

int sl_cli_agents(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice agents");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            agents_usage(stdout);
            return SL_EXIT_OK;
        }
        int r = sl_cli_conn_option(&conn, argc, argv, &i);
        if (r < 0) return SL_EXIT_USAGE;
        if (r == 0) {
            fprintf(stderr, "sluice agents: unknown argument \"%s\"\n", argv[i]);
            agents_usage(stderr);
            return SL_EXIT_USAGE;
        }
    }
    json_t *body;
    int code = sl_cli_get_all_pages(&conn, "/v1/agents", "agents", &body);
    if (code != SL_EXIT_OK) return code;
    if (conn.json) {
        sl_cli_print_json(body);
    } else {
        printf("%-24s %-9s %7s %7s %7s %6s %12s %12s %5s  %s\n", "AGENT", "ROLE", "WEIGHT",
               "REPEATS", "EST_ERR", "LEASES", "TOKENS_IN", "TOKENS_OUT", "429S", "STATE");
        size_t i;
        json_t *a;
        json_array_foreach(json_object_get(body, "agents"), i, a)
        {
            printf("%-24s %-9s %7.2f %7.0f %7.2f %6.0f %12.0f %12.0f %5.0f  %s%s", str(a, "name"),
                   str(a, "role"), num(a, "weight"), num(a, "repeats"), num(a, "estimate_error"),
                   num(a, "leases"), num(a, "tokens_in"), num(a, "tokens_out"), num(a, "got_429"),
                   str(a, "state"),
                   json_is_true(json_object_get(a, "estimate_error_alert")) ? " (estimate alert)"
                                                                            : "");
            json_t *anomaly = json_object_get(a, "anomaly");
            if (json_is_object(anomaly))
                printf(" (anomaly: %s z %.1f)", str(anomaly, "metric"), num(anomaly, "z"));
            if (json_is_true(json_object_get(a, "suspended"))) printf(" (suspended)");
            printf("\n");
        }
    }
    json_decref(body);
    return SL_EXIT_OK;
}
