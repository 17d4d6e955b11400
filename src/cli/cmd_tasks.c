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

/* The task graph as a table. */
static void tasks_text(json_t *body, void *ud)
{
    (void)ud;
    printf("%-24s %-10s %-8s %8s  %s\n", "TASK", "ROLE", "STATE", "UNBLOCKS", "DEPENDS_ON");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(body, "tasks"), i, t)
    {
        const char *id = json_string_value(json_object_get(t, "id"));
        const char *role = json_string_value(json_object_get(t, "role"));
        const char *state = json_string_value(json_object_get(t, "state"));
        json_t *unblocks = json_object_get(t, "unblocks");
        printf("%-24s %-10s %-8s %8lld  ", id ? id : "?", role ? role : "-", state ? state : "-",
               json_is_integer(unblocks) ? (long long)json_integer_value(unblocks) : 0LL);
        size_t k;
        json_t *d;
        json_array_foreach(json_object_get(t, "depends_on"), k, d)
            printf("%s%s", k ? "," : "", json_string_value(d) ? json_string_value(d) : "?");
        printf("%s\n", json_array_size(json_object_get(t, "depends_on")) ? "" : "-");
    }
}

int sl_cli_tasks(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice tasks");
    int done = sl_cli_conn_args(&conn, argc, argv, tasks_usage, NULL);
    if (done >= 0) return done;
    return sl_cli_show(&conn, "/v1/tasks", NULL, tasks_text, NULL);
}
