/* sluice tasks: the task graph (role, state, dependencies, tasks unblocked). */
#include <stdio.h>
#include <string.h>

#include "client_cli.h"

static void tasks_usage(FILE *out)
{
    fprintf(out, "usage: sluice tasks [--json] [--server URL] [--token TOKEN]\n\n"
                 "One line per task in sluiced's task graph: role, state, how many waiting\n"
                 "tasks it unblocks, and what it depends on.\n"
                 "--json prints sluiced's GET /v1/tasks answer unchanged.\n\n" SL_CLI_CONN_HELP
                 "\n" SL_CLI_EXIT_HELP);
}

int sl_cli_tasks(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice tasks");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            tasks_usage(stdout);
            return SL_EXIT_OK;
        }
        int r = sl_cli_conn_option(&conn, argc, argv, &i);
        if (r < 0) return SL_EXIT_USAGE;
        if (r == 0) {
            fprintf(stderr, "sluice tasks: unknown argument \"%s\"\n", argv[i]);
            tasks_usage(stderr);
            return SL_EXIT_USAGE;
        }
    }
    json_t *body;
    int code = sl_cli_get_json(&conn, "/v1/tasks", &body);
    if (code != SL_EXIT_OK) return code;
    if (conn.json) {
        sl_cli_print_json(body);
    } else {
        printf("%-24s %-10s %-8s %8s  %s\n", "TASK", "ROLE", "STATE", "UNBLOCKS", "DEPENDS_ON");
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(body, "tasks"), i, t)
        {
            const char *id = json_string_value(json_object_get(t, "id"));
            const char *role = json_string_value(json_object_get(t, "role"));
            const char *state = json_string_value(json_object_get(t, "state"));
            json_t *unblocks = json_object_get(t, "unblocks");
            printf("%-24s %-10s %-8s %8lld  ", id ? id : "?", role ? role : "-",
                   state ? state : "-",
                   json_is_integer(unblocks) ? (long long)json_integer_value(unblocks) : 0LL);
            size_t k;
            json_t *d;
            json_array_foreach(json_object_get(t, "depends_on"), k, d)
                printf("%s%s", k ? "," : "", json_string_value(d) ? json_string_value(d) : "?");
            printf("%s\n", json_array_size(json_object_get(t, "depends_on")) ? "" : "-");
        }
    }
    json_decref(body);
    return SL_EXIT_OK;
}
