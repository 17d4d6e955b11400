/* sluice token: mint, list and revoke agent tokens through sluiced's /v1/admin/tokens. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_cli.h"

static void token_usage(FILE *out)
{
    fprintf(out, "usage: sluice token create (--agent A | --agent-prefix P) [--tier T] [BOUNDS]\n"
                 "       sluice token list\n"
                 "       sluice token revoke ID\n\n"
                 "create mints a token for agent A (or every agent named P...), prints its id and\n"
                 "the token: shown this once, sluiced keeps only its SHA-256. BOUNDS override the\n"
                 "tier's, field by field (docs/server.md \"Tokens at fleet scale\"):\n"
                 "  --roles R,R  --pools P,P  --priorities P,P  --max-unblocks N  --resync\n"
                 "  --max-share F  --max-rpm N  --max-concurrent N\n"
                 "  --budget-usd-per-hour X  --budget-usd-per-day X\n"
                 "list prints every token sluiced accepts (no secrets); revoke refuses a minted\n"
                 "token from now on. All three need the admin token.\n\n" SL_CLI_CONN_HELP
                 "\nexit codes: 0 ok, 2 usage error, 4 sluiced unreachable, 6 sluiced answered an\n"
                 "            error (a refused field, an unknown id, no admin token)\n");
}

/* "a,b,c" as a JSON array of names. */
static json_t *names(const char *csv)
{
    json_t *a = json_array();
    const char *p = csv;
    while (a && *p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n) json_array_append_new(a, json_stringn(p, n));
        p += n + (comma ? 1 : 0);
    }
    return a;
}

/* "--max-rpm" -> "max_rpm" (the field of sluiced's bounds table). */
static void field_of(const char *opt, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s", opt + 2);
    for (char *c = out; *c; c++)
        if (*c == '-') *c = '_';
}

/* The create options into the mint body; returns 0, or an exit code after the message. */
static int create_body(sl_cli_conn_t *conn, int argc, char **argv, json_t *body)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        char field[64];
        if (!strcmp(a, "--resync")) {
            json_object_set_new(body, "resync", json_true());
            continue;
        }
        bool is_bound = strncmp(a, "--", 2) == 0 && strcmp(a, "--json") && strcmp(a, "--server") &&
                        strcmp(a, "--token") && strcmp(a, "--timeout");
        if (!is_bound) {
            int r = sl_cli_conn_option(conn, argc, argv, &i);
            if (r < 0) return SL_EXIT_USAGE;
            if (r > 0) continue;
            fprintf(stderr, "sluice token create: unknown argument \"%s\"\n", a);
            return SL_EXIT_USAGE;
        }
        if (!(v = sl_cli_value(conn->cmd, argc, argv, &i))) return SL_EXIT_USAGE;
        field_of(a, field, sizeof field);
        if (!strcmp(field, "agent") || !strcmp(field, "agent_prefix") || !strcmp(field, "tier")) {
            json_object_set_new(body, field, json_string(v));
        } else if (!strcmp(field, "roles") || !strcmp(field, "pools") ||
                   !strcmp(field, "priorities")) {
            json_object_set_new(body, field, names(v));
        } else {
            /* sluiced checks the field and its range, and names both when refused */
            char *end;
            double x = strtod(v, &end);
            if (end == v || *end) {
                fprintf(stderr, "sluice token create: %s: expected a number, got \"%s\"\n", a, v);
                return SL_EXIT_USAGE;
            }
            json_object_set_new(body, field,
                                x == (double)(json_int_t)x ? json_integer((json_int_t)x)
                                                           : json_real(x));
        }
    }
    return 0;
}

static int create(sl_cli_conn_t *conn, int argc, char **argv)
{
    json_t *body = json_object(), *answer = NULL;
    int code = body ? create_body(conn, argc, argv, body) : SL_EXIT_FAILURE;
    char *text = code == 0 ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (code) return code;
    code = sl_cli_call_json(conn, "POST", "/v1/admin/tokens", text, &answer);
    free(text);
    if (code != SL_EXIT_OK) return code;
    if (conn->json) {
        sl_cli_print_json(answer);
    } else {
        printf("id     %s\ntoken  %s\n", json_string_value(json_object_get(answer, "id")),
               json_string_value(json_object_get(answer, "token")));
        fprintf(stderr, "sluice token create: the token is shown only now; sluiced keeps its "
                        "SHA-256\n");
    }
    json_decref(answer);
    return SL_EXIT_OK;
}

static const char *str_or(json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

static int list(sl_cli_conn_t *conn)
{
    json_t *answer;
    int code = sl_cli_get_all_pages(conn, "/v1/admin/tokens", "tokens", &answer);
    if (code != SL_EXIT_OK) return code;
    if (conn->json) {
        sl_cli_print_json(answer);
    } else {
        printf("%-24s %-7s %-24s %-12s %9s  %s\n", "ID", "SOURCE", "AGENT", "TIER", "MAX_RPM",
               "LAST_USED");
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(answer, "tokens"), i, t)
        {
            char agent[160];
            const char *prefix = str_or(t, "agent_prefix", NULL);
            snprintf(agent, sizeof agent, "%s%s", prefix ? prefix : str_or(t, "agent", "-"),
                     prefix ? "*" : "");
            json_t *last = json_object_get(t, "last_used");
            printf("%-24s %-7s %-24s %-12s %9lld  %s\n", str_or(t, "id", "-"),
                   str_or(t, "source", "-"), agent, str_or(t, "tier", "-"),
                   (long long)json_integer_value(
                       json_object_get(json_object_get(t, "bounds"), "max_rpm")),
                   json_is_number(last) ? "yes" : "never");
        }
    }
    json_decref(answer);
    return SL_EXIT_OK;
}

static int revoke(sl_cli_conn_t *conn, int argc, char **argv)
{
    const char *id = NULL;
    for (int i = 2; i < argc; i++) {
        int r = sl_cli_conn_option(conn, argc, argv, &i);
        if (r < 0) return SL_EXIT_USAGE;
        if (r > 0) continue;
        if (id || argv[i][0] == '-') {
            fprintf(stderr, "sluice token revoke: unexpected \"%s\"\n", argv[i]);
            return SL_EXIT_USAGE;
        }
        id = argv[i];
    }
    if (!id || strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:.-") !=
                   strlen(id)) {
        fprintf(stderr, "sluice token revoke: expected one token ID (from `sluice token list`)\n");
        return SL_EXIT_USAGE;
    }
    char path[256];
    snprintf(path, sizeof path, "/v1/admin/tokens/%.200s", id);
    json_t *answer;
    int code = sl_cli_call_json(conn, "DELETE", path, NULL, &answer);
    if (code != SL_EXIT_OK) return code;
    if (conn->json)
        sl_cli_print_json(answer);
    else
        printf("revoked %s\n", id);
    json_decref(answer);
    return SL_EXIT_OK;
}

int sl_cli_token(int argc, char **argv)
{
    sl_cli_conn_t conn;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        token_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SL_EXIT_USAGE : SL_EXIT_OK;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            token_usage(stdout);
            return SL_EXIT_OK;
        }
    if (!strcmp(argv[1], "create")) {
        sl_cli_conn_init(&conn, "sluice token create");
        return create(&conn, argc, argv);
    }
    if (!strcmp(argv[1], "list")) {
        sl_cli_conn_init(&conn, "sluice token list");
        for (int i = 2; i < argc; i++) {
            int r = sl_cli_conn_option(&conn, argc, argv, &i);
            if (r <= 0) {
                if (r == 0)
                    fprintf(stderr, "sluice token list: unknown argument \"%s\"\n", argv[i]);
                return SL_EXIT_USAGE;
            }
        }
        return list(&conn);
    }
    if (!strcmp(argv[1], "revoke")) {
        sl_cli_conn_init(&conn, "sluice token revoke");
        return revoke(&conn, argc, argv);
    }
    fprintf(stderr, "sluice token: expected create, list or revoke, got \"%s\"\n", argv[1]);
    token_usage(stderr);
    return SL_EXIT_USAGE;
}
