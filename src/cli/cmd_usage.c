/* sluice usage: tokens and cost per team, agent or model, from sluiced's GET /v1/usage. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "client_cli.h"

static void usage_usage(FILE *out)
{
    fprintf(out, "usage: sluice usage [--by team|agent|model] [--since WHEN] [--json]\n"
                 "                    [--server URL] [--token TOKEN]\n\n"
                 "Calls, tokens (input, output, cache reads, cache writes) and cost in USD per\n"
                 "team (default), agent or model since WHEN, most expensive first, and the\n"
                 "total. WHEN is a duration back from now (30m, 24h), an RFC 3339 time\n"
                 "(2026-12-07T08:00:00Z) or Unix seconds; by default everything sluiced keeps\n"
                 "(the last 24 h, per minute for the last hour). Needs the admin token.\n"
                 "--json prints sluiced's answer.\n\n" SL_CLI_CONN_HELP "\n" SL_CLI_EXIT_HELP);
}

/* Appends `s` percent-encoded (all but unreserved characters) to `out`; false when it
 * does not fit. */
static bool append_encoded(char *out, size_t size, const char *s)
{
    size_t n = strlen(out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '.' || c == '_' || c == '~';
        int w = plain ? snprintf(out + n, size - n, "%c", c)
                      : snprintf(out + n, size - n, "%%%02X", c);
        if (w < 0 || (size_t)w >= size - n) return false;
        n += (size_t)w;
    }
    return true;
}

static void print_row(const char *name, const json_t *r)
{
    printf("%-28s %8.0f %14.0f %12.0f %12.0f %12.0f %12.4f\n", name, sl_cli_num(r, "calls"),
           sl_cli_num(r, "input_tokens"), sl_cli_num(r, "output_tokens"),
           sl_cli_num(r, "cache_read_input_tokens"), sl_cli_num(r, "cache_creation_input_tokens"),
           sl_cli_num(r, "cost_usd"));
}

/* One row per group of --by (`ud`), the total, and the window. */
static void usage_text(json_t *body, void *ud)
{
    const char *by = ud;
    char upper[8];
    snprintf(upper, sizeof upper, "%s", by);
    for (char *p = upper; *p; p++)
        *p = (char)(*p - 'a' + 'A');
    printf("%-28s %8s %14s %12s %12s %12s %12s\n", upper, "CALLS", "INPUT", "OUTPUT", "CACHE_READ",
           "CACHE_WRITE", "COST_USD");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(body, "rows"), i, r)
        print_row(json_string_value(json_object_get(r, by)), r);
    print_row("total", json_object_get(body, "total"));
    printf("since %.0f (buckets from %.0f, %.0f s each) to %.0f\n", sl_cli_num(body, "since"),
           sl_cli_num(body, "from"), sl_cli_num(body, "resolution_s"), sl_cli_num(body, "to"));
}

int sl_cli_usage(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice usage");
    const char *by = "team", *since = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage_usage(stdout);
            return SL_EXIT_OK;
        }
        if (strcmp(argv[i], "--by") == 0 || strcmp(argv[i], "--since") == 0) {
            const char **dst = argv[i][2] == 'b' ? &by : &since;
            if (!(*dst = sl_cli_value("sluice usage", argc, argv, &i))) return SL_EXIT_USAGE;
            continue;
        }
        int r = sl_cli_conn_option(&conn, argc, argv, &i);
        if (r < 0) return SL_EXIT_USAGE;
        if (r == 0) {
            fprintf(stderr, "sluice usage: unknown argument \"%s\"\n", argv[i]);
            usage_usage(stderr);
            return SL_EXIT_USAGE;
        }
    }
    if (strcmp(by, "team") != 0 && strcmp(by, "agent") != 0 && strcmp(by, "model") != 0) {
        fprintf(stderr, "sluice usage: --by: \"%s\" must be team, agent or model\n", by);
        return SL_EXIT_USAGE;
    }
    char path[512];
    snprintf(path, sizeof path, "/v1/usage?by=%s%s", by, since ? "&since=" : "");
    if (since && !append_encoded(path, sizeof path, since)) {
        fprintf(stderr, "sluice usage: --since: \"%.64s...\" is too long\n", since);
        return SL_EXIT_USAGE;
    }
    return sl_cli_show(&conn, path, NULL, usage_text, (void *)by);
}
