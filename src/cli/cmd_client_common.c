/* Shared option parsing, client set-up and error reporting of the sluiced subcommands. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_cli.h"

void sl_cli_conn_init(sl_cli_conn_t *conn, const char *cmd)
{
    memset(conn, 0, sizeof(*conn));
    conn->cmd = cmd;
    conn->timeout_s = 5;
}

const char *sl_cli_value(const char *cmd, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int sl_cli_parse_count(const char *cmd, const char *opt, const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < 0) {
        fprintf(stderr, "%s: %s: expected a whole number >= 0, got \"%s\"\n", cmd, opt, text);
        return -1;
    }
    *out = v;
    return 0;
}

int sl_cli_parse_seconds(const char *cmd, const char *opt, const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v < 0) {
        fprintf(stderr, "%s: %s: expected seconds >= 0, got \"%s\"\n", cmd, opt, text);
        return -1;
    }
    *out = v;
    return 0;
}

int sl_cli_conn_option(sl_cli_conn_t *conn, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char **slot = NULL;
    if (strcmp(a, "--json") == 0) {
        conn->json = 1;
        return 1;
    }
    if (strcmp(a, "--server") == 0)
        slot = &conn->server;
    else if (strcmp(a, "--token") == 0)
        slot = &conn->token;
    else if (strcmp(a, "--agent") == 0)
        slot = &conn->agent;
    else if (strcmp(a, "--pool") == 0)
        slot = &conn->pool;
    else if (strcmp(a, "--timeout") != 0)
        return 0;
    const char *v = sl_cli_value(conn->cmd, argc, argv, i);
    if (!v) return -1;
    if (slot) {
        *slot = v;
        return 1;
    }
    if (sl_cli_parse_seconds(conn->cmd, "--timeout", v, &conn->timeout_s) < 0 ||
        conn->timeout_s == 0) {
        if (conn->timeout_s == 0) fprintf(stderr, "%s: --timeout must be > 0\n", conn->cmd);
        return -1;
    }
    return 1;
}

int sl_cli_client(const sl_cli_conn_t *conn, sl_client_t **out)
{
    sl_client_options_t o;
    sl_client_options_init(&o);
    o.url = conn->server;
    o.token = conn->token;
    o.agent = conn->agent ? conn->agent : getenv("SLUICE_AGENT");
    if (!o.agent || !*o.agent) o.agent = "sluice-cli";
    o.pool = conn->pool;
    o.role = conn->role;
    o.fail_closed = 1;
    o.request_timeout_s = conn->timeout_s;
    o.connect_timeout_s = conn->timeout_s < 2 ? conn->timeout_s : 2;
    char err[512];
    if (sl_client_new(&o, out, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", conn->cmd, err);
        return SL_EXIT_USAGE;
    }
    return SL_EXIT_OK;
}

void sl_cli_print_json(json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s) {
        printf("%s\n", s);
        free(s);
    }
}

int sl_cli_conn_args(sl_cli_conn_t *conn, int argc, char **argv, void (*usage)(FILE *out),
                     const char **operand)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return SL_EXIT_OK;
        }
        int r = sl_cli_conn_option(conn, argc, argv, &i);
        if (r < 0) return SL_EXIT_USAGE;
        if (r == 0 && operand && !*operand && argv[i][0] != '-') {
            *operand = argv[i];
        } else if (r == 0) {
            fprintf(stderr, "%s: unknown argument \"%s\"\n", conn->cmd, argv[i]);
            usage(stderr);
            return SL_EXIT_USAGE;
        }
    }
    return -1;
}

int sl_cli_show(const sl_cli_conn_t *conn, const char *path, const char *list_key,
                void (*text)(json_t *answer, void *ud), void *ud)
{
    json_t *body;
    int code = list_key ? sl_cli_get_all_pages(conn, path, list_key, &body)
                        : sl_cli_get_json(conn, path, &body);
    if (code != SL_EXIT_OK) return code;
    if (conn->json)
        sl_cli_print_json(body);
    else
        text(body, ud);
    json_decref(body);
    return SL_EXIT_OK;
}

double sl_cli_num(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* The "type" of a failure in --json output: sluiced's own name for it (docs/api.md, the one
 * table src/common/errors.def), else the result code's name (sl_strerror: unreachable,
 * timed_out, rejected, protocol_error, ...). */
static const char *error_type(int rc)
{
#define SL_ERROR(code, status, name, provider_status)                                              \
    if (rc == code) return name;
#include "../common/errors.def"
#undef SL_ERROR
    return sl_strerror(rc);
}

static int exit_code(int rc)
{
    switch (rc) {
    case SL_EUNREACHABLE:
        return SL_EXIT_UNREACHABLE;
    case SL_EMAXWAIT: /* fall through */
    case SL_EREJECTED:
        return SL_EXIT_NOT_GRANTED;
    case SL_EARG: /* fall through */
    case SL_EIO:  /* fall through */
    case SL_ECORRUPT:
        return SL_EXIT_FAILURE;
    default:
        return SL_EXIT_REFUSED;
    }
}

int sl_cli_report(const sl_cli_conn_t *conn, sl_client_t *c, int rc)
{
    const char *msg = c && *sl_client_errmsg(c) ? sl_client_errmsg(c) : sl_client_strerror(rc);
    fprintf(stderr, "%s: %s\n", conn->cmd, msg);
    if (conn->json) {
        json_t *e = json_pack("{s:{s:s, s:s}}", "error", "type", error_type(rc), "message", msg);
        sl_cli_print_json(e);
        json_decref(e);
    }
    return exit_code(rc);
}

int sl_cli_call_json(const sl_cli_conn_t *conn, const char *method, const char *path,
                     const char *json_body, json_t **body)
{
    *body = NULL;
    sl_client_t *c;
    int code = sl_cli_client(conn, &c);
    if (code != SL_EXIT_OK) return code;
    int status = 0;
    char *text = NULL;
    int rc = sl_client_call(c, method, path, json_body, conn->timeout_s, &status, &text);
    if (rc < 0) {
        code = sl_cli_report(conn, c, rc);
    } else {
        json_t *v = json_loads(text, 0, NULL);
        if (status >= 200 && status < 300 && v) {
            *body = v;
        } else {
            json_t *e = json_object_get(v, "error");
            const char *m = json_string_value(json_object_get(e, "message"));
            fprintf(stderr, "%s: %s %s: HTTP %d%s%s\n", conn->cmd, method, path, status,
                    m ? ": " : "", m ? m : "");
            if (conn->json) printf("%s\n", text);
            json_decref(v);
            code = SL_EXIT_REFUSED;
        }
    }
    free(text);
    sl_client_free(c);
    return code;
}

int sl_cli_get_json(const sl_cli_conn_t *conn, const char *path, json_t **body)
{
    return sl_cli_call_json(conn, "GET", path, NULL, body);
}

#define MAX_PAGES 10000 /* pages of 10,000: past agents.max_total's and the token stores' ceilings */

int sl_cli_get_all_pages(const sl_cli_conn_t *conn, const char *path, const char *list_key,
                         json_t **out)
{
    json_t *all = NULL;
    char page_path[512];
    snprintf(page_path, sizeof page_path, "%s?limit=10000", path);
    for (int page = 0; page < MAX_PAGES; page++) {
        json_t *body;
        int code = sl_cli_get_json(conn, page_path, &body);
        if (code != SL_EXIT_OK) {
            json_decref(all);
            return code;
        }
        if (!all) {
            all = body;
        } else {
            json_array_extend(json_object_get(all, list_key), json_object_get(body, list_key));
            json_object_set(all, "next_cursor", json_object_get(body, "next_cursor"));
            json_decref(body);
        }
        const char *next = json_string_value(json_object_get(all, "next_cursor"));
        if (!next) break;
        snprintf(page_path, sizeof page_path, "%s?limit=10000&cursor=%.200s", path, next);
    }
    *out = all;
    return SL_EXIT_OK;
}
