/* sluice status: pools, buckets, margin, queue and alerts as a table (or --json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_cli.h"

static void status_usage(FILE *out)
{
    fprintf(out, "usage: sluice status [--pool NAME] [--json] [--server URL] [--token TOKEN]\n\n"
                 "Shows every pool (or one): margin, each bucket's level, capacity and refill,\n"
                 "the queue's depth and head ETA, leases in flight and active alerts.\n"
                 "--json prints sluiced's GET /v1/pools answer unchanged.\n\n" SL_CLI_CONN_HELP
                 "  --pool NAME       only this pool\n\n" SL_CLI_EXIT_HELP);
}

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

static void alerts_text(json_t *alerts, char *buf, size_t n)
{
    size_t used = 0;
    size_t i;
    json_t *a;
    buf[0] = '\0';
    json_array_foreach(alerts, i, a)
    {
        const char *name = json_string_value(a);
        if (!name) name = json_string_value(json_object_get(a, "name"));
        if (!name) name = "?";
        int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", name);
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
    if (!used) snprintf(buf, n, "-");
}

static void print_pool(json_t *p)
{
    const char *name = json_string_value(json_object_get(p, "name"));
    json_t *queue = json_object_get(p, "queue"), *buckets = json_object_get(p, "buckets");
    char alerts[256];
    alerts_text(json_object_get(p, "alerts"), alerts, sizeof(alerts));
    printf("%-12s %6.2f %6.0f %7.1f %6.0f  %s\n", name ? name : "?", num(p, "margin"),
           num(queue, "depth"), num(queue, "eta"), num(p, "leases_in_flight"), alerts);
    const char *bname;
    json_t *b;
    json_object_foreach(buckets, bname, b)
    {
        double cap = num(b, "capacity");
        printf("  %-14s %14.0f / %-12.0f %5.1f%%  refill %.1f/s\n", bname, num(b, "level"), cap,
               cap > 0 ? 100.0 * num(b, "level") / cap : 0.0, num(b, "refill_per_s"));
    }
}

int sl_cli_status(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice status");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            status_usage(stdout);
            return SL_EXIT_OK;
        }
        int r = sl_cli_conn_option(&conn, argc, argv, &i);
        if (r < 0) return SL_EXIT_USAGE;
        if (r == 0) {
            fprintf(stderr, "sluice status: unknown argument \"%s\"\n", argv[i]);
            status_usage(stderr);
            return SL_EXIT_USAGE;
        }
    }
    char path[300];
    if (conn.pool)
        snprintf(path, sizeof(path), "/v1/pools/%s", conn.pool);
    else
        snprintf(path, sizeof(path), "/v1/pools");
    json_t *body;
    int code = sl_cli_get_json(&conn, path, &body);
    if (code != SL_EXIT_OK) return code;
    if (conn.json) {
        sl_cli_print_json(body);
    } else {
        json_t *pools = conn.pool ? NULL : json_object_get(body, "pools");
        printf("%-12s %6s %6s %7s %6s  %s\n", "POOL", "MARGIN", "QUEUE", "HEAD_ETA", "LEASES",
               "ALERTS");
        if (conn.pool) {
            print_pool(body);
        } else {
            size_t i;
            json_t *p;
            json_array_foreach(pools, i, p) print_pool(p);
        }
    }
    json_decref(body);
    return SL_EXIT_OK;
}
