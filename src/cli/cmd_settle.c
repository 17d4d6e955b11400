/* sluice settle: report what a call used against its lease (and any 429). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_cli.h"

#define MAX_HEADERS 64

static void settle_usage(FILE *out)
{
    fprintf(
        out,
        "usage: sluice settle LEASE --input N --output N [options]\n\n"
        "Reports the provider's usage for LEASE. With --got-429 the 429 is reported\n"
        "to sluiced (it cuts the margin) and the fallback backoff delay (full jitter,\n"
        "base 1 s, cap 30 s, never below --retry-after) is printed as backoff_s.\n\n"
        "  --input N                 usage.input_tokens\n"
        "  --output N                usage.output_tokens\n"
        "  --cache-creation N        usage.cache_creation_input_tokens\n"
        "  --cache-read N            usage.cache_read_input_tokens\n"
        "  --got-429                 the call came back 429\n"
        "  --retry-after S           the provider's retry-after\n"
        "  --header NAME:VALUE       a provider rate-limit header (repeatable)\n"
        "  --failure-signature SIG   failing test + diff hash (repeat detection)\n" SL_CLI_CONN_HELP
        "\nPrints sluiced's answer with --json, else nothing.\n" SL_CLI_EXIT_HELP);
}

int sl_cli_settle(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice settle");
    sl_client_usage_t u;
    sl_client_usage_init(&u);
    sl_header_t headers[MAX_HEADERS];
    char *header_copies[MAX_HEADERS];
    size_t n_headers = 0;
    const char *lease_id = NULL;
    int have = 0, code = SL_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            settle_usage(stdout);
            code = SL_EXIT_OK;
            goto cleanup;
        }
        int r = sl_cli_conn_option(&conn, argc, argv, &i);
        if (r < 0) goto cleanup;
        if (r > 0) continue;
        if (strcmp(a, "--got-429") == 0) {
            u.got_429 = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (lease_id) {
                fprintf(stderr, "sluice settle: more than one LEASE (\"%s\")\n", a);
                goto cleanup;
            }
            lease_id = a;
            continue;
        }
        if (!(v = sl_cli_value(conn.cmd, argc, argv, &i))) goto cleanup;
        int bad = 0;
        if (strcmp(a, "--input") == 0) {
            bad = sl_cli_parse_count(conn.cmd, a, v, &u.input_tokens);
            have |= 1;
        } else if (strcmp(a, "--output") == 0) {
            bad = sl_cli_parse_count(conn.cmd, a, v, &u.output_tokens);
            have |= 2;
        } else if (strcmp(a, "--cache-creation") == 0) {
            bad = sl_cli_parse_count(conn.cmd, a, v, &u.cache_creation_input_tokens);
        } else if (strcmp(a, "--cache-read") == 0) {
            bad = sl_cli_parse_count(conn.cmd, a, v, &u.cache_read_input_tokens);
        } else if (strcmp(a, "--retry-after") == 0) {
            bad = sl_cli_parse_seconds(conn.cmd, a, v, &u.retry_after_s);
        } else if (strcmp(a, "--failure-signature") == 0) {
            u.failure_signature = v;
        } else if (strcmp(a, "--header") == 0) {
            const char *colon = strchr(v, ':');
            if (!colon || colon == v || n_headers == MAX_HEADERS) {
                fprintf(stderr,
                        "sluice settle: --header \"%s\": expected NAME:VALUE (at most %d)\n", v,
                        MAX_HEADERS);
                goto cleanup;
            }
            char *copy = strdup(v);
            if (!copy) {
                code = SL_EXIT_FAILURE;
                goto cleanup;
            }
            copy[colon - v] = '\0';
            const char *value = copy + (colon - v) + 1;
            while (*value == ' ')
                value++;
            header_copies[n_headers] = copy;
            headers[n_headers++] = (sl_header_t){copy, value};
        } else {
            fprintf(stderr, "sluice settle: unknown option \"%s\"\n", a);
            goto cleanup;
        }
        if (bad) goto cleanup;
    }
    if (!lease_id || have != 3) {
        fprintf(stderr, "sluice settle: LEASE, --input and --output are required\n");
        settle_usage(stderr);
        goto cleanup;
    }
    u.headers = headers;
    u.n_headers = n_headers;
    sl_client_t *c;
    code = sl_cli_client(&conn, &c);
    if (code != SL_EXIT_OK) goto cleanup;
    sl_lease_t lease;
    memset(&lease, 0, sizeof(lease));
    snprintf(lease.id, sizeof(lease.id), "%s", lease_id);
    sl_client_settle_result_t res;
    int rc = sl_settle(c, &lease, &u, &res);
    if (rc == 0) {
        if (conn.json) {
            json_t *j =
                json_pack("{s:s, s:s, s:{s:I, s:I}, s:f, s:f}", "status", "settled", "lease",
                          lease_id, "adjust", "input_tokens", (json_int_t)res.adjust_input_tokens,
                          "output_tokens", (json_int_t)res.adjust_output_tokens, "estimate_error",
                          res.estimate_error, "backoff_s", res.backoff_s);
            if (j && res.headers_ignored)
                json_object_set_new(j, "headers_ignored", json_integer(res.headers_ignored));
            sl_cli_print_json(j);
            json_decref(j);
        }
        code = SL_EXIT_OK;
    } else {
        code = sl_cli_report(&conn, c, rc);
    }
    sl_client_free(c);
cleanup:
    for (size_t k = 0; k < n_headers; k++)
        free(header_copies[k]);
    return code;
}
