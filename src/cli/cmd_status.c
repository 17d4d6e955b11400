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
    printf("%-12s %6.2f %6.0f %7.1f %6.0f  %s\n", name ? name : "?", sl_cli_num(p, "margin"),
           sl_cli_num(queue, "depth"), sl_cli_num(queue, "eta"), sl_cli_num(p, "leases_in_flight"),
           alerts);
    const char *bname;
    json_t *b;
    json_object_foreach(buckets, bname, b)
    {
        double cap = sl_cli_num(b, "capacity");
        printf("  %-14s %14.0f / %-12.0f %5.1f%%  refill %.1f/s\n", bname, sl_cli_num(b, "level"),
               cap, cap > 0 ? 100.0 * sl_cli_num(b, "level") / cap : 0.0,
               sl_cli_num(b, "refill_per_s"));
    }
}

/* Every pool's line and buckets, or the one pool of --pool. */
static void status_text(json_t *body, void *ud)
{
    const sl_cli_conn_t *conn = ud;
    json_t *pools = conn->pool ? NULL : json_object_get(body, "pools");
    printf("%-12s %6s %6s %7s %6s  %s\n", "POOL", "MARGIN", "QUEUE", "HEAD_ETA", "LEASES",
           "ALERTS");
    if (conn->pool) {
        print_pool(body);
    } else {
        size_t i;
        json_t *p;
        json_array_foreach(pools, i, p) print_pool(p);
    }
}

int sl_cli_status(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice status");
    int done = sl_cli_conn_args(&conn, argc, argv, status_usage, NULL);
    if (done >= 0) return done;
    char path[300];
    if (conn.pool)
        snprintf(path, sizeof(path), "/v1/pools/%s", conn.pool);
    else
        snprintf(path, sizeof(path), "/v1/pools");
    return sl_cli_show(&conn, path, NULL, status_text, &conn);
}
