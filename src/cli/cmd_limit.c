/* sluice limit check: ask sluiced whether an action may run now under a named action limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_cli.h"

static void limit_usage(FILE *out)
{
    fprintf(out,
            "usage: sluice limit check NAME --agent A [--key K] [--hits N] [--action X] "
            "[--wait S]\n\n"
            "Checks action limit NAME (sluiced's `limits:`) and its parents for agent A: when\n"
            "allowed, every level takes its cost. While denied it waits up to --wait seconds\n"
            "(sluiced holds an on_limit: queue limit; for the others it retries after\n"
            "retry_after). Prints \"allowed remaining=N\" or \"denied by LIMIT (KEY) "
            "retry_after=S\".\n\n"
            "  --agent A         the agent acting (default $SLUICE_AGENT or sluice-cli)\n"
            "  --key K           the key of a per: key limit\n"
            "  --hits N          units to take (default 1; 0 peeks and changes nothing)\n"
            "  --action X        the action type (its cost from the limit's costs)\n"
            "  --wait S          seconds a denied check may wait for room (default 0)\n"
            "  --agent, --server, --token, --timeout, --json as elsewhere:\n" SL_CLI_CONN_HELP
            "\nexit codes: 0 allowed, 1 invalid input, 2 usage error, 4 sluiced unreachable,\n"
            "            5 denied (still denied when --wait ran out), 6 sluiced answered an\n"
            "            error (unknown limit, a refused field, a token that may not act as A)\n");
}

int sl_cli_limit(int argc, char **argv)
{
    sl_cli_conn_t conn;
    sl_cli_conn_init(&conn, "sluice limit check");
    sl_limit_check_req_t req;
    sl_limit_check_req_init(&req);
    if (argc < 2 || strcmp(argv[1], "check") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            limit_usage(stdout);
            return SL_EXIT_OK;
        }
        fprintf(stderr, "sluice limit: expected the subcommand \"check\"\n");
        limit_usage(stderr);
        return SL_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            limit_usage(stdout);
            return SL_EXIT_OK;
        }
        int r = sl_cli_conn_option(&conn, argc, argv, &i);
        if (r < 0) return SL_EXIT_USAGE;
        if (r > 0) continue;
        if (strncmp(a, "--", 2) != 0) {
            if (req.limit) {
                fprintf(stderr, "sluice limit check: more than one NAME (\"%s\")\n", a);
                return SL_EXIT_USAGE;
            }
            req.limit = a;
            continue;
        }
        if (!(v = sl_cli_value(conn.cmd, argc, argv, &i))) return SL_EXIT_USAGE;
        int bad = 0;
        if (!strcmp(a, "--key"))
            req.key = v;
        else if (!strcmp(a, "--action"))
            req.action = v;
        else if (!strcmp(a, "--hits"))
            bad = sl_cli_parse_count(conn.cmd, a, v, &req.hits);
        else if (!strcmp(a, "--wait"))
            bad = sl_cli_parse_seconds(conn.cmd, a, v, &req.wait_s);
        else {
            fprintf(stderr, "sluice limit check: unknown option \"%s\"\n", a);
            return SL_EXIT_USAGE;
        }
        if (bad) return SL_EXIT_USAGE;
    }
    if (!req.limit) {
        fprintf(stderr, "sluice limit check: NAME is required\n");
        limit_usage(stderr);
        return SL_EXIT_USAGE;
    }
    sl_client_t *c;
    int code = sl_cli_client(&conn, &c);
    if (code != SL_EXIT_OK) return code;
    sl_limit_answer_t ans;
    int rc = sl_limit_check(c, &req, &ans);
    if (rc < 0) {
        code = sl_cli_report(&conn, c, rc);
    } else {
        if (conn.json) {
            json_t *j = json_pack("{s:b,s:I,s:I,s:f,s:f,s:f}", "allowed", ans.allowed, "limit",
                                  (json_int_t)ans.limit, "remaining", (json_int_t)ans.remaining,
                                  "retry_after", ans.retry_after_s, "reset_after",
                                  ans.reset_after_s, "waited", ans.waited_s);
            if (j && !ans.allowed)
                json_object_set_new(
                    j, "denied_by",
                    json_pack("{s:s,s:s}", "limit", ans.denied_by, "key", ans.denied_key));
            sl_cli_print_json(j);
            json_decref(j);
        } else if (ans.allowed) {
            printf("allowed remaining=%lld\n", (long long)ans.remaining);
        } else {
            printf("denied by %s (%s) retry_after=%g\n", ans.denied_by, ans.denied_key,
                   ans.retry_after_s);
        }
        code = ans.allowed ? SL_EXIT_OK : SL_EXIT_NOT_GRANTED;
    }
    sl_client_free(c);
    return code;
}
