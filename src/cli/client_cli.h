/* Shared helpers of the subcommands that talk to sluiced (status, agents, acquire, ...). */
#ifndef SL_CLIENT_CLI_H
#define SL_CLIENT_CLI_H

#include <stdio.h>

#include <jansson.h>

#include "cli.h"
#include "sluice/client.h"

/* Exit codes of the sluiced subcommands, after cli.h's 0 ok, 1 invalid input, 2 usage. */
enum {
    SL_EXIT_UNREACHABLE = 4, /* sluiced cannot be reached (refused, timeout) */
    SL_EXIT_NOT_GRANTED = 5, /* acquire: rejected, or still queued when --wait ran out */
    SL_EXIT_REFUSED = 6,     /* sluiced answered an error (4xx/5xx): the lease, pool... */
    SL_EXIT_CHANGED = 7      /* checkpoint verify: some recorded files changed */
};

/* The options every sluiced subcommand takes. */
typedef struct sl_cli_conn {
    const char *cmd;    /* "sluice status": prefixes messages */
    const char *server; /* --server, else $SLUICE_URL, else http://127.0.0.1:8750 */
    const char *token;  /* --token, else $SLUICE_TOKEN */
    const char *agent;  /* --agent, else $SLUICE_AGENT, else "sluice-cli" */
    const char *pool;   /* --pool */
    const char *role;   /* acquire --role */
    double timeout_s;   /* --timeout, default 5 */
    int json;           /* --json */
} sl_cli_conn_t;

/* Help text lines for the options above. */
#define SL_CLI_CONN_HELP                                                                           \
    "  --server URL      sluiced's address (default $SLUICE_URL or http://127.0.0.1:8750)\n"       \
    "  --token TOKEN     bearer token (default $SLUICE_TOKEN)\n"                                   \
    "  --timeout S       seconds to wait for an answer (default 5)\n"                              \
    "  --json            print JSON instead of text\n"

#define SL_CLI_EXIT_HELP                                                                           \
    "exit codes: 0 ok, 1 invalid input, 2 usage error, 4 sluiced unreachable,\n"                   \
    "            5 not granted (rejected or still queued), 6 sluiced answered an error\n"

void sl_cli_conn_init(sl_cli_conn_t *conn, const char *cmd);

/* If argv[*i] is a connection option, consumes it (and its value) and returns 1; 0 when
 * it is not one; -1 after printing a usage error (missing or bad value). */
int sl_cli_conn_option(sl_cli_conn_t *conn, int argc, char **argv, int *i);

/* The value of option argv[*i] (advancing *i), or NULL after printing a usage error. */
const char *sl_cli_value(const char *cmd, int argc, char **argv, int *i);

/* Parses a whole non-negative integer / a finite number >= 0; prints the error. */
int sl_cli_parse_count(const char *cmd, const char *opt, const char *text, int64_t *out);
int sl_cli_parse_seconds(const char *cmd, const char *opt, const char *text, double *out);

/* A fail-closed client for the CLI (a CLI process cannot hold a local share). Returns
 * an exit code; on 0, *out is set. */
int sl_cli_client(const sl_cli_conn_t *conn, sl_client_t **out);

/* GET path: on 0 (exit code) *body is the parsed 200 answer the caller decrefs.
 * Prints the error (text, or JSON on stdout with --json) and returns its exit code. */
int sl_cli_get_json(const sl_cli_conn_t *conn, const char *path, json_t **body);

/* As sl_cli_get_json for any METHOD, with `json_body` (NULL: none); any 2xx is success. */
int sl_cli_call_json(const sl_cli_conn_t *conn, const char *method, const char *path,
                     const char *json_body, json_t **body);

/* GET `path` page after page (limit=10000, then each next_cursor) into one answer in
 * *out: the first page's, with every page's `list_key` array appended. Exit code. */
int sl_cli_get_all_pages(const sl_cli_conn_t *conn, const char *path, const char *list_key,
                         json_t **out);

/* Prints a failure of a client call (rc < 0) and returns the exit code for it. */
int sl_cli_report(const sl_cli_conn_t *conn, sl_client_t *c, int rc);

/* Prints `v` as one line of compact JSON. */
void sl_cli_print_json(json_t *v);

/* Reads the arguments of a subcommand that takes connection options and, when `operand` is
 * not NULL, one operand (an argument not starting with '-', stored in *operand, which the
 * caller set to NULL): --help or -h prints usage(stdout); any other argument is an error
 * ("unknown argument", then usage(stderr)). Returns -1 when all were read, else the exit
 * code the subcommand returns at once: SL_EXIT_OK after --help, SL_EXIT_USAGE after an
 * error. */
int sl_cli_conn_args(sl_cli_conn_t *conn, int argc, char **argv, void (*usage)(FILE *out),
                     const char **operand);

/* GET `path` (with list_key not NULL: every page of that array, as
 * sl_cli_get_all_pages) and prints the answer: one line of JSON with --json, else
 * text(answer, ud). Returns the exit code. */
int sl_cli_show(const sl_cli_conn_t *conn, const char *path, const char *list_key,
                void (*text)(json_t *answer, void *ud), void *ud);

/* The number at `key` of object `o`; 0 when there is none or it is not a number. */
double sl_cli_num(const json_t *o, const char *key);

#endif
