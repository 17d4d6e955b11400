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

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "-";
}

/* One line per agent. */
static void agents_text(json_t *body, void *ud)
{
    (void)ud;
    printf("%-24s %-9s %7s %7s %7s %6s %12s %12s %5s  %s\n", "AGENT", "ROLE", "WEIGHT", "REPEATS",
           "EST_ERR", "LEASES", "TOKENS_IN", "TOKENS_OUT", "429S", "STATE");
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(body, "agents"), i, a)
    {
        printf("%-24s %-9s %7.2f %7.0f %7.2f %6.0f %12.0f %12.0f %5.0f  %s%s", str(a, "name"),
               str(a, "role"), sl_cli_num(a, "weight"), sl_cli_num(a, "repeats"),
               sl_cli_num(a, "estimate_error"), sl_cli_num(a, "leases"), sl_cli_num(a, "tokens_in"),
               sl_cli_num(a, "tokens_out"), sl_cli_num(a, "got_429"), str(a, "state"),
               json_is_true(json_object_get(a, "estimate_error_alert")) ? " (estimate alert)" : "");
        json_t *anomaly = json_object_get(a, "anomaly");
        if (json_is_object(anomaly))
            printf(" (anomaly: %s z %.1f)", str(anomaly, "metric"), sl_cli_num(anomaly, "z"));
        if (json_is_true(json_object_get(a, "suspended"))) printf(" (suspended)");
        printf("\n");
    }
}

int sl_cli_agents(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice agents");
    int done = sl_cli_conn_args(&conn, argc, argv, agents_usage, NULL);
    if (done >= 0) return done;
    return sl_cli_show(&conn, "/v1/agents", "agents", agents_text, NULL);
}
